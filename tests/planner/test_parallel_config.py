"""The parallel configuration, Megatron's rank order on the cluster, and the v2 plan format."""

import itertools
import json

import pytest

from planner.cluster import load_cluster_preset
from planner.errors import SpecError
from planner.parallel.config import ParallelConfig, load_parallel
from planner.parallel.mapping import RankMapping
from planner.plan import load_plan

V1_PLAN = {"format": "adaptis.plan/v1", "strategy": "1f1b", "num_devices": 2, "num_microbatches": 1,
           "stages": [{"layers": [0], "device": 0}, {"layers": [1], "device": 1}],
           "actions": [["0F0", "0B0"], ["1F0", "1B0"]]}


def test_ranks_follow_megatrons_order_tp_fastest_then_cp_dp_pp():
    config = ParallelConfig(tp=2, cp=2, pp=3, dp=2, ep=2)
    mapping = RankMapping(config, load_cluster_preset("h100-sxm-3x8"))
    # Megatron's generator: nested loops with pp outermost and tp innermost number the ranks.
    expected = [dict(tp=t, cp=c, dp=d, pp=p)
                for p, d, c, t in itertools.product(range(3), range(2), range(2), range(2))]
    for rank, coordinate in enumerate(expected):
        got = mapping.coordinate(rank)
        assert {key: got[key] for key in ("tp", "cp", "dp", "pp")} == coordinate
        assert mapping.rank_of(**coordinate) == rank
    # EP re-slices cp x dp: the ep consecutive (cp, dp) positions of a stage
    assert [mapping.coordinate(rank)["ep"] for rank in (0, 2, 4, 6)] == [0, 1, 0, 1]


def test_tensor_groups_stay_in_a_node_and_data_groups_cross_nodes_on_the_nics():
    cluster = load_cluster_preset("h100-sxm-16x8")
    mapping = RankMapping(ParallelConfig(tp=8, pp=4, dp=4), cluster)
    assert not mapping.span("tp").crosses_domains
    assert mapping.span("tp").ring_bandwidth_gb_s() == cluster.intra_node.bandwidth_gb_s
    dp = mapping.span("dp")
    assert dp.crosses_domains and dp.per_domain == 1
    assert dp.ring_bandwidth_gb_s() == cluster.inter_node.bandwidth_gb_s
    # tp = 2: four members of a DP group share each node, so four NICs carry the ring
    dp_small_tp = RankMapping(ParallelConfig(tp=2, pp=4, dp=16), cluster).span("dp")
    assert dp_small_tp.per_domain == 4
    assert dp_small_tp.ring_bandwidth_gb_s() == 4 * cluster.inter_node.bandwidth_gb_s


def test_pipeline_neighbours_share_a_node_only_when_a_stage_fits_in_it():
    cluster = load_cluster_preset("h100-sxm-2x8")
    inside = RankMapping(ParallelConfig(tp=2, pp=8), cluster).pipeline_cluster()
    assert inside.devices_per_node == 4   # tp·cp·dp = 2: four pipeline ranks per node
    assert inside.link(0, 1) == cluster.intra_node and inside.link(3, 4) == cluster.inter_node
    across = RankMapping(ParallelConfig(tp=8, pp=2), cluster).pipeline_cluster()
    assert across.link(0, 1) == cluster.inter_node


def test_a_configuration_larger_than_the_cluster_is_refused():
    with pytest.raises(SpecError) as error:
        RankMapping(ParallelConfig(tp=8, dp=4), load_cluster_preset("h100-sxm-2x8"))
    assert error.value.field == "gpus"


@pytest.mark.parametrize("doc, field", [
    ({"tp": 0}, "parallel.tp"),
    ({"dp": 4, "ep": 3}, "parallel.ep"),
    ({"recompute": "some"}, "parallel.recompute"),
    ({"zero": 1}, "parallel.zero"),
])
def test_bad_parallel_objects_name_the_field(doc, field):
    with pytest.raises(SpecError) as error:
        load_parallel(doc)
    assert error.value.field == field


def test_v1_plans_still_load_and_carry_no_parallel_configuration():
    plan = load_plan(V1_PLAN)
    assert plan.parallel is None and plan.to_dict()["format"] == "adaptis.plan/v1"


def test_a_v2_plan_round_trips_with_its_parallel_object():
    doc = dict(V1_PLAN, format="adaptis.plan/v2",
               parallel={"tp": 8, "cp": 1, "pp": 2, "dp": 4, "ep": 1, "etp": 1, "vpp": 1, "microbatch_size": 1,
                         "num_microbatches": 1, "recompute": ["full", "selective"], "sharding": "full",
                         "precision": "fp8"})
    plan = load_plan(json.loads(json.dumps(doc)))
    assert plan.parallel.tp == 8 and plan.parallel.recompute_of(1) == "selective"
    assert plan.to_dict()["parallel"] == doc["parallel"]
    assert plan.to_dict()["format"] == "adaptis.plan/v2"


@pytest.mark.parametrize("legacy, sharding", [(True, "optimizer"), (False, "none"), (None, "optimizer")])
def test_documents_without_the_new_knobs_still_load_with_what_they_meant(legacy, sharding):
    parallel = {"tp": 2, "pp": 2, "dp": 2, "num_microbatches": 1}
    if legacy is not None:
        parallel["distributed_optimizer"] = legacy
    plan = load_plan(dict(V1_PLAN, format="adaptis.plan/v2", parallel=parallel))
    assert (plan.parallel.sharding, plan.parallel.precision, plan.parallel.etp) == (sharding, "bf16", 2)
    assert plan.parallel.distributed_optimizer is (sharding != "none")
    assert plan.to_dict()["parallel"]["vpp"] == 1   # V1_PLAN's one stage on each of its two devices


@pytest.mark.parametrize("parallel, field", [
    ({"distributed_optimizer": False, "sharding": "full"}, "parallel.distributed_optimizer"),
    ({"sharding": "zero3"}, "parallel.sharding"),
    ({"precision": "fp4"}, "parallel.precision"),
    ({"vpp": 2}, "parallel.vpp"),
    ({"dp": 2, "ep": 4, "etp": 2}, "parallel.etp"),
])
def test_bad_knobs_name_their_field(parallel, field):
    with pytest.raises(SpecError) as error:
        load_plan(dict(V1_PLAN, format="adaptis.plan/v2", parallel={"pp": 2, "num_microbatches": 1, **parallel}))
    assert error.value.field == field


@pytest.mark.parametrize("change, field", [
    ({"parallel": None}, "parallel"),
    ({"parallel": {"pp": 3, "num_microbatches": 1}}, "parallel.pp"),
    ({"parallel": {"pp": 2, "num_microbatches": 4}}, "parallel.num_microbatches"),
    ({"parallel": {"pp": 2, "num_microbatches": 1, "recompute": ["full"]}}, "parallel.recompute"),
])
def test_inconsistent_v2_plans_are_refused(change, field):
    doc = dict(V1_PLAN, format="adaptis.plan/v2", **change)
    if doc["parallel"] is None:
        del doc["parallel"]
    with pytest.raises(SpecError) as error:
        load_plan(doc)
    assert error.value.field == field
