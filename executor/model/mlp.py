"""Feed-forward blocks: dense (gated, SwiGLU or GeGLU, or plain) and mixture-of-experts with shared experts."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from executor.model.expert_parallel import ExpertParallel, dispatch_to_experts
from executor.model.linear import Linear
from executor.model.recompute import checkpointed, recomputing, without_output
from executor.model.tensor_parallel import SequenceGroup, gather_sequence, reduce_scatter_sequence, split_parameter
from planner.spec.model import (CLAMPED_SWIGLU_ALPHA, CLAMPED_SWIGLU_LIMIT, CLAMPED_SWIGLU_OFFSET, DenseMLP, MoEMLP,
                                default_activation)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU's tanh approximation (Hendrycks & Gimpel 2016; HF's ``gelu_pytorch_tanh`` and ``gelu_new``)."""
    return F.gelu(x, approximate="tanh")


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


def geglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.gelu(gate) * up


def geglu_tanh(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """Gemma 2's and 3's (HF ``hidden_activation: gelu_pytorch_tanh``)."""
    return gelu_tanh(gate) * up


def clamped_swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """gpt-oss's (``planner.spec.model.CLAMPED_SWIGLU_ALPHA`` and the rest): as ``transformers``'
    ``GptOssExperts._apply_gate`` and Megatron-Core's gated ``quick_gelu`` with a clamp and a linear offset."""
    gate = gate.clamp(max=CLAMPED_SWIGLU_LIMIT)
    up = up.clamp(min=-CLAMPED_SWIGLU_LIMIT, max=CLAMPED_SWIGLU_LIMIT)
    return gate * torch.sigmoid(CLAMPED_SWIGLU_ALPHA * gate) * (up + CLAMPED_SWIGLU_OFFSET)


def squared_relu(x: torch.Tensor) -> torch.Tensor:
    """relu(x)² (So et al. 2021, "Primer"; Megatron-Core's ``activations.squared_relu``)."""
    return torch.square(F.relu(x))


class XIELU(nn.Module):
    """xIELU (Huang et al. 2024, "Deriving Activation Functions Using Integration", arXiv 2411.13010; Apertus's MLP
    activation), as ``transformers``' ``XIELUActivation`` computes it: ``a_p x² + b x`` for ``x > 0``, else
    ``a_n (expm1(min(x, eps)) - x) + b x``, with ``a_p = softplus(alpha_p)`` and ``a_n = b + softplus(alpha_n)`` learned
    (one scalar each, initialised so that both start at 0.8), ``b`` 0.5 and ``eps`` -1e-6 fixed. Its two parameters
    are whole on every TP rank, each of which applies them to its share of the intermediate width."""

    BETA, EPS, ALPHA_P_INIT, ALPHA_N_INIT = 0.5, -1e-6, 0.8, 0.8

    def __init__(self):
        super().__init__()
        self.alpha_p = nn.Parameter(torch.empty(1))
        self.alpha_n = nn.Parameter(torch.empty(1))

    def init_weights(self, generator: torch.Generator | None = None) -> None:
        """The fixed starting values (inverse softplus of 0.8 and of 0.8 - 0.5), drawn from no generator."""
        with torch.no_grad():
            self.alpha_p.fill_(math.log(math.expm1(self.ALPHA_P_INIT)))
            self.alpha_n.fill_(math.log(math.expm1(self.ALPHA_N_INIT - self.BETA)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha_p = F.softplus(self.alpha_p)
        alpha_n = self.BETA + F.softplus(self.alpha_n)
        return torch.where(x > 0, alpha_p * x * x + self.BETA * x,
                           (torch.expm1(torch.clamp(x, max=self.EPS)) - x) * alpha_n + self.BETA * x)


# planner.spec.model.GATED_ACTIVATIONS: act(gate) * up; UNGATED_ACTIVATIONS: act(up) (a class: a module with weights)
GATED = {"silu": swiglu, "gelu": geglu, "gelu_tanh": geglu_tanh, "clamped_swiglu": clamped_swiglu}
UNGATED = {"gelu": F.gelu, "gelu_tanh": gelu_tanh, "silu": F.silu, "squared_relu": squared_relu, "xielu": XIELU}


class GatedMLP(nn.Module):
    """down(act(gate(x), up(x))) when gated (SwiGLU, GeGLU or gpt-oss's clamped SwiGLU: ``GATED``), else
    down(act(up(x))) (GELU, SiLU, squared ReLU or xIELU, whose two learned scalars are the MLP's: ``UNGATED``), with
    ``activation`` the model's name of it; ``bias`` on every projection. ``recompute_activation``: a routed expert's
    activation is not kept (``moe_act``, set by its ``MoE``)."""

    tensor_parallel = None
    split_over = None
    whole = False   # a folded MoE's routed expert: never split over TP (``MoE.fold``)
    recompute_activation = False

    def __init__(self, hidden_size: int, intermediate_size: int, gated: bool = True, bias: bool = False,
                 activation: str = ""):
        super().__init__()
        self.gated = gated
        activation_function = (GATED if gated else UNGATED)[activation or default_activation(gated)]
        # a learned activation (xIELU) is a module of the MLP's, its parameters with the MLP's
        self.activation = activation_function() if isinstance(activation_function, type) else activation_function
        self.up_proj = Linear(hidden_size, intermediate_size, bias=bias)
        self.gate_proj = Linear(hidden_size, intermediate_size, bias=bias) if gated else None
        self.down_proj = Linear(intermediate_size, hidden_size, bias=bias)

    def init_weights(self, generator: torch.Generator) -> None:
        for projection in (self.up_proj, self.gate_proj, self.down_proj):
            if projection is not None:
                projection.init_weights(generator)
        if isinstance(self.activation, XIELU):
            self.activation.init_weights()

    def split(self, tp: SequenceGroup) -> None:
        """Split by intermediate width (Megatron's ``MLP``): up and gate column-parallel with their biases, down
        row-parallel with its bias whole. Its output is then this rank's partial sum."""
        for projection in (self.up_proj, self.gate_proj):
            if projection is not None:
                split_parameter(projection, "weight", 0, tp)
                split_parameter(projection, "bias", 0, tp)
        split_parameter(self.down_proj, "weight", 1, tp)
        self.split_over = tp

    def shard(self, tp: SequenceGroup) -> None:
        """A block of its own: ``split``, gathering the sequence at its input and reduce-scattering its output
        (before down's bias). An expert of an MoE block is split by the block, which gathers and scatters once."""
        if self.split_over is not None or self.whole:
            return
        self.split(tp)
        self.down_proj.tensor_parallel = tp
        self.tensor_parallel = tp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = gather_sequence(x, self.tensor_parallel)
        inputs = (self.gate_proj(x), self.up_proj(x)) if self.gated else (self.up_proj(x),)
        if self.recompute_activation:
            return without_output(self.activation, self.down_proj, *inputs)
        return self.down_proj(self.activation(*inputs))


class _AuxLossGradient(torch.autograd.Function):
    """Passes ``output`` through unchanged and, in backward, gives ``aux_loss`` the gradient ``scale`` (as
    Megatron-LM's ``MoEAuxLossAutoScaler``): the loss joins the backward of the layer that computed it, with
    no extra term to carry to the end of the pipeline."""

    @staticmethod
    def forward(ctx, output: torch.Tensor, aux_loss: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(aux_loss)
        ctx.scale = scale
        return output

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        (aux_loss,) = ctx.saved_tensors
        return grad_output, torch.full_like(aux_loss, ctx.scale), None


def choose_experts(probabilities: torch.Tensor, top_k: int, groups: int = 1,
                   group_topk: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(probabilities, indices) of each token's ``top_k`` experts. With group-limited routing (``groups`` > 1,
    ``MoEMLP.router_groups``) as Megatron-Core's ``group_limited_topk`` chooses them: each of the ``groups`` groups of
    consecutive experts scored by the sum of its best ``top_k // group_topk`` probabilities, the ``group_topk`` best
    groups kept, the experts chosen among theirs."""
    if groups == 1:
        return torch.topk(probabilities, top_k, dim=-1)
    tokens, experts = probabilities.shape
    by_group = probabilities.view(tokens, groups, experts // groups)
    group_scores = by_group.topk(top_k // group_topk, dim=-1).values.sum(dim=-1)
    kept = torch.zeros_like(group_scores, dtype=torch.bool).scatter(1, group_scores.topk(group_topk, dim=-1).indices,
                                                                   True)
    allowed = kept.unsqueeze(-1).expand(tokens, groups, experts // groups).reshape(tokens, experts)
    return torch.topk(probabilities.masked_fill(~allowed, float("-inf")), top_k, dim=-1)


def load_balancing_loss(probabilities: torch.Tensor, chosen: torch.Tensor, top_k: int,
                        partition: SequenceGroup | None = None) -> torch.Tensor:
    """Switch Transformer's balancing loss normalised by top-k (Megatron-LM's):
    ``E * sum_i f_i * P_i``, ``f_i`` the share of the ``tokens * top_k`` routings that went to expert ``i``
    (no gradient), ``P_i`` the mean router probability of ``i``; 1 when routing is uniform.

    Where ``partition``'s ranks each hold part of the micro-batch's tokens (context parallelism), ``f_i`` counts
    the routings of all of them and each rank's term carries its own tokens' share of ``P_i``, so the ranks'
    terms sum to the micro-batch's loss (Megatron-Core's ``sequence_partition_group``)."""
    tokens, num_experts = probabilities.shape
    counts = torch.bincount(chosen.reshape(-1), minlength=num_experts)
    if partition is None:
        counts = counts.to(probabilities.dtype)
        return num_experts * torch.sum(counts / (tokens * top_k) * probabilities.mean(dim=0))
    counts = partition.all_reduce(counts).to(probabilities.dtype)
    total = tokens * partition.size
    return num_experts * torch.sum(counts / (total * top_k) * probabilities.sum(dim=0) / total)


class MoE(nn.Module):
    """Softmax router, top-k routed experts, plus always-active shared experts.

    Tokens are gathered per expert and scattered back with ``index_add_`` (a dropless dispatch); there is
    no capacity limit, so the gradient is an exact function of the micro-batch and pipelined and
    single-process runs can be compared bit for bit. With ``aux_loss_coeff`` the load-balancing loss of each
    micro-batch, times ``loss_scale`` as the language-model loss is (the stage sets it), joins the backward.
    Under expert parallelism (``keep_experts``) the rank keeps its share of the experts and the routed tokens
    travel to theirs (``executor.model.expert_parallel``); the router and the shared experts stay whole. Under
    tensor parallelism (``shard``) every expert is split as a dense MLP is (expert TP = TP, Megatron-Core's
    default): the block gathers the sequence once, routes it whole, and reduce-scatters the experts' partial sums.
    Folded (``fold``: MoE parallel folding, expert TP 1) the routed experts stay whole and each TP rank routes its own
    tokens over an EP group that spans the TP ranks; the shared experts are a TP-split dense block of their own.
    A group-limited router (``MoEMLP.router_groups``) chooses among its best groups (``choose_experts``). A latent MoE
    (``MoEMLP.latent_size``) routes on the hidden state, sends its tokens projected down to the latent width
    (``latent_down``), runs its experts at that width and projects their combined output back up (``latent_up``),
    as Megatron-Core's ``MoELayer`` with ``moe_latent_size``.
    """

    expert_parallel = None
    token_partition = None
    tensor_parallel = None
    folded = False
    recompute_whole = recompute_shared = False   # selective recomputation (``use_recompute_modules``)

    def __init__(self, hidden_size: int, mlp: MoEMLP):
        super().__init__()
        self.num_experts = mlp.num_experts
        self.top_k = mlp.top_k
        self.router_groups = mlp.router_groups if mlp.group_limited else 1
        self.router_group_topk = mlp.router_group_topk
        self.aux_loss_coeff = mlp.aux_loss_coeff
        self.loss_scale = 1.0
        self._balancing_sum: torch.Tensor | None = None   # since the last take_balancing_loss, for the report
        self.router = Linear(hidden_size, mlp.num_experts, bias=mlp.bias)
        width = mlp.expert_width(hidden_size)
        # a latent MoE's projections down to the experts' width and back (``MoEMLP.latent_size``), whole on every TP
        # rank as the router: their gradients are partial sums over the group (``replicated_parameters``)
        self.latent_down = Linear(hidden_size, width, bias=mlp.bias) if mlp.latent_size else None
        self.latent_up = Linear(width, hidden_size, bias=mlp.bias) if mlp.latent_size else None
        self.experts = nn.ModuleList(GatedMLP(width, mlp.expert_intermediate_size, mlp.gated, mlp.bias,
                                              mlp.activation) for _ in range(mlp.num_experts))
        shared_size = mlp.num_shared_experts * mlp.shared_intermediate_size
        # Shared experts are always active, so they are one wide dense MLP.
        self.shared = GatedMLP(hidden_size, shared_size, mlp.gated, activation=mlp.activation) if shared_size else None

    def init_weights(self, generator: torch.Generator) -> None:
        self.router.init_weights(generator)
        for projection in (self.latent_down, self.latent_up):
            if projection is not None:
                projection.init_weights(generator)
        for expert in self.experts:
            expert.init_weights(generator)
        if self.shared is not None:
            self.shared.init_weights(generator)

    def fold(self) -> None:
        """MoE parallel folding (``executor.model.expert_parallel``): the routed experts are never split over TP."""
        self.folded = True
        for expert in self.experts:
            expert.whole = True

    def shard(self, tp: SequenceGroup) -> None:
        """Split every expert (and the shared experts) over TP; the router stays whole. Each rank's experts give
        partial sums, so a split expert's output bias is added on TP rank 0 only (its gradient is summed over the
        group with the router's). Folded: only the shared experts, as a dense block that gathers and scatters."""
        self.tensor_parallel = tp
        if self.folded:
            if self.shared is not None:
                self.shared.shard(tp)
            return
        for expert in [*self.experts, *([self.shared] if self.shared is not None else [])]:
            expert.split(tp)
            expert.down_proj.partial_sum_of = tp
        if self.latent_up is not None:   # it projects the experts' partial sums: its bias, too, is added once
            self.latent_up.partial_sum_of = tp
        self.tensor_parallel = tp

    def use_recompute_modules(self, modules) -> None:
        """Selective recomputation's modules (``executor.model.recompute``): ``moe``, the whole block but its input
        (router, dispatch, experts, combine, shared experts, the balancing loss), or within it ``shared_experts`` and
        the routed experts' activation, ``moe_act``."""
        self.recompute_whole = "moe" in modules
        self.recompute_shared = "shared_experts" in modules and not self.recompute_whole
        for expert in self.experts.values() if isinstance(self.experts, nn.ModuleDict) else self.experts:
            expert.recompute_activation = "moe_act" in modules and not self.recompute_whole

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute_whole and torch.is_grad_enabled():
            return checkpointed(self._forward, x)
        return self._forward(x)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        tp = self.tensor_parallel
        block_input = x
        if not self.folded:
            x = gather_sequence(x, tp)
        # every rank of a TP group routes the same tokens: its balancing loss weighs 1/tp of the block's (folded, each
        # routes its own, and the loss counts the routings of all of them: ``token_partition``)
        shares = tp.size if tp is not None and not self.folded else 1
        tokens = x.reshape(-1, x.shape[-1])
        probabilities = torch.softmax(self.router(tokens), dim=-1)
        weights, chosen = choose_experts(probabilities, self.top_k, self.router_groups, self.router_group_topk)
        if self.top_k > 1:
            # Renormalise over the chosen experts (Mixtral); a single expert keeps its raw probability
            # (Switch Transformer), else the router would get no gradient at all.
            weights = weights / weights.sum(dim=-1, keepdim=True)
        sent = tokens if self.latent_down is None else self.latent_down(tokens)   # at the experts' width
        if self.expert_parallel is not None:
            out = dispatch_to_experts(sent, weights, chosen, {int(index): expert for index, expert
                                                              in self.experts.items()},
                                      self.num_experts, self.expert_parallel)
        else:
            out = torch.zeros_like(sent)
            for expert_index, expert in enumerate(self.experts):
                token_index, slot = torch.nonzero(chosen == expert_index, as_tuple=True)
                if token_index.numel():
                    routed = expert(sent[token_index]) * weights[token_index, slot, None]
                    out = out.index_add(0, token_index, routed)
        if self.latent_up is not None:
            out = self.latent_up(out)
        if self.shared is not None:
            # folded, the shared experts gather the TP group's tokens themselves
            shared_input = block_input if self.folded else tokens
            shared = (checkpointed(self.shared, shared_input) if self.recompute_shared and torch.is_grad_enabled()
                      else self.shared(shared_input))
            out = out + shared.reshape(out.shape)
        if self.aux_loss_coeff and torch.is_grad_enabled():
            aux_loss = self.aux_loss_coeff * load_balancing_loss(probabilities, chosen, self.top_k,
                                                                 self.token_partition)
            out = _AuxLossGradient.apply(out, aux_loss, self.loss_scale / shares)
            if not recomputing():   # reported once, not again when a recomputed forward runs it
                weighed = aux_loss.detach() * self.loss_scale / shares
                self._balancing_sum = weighed if self._balancing_sum is None else self._balancing_sum + weighed
        return out.view_as(x) if self.folded else reduce_scatter_sequence(out.view_as(x), tp)

    def use_positions(self, layout) -> None:
        """Under context parallelism the micro-batch's tokens are spread over the CP group (folded, over the TP x CP
        group): the balancing loss counts the routings of all of them (``load_balancing_loss``)."""
        self.token_partition = layout.tokens if self.folded else layout.cp

    def keep_experts(self, ep: ExpertParallel) -> None:
        """Keep experts ``ep.local_experts`` only, under their global index (``experts.<i>`` as before)."""
        kept = nn.ModuleDict({str(index): self.experts[index] for index in ep.local_experts(self.num_experts)})
        for parameter in kept.parameters():
            parameter.expert_parallel = True
            parameter.outside_tensor_parallel = self.folded   # held by this rank alone, not by its TP group
        self.experts = kept
        self.expert_parallel = ep

    def take_balancing_loss(self) -> torch.Tensor | None:
        """The weighed balancing losses of the forwards since the last call, summed (None: there were none)."""
        taken, self._balancing_sum = self._balancing_sum, None
        return taken


def weigh_balancing_losses(layers, loss_scale: float) -> list[MoE]:
    """The MoE blocks inside ``layers``, their balancing loss now weighed by ``loss_scale`` (as the model's loss
    is: 1 / micro-batches)."""
    blocks = [module for layer in layers for module in layer.modules() if isinstance(module, MoE)]
    for block in blocks:
        block.loss_scale = loss_scale
    return blocks


def take_balancing_loss(blocks: list[MoE]) -> float | None:
    """The weighed balancing loss ``blocks`` added since the last call, summed (None: they added none)."""
    taken = [loss for loss in (block.take_balancing_loss() for block in blocks) if loss is not None]
    return float(torch.stack(taken).sum().item()) if taken else None


def build_mlp(hidden_size: int, mlp: DenseMLP | MoEMLP) -> nn.Module:
    if isinstance(mlp, MoEMLP):
        return MoE(hidden_size, mlp)
    return GatedMLP(hidden_size, mlp.intermediate_size, mlp.gated, mlp.bias, mlp.activation)
