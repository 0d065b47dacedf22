"""The link fit turns (bytes, one-way ms) samples into the latency and bandwidth the simulator charges."""

import pytest

from executor.linkprobe import fit_link, local_cluster
from planner.cluster import load_cluster


def test_fit_link_recovers_latency_and_bandwidth_of_an_exact_line():
    latency_ms, gb_per_s = 0.05, 2.0
    sizes = [4, 1 << 16, 1 << 20, 4 << 20]
    times = [latency_ms + n / (gb_per_s * 1e9) * 1e3 for n in sizes]
    link = fit_link(sizes, times)
    assert link["latency_us"] == pytest.approx(50.0, rel=1e-6)
    assert link["bandwidth_gb_s"] == pytest.approx(2.0, rel=1e-6)


def test_local_cluster_is_a_valid_cluster_whose_transfers_use_the_measured_link():
    cluster = load_cluster(local_cluster(2, {"latency_us": 80.0, "bandwidth_gb_s": 1.0}))
    assert cluster.num_devices == 2
    assert cluster.transfer_ms(0, 1, 1_000_000) == pytest.approx(1.0 + 0.08)
    assert cluster.transfer_ms(1, 1, 1_000_000) == 0.0
