/*
 * The run chart: the predicted iteration and the observed steps as Gantt bars on ONE time axis.
 *
 * Rows come in pairs, "… · predicted" above "… · observed", one pair per device or one per stage (setRows).
 * Observed times count from the ranks' aligned start, which includes their start-up and every step before;
 * each observed bar is drawn relative to its own step's start (the earliest action start of that step over all
 * devices, the same start planner.observed times a step from), so a step's first action starts at 0 like the
 * predicted iteration's, and a bar twice as long as its prediction looks twice as long. One dataset per action
 * type and source, all on the one x scale, so colours follow F / B / I / W and the legend explains them.
 *
 * A hybrid run (data.replicas > 1) runs each device (pipeline rank) on several ranks, its replicas: an observed bar
 * is then the median over them of its start and of its end (planner.observed folds them the same way), its tooltip
 * their spread. Under each device two lanes hold its collectives on the same axis, "· collectives · predicted"
 * (data.predicted_step_end: what the planner charges after the pipeline) and "· collectives · observed" (each
 * collective folded over the ranks that ran it, matched by its index in the rank's step), one dataset per group
 * (tp, dp, ...; the optimizer steps apart). A pipeline-only run has one rank per device and no collectives: its chart
 * is unchanged.
 */
(function () {
  "use strict";

  const ACTION_TYPES = window.adaptisActionKinds.kinds;
  const TYPE_NAMES = window.adaptisActionKinds.names;
  const COLOURS = window.adaptisActionKinds.colours;
  const ROW_HEIGHT = 24;
  // A collective's group (its op's prefix) to an "R, G, B" prefix; a group not named here is drawn grey.
  const GROUP_COLOURS = {tp: "0, 150, 160", cp: "200, 70, 70", dp: "140, 100, 40", pp: "90, 90, 90",
                         ep: "200, 60, 140", edp: "150, 40, 110", tpcp: "60, 110, 190", optimizer: "60, 60, 60"};
  const OTHER_GROUP_COLOUR = "110, 120, 130";

  function bars(label, colour, source, extra) {
    const observed = source === "observed";
    return Object.assign({
      label: label, source: source, data: [],
      xAxisID: "x", grouped: false, barPercentage: 0.82, categoryPercentage: 1.0,
      backgroundColor: "rgba(" + colour + ", " + (observed ? "0.95" : "0.45") + ")",
      borderColor: "rgba(" + colour + ", 1)", borderWidth: 1, borderSkipped: false,
    }, extra);
  }

  function dataset(type, source) {
    return bars(type + " " + TYPE_NAMES[type] + " · " + source, COLOURS[type], source, {actionType: type});
  }

  function median(values) {
    const sorted = values.slice().sort(function (a, b) { return a - b; });
    const middle = Math.floor(sorted.length / 2);
    return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
  }

  /** Events grouped by ``keyOf``, in the order their groups first appear. */
  function groupedBy(events, keyOf) {
    const groups = new Map();
    events.forEach(function (event) {
      const key = keyOf(event);
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(event);
    });
    return Array.from(groups.values());
  }

  function create(canvas, data) {
    const stageDevices = data.stage_devices;
    const replicas = data.replicas || 1;
    const hybrid = replicas > 1;
    let rows = "device";

    function rowKey(entry) {
      return rows === "device" ? "device " + entry.device
                               : "stage " + entry.stage + " (device " + stageDevices[entry.stage] + ")";
    }

    function laneKey(device, source) { return "device " + device + " · collectives · " + source; }

    function lanes(device) { return hybrid ? [laneKey(device, "predicted"), laneKey(device, "observed")] : []; }

    function labels() {
      const devices = Array.from({length: data.num_devices}, function (_, device) { return device; });
      const pair = function (key) { return [key + " · predicted", key + " · observed"]; };
      if (rows === "device") {
        return devices.reduce(function (all, device) {
          return all.concat(pair("device " + device), lanes(device));
        }, []);
      }
      return stageDevices.reduce(function (all, device, stage) {
        return all.concat(pair("stage " + stage + " (device " + device + ")"));
      }, []).concat(devices.reduce(function (all, device) { return all.concat(lanes(device)); }, []));
    }

    const predictedSets = {}, observedSets = {};
    ACTION_TYPES.forEach(function (type) {
      predictedSets[type] = dataset(type, "predicted");
      observedSets[type] = dataset(type, "observed");
    });
    const datasets = ACTION_TYPES.map(function (type) { return predictedSets[type]; })
      .concat(ACTION_TYPES.map(function (type) { return observedSets[type]; }));
    const collectiveSets = {};  // source + " " + group -> its dataset, added to the chart when the group first shows

    /** A collective's dataset: one per group and source, the optimizer steps (dp_optimizer_step, ...) apart. */
    function collectiveSet(op, group, source) {
      const category = /optimizer_step$/.test(op) ? "optimizer" : group;
      const key = source + " " + category;
      if (!collectiveSets[key]) {
        const label = category === "optimizer" ? "optimizer steps" : category.toUpperCase() + " collectives";
        collectiveSets[key] = bars(label + " · " + source, GROUP_COLOURS[category] || OTHER_GROUP_COLOUR, source,
                                   {collectiveGroup: category});
        chart.data.datasets.push(collectiveSets[key]);
      }
      return collectiveSets[key];
    }

    function spanLines(start, end) {
      return start.toFixed(3) + " → " + end.toFixed(3) + " ms (" + (end - start).toFixed(3) + " ms)";
    }

    function foldLines(info) {
      if (!info.replicas || info.replicas < 2) return [];
      return ["median of " + info.replicas + " ranks (" + info.ranks.join(", ") + "); their durations spread " +
              info.spread_ms.toFixed(3) + " ms"];
    }

    function tooltipLines(context) {
      const info = context.raw.info;
      const start = context.raw.x[0], end = context.raw.x[1];
      if (info.collective) {
        const lines = [info.collective + " (" + info.group + ") on device " + info.device, spanLines(start, end)];
        if (info.note) lines.push(info.note);
        if (info.bytes !== undefined) lines.push(info.bytes.toLocaleString() + " bytes, collective " + info.index +
                                                 " of the rank's step " + info.step + ", from the step's start");
        return lines.concat(foldLines(info));
      }
      const lines = [
        info.action + " — " + TYPE_NAMES[info.type] + " of stage " + info.stage + ", micro-batch " + info.microbatch
          + " on device " + info.device,
        spanLines(start, end),
      ];
      if (info.step !== undefined) lines.push("step " + info.step + ", from the step's start");
      return lines.concat(foldLines(info));
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
    const observedCollectives = [];
    const stepStarts = {};  // step -> earliest action start seen in it (ms since the ranks' aligned start)
    let shownStep = null;   // null: every step, each drawn from its own start

    function predictedBar(entry) {
      return {y: rowKey(entry) + " · predicted", x: [entry.start_ms, entry.end_ms],
              info: {action: entry.action, stage: entry.stage, microbatch: entry.microbatch, type: entry.type,
                     device: entry.device}};
    }

    /** The median of each replica's start and end, from its step's start; with one replica, its own times. */
    function folded(events) {
      const start = stepStarts[events[0].step];
      const durations = events.map(function (event) { return event.end_ms - event.start_ms; });
      return {x: [median(events.map(function (event) { return event.start_ms - start; })),
                  median(events.map(function (event) { return event.end_ms - start; }))],
              fold: {replicas: events.length, ranks: events.map(function (event) { return event.rank; }),
                     spread_ms: Math.max.apply(null, durations) - Math.min.apply(null, durations)}};
    }

    function observedBar(events) {
      const event = events[0], span = folded(events);
      const info = {action: event.action, stage: event.stage, microbatch: event.microbatch, type: event.kind,
                    device: event.device, step: event.step};
      return {y: rowKey(event) + " · observed", x: span.x, info: hybrid ? Object.assign(info, span.fold) : info};
    }

    function collectiveBar(events) {
      const event = events[0], span = folded(events);
      return {y: laneKey(event.device, "observed"), x: span.x,
              info: Object.assign({collective: event.op, group: event.group, device: event.device, step: event.step,
                                   index: event.index, bytes: event.bytes}, span.fold)};
    }

    function shown(event) {
      return (shownStep === null || event.step === shownStep) && stepStarts[event.step] !== undefined;
    }

    function redraw() {
      const shownLabels = labels();
      chart.data.labels = shownLabels;
      chart.options.scales.y.labels = shownLabels;
      canvas.parentElement.style.height = (shownLabels.length * ROW_HEIGHT + 120) + "px";
      chart.data.datasets.forEach(function (set) { set.data = []; });
      data.predicted.forEach(function (entry) { predictedSets[entry.type].data.push(predictedBar(entry)); });
      if (hybrid) {
        for (let device = 0; device < data.num_devices; device++) {
          let start = data.iteration_ms;  // after the predicted pipeline, in order
          (data.predicted_step_end || []).forEach(function (part) {
            collectiveSet(part.op, part.group, "predicted").data.push({
              y: laneKey(device, "predicted"), x: [start, start + part.ms],
              info: {collective: part.op, group: part.group, device: device, note: part.note}});
            start += part.ms;
          });
        }
      }
      groupedBy(observedEvents.filter(shown), function (event) {
        return event.step + " " + event.device + " " + event.action;
      }).forEach(function (events) { observedSets[events[0].kind].data.push(observedBar(events)); });
      groupedBy(observedCollectives.filter(shown), function (event) {
        return event.step + " " + event.device + " " + event.index;
      }).forEach(function (events) {
        collectiveSet(events[0].op, events[0].group, "observed").data.push(collectiveBar(events));
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

    function addCollectives(collectives) {
      collectives.forEach(function (event) { observedCollectives.push(event); });
      if (collectives.length) redraw();
    }

    function showStep(step) { shownStep = step; redraw(); }

    function setRows(mode) { rows = mode; redraw(); }

    function observedSteps() {
      return Object.keys(stepStarts).map(Number).sort(function (a, b) { return a - b; });
    }

    /** The steps every predicted action was observed in on every replica (a cancelled run's last step may be
     * partial). */
    function completeSteps() {
      const counts = {};
      observedEvents.forEach(function (event) { counts[event.step] = (counts[event.step] || 0) + 1; });
      return observedSteps().filter(function (step) { return counts[step] >= data.predicted.length * replicas; });
    }

    redraw();
    addCollectives(data.collectives || []);
    addObserved(data.observed || []);
    return {chart: chart, addObserved: addObserved, addCollectives: addCollectives, showStep: showStep,
            setRows: setRows, observedSteps: observedSteps, completeSteps: completeSteps, stepStarts: stepStarts};
  }

  window.AdaptisRunTimeline = {create: create};
})();
