/*
 * Pipeline timelines as Gantt charts (Chart.js floating horizontal bars).
 *
 * One row per device for the predicted timeline; with observed timings, two rows per device
 * ("device N · predicted" above "device N · observed"). Predicted bars use the top time axis, observed bars
 * the bottom one: the simulator's milliseconds and a CPU run's milliseconds differ by orders of magnitude,
 * so each gets its own scale and the shapes (bubbles, ordering) can be compared side by side.
 * One dataset per action type and source, so colours follow F / B / I / W and the legend explains them.
 */
(function () {
  "use strict";

  const ACTION_TYPES = window.adaptisActionKinds.kinds;
  const TYPE_NAMES = window.adaptisActionKinds.names;
  const COLOURS = window.adaptisActionKinds.colours;
  const ROW_HEIGHT = 26;

  function predictedRow(device) { return "device " + device + " · predicted"; }
  function observedRow(device) { return "device " + device + " · observed"; }

  function rowLabels(numDevices, withObserved) {
    const labels = [];
    for (let device = 0; device < numDevices; device += 1) {
      if (withObserved) {
        labels.push(predictedRow(device), observedRow(device));
      } else {
        labels.push("device " + device);
      }
    }
    return labels;
  }

  function dataset(type, source, axis) {
    const observed = source === "observed";
    return {
      label: type + " " + TYPE_NAMES[type] + (source === "predicted-only" ? "" : " · " + source),
      actionType: type,
      source: observed ? "observed" : "predicted",
      data: [],
      xAxisID: axis,
      grouped: false,
      barPercentage: 0.82,
      categoryPercentage: 1.0,
      backgroundColor: "rgba(" + COLOURS[type] + ", " + (observed ? "0.95" : "0.55") + ")",
      borderColor: "rgba(" + COLOURS[type] + ", 1)",
      borderWidth: 1,
      borderSkipped: false,
    };
  }

  function bar(row, entry, type) {
    return {
      y: row, x: [entry.start_ms, entry.end_ms],
      info: {action: entry.action, stage: entry.stage, microbatch: entry.microbatch, type: type,
             step: entry.step, device: entry.device},
    };
  }

  function tooltipLines(context) {
    const info = context.raw.info;
    const start = context.raw.x[0], end = context.raw.x[1];
    const lines = [
      info.action + " — " + TYPE_NAMES[info.type] + " of stage " + info.stage + ", micro-batch " + info.microbatch,
      start.toFixed(3) + " → " + end.toFixed(3) + " ms (" + (end - start).toFixed(3) + " ms)",
    ];
    if (info.step !== undefined && info.step !== null) lines.push("step " + info.step);
    return lines;
  }

  function axis(position, title, visible) {
    return {
      type: "linear", position: position, min: 0, display: visible, grid: {color: "#eef1f4"},
      title: {display: true, text: title, color: "#5b6675"}, ticks: {color: "#5b6675"},
    };
  }

  /**
   * Draw a timeline into `canvas`. `data`: {num_devices, predicted: [timeline entries], observed?: [events]}.
   * With `options.observed` the chart has observed rows, and the returned object's addObserved(events)
   * appends bars as they arrive.
   */
  function create(canvas, data, options) {
    const withObserved = Boolean(options && options.observed);
    const labels = rowLabels(data.num_devices, withObserved);
    canvas.parentElement.style.height = (labels.length * ROW_HEIGHT + 110) + "px";
    const predictedSets = {}, observedSets = {}, datasets = [];
    ACTION_TYPES.forEach(function (type) {
      predictedSets[type] = dataset(type, withObserved ? "predicted" : "predicted-only", "x");
      datasets.push(predictedSets[type]);
    });
    if (withObserved) {
      ACTION_TYPES.forEach(function (type) {
        observedSets[type] = dataset(type, "observed", "x2");
        datasets.push(observedSets[type]);
      });
    }
    data.predicted.forEach(function (entry) {
      const row = withObserved ? predictedRow(entry.device) : "device " + entry.device;
      predictedSets[entry.type].data.push(bar(row, entry, entry.type));
    });

    const scales = {
      y: {type: "category", labels: labels, grid: {display: false}, ticks: {color: "#1c2430"}},
      x: axis(withObserved ? "top" : "bottom", "predicted time (ms)", true),
    };
    if (withObserved) scales.x2 = axis("bottom", "observed time (ms since the ranks' aligned start)", true);

    const chart = new window.Chart(canvas, {
      type: "bar",
      data: {labels: labels, datasets: datasets},
      options: {
        indexAxis: "y", animation: false, responsive: true, maintainAspectRatio: false,
        parsing: {xAxisKey: "x", yAxisKey: "y"},
        scales: scales,
        plugins: {
          legend: {
            position: "bottom",
            labels: {filter: function (item, chartData) { return chartData.datasets[item.datasetIndex].data.length > 0; }},
          },
          tooltip: {callbacks: {title: function (items) { return items.length ? items[0].raw.y : ""; },
                                label: tooltipLines}},
        },
      },
    });

    // Observed times count from the ranks' aligned start, which includes process start-up and the first
    // step's warm-up; the observed axis starts at the first shown action instead of at zero.
    const observedEvents = [];
    let shownStep = null;  // null: every step

    function shows(event) { return shownStep === null || event.step === shownStep; }

    function fitObservedAxis() {
      let first = Infinity;
      ACTION_TYPES.forEach(function (type) {
        observedSets[type].data.forEach(function (point) { first = Math.min(first, point.x[0]); });
      });
      chart.options.scales.x2.min = first < Infinity ? Math.floor(first) : 0;
    }

    function addObserved(events) {
      if (!withObserved || !events.length) return;
      events.forEach(function (event) {
        const set = observedSets[event.kind];  // compute actions only: F, B, I, W
        if (!set) return;
        observedEvents.push(event);
        if (shows(event)) set.data.push(bar(observedRow(event.device), event, event.kind));
      });
      fitObservedAxis();
      chart.update("none");
    }

    /** Show only one training step's observed bars (null: all of them), to compare with one predicted iteration. */
    function showStep(step) {
      shownStep = step;
      ACTION_TYPES.forEach(function (type) { observedSets[type].data = []; });
      observedEvents.forEach(function (event) {
        if (shows(event)) observedSets[event.kind].data.push(bar(observedRow(event.device), event, event.kind));
      });
      fitObservedAxis();
      chart.update("none");
    }

    function observedSteps() {
      return Array.from(new Set(observedEvents.map(function (event) { return event.step; }))).sort(function (a, b) {
        return a - b;
      });
    }

    addObserved(data.observed || []);
    return {chart: chart, addObserved: addObserved, showStep: showStep, observedSteps: observedSteps};
  }

  window.AdaptisTimeline = {create: create};
})();
