"""Clusters by name (``<device>-<nodes>x<gpus per node>``) and the NVLink domain in the cluster format."""

import json

import pytest

from planner.cluster import is_cluster_preset, load_cluster, load_cluster_preset
from planner.errors import SpecError
from planner.hardware import ACCELERATORS

DEVICES = ("h100-sxm", "h800-sxm", "h200-sxm", "b200", "a100-80gb-sxm", "mi300x")


@pytest.mark.parametrize("device", DEVICES)
def test_every_listed_device_builds_a_cluster_of_any_size_by_name(device):
    cluster = load_cluster_preset(f"{device}-1024x8")
    assert cluster.num_devices == 8192
    assert cluster.nodes == 1024 and cluster.devices_per_node == 8
    assert cluster.domain_size == 8
    assert cluster.device.memory_bytes >= 80 * 10**9
    assert cluster.intra_node.bandwidth_gb_s > cluster.inter_node.bandwidth_gb_s


def test_a_named_h100_cluster_has_the_datasheet_figures():
    cluster = load_cluster_preset("h100-sxm-1024x8")
    assert cluster.device.peak_tflops == 989.0
    assert cluster.device.memory_bytes == 80 * 2**30
    # 8 x 400 Gb/s ConnectX-7 per node: one 400 Gb/s NIC, 50 GB/s, per GPU
    assert cluster.inter_node.bandwidth_gb_s == pytest.approx(400 / 8)
    assert cluster.intra_node.bandwidth_gb_s == 450.0   # NVLink 4: 900 GB/s both directions


def test_named_h100_matches_the_shipped_h100_file_on_everything_but_the_name():
    named = load_cluster_preset("h100-sxm-2x8").to_dict()
    shipped = json.loads(json.dumps(load_cluster_preset("h100-sxm-16x8").to_dict()))
    for doc in (named, shipped):
        doc.pop("name"), doc.pop("nodes"), doc.pop("nvlink_domain", None)
    assert named == shipped


def test_the_shipped_preset_files_still_load_by_name():
    assert load_cluster_preset("h100-sxm-1x8").name == "1 node x 8 H100 SXM"
    assert load_cluster_preset("cpu-host").device.name


def test_links_follow_the_nvlink_domain_not_the_node():
    doc = load_cluster_preset("b200-18x4").to_dict()
    doc["nvlink_domain"] = 72   # a GB200 NVL72 rack: 18 trays of 4 GPUs on one NVLink switch
    rack = load_cluster(doc)
    assert rack.link(0, 71) == rack.intra_node
    assert rack.link(3, 4) == rack.intra_node     # different nodes, same domain
    plain = load_cluster_preset("b200-18x4")
    assert plain.link(3, 4) == plain.inter_node


def test_an_nvlink_domain_that_does_not_tile_the_nodes_is_refused():
    doc = load_cluster_preset("h100-sxm-2x8").to_dict()
    doc["nvlink_domain"] = 12
    with pytest.raises(SpecError) as error:
        load_cluster(doc)
    assert error.value.field == "nvlink_domain"


def test_unknown_names_are_refused_with_the_field_named():
    assert not is_cluster_preset("v100-4x8")
    with pytest.raises(SpecError) as error:
        load_cluster_preset("v100-4x8")
    assert error.value.field == "cluster" and "h100-sxm-1024x8" in error.value.reason
    with pytest.raises(SpecError) as error:
        load_cluster_preset("h100-sxm-0x8")
    assert error.value.field == "cluster"


def test_the_cli_takes_a_named_cluster(tmp_path, capsys):
    from planner.cli import main

    assert main(["profile", "--model", "tiny-llama", "--cluster", "mi300x-2x8", "--out", str(tmp_path / "p.json")]) == 0
    assert json.loads((tmp_path / "p.json").read_text())["device"] == ACCELERATORS["mi300x"].device_name


def test_a_local_cpu_cluster_is_the_cpu_host_preset_with_as_many_ranks_as_named():
    host = load_cluster_preset("cpu-host")
    for name, nodes, ranks in (("cpu-1x8", 1, 8), ("cpu-2x3", 2, 3)):
        assert is_cluster_preset(name)
        cluster = load_cluster_preset(name)
        assert (cluster.name, cluster.nodes, cluster.devices_per_node) == (name, nodes, ranks)
        assert cluster.device == host.device and cluster.intra_node == host.intra_node
    with pytest.raises(SpecError) as error:
        load_cluster_preset("cpu-0x8")
    assert error.value.field == "cluster" and "must be >= 1" in error.value.reason
