"""The simulator's report: the contract keys, throughput, MFU, the timeline and the transfers."""

import json

import pytest

from planner.cluster import load_cluster_preset
from planner.errors import PlanError
from planner.plan import Action, Plan, Stage
from planner.simulator import simulate, simulate_summary

from sim_schedules import interleaved_1f1b, one_f_one_b, uniform_profile

PER_DEVICE_KEYS = {"device", "busy_ms", "bubble_ms", "warmup_bubble_ms", "steady_bubble_ms", "cooldown_bubble_ms",
                   "peak_memory_bytes", "exposed_comm_ms", "overlapped_comm_ms", "message_ms"}
TIMELINE_KEYS = {"device", "action", "stage", "type", "microbatch", "start_ms", "end_ms"}


def test_to_dict_carries_the_contract_keys_and_is_json():
    result = simulate(one_f_one_b(4, 8), uniform_profile(4), load_cluster_preset("h100-sxm-1x8"))
    doc = json.loads(json.dumps(result.to_dict()))
    top_level = {"iteration_ms", "bubble_ratio", "tokens_per_s", "mfu", "per_device", "timeline", "transfers"}
    assert top_level <= set(doc)
    assert [entry["device"] for entry in doc["per_device"]] == [0, 1, 2, 3]
    assert all(PER_DEVICE_KEYS <= set(entry) for entry in doc["per_device"])
    assert all(set(entry) == TIMELINE_KEYS for entry in doc["timeline"])
    assert len(doc["timeline"]) == 4 * 8 * 2


def test_summary_leaves_out_the_timeline():
    summary = simulate_summary(one_f_one_b(2, 2), uniform_profile(2))
    assert "timeline" not in summary and "transfers" not in summary
    assert summary["iteration_ms"] == pytest.approx(3 * 3.0)


def test_timeline_entries_last_their_stage_cost_and_never_overlap_on_a_device():
    plan = interleaved_1f1b(2, 4, 2)
    profile = uniform_profile(4, forward=1.0, backward_input=0.5, backward_weight=1.5)
    timeline = simulate(plan, profile).timeline()
    for entry in timeline:
        expected = 1.0 if entry["type"] == "F" else 2.0
        assert entry["end_ms"] - entry["start_ms"] == pytest.approx(expected)
        assert entry["action"] == f"{entry['stage']}{entry['type']}{entry['microbatch']}"
    for device in range(2):
        spans = [(e["start_ms"], e["end_ms"]) for e in timeline if e["device"] == device]
        assert all(end <= next_start + 1e-12 for (_, end), (next_start, _) in zip(spans, spans[1:]))


def test_tokens_per_second_and_mfu_follow_their_definitions():
    cluster = load_cluster_preset("h100-sxm-1x8")
    flops = 3e12
    profile = uniform_profile(8, forward=2.0, backward_input=2.0, backward_weight=2.0, flops=flops,
                              microbatch_size=2, seq_len=4096, output_bytes=0)
    result = simulate(one_f_one_b(8, 16), profile, cluster)
    seconds = result.iteration_ms / 1e3
    assert result.tokens_per_s == pytest.approx(16 * 2 * 4096 / seconds)
    assert result.mfu == pytest.approx(flops * 16 / seconds / (8 * 989e12))
    assert simulate(one_f_one_b(8, 16), profile).mfu is None


def test_transfers_list_each_boundary_crossing_with_its_link_time():
    cluster = load_cluster_preset("h100-sxm-2x8")
    plan = Plan(2, 1, [Stage((0,), 0), Stage((1,), 1)],
                [[Action(0, "F", 0), Action(0, "B", 0)], [Action(1, "F", 0), Action(1, "B", 0)]])
    profile = uniform_profile(2, output_bytes=50_000_000)
    result = simulate(plan, profile, cluster)
    lag = cluster.transfer_ms(0, 1, 50_000_000)
    transfers = result.transfers()
    assert [(t["kind"], t["src_device"], t["dst_device"]) for t in transfers] == [("activation", 0, 1),
                                                                                    ("gradient", 1, 0)]
    forward, backward = transfers
    assert forward["start_ms"] == pytest.approx(1.0) and forward["end_ms"] == pytest.approx(1.0 + lag)
    assert backward["bytes"] == 50_000_000
    assert result.iteration_ms == pytest.approx(1 + lag + 1 + 2 + lag + 2)


def test_a_cross_node_boundary_pays_the_inter_node_link():
    cluster = load_cluster_preset("h100-sxm-2x8")
    profile = uniform_profile(2, output_bytes=50_000_000)

    def two_devices(second_device):
        actions = [[] for _ in range(16)]
        actions[0] = [Action(0, "F", 0), Action(0, "B", 0)]
        actions[second_device] = [Action(1, "F", 0), Action(1, "B", 0)]
        return Plan(16, 1, [Stage((0,), 0), Stage((1,), second_device)], actions)

    intra = simulate(two_devices(1), profile, cluster).iteration_ms
    inter = simulate(two_devices(8), profile, cluster).iteration_ms
    assert inter - intra == pytest.approx(2 * (cluster.inter_node.transfer_ms(50_000_000)
                                               - cluster.intra_node.transfer_ms(50_000_000)))


def test_an_idle_device_counts_as_bubble():
    plan = one_f_one_b(2, 2)
    plan = Plan(3, 2, plan.stages, plan.actions + [[]])
    result = simulate(plan, uniform_profile(2))
    idle = result.per_device[2]
    assert idle.time.busy_ms == 0.0 and idle.time.warmup_bubble_ms == pytest.approx(result.iteration_ms)
    assert result.bubble_ratio == pytest.approx(sum(s.time.bubble_ms for s in result.per_device)
                                                / (3 * result.iteration_ms))


def test_simulate_rejects_a_plan_for_another_model():
    with pytest.raises(PlanError) as caught:
        simulate(one_f_one_b(2, 2), uniform_profile(3))
    assert caught.value.field == "stages"


def test_simulate_rejects_a_stage_on_a_device_the_cluster_lacks():
    two_devices = one_f_one_b(2, 2)
    # Stage 1 moved to device 9; an 8-device cluster has no such device.
    plan = Plan(10, 2, [two_devices.stages[0], Stage((1,), 9)], [two_devices.actions[0]] + [[]] * 8
                + [two_devices.actions[1]])
    with pytest.raises(PlanError) as caught:
        simulate(plan, uniform_profile(2), load_cluster_preset("h100-sxm-1x8"))
    assert caught.value.field == "stages[1].device"
    assert "8 devices" in caught.value.reason
