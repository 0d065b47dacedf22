/* Planning form: show the fields of the chosen mode (pipeline only, or the whole hybrid-parallel job). Without
   JavaScript both sets show; the server reads only the chosen mode's. */
(function () {
  "use strict";

  function apply(select) {
    const form = select.form;
    form.querySelectorAll("[data-mode]").forEach(function (block) {
      block.hidden = block.dataset.mode !== select.value;
    });
  }

  document.querySelectorAll("select[name=mode]").forEach(function (select) {
    select.addEventListener("change", function () { apply(select); });
    apply(select);
  });
})();
