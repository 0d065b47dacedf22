/* Planning form: show the fields of the chosen mode (pipeline only, the whole hybrid-parallel job, or capacity: a
   block names the modes it serves, space-separated). Without JavaScript every set shows; the server reads only the
   chosen mode's. */
(function () {
  "use strict";

  function apply(select) {
    const form = select.form;
    form.querySelectorAll("[data-mode]").forEach(function (block) {
      block.hidden = block.dataset.mode.split(" ").indexOf(select.value) < 0;
    });
  }

  document.querySelectorAll("select[name=mode]").forEach(function (select) {
    select.addEventListener("change", function () { apply(select); });
    apply(select);
  });
})();
