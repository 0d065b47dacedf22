/*
 * The action kinds (F, B, I, W) as the server's one vocabulary (planner.actions) renders them into the page
 * ({% action_kinds_data %}): window.adaptisActionKinds.kinds in order, .names (kind to description) and
 * .colours (kind to an "R, G, B" rgba() prefix). Load it before the scripts that draw actions.
 */
(function () {
  "use strict";

  const entries = JSON.parse(document.getElementById("action-kinds-data").textContent);
  const names = {};
  const colours = {};
  entries.forEach(function (entry) {
    names[entry.kind] = entry.description;
    colours[entry.kind] = entry.colour;
  });
  window.adaptisActionKinds = Object.freeze({
    kinds: Object.freeze(entries.map(function (entry) { return entry.kind; })),
    names: Object.freeze(names),
    colours: Object.freeze(colours),
  });
})();
