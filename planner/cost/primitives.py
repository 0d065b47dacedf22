"""Costs of the operations every layer is built from: dense projections, norms, elementwise kernels.

FLOPs follow the usual count of 2 per multiply-add (Kaplan et al. 2020; Narayanan et al. 2021, "Efficient
Large-Scale Language Model Training on GPU Clusters", eq. 2): a ``[T, d_in] x [d_in, d_out]`` projection is
``2·T·d_in·d_out`` FLOPs forward, the same again for the input gradient (B) and for the weight gradient (W).
Bytes are what the kernel reads and writes once in device memory.
"""

from __future__ import annotations

from planner.cost.work import Cost, Gemm, Kernel

# Weight gradients accumulate into an fp32 main gradient (read and write, 4 bytes each), as Megatron's
# gradient-accumulation fusion does.
GRAD_ACCUMULATE_BYTES = 8
FP32_BYTES = 4


# Transformer Engine's FP8 recipes (delayed or current per-tensor scaling) cast a GEMM's bf16 operand to FP8 and
# its transpose in one fused cast-transpose kernel: 2 bytes read, 1 + 1 written per element (TE's
# ``cast_transpose``); the forward casts the input, the backward the output gradient, and the weight-gradient GEMM
# reuses both transposes. Weights are cast once per step (Megatron's ``is_first_microbatch``), not counted.
FP8_CAST_TRANSPOSE_BYTES = 4


# How tensor parallelism splits a projection (Megatron-LM, Shoeybi et al. 2019, Sec. 3): "column" divides its
# outputs (QKV, the MLP's up and gate, the vocabulary head), "row" its inputs (the attention's and the MLP's output
# projections), "replicated" none (the MoE router: every TP rank routes its own sequence-parallel tokens).
# For each pass (F: x·Wᵀ, B: dy·W, W: dyᵀ·x), the GEMM dimension that split divides, as Gemm's tp_dim.
TP_SPLIT_DIMS = {"column": (1, 2, 0), "row": (2, 1, 1), "replicated": (None, None, None)}


def projection_shapes(tokens: float, d_in: int, d_out: int, parallel: str = "column",
                      experts: int = 0, parts: tuple[float, ...] = ()) -> tuple[Gemm, Gemm, Gemm]:
    """The (F, B, W) GEMMs of a ``d_in -> d_out`` projection over ``tokens`` (routed tokens of ``experts``);
    ``parts``: the separate projections it fuses (``Gemm.parts``)."""
    forward_dim, backward_dim, weight_dim = TP_SPLIT_DIMS[parallel]
    return (Gemm(tokens, d_out, d_in, token_dim=0, tp_dim=forward_dim, experts=experts, parts=parts),
            Gemm(tokens, d_in, d_out, token_dim=0, tp_dim=backward_dim, experts=experts),
            Gemm(d_out, d_in, tokens, token_dim=2, tp_dim=weight_dim, experts=experts))


def linear(tokens: float, d_in: int, d_out: int, dtype_bytes: int, *, bias: bool = False, fp8: bool = True,
           parallel: str = "column", parts: tuple[float, ...] = ()) -> Cost:
    """A projection, bias-free unless ``bias``. Its input is saved by the caller (several projections may share
    one input). A bias is added in the matmul's epilogue and its gradient (a sum of the output gradient over the
    tokens) is ``tokens·d_out`` FLOPs in W. ``fp8``: FP8 training runs it in FP8 (Transformer Engine's linear
    layers); the router and the output layer stay in BF16 (``fp8=False``), as in Megatron-Core and NeMo.
    ``parallel``: how TP splits it (``TP_SPLIT_DIMS``). ``parts``: the output widths of the projections it fuses,
    where a framework runs them apart (``Gemm.parts``)."""
    flops = 2.0 * tokens * d_in * d_out
    weight = d_in * d_out + (d_out if bias else 0)
    bias_flops = tokens * d_out if bias else 0.0
    activations_in, activations_out = tokens * d_in, tokens * d_out
    cast = FP8_CAST_TRANSPOSE_BYTES if fp8 else 0
    forward, backward, weight_gradient = projection_shapes(tokens, d_in, d_out, parallel, parts=parts)
    return Cost(
        forward=(Kernel(flops, dtype_bytes * (activations_in + weight + activations_out), fp8=fp8,
                        fp8_cast_bytes=cast * activations_in, shape=forward,
                        output_bytes=dtype_bytes * activations_out, weight_bytes=dtype_bytes * weight),),
        backward_input=(Kernel(flops, dtype_bytes * (activations_out + weight + activations_in), fp8=fp8,
                               fp8_cast_bytes=cast * activations_out, shape=backward,
                               weight_bytes=dtype_bytes * weight),),
        backward_weight=(Kernel(flops + bias_flops, dtype_bytes * (activations_in + activations_out)
                                + GRAD_ACCUMULATE_BYTES * weight, fp8=fp8, shape=weight_gradient,
                                weight_bytes=GRAD_ACCUMULATE_BYTES * weight),),
        params=weight, active_params=weight)


def elementwise(elements_in: float, elements_out: float, flops_per_output: float, dtype_bytes: int) -> Cost:
    """A memory-bound pointwise kernel (activation, rotary embedding, gating). Backward reads the output
    gradient and the saved inputs and writes the input gradient."""
    flops = flops_per_output * elements_out
    return Cost(forward=(Kernel(flops, dtype_bytes * (elements_in + elements_out)),),
                backward_input=(Kernel(2 * flops, dtype_bytes * (elements_out + 2 * elements_in)),))


def rms_norm(tokens: float, width: int, dtype_bytes: int, *, scale_width: int | None = None) -> Cost:
    """RMSNorm over ``width``; saves its input and the fp32 reciprocal RMS per token. The scale's gradient is
    reduced inside the fused backward kernel (as in Apex and Transformer Engine), so it costs no W kernel.
    ``scale_width`` is the learned scale's size when heads share one (gated delta-net's per-head norm)."""
    elements = tokens * width
    scale = width if scale_width is None else scale_width
    return Cost(forward=(Kernel(4 * elements, dtype_bytes * 2 * elements),),
                backward_input=(Kernel(8 * elements, dtype_bytes * 3 * elements),),
                activation_bytes=dtype_bytes * elements + FP32_BYTES * tokens,
                params=scale, active_params=scale)


def layer_norm(tokens: float, width: int, dtype_bytes: int) -> Cost:
    """LayerNorm over ``width`` with a learned scale and bias (Ba et al. 2016): as RMSNorm plus the mean's
    subtraction (one more pass over the elements each way) and ``width`` more parameters; saves its input and
    the fp32 mean and reciprocal deviation per token."""
    elements = tokens * width
    return Cost(forward=(Kernel(6 * elements, dtype_bytes * 2 * elements),),
                backward_input=(Kernel(12 * elements, dtype_bytes * 3 * elements),),
                activation_bytes=dtype_bytes * elements + 2 * FP32_BYTES * tokens,
                params=2 * width, active_params=2 * width)


def norm(kind: str, tokens: float, width: int, dtype_bytes: int) -> Cost:
    """The model's block norm: ``rmsnorm`` or ``layernorm`` (``ModelSpec.norm``)."""
    return layer_norm(tokens, width, dtype_bytes) if kind == "layernorm" else rms_norm(tokens, width, dtype_bytes)


def residual_add(tokens: float, width: int, dtype_bytes: int) -> Cost:
    """``x + f(x)``; in backward the two gradient branches are summed where the stream forks."""
    elements = tokens * width
    return Cost(forward=(Kernel(elements, dtype_bytes * 3 * elements),),
                backward_input=(Kernel(elements, dtype_bytes * 3 * elements),))


def causal_conv1d(tokens: float, channels: int, kernel: int, dtype_bytes: int, *, bias: bool = True) -> Cost:
    """Depthwise causal convolution and SiLU, with a bias (Mamba-2) or without (gated delta-net); saves its
    input."""
    elements = tokens * channels
    params = channels * (kernel + (1 if bias else 0))
    flops = 2.0 * kernel * elements
    return Cost(forward=(Kernel(flops, dtype_bytes * 2 * elements),),
                backward_input=(Kernel(flops, dtype_bytes * 3 * elements),),
                backward_weight=(Kernel(flops, dtype_bytes * 2 * elements),),
                activation_bytes=dtype_bytes * elements,
                params=params, active_params=params)
