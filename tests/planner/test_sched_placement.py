"""Placements: loop, V-shape and a given stage→device map."""

import pytest

from planner.errors import SpecError
from planner.placement import explicit_placement, loop_placement, placement_shape, v_shape_placement


def test_loop_placement_puts_stage_k_on_device_k_mod_p():
    assert loop_placement(8, 4) == (0, 1, 2, 3, 0, 1, 2, 3)
    assert loop_placement(3, 3) == (0, 1, 2)


def test_v_shape_goes_down_and_comes_back():
    assert v_shape_placement(4) == (0, 1, 2, 3, 3, 2, 1, 0)
    assert v_shape_placement(3, chunks=3) == (0, 1, 2, 2, 1, 0, 0, 1, 2)


def test_v_shape_matches_torch_generate_stage_to_rank_mapping():
    utils = pytest.importorskip("torch.distributed.pipelining._utils")
    for p, chunks in [(4, 2), (2, 4), (3, 3)]:
        mapping = utils.generate_stage_to_rank_mapping(p, p * chunks, style="v")
        assert v_shape_placement(p, chunks) == tuple(mapping[stage] for stage in range(p * chunks))


def test_explicit_placement_accepts_any_map_that_uses_every_device():
    assert explicit_placement([0, 0, 1, 2, 1], 3) == (0, 0, 1, 2, 1)


@pytest.mark.parametrize("stage_devices, field", [
    ([0, 3], "stage_devices[1]"),
    ([0, -1], "stage_devices[1]"),
    ([0, 0], "stage_devices"),
    ([], "stage_devices"),
])
def test_explicit_placement_rejects_bad_maps_naming_the_field(stage_devices, field):
    with pytest.raises(SpecError) as error:
        explicit_placement(stage_devices, 2)
    assert error.value.field == field


def test_placement_shape_names_the_known_shapes():
    assert placement_shape(loop_placement(8, 4), 4) == "loop"
    assert placement_shape(v_shape_placement(4), 4) == "v-shape"
    assert placement_shape((0, 0, 1, 1), 2) == "custom"
