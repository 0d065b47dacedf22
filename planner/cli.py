"""``python -m planner``: simulate, build baselines, search, export, calibrate and list presets from the shell.

Every subcommand is one function decorated with ``@subcommand(name, help, arguments=[...])`` that takes
the parsed arguments and returns an exit code; adding a subcommand is adding one such function (reuse
``PROFILE``, ``CLUSTER``, ``OUT`` and the ``read_*`` / ``write_output`` helpers).

Exit codes: 0 ok, 2 usage (argparse), 3 invalid input, 4 a plan that is invalid or deadlocks. Errors go
to stderr as ``{"error": {"field", "reason", "input"}}`` JSON; ``input`` names the option whose file or
value was at fault.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from planner.baselines import BASELINE_SCHEDULES, PARTITIONS, build_baseline
from planner.calibrate import (after_warmup, measure_message_overhead, observed_iteration_ms, recalibrate,
                               with_message_overhead)
from planner.cluster import ClusterSpec, is_cluster_preset, load_cluster, load_cluster_preset, preset_names
from planner.cost import analytic_profile
from planner.errors import PlanError, SpecError
from planner.exports import EXPORT_FORMATS, EXPORTS, export_plan
from planner.exports.plan_json import plan_json
from planner.parallel.config import PRECISIONS, RECOMPUTE_MODES, SHARDING_MODES
from planner.parallel.cost import (DEFAULT_EP_DISPATCHER, DEFAULT_FRAMEWORK, DEFAULT_OVERLAP, DEFAULT_RECOMPUTE_MODULES,
                                   EP_DISPATCHERS, EP_DISPATCHERS_TEXT, FRAMEWORKS, FRAMEWORKS_TEXT,
                                   RECOMPUTE_MODULES_TEXT, Software)
from planner.plan import Plan, load_plan
from planner.profile import Profile, load_profile
from planner.simulator import simulate
from planner.spec.files import load_model_file
from planner.spec.model import ModelSpec
from planner.spec.presets import load_model_preset, model_preset_names

EXIT_OK, EXIT_USAGE, EXIT_INVALID_INPUT, EXIT_INVALID_PLAN = 0, 2, 3, 4
DEFAULT_CLUSTER_PRESET = "h100-sxm-1x8"
EXPORTS_NEEDING_PROFILE = tuple(fmt for fmt, spec in EXPORTS.items() if spec.needs_profile)


class InputError(Exception):
    """A ``SpecError`` tagged with the command-line option whose input caused it."""

    def __init__(self, option: str, error: SpecError):
        super().__init__(str(error))
        self.option = option
        self.error = error


class UsageError(Exception):
    pass


@dataclass(frozen=True)
class Subcommand:
    name: str
    help: str
    arguments: tuple[tuple[tuple[str, ...], dict], ...]
    run: Callable[[argparse.Namespace], int]


SUBCOMMANDS: list[Subcommand] = []


def argument(*flags: str, **options) -> tuple[tuple[str, ...], dict]:
    return flags, options


def subcommand(name: str, help: str, arguments: list[tuple[tuple[str, ...], dict]]):
    def register(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        SUBCOMMANDS.append(Subcommand(name, help, tuple(arguments), run))
        return run
    return register


PROFILE = argument("--profile", required=True, metavar="P",
                   help="profile file (adaptis.profile/v1, JSON or YAML) or a model preset name, profiled "
                        "analytically on --cluster (default cluster: %s)" % DEFAULT_CLUSTER_PRESET)
CLUSTER = argument("--cluster", metavar="C", help="cluster file (adaptis.cluster/v1) or a cluster preset name; "
                                                  "without it transfers cost nothing")
OUT = argument("--out", default="-", metavar="FILE", help="where to write the result ('-', the default: stdout)")


# ---- reading inputs -------------------------------------------------------------------------------------

def _read_text(path: Path, option: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise InputError(option, SpecError("file", f"cannot read {path}: {error.strerror}")) from None


def _read_document(path: Path, option: str) -> object:
    text = _read_text(path, option)
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            return yaml.safe_load(text)
        return json.loads(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise InputError(option, SpecError("file", f"{path} is not valid {path.suffix[1:] or 'JSON'}: {error}")) from None


def _load(option: str, loader: Callable, *args):
    try:
        return loader(*args)
    except SpecError as error:
        raise InputError(option, error) from None


def read_cluster(value: str | None) -> ClusterSpec | None:
    if value is None:
        return None
    if Path(value).is_file():
        return _load("--cluster", load_cluster, _read_document(Path(value), "--cluster"))
    if is_cluster_preset(value):
        return _load("--cluster", load_cluster_preset, value)
    raise InputError("--cluster", SpecError("cluster", f"{value!r} is neither a file nor a cluster preset "
                                                       f"(presets: {', '.join(preset_names())}, or "
                                                       f"'<device>-<nodes>x<gpus per node>' such as "
                                                       f"'h100-sxm-1024x8')"))


def read_model(value: str, option: str = "--model") -> ModelSpec:
    if Path(value).is_file():
        return _load(option, load_model_file, value)
    if value in model_preset_names():
        return load_model_preset(value)
    raise InputError(option, SpecError("model", f"{value!r} is neither a file nor a model preset "
                                                f"(presets: {', '.join(model_preset_names())})"))


def read_profile(value: str, cluster: ClusterSpec | None) -> Profile:
    """A profile file, or a model preset profiled analytically on ``cluster`` (or the default cluster)."""
    if Path(value).is_file():
        return _load("--profile", load_profile, _read_document(Path(value), "--profile"))
    if value in model_preset_names():
        return analytic_profile(load_model_preset(value), cluster or load_cluster_preset(DEFAULT_CLUSTER_PRESET))
    raise InputError("--profile", SpecError("profile", f"{value!r} is neither a profile file nor a model preset "
                                                       f"(presets: {', '.join(model_preset_names())})"))


def read_plan(value: str) -> Plan:
    return _load("plan", load_plan, _read_document(Path(value), "plan"))


def read_events(value: str) -> list:
    """A run's events: the JSON-lines file ``python -m executor run --events FILE`` writes (one event per
    line), or the JSON result ``--out`` writes (its ``events``)."""
    path = Path(value)
    text = _read_text(path, "--events")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict) and isinstance(whole.get("events"), list):
        return whole["events"]
    events = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise InputError("--events", SpecError("file", f"{path} line {number} is not a JSON event: "
                                                           f"{error.msg}")) from None
    return events


def write_output(target: str, text: str, option: str = "--out") -> None:
    if target == "-":
        sys.stdout.write(text)
        return
    try:
        Path(target).write_text(text, encoding="utf-8")
    except OSError as error:
        raise InputError(option, SpecError(option.lstrip("-").replace("-", "_"),
                                           f"cannot write {target}: {error.strerror}")) from None


def print_json(doc: dict) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


def _report_written(target: str, summary: dict) -> None:
    """When the result went to a file, say so on stdout (stdout stays the result itself otherwise)."""
    if target != "-":
        print_json({"out": target, **summary})


# ---- subcommands --------------------------------------------------------------------------------------

@subcommand("simulate", "Simulate a plan on a profile (v1) or inside its hybrid job (v2) and print its metrics.", [
    argument("plan", help="plan file (adaptis.plan/v1 or /v2)"),
    argument("--profile", metavar="P", help="v1: profile file or model preset, profiled analytically on --cluster"),
    argument("--model", metavar="M", help="v2: model preset, adaptis.model/v1 file or HF config.json"),
    argument("--seq-len", type=int, metavar="S", help="v2: tokens per sequence (default: the plan's meta.seq_len)"),
    CLUSTER,
    argument("--timeline", action="store_true", help="v1: include every action's start/end and every transfer"),
])
def simulate_command(args: argparse.Namespace) -> int:
    plan = read_plan(args.plan)
    if plan.parallel is not None:
        return _simulate_hybrid(plan, args)
    if args.profile is None:
        raise UsageError("an adaptis.plan/v1 plan needs --profile")
    cluster = read_cluster(args.cluster)
    profile = read_profile(args.profile, cluster)
    simulation = simulate(plan, profile, cluster)
    print_json(simulation.to_dict(include_timeline=args.timeline))
    return EXIT_OK


def _simulate_hybrid(plan: Plan, args: argparse.Namespace) -> int:
    """A v2 plan's prediction inside its job: the pipeline on the ranks' links, DP, optimizer, memory per GPU."""
    from planner.parallel.planning import predict

    model = read_model(args.model) if args.model is not None else None
    seq_len = args.seq_len if args.seq_len is not None else plan.meta.get("seq_len")
    missing = [flag for flag, value in (("--model", model), ("--cluster", args.cluster), ("--seq-len", seq_len))
               if value is None]
    if missing:
        raise UsageError(f"an adaptis.plan/v2 plan is simulated inside its job: give {', '.join(missing)}")
    print_json(_load("plan", predict, plan, model, read_cluster(args.cluster), seq_len))
    return EXIT_OK


@subcommand("baseline", "Build a fixed-strategy plan (GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-V).", [
    argument("--schedule", required=True, choices=BASELINE_SCHEDULES),
    PROFILE,
    argument("--devices", required=True, type=int, metavar="N", help="pipeline devices"),
    argument("--microbatches", required=True, type=int, metavar="M", help="micro-batches per iteration"),
    CLUSTER,
    argument("--partition", default="uniform", choices=PARTITIONS, help="how layers are split into stages"),
    argument("--chunks", default=2, type=int, metavar="V", help="model chunks per device (interleaved-1f1b)"),
    OUT,
])
def baseline_command(args: argparse.Namespace) -> int:
    cluster = read_cluster(args.cluster)
    profile = read_profile(args.profile, cluster)
    plan = build_baseline(args.schedule, profile, args.devices, args.microbatches, cluster=cluster,
                          partition=args.partition, chunks=args.chunks)
    write_output(args.out, plan_json(plan))
    _report_written(args.out, {"strategy": plan.strategy, "layout": plan.meta["layout"],
                               "iteration_ms": plan.predicted["iteration_ms"],
                               "bubble_ratio": plan.predicted["bubble_ratio"],
                               "peak_memory_bytes": plan.predicted["peak_memory_bytes"]})
    return EXIT_OK


@subcommand("export", "Write a plan as a Perfetto trace, torch CSV, Megatron layout, plan JSON, or (a hybrid-parallel "
                     "plan) Megatron-LM arguments or a torchtitan job config.", [
    argument("plan", help="plan file (adaptis.plan/v1 or /v2; megatron-args and torchtitan-toml take /v2)"),
    argument("--to", required=True, choices=EXPORT_FORMATS, help="output format"),
    argument("--profile", metavar="P", help="profile file or model preset (needed for perfetto and "
                                            "megatron-layout)"),
    argument("--model", metavar="M", help="the plan's model (preset, adaptis.model/v1 file or HF config.json): "
                                          "megatron-layout applies Megatron's rules for hybrid (Mamba) models; "
                                          "megatron-args and torchtitan-toml need it (default: a v2 plan's "
                                          "meta.model where that is a preset); a model preset given as --profile "
                                          "is taken as the model"),
    CLUSTER, OUT,
])
def export_command(args: argparse.Namespace) -> int:
    if args.to in EXPORTS_NEEDING_PROFILE and args.profile is None:
        raise UsageError(f"--to {args.to} needs --profile")
    plan = read_plan(args.plan)
    cluster = read_cluster(args.cluster)
    profile = read_profile(args.profile, cluster) if args.profile is not None else None
    model = _export_model(args, plan)
    if EXPORTS[args.to].needs_model and model is None:
        raise UsageError(f"--to {args.to} needs --model (the plan names no model preset in meta.model)")
    text = export_plan(args.to, plan, profile, cluster, model)
    write_output(args.out, text)
    _report_written(args.out, {"format": args.to, "bytes": len(text.encode())})
    return EXIT_OK


def _export_model(args: argparse.Namespace, plan: Plan) -> ModelSpec | None:
    if args.model is not None:
        return read_model(args.model)
    if args.profile is not None and not Path(args.profile).is_file() and args.profile in model_preset_names():
        return load_model_preset(args.profile)
    named = plan.meta.get("model")
    if plan.parallel is not None and isinstance(named, str) and named in model_preset_names():
        return load_model_preset(named)
    return None


@subcommand("profile", "Profile a model analytically on a cluster's device (adaptis.profile/v1).", [
    argument("--model", required=True, metavar="SPEC", help="model file (ours or a HF config.json) or preset"),
    argument("--cluster", required=True, metavar="C", help="cluster file or cluster preset name"),
    OUT,
])
def profile_command(args: argparse.Namespace) -> int:
    model = read_model(args.model)
    profile = analytic_profile(model, read_cluster(args.cluster))
    write_output(args.out, json.dumps(profile.to_dict(), indent=2) + "\n")
    _report_written(args.out, {"model": profile.model, "device": profile.device, "layers": profile.num_layers})
    return EXIT_OK


@subcommand("presets", "List the model and cluster presets.", [])
def presets_command(args: argparse.Namespace) -> int:
    print_json({"models": model_preset_names(), "clusters": preset_names()})
    return EXIT_OK


# Which communication overlaps with compute in the cost model (planner.parallel.cost.overlap_options)
OVERLAP = argument("--overlap", metavar="tp,dp,ep", default=DEFAULT_OVERLAP,
                   help="communication overlapped with compute: any of tp (TP with the GEMMs, userbuffers), dp (the "
                        "DP reduction with the backward; Megatron's --overlap-grad-reduce) and ep (the MoE all-to-alls "
                        f"with another micro-batch's compute), comma-separated, or none; default {DEFAULT_OVERLAP}. "
                        "tp and ep are upper bounds: they hide all that the compute beside them can")
# The framework the job trains with, as the cost model tells them apart (planner.parallel.cost.FRAMEWORKS)
FRAMEWORK = argument("--framework", choices=tuple(FRAMEWORKS), default=DEFAULT_FRAMEWORK,
                     help=f"the training framework whose kernels, recomputation and loss the cost model assumes: "
                          f"{FRAMEWORKS_TEXT}")
# What the job's selective recomputation re-runs (planner.parallel.cost.recompute_modules_named)
RECOMPUTE_MODULES = argument("--recompute-modules", metavar="M,M,...", default=DEFAULT_RECOMPUTE_MODULES,
                             help=f"Megatron-Core's --recompute-modules: what selective recomputation re-runs in the "
                                  f"backward to free what it kept, any of {RECOMPUTE_MODULES_TEXT}; comma-separated, "
                                  f"default {DEFAULT_RECOMPUTE_MODULES} (framework megatron only)")
# How the job's MoE tokens are sent to their experts (planner.parallel.cost.EP_DISPATCHERS)
EP_DISPATCHER = argument("--ep-dispatcher", choices=EP_DISPATCHERS, default=DEFAULT_EP_DISPATCHER,
                         help=f"the MoE token dispatcher: {EP_DISPATCHERS_TEXT}")


# The hybrid search's integer pins: (name, metavar, help)
INTEGER_PINS = (("tp", "T", "pin tensor parallelism"), ("cp", "C", "pin context parallelism"),
                ("pp", "P", "pin pipeline parallelism"), ("dp", "D", "pin data parallelism"),
                ("ep", "E", "pin expert parallelism"),
                ("etp", "X", "pin expert tensor parallelism (MoE parallel folding; the search tries TP and 1)"),
                ("microbatch_size", "K", "pin the micro-batch size"),
                ("vpp", "V", "pin the virtual pipeline stages per pipeline rank (Megatron's interleaving; 1 = plain "
                             "1F1B)"))
# ... and the ones chosen from a list: (name, choices, help)
CHOICE_PINS = (("recompute", RECOMPUTE_MODES, "pin activation recomputation"),
               ("sharding", SHARDING_MODES, "pin what the data-parallel ranks shard: none, optimizer (ZeRO-1, the "
                                            "distributed optimizer) or full (FSDP, ZeRO-3)"),
               ("precision", PRECISIONS, "the GEMMs' precision: bf16 (default) or fp8 (Transformer Engine's linear "
                                         "layers; the search never picks it for you)"))
HYBRID_PINS = (*(pin for pin, _, _ in INTEGER_PINS), *(pin for pin, _, _ in CHOICE_PINS))


def hybrid_pin_arguments(prefix: str = "") -> list:
    """The hybrid search's pins (``HYBRID_PINS``) as options, each help text after ``prefix``."""
    return [*(argument(f"--{pin.replace('_', '-')}", type=int, metavar=metavar, help=prefix + text)
              for pin, metavar, text in INTEGER_PINS),
            *(argument(f"--{pin}", choices=choices, help=prefix + text) for pin, choices, text in CHOICE_PINS)]


@subcommand("search", "Search a plan: the pure-PP AdaPtis plan (--profile/--devices/--microbatches) or the whole "
                     "hybrid-parallel job (--model/--cluster/--gpus/--seq-len/--global-batch); progress on stderr.", [
    argument("--profile", metavar="P", help="pure PP: profile file or model preset (analytic on --cluster)"),
    argument("--devices", type=int, metavar="N", help="pure PP: pipeline devices"),
    argument("--microbatches", type=int, metavar="M", help="pure PP: micro-batches per iteration"),
    argument("--model", metavar="M", help="hybrid: model preset, adaptis.model/v1 file or HF config.json"),
    argument("--gpus", type=int, metavar="N", help="hybrid: GPUs of the job"),
    argument("--seq-len", type=int, metavar="S", help="hybrid: tokens per sequence"),
    argument("--global-batch", type=int, metavar="B", help="hybrid: sequences per step"),
    *hybrid_pin_arguments("hybrid: "),
    OVERLAP,
    FRAMEWORK,
    RECOMPUTE_MODULES,
    EP_DISPATCHER,
    CLUSTER,
    argument("--memory-limit", type=int, metavar="BYTES",
             help="pure PP: per-device memory (default: the cluster's device memory; unlimited without a cluster)"),
    argument("--time-budget", type=float, metavar="S",
             help="stop after S seconds with the best plan so far (pure PP: 60 s by default; the search stops "
                  "sooner once within 1 %% of the bound or once its patience is spent)"),
    argument("--seed", type=int, default=0, metavar="K", help="seed of the search's random restarts"),
    OUT,
])
def search_command(args: argparse.Namespace) -> int:
    if args.model is not None:
        return _hybrid_search(args)
    missing = [flag for flag, value in (("--profile", args.profile), ("--devices", args.devices),
                                        ("--microbatches", args.microbatches)) if value is None]
    if missing:
        raise UsageError(f"give --model (hybrid search) or {', '.join(missing)} (pure-PP search)")
    from planner.search import search_plan  # the search pulls in more than the other subcommands need

    cluster = read_cluster(args.cluster)
    profile = read_profile(args.profile, cluster)

    result = search_plan(profile, args.devices, args.microbatches, cluster=cluster,
                         memory_limit_bytes=args.memory_limit, seed=args.seed, time_budget_s=args.time_budget,
                         progress=_progress)
    write_output(args.out, plan_json(result.plan))
    _report_written(args.out, {
        "strategy": result.plan.strategy, "layout": result.plan.meta["layout"],
        "iteration_ms": result.iteration_ms, "lower_bound_ms": result.lower_bound_ms, "gap": result.gap,
        "bound_set_by": result.plan.meta["binding"]["text"],
        "plan_memory": (result.plan.meta["memory_binding"] or {}).get("text"),
        "peak_memory_bytes": result.plan.predicted["peak_memory_bytes"],
        "baselines": {name: metrics["iteration_ms"] for name, metrics in result.baselines.items()},
        "search": result.stats})
    return EXIT_OK


def _progress(fraction: float, message: str) -> None:
    sys.stderr.write(f"[{fraction:4.0%}] {message}\n")


def _hybrid_search(args: argparse.Namespace) -> int:
    """``--model``: choose tp, cp, pp, dp, ep, micro-batch size and recomputation with the pipeline plan."""
    from planner.parallel.search import DEFAULT_TIME_BUDGET_S, search

    stray = [flag for flag, value in (("--profile", args.profile), ("--devices", args.devices),
                                      ("--microbatches", args.microbatches), ("--memory-limit", args.memory_limit))
             if value is not None]
    if stray:
        raise UsageError(f"{', '.join(stray)} belong to the pure-PP search, not to --model")
    missing = [flag for flag, value in (("--cluster", args.cluster), ("--gpus", args.gpus), ("--seq-len", args.seq_len),
                                        ("--global-batch", args.global_batch)) if value is None]
    if missing:
        raise UsageError(f"the hybrid search (--model) needs {', '.join(missing)}")
    model = read_model(args.model)
    cluster = read_cluster(args.cluster)
    pins = {key: getattr(args, key) for key in HYBRID_PINS if getattr(args, key) is not None}
    budget = args.time_budget if args.time_budget is not None else DEFAULT_TIME_BUDGET_S
    result = search(model, cluster, args.gpus, args.seq_len, args.global_batch, pins, time_budget_s=budget,
                    progress=_progress, options=Software.named(vars(args)).options())
    write_output(args.out, json.dumps(result.plan_document(), indent=2) + "\n")
    summary = result.to_dict(ranks=False)
    best = summary["best"]
    _report_written(args.out, {"parallel": best["parallel"], "short": best["short"], "predicted": best["predicted"],
                               "layout": best["plan"]["meta"].get("layout"),
                               "runners_up": [{"short": other["short"], "predicted": other["predicted"]}
                                              for other in summary["runners_up"]],
                               "considered": summary["considered"], "pruned_by_memory": summary["pruned_by_memory"],
                               "seconds": summary["seconds"]})
    return EXIT_OK


@subcommand("capacity", "How many GPUs: the best hybrid configuration at each GPU count of --cluster's kind and the "
                       "days and GPU-hours --token-budget tokens take there; progress on stderr.", [
    argument("--model", required=True, metavar="M", help="model preset, adaptis.model/v1 file or HF config.json"),
    argument("--cluster", required=True, metavar="C",
             help="the kind of GPU and its links (a preset or a named cluster); grown to each count"),
    argument("--token-budget", required=True, type=float, metavar="T", help="tokens to train on, e.g. 15e12"),
    argument("--gpu-counts", metavar="N,N,...", default="",
             help="GPU counts, '64,256,1024' or a doubling range '64-16384' (the default)"),
    argument("--seq-len", required=True, type=int, metavar="S", help="tokens per sequence"),
    argument("--global-batch", required=True, type=int, metavar="B", help="sequences per step, at every count"),
    *hybrid_pin_arguments(),
    OVERLAP,
    FRAMEWORK,
    RECOMPUTE_MODULES,
    EP_DISPATCHER,
    OUT,
])
def capacity_command(args: argparse.Namespace) -> int:
    from planner.parallel.capacity import capacity_sweep, parse_gpu_counts

    counts = parse_gpu_counts(args.gpu_counts)
    if args.token_budget != int(args.token_budget):
        raise UsageError(f"--token-budget must be a whole number of tokens, got {args.token_budget!r}")
    pins = {key: getattr(args, key) for key in HYBRID_PINS if getattr(args, key) is not None}
    result = capacity_sweep(read_model(args.model), read_cluster(args.cluster), counts, args.seq_len, args.global_batch,
                            int(args.token_budget), pins, progress=_progress,
                            options=Software.named(vars(args)).options())
    write_output(args.out, json.dumps(result, indent=2) + "\n")
    _report_written(args.out, {key: result[key] for key in ("fastest_gpus", "cheapest_gpus", "device")})
    return EXIT_OK


@subcommand("calibrate", "Fit a profile, and optionally the cluster's per-message overhead, to a run's timings.", [
    argument("plan", help="the plan that ran (adaptis.plan/v1)"),
    PROFILE,
    argument("--events", required=True, metavar="FILE",
             help="the run's events: the JSON-lines file of 'python -m executor run --events FILE', or its --out"),
    CLUSTER,
    argument("--warmup", type=int, default=1, metavar="K", help="leave the run's first K steps out (default 1)"),
    OUT,
    argument("--cluster-out", metavar="FILE",
             help="also write --cluster with the per-message overhead measured between the run's actions"),
])
def calibrate_command(args: argparse.Namespace) -> int:
    """Each stage's layers scaled to the observed mean F, I/B and W durations (``planner.calibrate``): the
    profile to plan the next run with. Prints the observed iteration next to the predictions before and after."""
    if args.warmup < 0:
        raise UsageError(f"--warmup must be >= 0, got {args.warmup}")
    if args.cluster_out and args.cluster is None:
        raise UsageError("--cluster-out needs --cluster (the cluster to charge the measured overhead on)")
    cluster = read_cluster(args.cluster)
    profile = read_profile(args.profile, cluster)
    plan = read_plan(args.plan)
    events = read_events(args.events)
    steady = _load("--events", after_warmup, plan, events, args.warmup)
    if not steady:
        raise InputError("--events", SpecError("events", f"hold no action events after the first {args.warmup} "
                                                         f"step(s)"))
    calibrated = _load("--events", recalibrate, profile, plan, steady)
    summary = {"observed_iteration_ms": observed_iteration_ms(plan, steady),
               "predicted_before_ms": simulate(plan, profile, cluster).iteration_ms}
    if args.cluster_out:
        overhead_us = _load("--events", measure_message_overhead, plan, steady)
        cluster = with_message_overhead(cluster, overhead_us)
        write_output(args.cluster_out, json.dumps(cluster.to_dict(), indent=2) + "\n", "--cluster-out")
        summary.update(message_overhead_us=overhead_us, cluster_out=args.cluster_out)
    summary["predicted_after_ms"] = simulate(plan, calibrated, cluster).iteration_ms
    write_output(args.out, json.dumps(calibrated.to_dict(), indent=2) + "\n")
    _report_written(args.out, summary)
    return EXIT_OK


# ---- entry point --------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m planner",
                                     description="Plan pipeline parallelism for heterogeneous models.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in SUBCOMMANDS:
        sub = commands.add_parser(command.name, help=command.help, description=command.help)
        for flags, options in command.arguments:
            sub.add_argument(*flags, **options)
        sub.set_defaults(run=command.run)
    return parser


def _print_error(doc: dict) -> None:
    sys.stderr.write(json.dumps({"error": doc}) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except UsageError as error:
        parser.print_usage(sys.stderr)
        sys.stderr.write(f"{parser.prog} {args.command}: error: {error}\n")
        return EXIT_USAGE
    except InputError as error:
        _print_error({**error.error.to_dict(), "input": error.option})
        return EXIT_INVALID_INPUT
    except SpecError as error:
        _print_error(error.to_dict())
        return EXIT_INVALID_INPUT
    except PlanError as error:
        _print_error(error.to_dict())
        return EXIT_INVALID_PLAN
