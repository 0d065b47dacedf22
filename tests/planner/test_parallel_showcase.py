"""The three jobs the issue names, planned end to end: each fits, uses every GPU, and its throughput and MFU
agree with an independent count (6 FLOPs per active parameter and token, Kaplan et al. 2020)."""

import json

import pytest

from planner.cost.analytic import active_parameters
from planner.parallel.planning import search
from planner.plan import load_plan
from planner.spec.presets import load_model_preset

# (model, cluster, GPUs, sequence, global batch): DeepSeek-V3's batch is its report's 15,360 sequences of 4K
# (Sec. 4.2); the others take 2M-4M tokens per step, as usual at this scale.
SHOWCASE = [
    ("qwen3-next-80b-a3b", "h100-sxm-8x8", 64, 4096, 512),
    ("deepseek-v3", "h800-sxm-256x8", 2048, 4096, 15360),
    ("minimax-text-01", "h100-sxm-32x8", 256, 4096, 1024),
]


@pytest.mark.parametrize("name, cluster, gpus, seq_len, batch", SHOWCASE, ids=[case[0] for case in SHOWCASE])
def test_the_showcase_job_is_planned_fitting_with_its_throughput_and_mfu(name, cluster, gpus, seq_len, batch):
    result = search(name, cluster, gpus, seq_len, batch, refine=False)   # (refined: test_parallel_search.py)
    best = result.best
    config = best.config
    assert config.num_gpus == gpus and config.global_batch == batch
    assert best.fits and not best.estimated
    assert all(memory.total <= memory.capacity for memory in best.memory)

    metrics = best.metrics()
    tokens = batch * seq_len
    assert metrics["tokens_per_s"] == pytest.approx(tokens / (metrics["iteration_ms"] / 1e3))
    model = load_model_preset(name)
    # the input embedding is a lookup, no FLOPs (Kaplan et al. leave embeddings out of N)
    six_n = 6 * (active_parameters(model) - model.vocab_size * model.hidden_size) * tokens
    peak = 989e12 * gpus
    step_s = metrics["iteration_ms"] / 1e3
    # model FLOPs = 6·N_active per token plus attention's share (at 4K tokens, under half again)
    assert six_n / step_s / peak <= metrics["mfu"] <= 1.5 * six_n / step_s / peak
    assert 0.1 < metrics["mfu"] < 0.6
    assert metrics["hardware_tflops_per_gpu"] >= metrics["mfu"] * 989 * 0.999

    plan = load_plan(json.loads(json.dumps(result.plan_document())))
    assert plan.parallel == config and plan.num_devices == config.pp
