"""The planner's analytic parameter counts (which drive memory planning) equal those of the torch modules the
executor really builds, layer by layer, for every preset."""

import pytest

from executor.model import layer_parameter_counts
from executor_plans import modern_kinds_spec
from planner.cost import layer_parameters
from planner.spec.presets import load_model_preset, model_preset_names


@pytest.mark.parametrize("preset", model_preset_names())
def test_analytic_layer_parameters_equal_the_built_modules(preset):
    spec = load_model_preset(preset)
    analytic = layer_parameters(spec)
    built = layer_parameter_counts(spec)
    assert len(analytic) == len(built) == spec.num_layers
    for index, (planned, real) in enumerate(zip(analytic, built)):
        assert planned == real, f"layer {index} ({spec.layers[index].kind})"


def test_modern_layer_kinds_build_with_the_analytic_parameter_counts():
    spec = modern_kinds_spec()
    assert layer_parameter_counts(spec) == layer_parameters(spec)
    tied = modern_kinds_spec(tie_embeddings=True)
    assert layer_parameter_counts(tied) == layer_parameters(tied)
