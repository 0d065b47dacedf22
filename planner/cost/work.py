"""What the cost model adds up: kernels per pass, the bytes held for backward, and the parameters.

A layer's cost is the sum of its parts' costs (projections, attention core, norms, ...). Each part lists the
kernels it runs in the forward pass (F), the input-gradient pass (B) and the weight-gradient pass (W); the
roofline turns every kernel into time on its own, because a memory-bound kernel does not overlap the
compute-bound one that follows it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Gemm:
    """A matrix product's shape, ``[m, k] x [k, n]``, for the whole micro-batch (before any split): what sets its
    efficiency on a GPU (``planner.cost.roofline.kernel_efficiency``). ``token_dim`` (0, 1 or 2 for m, n, k) holds
    the tokens, which context parallelism divides; ``tp_dim`` the dimension tensor parallelism divides (a column-
    parallel layer's outputs, a row-parallel one's inputs), None where the weight is replicated over TP and its
    tokens are divided instead (sequence parallelism). ``experts`` > 0: one grouped GEMM over that many experts,
    its token dimension the routed tokens of all of them."""

    m: float
    n: float
    k: float
    token_dim: int
    tp_dim: int | None
    experts: int = 0
    # the output widths of the separate matmuls a framework that does not fuse the projection runs for it, in their
    # order (torchtitan's wq, wk and wv for a fused QKV; w1 and w3 for a gated MLP's gate and up projections): what
    # its per-op checkpointing counts (``per_op_checkpoint``); () for one matmul
    parts: tuple[float, ...] = ()


@dataclass(frozen=True)
class AttentionShape:
    """The fused attention kernel's shape: head dimension, the keys a query sees at most (the sequence, or the
    window), and whether it is the backward kernel."""

    head_dim: int
    keys: float
    backward: bool = False


@dataclass(frozen=True)
class Kernel:
    """One kernel: the FLOPs the model needs, FLOPs it re-executes (e.g. FlashAttention's recomputed scores),
    and the bytes it moves to and from device memory. ``fp8`` marks a GEMM that FP8 training runs in FP8 (a linear
    layer Transformer Engine covers); ``fp8_cast_bytes`` is what casting its operands to FP8 then moves. ``shape``
    is a GEMM's or fused attention's shape, where the rate depends on it. ``output_bytes``: what a GEMM or the fused
    attention writes as its result (the attention output and its log-sum-exp), which a per-op checkpointing policy
    may keep for the backward (``per_op_checkpoint``). ``weight_bytes``: what of ``bytes`` a GEMM moves of its
    weights (and their gradients), counted for the whole layer: those divide over one GPU's shards as TP, ETP and
    EP shard the weights, not as its tokens are split (``planner.cost.roofline.split_bytes``)."""

    flops: float = 0.0
    bytes: float = 0.0
    recomputed_flops: float = 0.0
    fp8: bool = False
    fp8_cast_bytes: float = 0.0
    shape: Gemm | AttentionShape | None = None
    output_bytes: float = 0.0
    weight_bytes: float = 0.0


@dataclass(frozen=True)
class Cost:
    forward: tuple[Kernel, ...] = ()
    backward_input: tuple[Kernel, ...] = ()
    backward_weight: tuple[Kernel, ...] = ()
    activation_bytes: float = 0.0   # held from the forward until the backward of this micro-batch
    # what FP8 training adds to ``activation_bytes`` (negative: it holds less), where the recipe keeps a GEMM's
    # input as its FP8 cast (``saved``'s ``fp8_bytes``; ``planner.parallel.cost.LayerWork.held_bytes``)
    fp8_activation_delta: float = 0.0
    params: int = 0
    active_params: int = 0          # parameters one token goes through (differs from params for MoE)

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(forward=self.forward + other.forward,
                    backward_input=self.backward_input + other.backward_input,
                    backward_weight=self.backward_weight + other.backward_weight,
                    activation_bytes=self.activation_bytes + other.activation_bytes,
                    fp8_activation_delta=self.fp8_activation_delta + other.fp8_activation_delta,
                    params=self.params + other.params,
                    active_params=self.active_params + other.active_params)

    @staticmethod
    def total(costs: "list[Cost] | tuple[Cost, ...]") -> "Cost":
        result = Cost()
        for cost in costs:
            result = result + cost
        return result

    def model_flops(self) -> float:
        """FLOPs of F + B + W without recomputation: the numerator of MFU."""
        return sum(kernel.flops for kernel in self.forward + self.backward_input + self.backward_weight)


def saved(nbytes: float, *, fp8_bytes: float | None = None) -> Cost:
    """Tensors a part keeps for its backward (its inputs, or intermediates the gradient needs). ``fp8_bytes``: what
    FP8 training holds instead, where the tensor is kept only as the input of GEMMs that run in FP8. Transformer
    Engine's linear layers (``Linear``, ``LayerNormLinear``, ``LayerNormMLP``, ``GroupedLinear``) keep that input as
    its FP8 cast, one byte an element, for the weight-gradient GEMM (``_Linear.forward`` saves ``inputmat``, the
    FP8 tensor, under ``fp8``; ``inputmat_no_fp8`` otherwise); a tensor another kernel needs in BF16 too (a
    norm's or activation's backward, the attention core's) is held in BF16 all the same, and the FP8 copy comes on
    top of it (``fp8_bytes`` of a zero ``nbytes``)."""
    return Cost(activation_bytes=nbytes, fp8_activation_delta=0.0 if fp8_bytes is None else fp8_bytes - nbytes)


def weights(count: int) -> Cost:
    """Parameters that cost no separate kernel (biases, gates and decays applied inside a fused kernel)."""
    return Cost(params=count, active_params=count)


def per_op_checkpoint(forward: tuple[Kernel, ...], tp: int = 1) -> tuple[float, tuple[Kernel, ...]]:
    """Per-op selective activation checkpointing of a block whose forward runs ``forward``, as torchtitan applies it
    to each transformer block (``torchtitan/distributed/activation_checkpoint.py``, ``SelectiveAC``; the same rule
    in its December 2024 benchmarks' ``_apply_ac_to_transformer_block`` with ``selective_ac_option = 'op'``). The
    block's input is kept, and of its ops only the outputs of the save list: every other matmul, counted in the
    order they run (the first, third, ...; a fused projection counts as the separate matmuls ``Gemm.parts`` lists),
    fused attention (``_scaled_dot_product_flash_attention``, its output and log-sum-exp), the EP all-to-alls and
    TP reduce-scatters. The backward re-runs everything else first: the other matmuls, every norm and elementwise
    kernel, the MoE router (``force_recompute_mm_shapes_by_fqns``: recomputed and not counted) and the experts'
    grouped GEMMs (``_grouped_mm`` is on no save list).

    Returns the bytes kept besides the block's input, whole (before ``tp·cp``: a row-parallel matmul's output is its
    partial sum, ``tokens x d_out`` on every TP rank before the reduce-scatter, so it counts ``tp`` times), and the
    kernels re-run, each kept matmul's share of a fused GEMM's work taken out."""
    kept, rerun, matmuls = 0.0, [], 0
    for kernel in forward:
        shape = kernel.shape
        if isinstance(shape, AttentionShape):
            kept += kernel.output_bytes
            continue
        if not isinstance(shape, Gemm) or shape.experts or shape.tp_dim is None:
            rerun.append(kernel)   # not a saved op, a grouped GEMM or the router
            continue
        whole = tp if shape.tp_dim == 2 else 1
        for width in shape.parts or (shape.n,):
            matmuls += 1
            share = width / shape.n
            if matmuls % 2:
                kept += kernel.output_bytes * share * whole
            else:   # each separate matmul casts its own input under FP8
                rerun.append(replace(kernel, flops=kernel.flops * share, bytes=kernel.bytes * share,
                                     weight_bytes=kernel.weight_bytes * share,
                                     recomputed_flops=kernel.recomputed_flops * share,
                                     output_bytes=kernel.output_bytes * share,
                                     shape=replace(shape, n=width, parts=())))
    return kept, tuple(rerun)
