"""The hybrid search: what it enumerates, pins, memory pruning, the plan it returns, and the showcase jobs."""

import json

import pytest

from planner.cli import main
from planner.cluster import load_cluster_preset
from planner.errors import SpecError
from planner.parallel.planning import search
from planner.parallel.evaluate import Job
from planner.parallel.search import candidates
from planner.plan import load_plan
from planner.spec.presets import load_model_preset


def test_every_candidate_uses_exactly_the_gpus_and_the_global_batch():
    model = load_model_preset("mixtral-8x7b")
    job = Job(model, load_cluster_preset("h100-sxm-8x8"), 64, 4096, 256)
    space = candidates(job, {})
    assert space
    for config, chunks in space:
        assert config.num_gpus == 64
        assert config.global_batch == 256
        assert 8 % config.ep == 0 and (config.tp * config.dp * config.cp) % (config.etp * config.ep) == 0
        assert config.etp in (1, config.tp) and config.sharding in ("optimizer", "full")
        assert 32 % config.tp == 0 and 8 % config.tp == 0      # heads and key-value heads split evenly
        assert config.tp <= 8                                  # TP stays in the NVLink domain


def test_pins_are_kept_and_the_rest_is_chosen():
    result = search("llama-3-8b", "h100-sxm-4x8", 32, 4096, 64, {"tp": 4, "recompute": "full"}, refine=False)
    for score in [result.best] + result.runners_up:
        assert score.config.tp == 4 and score.config.recompute == "full"
    assert result.best.config.num_gpus == 32


def test_the_best_plan_is_a_v2_plan_of_the_pipeline_ranks_that_loads_back():
    result = search("llama-3-8b", "h100-sxm-4x8", 32, 4096, 128, {"pp": 4}, time_budget_s=10)
    doc = json.loads(json.dumps(result.to_dict()))
    plan_doc = doc["best"]["plan"]
    plan = load_plan(plan_doc)
    assert plan_doc["format"] == "adaptis.plan/v2"
    assert set(plan_doc["parallel"]) >= {"tp", "cp", "pp", "dp", "ep", "microbatch_size", "num_microbatches",
                                         "recompute", "sharding", "precision"}
    assert plan_doc["parallel"].get("vpp") == plan.virtual_stages()
    assert plan.num_devices == plan.parallel.pp == 4
    for key in ("iteration_ms", "tokens_per_s", "mfu", "hardware_tflops_per_gpu", "peak_memory_bytes"):
        assert plan_doc["predicted"][key] > 0
    assert len(doc["best"]["rank_mapping"]["ranks"]) == 32
    assert len(doc["best"]["memory"]) == 4
    # tokens per second is the global batch's tokens over the predicted step
    step_s = plan_doc["predicted"]["iteration_ms"] / 1e3
    assert plan_doc["predicted"]["tokens_per_s"] == pytest.approx(128 * 4096 / step_s)


def test_a_search_never_returns_a_configuration_that_does_not_fit():
    result = search("mixtral-8x7b", "h100-sxm-2x8", 16, 4096, 64, refine=False)
    assert result.pruned_by_memory > 0
    for score in [result.best] + result.runners_up:
        assert score.fits and score.peak_memory_bytes <= 80 * 2**30


def test_a_model_that_cannot_fit_is_refused_with_the_memory_named():
    with pytest.raises(SpecError) as error:
        search("deepseek-v3", "h100-sxm-1x8", 8, 4096, 64, refine=False)
    assert error.value.field == "memory"


@pytest.mark.parametrize("pins, field", [
    ({"tp": 3}, "tp"), ({"ep": 3}, "ep"), ({"recompute": "most"}, "recompute"), ({"zero": 2}, "zero"),
    ({"pp": 1000}, "pp"),
])
def test_bad_pins_name_the_field(pins, field):
    with pytest.raises(SpecError) as error:
        search("mixtral-8x7b", "h100-sxm-2x8", 16, 4096, 64, pins, refine=False)
    assert error.value.field == field


def test_context_parallelism_is_offered_where_megatron_core_splits_the_mixers_over_it():
    """Mamba-2 and gated delta-net split over CP by heads (each TP rank's heads over the CP ranks); Mamba-1 has no CP
    form, so Jamba and Falcon-Mamba are planned without it (the search had crashed scoring their CP candidates) and a
    pinned CP is refused naming the field."""
    for preset in ("jamba-v0.1", "falcon-mamba-7b"):
        job = Job(load_model_preset(preset), load_cluster_preset("h100-sxm-8x8"), 64, 8192, 64)
        space = candidates(job, {})
        assert space and all(config.cp == 1 for config, _ in space)
        with pytest.raises(SpecError) as error:
            search(preset, "h100-sxm-8x8", 64, 8192, 64, {"cp": 2}, refine=False)
        assert error.value.field == "cp" and "Mamba-1" in error.value.reason
    result = search("jamba-v0.1", "h100-sxm-8x8", 64, 8192, 64, {"tp": 2, "pp": 2}, refine=False)
    assert result.best.config.cp == 1 and result.best.fits
    nemotron = load_model_preset("nemotron-h-8b")   # Mamba-2: 128 heads in 8 groups
    job = Job(nemotron, load_cluster_preset("h100-sxm-8x8"), 64, 16384, 64)
    offered = {(config.tp, config.cp) for config, _ in candidates(job, {})}
    assert (8, 8) in offered and (1, 16) in offered   # 128 heads over 64 and 16 GPUs; 1 group a TP 8 rank, repeated


def test_more_gpus_than_the_cluster_has_is_refused():
    with pytest.raises(SpecError) as error:
        search("llama-3-8b", "h100-sxm-1x8", 16, 4096, 64)
    assert error.value.field == "gpus"


def test_the_cli_runs_the_hybrid_search_and_writes_a_v2_plan(tmp_path, capsys):
    out = tmp_path / "plan.json"
    code = main(["search", "--model", "llama-3-8b", "--cluster", "h100-sxm-2x8", "--gpus", "16", "--seq-len", "4096",
                 "--global-batch", "32", "--tp", "2", "--recompute", "selective", "--time-budget", "5",
                 "--out", str(out)])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    doc = json.loads(out.read_text())
    assert doc["format"] == "adaptis.plan/v2" and doc["parallel"]["tp"] == 2
    assert doc["parallel"]["recompute"] == "selective"
    assert summary["parallel"] == doc["parallel"]


def test_the_cli_searches_on_the_framework_it_is_told_and_the_plan_says_which(tmp_path, capsys):
    out = tmp_path / "plan.json"
    args = ["search", "--model", "llama-3-8b", "--cluster", "h100-sxm-2x8", "--gpus", "16", "--seq-len", "4096",
            "--global-batch", "32", "--tp", "2", "--pp", "1", "--cp", "1", "--microbatch-size", "1",
            "--recompute", "none", "--sharding", "optimizer", "--time-budget", "5"]
    assert main([*args, "--framework", "torchtitan", "--out", str(out)]) == 0
    titan = json.loads(out.read_text())
    assert titan["meta"]["framework"] == "torchtitan"
    assert main([*args, "--out", str(out)]) == 0
    megatron = json.loads(out.read_text())
    assert "framework" not in megatron["meta"]
    assert titan["predicted"]["iteration_ms"] > megatron["predicted"]["iteration_ms"]   # FlashAttention-2 on Hopper
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit:
        main([*args, "--framework", "deepspeed"])
    assert exit.value.code == 2
    assert "--framework" in capsys.readouterr().err


def test_the_cli_says_what_the_hybrid_search_is_missing(capsys):
    assert main(["search", "--model", "llama-3-8b", "--gpus", "16"]) == 2
    assert "--cluster" in capsys.readouterr().err


def test_the_cli_names_a_bad_pin(capsys):
    code = main(["search", "--model", "llama-3-8b", "--cluster", "h100-sxm-2x8", "--gpus", "16", "--seq-len", "4096",
                 "--global-batch", "32", "--ep", "2"])
    assert code == 3
    assert json.loads(capsys.readouterr().err)["error"]["field"] == "ep"


def test_recomputation_is_kept_to_the_first_pipeline_ranks_when_that_is_enough():
    job = ("gemma-3-27b", "h100-sxm-2x8", 16, 8192, 64)
    pins = {"tp": 2, "pp": 8, "microbatch_size": 1}
    with pytest.raises(SpecError) as error:
        search(*job, {**pins, "recompute": "none"}, refine=False)
    assert error.value.field == "memory"
    everywhere = search(*job, {**pins, "recompute": "full"}, refine=False).best
    best = search(*job, pins, refine=False).best
    modes = best.config.recompute
    assert not isinstance(modes, str) and modes[0] == "full" and modes[-1] == "none"
    assert len(modes) == len(best.plan.stages)
    assert best.fits and best.iteration_ms < everywhere.iteration_ms
    assert load_plan(json.loads(json.dumps(best.plan.to_dict()))).parallel.recompute == modes


def test_a_v2_plan_is_re_predicted_inside_its_job_from_the_cli(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["search", "--model", "mixtral-8x7b", "--cluster", "h100-sxm-4x8", "--gpus", "32", "--seq-len", "4096",
                 "--global-batch", "128", "--time-budget", "5", "--out", str(out)]) == 0
    searched = json.loads(capsys.readouterr().out)
    assert main(["simulate", str(out), "--model", "mixtral-8x7b", "--cluster", "h100-sxm-4x8"]) == 0
    predicted = json.loads(capsys.readouterr().out)
    assert predicted["parallel"] == searched["parallel"]
    assert predicted["predicted"]["iteration_ms"] == pytest.approx(searched["predicted"]["iteration_ms"])
    assert predicted["predicted"]["peak_memory_bytes"] == searched["predicted"]["peak_memory_bytes"]


def test_a_v2_plan_is_refused_on_a_model_it_cannot_split(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["search", "--model", "mixtral-8x7b", "--cluster", "h100-sxm-4x8", "--gpus", "32", "--seq-len", "4096",
                 "--global-batch", "128", "--ep", "8", "--time-budget", "5", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["simulate", str(out), "--model", "llama-3-8b", "--cluster", "h100-sxm-4x8"]) == 3
    assert json.loads(capsys.readouterr().err)["error"]["field"] == "ep"


def test_a_pinned_vpp_is_megatrons_interleaving_of_that_degree_or_plain_1f1b():
    job = ("llama-3-8b", "h100-sxm-4x8", 32, 4096, 128)
    for vpp, schedule in ((2, "interleaved-1f1b"), (1, "1f1b")):
        result = search(*job, {"pp": 4, "vpp": vpp}, time_budget_s=5)
        for score in [result.best] + result.runners_up:
            assert score.chunks == vpp and score.schedule == schedule, (vpp, score.schedule, score.chunks)
        plan = result.best.plan
        assert {len(plan.stages_on(device)) for device in range(4)} == {vpp}
    # 32 blocks cannot be 4 ranks x 16 virtual stages of a block or more each; nor is there interleaving without PP
    with pytest.raises(SpecError) as error:
        search(*job, {"pp": 4, "vpp": 16}, refine=False)
    assert error.value.field == "vpp" and "need a pipeline of 64 stages" in error.value.reason
    assert "has 32 blocks" in error.value.reason
    with pytest.raises(SpecError) as error:
        search(*job, {"pp": 1, "vpp": 2}, refine=False)
    assert error.value.field == "vpp" and "need pp > 1" in error.value.reason
    with pytest.raises(SpecError) as error:   # pp left to the search: no pipeline takes 32 virtual stages a rank
        search(*job, {"vpp": 32, "dp": 4}, refine=False)
    assert error.value.field == "gpus" and "'vpp': 32" in error.value.reason
    code = main(["search", "--model", "llama-3-8b", "--cluster", "h100-sxm-4x8", "--gpus", "32", "--seq-len", "4096",
                 "--global-batch", "128", "--pp", "4", "--vpp", "2", "--out", "-"])
    assert code == 0


def test_check_refuses_what_the_search_would_without_searching():
    from planner.parallel.planning import check

    with pytest.raises(SpecError) as error:
        check("qwen3-next-80b-a3b", "h100-sxm-1x8", 8, 4096, 512)   # 80 B parameters' 16 bytes over 8 GPUs
    assert error.value.field == "memory" and "no configuration fits" in error.value.reason
    assert check("qwen3-next-80b-a3b", "h100-sxm-8x8", 64, 4096, 512) is None


@pytest.mark.parametrize("gpus, batch, pins, field, reason", [
    (16, 64, {"tp": 2, "pp": 3}, "pp", "tp 2 x pp 3 = 6 does not"),
    (16, 64, {"tp": 2, "cp": 2, "pp": 2, "dp": 1}, "dp", "must equal gpus (16)"),
    (16, 24, {"dp": 16}, "global_batch", "24 sequences cannot be split"),
    (16, 64, {"tp": 0}, "tp", "must be an integer >= 1"),
    (16, 64, {"distributed_optimizer": "yes"}, "distributed_optimizer", "must be true or false"),
    (16, 64, {"vpp": 0}, "vpp", "must be an integer >= 1"),
])
def test_pins_that_cannot_split_the_gpus_or_the_batch_name_the_pin(gpus, batch, pins, field, reason):
    with pytest.raises(SpecError) as error:
        search("llama-3-8b", "h100-sxm-2x8", gpus, 4096, batch, pins, refine=False)
    assert error.value.field == field and reason in error.value.reason


def test_a_search_cancelled_while_scoring_raises_and_one_cancelled_later_keeps_its_best():
    from planner.parallel.planning import SearchCancelled

    with pytest.raises(SearchCancelled):
        search("llama-3-8b", "h100-sxm-2x8", 16, 4096, 64, cancel=lambda: True)
    reached = []

    def progress(fraction, message):
        reached.append(fraction)

    result = search("llama-3-8b", "h100-sxm-2x8", 16, 4096, 64, progress=progress,
                    cancel=lambda: max(reached, default=0) >= 0.2)
    assert result.stats["cancelled"] and result.stats["simulated"] == 1 and result.stats["refined_by_adaptis"] == 0
    assert result.best.fits and not result.best.estimated


def test_the_cli_recomputes_the_modules_it_is_told_and_refuses_what_is_not_modelled(tmp_path, capsys):
    out = tmp_path / "plan.json"
    args = ["search", "--model", "deepseek-v2-lite", "--cluster", "h100-sxm-2x8", "--gpus", "16", "--seq-len", "4096",
            "--global-batch", "32", "--tp", "1", "--pp", "2", "--ep", "4", "--microbatch-size", "1",
            "--recompute", "selective", "--sharding", "optimizer", "--time-budget", "5"]
    assert main([*args, "--out", str(out)]) == 0
    plain = json.loads(out.read_text())
    assert "recompute_modules" not in plain["meta"]
    assert main([*args, "--recompute-modules", "moe_act,mla_up_proj", "--out", str(out)]) == 0
    modules = json.loads(out.read_text())
    assert modules["meta"]["recompute_modules"] == "mla_up_proj,moe_act"   # each once, in Megatron-Core's order
    assert modules["predicted"]["peak_memory_bytes"] < plain["predicted"]["peak_memory_bytes"]
    assert modules["predicted"]["breakdown_ms"]["recompute"] > plain["predicted"]["breakdown_ms"]["recompute"]
    capsys.readouterr()
    for extra, said in ((["--recompute-modules", "mhc"], "mhc is no recompute module"),
                        (["--recompute-modules", "mlp", "--framework", "torchtitan"], "per-op checkpointing")):
        assert main([*args, *extra]) == 3
        error = json.loads(capsys.readouterr().err)["error"]
        assert error["field"] == "recompute_modules" and said in error["reason"]


def test_the_cli_sends_moe_tokens_with_the_dispatcher_it_is_told_and_the_plan_says_which(tmp_path, capsys):
    out = tmp_path / "plan.json"
    args = ["search", "--model", "qwen3-30b-a3b", "--cluster", "h100-sxm-4x8", "--gpus", "32", "--seq-len", "4096",
            "--global-batch", "64", "--tp", "1", "--pp", "1", "--cp", "1", "--ep", "32", "--microbatch-size", "1",
            "--recompute", "full", "--sharding", "optimizer", "--time-budget", "5"]
    assert main([*args, "--out", str(out)]) == 0
    alltoall = json.loads(out.read_text())
    assert main([*args, "--ep-dispatcher", "deepep", "--out", str(out)]) == 0
    deepep = json.loads(out.read_text())
    assert "ep_dispatcher" not in alltoall["meta"] and deepep["meta"]["ep_dispatcher"] == "deepep"
    # EP 32 over 4 nodes: a token's 8 experts sit on about 2.7 other nodes, against 6 routed copies bound elsewhere
    assert deepep["predicted"]["breakdown_ms"]["ep"] < 0.6 * alltoall["predicted"]["breakdown_ms"]["ep"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit:
        main([*args, "--ep-dispatcher", "nccl"])
    assert exit.value.code == 2 and "--ep-dispatcher" in capsys.readouterr().err


def test_expert_parallelism_must_split_every_moe_layer_not_only_the_largest():
    """tiny-hybrid has MoE layers of 8 experts and one of 4: EP 8 would give that layer half an expert a rank. The
    search offers EP up to 4, and a pinned EP 8 is refused naming the layer."""
    model = load_model_preset("tiny-hybrid")
    job = Job(model, load_cluster_preset("h100-sxm-2x8"), 16, 4096, 64)
    assert {config.ep for config, _ in candidates(job, {})} == {1, 2, 4}
    with pytest.raises(SpecError) as error:
        search(model, load_cluster_preset("h100-sxm-2x8"), 16, 4096, 64, {"ep": 8})
    small = next(index for index, layer in enumerate(model.layers)
                 if layer.mlp is not None and layer.mlp.type == "moe" and layer.mlp.num_experts == 4)
    assert error.value.field == "ep"
    assert error.value.reason == f"8 cannot split the experts: layer {small} has 4 experts, which EP8 must divide"
