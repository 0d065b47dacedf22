/*
 * Units on pages, written once for the scripts as adaptis_web/studio/templatetags/units.py writes them for the
 * templates: memory in binary units named as such, one decimal ("48.0 GiB", "512.0 MiB", "900 B"), so a figure reads
 * the same on every page and in every re-drawn panel (a browser test holds the two to the same output).
 */
(function () {
  "use strict";

  const UNITS = ["KiB", "MiB", "GiB", "TiB", "PiB"];

  function bytes(value) {
    if (value === null || value === undefined) return "—";
    let amount = Number(value);
    if (Math.abs(amount) < 1024) return amount.toFixed(0) + " B";
    for (let index = 0; index < UNITS.length; index += 1) {
      amount /= 1024;
      if (Math.abs(amount) < 1024 || index === UNITS.length - 1) return amount.toFixed(1) + " " + UNITS[index];
    }
    return "—";
  }

  function signedBytes(value) {
    if (value === null || value === undefined) return "—";
    return (value >= 0 ? "+" : "−") + bytes(Math.abs(value));
  }

  window.AdaptisUnits = {bytes: bytes, signedBytes: signedBytes};
})();
