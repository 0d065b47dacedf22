"""Each layer's time on one GPU of its TP x CP group, per micro-batch, under a parallel configuration.

Compute: the analytic cost model's kernels (``planner.cost``) for ``microbatch_size x seq_len`` tokens, each
kernel's roofline time divided by ``tp·cp`` (Megatron splits every GEMM over TP and the sequence over CP; the
per-GPU FLOPs of an MoE layer under EP are the same ``1/(tp·cp)`` share on average, since a GPU's tokens are
routed ``top_k`` ways and it serves as many routed tokens as it sends), plus the fixed per-kernel overhead. Each
kernel runs at the rate of the shape its share has (``planner.cost.roofline``, ``kernel_split``): TP and CP make
a GPU's GEMMs smaller and slower per FLOP, EP x ETP gives each local expert more tokens and faster grouped GEMMs.

Communication charged inside F and B (Megatron-LM does not overlap these by default):

- TP with sequence parallelism (Korthikanti et al. 2022, Sec. 4.2.2, Fig. 5): per sublayer (mixer, dense MLP, an
  MoE's shared experts) one all-gather and one reduce-scatter of the ``tokens/cp x hidden`` activation in F, the
  same two in B; the
  vocabulary-parallel embedding reduce-scatters its output and the head all-gathers its input. A ring
  all-gather or reduce-scatter moves ``(t-1)/t`` of the buffer per GPU at the group's bus bandwidth (NCCL).
  With ``CostOptions.overlap_tp`` (Megatron-Core's ``--tp-comm-overlap``: Transformer Engine's userbuffers split
  each all-gather and reduce-scatter of a block's linear layers into chunks pipelined with the GEMMs that consume or
  produce them; Wang et al. 2023, "Overlap Communication with Dependent Computation via Decomposition in Large Deep
  Learning Models", ASPLOS) a block's collectives are charged only where they outlast its GEMMs in the same pass
  (F: the forward's; B: the input- and weight-gradient GEMMs'); the embedding's and the head's stay exposed.
- CP ring attention (Megatron-Core / Transformer Engine ``context_parallel``, Liu et al. 2023 "Ring
  Attention"): ``cp - 1`` exchanges of the local K and V chunk in F, of K, V and their gradients in B,
  overlapped with the attention kernel, so only what exceeds the core attention's time is charged. With
  ``CostOptions.cp_comm = "allgather"`` (Megatron's ``--cp-comm-type allgather``, what the executor runs): the keys
  and values all-gathered in F and their gradients reduce-scattered in B, not overlapped. Mamba-2 and gated
  delta-net run as Megatron-Core runs them under CP (``megatron/core/ssm/mamba_context_parallel.py``,
  ``gated_delta_net/gdn.py``): after the input projection an all-to-all trades each GPU's tokens of every head for
  every token of its share of the heads (Mamba-2: z, x, B and C, each group repeated over the CP ranks where they
  outnumber the groups, and dt; gated delta-net: q, k, v, z, beta and alpha), the conv and the scan run on the whole
  sequence, and a second all-to-all brings the output back (Mamba-2: y and z; gated delta-net: the gated norm's
  output); B runs the same exchanges in reverse; none is overlapped. Lightning attention (no Megatron-Core form) is
  charged the same way, for q, k and v there and its output back, as the executor runs it. Mamba-1 has no CP form
  (the search does not offer one: ``planner.parallel.search.context_parallel_limit``).
- EP (Megatron-Core's all-to-all token dispatcher; DeepSeek-V3 report, Sec. 3.2.2): dispatch and combine
  all-to-alls of ``top_k`` copies of each local (sequence-parallel) token in F, and again in B; the part bound for
  GPUs outside the NVLink domain goes over the GPU's NIC, the rest over NVLink. With expert TP (``etp`` > 1) the
  dispatcher then all-gathers the received tokens over the ETP group and the combine reduce-scatters the experts'
  output (``MoEAlltoAllTokenDispatcher``'s ``gather_from_sequence_parallel_region`` over the expert-TP group).
  Without EP, Megatron's all-gather dispatcher gathers the ``tokens/cp x hidden`` states over the ETP group and
  reduce-scatters the output, as a dense MLP's sequence parallelism does. With ``CostOptions.overlap_ep`` (DeepSeek-V3
  report, Sec. 3.2.1: DualPipe hides the all-to-alls of one micro-batch behind another's compute; Megatron-Core's
  ``--overlap-moe-expert-parallel-comm`` does the same between the forward and backward of two micro-batches) the
  exchange is charged only where it outlasts the layer's compute of the same pass: an upper bound, off by default.
  With ``CostOptions.ep_dispatcher = "deepep"`` (DeepEP's normal kernels, Megatron-Core's flex dispatcher with its
  ``deepep`` backend; DeepSeek-V3 report, Sec. 3.2.2: "each token ... is first transmitted via IB to the GPUs with
  the same in-node index on its target nodes", then forwarded over NVLink) a token crosses the NIC once for each
  other node that holds one of its experts, not once per expert there: ``(n - 1)·(1 - C(E - E/n, k) / C(E, k))``
  node copies a token for ``E`` experts spread evenly over the EP group's ``n`` nodes and ``k`` experts a token chosen
  at random (balanced routing, as the benchmarks force it). A router limited to a few groups of experts (DeepSeek-V3's
  node-limited routing, ``MoEMLP.router_groups``: at most 4 nodes a token) reaches fewer nodes
  (``remote_nodes_per_token``). What it sends over NVLink is charged as the all-to-all's. ``"hybridep"`` (NVIDIA's
  HybridEP, DeepEP's ``hybrid_ep`` branch, Megatron-Core's flex dispatcher with its ``hybridep`` backend: a
  "hierarchical communication design", RDMA between nodes and NVLink inside one, its README) is charged the same.
- Full sharding (``sharding`` ``full``; ZeRO-3, Rajbhandari et al. 2020, Sec. 7.2.2: 1.5x the data-parallel volume
  of an all-reduce): each layer's bf16 weights all-gathered before its forward and again before its backward, its
  gradients reduce-scattered after its backward, every micro-batch (FSDP2 with gradient accumulation, resharding
  after the forward); FSDP2 prefetches the next layer's gather while this one computes, so each pass is charged
  only what its collectives outlast the layer's compute. Nothing is left to the step's end but the optimizer. Without
  DP overlap (``CostOptions.overlap_dp`` off: this project's executor, ``executor/running/sharding.py``) the gathers
  are charged in full (an embedding's in F only: its backward needs no weights), and the gradients are
  reduce-scattered once, at the step's end, as
  ``torch.distributed.pipelining`` runs FSDP2 inside a schedule (it syncs gradients at the last backward only).

Recomputation (Korthikanti et al. 2022, Sec. 5; Megatron's ``--recompute-granularity``): ``full`` runs each
layer's forward (with its TP/CP/EP communication; not full sharding's gather, which the backward's own gather
serves) again before its backward and keeps only the layer's input. ``selective`` is the framework's
(``CostOptions.selective``): Megatron-Core's recomputes the modules ``CostOptions.recompute_modules`` names
(``--recompute-modules``), by default the core attention, which FlashAttention already does inside its backward
(``planner.cost.attention``), so it costs nothing more here and keeps what ``none`` keeps; MLA's up-projections,
the experts' activation or a dense MLP each free what they keep and re-run their own kernels in the backward
(``planner.cost.analytic.recompute_module_costs``), their TP and EP collectives not among them;
torchtitan's is per-op checkpointing (``planner.cost.work.per_op_checkpoint``): each block keeps its input and
the outputs of every other matmul and of fused attention, and its backward re-runs the rest of its forward first,
with the sequence-parallel TP all-gathers (not on the save list: half the block's TP collectives) but not the
reduce-scatters, EP all-to-alls or CP exchanges inside attention (saved).

Attention without FlashAttention (``CostOptions.flash_attention = False``, Megatron-LM before 2022): the
``b·a·s²`` scores are materialised and the whole square is computed before the causal mask; per score the
forward writes them (2 bytes), the fused scale-mask-softmax reads and writes them (4), dropout reads them and
writes its output and 1-byte mask (5), and P·V reads them (2): 13 bytes; the backward moves 17 (dropout's and
softmax's backward and the dP/dS GEMM operands); the layer keeps ``5·a·s²·b`` bytes more (Korthikanti et al.
2022, Sec. 4.1).

Data parallelism at the step's end (Megatron-Core ``DistributedDataParallel`` and distributed optimizer):
gradients reduce-scattered (all-reduced without the distributed optimizer) over ``dp·cp`` for dense
parameters and over the expert-data-parallel group for experts, then the updated bf16 parameters
all-gathered; with overlap (``--overlap-grad-reduce`` / ``--overlap-param-gather``, PyTorch DDP's buckets)
the reduction hides behind the last micro-batch's backward and the gather behind the first forward.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache

from planner.cluster import ClusterSpec
from planner.cost.analytic import (DTYPE_BYTES, RECOMPUTE_MODULES, layer_cost, recompute_module_costs,
                                   recompute_modules_of)
from planner.cost.attention import attention_core, key_span, mean_keys_per_query
from planner.cost.roofline import ATTENTION_KERNELS, WHOLE, Split, bandwidth_bytes_per_ms, roofline_ms
from planner.cost.vocab import LOSS_BACKWARD_BYTES
from planner.cost.work import Kernel, per_op_checkpoint
from planner.errors import SpecError
from planner.parallel.config import ParallelConfig
from planner.parallel.mapping import GroupSpan, RankMapping
from planner.parallel.memory import held_parameters
from planner.parallel.params import LayerParams, layer_params
from planner.spec.model import AttentionMixer, LayerSpec, Mamba2Mixer, ModelSpec, MoEMLP

FP32_BYTES = 4
# Adam's update streams, per parameter of the local shard: fp32 grad, master weight and two moments read,
# the three written back, and the bf16 weight written: 4 + 12 + 12 + 2 bytes (memory-bound, one fused pass).
OPTIMIZER_BYTES_PER_PARAM = 30
SELECTIVE_RECOMPUTATION = ("attention", "per_op")


# The MoE token dispatchers (module doc), each in words (the CLI's --ep-dispatcher help and the API's field say them)
EP_DISPATCHER_WORDS = {
    "alltoall": "Megatron-Core's all-to-all, every routed copy of a token sent; the default",
    "deepep": "DeepEP's (Megatron-Core's flex dispatcher), a token sent over the NIC once per other node holding one "
              "of its experts, then over NVLink",
    "hybridep": "NVIDIA's HybridEP (the flex dispatcher's hybridep backend), hierarchical as DeepEP's and charged so",
}
EP_DISPATCHERS = tuple(EP_DISPATCHER_WORDS)


@dataclass(frozen=True)
class CostOptions:
    """Software choices that change the cost but are not part of the plan."""

    # the main gradients' bytes, as Megatron keeps and reduces them: fp32 (Megatron-LM's bf16 training sets
    # accumulate_allreduce_grads_in_fp32), or 2 where a recipe sets grad_reduce_in_fp32 off (planner.parallel.memory)
    grad_reduce_bytes: int = FP32_BYTES
    overlap_dp: bool = True               # Megatron-Core --overlap-grad-reduce / --overlap-param-gather
    flash_attention: bool = True          # False: scores materialised (see the module doc)
    # Megatron-Core's --cp-comm-type: "p2p" (the ring, overlapped with attention; its default) or "allgather" (keys
    # and values all-gathered before attention, their gradients reduce-scattered after, not overlapped: what this
    # project's executor runs, executor/model/context_parallel.py)
    cp_comm: str = "p2p"
    overlap_tp: bool = False              # Megatron-Core --tp-comm-overlap (see the module doc); off by default there
    overlap_ep: bool = False              # EP dispatch and combine behind compute (see the module doc); off by default
    # the MoE token dispatcher (module doc): "alltoall" (Megatron-Core's MoEAlltoAllTokenDispatcher, each routed copy
    # sent) or "deepep" (DeepEP's, each token sent over the NIC once per other node holding one of its experts)
    ep_dispatcher: str = "alltoall"
    # the fused attention kernel the framework runs on a GPU (planner.cost.roofline.ATTENTION_KERNELS): "cudnn"
    # (Transformer Engine's, Megatron-Core and NeMo), "flash2" (PyTorch SDPA's FlashAttention-2, torchtitan) or
    # "cudnn-2024" (Transformer Engine's as the 2024 stacks ran it: the published-runs benchmark's 2024 tables)
    attention_kernel: str = "cudnn"
    # FP8 training keeps an FP8 GEMM's input for its weight gradient as its FP8 cast (Transformer Engine: Megatron-
    # Core and NeMo; planner.cost.work.saved), or False: as the BF16 tensor, cast again in the backward (torchao's
    # Float8Linear, torchtitan's float8: matmul_with_hp_or_float8_args saves input_hp)
    fp8_saved_inputs: bool = True
    # what ``recompute`` ``selective`` checkpoints (module doc): "attention" (Megatron-Core's
    # ``--recompute-granularity selective``: the core attention) or "per_op" (torchtitan's ``SelectiveAC``)
    selective: str = "attention"
    # how the loss is computed, for what its backward allocates (planner.cost.vocab.LOSS_BACKWARD_BYTES): "fused"
    # (Megatron's vocabulary-parallel cross-entropy), "eager" (two fp32 gradients: F.cross_entropy on whole logits,
    # this project's executor) or "pytorch" (torchtitan's: F.cross_entropy, under TP its loss_parallel)
    cross_entropy: str = "fused"
    # Megatron-Core's selective recomputation by module (``--recompute-modules``; planner.cost.analytic
    # RECOMPUTE_MODULES), what ``selective`` re-runs where ``selective`` is "attention": its default, the core
    # attention, re-runs nothing more under FlashAttention; the others trade compute for memory (DeepSeek-V3's
    # recipes recompute MLA's up-projections)
    recompute_modules: tuple[str, ...] = ("core_attn",)

    def __post_init__(self):
        if self.cp_comm not in ("p2p", "allgather"):
            raise SpecError("cp_comm", f"must be 'p2p' or 'allgather', got {self.cp_comm!r}")
        if self.ep_dispatcher not in EP_DISPATCHERS:
            raise SpecError("ep_dispatcher", f"must be one of {', '.join(EP_DISPATCHERS)}, got {self.ep_dispatcher!r}")
        if self.selective not in SELECTIVE_RECOMPUTATION:
            raise SpecError("selective", f"must be one of {', '.join(SELECTIVE_RECOMPUTATION)}, "
                                         f"got {self.selective!r}")
        unknown = [name for name in self.recompute_modules if name not in RECOMPUTE_MODULES]
        if unknown or not self.recompute_modules:
            raise SpecError("recompute_modules", f"must name Megatron-Core modules modelled here, any of "
                                                 f"{', '.join(RECOMPUTE_MODULES)}; got {', '.join(unknown) or 'none'}")
        if self.cross_entropy not in LOSS_BACKWARD_BYTES:
            raise SpecError("cross_entropy", f"must be one of {', '.join(LOSS_BACKWARD_BYTES)}, "
                                             f"got {self.cross_entropy!r}")
        if self.attention_kernel not in ATTENTION_KERNELS:
            raise SpecError("attention_kernel", f"must be one of {', '.join(ATTENTION_KERNELS)}, "
                                                f"got {self.attention_kernel!r}")


OVERLAPS = ("tp", "dp", "ep")


def overlap_options(text: object, field: str = "overlap") -> CostOptions:
    """``CostOptions`` with the overlaps named in ``text`` (``tp,dp,ep``, any of them, or ``none``) on and the others
    off; Megatron's defaults with DP overlapped are ``dp``. SpecError on ``field`` for anything else."""
    if not isinstance(text, str) or not text.strip():
        raise SpecError(field, f"must name the overlaps, any of {', '.join(OVERLAPS)} (comma-separated) or none; "
                               f"got {text!r}")
    names = [name.strip() for name in text.split(",") if name.strip()]
    if names == ["none"]:
        names = []
    unknown = [name for name in names if name not in OVERLAPS]
    if unknown:
        raise SpecError(field, f"{', '.join(unknown)} is no overlap; give any of {', '.join(OVERLAPS)} "
                               f"(comma-separated) or none")
    return CostOptions(overlap_tp="tp" in names, overlap_dp="dp" in names, overlap_ep="ep" in names)


def overlap_text(options: CostOptions) -> str:
    """``options``' overlaps as ``overlap_options`` reads them: ``dp`` for the defaults, ``none`` for none."""
    names = [name for name, on in zip(OVERLAPS, (options.overlap_tp, options.overlap_dp, options.overlap_ep)) if on]
    return ",".join(names) or "none"


DEFAULT_OVERLAP = overlap_text(CostOptions())

# The training framework a job runs on, as the cost model tells them apart: the attention kernel it runs, how its
# FP8 GEMMs keep their inputs for the weight gradient, what its selective recomputation keeps and how its loss is
# computed (CostOptions' fields, each documented there).
FRAMEWORKS = {
    # Megatron-Core and NeMo: Transformer Engine's cuDNN attention, FP8 inputs kept as their FP8 casts, selective
    # recomputation of the core attention, the fused vocabulary-parallel cross-entropy
    "megatron": {"attention_kernel": "cudnn", "fp8_saved_inputs": True, "selective": "attention",
                 "cross_entropy": "fused"},
    # torchtitan: PyTorch SDPA's FlashAttention-2, torchao's Float8Linear keeping the BF16 input, per-op selective
    # checkpointing, PyTorch's cross-entropy (under TP, its loss_parallel)
    "torchtitan": {"attention_kernel": "flash2", "fp8_saved_inputs": False, "selective": "per_op",
                   "cross_entropy": "pytorch"},
}
DEFAULT_FRAMEWORK = "megatron"
# What each framework runs, in words (the CLI's --framework help and the API's field say them)
FRAMEWORK_KERNELS = {
    "megatron": "Megatron-Core or NeMo: Transformer Engine's cuDNN attention, FP8 GEMM inputs kept in FP8, "
                "selective recomputation of the core attention, the fused cross-entropy",
    "torchtitan": "PyTorch SDPA's FlashAttention-2, torchao's Float8 keeping BF16 inputs, per-op selective "
                  "checkpointing, PyTorch's cross-entropy",
}
FRAMEWORKS_TEXT = " or ".join(f"{name} ({FRAMEWORK_KERNELS[name]}{'; the default' * (name == DEFAULT_FRAMEWORK)})"
                              for name in FRAMEWORKS)


DEFAULT_RECOMPUTE_MODULES = ",".join(CostOptions().recompute_modules)
# What each of Megatron-Core's recompute modules re-runs in the backward to free what it kept, in words (the CLI's
# --recompute-modules help and the API's field say them; planner.cost.analytic.recompute_module_costs costs them)
RECOMPUTE_MODULE_WORDS = {
    "core_attn": "the core attention (free under FlashAttention; the default)",
    "mla_up_proj": "MLA's query and key-value up-projections with the rotary embedding",
    "moe_act": "the experts' activation",
    "mlp": "a dense MLP, of which only the input is kept",
    "layernorm": "the norms before MLA and before an MoE (the others are fused into the linear layer after them)",
    "moe": "the whole MoE layer but its input: router, dispatch and combine (the all-to-alls again), experts and "
           "shared experts",
    "shared_experts": "an MoE's shared experts",
}
RECOMPUTE_MODULES_TEXT = "; ".join(f"{name}: {words}" for name, words in RECOMPUTE_MODULE_WORDS.items())


def recompute_modules_named(text: object, field: str = "recompute_modules") -> tuple[str, ...]:
    """The recompute modules ``text`` names (``core_attn,mla_up_proj``: Megatron-Core's ``--recompute-modules``, comma-
    separated), each once, in ``RECOMPUTE_MODULE_WORDS``' order. SpecError on ``field`` for anything else."""
    if not isinstance(text, str) or not text.strip():
        raise SpecError(field, f"must name Megatron-Core's recompute modules, any of {', '.join(RECOMPUTE_MODULES)} "
                               f"(comma-separated); got {text!r}")
    names = {name.strip() for name in text.split(",") if name.strip()}
    unknown = sorted(names - set(RECOMPUTE_MODULES))
    if unknown:
        raise SpecError(field, f"{', '.join(unknown)} is no recompute module modelled here; give any of "
                               f"{', '.join(RECOMPUTE_MODULES)} (comma-separated; Megatron-Core's gdn_norm_out, "
                               f"gdp_in_proj, gdp_qkv and mhc are not modelled)")
    return tuple(name for name in RECOMPUTE_MODULES if name in names)


def recompute_modules_text(options: CostOptions) -> str:
    """``options``' recompute modules as ``recompute_modules_named`` reads them."""
    return ",".join(options.recompute_modules)


DEFAULT_EP_DISPATCHER = CostOptions().ep_dispatcher
EP_DISPATCHERS_TEXT = " or ".join(f"{name} ({words})" for name, words in EP_DISPATCHER_WORDS.items())


@dataclass(frozen=True)
class Software:
    """The software a job trains on, as a job, the CLI and a plan's ``meta`` write it: the communication hidden behind
    compute (``overlap``, ``overlap_options``), whose kernels it runs (``framework``, ``FRAMEWORKS``), what its
    selective recomputation re-runs (``recompute_modules``, ``recompute_modules_named``: Megatron-Core's, so only with
    a framework whose ``selective`` is theirs) and how its MoE tokens are sent (``ep_dispatcher``, ``EP_DISPATCHERS``).

    The one value every planning entry point (service, CLI, web job, plan re-prediction) takes for them: ``named``
    reads and checks what a request gives, ``options`` is the cost model's ``CostOptions``, ``of`` reads a
    ``CostOptions`` back. A new setting is a field here, its check in ``options`` and its column on the web's job."""

    overlap: str = DEFAULT_OVERLAP
    framework: str | None = DEFAULT_FRAMEWORK   # None: ``of`` a Python caller's mixed ``CostOptions``
    recompute_modules: str = DEFAULT_RECOMPUTE_MODULES
    ep_dispatcher: str = DEFAULT_EP_DISPATCHER

    @classmethod
    def named(cls, values: Mapping[str, object], *, prefix: str = "",
              default_overlap: str = DEFAULT_OVERLAP) -> Software:
        """The settings ``values`` gives by field name (one missing, None or blank takes its default; the overlap
        ``default_overlap``), checked (SpecError on ``prefix`` and the field at fault) and written as the planner
        writes them (``of``)."""
        defaults = {**vars(cls()), "overlap": default_overlap}
        given = {name: values.get(name) for name in defaults}
        return cls.of(cls(**{name: defaults[name] if value in (None, "") else value
                             for name, value in given.items()}).options(prefix))

    @classmethod
    def of(cls, options: CostOptions) -> Software:
        """The settings ``options`` were made of; ``framework`` None where they mix two frameworks' kernels."""
        return cls(overlap_text(options), framework_of(options), recompute_modules_text(options), options.ep_dispatcher)

    def options(self, prefix: str = "") -> CostOptions:
        """The job's ``CostOptions``: the overlaps on the framework's kernels, its recompute modules and dispatcher.
        SpecError on ``prefix`` and the field at fault (``meta.framework`` for a plan document's, say)."""
        framework, dispatcher = self.framework, self.ep_dispatcher
        if not isinstance(framework, str) or framework not in FRAMEWORKS:
            raise SpecError(f"{prefix}framework", f"must be one of {', '.join(FRAMEWORKS)}, got {framework!r}")
        if not isinstance(dispatcher, str) or dispatcher not in EP_DISPATCHERS:
            raise SpecError(f"{prefix}ep_dispatcher", f"must be one of {', '.join(EP_DISPATCHERS)}, got {dispatcher!r}")
        modules = recompute_modules_named(self.recompute_modules, f"{prefix}recompute_modules")
        if modules != CostOptions().recompute_modules and FRAMEWORKS[framework]["selective"] != "attention":
            raise SpecError(f"{prefix}recompute_modules", f"{framework}'s selective recomputation is per-op "
                                                          f"checkpointing; Megatron-Core's recompute modules "
                                                          f"({', '.join(modules)}) apply with framework megatron")
        return replace(overlap_options(self.overlap, f"{prefix}overlap"), **FRAMEWORKS[framework],
                       recompute_modules=modules, ep_dispatcher=dispatcher)

    def to_dict(self) -> dict:
        return vars(self).copy()

    def changed(self) -> dict:
        """The settings that differ from the defaults (what a plan's ``meta`` records), a mixed framework left out."""
        return {name: value for name, value in vars(self).items()
                if value is not None and value != getattr(Software(), name)}


def executor_options(meta: Mapping[str, object]) -> CostOptions:
    """How this project's executor runs a plan whose ``meta`` is given: ``EXECUTOR_OPTIONS``, with the recompute
    modules the plan was made for (``Software``; its selective recomputation runs Megatron-Core's modules,
    ``executor.model.recompute``). A run of it is predicted, and calibrated, with these."""
    return replace(EXECUTOR_OPTIONS, recompute_modules=Software.named(meta, prefix="meta.").options("meta.")
                   .recompute_modules)


def framework_of(options: CostOptions) -> str | None:
    """The framework in ``FRAMEWORKS`` whose kernels ``options`` assume; None where they mix two (a Python caller's
    own ``CostOptions``, which no job, CLI flag or plan document can name)."""
    return next((name for name, settings in FRAMEWORKS.items()
                 if all(getattr(options, key) == value for key, value in settings.items())), None)


# What this project's executor runs (executor/running/): CP by all-gather, the DP reduction after the step's last
# backward (not overlapped), a loss whose backward holds two fp32 gradients (executor/model/layers.py): a run of it is
# predicted, and calibrated, with these.
EXECUTOR_OPTIONS = CostOptions(cp_comm="allgather", overlap_dp=False, cross_entropy="eager")

SCORE_BYTES_FORWARD, SCORE_BYTES_BACKWARD, SCORE_ACTIVATION_BYTES = 13, 17, 5


@dataclass(frozen=True)
class PassTime:
    """One pass's roofline time without the per-kernel overhead, and how many kernels it launches."""

    roofline_ms: float
    kernels: int

    def on(self, shards: int, overhead_ms: float) -> float:
        return self.roofline_ms / shards + self.kernels * overhead_ms


@dataclass(frozen=True)
class LayerWork:
    """A layer's unsharded work for one micro-batch, from the analytic cost model."""

    forward: PassTime
    backward_input: PassTime
    backward_weight: PassTime
    attention_core_ms: float        # F of the core attention alone (what CP's ring overlaps with)
    model_flops: float              # F + B + W without any recomputation
    recomputed_flops: float         # what the kernels re-execute anyway (FlashAttention's scores)
    forward_flops: float
    activation_bytes: float         # kept for the backward without recomputation (FlashAttention)
    fp8_activation_delta: float     # what FP8 training with FP8-saved inputs adds to it (planner.cost.work.saved)
    params: LayerParams
    # per-op selective checkpointing (planner.cost.work.per_op_checkpoint): what a block keeps besides its input,
    # and the forward kernels its backward re-runs, with their FLOPs
    per_op_kept_bytes: float = 0.0
    per_op_rerun: PassTime = PassTime(0.0, 0)
    per_op_rerun_flops: float = 0.0
    # Megatron-Core's recompute modules that apply to the layer (planner.cost.analytic.recompute_module_costs)
    modules: tuple["ModuleRerun", ...] = ()

    def chosen_modules(self, options: CostOptions) -> tuple["ModuleRerun", ...]:
        """The layer's modules that Megatron's selective recomputation re-runs under ``options``."""
        if options.selective != "attention":
            return ()
        return tuple(module for module in self.modules if module.name in options.recompute_modules)

    def modules_freed_bytes(self, precision: str, cluster: ClusterSpec, options: CostOptions) -> float:
        """What the chosen modules no longer keep (unsharded), and so rebuild in the layer's backward: each tensor
        once, however many of them free it."""
        freed = {part: (nbytes, fp8_delta) for module in self.chosen_modules(options)
                 for part, nbytes, fp8_delta in module.freed}
        return sum(held_in(precision, cluster, options, nbytes, fp8_delta) for nbytes, fp8_delta in freed.values())

    def held_bytes(self, precision: str, cluster: ClusterSpec, options: CostOptions) -> float:
        """The activations kept for the backward in ``precision`` (unsharded; ``held_in``)."""
        return held_in(precision, cluster, options, self.activation_bytes, self.fp8_activation_delta)


def held_in(precision: str, cluster: ClusterSpec, options: CostOptions, nbytes: float, fp8_delta: float) -> float:
    """Kept activations of ``nbytes`` in ``precision``: under FP8 on a GPU with FP8 tensor cores, with
    ``options.fp8_saved_inputs``, the FP8 GEMMs' inputs as their FP8 casts (``fp8_delta``,
    ``planner.cost.work.saved``)."""
    return nbytes + fp8_delta if runs_fp8(precision, cluster) and options.fp8_saved_inputs else nbytes


@dataclass(frozen=True)
class ModuleRerun:
    """One of Megatron-Core's recompute modules in a layer (``planner.cost.analytic.RecomputeModule``): the forward
    kernels its backward re-runs (time and FLOPs, unsharded), whether it re-runs the MoE's dispatch and combine too,
    and the tensors the forward no longer keeps, by name: (name, bytes, FP8 delta; unsharded, in a precision by
    ``held_in``)."""

    name: str
    rerun: PassTime
    rerun_flops: float
    freed: tuple[tuple[str, float, float], ...]
    dispatch: bool = False


def runs_fp8(precision: str, cluster: ClusterSpec) -> bool:
    """Whether the GEMMs Transformer Engine covers run in FP8: ``precision`` fp8 on GPUs with FP8 tensor cores (the
    search refuses a pinned fp8 elsewhere, ``planner.parallel.search``)."""
    return precision == "fp8" and cluster.device.fp8_tflops > 0


def _pass_time(kernels: tuple[Kernel, ...], cluster: ClusterSpec, precision: str = "bf16",
               split: Split = WHOLE, attention: str = "cudnn") -> PassTime:
    """Each kernel at the rate its share under ``split`` reaches (``planner.cost.roofline``). Under ``precision``
    ``fp8`` the GEMMs Transformer Engine covers run at the FP8 peak, each after a cast kernel of its own
    (``planner.cost.primitives.FP8_CAST_TRANSPOSE_BYTES``)."""
    device = cluster.device
    bandwidth = bandwidth_bytes_per_ms(device)
    total, count, fp8 = 0.0, len(kernels), runs_fp8(precision, cluster)
    for k in kernels:
        in_fp8 = fp8 and k.fp8
        total += roofline_ms(k, device, split, in_fp8, attention)
        if in_fp8 and k.fp8_cast_bytes:
            total += k.fp8_cast_bytes / bandwidth
            count += 1
    return PassTime(total, count)


def _materialised_scores(mixer: AttentionMixer, microbatch_size: int, seq_len: int, core) -> tuple:
    """Extra (F, B) kernels and activation bytes of attention that materialises its scores."""
    scores = microbatch_size * mixer.num_heads * seq_len * seq_len
    keys = key_span(seq_len, mixer.window, mixer.chunk)
    causal_flops = sum(kernel.flops for kernel in core.forward)
    square_flops = causal_flops * keys / mean_keys_per_query(seq_len, mixer.window, mixer.chunk) - causal_flops
    recomputed = sum(kernel.recomputed_flops for kernel in core.backward_input)
    # the masked half is executed but is no model FLOP (counted like recomputation)
    forward = (Kernel(recomputed_flops=square_flops), Kernel(bytes=SCORE_BYTES_FORWARD * scores))
    backward = (Kernel(recomputed_flops=2 * square_flops - recomputed),
                Kernel(bytes=SCORE_BYTES_BACKWARD * scores))
    return forward, backward, SCORE_ACTIVATION_BYTES * scores


def _executed_flops(kernels: tuple[Kernel, ...]) -> float:
    """What ``kernels`` execute, model FLOPs and what they re-compute besides."""
    return sum(k.flops + k.recomputed_flops for k in kernels)


def kernel_split(config: ParallelConfig) -> Split:
    """How ``config`` cuts each GPU's share of a layer's kernels (what their shapes, and so their rates, become)."""
    return Split(tp=config.tp, cp=config.cp, ep=config.ep, etp=config.etp)


@lru_cache(maxsize=512)
def layer_work(spec: ModelSpec, cluster: ClusterSpec, microbatch_size: int, seq_len: int,
               flash_attention: bool = True, precision: str = "bf16", split: Split = WHOLE,
               attention_kernel: str = "cudnn") -> tuple[LayerWork, ...]:
    """Every layer's work at ``microbatch_size x seq_len`` tokens (distinct layers costed once), its GEMMs in
    ``precision`` (``_pass_time``), each kernel at the rate of its share under ``split`` but counted whole (so that
    ``PassTime.on(tp·cp)`` is one GPU's time), fused attention as ``attention_kernel`` runs it."""
    sized = replace(spec, micro_batch_size=microbatch_size, seq_len=seq_len)
    dtype_bytes = DTYPE_BYTES[spec.dtype]
    params = layer_params(spec)
    by_layer: dict[LayerSpec, LayerWork] = {}
    result = []
    for layer, layer_param in zip(spec.layers, params):
        if layer not in by_layer:
            cost = layer_cost(layer, sized)
            core_ms = 0.0
            if isinstance(layer.mixer, AttentionMixer):
                mixer = layer.mixer
                core = attention_core(batch=microbatch_size, seq_len=seq_len, heads=mixer.num_heads,
                                      kv_heads=mixer.num_kv_heads, qk_dim=mixer.head_dim, v_dim=mixer.value_dim,
                                      window=mixer.window, dtype_bytes=dtype_bytes, chunk=mixer.chunk)
                core_ms = _pass_time(core.forward, cluster, split=split, attention=attention_kernel).roofline_ms
                if not flash_attention:
                    extra_forward, extra_backward, extra_bytes = _materialised_scores(mixer, microbatch_size,
                                                                                      seq_len, core)
                    cost = replace(cost, forward=cost.forward + extra_forward,
                                   backward_input=cost.backward_input + extra_backward,
                                   activation_bytes=cost.activation_bytes + extra_bytes)
            kernels = cost.forward + cost.backward_input + cost.backward_weight
            kept, rerun = per_op_checkpoint(cost.forward, split.tp)
            modules = tuple(
                ModuleRerun(name, _pass_time(module.rerun.forward, cluster, precision, split, attention_kernel),
                            _executed_flops(module.rerun.forward),
                            tuple((part, freed.activation_bytes, freed.fp8_activation_delta)
                                  for part, freed in module.freed.items()), module.dispatch)
                for name, module in recompute_module_costs(layer, sized).items())
            by_layer[layer] = LayerWork(
                forward=_pass_time(cost.forward, cluster, precision, split, attention_kernel),
                backward_input=_pass_time(cost.backward_input, cluster, precision, split, attention_kernel),
                backward_weight=_pass_time(cost.backward_weight, cluster, precision, split, attention_kernel),
                attention_core_ms=core_ms,
                model_flops=cost.model_flops(), recomputed_flops=sum(k.recomputed_flops for k in kernels),
                forward_flops=sum(k.flops for k in cost.forward), activation_bytes=cost.activation_bytes,
                fp8_activation_delta=cost.fp8_activation_delta, params=layer_param,
                per_op_kept_bytes=kept, per_op_rerun=_pass_time(rerun, cluster, precision, split, attention_kernel),
                per_op_rerun_flops=_executed_flops(rerun), modules=modules)
        result.append(replace(by_layer[layer], params=layer_param))
    return tuple(result)


# ---- collectives --------------------------------------------------------------------------------------

def ring_terms(nbytes: float, size: int) -> tuple[int, float]:
    """(latencies, bytes each GPU moves) of one ring all-gather or reduce-scatter of an ``nbytes`` buffer (the full,
    gathered size) over ``size`` GPUs: ``size - 1`` steps of ``nbytes / size`` each."""
    return size - 1, (size - 1) / size * nbytes


def all_to_all_terms(nbytes: float, group: GroupSpan) -> tuple[float, float]:
    """(bytes over NVLink, bytes over the NIC) each GPU sends in an all-to-all of ``nbytes`` spread evenly over the
    group: the share for GPUs in its own NVLink domain, and the rest."""
    return (group.per_domain - 1) / group.size * nbytes, (group.size - group.per_domain) / group.size * nbytes


def _none_drawn(pool: float, held: float, draws: int) -> float:
    """The chance that ``draws`` items drawn without replacement from ``pool`` miss the ``held`` of them."""
    return math.prod((pool - held - i) / (pool - i) for i in range(draws)) if draws <= pool - held else 0.0


def remote_nodes_per_token(mlp: MoEMLP, group: GroupSpan) -> float:
    """The other nodes of the EP ``group`` that hold at least one of a token's ``top_k`` experts, on average, with the
    experts spread evenly over the group's nodes in order and routing balanced (module doc, ``deepep``).

    Free routing draws the experts at random. Group-limited routing (``MoEMLP.router_groups``) draws
    ``router_group_topk`` of the groups, each of which holds at least one of the token's experts (its best, which the
    group's score counts), and the other ``top_k - router_group_topk`` at random among the drawn groups' experts: a
    node holding whole groups is reached exactly when one of its groups is drawn (DeepSeek-V3 with EP 64 over 8 nodes:
    3.5 other nodes a token, against 4.6 routed freely); a node holding part of a group, when its part gets one. A
    layout where neither the nodes nor the groups divide the other is charged free routing, an upper bound."""
    nodes = group.size // group.per_domain
    if nodes <= 1:
        return 0.0
    experts, top_k = mlp.num_experts, mlp.top_k
    groups, drawn = mlp.router_groups, mlp.router_group_topk
    if not mlp.group_limited or (groups % nodes and nodes % groups):
        return (nodes - 1) * (1 - _none_drawn(experts, experts / nodes, top_k))
    if nodes <= groups:
        return (nodes - 1) * (1 - _none_drawn(groups, groups // nodes, drawn))
    pool, held = drawn * experts / groups, experts / nodes
    reached = 1 - (1 - groups / nodes) * _none_drawn(pool, held, top_k - drawn)
    return (nodes - 1) * drawn / groups * reached


def dispatch_ms(token_bytes: float, tokens: float, mlp: MoEMLP, group: GroupSpan,
                dispatcher: str = "alltoall") -> float:
    """One dispatch (or combine) of a GPU's ``tokens`` (each ``token_bytes``) to their ``mlp.top_k`` experts over the EP
    ``group``: Megatron's all-to-all of every routed copy, or DeepEP's (and HybridEP's), whose NIC carries a token once
    per other node holding one of its experts (module doc)."""
    routed = tokens * mlp.top_k * token_bytes
    if dispatcher == "alltoall" or not group.crosses_domains:
        return all_to_all_ms(routed, group)
    inside, _ = all_to_all_terms(routed, group)
    return _both_links_ms(inside, tokens * token_bytes * remote_nodes_per_token(mlp, group), group)


def ring_collective_ms(nbytes: float, group: GroupSpan) -> float:
    """One ring all-gather or reduce-scatter of an ``nbytes`` buffer (the full, gathered size)."""
    if group.size == 1 or nbytes == 0:
        return 0.0
    latencies, moved = ring_terms(nbytes, group.size)
    return moved / (group.ring_bandwidth_gb_s() * 1e6) + latencies * group.latency_us() * 1e-3


def all_to_all_ms(nbytes: float, group: GroupSpan) -> float:
    """One all-to-all in which every GPU sends ``nbytes`` spread evenly over the group: the share for GPUs in
    its own NVLink domain goes over NVLink, the rest over its NIC, both at once."""
    if group.size == 1:
        return 0.0
    return _both_links_ms(*all_to_all_terms(nbytes, group), group)


def _both_links_ms(inside: float, outside: float, group: GroupSpan) -> float:
    """An exchange sending ``inside`` bytes over NVLink and ``outside`` over the NIC, both at once."""
    return max(inside / (group.intra.bandwidth_gb_s * 1e6),
               outside / (group.inter.bandwidth_gb_s * 1e6)) + group.latency_us() * 1e-3


def collective_terms(op: str, nbytes: float, group: GroupSpan) -> tuple[float, float]:
    """(latencies, bytes at the link's bandwidth) the model charges one collective ``op`` (``all_gather``,
    ``reduce_scatter``, ``all_reduce`` or an all-to-all: ``dispatch``, ``combine``, ``counts``) of ``nbytes`` (the
    gathered or reduced buffer; an all-to-all's received rows) over ``group``, on the link of ``group`` (NVLink
    inside a domain, the NIC across): the terms a fit of that link's latency and bandwidth to observed collectives
    solves for (``planner.calibrate.fit_collective_links``). An all-reduce is a reduce-scatter and an all-gather;
    across domains a ring is taken as NIC-bound and an all-to-all is charged its NIC share (what ``all_to_all_ms``
    finds slower wherever NVLink is the faster link)."""
    if op in ("all_gather", "reduce_scatter", "all_reduce"):
        latencies, moved = ring_terms(nbytes, group.size)
        if group.crosses_domains:   # the NICs of a domain carry the ring in parallel (ring_bandwidth_gb_s)
            moved /= group.per_domain
        return (2 * latencies, 2 * moved) if op == "all_reduce" else (latencies, moved)
    if op in ("dispatch", "combine", "counts"):
        inside, outside = all_to_all_terms(nbytes, group)
        return 1, outside if group.crosses_domains else inside
    raise SpecError("op", f"{op!r} is no collective the cost model charges (all_gather, reduce_scatter, all_reduce, "
                          f"dispatch, combine, counts)")


def collective_ms(op: str, nbytes: float, group: GroupSpan) -> float:
    """One collective ``op`` as ``collective_terms`` charges it on the group's link (what a fit is checked by)."""
    if group.size == 1:
        return 0.0
    latencies, moved = collective_terms(op, nbytes, group)
    link = group.inter if group.crosses_domains else group.intra
    return latencies * link.latency_us * 1e-3 + moved / (link.bandwidth_gb_s * 1e6)


def head_exchange_widths(mixer, tp: int, cp: int) -> tuple[float, float]:
    """(channels a token sends to the heads' ranks, channels of a token's output sent back) on one GPU, per token,
    for a recurrent mixer under CP (module doc; Megatron-Core's ``MambaContextParallel.pre_conv_ssm`` and
    ``post_conv_ssm``, GDN's ``a2a_cp_to_hp`` and ``_gated_norm_and_a2a``)."""
    if isinstance(mixer, Mamba2Mixer):
        inner, groups = mixer.num_heads * mixer.head_dim / tp, mixer.n_groups / tp
        repeat = max(1.0, cp / groups)
        return 2 * inner + 2 * groups * repeat * mixer.state_size + mixer.num_heads / tp, 2 * inner
    values, keys = mixer.num_heads * mixer.head_dim / tp, mixer.key_heads * mixer.head_dim / tp
    if mixer.variant == "gated_delta":
        return 2 * keys + 2 * values + 2 * mixer.num_heads / tp, values
    return keys + keys + values, values   # lightning: q, k, v there, the output back


def point_to_point_ms(nbytes: float, group: GroupSpan) -> float:
    link = group.inter if group.crosses_domains else group.intra
    return nbytes / (link.bandwidth_gb_s * 1e6) + link.latency_us * 1e-3


# ---- per layer ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerTime:
    """One layer on one GPU for one micro-batch (ms): F, B (input gradient, with any recomputed forward) and
    W, communication included; the FLOPs the GPU executes; what it keeps for the backward."""

    forward: float
    backward_input: float
    backward_weight: float
    executed_flops: float
    activation_bytes: float
    output_bytes: float
    # what F + B + W holds of each kind of time (``STEP_PARTS``' per-layer ones): the TP, CP and EP communication of F
    # and B, the recomputed forward (its communication included); the rest is compute
    comm_ms: tuple[tuple[str, float], ...] = ()
    recompute_ms: float = 0.0

    @property
    def total_ms(self) -> float:
        return self.forward + self.backward_input + self.backward_weight

    def parts_ms(self) -> dict[str, float]:
        """F + B + W of one micro-batch by kind: ``compute``, ``recompute`` and each axis' communication."""
        parts = {"recompute": self.recompute_ms, **dict(self.comm_ms)}
        return {"compute": self.total_ms - sum(parts.values()), **parts}


def _sublayers(layer: LayerSpec) -> int:
    """The layer's sequence-parallel regions, each an all-gather in and a reduce-scatter out over TP: the mixer, a
    dense MLP and an MoE's shared experts; the routed experts are reached by the token dispatcher instead."""
    if layer.kind in ("embedding", "head"):
        return 1
    mlp = layer.mlp
    return (layer.mixer is not None) + (mlp is not None and (not isinstance(mlp, MoEMLP) or mlp.num_shared_experts > 0))


def layer_comm_ms(layer: LayerSpec, work: LayerWork, spec: ModelSpec, config: ParallelConfig,
                  mapping: RankMapping, seq_len: int, options: CostOptions = CostOptions()) -> tuple[float, float]:
    """(F, B) communication of one layer for one micro-batch on one GPU, exposed time only."""
    return _comm_totals(layer_comm_parts(layer, work, spec, config, mapping, seq_len, options))


def _comm_totals(parts: dict[str, tuple[float, float]]) -> tuple[float, float]:
    return sum(forward for forward, _ in parts.values()), sum(backward for _, backward in parts.values())


COMM_AXES = ("tp", "cp", "ep", "dp")


def layer_comm_parts(layer: LayerSpec, work: LayerWork, spec: ModelSpec, config: ParallelConfig,
                     mapping: RankMapping, seq_len: int, options: CostOptions = CostOptions()
                     ) -> dict[str, tuple[float, float]]:
    """``layer_comm_ms`` by parallel axis: ``{"tp": (F, B), "cp": (F, B), "ep": (F, B), "dp": (F, B)}`` (``dp``:
    full sharding's gathers and reductions, module doc)."""
    dtype_bytes = DTYPE_BYTES[spec.dtype]
    tokens = config.microbatch_size * seq_len
    hidden_bytes = tokens / config.cp * spec.hidden_size * dtype_bytes
    parts = {axis: (0.0, 0.0) for axis in COMM_AXES}
    shards = config.tp * config.cp
    compute = (work.forward.roofline_ms / shards,
               (work.backward_input.roofline_ms + work.backward_weight.roofline_ms) / shards)

    def behind_compute(forward: float, backward: float) -> tuple[float, float]:
        """(F, B) communication overlapped with the layer's compute of the same pass: what outlasts it."""
        return max(0.0, forward - compute[0]), max(0.0, backward - compute[1])

    if config.tp > 1:
        block = layer.kind not in ("embedding", "head")
        collectives = 2 * _sublayers(layer) if block else 1
        tp_ms = collectives * ring_collective_ms(hidden_bytes, mapping.span("tp"))
        # hidden behind the block's GEMMs of the same pass (module doc)
        parts["tp"] = behind_compute(tp_ms, tp_ms) if options.overlap_tp and block else (tp_ms, tp_ms)
    forward = backward = 0.0
    if config.cp > 1 and layer.mixer is not None:
        cp_group = mapping.span("cp")
        mixer = layer.mixer
        if isinstance(mixer, AttentionMixer) and options.cp_comm == "allgather":
            # each gathered buffer whole: MLA's latents (and shared rotary key), else keys and values (the rank's
            # heads of them under TP), one all-gather each in F and one reduce-scatter each in B
            if mixer.kv_lora_rank:
                widths = (mixer.kv_lora_rank + (mixer.rope_head_dim or 0),)
            else:
                heads = max(mixer.num_kv_heads / config.tp, 1)
                widths = (heads * mixer.head_dim, heads * mixer.value_dim)
            gathers = sum(ring_collective_ms(tokens * width * dtype_bytes, cp_group) for width in widths)
            forward += gathers
            backward += gathers
        elif isinstance(mixer, AttentionMixer):
            kv_width = mixer.num_kv_heads * (mixer.head_dim + mixer.value_dim)
            chunk = tokens / config.cp * max(kv_width / config.tp, mixer.head_dim + mixer.value_dim) * dtype_bytes
            ring = (config.cp - 1) * point_to_point_ms(chunk, cp_group)
            core = work.attention_core_ms / (config.tp * config.cp)
            forward += max(0.0, ring - core)
            backward += max(0.0, 2 * ring - 2 * core)
        else:
            there, back = head_exchange_widths(mixer, config.tp, config.cp)
            exchanges = sum(all_to_all_ms(tokens / config.cp * width * dtype_bytes, cp_group)
                            for width in (there, back))
            forward += exchanges
            backward += exchanges
    parts["cp"] = (forward, backward)
    if isinstance(layer.mlp, MoEMLP) and config.ep > 1:
        local = tokens / (config.tp * config.cp)
        token_bytes = layer.mlp.expert_width(spec.hidden_size) * dtype_bytes   # a latent MoE sends its latents
        routed = local * layer.mlp.top_k * token_bytes
        exchange = 2 * dispatch_ms(token_bytes, local, layer.mlp,
                                   mapping.span("ep"), options.ep_dispatcher)   # dispatch and combine
        # the expert TP group gathers what its ranks received and reduce-scatters the experts' output
        exchange += 2 * ring_collective_ms(routed * config.etp, mapping.span("etp"))
        parts["ep"] = behind_compute(exchange, exchange) if options.overlap_ep else (exchange, exchange)
    elif isinstance(layer.mlp, MoEMLP) and config.etp > 1:
        # no EP: Megatron's all-gather dispatcher, the sequence-parallel hidden states (a latent MoE's latents)
        # gathered over the expert TP group and the output reduce-scattered, as a dense MLP's
        width = layer.mlp.expert_width(spec.hidden_size)
        exchange = 2 * ring_collective_ms(hidden_bytes * width / spec.hidden_size, mapping.span("etp"))
        parts["ep"] = (exchange, exchange)
    if config.sharding == "full" and work.params.total:
        # FSDP2: the layer's bf16 weights gathered before F and again before B, its gradients reduce-scattered after
        # B, each group of its parameters over the ranks that shard them; prefetched, so hidden behind the layer's
        # compute of the same pass (torchtitan's per-block fully_shard)
        dense, expert = held_parameters([work.params], config)
        gather = (ring_collective_ms(dense * 2, mapping.span("dpcp"))
                  + ring_collective_ms(expert * 2, mapping.span("edp")))
        if options.overlap_dp:
            reduce = (ring_collective_ms(dense * options.grad_reduce_bytes, mapping.span("dpcp"))
                      + ring_collective_ms(expert * options.grad_reduce_bytes, mapping.span("edp")))
            parts["dp"] = behind_compute(gather, gather + reduce)
        else:   # not prefetched; the gradients wait for the step's end (``data_parallel_ms``); an embedding's weight
            # gradient needs the tokens, not the weights, so it is gathered for F only
            parts["dp"] = (gather, 0.0 if layer.kind == "embedding" else gather)
    return parts


def reruns_forward(layer: LayerSpec, mode: str, options: CostOptions) -> bool:
    """Whether ``layer``'s backward re-runs (part of) its forward under recomputation ``mode``: a block (not the
    embedding or head) under ``full``, or under ``selective`` where the framework's is per-op checkpointing, or
    Megatron's with a recompute module the layer has (``planner.cost.analytic.recompute_modules_of``)."""
    if layer.kind in ("embedding", "head"):
        return False
    if mode == "full" or (mode == "selective" and options.selective == "per_op"):
        return True
    return mode == "selective" and any(module in options.recompute_modules
                                       for module in recompute_modules_of(layer))


def layer_times(spec: ModelSpec, cluster: ClusterSpec, config: ParallelConfig, mapping: RankMapping,
                seq_len: int, recompute: list[str], options: CostOptions = CostOptions()) -> list[LayerTime]:
    """Every layer of ``spec`` on one GPU under ``config``; ``recompute[i]`` is layer i's mode."""
    works = layer_work(spec, cluster, config.microbatch_size, seq_len, options.flash_attention, config.precision,
                       kernel_split(config), options.attention_kernel)
    shards = config.tp * config.cp
    overhead_ms = cluster.device.kernel_overhead_us * 1e-3
    dtype_bytes = DTYPE_BYTES[spec.dtype]
    output_bytes = config.microbatch_size * seq_len * spec.hidden_size * dtype_bytes / shards
    comm_cache: dict[LayerSpec, tuple] = {}
    result = []
    for layer, work, mode in zip(spec.layers, works, recompute):
        if layer not in comm_cache:
            parts = layer_comm_parts(layer, work, spec, config, mapping, seq_len, options)
            comm_cache[layer] = (_comm_totals(parts), tuple((axis, f + b) for axis, (f, b) in parts.items()),
                                 parts["tp"][0], parts["dp"][0], parts["ep"][0])
        (comm_forward, comm_backward), comm_ms, tp_forward, gather_forward, ep_forward = comm_cache[layer]
        forward = work.forward.on(shards, overhead_ms) + comm_forward
        # the block's input, sequence-parallel over TP (and split over CP)
        block_input = config.microbatch_size * seq_len * spec.hidden_size * dtype_bytes / shards
        if not reruns_forward(layer, mode, options):
            recompute_ms = 0.0
            executed = work.model_flops + work.recomputed_flops
            activation = work.held_bytes(config.precision, cluster, options) / shards
        elif mode == "full":
            # Korthikanti et al. 2022, Sec. 5: only the layer's input is kept; the forward runs again, its weights
            # those the backward's gather brought (FSDP2 gathers once for both)
            recompute_ms = forward - gather_forward
            executed = work.model_flops + work.recomputed_flops + work.forward_flops
            activation = block_input
        elif options.selective == "per_op":
            # the module doc: the re-run kernels and the TP all-gathers (half the block's sequence-parallel
            # collectives); the matmuls, attention and reduce-scatters on the save list are kept
            recompute_ms = work.per_op_rerun.on(shards, overhead_ms) + tp_forward / 2
            executed = work.model_flops + work.recomputed_flops + work.per_op_rerun_flops
            activation = block_input + work.per_op_kept_bytes / shards
        else:
            # Megatron's recompute modules: each re-runs its own kernels inside the layer, whose TP collectives lie
            # outside them, as do the EP ones but under ``moe``, which re-runs the dispatch and combine too; each
            # frees what it kept
            chosen = work.chosen_modules(options)
            recompute_ms = sum(module.rerun.on(shards, overhead_ms) for module in chosen)
            if any(module.dispatch for module in chosen):
                recompute_ms += ep_forward
            executed = work.model_flops + work.recomputed_flops + sum(module.rerun_flops for module in chosen)
            activation = (work.held_bytes(config.precision, cluster, options)
                          - work.modules_freed_bytes(config.precision, cluster, options)) / shards
        backward_input = work.backward_input.on(shards, overhead_ms) + comm_backward + recompute_ms
        result.append(LayerTime(forward=forward, backward_input=backward_input,
                                backward_weight=work.backward_weight.on(shards, overhead_ms),
                                executed_flops=executed / shards, activation_bytes=activation,
                                output_bytes=4 if layer.kind == "head" else output_bytes,
                                comm_ms=comm_ms, recompute_ms=recompute_ms))
    return result


# ---- data-parallel step end ---------------------------------------------------------------------------

def data_parallel_ms(dense_params: float, expert_params: float, config: ParallelConfig, mapping: RankMapping,
                     options: CostOptions) -> tuple[float, float]:
    """(gradient reduction, parameter gather) of one GPU's parameters at the step's end, before any overlap; with
    full sharding none where DP is overlapped (it gathers and reduces layer by layer, ``layer_comm_parts``), else the
    gradients' one reduce-scatter (module doc)."""
    grad = options.grad_reduce_bytes
    dense_group, expert_group = mapping.span("dpcp"), mapping.span("edp")
    reduce_scatter = ring_collective_ms(dense_params * grad, dense_group) + ring_collective_ms(expert_params * grad,
                                                                                              expert_group)
    if config.sharding == "full":
        return (0.0 if options.overlap_dp else reduce_scatter), 0.0
    if config.sharding == "optimizer":
        # reduce-scatter the gradients; all-gather the updated bf16 parameters
        return reduce_scatter, (ring_collective_ms(dense_params * 2, dense_group)
                                + ring_collective_ms(expert_params * 2, expert_group))
    return 2 * reduce_scatter, 0.0   # all-reduce = reduce-scatter + all-gather of the gradients


def exposed_data_parallel_ms(grad_ms: float, param_ms: float, last_backward_ms: float, first_forward_ms: float,
                             options: CostOptions) -> float:
    """What the step waits for: with overlap the gradient reduction hides behind the last micro-batch's
    backward and the parameter gather behind the next step's first forward."""
    if not options.overlap_dp:
        return grad_ms + param_ms
    return max(0.0, grad_ms - last_backward_ms) + max(0.0, param_ms - first_forward_ms)


def optimizer_step_ms(local_params: float, cluster: ClusterSpec) -> float:
    return local_params * OPTIMIZER_BYTES_PER_PARAM / bandwidth_bytes_per_ms(cluster.device)
