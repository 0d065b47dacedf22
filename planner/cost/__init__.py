"""The analytic cost model: per-layer FLOPs, memory traffic, activation memory and parameters, turned into
F / B / W times on a device by a roofline.

One module per kind of part: ``primitives`` (projections, norms, pointwise kernels), ``attention``
(softmax attention incl. sliding windows and MLA), ``linear_attention`` (gated delta-net, lightning),
``ssm`` (Mamba-2), ``mlp`` (dense and MoE), ``vocab`` (embedding and head); ``roofline`` turns kernels into
time and ``analytic`` assembles the profile.
"""

from planner.cost.analytic import active_parameters, analytic_profile, count_parameters, layer_cost, layer_parameters

__all__ = ["active_parameters", "analytic_profile", "count_parameters", "layer_cost", "layer_parameters"]
