/*
 * The run chart: the predicted iteration and the observed steps as Gantt bars on ONE time axis.
 *
 * Rows come in pairs, "… · predicted" above "… · observed", one pair per device or one per stage (setRows).
 * Observed times count from the ranks' aligned start, which includes their start-up and every step before;
 * each observed bar is drawn relative to its own step's start (the earliest action start of that step over all
 * devices, the same start planner.observed times a step from), so a step's first action starts at 0 like the
 * predicted iteration's, and a bar twice as long as its prediction looks twice as long. One dataset per action
 * type and source, all on the one x scale, so colours follow F / B / I / W and the legend explains them.
 */
(function () {
  "use strict";

  const ACTION_TYPES = window.adaptisActionKinds.kinds;
  const TYPE_NAMES = window.adaptisActionKinds.names;
  const COLOURS = window.adaptisActionKinds.colours;
  const ROW_HEIGHT = 24;

  function dataset(type, source) {
    const observed = source === "observed";
    return {
      label: type + " " + TYPE_NAMES[type] + " · " + source, actionType: type, source: source, data: [],
      xAxisID: "x", grouped: false, barPercentage: 0.82, categoryPercentage: 1.0,
      backgroundColor: "rgba(" + COLOURS[type] + ", " + (observed ? "0.95" : "0.45") + ")",
      borderColor: "rgba(" + COLOURS[type] + ", 1)", borderWidth: 1, borderSkipped: false,
    };
  }

  function create(canvas, data) {
    const stageDevices = data.stage_devices;
    let rows = "device";

    function rowKey(entry) {
      return rows === "device" ? "device " + entry.device
                               : "stage " + entry.stage + " (device " + stageDevices[entry.stage] + ")";
    }

    function labels() {
      const keys = rows === "device"
        ? Array.from({length: data.num_devices}, function (_, device) { return "device " + device; })
        : stageDevices.map(function (device, stage) { return "stage " + stage + " (device " + device + ")"; });
      return keys.reduce(function (all, key) { return all.concat([key + " · predicted", key + " · observed"]); }, []);
    }

    const predictedSets = {}, observedSets = {};
    ACTION_TYPES.forEach(function (type) {
      predictedSets[type] = dataset(type, "predicted");
      observedSets[type] = dataset(type, "observed");
    });
    const datasets = ACTION_TYPES.map(function (type) { return predictedSets[type]; })
      .concat(ACTION_TYPES.map(function (type) { return observedSets[type]; }));

    function tooltipLines(context) {
      const info = context.raw.info;
      const start = context.raw.x[0], end = context.raw.x[1];
      const lines = [
        info.action + " — " + TYPE_NAMES[info.type] + " of stage " + info.stage + ", micro-batch " + info.microbatch
          + " on device " + info.device,
        start.toFixed(3) + " → " + end.toFixed(3) + " ms (" + (end - start).toFixed(3) + " ms)",
      ];
      if (info.step !== undefined) lines.push("step " + info.step + ", from the step's start");
      return lines;
    }

    const chart = new window.Chart(canvas, {
      type: "bar",
      data: {labels: labels(), datasets: datasets},
      options: {
        indexAxis: "y", animation: false, responsive: true, maintainAspectRatio: false,
        parsing: {xAxisKey: "x", yAxisKey: "y"},
        scales: {
          y: {type: "category", labels: labels(), grid: {display: false}, ticks: {color: "#1c2430"}},
          x: {type: "linear", position: "bottom", min: 0, grid: {color: "#eef1f4"}, ticks: {color: "#5b6675"},
              title: {display: true, color: "#5b6675",
                      text: "ms from the start of the iteration (predicted) or of its step (observed)"}},
        },
        plugins: {
          legend: {position: "bottom", labels: {filter: function (item, chartData) {
            return chartData.datasets[item.datasetIndex].data.length > 0;
          }}},
          tooltip: {callbacks: {title: function (items) { return items.length ? items[0].raw.y : ""; },
                                label: tooltipLines}},
        },
      },
    });

    const observedEvents = [];
    const stepStarts = {};  // step -> earliest action start seen in it (ms since the ranks' aligned start)
    let shownStep = null;   // null: every step, each drawn from its own start

    function predictedBar(entry) {
      return {y: rowKey(entry) + " · predicted", x: [entry.start_ms, entry.end_ms],
              info: {action: entry.action, stage: entry.stage, microbatch: entry.microbatch, type: entry.type,
                     device: entry.device}};
    }

    function observedBar(event) {
      const start = stepStarts[event.step];
      return {y: rowKey(event) + " · observed", x: [event.start_ms - start, event.end_ms - start],
              info: {action: event.action, stage: event.stage, microbatch: event.microbatch, type: event.kind,
                     device: event.device, step: event.step}};
    }

    function redraw() {
      const shown = labels();
      chart.data.labels = shown;
      chart.options.scales.y.labels = shown;
      canvas.parentElement.style.height = (shown.length * ROW_HEIGHT + 120) + "px";
      ACTION_TYPES.forEach(function (type) { predictedSets[type].data = []; observedSets[type].data = []; });
      data.predicted.forEach(function (entry) { predictedSets[entry.type].data.push(predictedBar(entry)); });
      observedEvents.forEach(function (event) {
        if (shownStep === null || event.step === shownStep) observedSets[event.kind].data.push(observedBar(event));
      });
      chart.update("none");
    }

    function addObserved(events) {
      events.forEach(function (event) {
        if (!observedSets[event.kind]) return;  // compute actions only: F, B, I, W
        observedEvents.push(event);
        const start = stepStarts[event.step];
        stepStarts[event.step] = start === undefined ? event.start_ms : Math.min(start, event.start_ms);
      });
      if (events.length) redraw();
    }

    function showStep(step) { shownStep = step; redraw(); }

    function setRows(mode) { rows = mode; redraw(); }

    function observedSteps() {
      return Object.keys(stepStarts).map(Number).sort(function (a, b) { return a - b; });
    }

    /** The steps every predicted action was observed in (a cancelled run's last step may be partial). */
    function completeSteps() {
      const counts = {};
      observedEvents.forEach(function (event) { counts[event.step] = (counts[event.step] || 0) + 1; });
      return observedSteps().filter(function (step) { return counts[step] >= data.predicted.length; });
    }

    redraw();
    addObserved(data.observed || []);
    return {chart: chart, addObserved: addObserved, showStep: showStep, setRows: setRows,
            observedSteps: observedSteps, completeSteps: completeSteps, stepStarts: stepStarts};
  }

  window.AdaptisRunTimeline = {create: create};
})();
