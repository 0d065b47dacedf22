"""Independent checks for generated schedules, kept apart from ``planner.plan_check`` and the simulator on
purpose: they restate the dependency rules directly so the generators are not checked by the code they feed.
"""

from planner.plan import Action
from planner.profile import LayerProfile, Profile


def check_complete(actions, stage_devices, num_microbatches):
    """Every stage x micro-batch has one F and either one B or one I and one W, on the stage's device."""
    seen = {}
    for device, device_actions in enumerate(actions):
        for action in device_actions:
            assert stage_devices[action.stage] == device, f"{action} runs on device {device}"
            assert action not in seen, f"{action} appears twice"
            seen[action] = device
    for stage in range(len(stage_devices)):
        for microbatch in range(num_microbatches):
            kinds = {kind for kind in "FBIW" if Action(stage, kind, microbatch) in seen}
            assert kinds in ({"F", "B"}, {"F", "I", "W"}), f"stage {stage} micro-batch {microbatch} has {kinds}"
    assert len(seen) == sum(len(a) for a in actions)


def dependencies(action, num_stages):
    stage, kind, microbatch = action.stage, action.type, action.microbatch
    if kind == "F":
        return [Action(stage - 1, "F", microbatch)] if stage > 0 else []
    if kind == "W":
        return [Action(stage, "I", microbatch)]
    needs = [Action(stage, "F", microbatch)]
    if stage < num_stages - 1:
        needs.append((stage + 1, microbatch))   # the later stage's B or I, whichever it runs
    return needs


def replay(actions, num_stages):
    """Run every device's order in lock-step rounds, each device taking its next action once its inputs
    are done. Returns the number of rounds; fails naming the stuck actions on a deadlock."""
    done, gradient_done = set(), set()
    cursor = [0] * len(actions)
    rounds = 0
    while any(cursor[d] < len(actions[d]) for d in range(len(actions))):
        finished = []
        for device, device_actions in enumerate(actions):
            if cursor[device] == len(device_actions):
                continue
            action = device_actions[cursor[device]]
            ready = all((need in gradient_done) if isinstance(need, tuple) and not isinstance(need, Action)
                        else need in done for need in dependencies(action, num_stages))
            if ready:
                finished.append(action)
                cursor[device] += 1
        stuck = [str(actions[d][cursor[d]]) for d in range(len(actions)) if cursor[d] < len(actions[d])]
        assert finished, f"deadlock: next actions {stuck} all wait"
        for action in finished:
            done.add(action)
            if action.type in "BI":
                gradient_done.add((action.stage, action.microbatch))
        rounds += 1
    return rounds


def max_in_flight(device_actions):
    """Most micro-batch-stages whose forward has run and whose backward (B or W) has not: activations held."""
    held, peak = 0, 0
    for action in device_actions:
        if action.type == "F":
            held += 1
        elif action.type in "BW":
            held -= 1
        peak = max(peak, held)
    return peak


def layer(name, kind, forward=1.0, backward_input=1.0, backward_weight=1.0, params=10, activation=1000,
          output=100):
    return LayerProfile(name, kind, forward, backward_input, backward_weight, activation, output, params)


def make_profile(layers, name="test-model"):
    return Profile(name, "test-device", tuple(layers))


def decoder_profile(num_blocks, *, forward=1.0, backward_input=1.0, backward_weight=1.0, with_ends=False):
    blocks = [layer(f"layers.{i}", "decoder", forward, backward_input, backward_weight) for i in range(num_blocks)]
    if with_ends:
        blocks = [layer("embed", "embedding", 0.1, 0.0, 0.1, params=500)] + blocks + \
                 [layer("head", "head", 3.0, 3.0, 3.0, params=500)]
    return make_profile(blocks)
