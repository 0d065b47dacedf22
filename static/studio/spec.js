/*
 * Spec page: compute and memory per layer as grouped bars, the analytic profile beside the one measured on the
 * runs' host, so a user sees where the model's work sits (a big-vocabulary head, MoE blocks, a Mamba mixer) and
 * how far the analytic guess is from what this host measures.
 */
(function () {
  "use strict";

  const SOURCES = {analytic: "31, 95, 191", measured: "214, 134, 0"};

  function bars(label, values, colour, stack, alpha) {
    return {label: label, data: values, stack: stack, borderWidth: 1, borderColor: "rgba(" + colour + ", 1)",
            backgroundColor: "rgba(" + colour + ", " + (alpha || 0.7) + ")"};
  }

  function chart(canvas, labels, datasets, unit) {
    return new window.Chart(canvas, {
      type: "bar", data: {labels: labels, datasets: datasets},
      options: {
        animation: false, responsive: true, maintainAspectRatio: false,
        scales: {x: {stacked: true, ticks: {autoSkip: true, maxRotation: 60, color: "#5b6675"}, grid: {display: false}},
                 y: {stacked: true, beginAtZero: true, title: {display: true, text: unit, color: "#5b6675"},
                     ticks: {color: "#5b6675"}, grid: {color: "#eef1f4"}}},
        plugins: {legend: {position: "bottom"},
                  tooltip: {callbacks: {label: function (item) {
                    return item.dataset.label + ": " + item.parsed.y.toPrecision(4) + " " + unit;
                  }}}},
      },
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    const select = document.getElementById("cost-cluster");
    if (select) select.addEventListener("change", function () { select.form.submit(); });
    const source = document.getElementById("layer-costs-data");
    if (!source) return;
    const data = JSON.parse(source.textContent);
    const profiles = ["analytic", "measured"].filter(function (name) { return data[name]; });
    const time = profiles.map(function (name) {
      return bars(data[name].label, data[name].time_ms, SOURCES[name], name);
    });
    // One stacked bar per profile and layer: activations held per micro-batch, then the parameters (in the
    // profile's dtype: the analytic one in the spec's, a CPU measurement in float32).
    const memory = [];
    profiles.forEach(function (name) {
      memory.push(bars("activations · " + data[name].label, data[name].activation_mib, SOURCES[name], name, 0.7));
      memory.push(bars("parameters · " + data[name].label, data[name].param_mib, SOURCES[name], name, 0.25));
    });
    window.adaptisLayerCharts = {
      time: chart(document.getElementById("layer-time"), data.layers, time, "ms"),
      memory: chart(document.getElementById("layer-memory"), data.layers, memory, "MiB"),
    };
  });
})();
