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
from planner.cost.mlp import expert_projection
from planner.cost.roofline import (Split, attention_efficiency, bandwidth_bytes_per_ms, compute_rate_flops_per_ms,
                                   gemm_efficiency, grouped_efficiency, kernel_efficiency, local_gemm, roofline_ms,
                                   split_bytes)
from planner.cost.work import AttentionShape, Gemm
from planner.errors import SpecError
from planner.hardware import named_cluster_document
from planner.cost.analytic import layer_cost
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


def test_an_fp8_grouped_gemm_pays_what_fp8_costs_a_dense_product_of_its_k():
    """The grouped curve is measured in BF16; in FP8 it is taken at the FP8 peak with the dense rule's FP8 plateau and
    k cost (fill and drain twice as long), not at twice the BF16 rate."""
    ratios = []
    for k in (768, 2048, 7168):
        grouped = grouped_efficiency(2048, 1.0, True, k) / grouped_efficiency(2048, 1.0)
        dense = gemm_efficiency(16384, 16384, k, 132, 1.0, True) / gemm_efficiency(16384, 16384, k, 132, 1.0)
        assert grouped == pytest.approx(dense)
        ratios.append(grouped)
    assert ratios[0] < ratios[1] < ratios[2] < 0.93   # a short k loop costs FP8 more
    assert grouped_efficiency(2048, 1.0, True, 768) == pytest.approx(grouped_efficiency(2048, 1.0) * 0.93 * 0.6 / 0.8)


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


def test_a_gpu_reads_the_weights_it_holds_its_experts_under_ep_and_its_tp_shard_on_every_cp_rank():
    """The bytes term of ``roofline_ms`` counts the layer whole (one GPU's bytes times TP x CP): activations divide
    with the tokens, weights as they are sharded. Counted by hand for DeepSeek-V3's up-projection (256 experts of
    7,168 x 4,096 bf16 weights) and a Llama 70B MLP's (8,192 x 28,672)."""
    experts, d_in, d_out, tokens = 256, 7168, 4096, 4096 * 8
    cost = expert_projection(routed_tokens=tokens, d_in=d_in, d_out=d_out, experts=experts, top_k=8, dtype_bytes=2)
    forward, _, weight_gradient = cost.forward[0], cost.backward_input[0], cost.backward_weight[0]
    activations = 2 * tokens * (d_in + d_out)
    assert forward.bytes == activations + 2 * experts * d_in * d_out
    for split in (Split(tp=2, ep=64), Split(tp=1, ep=8), Split(tp=4, cp=2, ep=32, etp=2)):
        shards = split.tp * split.cp
        held = experts // split.ep * d_in * d_out // split.etp       # one GPU's experts, each cut by ETP
        assert split_bytes(forward, split) / shards == pytest.approx(activations / shards + 2 * held)
        assert split_bytes(weight_gradient, split) / shards == pytest.approx(activations / shards + 8 * held)
    # 64 tokens over 256 experts: each GPU of EP 8 (32 experts) sees 64 x 8 = 512 routed tokens, all its experts
    few = expert_projection(routed_tokens=64, d_in=d_in, d_out=d_out, experts=experts, top_k=8, dtype_bytes=2)
    assert (split_bytes(few.forward[0], Split(ep=8)) - 2 * 64 * (d_in + d_out)) == 2 * 32 * d_in * d_out
    # 8 routed tokens a GPU: the EP group's 64 spread over 256 experts, a GPU's 32 receive 8, so 8 of them are read
    fewer = expert_projection(routed_tokens=8, d_in=d_in, d_out=d_out, experts=experts, top_k=8, dtype_bytes=2)
    assert split_bytes(fewer.forward[0], Split(ep=8)) - 2 * 8 * (d_in + d_out) == pytest.approx(2 * 8 * d_in * d_out)
    dense = linear(8192, 8192, 28672, 2).forward[0]
    weights = 2 * 8192 * 28672
    assert split_bytes(dense, Split()) == dense.bytes
    # TP 8 x CP 2: 16 GPUs each read an eighth of the weights, the CP pair the same eighth
    assert split_bytes(dense, Split(tp=8, cp=2)) / 16 == pytest.approx((dense.bytes - weights) / 16 + weights / 8)
    router = linear(8192, 8192, 256, 2, parallel="replicated", fp8=False).forward[0]
    assert split_bytes(router, Split(tp=8)) / 8 == pytest.approx((router.bytes - 2 * 8192 * 256) / 8 + 2 * 8192 * 256)
    # DeepSeek-V3's grouped GEMMs on one GPU of TP 2 x EP 64 in FP8 (4 experts, 4,096 tokens each) are compute-bound
    # (were each GPU to read 128 experts' weights, as the layer's bytes divided by TP alone would say, they would not)
    dsv3 = replace(load_model_preset("deepseek-v3"), micro_batch_size=1, seq_len=4096)
    moe = next(layer for layer in dsv3.layers if type(layer.mlp).__name__ == "MoEMLP")
    split = Split(tp=2, ep=64)
    grouped = [kernel for kernel in layer_cost(moe, dsv3).forward if isinstance(kernel.shape, Gemm)
               and kernel.shape.experts]
    assert len(grouped) == 2
    for kernel in grouped:
        rate = compute_rate_flops_per_ms(H100.device, kernel_efficiency(kernel, H100.device, split, fp8=True), fp8=True)
        assert roofline_ms(kernel, H100.device, split, fp8=True) == pytest.approx(kernel.flops / rate)
        assert kernel.bytes / 2 / bandwidth_bytes_per_ms(H100.device) > kernel.flops / rate


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
