/* "Add to compare": plans and runs picked on their pages are kept in this browser (localStorage) until compared.
   Any element with data-compare-key="plan-12" (or run-3) toggles its entry; #open-compare links to the compare
   page with every picked entry (and the page's own). */
(function () {
  "use strict";

  const STORE = "adaptis.compare";

  function picked() {
    try { return JSON.parse(window.localStorage.getItem(STORE)) || []; } catch (error) { return []; }
  }

  function keep(keys) { window.localStorage.setItem(STORE, JSON.stringify(keys)); }

  function compareUrl(base, keys) {
    const query = keys.map(function (key) {
      const parts = key.split("-");
      return parts[0] + "=" + encodeURIComponent(parts[1]);
    });
    return base.split("?")[0] + "?" + query.join("&");
  }

  function refresh() {
    const keys = picked();
    document.querySelectorAll("[data-compare-key]").forEach(function (button) {
      const chosen = keys.indexOf(button.dataset.compareKey) >= 0;
      button.textContent = chosen ? "Picked for compare ✓" : "Add to compare";
      button.setAttribute("aria-pressed", chosen ? "true" : "false");
    });
    const link = document.getElementById("open-compare");
    if (link) {
      const own = Array.from(document.querySelectorAll("[data-compare-key]")).map(function (b) { return b.dataset.compareKey; });
      const all = keys.concat(own.filter(function (key) { return keys.indexOf(key) < 0; }));
      link.href = compareUrl(link.getAttribute("href"), all);
      link.textContent = "Compare " + all.length + "…";
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-compare-key]").forEach(function (button) {
      button.addEventListener("click", function () {
        const keys = picked();
        const index = keys.indexOf(button.dataset.compareKey);
        if (index >= 0) keys.splice(index, 1); else keys.push(button.dataset.compareKey);
        keep(keys);
        refresh();
      });
    });
    const clear = document.getElementById("clear-compare");
    if (clear) clear.addEventListener("click", function () { keep([]); refresh(); });
    refresh();
  });

  window.AdaptisCompareBasket = {picked: picked, keep: keep};
})();
