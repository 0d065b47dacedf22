"""Chrome / Perfetto trace JSON of a simulated plan (open it in ui.perfetto.dev or chrome://tracing).

Tracks: one per device ("device N") holding its compute actions and, as explicit "bubble" slices, the
idle time between them up to the end of the iteration; one comm track per device ("device N send")
holding the transfers it sends, each with a flow arrow to the action on the receiving device that
consumes it. Times are microseconds, as the trace format expects.
"""

from __future__ import annotations

from planner.simulator import Simulation

ACTION_CATEGORIES = {"F": "forward", "B": "backward", "I": "backward-input", "W": "backward-weight"}
CONSUMER_TYPES = {"activation": ("F",), "gradient": ("B", "I")}
PROCESS_ID = 0
MS_TO_US = 1000.0


def _us(ms: float) -> float:
    return round(ms * MS_TO_US, 3)


def _track_names(num_devices: int) -> list[dict]:
    events = [{"ph": "M", "name": "process_name", "pid": PROCESS_ID, "args": {"name": "pipeline"}}]
    for device in range(num_devices):
        for tid, name in ((device, f"device {device}"), (num_devices + device, f"device {device} send")):
            events.append({"ph": "M", "name": "thread_name", "pid": PROCESS_ID, "tid": tid, "args": {"name": name}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": PROCESS_ID, "tid": tid,
                           "args": {"sort_index": tid}})
    return events


def _compute_and_bubbles(timeline: list[dict], num_devices: int, iteration_ms: float) -> list[dict]:
    events = []
    for device in range(num_devices):
        cursor = 0.0
        for entry in sorted((e for e in timeline if e["device"] == device), key=lambda e: e["start_ms"]):
            if entry["start_ms"] > cursor:
                events.append(_bubble(device, cursor, entry["start_ms"]))
            events.append({"ph": "X", "name": entry["action"], "cat": ACTION_CATEGORIES[entry["type"]],
                           "pid": PROCESS_ID, "tid": device, "ts": _us(entry["start_ms"]),
                           "dur": _us(entry["end_ms"] - entry["start_ms"]),
                           "args": {"stage": entry["stage"], "microbatch": entry["microbatch"],
                                    "type": entry["type"]}})
            cursor = max(cursor, entry["end_ms"])
        if iteration_ms > cursor:
            events.append(_bubble(device, cursor, iteration_ms))
    return events


def _bubble(device: int, start_ms: float, end_ms: float) -> dict:
    return {"ph": "X", "name": "bubble", "cat": "bubble", "pid": PROCESS_ID, "tid": device,
            "ts": _us(start_ms), "dur": _us(end_ms - start_ms), "args": {"idle_ms": end_ms - start_ms}}


def _transfers(simulation: Simulation, timeline: list[dict], num_devices: int) -> list[dict]:
    consumer_start = {(e["stage"], e["type"], e["microbatch"]): e["start_ms"] for e in timeline}
    events = []
    for flow_id, transfer in enumerate(simulation.transfers()):
        sender_track = num_devices + transfer["src_device"]
        label = f"{'act' if transfer['kind'] == 'activation' else 'grad'} {transfer['src_stage']}→{transfer['dst_stage']} mb{transfer['microbatch']}"
        events.append({"ph": "X", "name": label, "cat": f"transfer-{transfer['kind']}", "pid": PROCESS_ID,
                       "tid": sender_track, "ts": _us(transfer["start_ms"]),
                       "dur": _us(transfer["end_ms"] - transfer["start_ms"]),
                       "args": {key: transfer[key] for key in ("src_stage", "dst_stage", "src_device",
                                                                "dst_device", "microbatch", "bytes")}})
        consumer = next((consumer_start[(transfer["dst_stage"], kind, transfer["microbatch"])]
                         for kind in CONSUMER_TYPES[transfer["kind"]]
                         if (transfer["dst_stage"], kind, transfer["microbatch"]) in consumer_start), None)
        if consumer is None:
            continue
        events.append({"ph": "s", "name": label, "cat": "flow", "id": flow_id, "pid": PROCESS_ID,
                       "tid": sender_track, "ts": _us(transfer["start_ms"])})
        events.append({"ph": "f", "bp": "e", "name": label, "cat": "flow", "id": flow_id, "pid": PROCESS_ID,
                       "tid": transfer["dst_device"], "ts": _us(consumer)})
    return events


def perfetto_trace(simulation: Simulation) -> dict:
    plan = simulation.plan
    timeline = simulation.timeline()
    events = (_track_names(plan.num_devices)
              + _compute_and_bubbles(timeline, plan.num_devices, simulation.iteration_ms)
              + _transfers(simulation, timeline, plan.num_devices))
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"strategy": plan.strategy, "num_devices": plan.num_devices,
                          "num_microbatches": plan.num_microbatches, "iteration_ms": simulation.iteration_ms,
                          "bubble_ratio": simulation.bubble_ratio}}
