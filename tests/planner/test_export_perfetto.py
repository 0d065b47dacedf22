"""Perfetto / Chrome trace export: tracks per device, one slice per action, explicit bubbles, transfers."""

import json

import pytest

from planner.baselines import build_baseline
from planner.cluster import load_cluster_preset
from planner.exports import export_plan, perfetto_trace
from planner.simulator import simulate

from sched_checks import decoder_profile

PROFILE = decoder_profile(8, with_ends=True)
CLUSTER = load_cluster_preset("h100-sxm-2x8")


@pytest.fixture(scope="module")
def traced():
    plan = build_baseline("interleaved-1f1b", PROFILE, 4, 8, cluster=CLUSTER)
    simulation = simulate(plan, PROFILE, CLUSTER)
    return plan, simulation, perfetto_trace(simulation)


def _slices(trace, tid, name=None):
    return [e for e in trace["traceEvents"]
            if e["ph"] == "X" and e["tid"] == tid and (name is None or (e["name"] == "bubble") == (name == "bubble"))]


def test_every_device_has_a_track_named_device_n(traced):
    plan, _, trace = traced
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    for device in range(plan.num_devices):
        assert names[device] == f"device {device}"
        assert names[plan.num_devices + device] == f"device {device} send"


def test_one_complete_event_per_action_with_its_times_and_args(traced):
    plan, simulation, trace = traced
    for device in range(plan.num_devices):
        actions = sorted(_slices(trace, device, "action"), key=lambda e: e["ts"])
        expected = sorted((e for e in simulation.timeline() if e["device"] == device), key=lambda e: e["start_ms"])
        assert [e["name"] for e in actions] == [e["action"] for e in expected]
        for event, entry in zip(actions, expected):
            assert event["ts"] == pytest.approx(entry["start_ms"] * 1000, abs=1e-3)
            assert event["dur"] == pytest.approx((entry["end_ms"] - entry["start_ms"]) * 1000, abs=1e-3)
            assert event["args"] == {"stage": entry["stage"], "microbatch": entry["microbatch"], "type": entry["type"]}


def test_bubble_slices_fill_the_idle_time_the_simulator_reports(traced):
    plan, simulation, trace = traced
    for stats in simulation.to_dict(include_timeline=False)["per_device"]:
        device = stats["device"]
        bubbles = _slices(trace, device, "bubble")
        assert sum(e["dur"] for e in bubbles) / 1000 == pytest.approx(stats["bubble_ms"], rel=1e-6, abs=1e-6)
        # Bubbles and actions tile the iteration without overlapping.
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in _slices(trace, device))
        assert spans[0][0] == pytest.approx(0.0, abs=1e-3)
        assert spans[-1][1] == pytest.approx(simulation.iteration_ms * 1000, abs=1e-2)
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert start == pytest.approx(end, abs=1e-2)


def test_transfers_appear_on_the_senders_comm_track_with_flow_arrows(traced):
    plan, simulation, trace = traced
    transfers = simulation.transfers()
    assert transfers, "a 4-device plan sends activations and gradients"
    comm_slices = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] >= plan.num_devices]
    assert len(comm_slices) == len(transfers)
    senders = {(e["tid"] - plan.num_devices) % plan.num_devices for e in comm_slices}
    assert senders == {t["src_device"] for t in transfers}
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    for event in comm_slices:
        assert names[event["tid"]].startswith(f"device {(event['tid'] - plan.num_devices) % plan.num_devices} send")
    starts = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "s"}
    finishes = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "f"}
    assert starts.keys() == finishes.keys() and len(starts) == len(transfers)
    for flow_id, finish in finishes.items():
        assert finish["ts"] >= starts[flow_id]["ts"]


def test_export_plan_writes_the_trace_as_json():
    plan = build_baseline("zb-v", PROFILE, 2, 4)
    doc = json.loads(export_plan("perfetto", plan, PROFILE))
    assert doc["displayTimeUnit"] == "ms" and doc["otherData"]["strategy"] == "zb-v"
    assert sum(1 for e in doc["traceEvents"] if e["ph"] == "X" and e["name"] != "bubble"
               and e["tid"] < plan.num_devices) == plan.num_actions()
