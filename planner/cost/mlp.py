"""Feed-forward blocks: dense MLPs (gated: SwiGLU, GeGLU or gpt-oss's clamped SwiGLU; or a plain two-matrix MLP) and
mixtures of experts. Which activation changes a few elementwise FLOPs of a memory-bound kernel, not its bytes, so
every activation of a kind is costed alike.

Dense: a gated MLP is a fused gate/up projection to ``2·i``, the activation times the up half, and the down
projection (``6·T·h·i`` FLOPs forward); a non-gated one (Nemotron-H's squared ReLU) drops the gate.

MoE (Shazeer et al. 2017; Fedus et al. 2022, "Switch Transformers", Sec. 2; DeepSeekMoE, Dai et al. 2024,
for shared experts): a router projection to ``num_experts`` logits and a top-k softmax; every token is copied
to its ``top_k`` experts (the permutation), runs a gated expert MLP there, and the ``top_k`` results are
weighted and summed back (the un-permutation). Shared experts run on every token. So the FLOPs grow with
``top_k`` (active experts) while the parameters, and the weight bytes read when enough tokens are routed,
grow with ``num_experts``. Experts are gated unless ``MoEMLP.gated`` is false (Nemotron-H's). A latent
MoE (Nemotron 3's LatentMoE; Megatron-Core's ``MoELayer`` with ``moe_latent_size``: ``fc1_latent_proj`` after the
router, ``fc2_latent_proj`` after the combine) permutes, computes and combines its tokens at ``latent_size``.
"""

from __future__ import annotations

from planner.cost.primitives import (FP8_CAST_TRANSPOSE_BYTES, FP32_BYTES, GRAD_ACCUMULATE_BYTES, elementwise, linear,
                                     projection_shapes)
from planner.cost.work import Cost, Kernel, saved
from planner.spec.model import DenseMLP, MoEMLP

ACTIVATION_FLOPS_PER_OUTPUT = 5   # the gate's activation (SiLU, GELU...) or the squared ReLU, and the product
ROUTER_FLOPS_PER_LOGIT = 6        # softmax and top-k selection over the expert logits


def _up_width(inner: int, gated: bool) -> int:
    """The first projection's width: a gated MLP's (or expert's) fused gate and up halves, else up alone."""
    return 2 * inner if gated else inner


def _mlp_body(tokens: float, hidden: int, inner: int, gated: bool, dtype_bytes: int, bias: bool = False) -> Cost:
    """The MLP without saving its input (the caller decides, since an MoE's shared expert shares it). A dense MLP's
    is what Megatron-Core's ``recompute_modules`` ``mlp`` re-runs in the backward and frees (``dense_mlp_body``)."""
    up_width = _up_width(inner, gated)
    return (linear(tokens, hidden, up_width, dtype_bytes, bias=bias, parts=(inner, inner) if gated else ())
            + saved(dtype_bytes * tokens * up_width)
            + elementwise(tokens * up_width, tokens * inner, ACTIVATION_FLOPS_PER_OUTPUT, dtype_bytes)
            + linear(tokens, inner, hidden, dtype_bytes, bias=bias, parallel="row")
            + saved(dtype_bytes * tokens * inner, fp8_bytes=tokens * inner))


def dense_mlp_body(mlp: DenseMLP, *, hidden: int, tokens: int, dtype_bytes: int) -> Cost:
    learned = mlp.activation_parameters   # xIELU's two scalars
    return (_mlp_body(tokens, hidden, mlp.intermediate_size, mlp.gated, dtype_bytes, mlp.bias)
            + Cost(params=learned, active_params=learned))


def dense_mlp_cost(mlp: DenseMLP, *, hidden: int, tokens: int, dtype_bytes: int) -> Cost:
    return (saved(dtype_bytes * tokens * hidden, fp8_bytes=tokens * hidden)
            + dense_mlp_body(mlp, hidden=hidden, tokens=tokens, dtype_bytes=dtype_bytes))


def expert_projection(*, routed_tokens: float, d_in: int, d_out: int, experts: int, top_k: int,
                      dtype_bytes: int, bias: bool = False, parallel: str = "column") -> Cost:
    """A grouped projection over all experts: FLOPs for the routed tokens only, weight bytes for the experts
    that receive at least one token (all of them once ``routed_tokens >= experts``). ``bias``: each expert
    adds its own bias (gpt-oss)."""
    flops = 2.0 * routed_tokens * d_in * d_out
    weight = d_in * d_out + (d_out if bias else 0)
    touched = min(experts, routed_tokens)
    weight_bytes = dtype_bytes * touched * weight
    activations = dtype_bytes * routed_tokens * (d_in + d_out)
    # FP8 (Transformer Engine's GroupedLinear): the routed input cast in F, the output gradient in B
    cast_in, cast_out = (FP8_CAST_TRANSPOSE_BYTES * routed_tokens * d for d in (d_in, d_out))
    forward, backward, weight_gradient = projection_shapes(routed_tokens, d_in, d_out, parallel, experts)
    gradient_bytes = GRAD_ACCUMULATE_BYTES * touched * weight
    return Cost(forward=(Kernel(flops, activations + weight_bytes, fp8=True, fp8_cast_bytes=cast_in, shape=forward,
                                weight_bytes=weight_bytes),),
                backward_input=(Kernel(flops, activations + weight_bytes, fp8=True, fp8_cast_bytes=cast_out,
                                       shape=backward, weight_bytes=weight_bytes),),
                backward_weight=(Kernel(flops, activations + gradient_bytes, fp8=True, shape=weight_gradient,
                                        weight_bytes=gradient_bytes),),
                params=experts * weight, active_params=top_k * weight)


def _routing(tokens: float, hidden: int, experts: int, top_k: int, dtype_bytes: int, bias: bool,
             width: int) -> Cost:
    """The router's projection of the hidden state to the expert logits, its top-k, and the permutation of the
    tokens to their experts at ``width`` (``MoEMLP.expert_width``)."""
    routed = tokens * top_k
    scores = tokens * experts
    permute = Kernel(0.0, dtype_bytes * (tokens * width + routed * width))
    return (linear(tokens, hidden, experts, dtype_bytes, bias=bias, fp8=False, parallel="replicated")
            + Cost(forward=(Kernel(ROUTER_FLOPS_PER_LOGIT * scores, FP32_BYTES * 2 * scores), permute),
                   backward_input=(Kernel(2 * ROUTER_FLOPS_PER_LOGIT * scores, FP32_BYTES * 3 * scores), permute),
                   activation_bytes=FP32_BYTES * scores))


def _combine(tokens: float, hidden: int, top_k: int, dtype_bytes: int) -> Cost:
    """Weighted sum of each token's ``top_k`` expert outputs; saves them for the routing weights' gradient."""
    routed = tokens * top_k
    traffic = dtype_bytes * (routed * hidden + tokens * hidden) + FP32_BYTES * routed
    return Cost(forward=(Kernel(2.0 * routed * hidden, traffic),),
                backward_input=(Kernel(4.0 * routed * hidden, 2 * traffic),),
                activation_bytes=dtype_bytes * routed * hidden)


def expert_activation(mlp: MoEMLP, *, tokens: int, dtype_bytes: int) -> Cost:
    """The experts' activation (of the gate, times the up half, when gated) over the routed tokens, with its output kept
    for the down projection (in BF16, or as that projection's FP8 cast). It is what Megatron-Core's
    ``recompute_modules`` ``moe_act`` re-runs in the backward and frees."""
    routed, inner = tokens * mlp.top_k, mlp.expert_intermediate_size
    return (elementwise(routed * _up_width(inner, mlp.gated), routed * inner, ACTIVATION_FLOPS_PER_OUTPUT, dtype_bytes)
            + saved(dtype_bytes * routed * inner, fp8_bytes=routed * inner))


def moe_parts(mlp: MoEMLP, *, hidden: int, tokens: int, dtype_bytes: int) -> dict[str, Cost]:
    """An MoE layer by the parts Megatron-Core's recompute modules free apart (``planner.cost.analytic``): ``input``,
    the normed hidden state held in BF16 for the router; ``shared_cast``, the shared experts' first projection's FP8
    cast of it (FP8 training); ``routing``, the router and the permutation; ``routed``, the experts' grouped
    projections with their inputs; ``act``, the experts' activation (``expert_activation``); ``combine``; ``shared``,
    the shared experts, run as one MLP as wide as all of them together (absent without any); ``latent``, a latent
    MoE's projections down to its latent width and back (absent without one). The permutation, the experts and the
    combine run at ``MoEMLP.expert_width``."""
    experts, top_k, inner = mlp.num_experts, mlp.top_k, mlp.expert_intermediate_size
    routed = tokens * top_k
    up_width = _up_width(inner, mlp.gated)
    width = mlp.expert_width(hidden)

    def projection(d_in: int, d_out: int, parallel: str = "column") -> Cost:
        return expert_projection(routed_tokens=routed, d_in=d_in, d_out=d_out, experts=experts, top_k=top_k,
                                 dtype_bytes=dtype_bytes, bias=mlp.bias, parallel=parallel)
    parts = {"input": saved(dtype_bytes * tokens * hidden),
             "shared_cast": saved(0.0, fp8_bytes=tokens * hidden if mlp.num_shared_experts else 0.0),
             "routing": _routing(tokens, hidden, experts, top_k, dtype_bytes, mlp.bias, width),
             "routed": (saved(dtype_bytes * routed * width, fp8_bytes=routed * width) + projection(width, up_width)
                        + saved(dtype_bytes * routed * up_width) + projection(inner, width, "row")),
             "act": expert_activation(mlp, tokens=tokens, dtype_bytes=dtype_bytes),
             "combine": _combine(tokens, width, top_k, dtype_bytes)}
    if mlp.latent_size:
        # fc1_latent_proj on the (saved) input, fc2_latent_proj on the combined latent tokens, which it keeps for its
        # weight gradient; duplicated over TP as the router (Megatron-Core's TELinear parallel_mode "duplicated")
        parts["latent"] = (linear(tokens, hidden, width, dtype_bytes, bias=mlp.bias, parallel="replicated")
                           + saved(dtype_bytes * tokens * width, fp8_bytes=tokens * width)
                           + linear(tokens, width, hidden, dtype_bytes, bias=mlp.bias, parallel="replicated"))
    if mlp.num_shared_experts:
        parts["shared"] = _mlp_body(tokens, hidden, mlp.num_shared_experts * mlp.shared_intermediate_size, mlp.gated,
                                    dtype_bytes)
    return parts


def moe_cost(mlp: MoEMLP, *, hidden: int, tokens: int, dtype_bytes: int) -> Cost:
    return Cost.total(moe_parts(mlp, hidden=hidden, tokens=tokens, dtype_bytes=dtype_bytes).values())


def mlp_cost(mlp: DenseMLP | MoEMLP, *, hidden: int, tokens: int, dtype_bytes: int) -> Cost:
    if isinstance(mlp, MoEMLP):
        return moe_cost(mlp, hidden=hidden, tokens=tokens, dtype_bytes=dtype_bytes)
    return dense_mlp_cost(mlp, hidden=hidden, tokens=tokens, dtype_bytes=dtype_bytes)
