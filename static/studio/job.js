/* Job page: poll the job's API resource for progress until it finishes (succeeded, failed or cancelled),
   then reload to show the plans. A cancel asked for (here or elsewhere) disables the Cancel button. */
(function () {
  "use strict";

  const POLL_MS = 500;
  const FINISHED = ["succeeded", "failed", "cancelled"];

  function start(root) {
    const url = root.dataset.apiUrl;
    const bar = root.querySelector(".progress .bar");
    const message = root.querySelector(".progress-message");
    const badge = document.querySelector("[data-job-status]");
    const cancel = root.querySelector("#cancel-job");

    function poll() {
      fetch(url, {headers: {"Accept": "application/json"}, credentials: "same-origin"})
        .then(function (response) {
          if (!response.ok) throw new Error("HTTP " + response.status);
          return response.json();
        })
        .then(function (job) {
          bar.style.width = Math.round(job.progress * 100) + "%";
          message.textContent = job.progress_message;
          if (badge) { badge.textContent = job.status; badge.className = "badge " + job.status; }
          if (cancel && job.cancel_requested) { cancel.disabled = true; cancel.textContent = "Cancelling…"; }
          if (FINISHED.indexOf(job.status) >= 0) {
            window.location.reload();
          } else {
            window.setTimeout(poll, POLL_MS);
          }
        })
        .catch(function (error) {
          message.textContent = "Lost contact with the server (" + error.message + "); retrying…";
          window.setTimeout(poll, POLL_MS * 4);
        });
    }
    poll();
  }

  document.addEventListener("DOMContentLoaded", function () {
    const root = document.querySelector("[data-job-progress]");
    if (root) start(root);
    const chartData = document.getElementById("timeline-data");
    const canvas = document.getElementById("timeline");
    if (chartData && canvas) {
      window.adaptisChart = window.AdaptisTimeline.create(canvas, JSON.parse(chartData.textContent));
    }
  });
})();
