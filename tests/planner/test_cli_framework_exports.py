"""``python -m planner export PLAN --to megatron-args|torchtitan-toml`` on a hybrid plan the CLI searched: the files,
the model taken from the plan's meta.model, and the refusals (a v1 plan, a plan naming no model preset)."""

import json
import shlex
import tomllib

import pytest

from planner.exports.megatron_args import megatron_argv

from test_cli import error_of, run_cli


@pytest.fixture(scope="module")
def hybrid_plan_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("hybrid") / "plan.json"
    result = run_cli("search", "--model", "tiny-llama", "--cluster", "h100-sxm-1x8", "--gpus", 8, "--seq-len", 512,
                     "--global-batch", 32, "--tp", 2, "--pp", 2, "--time-budget", 2, "--out", path)
    assert result.returncode == 0, result.stderr
    return path


def test_megatron_args_of_a_hybrid_plan_take_its_model_from_meta_and_give_its_degrees(hybrid_plan_file, tmp_path):
    out = tmp_path / "args.sh"
    result = run_cli("export", hybrid_plan_file, "--to", "megatron-args", "--out", out)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"out": str(out), "format": "megatron-args", "bytes": len(out.read_bytes())}
    doc = json.loads(hybrid_plan_file.read_text())
    parallel = doc["parallel"]
    argv = megatron_argv(out.read_text())
    values = dict(zip(argv, argv[1:]))
    assert values["--tensor-model-parallel-size"] == "2" and values["--pipeline-model-parallel-size"] == "2"
    assert int(values["--global-batch-size"]) == (parallel["microbatch_size"] * parallel["num_microbatches"]
                                                  * parallel["dp"]) == 32
    assert values["--seq-length"] == "512" and "--sequence-parallel" in argv
    assert shlex.split(out.read_text(), comments=True)[0] == "MEGATRON_ARGS=("   # bash reads it as one array
    assert run_cli("export", hybrid_plan_file, "--to", "megatron-args", "--model", "tiny-llama").stdout == \
        out.read_text()


def test_torchtitan_toml_of_a_hybrid_plan_is_toml_with_its_degrees(hybrid_plan_file):
    result = run_cli("export", hybrid_plan_file, "--to", "torchtitan-toml")
    assert result.returncode == 0, result.stderr
    config = tomllib.loads(result.stdout)
    assert config["parallelism"]["tensor_parallel_degree"] == 2 and config["parallelism"]["pipeline_parallel_degree"] == 2
    assert config["training"]["global_batch_size"] == 32 and config["model"] == {"name": "llama3", "flavor": "debugmodel"}


def test_framework_exports_of_a_v1_plan_exit_3_naming_the_format(tmp_path):
    plan = tmp_path / "v1.json"
    assert run_cli("baseline", "--schedule", "1f1b", "--profile", "tiny-llama", "--devices", 2, "--microbatches", 4,
                   "--out", plan).returncode == 0
    for fmt in ("megatron-args", "torchtitan-toml"):
        result = run_cli("export", plan, "--to", fmt, "--model", "tiny-llama")
        assert result.returncode == 3
        error = error_of(result)
        assert error["field"] == "format" and "adaptis.plan/v2" in error["reason"]


def test_a_framework_export_without_a_model_is_a_usage_error(hybrid_plan_file, tmp_path):
    doc = json.loads(hybrid_plan_file.read_text())
    doc["meta"].pop("model")
    path = tmp_path / "anonymous.json"
    path.write_text(json.dumps(doc))
    result = run_cli("export", path, "--to", "torchtitan-toml")
    assert result.returncode == 2 and "--model" in result.stderr
