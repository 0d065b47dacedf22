"""Kernel rates by shape (planner.cost.roofline) against the kernels measured on an H100
(benchmarks/gpu_kernels.py, benchmarks/results/gpu_kernels_h100.json): GEMMs in BF16 and FP8, grouped expert GEMMs and
fused attention; and what tensor, context and expert parallelism do to the shapes, checked by hand."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from planner.cluster import load_cluster, load_cluster_preset
from planner.cost.primitives import linear
from planner.cost.roofline import (Split, attention_efficiency, gemm_efficiency, grouped_efficiency, kernel_efficiency,
                                   local_gemm)
from planner.cost.work import AttentionShape, Gemm
from planner.errors import SpecError
from planner.hardware import named_cluster_document
from planner.parallel.cost import CostOptions, layer_work
from planner.spec.presets import load_model_preset

MEASURED = json.loads((Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "gpu_kernels_h100.json")
                      .read_text())
H100 = load_cluster_preset("h100-sxm-1x8")
# the file's kernels were timed in ~20 ms bursts, whose plateau the shape rules were fitted with; the device's
# efficiency is the sustained one (planner/hardware.py: 0.75 x 0.68 / 0.71)
PLATEAU = 0.75
SUSTAINED = 676 / 989    # the file's sustained 8192^3 loop
BF16_PEAK, FP8_PEAK, SMS = 989.0, 1979.0, 132


def relative_errors(pairs):
    return [abs(model / measured - 1) for model, measured in pairs]


def test_the_measured_table_is_an_h100s_and_the_devices_plateau_is_its_sustained_rate():
    assert MEASURED["gpu"] == "NVIDIA H100 80GB HBM3" and MEASURED["multiprocessors"] == SMS
    assert H100.device.multiprocessors == SMS and H100.device.peak_tflops == BF16_PEAK
    assert statistics.median(row["tflops"] for row in MEASURED["sustained"]) / BF16_PEAK == pytest.approx(SUSTAINED,
                                                                                                      abs=0.005)
    # the device's efficiency puts an 8192^3 product at the sustained rate
    assert gemm_efficiency(8192, 8192, 8192, SMS, H100.device.efficiency) == pytest.approx(SUSTAINED, rel=0.01)


@pytest.mark.parametrize("section, peak, fp8, median_bound, p90_bound", [
    ("gemm", BF16_PEAK, False, 0.05, 0.17),
    ("fp8", FP8_PEAK, True, 0.07, 0.20),
])
def test_gemm_rates_follow_the_measured_ones_for_training_shapes(section, peak, fp8, median_bound, p90_bound):
    """Over the products a training step runs (>= 1,024 tokens, both widths >= 512), the model is within a few
    percent of the H100's measured rate in the median."""
    rows = [row for row in MEASURED[section] if row["m"] >= 1024 and row["n"] >= 512 and row["k"] >= 512]
    assert len(rows) > 200
    errors = relative_errors((gemm_efficiency(row["m"], row["n"], row["k"], SMS, PLATEAU, fp8),
                              row["tflops"] / peak) for row in rows)
    assert statistics.median(errors) < median_bound
    assert sorted(errors)[int(0.9 * len(errors))] < p90_bound


def test_small_products_run_far_below_the_plateau_as_measured():
    """A 128-token product and a skinny one (what TP8 and small micro-batches make) are slow on the GPU and in the
    model alike: both under half the plateau."""
    for m, n, k in ((256, 1024, 4096), (512, 512, 4096), (1024, 256, 4096)):
        measured = next(row for row in MEASURED["gemm"] if (row["m"], row["n"], row["k"]) == (m, n, k))
        model = gemm_efficiency(m, n, k, SMS, PLATEAU)
        assert measured["tflops"] / BF16_PEAK < 0.5 * PLATEAU and model < 0.5 * PLATEAU
        assert model == pytest.approx(measured["tflops"] / BF16_PEAK, rel=0.2)


def test_wave_quantisation_one_tile_more_than_the_multiprocessors_takes_a_second_wave():
    # 132 tiles of 128 x 256 fill one wave; 133 need two, each SM then busy 133/264 of the time
    full = gemm_efficiency(128 * 132, 256, 8192, SMS, 1.0)
    spill = gemm_efficiency(128 * 133, 256, 8192, SMS, 1.0)
    k_factor = 8192 / (8192 + 192)
    assert full == pytest.approx(k_factor)
    assert spill == pytest.approx(133 / 264 * k_factor)


def test_grouped_expert_gemms_follow_the_measured_rates_by_tokens_per_expert():
    rows = MEASURED["grouped"]
    errors = relative_errors((grouped_efficiency(row["tokens_per_expert"], PLATEAU), row["tflops"] / BF16_PEAK)
                             for row in rows)
    assert statistics.median(errors) < 0.06 and max(errors) < 0.25
    # 64 tokens per expert run at about a quarter of 1,024's
    assert grouped_efficiency(64, 1.0) / grouped_efficiency(1024, 1.0) == pytest.approx(0.25, rel=0.1)


@pytest.mark.parametrize("backend, kernel", [("cudnn", "cudnn"), ("flash", "flash2")])
def test_attention_follows_the_measured_rates_by_sequence_and_head_dimension(backend, kernel):
    rows = [row for row in MEASURED["attention"] if row.get("backend") == backend and "error" not in row]
    for backward, key in ((False, "forward_tflops"), (True, "backward_tflops")):
        pairs = [(attention_efficiency(AttentionShape(row["head_dim"], row["seq"], backward), 1, PLATEAU, kernel),
                  row[key] / BF16_PEAK) for row in rows if row["seq"] >= 2048]
        errors = relative_errors(pairs)
        assert statistics.median(errors) < 0.06 and max(errors) < 0.2, (key, errors)


def test_flash_attention_2_runs_at_about_half_cudnns_rate_on_hopper():
    shape = AttentionShape(128, 8192)
    assert attention_efficiency(shape, 1, 1.0, "flash2") / attention_efficiency(shape, 1, 1.0) == pytest.approx(
        0.5, abs=0.05)
    with pytest.raises(SpecError) as error:
        CostOptions(attention_kernel="flash3")
    assert error.value.field == "attention_kernel" and "cudnn, flash2" in error.value.reason


def test_tensor_parallelism_shrinks_the_split_dimension_and_sequence_parallelism_the_tokens():
    forward, backward, weight = (kernel.shape for kernel in
                                 linear(8192, 4096, 14336, 2).forward + linear(8192, 4096, 14336, 2).backward_input
                                 + linear(8192, 4096, 14336, 2).backward_weight)
    split = Split(tp=8, cp=2)
    assert local_gemm(forward, split)[0] == [4096, 14336 / 8, 4096]     # column-parallel: outputs over TP
    assert local_gemm(backward, split)[0] == [4096, 4096, 14336 / 8]
    assert local_gemm(weight, split)[0] == [14336 / 8, 4096, 4096]      # the tokens are W's k
    row = linear(8192, 14336, 4096, 2, parallel="row").forward[0].shape
    assert local_gemm(row, split)[0] == [4096, 4096, 14336 / 8]
    router = linear(8192, 4096, 128, 2, parallel="replicated").forward[0].shape
    assert local_gemm(router, split)[0] == [8192 / 16, 128, 4096]       # each TP rank routes its sequence shard


def test_expert_parallelism_gathers_more_tokens_per_expert():
    # 4,096 tokens routed 8 ways over 128 experts: 256 per expert on one GPU; EP 8 x ETP 1 under TP 1: 2,048
    gemm = Gemm(4096 * 8, 768, 2048, token_dim=0, tp_dim=1, experts=128)
    assert local_gemm(gemm, Split())[1] == 256
    assert local_gemm(gemm, Split(ep=8))[1] == 2048
    assert local_gemm(gemm, Split(tp=2, ep=8, etp=2))[1] == 2048 and local_gemm(gemm, Split(tp=2, ep=8, etp=2))[0][1] \
        == 768 / 2
    qwen = load_model_preset("qwen3-30b-a3b")
    alone, spread = (layer_work(qwen, H100, 1, 4096, split=split)[1] for split in (Split(), Split(ep=8)))
    # the same FLOPs at a better rate: at 256 tokens per expert the grouped GEMMs run at 0.71 of their 2,048 rate
    assert spread.model_flops == alone.model_flops
    assert spread.forward.roofline_ms < alone.forward.roofline_ms


def test_a_device_without_multiprocessors_runs_every_gemm_at_its_efficiency():
    flat = replace(H100.device, multiprocessors=0)
    kernel = linear(128, 256, 256, 2).forward[0]
    assert kernel_efficiency(kernel, flat) == flat.efficiency
    assert kernel_efficiency(kernel, H100.device) < 0.05


def test_multiprocessors_is_a_cluster_field_with_its_checks():
    doc = named_cluster_document("h100-sxm-2x8")
    assert doc["device"]["multiprocessors"] == SMS
    assert load_cluster(doc).device.to_dict()["multiprocessors"] == SMS
    for bad, reason in ((-1, "must be >= 0"), (1.5, "must be an integer"), (1 << 13, "must be <= 4,096")):
        with pytest.raises(SpecError) as error:
            load_cluster({**doc, "device": {**doc["device"], "multiprocessors": bad}})
        assert error.value.field == "device.multiprocessors" and reason in error.value.reason
    without = {**doc, "device": {key: value for key, value in doc["device"].items() if key != "multiprocessors"}}
    assert load_cluster(without).device.multiprocessors == 0
    assert math.isclose(load_cluster(without).device.efficiency, H100.device.efficiency)
