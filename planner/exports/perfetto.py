"""Chrome / Perfetto trace JSON of a simulated plan (open it in ui.perfetto.dev or chrome://tracing).

Tracks: one per device ("device N") holding its compute actions and, as explicit "bubble" slices, the
idle time between them up to the end of the iteration; comm tracks per device ("device N send", then
"device N send 2", ... where its transfers overlap in time) holding the transfers it sends, each with a flow
arrow to the action on the receiving device that consumes it. Times are microseconds, as the trace format
expects.

Slices on one track must nest, never overlap (Perfetto draws overlapping ones wrongly). So every time is
rounded once, as an end point, to a whole nanosecond, and a slice's duration is the difference of its two
rounded ends: rounding is monotone, so slices that touch or follow each other in the simulation still do
in the trace (rounding start and duration separately let neighbours overlap by up to 1 ns). Transfers a
device sends may overlap one another (to the next and the previous stage at once), so they are spread over
as many send tracks as needed.
"""

from __future__ import annotations

from planner.actions import ActionKind
from planner.simulator import Simulation

# A trace category is one token: "backward (input)" becomes "backward-input".
ACTION_CATEGORIES = {kind: kind.description.replace(" (", "-").removesuffix(")") for kind in ActionKind}
# The kinds that consume each boundary tensor a transfer carries, in the order a flow arrow looks for them.
CONSUMER_KINDS = {boundary: tuple(kind for kind in ActionKind if kind.boundary == boundary)
                  for boundary in {kind.boundary for kind in ActionKind} - {None}}
PROCESS_ID = 0
MS_TO_US = 1000.0


NS_PER_MS = 1_000_000


def _ns(ms: float) -> int:
    return round(ms * NS_PER_MS)


def _us(ms: float) -> float:
    """A time point in microseconds, rounded to the nanosecond."""
    return _ns(ms) / 1000


def _span(start_ms: float, end_ms: float) -> dict:
    """``ts`` and ``dur`` (microseconds) of a slice from its two rounded end points."""
    start_ns = _ns(start_ms)
    return {"ts": start_ns / 1000, "dur": max(_ns(end_ms) - start_ns, 0) / 1000}


def _send_track(num_devices: int, device: int, lane: int) -> int:
    """Lane 0 of device d's sends is track ``p + d``, lane k track ``(k + 1) p + d``."""
    return num_devices * (lane + 1) + device


def _track_names(num_devices: int, send_lanes: list[int]) -> list[dict]:
    events = [{"ph": "M", "name": "process_name", "pid": PROCESS_ID, "args": {"name": "pipeline"}}]
    tracks = []
    for device in range(num_devices):
        tracks.append((device, f"device {device}", device * 100))
        for lane in range(max(send_lanes[device], 1)):
            tracks.append((_send_track(num_devices, device, lane),
                           f"device {device} send" + (f" {lane + 1}" if lane else ""), device * 100 + 1 + lane))
    for tid, name, sort_index in tracks:
        events.append({"ph": "M", "name": "thread_name", "pid": PROCESS_ID, "tid": tid, "args": {"name": name}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": PROCESS_ID, "tid": tid,
                       "args": {"sort_index": sort_index}})
    return events


def _compute_and_bubbles(timeline: list[dict], num_devices: int, iteration_ms: float) -> list[dict]:
    events = []
    for device in range(num_devices):
        cursor = 0.0
        for entry in sorted((e for e in timeline if e["device"] == device), key=lambda e: e["start_ms"]):
            if entry["start_ms"] > cursor:
                events.append(_bubble(device, cursor, entry["start_ms"]))
            events.append({"ph": "X", "name": entry["action"], "cat": ACTION_CATEGORIES[entry["type"]],
                           "pid": PROCESS_ID, "tid": device, **_span(entry["start_ms"], entry["end_ms"]),
                           "args": {"stage": entry["stage"], "microbatch": entry["microbatch"],
                                    "type": entry["type"]}})
            cursor = max(cursor, entry["end_ms"])
        if iteration_ms > cursor:
            events.append(_bubble(device, cursor, iteration_ms))
    return events


def _bubble(device: int, start_ms: float, end_ms: float) -> dict:
    return {"ph": "X", "name": "bubble", "cat": "bubble", "pid": PROCESS_ID, "tid": device,
            **_span(start_ms, end_ms), "args": {"idle_ms": end_ms - start_ms}}


def _send_lanes(transfers: list[dict], num_devices: int) -> list[int]:
    """Each transfer's lane on its sender's send tracks: the first lane free (in rounded nanoseconds) by
    its start. ``transfers`` come in start order."""
    lane_ends: list[list[int]] = [[] for _ in range(num_devices)]
    lanes = []
    for transfer in transfers:
        ends = lane_ends[transfer["src_device"]]
        start, end = _ns(transfer["start_ms"]), _ns(transfer["end_ms"])
        lane = next((index for index, lane_end in enumerate(ends) if lane_end <= start), len(ends))
        if lane == len(ends):
            ends.append(end)
        else:
            ends[lane] = end
        lanes.append(lane)
    return lanes


def _transfers(transfers: list[dict], lanes: list[int], timeline: list[dict], num_devices: int) -> list[dict]:
    consumer_start = {(e["stage"], e["type"], e["microbatch"]): e["start_ms"] for e in timeline}
    events = []
    for flow_id, (transfer, lane) in enumerate(zip(transfers, lanes)):
        sender_track = _send_track(num_devices, transfer["src_device"], lane)
        label = f"{'act' if transfer['kind'] == 'activation' else 'grad'} {transfer['src_stage']}→{transfer['dst_stage']} mb{transfer['microbatch']}"
        events.append({"ph": "X", "name": label, "cat": f"transfer-{transfer['kind']}", "pid": PROCESS_ID,
                       "tid": sender_track, **_span(transfer["start_ms"], transfer["end_ms"]),
                       "args": {key: transfer[key] for key in ("src_stage", "dst_stage", "src_device",
                                                                "dst_device", "microbatch", "bytes")}})
        consumer = next((consumer_start[(transfer["dst_stage"], kind, transfer["microbatch"])]
                         for kind in CONSUMER_KINDS[transfer["kind"]]
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
    transfers = simulation.transfers()
    lanes = _send_lanes(transfers, plan.num_devices)
    send_lanes = [1 + max((lane for transfer, lane in zip(transfers, lanes) if transfer["src_device"] == device),
                          default=0) for device in range(plan.num_devices)]
    events = (_track_names(plan.num_devices, send_lanes)
              + _compute_and_bubbles(timeline, plan.num_devices, simulation.iteration_ms)
              + _transfers(transfers, lanes, timeline, plan.num_devices))
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"strategy": plan.strategy, "num_devices": plan.num_devices,
                          "num_microbatches": plan.num_microbatches, "iteration_ms": simulation.iteration_ms,
                          "bubble_ratio": simulation.bubble_ratio}}
