"""Full sharding's unit (``executor.running.sharding.ShardedParameters``) in one process: the whole weights exist only
between a gather and a release, an action's autograd finds them again in its backward's gather, and the gradients of
several micro-batches reach the shard summed. (Two ranks and the pipeline around it: ``test_hybrid_execution.py``.)"""

import torch
import torch.distributed as dist
from torch import nn

from executor.running.sharding import ShardedParameters, shard_stages


class _Timer:
    def __init__(self):
        self.ops = []

    def timed(self, op, run, tensor=None):
        self.ops.append((op, 0 if tensor is None else tensor.numel() * tensor.element_size()))
        return run()


def _group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return dist.group.WORLD


def test_the_weights_live_only_between_gather_and_release_and_the_backward_sees_them_again():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).double()
    reference = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).double()
    reference.load_state_dict(model.state_dict())
    inputs = [torch.randn(4, 5, dtype=torch.float64) for _ in range(3)]
    group = _group()
    try:
        timer = _Timer()
        unit = ShardedParameters(list(model.parameters()), group, "dp", timer)
        assert unit.full.untyped_storage().nbytes() == 0, "released once built"
        assert torch.equal(unit.shard.data[:35], reference[0].weight.reshape(-1))
        losses = []
        for batch in inputs:   # forward of every micro-batch, each between a gather and a release
            unit.gather()
            losses.append(model(batch).square().sum())
            unit.release()
            assert unit.full.untyped_storage().nbytes() == 0
        for loss in losses:    # then their backwards, each gathering again what the forward saved
            unit.gather()
            loss.backward()
            unit.release()
        unit.reduce_gradients()
        assert all(p.grad is None for p in model.parameters()), "the whole gradients are dropped"
        sum(reference(batch).square().sum() for batch in inputs).backward()
        expected = torch.cat([p.grad.reshape(-1) for p in reference.parameters()])
        assert torch.allclose(unit.shard.grad[:expected.numel()], expected, rtol=1e-12, atol=0)
        total_bytes = 8 * sum(p.numel() for p in reference.parameters())
        assert timer.ops == [("dp_all_gather", total_bytes)] * 6 + [("dp_reduce_scatter", total_bytes)]
    finally:
        dist.destroy_process_group()


def test_a_parameter_two_stages_share_is_sharded_once_and_gathered_for_both():
    class Runner:
        def __init__(self, layers):
            self.layers = layers

    table = nn.Embedding(6, 4).double()
    head = nn.Linear(4, 6, bias=False).double()
    head.weight = table.weight   # a tied table with both ends on this rank
    group = _group()
    try:
        units = shard_stages({0: Runner([table, nn.Linear(4, 4).double()]), 3: Runner([head])}, {"dp": group}, 1)
        # a unit a layer, listed per layer; the table's gathered for both ends
        assert [len(layer) for layer in units[0]] == [1, 1] and units[3] == [[units[0][0][0]]]
        assert units[0][0][0].parameters == [table.weight]
    finally:
        dist.destroy_process_group()


def _stage_layers():
    from executor.model.linear import Linear

    return [nn.Sequential(Linear(6, 6, bias=True), nn.Tanh()).double() for _ in range(3)]


def test_a_fully_sharded_stage_holds_one_layer_whole_at_a_time_in_its_forward_and_its_backward(monkeypatch):
    from executor.running.sharding import sharded_units
    from executor.running.stage import StageRunner

    torch.manual_seed(0)
    layers, reference = _stage_layers(), _stage_layers()
    for layer, twin in zip(layers, reference):
        twin.load_state_dict(layer.state_dict())
    inputs = [torch.randn(4, 6, dtype=torch.float64) for _ in range(4)]
    targets = [torch.randn(4, 6, dtype=torch.float64) for _ in range(4)]
    whole, most = set(), [0]
    gather, release = ShardedParameters.gather, ShardedParameters.release

    def gathering(unit, record=True):
        gather(unit, record)
        whole.add(id(unit))
        most[0] = max(most[0], len(whole))

    def releasing(unit):
        release(unit)
        whole.discard(id(unit))

    monkeypatch.setattr(ShardedParameters, "gather", gathering)
    monkeypatch.setattr(ShardedParameters, "release", releasing)
    group = _group()
    try:
        runner = StageRunner(1, layers, is_first=False, is_last=True, loss_scale=0.25)
        timer = _Timer()
        units = shard_stages({1: runner}, {"dp": group}, 1)
        for unit in sharded_units(units):
            unit.timer = timer
        runner.layer_units = units[1]
        for microbatch in range(4):
            runner.forward(microbatch, inputs[microbatch], targets[microbatch])
            assert not whole, "every layer is freed after its forward"
        runner.backward(0, None)                       # B
        runner.backward(1, None)
        assert not whole, "every layer is freed once the backward has passed its input"
        runner.backward_input(2, None)                 # I, then W without the weights
        runner.backward_input(3, None)
        assert not whole
        gathers = len(timer.ops)
        runner.backward_weight(2)
        runner.backward_weight(3)
        assert len(timer.ops) == gathers and not whole
        assert most[0] == 1, "one layer whole at a time"
        for unit in sharded_units(units):
            unit.reduce_gradients()
        loss = sum(torch.nn.functional.mse_loss(nn.Sequential(*reference)(x), y) * 0.25
                   for x, y in zip(inputs, targets))
        loss.backward()
        for unit, twin in zip(sharded_units(units), reference):
            expected = torch.cat([p.grad.reshape(-1) for p in twin.parameters()])
            assert torch.allclose(unit.shard.grad[:expected.numel()], expected, rtol=1e-12, atol=0)
        # per layer: 4 forwards and 4 backwards (B or I) gather it
        assert [op for op, _ in timer.ops].count("dp_all_gather") == 3 * 8
    finally:
        dist.destroy_process_group()
