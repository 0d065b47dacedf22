"""Clocks that time actions, aligned across ranks.

Alignment: each rank estimates the offset of its monotonic clock from rank 0's with a few ping-pongs over
the CPU control group (Cristian's algorithm: offset = t_rank0 - (t_send + t_reply) / 2, keeping the round
with the smallest round trip, so the error is at most half that round trip — tens of microseconds on
loopback gloo, a network RTT across hosts). After a barrier rank 0 picks the origin and broadcasts it in its
own clock; every rank reports ``local + offset - origin``. Ranks on rank 0's host (same kernel boot and time
namespace) share its monotonic clock exactly: their offset is 0, not an estimate whose error, half a round
trip, reached half a millisecond on a loaded virtual machine.

On CUDA, work is asynchronous: an action is timed by CUDA events recorded on the compute stream and
converted to host time through a reference event recorded at the origin (``CudaClock``).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

PING_ROUNDS = 8


def _now_ns() -> int:
    return time.monotonic_ns()


def clock_identity() -> str | None:
    """Equal for two processes exactly when they read the same CLOCK_MONOTONIC: the kernel's boot id and the
    process's time-namespace offsets (None where the kernel does not say)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot_id:
            identity = boot_id.read().strip()
    except OSError:
        return None
    try:
        with open("/proc/self/timens_offsets") as offsets:
            identity += "|" + " ".join(offsets.read().split())
    except OSError:
        pass   # a kernel without time namespaces: one monotonic clock per boot
    return identity


def estimate_offset_ns(rank: int, world_size: int, group, shares_clock: list[bool] | None = None) -> int:
    """This rank's clock offset from rank 0 (add it to a local reading to get rank 0's clock).

    ``shares_clock[peer]``: the peer reads rank 0's clock itself (offset exactly 0, no ping-pong); every rank
    must pass the same list.
    """
    best_offset, best_round_trip = 0, None
    probe = torch.zeros(1, dtype=torch.int64)
    for peer in range(1, world_size):
        if shares_clock is not None and shares_clock[peer]:
            continue
        for _ in range(PING_ROUNDS):
            if rank == 0:
                dist.recv(probe, src=peer, group=group)
                dist.send(torch.tensor([_now_ns()], dtype=torch.int64), dst=peer, group=group)
            elif rank == peer:
                sent_at = _now_ns()
                dist.send(probe, dst=0, group=group)
                reply = torch.zeros(1, dtype=torch.int64)
                dist.recv(reply, src=0, group=group)
                received_at = _now_ns()
                round_trip = received_at - sent_at
                if best_round_trip is None or round_trip < best_round_trip:
                    best_round_trip = round_trip
                    best_offset = int(reply.item()) - (sent_at + received_at) // 2
    return best_offset


class HostClock:
    """CPU timing: a mark is the monotonic time itself, already in aligned milliseconds."""

    def __init__(self, offset_ns: int, origin_ns: int):
        self._shift_ns = offset_ns - origin_ns

    def mark(self):
        return _now_ns()

    def to_ms(self, mark) -> float:
        return (mark + self._shift_ns) / 1e6


class CudaClock:
    """GPU timing: a mark is a CUDA event; ``to_ms`` waits for it and converts via the origin event."""

    def __init__(self, offset_ns: int, origin_ns: int, device: torch.device):
        torch.cuda.synchronize(device)
        self._origin_event = torch.cuda.Event(enable_timing=True)
        self._origin_event.record()
        self._origin_event.synchronize()
        self._origin_ms = (_now_ns() + offset_ns - origin_ns) / 1e6

    def mark(self):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def to_ms(self, mark) -> float:
        mark.synchronize()
        return self._origin_ms + self._origin_event.elapsed_time(mark)


def aligned_clock(rank: int, world_size: int, group, device: torch.device):
    """Agree on a run origin with every rank and return (clock, origin as Unix seconds)."""
    identities = [None] * world_size
    dist.all_gather_object(identities, clock_identity(), group=group)
    shares_clock = [identities[0] is not None and identity == identities[0] for identity in identities]
    offset_ns = estimate_offset_ns(rank, world_size, group, shares_clock)
    dist.barrier(group=group)
    origin = torch.tensor([_now_ns(), time.time_ns() // 1000], dtype=torch.int64)
    dist.broadcast(origin, src=0, group=group)
    origin_ns, origin_unix = int(origin[0].item()), origin[1].item() / 1e6
    clock = CudaClock(offset_ns, origin_ns, device) if device.type == "cuda" else HostClock(offset_ns, origin_ns)
    return clock, origin_unix
