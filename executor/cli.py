"""``python -m executor``: run a plan, or measure a profile.

    python -m executor run PLAN.json --model SPEC [--backend gloo|nccl] [--events URL_OR_PATH] [--steps N]
                           [--optimizer sgd|adamw] [--lr LR] [--dtype fp32|bf16|...] [--scale [HIDDEN]]
                           [--checkpoint-dir DIR] [--threads-per-rank N] [--no-bind-cores] [--timeout S]
                           [--out RESULT.json] [--verify]
    python -m executor profile --model SPEC [--scale [HIDDEN]] [--device cpu|cuda] [--dtype D]
                               [--repeats N] [--threads N] [--ranks N] [--full-backward] [--distinct-layers]
                               [--plan PLAN.json] --out PROFILE.json

SPEC is a model file (our JSON/YAML or a HuggingFace config.json) or a preset name (``tiny-hybrid``).

``--verify`` then repeats the steps in one process (``executor.running.reference``), compares every layer the
run saved with it, prints ``verified`` and the largest difference, and exits 1 where they differ by more than
rounding. It runs in float64 unless ``--dtype`` says otherwise, so rounding cannot hide a wrong gradient.

Single host: ``run`` starts one process per device of the plan itself. Several hosts: start the same
command under torchrun on every host; each process then is one rank, reading RANK / WORLD_SIZE /
LOCAL_RANK / MASTER_ADDR / MASTER_PORT from torchrun's environment, and rank 0 prints the result:

    torchrun --nnodes 2 --nproc-per-node 8 --node-rank $NODE --master-addr $HEAD --master-port 29500 \\
        -m executor run plan.json --model deepseek-v3 --backend nccl --events redis://head:6379/0#run:42

(the plan's ``num_devices`` must equal nnodes x nproc-per-node; devices are numbered node-major, like ranks).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from executor.running.config import BACKENDS, OPTIMIZERS
from executor.errors import ExecutorError
from executor.running.lowering import CAUSAL, WHOLE_STEP
from executor.model.build import DTYPES
from planner.errors import PlanError, SpecError
from planner.plan import Plan, load_plan
from planner.spec.model import ModelSpec
from planner.plan_check import check_plan_structure

DEFAULT_SCALED_HIDDEN = 64


def load_model_argument(value: str, scale_hidden: int | None, plan: Plan | None = None) -> ModelSpec:
    """The model file or preset, scaled to ``scale_hidden`` (so that ``plan``'s axes can split it) when given."""
    from executor.model.scale import scale_spec
    from planner.spec.files import load_model_file
    from planner.spec.presets import load_model_preset

    spec = load_model_file(value) if Path(value).exists() else load_model_preset(value)
    parallel = plan.parallel if plan is not None else None
    return scale_spec(spec, hidden_size=scale_hidden, parallel=parallel) if scale_hidden else spec


def _read_json(path: str, field: str) -> object:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise SpecError(field, f"cannot read {path}: {error.strerror}") from error
    except json.JSONDecodeError as error:
        raise SpecError(field, f"{path} is not JSON: line {error.lineno} column {error.colno}: {error.msg}") from error


def _lookahead(text: str) -> int | str:
    """``--lookahead``: a count of compute ops, ``step`` or ``causal``."""
    if text in (WHOLE_STEP, CAUSAL):
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of compute ops, {WHOLE_STEP!r} or {CAUSAL!r}, "
                                         f"got {text!r}")


def launched_by_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))


def command_run(args) -> int:
    plan = load_plan(_read_json(args.plan, "plan"))
    spec = load_model_argument(args.model, args.scale, plan)
    if not args.verify:
        _run(args, plan, spec, dtype=args.dtype, checkpoint_dir=args.checkpoint_dir)
        return 0
    from executor.running.reference import verify_tolerance

    dtype = args.dtype or "fp64"
    tolerance = verify_tolerance(dtype)
    if args.checkpoint_dir:
        return _run_and_verify(args, plan, spec, dtype, args.checkpoint_dir, tolerance)
    if launched_by_torchrun():
        raise SpecError("checkpoint_dir", "--verify under torchrun needs --checkpoint-dir: one directory every "
                                          "rank saves its layers to and rank 0 reads (shared, where the ranks "
                                          "span hosts)")
    with tempfile.TemporaryDirectory(prefix="adaptis-verify-") as checkpoint_dir:
        return _run_and_verify(args, plan, spec, dtype, checkpoint_dir, tolerance)


def _run_and_verify(args, plan: Plan, spec: ModelSpec, dtype: str, checkpoint_dir: str, tolerance: float) -> int:
    from executor.running.reference import compare_to_reference

    from executor.running.scope import planned_spec

    result = _run(args, plan, spec, dtype=dtype, checkpoint_dir=checkpoint_dir)
    if result is None:   # a torchrun rank other than 0: rank 0 verifies the whole run
        return 0
    verification = compare_to_reference(
        checkpoint_dir, planned_spec(plan, spec), num_microbatches=plan.num_microbatches,
        data_parallel=plan.parallel.dp if plan.parallel is not None else 1, steps=args.steps, seed=args.seed,
        lr=args.lr, optimizer=args.optimizer, dtype=dtype)
    loss_relative = verification.loss_relative(result["losses"], result["balancing_losses"])
    found = (f"largest difference {verification.largest_difference:.3g} (relative "
             f"{verification.largest_relative:.3g}) over {verification.compared} tensors")
    if verification.largest_relative <= tolerance and loss_relative <= tolerance:
        print(f"verified: {found}, losses match")
        return 0
    print(f"NOT verified: {found}, worst {verification.worst}; losses differ by relative {loss_relative:.3g}; "
          f"{dtype} allows relative {tolerance:g}")
    return 1


def _run(args, plan: Plan, spec: ModelSpec, *, dtype: str | None, checkpoint_dir: str | None) -> dict | None:
    """Run the plan and print its summary; the result, which a torchrun rank other than 0 does not have."""
    settings = dict(backend=args.backend, seed=args.seed, event_sink=args.events, steps=args.steps,
                    event_token_file=args.token_file,
                    optimizer=args.optimizer, lr=args.lr, dtype=dtype, checkpoint_dir=checkpoint_dir,
                    threads_per_rank=args.threads_per_rank, bind_cores=args.bind_cores, lookahead=args.lookahead)
    if launched_by_torchrun():
        from executor.running.config import RunConfig
        from executor.running.worker import run_rank

        job = {"plan": plan.to_dict(), "spec": spec.to_dict(), "config": RunConfig(**settings).to_dict()}
        rank = int(os.environ["RANK"])
        result = run_rank(job, rank=rank, world_size=int(os.environ["WORLD_SIZE"]),
                          local_rank=int(os.environ.get("LOCAL_RANK", "0")), job_dir=None)
        if rank != 0:
            return None
    else:
        from executor.running.launch import run_plan

        result = run_plan(plan, spec, timeout_s=args.timeout, **settings).to_dict()
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    printed = {"summary": result["summary"], "loss": result["loss"], "losses": result["losses"]}
    if any(loss is not None for loss in result["balancing_losses"]):
        printed["balancing_losses"] = result["balancing_losses"]
    print(json.dumps(printed, indent=1))
    undelivered = result["summary"].get("events_undelivered", 0)
    if undelivered:
        print(f"warning: the event sink did not take {undelivered} events (it failed for longer than the ranks "
              f"waited); every event is in the result{' written to ' + args.out if args.out else ' (use --out)'}",
              file=sys.stderr)
    return result


def command_profile(args) -> int:
    import torch

    from executor.model.build import resolve_dtype
    from executor.model.linear import weight_grad_deferral
    from executor.measuring.profiler import measure_profile, measure_profile_alongside

    spec = load_model_argument(args.model, args.scale)
    device = torch.device(args.device)
    dtype = resolve_dtype(args.dtype or ("fp32" if device.type == "cpu" else spec.dtype))
    plan = _plan_to_time(args, spec, device, dtype)
    if args.ranks < 1:
        raise SpecError("ranks", f"must be >= 1, got {args.ranks}")
    if args.ranks > 1:
        if device.type != "cpu" or dtype != torch.float32:
            raise SpecError("ranks", "profiling several local ranks at once is for CPU ranks in float32; on a "
                                     "GPU each rank has its device to itself: profile one")
        profile = measure_profile_alongside(spec, processes=args.ranks, threads=args.threads,
                                            split_backward=not args.full_backward, repeats=args.repeats,
                                            warmup=args.warmup, seed=args.seed, distinct=args.distinct_layers)
    else:
        with weight_grad_deferral(not args.full_backward):
            profile = measure_profile(spec, device=device, dtype=dtype, repeats=args.repeats, warmup=args.warmup,
                                      seed=args.seed, threads=args.threads, distinct=args.distinct_layers)
    if plan is not None:
        from executor.measuring.stage_timing import measure_stage_timings
        from planner.calibrate import recalibrate_durations, stage_durations

        timings = measure_stage_timings(plan, spec, threads=args.threads, repeats=args.repeats, warmup=args.warmup,
                                        seed=args.seed)
        profile = recalibrate_durations(profile, plan, stage_durations(plan, timings))
    Path(args.out).write_text(json.dumps(profile.to_dict(), indent=1))
    timed = f", scaled to the {plan.num_stages} stages of {args.plan} timed as actions" if plan is not None else ""
    print(f"wrote {args.out}: {len(profile.layers)} layers of {spec.name} measured on {profile.device}{timed}")
    return 0


def _plan_to_time(args, spec, device, dtype):
    """``--plan``'s Plan (None without it), checked before anything is measured."""
    import torch

    if not args.plan:
        return None
    if device.type != "cpu" or dtype != torch.float32:
        raise SpecError("plan", "timing a plan's stages is for CPU ranks in float32")
    plan = load_plan(_read_json(args.plan, "plan"))
    check_plan_structure(plan, spec.num_layers)
    return plan


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m executor", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    scale_help = f"shrink the model to CPU size first (hidden size, default {DEFAULT_SCALED_HIDDEN})"

    run = commands.add_parser("run", help="train a model for some steps with a plan")
    run.add_argument("plan")
    run.add_argument("--model", required=True)
    run.add_argument("--backend", choices=BACKENDS, default="gloo")
    run.add_argument("--events", help="redis://host:port/db#stream-key, https://HOST/api/runs/ID/events/ (AdaPtis "
                                      "Studio's ingest for run ID, with --token-file) or a JSON-lines file")
    run.add_argument("--token-file", help="a file holding the run's secret, for an https:// --events URL")
    run.add_argument("--steps", type=int, default=1)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd")
    run.add_argument("--lr", type=float, default=1e-3)
    run.add_argument("--dtype", choices=sorted(DTYPES))
    run.add_argument("--scale", type=int, nargs="?", const=DEFAULT_SCALED_HIDDEN, help=scale_help)
    run.add_argument("--checkpoint-dir")
    run.add_argument("--threads-per-rank", type=int,
                     help="torch intra-op threads of each rank (default: this host's cores / its local ranks)")
    run.add_argument("--no-bind-cores", dest="bind_cores", action="store_false",
                     help="leave CPU ranks to the OS scheduler instead of binding each local rank to cores of its own")
    run.add_argument("--lookahead", type=_lookahead, default=CAUSAL,
                     help="post each receive N compute ops before the compute that needs it, 'step': all of a "
                          "step's receives before its first compute, or 'causal': right after this rank's last "
                          "compute that the sender's producing action depends on (default)")
    run.add_argument("--timeout", type=float, default=600.0)
    run.add_argument("--out", help="write the full result (with every event) here")
    run.add_argument("--verify", action="store_true",
                     help="then repeat the steps in one process and compare every layer the run saved (in a "
                          "temporary directory unless --checkpoint-dir; under torchrun give one) and its losses: "
                          "print 'verified' and the largest difference, or exit 1; float64 unless --dtype")
    run.set_defaults(handler=command_run)

    profile = commands.add_parser("profile", help="measure per-layer F / I / W times and memory")
    profile.add_argument("--model", required=True)
    profile.add_argument("--scale", type=int, nargs="?", const=DEFAULT_SCALED_HIDDEN, help=scale_help)
    profile.add_argument("--device", default="cpu")
    profile.add_argument("--dtype", choices=sorted(DTYPES))
    profile.add_argument("--repeats", type=int, default=5)
    profile.add_argument("--warmup", type=int, default=2)
    profile.add_argument("--threads", type=int, default=1,
                         help="intra-op threads: what each rank will use (run --threads-per-rank; default there: "
                              "this host's cores / its local ranks)")
    profile.add_argument("--ranks", type=int, default=1,
                         help="CPU: time as this many local ranks run, one profiler per rank at once, each bound to "
                              "cores of its own; each layer keeps the least of their times")
    profile.add_argument("--full-backward", action="store_true",
                         help="time B as ranks that run only F and B do (no weight-gradient deferral); I and W "
                              "are then one B in I, as a 1F1B or GPipe plan runs it")
    profile.add_argument("--distinct-layers", action="store_true",
                         help="build and time one copy of each different layer, in model order, and give its times "
                              "and memory to every layer like it: real shapes on a device that cannot hold the "
                              "whole model (instead of --scale)")
    profile.add_argument("--plan",
                         help="CPU: then time this plan's stages as its ranks run them (one process per device at "
                              "once, each action right after another kind of work and right after its own kind) "
                              "and scale each stage's layers to the times its actions will take "
                              "(executor.measuring.stage_timing)")
    profile.add_argument("--seed", type=int, default=0)
    profile.add_argument("--out", required=True)
    profile.set_defaults(handler=command_profile)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (SpecError, PlanError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ExecutorError as error:
        print(f"error: {error}\n{error.traceback_text}", file=sys.stderr)
        return 1
