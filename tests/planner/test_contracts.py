"""Loaders of the shared formats: profiles, clusters and plans round-trip and reject bad fields by name."""

import copy

import pytest

from planner.cluster import load_cluster, load_cluster_preset, preset_names
from planner.errors import SpecError
from planner.plan import Action, load_plan
from planner.profile import load_profile

PROFILE_DOC = {
    "format": "adaptis.profile/v1", "model": "m", "device": "H100", "time_unit": "ms",
    "microbatch": {"size": 2, "seq_len": 128},
    "layers": [
        {"name": "embed", "kind": "embedding", "forward": 0.5, "backward_input": 0.0, "backward_weight": 0.25,
         "activation_bytes": 10, "output_bytes": 20, "param_bytes": 30},
        {"name": "layers.0", "kind": "decoder", "forward": 1.0, "backward_input": 1.0, "backward_weight": 1.0,
         "activation_bytes": 40, "output_bytes": 20, "param_bytes": 50},
    ],
}

PLAN_DOC = {
    "format": "adaptis.plan/v1", "strategy": "1f1b", "num_devices": 2, "num_microbatches": 1,
    "stages": [{"layers": [0], "device": 0}, {"layers": [1], "device": 1}],
    "actions": [["0F0", "0B0"], ["1F0", "1I0", "1W0"]],
}


def test_profile_round_trips_through_its_json_form():
    profile = load_profile(PROFILE_DOC)
    assert profile.microbatch_size == 2 and profile.seq_len == 128
    assert load_profile(profile.to_dict()) == profile
    assert profile.layers[1].backward == 2.0


def test_profile_times_in_microseconds_are_converted_to_milliseconds():
    doc = copy.deepcopy(PROFILE_DOC)
    doc["time_unit"] = "us"
    assert load_profile(doc).layers[0].forward == pytest.approx(0.5e-3)


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.update(format="adaptis.profile/v9"), "format"),
    (lambda d: d["layers"][1].pop("forward"), "layers[1].forward"),
    (lambda d: d["layers"][0].update(backward_input=-1), "layers[0].backward_input"),
    (lambda d: d["layers"][0].update(activation_bytes=1.5), "layers[0].activation_bytes"),
    (lambda d: d.update(layers=[]), "layers"),
    (lambda d: d.update(time_unit="minutes"), "time_unit"),
])
def test_profile_errors_name_the_field(mutate, field):
    doc = copy.deepcopy(PROFILE_DOC)
    mutate(doc)
    with pytest.raises(SpecError) as error:
        load_profile(doc)
    assert error.value.field == field


def test_scaled_profile_multiplies_each_layers_times_by_its_factor():
    profile = load_profile(PROFILE_DOC).scaled([2.0, 0.5])
    assert profile.layers[0].forward == 1.0 and profile.layers[0].backward_weight == 0.5
    assert profile.layers[1].backward_input == 0.5 and profile.layers[1].activation_bytes == 40


def test_every_cluster_preset_loads_and_round_trips():
    assert {"h100-sxm-1x8", "h100-sxm-2x8", "h100-sxm-16x8", "a100-40gb-pcie-1x8", "cpu-host"} <= set(preset_names())
    for name in preset_names():
        cluster = load_cluster_preset(name)
        assert load_cluster(cluster.to_dict()) == cluster


def test_transfers_use_the_link_between_the_two_devices():
    cluster = load_cluster_preset("h100-sxm-2x8")
    nbytes = 64 * 2**20
    assert cluster.transfer_ms(3, 3, nbytes) == 0.0
    intra = nbytes / (cluster.intra_node.bandwidth_gb_s * 1e9) * 1e3 + cluster.intra_node.latency_us / 1e3
    inter = nbytes / (cluster.inter_node.bandwidth_gb_s * 1e9) * 1e3 + cluster.inter_node.latency_us / 1e3
    assert cluster.transfer_ms(0, 7, nbytes) == pytest.approx(intra)
    assert cluster.transfer_ms(7, 8, nbytes) == pytest.approx(inter)


def test_cluster_errors_name_the_field():
    doc = load_cluster_preset("cpu-host").to_dict()
    doc["device"]["efficiency"] = 1.5
    with pytest.raises(SpecError) as error:
        load_cluster(doc)
    assert error.value.field == "device.efficiency"
    doc = load_cluster_preset("cpu-host").to_dict()
    doc["links"]["intra_node"]["bandwidth_gb_s"] = 0
    with pytest.raises(SpecError) as error:
        load_cluster(doc)
    assert error.value.field == "links.intra_node.bandwidth_gb_s"
    doc = load_cluster_preset("cpu-host").to_dict()
    doc["links"]["inter_node"]["overhead_us"] = -5
    with pytest.raises(SpecError, match="must be >= 0") as error:
        load_cluster(doc)
    assert error.value.field == "links.inter_node.overhead_us"
    doc = load_cluster_preset("cpu-host").to_dict()
    doc["device"]["kernel_overhead_us"] = "fast"
    with pytest.raises(SpecError, match="must be a number") as error:
        load_cluster(doc)
    assert error.value.field == "device.kernel_overhead_us"


def test_the_per_kernel_overhead_is_5_us_unless_the_device_says_otherwise_and_round_trips():
    gpu = load_cluster_preset("h100-sxm-1x8")
    assert gpu.device.kernel_overhead_us == 5.0 and "kernel_overhead_us" not in gpu.to_dict()["device"]
    cpu = load_cluster_preset("cpu-host")
    assert cpu.device.kernel_overhead_us > 5.0
    assert load_cluster(cpu.to_dict()) == cpu


def test_message_overhead_round_trips_and_is_charged_only_between_devices():
    doc = load_cluster_preset("cpu-host").to_dict()
    doc["links"]["intra_node"]["overhead_us"] = 250.0
    cluster = load_cluster(doc)
    assert load_cluster(cluster.to_dict()) == cluster
    assert cluster.message_overhead_ms(0, 1) == pytest.approx(0.25)
    assert cluster.message_overhead_ms(1, 1) == 0.0


def test_unknown_cluster_preset_lists_the_known_ones():
    with pytest.raises(SpecError, match="cpu-host"):
        load_cluster_preset("tpu-pod")


def test_plan_round_trips_and_parses_actions():
    plan = load_plan(PLAN_DOC)
    assert plan.actions[1] == [Action(1, "F", 0), Action(1, "I", 0), Action(1, "W", 0)]
    assert plan.stages_on(1) == [1] and plan.uses_split_backward()
    assert load_plan(plan.to_dict()).to_dict() == plan.to_dict()


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["actions"][0].__setitem__(1, "0X0"), "actions[0][1]"),
    (lambda d: d["actions"].pop(), "actions"),
    (lambda d: d["stages"][1].update(layers=[]), "stages[1].layers"),
    (lambda d: d["stages"][1].update(layers=[1, "two"]), "stages[1].layers[1]"),
    (lambda d: d["stages"][0].update(device=-1), "stages[0].device"),
])
def test_plan_errors_name_the_field(mutate, field):
    doc = copy.deepcopy(PLAN_DOC)
    mutate(doc)
    with pytest.raises(SpecError) as error:
        load_plan(doc)
    assert error.value.field == field
