/*
 * The plan editor: edits a copy of the plan's document in the browser and re-predicts every edit on the server
 * (POST /api/plans/{id}/simulate/), then redraws the timeline, the numbers, the per-device table and the memory
 * bars from the answer. Edits: drag a stage boundary along the layer strip, pick a stage's device, split or merge
 * stages, micro-batches, the schedule policy, a baseline family, the parallel degrees of a v2 plan.
 * Undo and redo walk the predicted states (no new request); "Save as a new plan" posts the current document to
 * derive/, which stores it as a plan whose parent is this one.
 *
 * window.adaptisEditor.timings holds, per edit, the server's time, the round trip and the redraw (ms).
 */
(function () {
  "use strict";

  const STAGE_COLOURS = ["#cfe0f7", "#d5eddf", "#fbe3c2", "#e4d9f5", "#f7d4d2", "#d3ecef", "#efe6c6", "#e0e4ea"];

  const data = JSON.parse(document.getElementById("editor-data").textContent);
  const original = data.output;
  let current = original;
  let edits = [];
  const undoStack = [];
  const redoStack = [];
  let requestSeq = 0;
  let timeline = null;
  const timings = [];

  function $(selector) { return document.querySelector(selector); }

  function clone(value) { return JSON.parse(JSON.stringify(value)); }

  function csrfToken() {
    const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }

  function range(start, end) {
    const values = [];
    for (let value = start; value < end; value += 1) values.push(value);
    return values;
  }

  function fmt(value, places) { return value === null || value === undefined ? "—" : Number(value).toFixed(places); }
  function signed(value, places) { return (value >= 0 ? "+" : "") + Number(value).toFixed(places); }
  const bytes = window.AdaptisUnits.bytes, signedBytes = window.AdaptisUnits.signedBytes;   // static/studio/units.js

  // ---- drawing ---------------------------------------------------------------------------------------------

  function timelineData(output) {
    return {num_devices: output.plan.num_devices, predicted: output.timeline, iteration_ms: output.metrics.iteration_ms};
  }

  function drawTimeline(output) {
    const canvas = document.getElementById("timeline");
    const chart = timeline && timeline.chart;
    if (chart && chart.data.labels.length === output.plan.num_devices) {
      // Same rows: swap the bars in place (much cheaper than a new chart).
      const byType = {};
      chart.data.datasets.forEach(function (dataset) { byType[dataset.actionType] = dataset; dataset.data = []; });
      output.timeline.forEach(function (entry) {
        byType[entry.type].data.push({y: "device " + entry.device, x: [entry.start_ms, entry.end_ms],
          info: {action: entry.action, stage: entry.stage, microbatch: entry.microbatch, type: entry.type,
                 device: entry.device}});
      });
      chart.update("none");
      return;
    }
    if (chart) chart.destroy();
    timeline = window.AdaptisTimeline.create(canvas, timelineData(output));
    window.adaptisChart = timeline;
  }

  function stageRanges(plan) {
    return plan.stages.map(function (stage) { return [stage.layers[0], stage.layers[stage.layers.length - 1] + 1]; });
  }

  function drawStrip(output) {
    const strip = $("#layer-strip");
    const plan = output.plan;
    const numLayers = output.num_layers;
    strip.innerHTML = "";
    strip.style.setProperty("--layers", numLayers);
    plan.stages.forEach(function (stage, index) {
      stage.layers.forEach(function (layer) {
        const cell = document.createElement("div");
        cell.className = "layer-cell";
        cell.dataset.layer = layer;
        cell.dataset.stage = index;
        cell.style.background = STAGE_COLOURS[index % STAGE_COLOURS.length];
        cell.title = "layer " + layer + " (" + output.layer_codes[layer] + ") · stage " + index + " on device " + stage.device;
        cell.textContent = output.layer_codes[layer];
        strip.appendChild(cell);
      });
    });
    stageRanges(plan).forEach(function (span, index) {
      if (index === 0) return;
      const handle = document.createElement("div");
      handle.className = "boundary";
      handle.dataset.boundary = index;
      handle.style.left = (100 * span[0] / numLayers) + "%";
      handle.title = "boundary between stage " + (index - 1) + " and stage " + index + ": drag it";
      handle.addEventListener("pointerdown", startDrag);
      strip.appendChild(handle);
    });
    const labels = document.createElement("div");
    labels.className = "stage-labels";
    stageRanges(plan).forEach(function (span, index) {
      const label = document.createElement("span");
      label.style.left = (100 * span[0] / numLayers) + "%";
      label.style.width = (100 * (span[1] - span[0]) / numLayers) + "%";
      label.textContent = "s" + index + " @" + plan.stages[index].device;
      labels.appendChild(label);
    });
    strip.appendChild(labels);
  }

  function startDrag(event) {
    const handle = event.currentTarget;
    const strip = $("#layer-strip");
    const boundary = Number(handle.dataset.boundary);
    const numLayers = current.num_layers;
    const box = strip.getBoundingClientRect();
    handle.setPointerCapture(event.pointerId);
    handle.classList.add("dragging");
    let position = current.plan.stages[boundary].layers[0];

    function move(moveEvent) {
      position = Math.max(1, Math.min(numLayers - 1, Math.round((moveEvent.clientX - box.left) / box.width * numLayers)));
      handle.style.left = (100 * position / numLayers) + "%";
    }

    function end() {
      handle.removeEventListener("pointermove", move);
      handle.removeEventListener("pointerup", end);
      handle.removeEventListener("pointercancel", end);
      handle.classList.remove("dragging");
      moveBoundary(boundary, position);
    }

    handle.addEventListener("pointermove", move);
    handle.addEventListener("pointerup", end);
    handle.addEventListener("pointercancel", end);
    event.preventDefault();
  }

  function drawStageTable(output) {
    const body = $("#stage-table tbody");
    const plan = output.plan;
    body.innerHTML = "";
    stageRanges(plan).forEach(function (span, index) {
      const row = document.createElement("tr");
      row.dataset.stage = index;
      const codes = output.layer_codes.slice(span[0], span[1]).join("");
      row.innerHTML = "<td>" + index + "</td><td class='mono'>" + span[0] + "–" + (span[1] - 1) + " <span class='muted'>" +
        codes + "</span></td><td></td><td class='stage-buttons'></td>";
      const select = document.createElement("select");
      select.className = "stage-device";
      select.setAttribute("aria-label", "device of stage " + index);
      range(0, plan.num_devices).forEach(function (device) {
        const option = document.createElement("option");
        option.value = device;
        option.textContent = "device " + device;
        option.selected = device === plan.stages[index].device;
        select.appendChild(option);
      });
      select.addEventListener("change", function () { moveStage(index, Number(select.value)); });
      row.children[2].appendChild(select);
      const split = button("Split", "split-stage", span[1] - span[0] < 2, function () { splitStage(index); });
      const merge = button("Merge ↓", "merge-stage", index === plan.stages.length - 1, function () { mergeStage(index); });
      row.children[3].append(split, merge);
      body.appendChild(row);
    });
  }

  function button(text, className, disabled, onClick) {
    const element = document.createElement("button");
    element.type = "button";
    element.className = "secondary small " + className;
    element.textContent = text;
    element.disabled = disabled;
    element.addEventListener("click", onClick);
    return element;
  }

  function drawMetrics(output) {
    const metrics = output.metrics;
    $("[data-metric=iteration]").textContent = fmt(metrics.iteration_ms, 3) + " ms";
    $("[data-metric=bubble]").textContent = fmt(metrics.bubble_ratio, 3);
    $("[data-metric=peak-memory]").textContent = bytes(metrics.peak_memory_bytes);
    $("[data-metric=tokens]").textContent = metrics.tokens_per_s ? Math.round(metrics.tokens_per_s) : "—";
    $("[data-metric=mfu]").textContent = metrics.mfu === null || metrics.mfu === undefined ? "—" :
      Math.round(metrics.mfu * 100) + " %";
    $("[data-layout]").textContent = output.layout;
    $("[data-schedule-summary]").textContent = output.schedule_summary;
    const edited = output !== original;
    const difference = output.difference;
    const deltas = {iteration: "", bubble: "", "peak-memory": "", tokens: ""};
    if (edited && difference) {
      if (difference.tokens_per_s_ratio !== null) {
        deltas.tokens = signed((difference.tokens_per_s_ratio - 1) * 100, 1) + " %" +
          (difference.gpus_changed ? " (" + signed((difference.per_gpu_ratio - 1) * 100, 1) + " % per GPU)" : "");
      }
      deltas.iteration = signed(difference.iteration_ms, 3) + " ms (" + signed((difference.iteration_ratio - 1) * 100, 1) + " %)";
      deltas.bubble = signed(difference.bubble_ratio, 3);
      deltas["peak-memory"] = signedBytes(output.metrics.peak_memory_bytes - original.metrics.peak_memory_bytes);
    }
    Object.keys(deltas).forEach(function (key) {
      const element = $("[data-delta='" + key + "']");
      element.textContent = deltas[key] ? "vs plan #" + data.plan_id + ": " + deltas[key] : "";
      // Green means faster per token (planner.comparison): the throughput, not an iteration time that may cover
      // another global batch or another GPU count.
      element.className = "delta" + (deltas[key] && key === "tokens" ?
        (difference.faster ? " better" : difference.slower ? " worse" : "") : "");
    });
    const box = $("#edit-difference");
    if (edited && difference) {
      box.hidden = false;
      box.innerHTML = "<strong>From plan #" + data.plan_id + ":</strong> " +
        (difference.note ? "<span data-edit-note>" + difference.note + ".</span> " : "") +
        "iteration " + signed(difference.iteration_ms, 3) +
        " ms, bubble " + signed(difference.bubble_ratio, 3) + ", memory per device " +
        difference.per_device.map(function (row) {
          return "<span class='mono' data-edit-memory='" + row.device + "'>d" + row.device + " " +
            signedBytes(row.memory_bytes) + "</span>";
        }).join(", ");
    } else {
      box.hidden = true;
    }
  }

  function drawDevices(output) {
    $("#per-device tbody").innerHTML = output.per_device.map(function (row) {
      return "<tr><td>" + row.device + "</td><td class='num'>" + fmt(row.busy_ms, 3) + "</td><td class='num'>" +
        fmt(row.bubble_ms, 3) + "</td><td class='num'>" + fmt(row.warmup_bubble_ms, 3) + "</td><td class='num'>" +
        fmt(row.steady_bubble_ms, 3) + "</td><td class='num'>" + fmt(row.cooldown_bubble_ms, 3) + "</td><td class='num'>" +
        bytes(row.memory_bytes) + "</td></tr>";
    }).join("");
    $("#memory-bars").innerHTML = output.per_device.map(function (row) {
      const percent = Math.min(100, 100 * row.memory_bytes / row.capacity_bytes);
      return "<div class='membar-row" + (row.fits ? "" : " over") + "' data-device='" + row.device + "'>" +
        "<span class='membar-label'>device " + row.device + "</span><div class='membar'><div class='fill' style='width: " +
        percent.toFixed(1) + "%'></div></div><span class='membar-value'>" + bytes(row.memory_bytes) +
        " of " + bytes(row.capacity_bytes) + "</span></div>";
    }).join("");
  }

  function drawControls(output) {
    const plan = output.plan;
    $("#edit-microbatches").value = plan.num_microbatches;
    const parallel = plan.parallel;
    $("#parallel-fields").hidden = !parallel;
    if (parallel) {
      document.querySelectorAll("[data-degree]").forEach(function (input) {
        const key = input.dataset.degree;
        // expert TP is written only where it differs from TP
        const value = key === "etp" && parallel.etp === undefined ? parallel.tp : parallel[key];
        if (input.type === "checkbox") input.checked = Boolean(value);
        else input.value = value;
      });
    }
    $("#undo").disabled = undoStack.length === 0;
    $("#redo").disabled = redoStack.length === 0;
    $("#reset-edits").disabled = output === original;
    const save = $("#save-plan");
    if (save) save.disabled = output === original;
    $("#edit-log").innerHTML = edits.map(function (edit) { return "<li>" + escapeHtml(edit) + "</li>"; }).join("");
  }

  function escapeHtml(text) {
    return String(text).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
    });
  }

  function render(output) {
    drawTimeline(output);
    drawStrip(output);
    drawStageTable(output);
    drawMetrics(output);
    drawDevices(output);
    drawControls(output);
  }

  function showError(body) {
    const box = $("#edit-error");
    const errors = (body && body.errors) || [{field: "", reason: "the server did not answer (" + (body && body.detail || "?") + ")"}];
    box.hidden = false;
    box.innerHTML = "<strong>That edit cannot be predicted.</strong> " + errors.map(function (error) {
      return "<span class='edit-error-item' data-field='" + escapeHtml(error.field) + "'>" +
        (error.field ? "<code>" + escapeHtml(error.field) + "</code>: " : "") + escapeHtml(error.reason) + "</span>";
    }).join(" ");
  }

  // ---- edits -------------------------------------------------------------------------------------------------

  function editableDoc() {
    const doc = clone(current.plan);
    doc.meta = doc.meta || {};
    delete doc.meta.baseline;
    delete doc.meta.partition;
    // vpp says how many stages each pipeline rank holds; an edit may change that, and the server writes it anew
    if (doc.parallel) delete doc.parallel.vpp;
    doc.meta.schedule_policy = $("#edit-policy").value;
    return doc;
  }

  function submit(doc, description) {
    doc.meta = doc.meta || {};
    doc.meta.edits = edits.concat([description]);
    const seq = ++requestSeq;
    const started = performance.now();
    document.body.classList.add("predicting");
    return fetch(data.simulate_url, {
      method: "POST", credentials: "same-origin", body: JSON.stringify(doc),
      headers: {"Content-Type": "application/json", "Accept": "application/json", "X-CSRFToken": csrfToken()},
    }).then(function (response) {
      return response.json().then(function (body) { return {ok: response.ok, body: body}; });
    }).then(function (answer) {
      if (seq !== requestSeq) return;
      document.body.classList.remove("predicting");
      const answered = performance.now();
      if (!answer.ok) {
        showError(answer.body);
        drawStrip(current);
        drawStageTable(current);
        drawControls(current);
        return;
      }
      $("#edit-error").hidden = true;
      undoStack.push({output: current, edits: edits});
      redoStack.length = 0;
      edits = edits.concat([description]);
      current = answer.body;
      render(current);
      const drawn = performance.now();
      window.requestAnimationFrame(function () {
        const painted = performance.now();
        const timing = {server_ms: answer.body.server_ms, round_trip_ms: answered - started,
                        render_ms: drawn - answered, paint_ms: painted - answered, total_ms: painted - started,
                        actions: answer.body.timeline.length, edit: description};
        timings.push(timing);
        $("#predict-timing").textContent = "re-predicted in " + Math.round(timing.total_ms) + " ms (server " +
          Math.round(timing.server_ms) + " ms, " + timing.actions + " actions)";
      });
    }).catch(function (error) {
      document.body.classList.remove("predicting");
      showError({errors: [{field: "", reason: "lost contact with the server: " + error.message}]});
    });
  }

  function moveBoundary(boundary, position) {
    const doc = editableDoc();
    const spans = stageRanges(doc);
    const before = spans[boundary - 1], after = spans[boundary];
    const start = Math.max(before[0], Math.min(after[1], position));
    if (start === after[0]) { drawStrip(current); return; }
    doc.stages[boundary - 1].layers = range(before[0], start);
    doc.stages[boundary].layers = range(start, after[1]);
    submit(doc, "moved the boundary of stages " + (boundary - 1) + "/" + boundary + " from layer " + after[0] +
      " to layer " + start);
  }

  function moveStage(stage, device) {
    const doc = editableDoc();
    const from = doc.stages[stage].device;
    doc.stages[stage].device = device;
    submit(doc, "moved stage " + stage + " from device " + from + " to device " + device);
  }

  function splitStage(stage) {
    const doc = editableDoc();
    const layers = doc.stages[stage].layers;
    const half = Math.ceil(layers.length / 2);
    doc.stages.splice(stage, 1, {layers: layers.slice(0, half), device: doc.stages[stage].device},
                      {layers: layers.slice(half), device: doc.stages[stage].device});
    resizeRecompute(doc);
    submit(doc, "split stage " + stage + " at layer " + layers[half]);
  }

  function mergeStage(stage) {
    const doc = editableDoc();
    const merged = {layers: doc.stages[stage].layers.concat(doc.stages[stage + 1].layers), device: doc.stages[stage].device};
    doc.stages.splice(stage, 2, merged);
    resizeRecompute(doc);
    submit(doc, "merged stages " + stage + " and " + (stage + 1));
  }

  function resizeRecompute(doc) {
    // A per-stage recompute list follows the stages: a split or merge makes it one mode for all (the first).
    if (doc.parallel && Array.isArray(doc.parallel.recompute)) doc.parallel.recompute = doc.parallel.recompute[0];
  }

  function setMicrobatches(value) {
    const doc = editableDoc();
    const before = doc.num_microbatches;
    doc.num_microbatches = value;
    if (doc.parallel) doc.parallel.num_microbatches = value;
    submit(doc, "micro-batches " + before + " → " + value);
  }

  function setPolicy(policy) {
    submit(editableDoc(), "schedule policy: " + policy);
  }

  function applyBaseline() {
    const doc = editableDoc();
    doc.meta.baseline = $("#edit-baseline").value;
    doc.meta.partition = $("#edit-partition").value;
    submit(doc, "replaced by the " + doc.meta.baseline + " baseline (" + doc.meta.partition + " partition)");
  }

  // The configuration as a whole: every degree read at once, then what the user keeps fixed derived from it (the
  // GPU count: DP; or the global batch: the micro-batches), one re-prediction. Editing one degree at a time could
  // never get from TP2 x DP2 to TP4 x DP1: each step alone changes the GPU count, which the job fixes.
  function degreeValue(input) {
    return input.type === "checkbox" ? input.checked : input.tagName === "SELECT" ? input.value : Number(input.value);
  }

  function applyDegrees() {
    const doc = editableDoc();
    const before = Object.assign({}, doc.parallel);
    document.querySelectorAll("[data-degree]").forEach(function (input) {
      doc.parallel[input.dataset.degree] = degreeValue(input);
    });
    const p = doc.parallel;
    // expert TP left as TP follows a new TP unless it is edited itself (Megatron's default: ETP = TP, unwritten)
    const beforeEtp = before.etp === undefined ? before.tp : before.etp;
    if (p.etp === beforeEtp && beforeEtp === before.tp) p.etp = p.tp;
    if (p.etp === p.tp) delete p.etp;
    const keep = $("#edit-keep").value;
    if (keep === "gpus") {
      const gpus = before.tp * before.cp * before.pp * before.dp;
      const others = p.tp * p.cp * p.pp;
      if (gpus % others !== 0) {
        showError({errors: [{field: "dp", reason: "TP × CP × PP = " + others + " does not divide the plan's " + gpus +
                             " GPUs: no DP keeps the GPU count"}]});
        return;
      }
      p.dp = gpus / others;
      const batch = before.microbatch_size * before.num_microbatches * before.dp;
      if (batch % (p.microbatch_size * p.dp) === 0) {  // the global batch too, where DP and the size allow it
        p.num_microbatches = batch / (p.microbatch_size * p.dp);
        doc.num_microbatches = p.num_microbatches;
      }
    } else if (keep === "batch") {
      const batch = before.microbatch_size * before.num_microbatches * before.dp;
      const perStep = p.microbatch_size * p.dp;
      if (batch % perStep !== 0) {
        showError({errors: [{field: "num_microbatches", reason: "micro-batch size × DP = " + perStep +
                             " does not divide the global batch of " + batch + " sequences"}]});
        return;
      }
      p.num_microbatches = batch / perStep;
      doc.num_microbatches = p.num_microbatches;
    }
    doc.num_devices = p.pp;
    const changed = Object.keys(p).filter(function (key) { return String(p[key]) !== String(before[key]); });
    if (!changed.length) return;
    submit(doc, changed.map(function (key) { return key + " " + before[key] + " → " + p[key]; }).join(", "));
  }

  function undo() {
    if (!undoStack.length) return;
    redoStack.push({output: current, edits: edits});
    const state = undoStack.pop();
    current = state.output;
    edits = state.edits;
    $("#edit-error").hidden = true;
    render(current);
  }

  function redo() {
    if (!redoStack.length) return;
    undoStack.push({output: current, edits: edits});
    const state = redoStack.pop();
    current = state.output;
    edits = state.edits;
    render(current);
  }

  function resetEdits() {
    undoStack.push({output: current, edits: edits});
    redoStack.length = 0;
    current = original;
    edits = [];
    render(current);
  }

  function save(event) {
    event.preventDefault();
    const doc = clone(current.plan);
    doc.meta = doc.meta || {};
    doc.meta.edits = edits;
    doc.meta.schedule_policy = "keep";  // store exactly the orders that were predicted
    delete doc.meta.baseline;
    const button = $("#save-plan");
    button.disabled = true;
    fetch(data.derive_url, {
      method: "POST", credentials: "same-origin",
      body: JSON.stringify({plan: doc, name: $("#save-name").value}),
      headers: {"Content-Type": "application/json", "Accept": "application/json", "X-CSRFToken": csrfToken()},
    }).then(function (response) {
      return response.json().then(function (body) { return {ok: response.ok, body: body}; });
    }).then(function (answer) {
      if (!answer.ok) { showError(answer.body); button.disabled = false; return; }
      window.location.href = data.plan_url_template.replace("{id}", answer.body.id);
    });
  }

  function fillSelect(select, options, selected) {
    options.forEach(function (option) {
      const element = document.createElement("option");
      element.value = option.name || option;
      element.textContent = option.label ? option.name + " — " + option.label : option;
      element.selected = element.value === selected;
      select.appendChild(element);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    fillSelect($("#edit-policy"), data.policies, "auto");
    fillSelect($("#edit-baseline"), data.baselines, "1f1b");
    fillSelect($("#edit-partition"), data.partitions, "time-balanced");
    const recompute = document.querySelector("[data-degree=recompute]");
    fillSelect(recompute, data.recompute_modes, "none");
    $("#edit-microbatches").addEventListener("change", function (event) { setMicrobatches(Number(event.target.value)); });
    $("#edit-policy").addEventListener("change", function (event) { setPolicy(event.target.value); });
    $("#apply-baseline").addEventListener("click", applyBaseline);
    $("#apply-degrees").addEventListener("click", applyDegrees);
    $("#undo").addEventListener("click", undo);
    $("#redo").addEventListener("click", redo);
    $("#reset-edits").addEventListener("click", resetEdits);
    const form = $("#save-form");
    if (form) form.addEventListener("submit", save);
    render(current);
  });

  window.adaptisEditor = {
    timings: timings,
    current: function () { return current; },
    edits: function () { return edits.slice(); },
  };
})();
