"""A lower bound on any plan's iteration time for a profile, device count and micro-batch count.

Three independent limits, each true for every partition, placement and schedule:

- ``work_per_device_ms``: all compute (F + I + W of every layer, every micro-batch) spread perfectly
  over the devices;
- ``heaviest_layer_ms``: a layer runs on one device, so that device does its F + I + W for every
  micro-batch;
- ``microbatch_chain_ms``: one micro-batch's dependency chain: every layer's forward, then every
  layer's input-gradient backward in reverse, then the first layer's weight gradient (which needs that
  layer's input gradient; every other layer's W can overlap the rest of the chain).

Transfers are left out: they depend on the placement, and a bound must hold for every plan.

Four tighter limits see indivisible layers and the pipeline's fill; the search's bound (``search_lower_bound``,
shown on the job page as the gap) is the max of all seven (eight under a memory limit). Every limit holds for any
partition, placement and schedule (transfers only add time, so they are left out). With ``T`` the iteration time,
``m`` micro-batches, ``p`` devices and ``c_i = F_i + I_i + W_i``:

- ``indivisible_layers_ms``: a layer runs whole on one device, so the devices' loads are a partition of
  the layer costs into ``p`` groups. Among the ``k*p + 1`` costliest layers some device gets ``k + 1``;
  its load is at least the ``k + 1`` cheapest of those (the classic P||Cmax bound), times ``m``.
- ``optimal_device_load_ms``: the same fact solved exactly: the optimum of P||Cmax over the layer costs
  (rounded down, so it stays a bound), which sees e.g. that a big head forces 5 decoders onto another
  device where the counting bound above only sees 4.
- ``pipeline_fill_ms``: a device whose lowest layer is ``l`` cannot start before micro-batch 0's forward
  has run layers ``0..l-1``. The lowest layers of the devices are distinct, so the devices together idle
  at least the sum of the ``p`` smallest such prefixes (layers ``0..p-1``); ``T >= (work + idle) / p``.
- ``layer_chain_ms``: the device that runs layer ``l`` starts its first F no earlier than the forward
  prefix before ``l``, and its first I no earlier than one micro-batch's F of ``l`` and its forwards and input
  gradients through every later layer (``after``) beyond that: so, with the ``k`` F's it can run before that I,
  the time up to then and the F's after it take at least ``max(F + after, m F)`` (a deep pipeline with few
  micro-batches idles here: its fill and drain). From that first I on it runs all ``m`` I's and all ``m`` W's;
  after its last I the input-gradient chain below ``l`` and layer 0's W still have to run, which its W's may
  overlap. And the last micro-batch to pass layer ``l`` still has one micro-batch's chain to finish.

Under a memory limit one more term, ``memory_flow_ms`` (see its docstring): a device holds each micro-batch's
activations for at least that micro-batch's chain through the layers after them, so by Little's law the memory left
beside its model state caps how many it keeps in flight on average, and so its throughput.
"""

from __future__ import annotations

from collections import Counter
from itertools import accumulate, product

from planner.errors import SpecError
from planner.profile import Profile
from planner.units import binary_bytes


def lower_bound_ms(profile: Profile, num_devices: int, num_microbatches: int) -> dict:
    if num_devices < 1:
        raise SpecError("num_devices", f"must be >= 1, got {num_devices}")
    if num_microbatches < 1:
        raise SpecError("num_microbatches", f"must be >= 1, got {num_microbatches}")
    layers = profile.layers
    per_layer = [layer.forward + layer.backward_input + layer.backward_weight for layer in layers]
    work_per_device = sum(per_layer) * num_microbatches / num_devices
    heaviest_layer = max(per_layer) * num_microbatches
    chain = (sum(layer.forward for layer in layers) + sum(layer.backward_input for layer in layers)
             + layers[0].backward_weight)
    return {"work_per_device_ms": work_per_device, "heaviest_layer_ms": heaviest_layer,
            "microbatch_chain_ms": chain, "lower_bound_ms": max(work_per_device, heaviest_layer, chain)}


def indivisible_layers_ms(costs: list[float], num_devices: int, num_microbatches: int) -> float:
    ordered = sorted(costs, reverse=True)
    best = 0.0
    per_device = 1
    while per_device * num_devices + 1 <= len(ordered):
        top = ordered[:per_device * num_devices + 1]
        best = max(best, sum(top[-(per_device + 1):]))
        per_device += 1
    return best * num_microbatches


# Layer costs are rounded *down* to multiples of a step (a cheaper problem's optimum is no larger, so the
# bound stays valid); the step doubles until at most this many distinct costs remain.
MAX_COST_TYPES = 6
STEPS_PER_LARGEST_LAYER = 1000
# Feasibility checks give up (prove nothing) past this many partial packings, keeping the bound cheap.
MAX_FRONTIER = 1000


def optimal_device_load_ms(costs: list[float], num_devices: int, num_microbatches: int) -> float:
    """The exact min over all assignments of layers to devices of the heaviest device's load, times ``m``.

    Validity: a layer's F, I and W run on the device that holds the layer, so in any plan some device
    runs a load of at least ``OPT = min over assignments of max device load`` per micro-batch (P||Cmax),
    for contiguous or not, looped or not placements alike; transfers only add time. We solve P||Cmax
    exactly on costs rounded down to integer multiples ``k * step`` (``k * step <= cost``, so the rounded
    optimum ``OPT_q <= OPT``): the smallest integer capacity ``C`` such that ``p`` bins of capacity
    ``C`` hold every item is ``OPT_q / step``. We bisect on ``C`` starting from the volume bound
    ``max(ceil(sum k / p), max k)`` (always ``<= OPT_q / step``) and only raise the lower end when a
    capacity is *proven* infeasible by an exhaustive packing search; a search cut short by
    ``MAX_FRONTIER`` counts as "maybe feasible", which only lowers the upper end, so the returned lower
    end is always ``<= OPT_q / step`` and the result never exceeds ``OPT * m``.
    """
    if not costs or max(costs) <= 0:
        return 0.0
    step = max(costs) / STEPS_PER_LARGEST_LAYER
    while True:
        units = [int(cost // step) for cost in costs]
        units = [unit for unit in units if unit > 0]
        if len(set(units)) <= MAX_COST_TYPES:
            break
        step *= 2
    counts = sorted(Counter(units).items(), reverse=True)
    sizes = tuple(size for size, _ in counts)
    needed = tuple(count for _, count in counts)
    low = max(-(-sum(units) // num_devices), max(units))
    high = _greedy_makespan(units, num_devices)
    while low < high:
        middle = (low + high) // 2
        if _provably_infeasible(sizes, needed, num_devices, middle):
            low = middle + 1
        else:
            high = middle
    # The (1 - 1e-12) absorbs float rounding in ``cost // step``.
    return low * step * num_microbatches * (1 - 1e-12)


def _greedy_makespan(units: list[int], num_devices: int) -> int:
    loads = [0] * num_devices
    for unit in sorted(units, reverse=True):
        loads[loads.index(min(loads))] += unit
    return max(loads)


def _maximal_packings(sizes: tuple[int, ...], needed: tuple[int, ...], capacity: int) -> list[tuple[int, ...]]:
    """Item-count vectors that fit one bin and to which no further item fits (the only ones worth using)."""
    packings = []

    def extend(index: int, room: int, chosen: list[int]) -> None:
        if index == len(sizes):
            if all(chosen[kind] == needed[kind] or sizes[kind] > room for kind in range(len(sizes))):
                packings.append(tuple(chosen))
            return
        for count in range(min(needed[index], room // sizes[index]), -1, -1):
            chosen.append(count)
            extend(index + 1, room - count * sizes[index], chosen)
            chosen.pop()

    extend(0, capacity, [])
    return packings


def _provably_infeasible(sizes: tuple[int, ...], needed: tuple[int, ...], num_devices: int, capacity: int) -> bool:
    """True only if no packing of the items into ``num_devices`` bins of ``capacity`` exists.

    Breadth-first over bins, keeping the Pareto-maximal vectors of items packed so far (capped at what is
    needed): a dominated vector can never finish when its dominator cannot, so dropping it loses nothing.
    """
    packings = _maximal_packings(sizes, needed, capacity)
    total = sum(size * need for size, need in zip(sizes, needed))
    frontier = {tuple(0 for _ in sizes)}
    for bins_left in range(num_devices - 1, -1, -1):
        grown = {tuple(min(have + add, need) for have, add, need in zip(state, packing, needed))
                 for state in frontier for packing in packings}
        if needed in grown:
            return False
        # A state whose unpacked volume exceeds the room left in the remaining bins cannot finish.
        grown = {state for state in grown
                 if total - sum(size * have for size, have in zip(sizes, state)) <= bins_left * capacity}
        frontier = _pareto_maximal(grown)
        if len(frontier) > MAX_FRONTIER:
            return False  # too large to settle cheaply: claim nothing
    return True


def _pareto_maximal(states: set[tuple[int, ...]]) -> set[tuple[int, ...]]:
    ordered = sorted(states, key=sum, reverse=True)
    kept: list[tuple[int, ...]] = []
    for state in ordered:
        if not any(all(mine <= theirs for mine, theirs in zip(state, other)) for other in kept):
            kept.append(state)
    return set(kept)


def pipeline_fill_ms(profile: Profile, num_devices: int, num_microbatches: int) -> float:
    layers = profile.layers
    work = sum(layer.forward + layer.backward for layer in layers) * num_microbatches
    idle, prefix = 0.0, 0.0
    for layer in layers[:num_devices]:
        idle += prefix
        prefix += layer.forward
    return (work + idle) / num_devices


def layer_chain_ms(profile: Profile, num_microbatches: int) -> float:
    layers = profile.layers
    total_forward = sum(layer.forward for layer in layers)
    total_input = sum(layer.backward_input for layer in layers)
    first_weight = layers[0].backward_weight
    chain = total_forward + total_input + first_weight
    m = num_microbatches
    best, forward_before, input_before = 0.0, 0.0, 0.0
    for layer in layers:
        # the first I of this layer waits for a micro-batch's forwards and input gradients through every later layer
        after = total_forward - forward_before - layer.forward + total_input - input_before - layer.backward_input
        best = max(best,
                   chain + (m - 1) * max(layer.forward, layer.backward_input),
                   forward_before + max(layer.forward + after, m * layer.forward) + m * layer.backward_input
                   + max(m * layer.backward_weight, input_before + first_weight))
        forward_before += layer.forward
        input_before += layer.backward_input
    return best


def activation_hold_ms(profile: Profile) -> list[float]:
    """The least time one micro-batch's activations of each layer stay held, in any plan: ``stage_hold_ms`` of the
    layer alone (a stage around it holds them at least as long)."""
    prefixes = pass_prefixes(profile)
    return [stage_hold_ms(*prefixes, index, index + 1) for index in range(profile.num_layers)]


def pass_prefixes(profile: Profile) -> tuple[list[float], list[float], list[float]]:
    """Prefix sums of the layers' F, I and W times (what ``stage_hold_ms`` reads)."""
    layers = profile.layers
    return ([0.0, *accumulate(layer.forward for layer in layers)],
            [0.0, *accumulate(layer.backward_input for layer in layers)],
            [0.0, *accumulate(layer.backward_weight for layer in layers)])


def stage_hold_ms(forward_prefix: list[float], input_prefix: list[float], weight_prefix: list[float], start: int,
                  end: int) -> float:
    """The least time one micro-batch holds the activations of the stage of layers ``[start, end)``, in any plan.

    They are taken when the stage starts its forward and freed when its W (or B) ends (``planner.memory.activations``).
    In between run, one after another: the stage's forwards and those of every later layer, the input gradients back
    down through the stage (the last layer's I needs its F; each I the next layer's), and the stage's W (which needs
    its I). Transfers only lengthen it. Over prefix sums (``pass_prefixes``, or the search's own).
    """
    return (forward_prefix[-1] - forward_prefix[start] + input_prefix[-1] - input_prefix[start]
            + weight_prefix[end] - weight_prefix[start])


# Weights of the surrogate constraints tried (each a convex combination of a device's load and memory rows).
SURROGATE_STEPS = 10
BISECTION_ROUNDS = 40


def memory_flow_ms(profile: Profile, num_devices: int, num_microbatches: int, *, memory_limit_bytes: float,
                   layer_state_bytes: list[float], activation_limit_bytes: float = float("inf")) -> float:
    """The least iteration time ``T`` that any layer-to-device assignment allows once memory is counted.

    A device ``d`` holding layers ``L_d`` runs, in any plan that fits:
    - its load: ``m * sum(w_l) <= T`` (``w_l = F + I + W``);
    - its memory: activations held at any time fit beside its model state, ``held_d(t) <= M - sum(s_l)`` (and
      ``<= X`` under an activation limit). Each micro-batch holds ``a_l`` bytes for at least ``g_l``
      (``activation_hold_ms``), so the held bytes integrate to at least ``m * sum(a_l g_l)`` over the
      iteration: Little's law (Little 1961, L = lambda W) in integral form. Hence
      ``sum(s_l) + (m / T) * sum(a_l g_l) <= M``.
    For a given ``T`` these are a two-dimensional bin packing of the layers into ``p`` devices. Any convex
    combination of a device's rows must hold too (a surrogate relaxation, Glover 1968), which is a one-dimensional
    packing; when the volume or the counting argument of ``indivisible_layers_ms`` proves it impossible for some
    combination, no plan runs in ``T``. The bound is the smallest ``T`` (by bisection; feasibility only grows with
    ``T``) that no combination rules out. It holds for any partition, placement and schedule, contiguous or not.
    Raises ``SpecError`` when even an unbounded ``T`` is ruled out: then no partition holds the model state.
    """
    m = num_microbatches
    layers = profile.layers
    work = [layer.forward + layer.backward for layer in layers]
    flow = [layer.activation_bytes * hold for layer, hold in zip(layers, activation_hold_ms(profile))]
    state = [float(value) for value in layer_state_bytes]
    rows = [lambda time: [m * value / time for value in work]]
    if memory_limit_bytes < float("inf"):
        rows.append(lambda time: [(held + m * rate / time) / memory_limit_bytes for held, rate in zip(state, flow)])
    if activation_limit_bytes < float("inf"):
        rows.append(lambda time: [m * rate / time / activation_limit_bytes for rate in flow])
    if len(rows) == 1:
        return 0.0
    weights = [combination for combination in product(range(SURROGATE_STEPS + 1), repeat=len(rows))
               if sum(combination) == SURROGATE_STEPS and combination[0] < SURROGATE_STEPS]

    def ruled_out(time: float) -> bool:
        sizes = [row(time) for row in rows]
        return any(_packing_impossible([sum(weight * size[index] for weight, size in zip(combination, sizes))
                                        / SURROGATE_STEPS for index in range(len(layers))], num_devices)
                   for combination in weights)

    high = max(sum(work) * m / num_devices, 1e-9)
    for _ in range(200):
        if not ruled_out(high):
            break
        high *= 2
    else:
        raise SpecError("memory_limit_bytes", f"no partition of the layers over {num_devices} devices holds their "
                                              f"model state: the largest layers cannot share devices that small")
    low = 0.0
    for _ in range(BISECTION_ROUNDS):
        middle = (low + high) / 2
        if ruled_out(middle):
            low = middle
        else:
            high = middle
    return low


def _packing_impossible(sizes: list[float], num_devices: int) -> bool:
    """True only if items of ``sizes`` cannot go into ``num_devices`` bins of size 1: by volume, by the largest item,
    or because among the ``k * p + 1`` largest items some bin gets ``k + 1`` of them (``indivisible_layers_ms``)."""
    tolerance = 1 + 1e-9
    return (sum(sizes) > num_devices * tolerance or max(sizes) > tolerance
            or indivisible_layers_ms(sizes, num_devices, 1) > tolerance)


def search_lower_bound(profile: Profile, num_devices: int, num_microbatches: int, *,
                       memory_limit_bytes: float = float("inf"), layer_state_bytes: list[float] | None = None,
                       activation_limit_bytes: float = float("inf")) -> dict:
    """``lower_bound_ms``'s parts plus the ones above; ``lower_bound_ms`` is the max. ``memory_flow_ms`` joins them
    under a memory or activation limit (``layer_state_bytes``: each layer's model state on its device)."""
    parts = lower_bound_ms(profile, num_devices, num_microbatches)
    costs = [layer.forward + layer.backward for layer in profile.layers]
    parts["indivisible_layers_ms"] = indivisible_layers_ms(costs, num_devices, num_microbatches)
    parts["optimal_device_load_ms"] = optimal_device_load_ms(costs, num_devices, num_microbatches)
    parts["pipeline_fill_ms"] = pipeline_fill_ms(profile, num_devices, num_microbatches)
    parts["layer_chain_ms"] = layer_chain_ms(profile, num_microbatches)
    if memory_limit_bytes < float("inf") or activation_limit_bytes < float("inf"):
        parts["memory_flow_ms"] = memory_flow_ms(
            profile, num_devices, num_microbatches, memory_limit_bytes=memory_limit_bytes,
            layer_state_bytes=layer_state_bytes or [0.0] * profile.num_layers,
            activation_limit_bytes=activation_limit_bytes)
    parts["lower_bound_ms"] = max(value for key, value in parts.items() if key != "lower_bound_ms")
    return parts


# What each term of ``search_lower_bound`` stands for, as the job page says it when the term binds.
TERM_MEANINGS = {
    "work_per_device_ms": "all the work spread evenly over the devices",
    "heaviest_layer_ms": "the costliest layer, which one device runs for every micro-batch",
    "microbatch_chain_ms": "one micro-batch's chain of forwards and backwards",
    "indivisible_layers_ms": "indivisible layers: among the costliest, some device gets one more than the others",
    "optimal_device_load_ms": "indivisible layers: even their best split leaves one device this much work",
    "pipeline_fill_ms": "the pipeline's fill: each device waits for the forwards before its first layer",
    "layer_chain_ms": "a layer's chain: its device waits for the forwards before it, then runs its passes",
    "memory_flow_ms": ("memory: beside its model state a device keeps only so many micro-batches in flight, each for "
                       "its whole chain through the later layers (Little's law)"),
}


def binding_term(parts: dict) -> dict:
    """The term of a ``search_lower_bound`` result that sets the bound: its key, value and meaning."""
    name = max((key for key in parts if key != "lower_bound_ms"), key=lambda key: parts[key])
    return {"term": name, "ms": parts[name], "text": TERM_MEANINGS[name]}


def stage_waves_ms(profile: Profile, start: int, end: int, num_microbatches: int, fit: int) -> float:
    """Least time for a device that holds the one stage ``[start, end)`` and room for ``fit`` micro-batches' activations
    at once: micro-batch ``j + fit`` cannot start its forward there before micro-batch ``j``'s W (or B) has freed
    them, at least the hold of the stage's activations later (its forwards and the later layers', the input
    gradients back to it, its W: ``stage_hold_ms``). So the micro-batches pass in ``ceil(m / fit)`` waves, each
    at least that hold long."""
    return waves_ms(num_microbatches, fit, stage_hold_ms(*pass_prefixes(profile), start, end))


def waves_ms(num_microbatches: int, fit: int, hold_ms: float) -> float:
    """``stage_waves_ms`` from the stage's hold: ``ceil(m / fit)`` waves of ``hold_ms`` (infinite when none fits)."""
    return -(-num_microbatches // fit) * hold_ms if fit >= 1 else float("inf")


def plan_memory_limit(plan, profile: Profile, *, memory_limit_bytes: float, layer_state_bytes: list[float],
                      activation_limit_bytes: float = float("inf")) -> dict | None:
    """What memory allows the plan's own partition: per device, the bytes left beside its model state, how many
    whole micro-batches (its activations on all the device's stages) fit there, and ``memory_flow_ms``'s argument
    for this partition alone: ``T >= m * sum(a_l g_l) / (bytes left)``, or on a device with one stage the tighter
    ``stage_waves_ms``. The device where that is largest is returned, with a sentence for the page (``None``
    without a limit)."""
    if memory_limit_bytes == float("inf") and activation_limit_bytes == float("inf"):
        return None
    prefixes = pass_prefixes(profile)
    hold = activation_hold_ms(profile)
    devices = []
    for device in range(plan.num_devices):
        own = [stage for stage in plan.stages if stage.device == device]
        layers = [index for stage in own for index in stage.layers]
        state = sum(layer_state_bytes[index] for index in layers)
        left = min(memory_limit_bytes - state, activation_limit_bytes)
        per_microbatch = sum(profile.layers[index].activation_bytes for index in layers)
        flow = sum(profile.layers[index].activation_bytes * hold[index] for index in layers)
        bound = plan.num_microbatches * flow / left if left > 0 else float("inf")
        fits = int(left // per_microbatch) if per_microbatch > 0 else plan.num_microbatches
        if len(own) == 1 and per_microbatch > 0:
            hold_ms = stage_hold_ms(*prefixes, own[0].layers[0], own[0].layers[-1] + 1)
            bound = max(bound, waves_ms(plan.num_microbatches, fits, hold_ms))   # ``stage_waves_ms``
        devices.append({"device": device, "state_bytes": state, "left_bytes": left,
                        "microbatch_bytes": per_microbatch, "microbatches_fit": min(fits, plan.num_microbatches),
                        "memory_flow_ms": bound})
    worst = max(devices, key=lambda device: device["memory_flow_ms"])
    worst["text"] = (
        f"memory on device {worst['device']} allows {worst['microbatches_fit']} micro-batches in flight: "
        f"{binary_bytes(worst['left_bytes'])} left beside {binary_bytes(worst['state_bytes'])} of model state, "
        f"{binary_bytes(worst['microbatch_bytes'])} per micro-batch; held for their chains, they keep this partition "
        f"at {worst['memory_flow_ms']:,.3f} ms or more")
    return worst
