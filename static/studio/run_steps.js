/*
 * Run page, step by step (a finished run): each step's iteration time (ms) with the predicted iteration as a dashed
 * line, and the loss per step on a second axis, from the page's "steps-data" (runs.run_control.run_steps_chart).
 */
(function () {
  "use strict";

  document.addEventListener("DOMContentLoaded", function () {
    const source = document.getElementById("steps-data");
    if (!source) return;
    const data = JSON.parse(source.textContent);
    const labels = data.steps.map(function (step) { return "step " + step; });
    const datasets = [
      {label: "observed iteration (ms)", data: data.iteration_ms, yAxisID: "ms", borderColor: "#2563eb",
       backgroundColor: "#2563eb", source: "observed"},
      {label: "predicted iteration (ms)", data: data.steps.map(function () { return data.predicted_ms; }),
       yAxisID: "ms", borderColor: "#9ca3af", borderDash: [6, 4], pointRadius: 0, source: "predicted"},
    ];
    if (data.losses.some(function (loss) { return loss !== null; })) {
      datasets.push({label: "loss", data: data.losses, yAxisID: "loss", borderColor: "#d97706",
                     backgroundColor: "#d97706", source: "loss"});
    }
    const chart = new Chart(document.getElementById("step-chart"), {
      type: "line",
      data: {labels: labels, datasets: datasets},
      options: {
        animation: false,
        scales: {
          ms: {type: "linear", position: "left", beginAtZero: true, title: {display: true, text: "ms per step"}},
          loss: {type: "linear", position: "right", display: datasets.length > 2, grid: {drawOnChartArea: false},
                 title: {display: true, text: "loss"}},
        },
      },
    });
    window.adaptisSteps = chart;
  });
})();
