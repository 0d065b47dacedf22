"""Schedules and profiles built by hand for the simulator tests.

Kept independent of ``planner.scheduling`` on purpose: the simulator is checked against orders whose
bubbles have textbook closed forms, written here the way the papers describe them.
"""

import random

from planner.plan import Action, Plan, Stage
from planner.profile import LayerProfile, Profile


def uniform_profile(num_layers, *, forward=1.0, backward_input=1.0, backward_weight=1.0,
                    activation_bytes=1000, output_bytes=100, param_bytes=10, flops=0.0,
                    microbatch_size=1, seq_len=1):
    layers = tuple(LayerProfile(f"layers.{index}", "decoder", forward, backward_input, backward_weight,
                                activation_bytes, output_bytes, param_bytes) for index in range(num_layers))
    return Profile("uniform", "test-device", layers, microbatch_size=microbatch_size, seq_len=seq_len,
                   flops_per_microbatch=flops)


def one_layer_stages(num_stages, num_devices):
    """Stage k holds layer k and runs on device k mod num_devices (plain or interleaved placement)."""
    return [Stage((index,), index % num_devices) for index in range(num_stages)]


def backward_actions(stage, microbatch, split):
    return [Action(stage, "I", microbatch), Action(stage, "W", microbatch)] if split else \
        [Action(stage, "B", microbatch)]


def gpipe(num_devices, num_microbatches):
    actions = [[Action(device, "F", mb) for mb in range(num_microbatches)]
               + [Action(device, "B", mb) for mb in range(num_microbatches)] for device in range(num_devices)]
    return Plan(num_devices, num_microbatches, one_layer_stages(num_devices, num_devices), actions, "gpipe")


def one_f_one_b(num_devices, num_microbatches, *, split=False):
    """PipeDream-flush: p-d-1 warm-up forwards, then one forward / one backward, then the drain."""
    actions = []
    for device in range(num_devices):
        warmup = min(num_devices - device - 1, num_microbatches)
        order = [Action(device, "F", mb) for mb in range(warmup)]
        for mb in range(num_microbatches - warmup):
            order.append(Action(device, "F", warmup + mb))
            order += backward_actions(device, mb, split)
        for mb in range(num_microbatches - warmup, num_microbatches):
            order += backward_actions(device, mb, split)
        actions.append(order)
    return Plan(num_devices, num_microbatches, one_layer_stages(num_devices, num_devices), actions, "1f1b")


def interleaved_1f1b(num_devices, num_microbatches, chunks):
    """Megatron-LM's interleaved schedule; model chunk c of device d is stage c*p + d (m multiple of p)."""
    p, v, m = num_devices, chunks, num_microbatches
    total = m * v
    actions = []
    for device in range(p):
        forwards, backwards = [], []
        for k in range(total):
            chunk = (k // p) % v
            microbatch = (k // (p * v)) * p + k % p
            forwards.append(Action(chunk * p + device, "F", microbatch))
            backwards.append(Action((v - 1 - chunk) * p + device, "B", microbatch))
        warmup = total if m == p else min(total, (p - device - 1) * 2 + (v - 1) * p)
        order = forwards[:warmup]
        for step in range(total - warmup):
            order += [forwards[warmup + step], backwards[step]]
        order += backwards[total - warmup:]
        actions.append(order)
    return Plan(p, m, one_layer_stages(p * v, p), actions, "interleaved-1f1b")


def random_valid_plan(rng: random.Random, *, max_layers=9, max_devices=4, max_microbatches=5):
    """A random partition, placement and per-device order that some global order can execute."""
    num_layers = rng.randint(1, max_layers)
    cuts = sorted(rng.sample(range(1, num_layers), rng.randint(0, num_layers - 1)))
    bounds = [0] + cuts + [num_layers]
    num_devices = rng.randint(1, max_devices)
    stages = [Stage(tuple(range(bounds[k], bounds[k + 1])), rng.randrange(num_devices))
              for k in range(len(bounds) - 1)]
    num_stages, num_microbatches = len(stages), rng.randint(1, max_microbatches)
    split = {(s, m): rng.random() < 0.5 for s in range(num_stages) for m in range(num_microbatches)}
    pending = [Action(s, "F", m) for s in range(num_stages) for m in range(num_microbatches)]
    pending += [action for s in range(num_stages) for m in range(num_microbatches)
                for action in backward_actions(s, m, split[(s, m)])]
    scheduled: set = set()

    def ready(action):
        s, m = action.stage, action.microbatch
        if action.type == "F":
            return s == 0 or Action(s - 1, "F", m) in scheduled
        if action.type == "W":
            return Action(s, "I", m) in scheduled
        upstream_done = s == num_stages - 1 or any(Action(s + 1, kind, m) in scheduled for kind in "BI")
        return Action(s, "F", m) in scheduled and upstream_done

    actions = [[] for _ in range(num_devices)]
    while pending:
        action = rng.choice([candidate for candidate in pending if ready(candidate)])
        pending.remove(action)
        scheduled.add(action)
        actions[stages[action.stage].device].append(action)
    plan = Plan(num_devices, num_microbatches, stages, actions, "random")
    return plan, num_layers


def random_profile(rng: random.Random, num_layers, *, integer_times=False):
    def duration(low, high):
        return float(rng.randint(max(int(low), 1), int(high))) if integer_times else rng.uniform(low, high)

    layers = tuple(LayerProfile(f"layers.{index}", "decoder", duration(0.1, 4), duration(0.1, 4),
                                duration(0.0, 3), rng.randint(0, 10_000), rng.randint(0, 5), rng.randint(0, 100))
                   for index in range(num_layers))
    return Profile("random", "test-device", layers)
