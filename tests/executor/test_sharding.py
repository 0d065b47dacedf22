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
        assert len(units[0]) == 2 and units[3] == [units[0][0]]   # a unit a layer; the table's gathered for both
        assert units[0][0].parameters == [table.weight]
    finally:
        dist.destroy_process_group()
