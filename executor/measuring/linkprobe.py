"""Measure the point-to-point link between two local ranks and describe this host as an ``adaptis.cluster/v1``.

Two ranks (``python -m executor.measuring.linkprobe``, launched like the executor's own ranks: one thread each,
rendezvous on a store hosted by the caller) ping-pong tensors with blocking ``send``/``recv`` on the
backend the executor uses. For each message size the one-way time is half the median round trip. A
straight line ``t(n) = latency + n / bandwidth`` fitted through those points (least squares on the relative
error, ``fit_link``) gives the ``Link`` the simulator charges per transfer, so predictions include the real
per-message cost of gloo on loopback (tens of microseconds) instead of a preset's guess.

A ping-pong between idle ranks misses what a message costs a rank that computes: in a pipeline each rank
runs a compute thread that fills its core, and posting a send, completing a receive and waking the waiting
thread then compete with it (on a shared 2-core host that is several hundred microseconds, ten times the idle
latency). So the probe also runs the executor's own pattern in lockstep: both ranks compute for about
``EXCHANGE_COMPUTE_MS``, then exchange one message each way (``batch_isend_irecv``, wait on both), and the
same compute alone. A round with messages takes ``compute + o + transfer + o``, where ``o`` is the time each
end spends on a message on its own stream (LogP's overhead); ``overhead_us`` is that ``o`` beyond what the
idle ping-pong already put into ``latency``: ``(exchange round - compute round - idle one-way time) / 2``.

    .venv/bin/python -m executor.measuring.linkprobe            # prints the measured cluster document
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy

DEFAULT_SIZES = (4, 64 << 10, 512 << 10, 2 << 20)
ROUNDS = 30
WARMUP_ROUNDS = 3
EXCHANGE_BYTES = 16 << 10          # a small activation: the overhead is a per-message cost
EXCHANGE_COMPUTE_MS = 2.0          # about one pipeline action of the small CPU models
EXCHANGE_ROUNDS = 60


def _one_way_ms(size_bytes: int, rank: int, rounds: int) -> float:
    import torch
    import torch.distributed as dist

    payload = torch.zeros(max(1, size_bytes // 4), dtype=torch.float32)
    peer = 1 - rank
    samples = []
    for round_index in range(WARMUP_ROUNDS + rounds):
        began = time.perf_counter()
        if rank == 0:
            dist.send(payload, dst=peer)
            dist.recv(payload, src=peer)
        else:
            dist.recv(payload, src=peer)
            dist.send(payload, dst=peer)
        if round_index >= WARMUP_ROUNDS:
            samples.append((time.perf_counter() - began) * 1e3 / 2)
    return statistics.median(samples)


def _exchange_rounds_ms(rank: int, rounds: int) -> tuple[float, float]:
    """Median (compute-only round, compute-then-exchange round) in ms, both ranks in lockstep."""
    import torch
    import torch.distributed as dist

    peer = 1 - rank
    matrix = torch.randn(128, 128)

    def compute(repeats: int) -> None:
        for _ in range(repeats):
            torch.mm(matrix, matrix)

    # Both ranks run the same number of products: rank 0 sizes it, rank 1 takes its count.
    began = time.perf_counter()
    compute(50)
    per_product_ms = (time.perf_counter() - began) * 1e3 / 50
    repeats = torch.tensor([max(1, round(EXCHANGE_COMPUTE_MS / max(per_product_ms, 1e-6)))])
    dist.broadcast(repeats, src=0)
    repeats = int(repeats.item())
    outgoing = torch.zeros(EXCHANGE_BYTES // 4)
    incoming = torch.empty_like(outgoing)
    alone, exchanged = [], []
    for round_index in range(WARMUP_ROUNDS + rounds):
        dist.barrier()
        began = time.perf_counter()
        compute(repeats)
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, outgoing, peer),
                                        dist.P2POp(dist.irecv, incoming, peer)])
        for work in works:
            work.wait()
        ended = time.perf_counter()
        dist.barrier()
        compute_began = time.perf_counter()
        compute(repeats)
        compute_ended = time.perf_counter()
        if round_index >= WARMUP_ROUNDS:
            exchanged.append((ended - began) * 1e3)
            alone.append((compute_ended - compute_began) * 1e3)
    return statistics.median(alone), statistics.median(exchanged)


def _probe_rank(sizes: list[int], rounds: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    from executor.running.cores import bind_local_rank

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    bind_local_rank(rank, 2, 1)   # as the executor's ranks are bound
    dist.init_process_group("gloo")
    try:
        times = [_one_way_ms(size, rank, rounds) for size in sizes]
        idle_one_way = _one_way_ms(EXCHANGE_BYTES, rank, rounds)
        compute_ms, exchange_ms = _exchange_rounds_ms(rank, EXCHANGE_ROUNDS)
        if rank == 0:
            Path(out).write_text(json.dumps({"one_way_ms": times, "exchange": {
                "bytes": EXCHANGE_BYTES, "idle_one_way_ms": idle_one_way, "compute_ms": compute_ms,
                "compute_and_exchange_ms": exchange_ms}}))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def fit_link(sizes: list[int], one_way_ms: list[float]) -> dict:
    """``t = latency + n / bandwidth`` through (bytes, ms) points -> ``{bandwidth_gb_s, latency_us}``, fitted by
    least squares on the relative error ``(fit - t) / t``.

    Message times span four orders of magnitude and gloo's are not one straight line (on loopback here a
    512 KiB message took as long as a 2 MiB one). Plain least squares lets the large sizes set the line, and
    its intercept then put a 4-byte or 64 KiB message at 450 us when it took 75-120 us: the activations of
    the CPU-scale models are 16-64 KiB, so every transfer was charged several times its cost. Relative error
    weighs every size alike.
    """
    times = numpy.asarray(one_way_ms, dtype=float)
    if len(sizes) < 2 or len(set(sizes)) < 2:
        raise ValueError(f"need at least two distinct message sizes, got {list(sizes)}")
    if not (times > 0).all():
        raise ValueError(f"one-way times must be positive, got {list(one_way_ms)}")
    slope, intercept = numpy.polyfit(numpy.asarray(sizes, dtype=float), times, 1, w=1.0 / times)  # ms/byte, ms
    slope = max(float(slope), 1e-12)
    # slope ms/byte -> bytes/s = 1e3 / slope -> GB/s = 1e-6 / slope
    return {"bandwidth_gb_s": 1e-6 / slope, "latency_us": max(0.0, float(intercept)) * 1e3}


def message_overhead_us(exchange: dict) -> float:
    """Per-message, per-end overhead of a computing rank beyond the idle one-way time (LogP's o), in us."""
    extra_ms = exchange["compute_and_exchange_ms"] - exchange["compute_ms"] - exchange["idle_one_way_ms"]
    return max(0.0, extra_ms / 2) * 1e3


def _probe_once(sizes: tuple[int, ...], rounds: int, timeout_s: float) -> dict:
    """One launch of the two probe ranks: ``{"one_way_ms": [...], "exchange": {...}}``."""
    from executor.running.launch import REPO_ROOT, _rank_env, rendezvous_store

    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "times.json"
        store = rendezvous_store(2)
        processes = [subprocess.Popen([sys.executable, "-m", "executor.measuring.linkprobe", "--rank-of-probe",
                                       str(out), ",".join(map(str, sizes)), str(rounds)],
                                      env=_rank_env(rank, 2, store.port, 1), cwd=REPO_ROOT)
                     for rank in range(2)]
        try:
            codes = [process.wait(timeout=timeout_s) for process in processes]
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        if any(codes):
            raise RuntimeError(f"link probe ranks failed: exit codes {codes}")
        return json.loads(out.read_text())


def median_probe(probes: list[dict]) -> dict:
    """Each measured quantity's median over several probe launches."""
    exchange = {key: statistics.median(probe["exchange"][key] for probe in probes) for key in probes[0]["exchange"]}
    return {"one_way_ms": [statistics.median(times) for times in zip(*(probe["one_way_ms"] for probe in probes))],
            "exchange": exchange}


def measure_link(*, sizes: tuple[int, ...] = DEFAULT_SIZES, rounds: int = ROUNDS, launches: int = 1,
                 timeout_s: float = 120) -> dict:
    """Measure gloo loopback between two local ranks:
    ``{"bandwidth_gb_s", "latency_us", "overhead_us", "samples", "exchange", "launches"}``.

    ``launches``: probe this many times with fresh ranks and take each quantity's median. On a virtual
    machine the overhead of a computing rank is bimodal from one launch to the next (seen here: 63-123 us
    or 840-890 us), far more than it varies within a launch.
    """
    if launches < 1:
        raise ValueError(f"launches must be >= 1, got {launches}")
    measured = median_probe([_probe_once(sizes, rounds, timeout_s) for _ in range(launches)])
    times = measured["one_way_ms"]
    link = fit_link(list(sizes), times)
    link["overhead_us"] = message_overhead_us(measured["exchange"])
    link["samples"] = [{"bytes": size, "one_way_ms": ms} for size, ms in zip(sizes, times)]
    link["exchange"] = measured["exchange"]
    link["launches"] = launches
    return link


def local_cluster(num_devices: int, link: dict, *, memory_bytes: int = 16 << 30) -> dict:
    """An ``adaptis.cluster/v1`` document for ``num_devices`` ranks on this host joined by the measured ``link``."""
    measured = {"bandwidth_gb_s": link["bandwidth_gb_s"], "latency_us": link["latency_us"],
                "overhead_us": link.get("overhead_us", 0.0)}
    return {
        "format": "adaptis.cluster/v1",
        "name": f"local host ({platform.node() or 'cpu'}, {os.cpu_count()} cores, measured gloo loopback)",
        "description": "Ranks on this machine over loopback gloo; link measured by executor.measuring.linkprobe.",
        "nodes": 1,
        "devices_per_node": num_devices,
        "device": {"name": "CPU", "memory_bytes": memory_bytes, "peak_tflops": 0.2, "efficiency": 0.3,
                   "memory_bandwidth_gb_s": 20.0},
        "links": {"intra_node": measured, "inter_node": measured},
    }


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank-of-probe":
        from executor.running.processes import die_with_launcher

        die_with_launcher()
        _probe_rank([int(size) for size in sys.argv[3].split(",")], int(sys.argv[4]), sys.argv[2])
    else:
        print(json.dumps(local_cluster(2, measure_link()), indent=2))
