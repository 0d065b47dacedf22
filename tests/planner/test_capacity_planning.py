"""Capacity planning: the best configuration at each GPU count, and the days and GPU-hours a token budget costs
there, checked against the hybrid search run on its own at that count."""

import json

import pytest

from planner.cluster import load_cluster_preset
from planner.errors import SpecError
from planner.parallel.capacity import (DEFAULT_GPU_COUNTS, MAX_GPU_COUNTS, capacity_check, capacity_sweep,
                                       cluster_of)
from planner.parallel.search import SearchCancelled, search
from planner.spec.presets import load_model_preset

H100 = load_cluster_preset("h100-sxm-1x8")
LLAMA = load_model_preset("llama-3-8b")
MIXTRAL = load_model_preset("mixtral-8x7b")
TOKENS = 15 * 10**12   # Llama 3's pre-training, about


def test_each_count_is_the_template_grown_to_the_nodes_it_needs():
    for gpus, nodes in ((8, 1), (12, 2), (16_384, 2048)):
        cluster = cluster_of(H100, gpus)
        assert (cluster.nodes, cluster.num_devices >= gpus) == (nodes, True)
        assert (cluster.device, cluster.intra_node, cluster.inter_node, cluster.nvlink_domain) == (
            H100.device, H100.intra_node, H100.inter_node, H100.nvlink_domain)


def test_days_and_gpu_hours_are_the_token_budget_over_the_best_configurations_throughput():
    result = capacity_sweep(LLAMA, H100, (64, 256), 4096, 1024, TOKENS)
    assert [point["gpus"] for point in result["points"]] == [64, 256]
    for point in result["points"]:
        alone = search(LLAMA, cluster_of(H100, point["gpus"]), point["gpus"], 4096, 1024, refine=False).best
        tokens_per_s = 1024 * 4096 / (alone.iteration_ms / 1e3)
        assert point["short"] == alone.config.short()
        assert point["days"] == pytest.approx(TOKENS / tokens_per_s / 86400, rel=1e-9)
        assert point["gpu_hours"] == pytest.approx(point["gpus"] * TOKENS / tokens_per_s / 3600, rel=1e-9)
        assert sum(point["predicted"]["breakdown_ms"].values()) == pytest.approx(point["predicted"]["iteration_ms"])
    fewer, more = result["points"]
    assert more["days"] < fewer["days"], "four times the GPUs train an 8 B model sooner"
    assert result["fastest_gpus"] == 256
    fewest = min(point["gpu_hours"] for point in result["points"])
    as_cheap = [point for point in result["points"] if point["gpu_hours"] <= 1.01 * fewest]
    assert result["cheapest_gpus"] == max(as_cheap, key=lambda point: point["gpus"])["gpus"]


def test_a_count_without_a_configuration_says_why_and_the_others_are_planned():
    result = capacity_sweep(MIXTRAL, H100, (64, 1), 4096, 256, TOKENS)   # 47 B parameters on one GPU
    one, sixty_four = result["points"]
    assert one["gpus"] == 1 and one["error"]["field"] == "memory" and "no configuration fits" in one["error"]["reason"]
    assert "short" in sixty_four and result["fastest_gpus"] == result["cheapest_gpus"] == 64


def test_a_sweep_where_no_count_has_a_configuration_is_an_error_naming_the_field():
    with pytest.raises(SpecError) as error:
        capacity_sweep(MIXTRAL, H100, (1, 2), 4096, 256, TOKENS)
    assert error.value.field == "memory"
    assert "none of the 2 GPU counts of the sweep has a configuration; at 2 GPUs" in str(error.value)


@pytest.mark.parametrize("counts, budget, field", [
    ([], TOKENS, "gpu_counts"), ([0], TOKENS, "gpu_counts"), ([64, "128"], TOKENS, "gpu_counts"),
    ([64, True], TOKENS, "gpu_counts"), (list(range(1, MAX_GPU_COUNTS + 2)), TOKENS, "gpu_counts"),
    ([64], 0, "token_budget"), ([64], 1.5e12, "token_budget"), ([64], 10**16, "token_budget")])
def test_bad_counts_and_budgets_name_their_field(counts, budget, field):
    with pytest.raises(SpecError) as error:
        capacity_check(counts, budget)
    assert error.value.field == field


def test_counts_are_taken_distinct_and_ascending_and_default_to_64_through_16384():
    assert capacity_check([256, 64, 256], 10)[0] == (64, 256)
    assert DEFAULT_GPU_COUNTS[0] == 64 and DEFAULT_GPU_COUNTS[-1] == 16_384
    assert all(larger == 2 * smaller for smaller, larger in zip(DEFAULT_GPU_COUNTS, DEFAULT_GPU_COUNTS[1:]))


def test_a_cancel_keeps_the_counts_searched_and_one_before_any_count_raises():
    with pytest.raises(SearchCancelled):
        capacity_sweep(LLAMA, H100, (64, 128), 4096, 1024, TOKENS, cancel=lambda: True)
    asked = []
    result = capacity_sweep(LLAMA, H100, (64, 128, 256), 4096, 1024, TOKENS,
                            cancel=lambda: asked.append(1) or len(asked) > 1)
    assert result["cancelled"] and [point["gpus"] for point in result["points"]] == [64]
    # cancelled after counts of which none had a configuration: nothing to show, as before the first count
    asked.clear()
    with pytest.raises(SearchCancelled):
        capacity_sweep(MIXTRAL, H100, (1, 2, 64), 4096, 256, TOKENS, cancel=lambda: asked.append(1) or len(asked) > 2)


def test_the_cli_sweeps_the_counts_and_names_a_bad_field(tmp_path, capsys):
    from planner.cli import EXIT_INVALID_INPUT, main

    out = tmp_path / "capacity.json"
    assert main(["capacity", "--model", "llama-3-8b", "--cluster", "h100-sxm-1x8", "--token-budget", "15e12",
                 "--gpu-counts", "128,64", "--seq-len", "4096", "--global-batch", "1024", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [point["gpus"] for point in result["points"]] == [64, 128] and result["token_budget"] == TOKENS
    assert json.loads(capsys.readouterr().out)["fastest_gpus"] == 128
    assert main(["capacity", "--model", "llama-3-8b", "--cluster", "h100-sxm-1x8", "--token-budget", "0",
                 "--seq-len", "4096", "--global-batch", "1024"]) == EXIT_INVALID_INPUT
    assert json.loads(capsys.readouterr().err)["error"]["field"] == "token_budget"
