"""The expert-parallel exchange on two real gloo ranks, with routings a model's own router rarely makes: every token
of the group choosing the experts of one rank, so the other receives none."""

from __future__ import annotations

import datetime
import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from executor.model.expert_parallel import ExpertParallel, dispatch_to_experts

HIDDEN, EXPERTS, TOKENS, TOP_K = 8, 4, 6, 2


def _experts() -> dict[int, torch.nn.Linear]:
    experts = {}
    for index in range(EXPERTS):
        torch.manual_seed(100 + index)
        experts[index] = torch.nn.Linear(HIDDEN, HIDDEN, bias=False, dtype=torch.float64)
    return experts


def _rank(rank: int, store: str, chosen_by_rank: list[torch.Tensor], failures) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=30))
    try:
        torch.manual_seed(rank)
        tokens = torch.randn(TOKENS, HIDDEN, dtype=torch.float64, requires_grad=True)
        weights = torch.rand(TOKENS, TOP_K, dtype=torch.float64, requires_grad=True)
        chosen = chosen_by_rank[rank]
        experts = _experts()
        ep = ExpertParallel(dist.group.WORLD, rank, 2)
        local = {index: experts[index] for index in ep.local_experts(EXPERTS)}
        out = dispatch_to_experts(tokens, weights, chosen, local, EXPERTS, ep)
        (out * torch.arange(HIDDEN, dtype=torch.float64)).sum().backward()
        # the same tokens through every expert in this process
        reference_tokens = tokens.detach().clone().requires_grad_(True)
        reference_weights = weights.detach().clone().requires_grad_(True)
        expected = sum(reference_weights[:, slot, None] * torch.stack(
            [experts[int(chosen[row, slot])](reference_tokens[row]) for row in range(TOKENS)])
            for slot in range(TOP_K))
        (expected * torch.arange(HIDDEN, dtype=torch.float64)).sum().backward()
        assert torch.allclose(out, expected, rtol=1e-12, atol=1e-12)
        assert torch.allclose(tokens.grad, reference_tokens.grad, rtol=1e-12, atol=1e-12)
        assert torch.allclose(weights.grad, reference_weights.grad, rtol=1e-12, atol=1e-12)
    except Exception as error:   # reported to the test in the parent
        failures.put(f"rank {rank}: {type(error).__name__}: {error}")
    finally:
        dist.destroy_process_group()


def test_a_rank_that_receives_no_token_still_joins_both_exchanges_backward():
    """Rank 0's experts are 0 and 1: every token on both ranks chooses them, so rank 1 receives nothing. It must
    still run the combine's and the dispatch's backward all-to-alls (rank 0 waits on them), and every gradient must
    equal one process's. (Before, rank 1's zero results carried no gradient: it skipped both and rank 0 hung.)"""
    chosen = [torch.tensor([[0, 1]] * TOKENS), torch.tensor([[1, 0]] * TOKENS)]
    context = mp.get_context("spawn")
    failures = context.Queue()
    with tempfile.TemporaryDirectory() as directory:
        store = os.path.join(directory, "store")
        processes = [context.Process(target=_rank, args=(rank, store, chosen, failures)) for rank in range(2)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=120)
        alive = [process for process in processes if process.is_alive()]
        for process in alive:
            process.kill()
    reported = [failures.get() for _ in range(failures.qsize())] if not failures.empty() else []
    assert not alive and not reported, reported
    assert all(process.exitcode == 0 for process in processes)
