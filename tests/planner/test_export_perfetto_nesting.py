"""Perfetto traces whose slices nest on every track: checked on the JSON text, in exact decimals.

The check is independent of the exporter: it reads each written ``ts`` and ``dur`` as the decimal the file
holds (``json.loads(parse_float=Decimal)``), sorts a track's slices by start (longest first on a tie) and keeps
a stack of open slices: every slice must end within the slice it starts inside, or start at or after the end
of every slice it does not start inside. Before rounding was made per end point, 50 traces held about 1,100
neighbouring slices overlapping by up to 1 ns; here there must be none, on baselines and searched plans of
several sizes, with and without a cluster's transfer times.
"""

from __future__ import annotations

import json
from collections import defaultdict
from decimal import Decimal

import pytest

from planner.baselines import BASELINE_SCHEDULES, build_baseline
from planner.cluster import load_cluster_preset
from planner.cost import analytic_profile
from planner.exports import export_plan
from planner.search import search_plan
from planner.spec.presets import load_model_preset

from sched_checks import decoder_profile

SIZES = ((2, 4), (4, 8), (4, 12), (8, 16), (8, 32))


def overlaps_on_tracks(trace_text: str) -> tuple[int, list[str]]:
    """The number of slices checked, and a description of each slice that overlaps a neighbour without nesting."""
    doc = json.loads(trace_text, parse_float=Decimal)
    tracks = defaultdict(list)
    for event in doc["traceEvents"]:
        if event["ph"] == "X":
            start = Decimal(event["ts"])
            tracks[(event["pid"], event["tid"])].append((start, start + Decimal(event["dur"]), event["name"]))
    problems, checked = [], 0
    for track, slices in tracks.items():
        open_slices: list[tuple[Decimal, Decimal, str]] = []
        for start, end, name in sorted(slices, key=lambda s: (s[0], -s[1])):
            checked += 1
            while open_slices and open_slices[-1][1] <= start:
                open_slices.pop()
            if open_slices and end > open_slices[-1][1]:
                parent = open_slices[-1]
                problems.append(f"track {track}: {name} [{start}, {end}] overlaps {parent[2]} "
                                f"[{parent[0]}, {parent[1]}] by {parent[1] - start} us")
            open_slices.append((start, end, name))
    return checked, problems


def _traces():
    synthetic = decoder_profile(24, with_ends=True)
    hybrid = analytic_profile(load_model_preset("tiny-hybrid"), load_cluster_preset("cpu-host"))
    gemma = analytic_profile(load_model_preset("gemma-2-9b"), load_cluster_preset("h100-sxm-2x8"))
    cases = []
    for profile, cluster in ((synthetic, None), (synthetic, load_cluster_preset("h100-sxm-2x8")),
                             (gemma, load_cluster_preset("h100-sxm-2x8"))):
        for devices, microbatches in SIZES:
            for schedule in BASELINE_SCHEDULES:
                cases.append((f"{schedule} {devices}x{microbatches}",
                              build_baseline(schedule, profile, devices, microbatches, cluster=cluster),
                              profile, cluster))
    for profile, cluster, sizes in ((gemma, load_cluster_preset("h100-sxm-2x8"), SIZES[1:]),
                                    (hybrid, load_cluster_preset("cpu-host"), ((2, 8), (4, 8)))):
        for devices, microbatches in sizes:
            result = search_plan(profile, devices, microbatches, cluster=cluster, seed=1, max_evaluations=40)
            cases.append((f"adaptis {profile.model} {devices}x{microbatches}", result.plan, profile, cluster))
    return cases


@pytest.fixture(scope="module")
def traces():
    return [(name, export_plan("perfetto", plan, profile, cluster)) for name, plan, profile, cluster in _traces()]


def test_slices_on_every_track_nest_in_many_exported_traces(traces):
    assert len(traces) >= 50
    total, problems = 0, []
    for name, text in traces:
        checked, found = overlaps_on_tracks(text)
        total += checked
        problems += [f"{name}: {problem}" for problem in found]
    assert total > 20_000, "the traces hold many slices to check"
    assert problems == [], f"{len(problems)} overlapping slices, e.g. {problems[:3]}"


def test_the_check_finds_a_one_nanosecond_overlap():
    trace = {"traceEvents": [
        {"ph": "X", "pid": 0, "tid": 0, "name": "0F0", "ts": 0.0, "dur": 1.001},
        {"ph": "X", "pid": 0, "tid": 0, "name": "0F1", "ts": 1.0, "dur": 2.0},
        {"ph": "X", "pid": 0, "tid": 1, "name": "nested", "ts": 0.0, "dur": 3.0},
        {"ph": "X", "pid": 0, "tid": 1, "name": "inner", "ts": 1.0, "dur": 1.0}]}
    checked, problems = overlaps_on_tracks(json.dumps(trace))
    assert checked == 4 and len(problems) == 1 and "0F1" in problems[0] and "0.001 us" in problems[0]


def test_searched_traces_spread_overlapping_sends_over_named_send_tracks(traces):
    for name, text in traces:
        doc = json.loads(text)
        named = {e["tid"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
        assert {e["tid"] for e in doc["traceEvents"] if e["ph"] == "X"} <= named, name
