"""``search``: choose the hybrid-parallel configuration of a job and the pipeline plan inside it.

1. Enumerate (tp, cp, pp, dp, ep, micro-batch size, recomputation, schedule chunks) that the model and the
   GPU count allow (``candidates``); pinned degrees are kept as given.
2. Score each with the closed form (``planner.parallel.evaluate.estimate``) and drop those whose fullest
   GPU does not fit its memory — memory first, so nothing that cannot run is ranked. The fastest fully
   recomputed ones are also tried with recomputation on the first pipeline ranks only (``recompute`` per
   stage), which hold the most micro-batches in flight.
3. Simulate the best few with Megatron's schedules (1F1B, interleaved 1F1B) on the real pipeline links,
   then run the AdaPtis pure-PP search (``planner.search.search_plan``: partition x placement x schedule)
   inside the best configurations; its plan is kept when it fits and is faster.
4. Return the best as an ``adaptis.plan/v2`` plan, with the runners-up, per-GPU memory and the rank mapping.

Everything the web needs comes out of ``HybridResult.to_dict()`` as plain JSON values.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from planner.baselines import build_baseline
from planner.cluster import ClusterSpec
from planner.errors import SpecError
from planner.fields import get_str
from planner.layout import layer_codes_from_spec, plan_layout_string
from planner.limits import bounds
from planner.parallel.config import (DEGREES, PRECISIONS, RECOMPUTE_MODES, SHARDING_MODES, ParallelConfig,
                                     expert_split_refusal, load_sharding)
from planner.parallel.cost import CostOptions, Software
from planner.parallel.evaluate import Job, Score, estimate, pipeline_memory_budget, score_plan, shard_profile
from planner.parallel.mapping import RankMapping
from planner.spec.model import AttentionMixer, LinearAttentionMixer, Mamba2Mixer, MambaMixer, ModelSpec, MoEMLP

PIN_KEYS = DEGREES + ("etp", "microbatch_size", "recompute", "sharding", "precision", "vpp", "distributed_optimizer")
MICROBATCH_SIZES = (1, 2, 4, 8)


def searched_recompute(options: CostOptions) -> tuple[str, ...]:
    """The recomputation modes the search tries on a job's framework: Megatron-Core's selective of the core
    attention alone equals none under FlashAttention (``planner.parallel.cost``); torchtitan's per-op
    checkpointing, and Megatron's with other recompute modules, are trades of their own."""
    trades = options.selective == "per_op" or set(options.recompute_modules) != {"core_attn"}
    return ("none", "selective", "full") if trades else ("none", "full")


# no sharding moves more bytes than ZeRO-1 (an fp32 all-reduce against an fp32 reduce-scatter and a bf16 all-gather)
# and keeps more, so it never wins: searched only when pinned
SEARCHED_SHARDING = ("optimizer", "full")
MAX_CHUNKS = 4
PARTIAL_RECOMPUTE_TRIES = 16            # fully recomputed configurations tried with recomputation on fewer ranks
SIMULATED = 4                           # configurations simulated after the closed form
REFINED = 2                             # of which the AdaPtis search refines the best
MAX_REFINED_ACTIONS = 20_000            # pipelines larger than this (stages x micro-batches) keep their schedule
DEFAULT_TIME_BUDGET_S = 40.0

CANCEL_CHECK_EVERY = 256               # configurations scored between two looks at ``cancel`` (~0.1 s)

Progress = Callable[[float, str], None]
Cancel = Callable[[], bool]


class SearchCancelled(Exception):
    """The search was cancelled before it had simulated any plan to return."""


@dataclass
class HybridResult:
    best: Score
    runners_up: list[Score]
    considered: int
    pruned_by_memory: int
    seconds: float
    stats: dict = field(default_factory=dict)

    def plan_document(self) -> dict:
        """The best plan as ``adaptis.plan/v2`` with ``predicted`` from the job-level model."""
        plan = self.best.plan
        doc = plan.to_dict()
        predicted = dict(doc.get("predicted") or {})
        predicted.update(self.best.metrics())
        predicted["memory"] = [memory.to_dict() for memory in self.best.memory]
        predicted["per_device"] = self.best.gpu_memory_rows(predicted.get("per_device", []))
        doc["predicted"] = predicted
        meta = doc.setdefault("meta", {})
        meta["memory_limit_bytes"] = self.best.job.cluster.device.memory_bytes
        meta.update(Software.of(self.best.job.options).changed())   # what a re-prediction assumes (planning.predict)
        return doc

    def to_dict(self, ranks: bool = True) -> dict:
        mapping = RankMapping(self.best.config, self.best.job.cluster)
        return {"best": {**self.best.to_dict(), "plan": self.plan_document(),
                         "rank_mapping": mapping.to_dict(None if ranks else 0)},
                "runners_up": [score.to_dict() for score in self.runners_up],
                "considered": self.considered, "pruned_by_memory": self.pruned_by_memory,
                "seconds": self.seconds, "stats": self.stats}


# ---- the candidate space ------------------------------------------------------------------------------

def _powers_of_two(limit: int) -> list[int]:
    values, value = [], 1
    while value <= limit:
        values.append(value)
        value *= 2
    return values


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def tensor_parallel_limit(model: ModelSpec, tp: int) -> str | None:
    """Why ``tp`` cannot split ``model`` (Megatron needs heads and query groups to divide), or None."""
    if model.hidden_size % tp:
        return f"hidden_size {model.hidden_size} is not divisible by tp {tp}"
    for layer in model.layers:
        mixer = layer.mixer
        if isinstance(mixer, AttentionMixer) and (mixer.num_heads % tp or mixer.num_kv_heads % tp):
            return f"attention with {mixer.num_heads} heads / {mixer.num_kv_heads} key-value heads"
        if isinstance(mixer, (LinearAttentionMixer, Mamba2Mixer)) and mixer.num_heads % tp:
            return f"{mixer.type} with {mixer.num_heads} heads"
        if isinstance(mixer, LinearAttentionMixer) and mixer.key_heads % tp:
            return f"linear attention with {mixer.key_heads} key heads"
        if isinstance(mixer, Mamba2Mixer) and mixer.n_groups % tp:
            return f"mamba2 with {mixer.n_groups} groups"   # Megatron-Core's MambaMixer splits them too
    return None


def context_parallel_limit(model: ModelSpec, tp: int, cp: int) -> str | None:
    """Why ``cp`` cannot split ``model``'s sequence on TP ``tp`` ranks, naming the layer, or None. Attention takes any
    CP. Megatron-Core splits Mamba-2 and gated delta-net over CP by heads (an all-to-all trades each rank's tokens for
    every token of its share of the heads: ``megatron/core/ssm/mamba_context_parallel.py``, ``gated_delta_net/gdn.py``),
    so a TP rank's heads (and key heads) must split cp ways, and Mamba-2's groups split or repeat over the CP ranks;
    lightning attention is split the same way here. Mamba-1 has no CP form: Megatron-Core has no Mamba-1 layer. (The
    executor runs the same split and refuses by this rule too: ``executor.running.scope``.)"""
    if cp == 1:
        return None
    for index, layer in enumerate(model.layers):
        mixer = layer.mixer
        if isinstance(mixer, MambaMixer):
            return (f"layer {index} is a Mamba-1 layer: Mamba-1 has no context-parallel form (Megatron-Core has no "
                    f"Mamba-1 layer)")
        if isinstance(mixer, (LinearAttentionMixer, Mamba2Mixer)):
            heads = [mixer.num_heads] + ([mixer.key_heads] if isinstance(mixer, LinearAttentionMixer) else [])
            if any(count % (tp * cp) for count in heads):
                return (f"layer {index} is {mixer.type} with {' and '.join(map(str, heads))} heads, which CP{cp} "
                        f"splits on each of TP{tp}'s shares, so {tp} x {cp} must divide them")
            groups = mixer.n_groups // tp if isinstance(mixer, Mamba2Mixer) else cp
            if groups % cp and cp % groups:
                return (f"layer {index} is Mamba-2 with {mixer.n_groups} groups, {groups} on each TP{tp} rank, which "
                        f"CP{cp} must divide or be a multiple of")
    return None


def _num_experts(model: ModelSpec) -> int:
    return max((layer.mlp.num_experts for layer in model.layers if isinstance(layer.mlp, MoEMLP)), default=0)


def expert_parallel_limit(model: ModelSpec, ep: int) -> str | None:
    """Why ``ep`` ranks cannot each hold an equal share of every MoE layer's experts (a model may mix MoE layers of
    different sizes), or None."""
    for index, layer in enumerate(model.layers):
        if ep > 1 and isinstance(layer.mlp, MoEMLP) and layer.mlp.num_experts % ep:
            return f"layer {index} has {layer.mlp.num_experts} experts, which EP{ep} must divide"
    return None


def _blocks(model: ModelSpec) -> int:
    return sum(1 for layer in model.layers if layer.kind not in ("embedding", "head"))


def normalized_pins(pins: dict | None) -> dict:
    """``pins`` with the older ``distributed_optimizer`` said as ``sharding``, as a plan's ``parallel`` reads it
    (``planner.parallel.config.load_sharding``)."""
    pins = dict(pins or {})
    if "distributed_optimizer" in pins:
        pins["sharding"] = load_sharding(pins, "")
        del pins["distributed_optimizer"]
    return pins


def check_job(job: Job, pins: dict) -> None:
    for key in pins:
        if key not in PIN_KEYS:
            raise SpecError(key, f"cannot be pinned (pins: {', '.join(PIN_KEYS)})")
    for key, choices in (("sharding", SHARDING_MODES), ("precision", PRECISIONS)):
        get_str(pins, key, "", default=None, choices=choices)
    if pins.get("precision") == "fp8" and not job.cluster.device.fp8_tflops:
        raise SpecError("precision", f"fp8 needs FP8 tensor cores; {job.cluster.device.name} has none (H100, H200, "
                                     f"H800, B200 and MI300X have)")
    for key in DEGREES + ("etp", "microbatch_size", "vpp"):
        if key in pins and (isinstance(pins[key], bool) or not isinstance(pins[key], int) or pins[key] < 1):
            raise SpecError(key, f"must be an integer >= 1, got {pins[key]!r}")
    vpp, pp = pins.get("vpp", 1), pins.get("pp")
    if vpp > 1 and pp is not None and not _interleaves(pp, _blocks(job.model), vpp):
        raise SpecError("vpp", f"{vpp} virtual stages on each of {pp} pipeline ranks need a pipeline of "
                               f"{pp * vpp} stages of a block or more; {job.model.name} has {_blocks(job.model)} blocks"
                        if pp > 1 else f"{vpp} virtual stages per rank need pp > 1 (pinned pp 1)")
    for key, value in (("gpus", job.gpus), ("seq_len", job.seq_len), ("global_batch", job.global_batch)):
        limit = int(bounds(key)[1])  # planner.limits, the one table of input limits
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
            raise SpecError(key, f"must be an integer between 1 and {limit:,}; got {value!r}")
    if job.gpus > job.cluster.num_devices:
        raise SpecError("gpus", f"the cluster {job.cluster.name!r} has {job.cluster.num_devices} GPUs, "
                                f"asked for {job.gpus}")
    if "recompute" in pins and pins["recompute"] not in RECOMPUTE_MODES:
        raise SpecError("recompute", f"must be one of {', '.join(RECOMPUTE_MODES)}, got {pins['recompute']!r}")
    if "tp" in pins and tensor_parallel_limit(job.model, pins["tp"]):
        raise SpecError("tp", f"{pins['tp']} cannot split the model: {tensor_parallel_limit(job.model, pins['tp'])}")
    if reason := context_parallel_limit(job.model, pins.get("tp", 1), pins.get("cp", 1)):
        raise SpecError("cp", f"{pins['cp']} cannot split the model: {reason}")
    experts = _num_experts(job.model)
    if pins.get("ep", 1) > 1 and not experts:
        raise SpecError("ep", f"expert parallelism needs MoE layers; {job.model.name} has none (got {pins['ep']})")
    if reason := expert_parallel_limit(job.model, pins.get("ep", 1)):
        raise SpecError("ep", f"{pins['ep']} cannot split the experts: {reason}")
    if "etp" in pins and not experts:
        raise SpecError("etp", f"expert tensor parallelism needs MoE layers; {job.model.name} has none")
    if pins.get("etp", 1) > 1 and _expert_tp_limit(job.model, pins["etp"]):
        raise SpecError("etp", f"{pins['etp']} cannot split the experts: {_expert_tp_limit(job.model, pins['etp'])}")
    if "pp" in pins and pins["pp"] > _blocks(job.model):
        raise SpecError("pp", f"{job.model.name} has {_blocks(job.model)} blocks, fewer than pp {pins['pp']}")
    _check_pins_split(job, pins)


def _check_pins_split(job: Job, pins: dict) -> None:
    """The pinned degrees must split the GPUs, and the pinned data parallelism and micro-batch size the global
    batch: named here, where the candidate space would otherwise just come out empty."""
    pinned, product = [], 1
    for key in ("tp", "cp", "pp", "dp"):
        if key in pins:
            pinned.append(key)
            product *= pins[key]
            if job.gpus % product:
                named = " x ".join(f"{name} {pins[name]}" for name in pinned)
                raise SpecError(key, f"must divide gpus ({job.gpus}) together with the other pinned degrees; "
                                     f"{named} = {product} does not")
    if len(pinned) == 4 and product != job.gpus:
        raise SpecError("dp", f"tp x cp x pp x dp = {product} must equal gpus ({job.gpus})")
    if all(key in pins for key in ("tp", "dp", "cp", "ep")):
        reason = expert_split_refusal(pins["tp"] * pins["dp"] * pins["cp"], pins.get("etp", pins["tp"]), pins["ep"])
        if reason:
            raise SpecError("ep", reason)
    per_step = pins.get("dp", 1) * pins.get("microbatch_size", 1)
    if job.global_batch % per_step:
        named = " x ".join(f"{name} {pins[name]}" for name in ("dp", "microbatch_size") if name in pins)
        raise SpecError("global_batch", f"{job.global_batch} sequences cannot be split into micro-batches by "
                                        f"{named} = {per_step}: it must be a multiple of it")


def check_memory(job: Job, pins: dict) -> None:
    """SpecError on ``memory`` when no configuration the job allows can fit, found without the search: only the
    most frugal configurations are scored (full recomputation unless pinned otherwise, the smallest micro-batch
    each split allows, one chunk unless ``vpp`` is pinned: more of any holds more activations), which takes a
    fraction of a second where the search scores thousands."""
    frugal: dict[tuple, ParallelConfig] = {}
    chunks = pins.get("vpp", 1)
    for config, _ in candidates(job, {"vpp": 1, **pins}):
        if "recompute" not in pins and config.recompute != "full":
            continue
        if "sharding" not in pins and config.sharding != "full":
            continue
        key = (config.tp, config.cp, config.pp, config.dp, config.ep, config.etp)
        if key not in frugal or config.microbatch_size < frugal[key].microbatch_size:
            frugal[key] = config
    if not frugal:
        raise _no_split(job, pins)
    scores = [estimate(job, config, chunks) for config in frugal.values()]
    if not any(score.fits for score in scores):
        raise _no_fit(job, scores)


def _no_split(job: Job, pins: dict) -> SpecError:
    return SpecError("gpus", f"no (tp, cp, pp, dp, ep, micro-batch size) splits {job.gpus} GPUs and a global batch "
                             f"of {job.global_batch} for {job.model.name} under the pins {pins or 'none'}")


def _no_fit(job: Job, scores: list[Score]) -> SpecError:
    closest = min(scores, key=lambda score: score.peak_memory_bytes)
    device = job.cluster.device
    return SpecError("memory", f"no configuration fits {device.name}'s {device.memory_bytes:,} bytes: the closest "
                               f"({closest.config.short()}) needs {round(closest.peak_memory_bytes):,}")


def candidates(job: Job, pins: dict) -> list[tuple[ParallelConfig, int]]:
    """Every (configuration, chunks) the job allows under ``pins``."""
    model, gpus = job.model, job.gpus
    domain = job.cluster.domain_size
    found = []
    shardings = [pins["sharding"]] if "sharding" in pins else SEARCHED_SHARDING
    precision = pins.get("precision", "bf16")   # FP8 changes the numerics: the user's recipe, never chosen for them
    tps = [pins["tp"]] if "tp" in pins else [tp for tp in _powers_of_two(domain)
                                            if not tensor_parallel_limit(model, tp)]
    cps = [pins["cp"]] if "cp" in pins else [cp for cp in _powers_of_two(16) if cp == 1 or (job.seq_len % (2 * cp) == 0
                                            and job.seq_len // cp >= 1024)]
    for tp in tps:
        for cp in cps:
            if gpus % (tp * cp) or context_parallel_limit(model, tp, cp):
                continue
            rest = gpus // (tp * cp)
            pps = [pins["pp"]] if "pp" in pins else [pp for pp in _divisors(rest) if pp <= _blocks(model)]
            for pp in pps:
                if rest % pp:
                    continue
                dp = rest // pp
                if "dp" in pins and pins["dp"] != dp:
                    continue
                for etp, ep in _expert_splits(model, tp, cp, dp, pins):
                    sizes = [pins["microbatch_size"]] if "microbatch_size" in pins else MICROBATCH_SIZES
                    for size in sizes:
                        if job.global_batch % (size * dp):
                            continue
                        microbatches = job.global_batch // (size * dp)
                        modes = [pins["recompute"]] if "recompute" in pins else searched_recompute(job.options)
                        for mode, sharding in itertools.product(modes, shardings):
                            config = ParallelConfig(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, etp=etp, microbatch_size=size,
                                                    num_microbatches=microbatches, recompute=mode, sharding=sharding,
                                                    precision=precision)
                            for chunks in _chunk_choices(pp, _blocks(model), microbatches, pins):
                                found.append((config, chunks))
    return found


def _expert_splits(model: ModelSpec, tp: int, cp: int, dp: int, pins: dict) -> list[tuple[int, int]]:
    """(etp, ep) the experts of a stage of ``tp x cp x dp`` GPUs may take: expert TP ``tp`` (Megatron's default) or
    1 (MoE parallel folding: the experts unsplit, EP over the TP ranks too, at least as many EP ranks as TP ranks),
    EP any divisor of what is left that divides the experts; (tp, 1) for a dense model."""
    experts = _num_experts(model)
    if not experts:
        return [(tp, 1)]
    etps = [pins["etp"]] if "etp" in pins else sorted({tp, 1} - ({tp} if _expert_tp_limit(model, tp) else set()))
    splits = []
    for etp in etps:
        if (tp * cp * dp) % etp:
            continue
        # folded (etp < tp), fewer EP than TP ranks would leave each GPU more experts than ETP = TP does
        eps = [pins["ep"]] if "ep" in pins else [
            ep for ep in _divisors(tp * cp * dp // etp)
            if not expert_parallel_limit(model, ep) and (etp == tp or ep * etp >= tp)]
        splits += [(etp, ep) for ep in eps if (tp * cp * dp) % (etp * ep) == 0]
    return splits


def _expert_tp_limit(model: ModelSpec, etp: int) -> str | None:
    """Why ``etp`` cannot split every expert by its intermediate width, or None."""
    for layer in model.layers:
        if isinstance(layer.mlp, MoEMLP) and layer.mlp.expert_intermediate_size % etp:
            return f"experts {layer.mlp.expert_intermediate_size} wide"
    return None


def _chunk_choices(pp: int, blocks: int, microbatches: int, pins: dict) -> list[int]:
    """Model chunks per pipeline rank: Megatron's virtual pipeline stages (``--virtual-pipeline-model-parallel-size``),
    1 for plain 1F1B. A pinned ``vpp`` above 1 needs a pipeline with a block for each of its ``pp x vpp`` stages."""
    if "vpp" in pins:
        vpp = pins["vpp"]
        return [vpp] if vpp == 1 or (microbatches >= pp and _interleaves(pp, blocks, vpp)) else []
    choices = [1]
    if microbatches >= pp:
        choices += [chunks for chunks in range(2, MAX_CHUNKS + 1) if _interleaves(pp, blocks, chunks)]
    return choices


def _interleaves(pp: int, blocks: int, chunks: int) -> bool:
    """Whether ``blocks`` make ``chunks`` virtual stages of a block or more on each of ``pp`` pipeline ranks."""
    return pp > 1 and blocks >= pp * chunks


# ---- the search ---------------------------------------------------------------------------------------

def search(model: ModelSpec, cluster: ClusterSpec, gpus: int, seq_len: int, global_batch: int,
           pins: dict | None = None, *, options: CostOptions = CostOptions(), runners_up: int = 4,
           time_budget_s: float = DEFAULT_TIME_BUDGET_S, refine: bool = True,
           progress: Progress | None = None, cancel: Cancel | None = None) -> HybridResult:
    """The best hybrid-parallel plan for ``model`` on ``gpus`` GPUs of ``cluster``.

    ``pins`` fixes any of ``tp``, ``cp``, ``pp``, ``dp``, ``ep``, ``etp``, ``microbatch_size``, ``recompute``,
    ``sharding`` (or the older ``distributed_optimizer``), ``precision`` (bf16 unless pinned: FP8 is a recipe the user
    chooses) and ``vpp`` (virtual pipeline stages per pipeline rank, Megatron's interleaving: 1 for 1F1B, 2+
    interleaved; pinned, the AdaPtis refinement is left out, as its plans are no interleaving of that degree).
    Raises ``SpecError`` naming the field when the input is invalid or no configuration fits in memory.
    ``cancel`` is asked between configurations: once it answers True the search stops and returns the best
    plan simulated so far (``stats["cancelled"]``), or raises ``SearchCancelled`` when none was yet.
    """
    started = time.monotonic()
    pins = normalized_pins(pins)
    job = Job(model=model, cluster=cluster, gpus=gpus, seq_len=seq_len, global_batch=global_batch, options=options)
    check_job(job, pins)
    report = progress or (lambda fraction, message: None)
    stop = cancel or (lambda: False)
    space = candidates(job, pins)
    if not space:
        raise _no_split(job, pins)
    report(0.05, f"scoring {len(space)} configurations")
    scores, zero_1, dominated = [], {}, 0
    for index, (config, chunks) in enumerate(space):
        if index % CANCEL_CHECK_EVERY == 0 and index:
            if stop():
                raise SearchCancelled(f"cancelled after scoring {index} of {len(space)} configurations")
            report(0.05 + 0.15 * index / len(space), f"scored {index} of {len(space)} configurations")
        if config.sharding == "full" and _fsdp_dominated(zero_1.get((replace(config, sharding="optimizer"), chunks))):
            dominated += 1
            continue
        scores.append(estimate(job, config, chunks))
        if config.sharding == "optimizer":
            zero_1[(config, chunks)] = scores[-1]
    fitting = sorted((score for score in scores if score.fits), key=lambda score: score.iteration_ms)
    if not fitting:
        raise _no_fit(job, scores)
    pruned = len(scores) - len(fitting)
    report(0.2, f"{len(fitting)} of {len(scores)} fit in memory; simulating the best {SIMULATED}")
    fitting = sorted(fitting + _partial_recompute(job, fitting, pins), key=lambda score: score.iteration_ms)
    simulated = []
    for score in _distinct(fitting, SIMULATED):
        if simulated and stop():
            break
        simulated.append(_simulate_schedule(job, score, keep_chunks="vpp" in pins))
    simulated = sorted((score for score in simulated if score.fits), key=lambda score: score.iteration_ms) or simulated
    refined = 0
    if refine and "vpp" not in pins and not stop():
        deadline = started + time_budget_s
        chosen, configs = [], set()
        for score in simulated:   # the best few distinct configurations the AdaPtis search can afford
            if (score.config not in configs and score.config.pp > 1 and isinstance(score.config.recompute, str)
                    and score.config.pp * score.chunks * score.config.num_microbatches <= MAX_REFINED_ACTIONS):
                configs.add(score.config)
                chosen.append(score)
        chosen = chosen[:REFINED]
        for index, score in enumerate(chosen):
            remaining = deadline - time.monotonic()
            if remaining <= 1 or stop():
                break
            report(0.4 + 0.5 * index / REFINED, f"AdaPtis search inside {score.config.short()}")
            better = _adaptis(job, score, remaining / (len(chosen) - index), stop)
            refined += 1
            if better is not None and better.fits and better.iteration_ms < score.iteration_ms:
                simulated.append(better)
    ranked = sorted(simulated, key=lambda score: (not score.fits, score.iteration_ms))
    best = ranked[0]
    simulated_keys = {(score.config, score.chunks) for score in simulated}
    others = _distinct(ranked[1:] + [score for score in fitting[SIMULATED:]
                                     if (score.config, score.chunks) not in simulated_keys], runners_up,
                       exclude=_key(best))
    cancelled = stop()
    report(1.0, f"{'cancelled' if cancelled else 'done'}: {best.config.short()} {best.iteration_ms:.0f} ms")
    return HybridResult(best=best, runners_up=others, considered=len(scores),
                        pruned_by_memory=pruned, seconds=time.monotonic() - started,
                        stats={"simulated": len(simulated), "refined_by_adaptis": refined, "cancelled": cancelled,
                               "fsdp_dominated": dominated})


def _key(score: Score) -> tuple:
    """What tells two scored plans apart: the configuration and the schedule (chunks only for Megatron's)."""
    return (score.config, score.schedule, 0 if score.schedule == "adaptis" else score.chunks)


def _partial_recompute(job: Job, fitting: list[Score], pins: dict) -> list[Score]:
    """Full recomputation only where memory needs it: 1F1B keeps ``p - r`` micro-batches on pipeline rank r,
    so the first ranks need recomputation long before the last. For the fastest fully recomputed
    configurations, recompute on the first k ranks only, for the smallest k that fits."""
    if "recompute" in pins:
        return []
    found = []
    recomputed = [score for score in fitting if score.config.recompute == "full" and score.config.pp > 1]
    for score in recomputed[:PARTIAL_RECOMPUTE_TRIES]:
        config, stages = score.config, score.config.pp * score.chunks
        for ranks in range(1, config.pp):
            modes = tuple("full" if stage % config.pp < ranks else "none" for stage in range(stages))
            partial = estimate(job, replace(config, recompute=modes), score.chunks)
            if partial.fits:
                found.append(partial)
                break
    return found


def _fsdp_dominated(zero_1: Score | None) -> bool:
    """Whether full sharding of a configuration cannot beat its ZeRO-1 twin ``zero_1`` (scored first): where ZeRO-1
    fits and leaves no data-parallel communication exposed, FSDP's step is the same pipeline with its gathers added
    (each layer's F and B no shorter) and the same optimizer step, so it is never faster and needs no less memory
    than fitting."""
    return zero_1 is not None and zero_1.fits and zero_1.data_parallel_ms == 0.0


def _distinct(scores: list[Score], count: int, exclude: tuple | None = None) -> list[Score]:
    chosen, seen = [], {exclude}
    for score in scores:
        key = _key(score)
        if key not in seen:
            seen.add(key)
            chosen.append(score)
        if len(chosen) == count:
            break
    return chosen


def _simulate_schedule(job: Job, score: Score, keep_chunks: bool = False) -> Score:
    """The closed form's schedule built as a plan on the pipeline ranks and simulated; 1F1B when the
    micro-batch count does not suit the interleaved schedule's rounds, unless ``keep_chunks`` (a pinned ``vpp``):
    then the closed form's estimate stays."""
    config = score.config
    profile, pipeline_cluster = shard_profile(job, config, score.chunks)
    if score.chunks > 1:
        try:
            plan = build_baseline("interleaved-1f1b", profile, config.pp, config.num_microbatches,
                                  cluster=pipeline_cluster, chunks=score.chunks)
            return _finish(job, score, plan, "interleaved-1f1b")
        except SpecError:
            if keep_chunks or not isinstance(config.recompute, str):
                return score
            score = estimate(job, config, 1)
    plan = build_baseline("1f1b", profile, config.pp, config.num_microbatches, cluster=pipeline_cluster)
    return _finish(job, score, plan, "1f1b")


def _adaptis(job: Job, score: Score, budget_s: float, cancel: Cancel) -> Score | None:
    from planner.search import search_plan  # the search pulls in more than the closed form needs

    config = score.config
    profile, pipeline_cluster = shard_profile(job, config)
    charged, layer_state, limit = pipeline_memory_budget(job, config, profile)
    try:
        result = search_plan(charged, config.pp, config.num_microbatches, cluster=pipeline_cluster,
                             memory_limit_bytes=max(1, limit), layer_state_bytes=layer_state,
                             time_budget_s=budget_s, cancel=cancel)
    except SpecError:
        return None
    return _finish(job, score, result.plan, "adaptis")


def _finish(job: Job, score: Score, plan, schedule: str) -> Score:
    config = score.config
    plan.parallel = config
    plan.meta = dict(plan.meta)
    scored = score_plan(job, config, plan, schedule, score.chunks)
    plan.meta.update({"layout": plan_layout_string(plan, layer_codes_from_spec(job.model)),
                      "model": job.model.name, "cluster": job.cluster.name, "gpus": job.gpus,
                      "seq_len": job.seq_len, "global_batch": job.global_batch,
                      "rank_mapping": RankMapping(config, job.cluster).to_dict(0)})
    return scored
