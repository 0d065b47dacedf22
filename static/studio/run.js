/*
 * Run page: draw the predicted iteration and the observed steps on one time axis (run_timeline.js), then page
 * through the run's events API (`after` = the last seq seen) and add observed bars (actions, and a hybrid run's
 * collectives) as the ranks report them.
 * Until the first action ends the page says where the run is (waiting for a worker, starting its ranks). A page
 * rendered while the run was going reloads once the run has finished and every event is in, so the server
 * renders the outcome; a page rendered after the run loads the remaining events and then shows the last step.
 */
(function () {
  "use strict";

  const POLL_MS = 400;
  const PHASE_TEXT = {
    queued: "Waiting for a worker on the runs queue…",
    starting: "Starting ranks: each one imports torch, builds its stages and joins the process group. " +
              "The first bars appear when the first action ends.",
    cancelling: "Cancelling: the worker is stopping the ranks.",
  };

  document.addEventListener("DOMContentLoaded", function () {
    const root = document.querySelector("[data-run]");
    const renderedFinished = root.dataset.finished === "true";
    const chartData = JSON.parse(document.getElementById("timeline-data").textContent);
    const timeline = window.AdaptisRunTimeline.create(document.getElementById("timeline"), chartData);
    window.adaptisChart = timeline;
    const stepSelect = document.getElementById("observed-step");
    const rowsSelect = document.getElementById("chart-rows");
    const counter = document.querySelector("[data-event-count]");
    const badge = document.querySelector("[data-run-status]");
    const phase = document.querySelector("[data-run-phase]");
    let lastSeq = chartData.last_seq;  // of the actions and collectives the page was rendered with
    let count = chartData.observed.length;

    function showPhase(status, finished) {
      if (!phase) return;
      let name = status;
      if (!finished && phase.dataset.phase === "cancelling") name = "cancelling";
      else if (!finished && status === "running") name = count ? "running" : "starting";
      phase.dataset.phase = name;
      phase.hidden = !PHASE_TEXT[name];
      if (PHASE_TEXT[name]) phase.querySelector("[data-phase-text]").textContent = PHASE_TEXT[name];
    }

    function refreshStepOptions() {
      const current = stepSelect.value;
      const options = ['<option value="all">every step, each from its start</option>'].concat(
        timeline.observedSteps().map(function (step) {
          return '<option value="' + step + '">step ' + step + '</option>';
        }));
      stepSelect.innerHTML = options.join("");
      stepSelect.value = current && stepSelect.querySelector('option[value="' + current + '"]') ? current : "all";
    }

    function showLastStep() {
      // One steady-state iteration next to the predicted one: the last step every action of was observed in,
      // even when it is the only complete one (a run cancelled in its second step shows its first, not both).
      const complete = timeline.completeSteps();
      const steps = complete.length ? complete : timeline.observedSteps();
      if (steps.length) {
        stepSelect.value = String(steps[steps.length - 1]);
        timeline.showStep(steps[steps.length - 1]);
      }
      root.dataset.loaded = "true";
    }

    stepSelect.addEventListener("change", function () {
      timeline.showStep(stepSelect.value === "all" ? null : Number(stepSelect.value));
    });
    rowsSelect.addEventListener("change", function () { timeline.setRows(rowsSelect.value); });
    refreshStepOptions();

    function poll() {
      fetch(root.dataset.eventsUrl + "?after=" + lastSeq, {headers: {"Accept": "application/json"},
                                                            credentials: "same-origin"})
        .then(function (response) {
          if (!response.ok) throw new Error("HTTP " + response.status);
          return response.json();
        })
        .then(function (page) {
          timeline.addCollectives(page.collectives || []);
          timeline.addObserved(page.events);
          if (page.events.length) refreshStepOptions();
          lastSeq = page.last_seq;
          count += page.events.length;
          counter.textContent = count;
          badge.textContent = page.status;
          badge.className = "badge " + page.status;
          showPhase(page.status, page.finished);
          if (page.finished && page.events.length === 0) {
            if (renderedFinished) showLastStep(); else window.location.reload();
          } else {
            window.setTimeout(poll, page.events.length ? POLL_MS / 4 : POLL_MS);
          }
        })
        .catch(function () { window.setTimeout(poll, POLL_MS * 4); });
    }
    poll();
  });
})();
