"""The link fit turns (bytes, one-way ms) samples into the latency and bandwidth the simulator charges."""

import pytest

from executor.measuring.linkprobe import fit_link, local_cluster, measure_link, median_probe, message_overhead_us
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


def test_message_overhead_is_half_of_what_an_exchange_adds_beyond_compute_and_the_idle_transfer():
    exchange = {"idle_one_way_ms": 0.1, "compute_ms": 2.0, "compute_and_exchange_ms": 2.7}
    assert message_overhead_us(exchange) == pytest.approx(300.0)
    # a round that came out faster than compute plus the idle transfer is noise, not a negative cost
    assert message_overhead_us({**exchange, "compute_and_exchange_ms": 2.05}) == 0.0


def test_local_cluster_charges_the_measured_overhead_on_each_end_of_a_message():
    cluster = load_cluster(local_cluster(2, {"latency_us": 80.0, "bandwidth_gb_s": 1.0, "overhead_us": 250.0}))
    assert cluster.message_overhead_ms(0, 1) == pytest.approx(0.25)
    assert cluster.message_overhead_ms(0, 0) == 0.0


def test_probe_measures_gloo_between_two_real_ranks():
    link = measure_link(sizes=(4, 256 << 10), rounds=5)
    assert link["bandwidth_gb_s"] > 0 and link["latency_us"] >= 0 and link["overhead_us"] >= 0
    exchange = link["exchange"]
    # the lockstep rounds ran on both ranks and were timed (how long each took is the host's, not a test's: compared
    # with each other, timings taken seconds apart on a loaded host failed this test once in a parallel run)
    assert exchange["compute_ms"] > 0 and exchange["compute_and_exchange_ms"] > 0 and exchange["idle_one_way_ms"] > 0
    assert exchange["bytes"] > 0
    assert [sample["bytes"] for sample in link["samples"]] == [4, 256 << 10]


def test_several_launches_take_each_quantity_median():
    probes = [{"one_way_ms": [0.03, 0.3], "exchange": {"compute_ms": 2.0, "compute_and_exchange_ms": 2.2,
                                                        "idle_one_way_ms": 0.04, "bytes": 16384}},
              {"one_way_ms": [0.05, 0.2], "exchange": {"compute_ms": 2.1, "compute_and_exchange_ms": 3.9,
                                                        "idle_one_way_ms": 0.03, "bytes": 16384}},
              {"one_way_ms": [0.04, 0.4], "exchange": {"compute_ms": 1.9, "compute_and_exchange_ms": 2.3,
                                                        "idle_one_way_ms": 0.05, "bytes": 16384}}]
    merged = median_probe(probes)
    assert merged["one_way_ms"] == [0.04, 0.3]
    assert merged["exchange"] == {"compute_ms": 2.0, "compute_and_exchange_ms": 2.3, "idle_one_way_ms": 0.04,
                                  "bytes": 16384}
    # the one launch whose exchange round was slow does not set the overhead: (2.3 - 2.0 - 0.04) / 2 ms
    assert message_overhead_us(merged["exchange"]) == pytest.approx(130.0)


def test_launches_must_be_positive():
    with pytest.raises(ValueError, match="launches"):
        measure_link(launches=0)


def test_fit_link_minimises_the_relative_error_so_small_messages_keep_their_cost():
    # gloo on loopback as measured here: small messages near 0.1 ms, a 512 KiB one as slow as 2 MiB.
    sizes = [4, 64 << 10, 512 << 10, 2 << 20]
    times = [0.0916, 0.1215, 1.8617, 1.925]
    link = fit_link(sizes, times)
    latency, per_byte = link["latency_us"] * 1e-3, 1e-6 / link["bandwidth_gb_s"]
    relative = [(latency + per_byte * n - t) / t for n, t in zip(sizes, times)]
    # Optimality, checked independently of the fit: both partial derivatives of sum(relative^2) vanish.
    assert sum(r / t for r, t in zip(relative, times)) == pytest.approx(0.0, abs=1e-9)
    assert sum(r * n / t for r, n, t in zip(relative, sizes, times)) == pytest.approx(0.0, abs=1e-3)
    # And what it is for: the small messages the CPU-scale models send are charged about what they took.
    assert abs(relative[0]) < 0.15 and abs(relative[1]) < 0.25


def test_fit_link_rejects_samples_it_cannot_fit():
    with pytest.raises(ValueError, match="two distinct message sizes"):
        fit_link([1024, 1024], [0.1, 0.1])
    with pytest.raises(ValueError, match="positive"):
        fit_link([4, 1024], [0.1, 0.0])
