"""Profiling a model's distinct layers only: one copy of each different layer is built and timed, and every
layer gets the times and memory of the copy it equals."""

from __future__ import annotations

import json
from dataclasses import replace
from unittest.mock import patch

from executor.measuring import profiler
from executor.cli import main
from executor.measuring.profiler import distinct_layers, measure_profile, measure_profile_alongside
from planner.profile import load_profile
from planner.spec.presets import load_model_preset

GEMMA = load_model_preset("gemma-2-9b")


def test_distinct_layers_keep_first_appearance_order_and_map_every_layer_to_its_copy():
    reduced, copy_of = distinct_layers(GEMMA)
    assert [layer.kind for layer in reduced.layers] == ["embedding", "decoder", "decoder", "head"]
    assert reduced.layers[1].mixer.window is not None and reduced.layers[2].mixer.window is None   # local, global
    assert len(copy_of) == GEMMA.num_layers and copy_of[0] == 0 and copy_of[-1] == 3
    assert all(reduced.layers[copy] == layer for copy, layer in zip(copy_of, GEMMA.layers))
    assert copy_of[1:-1] == [1, 2] * 21


def test_only_the_distinct_layers_are_built_and_identical_layers_share_their_measurements():
    spec = load_model_preset("tiny-llama")
    built = []
    real_build = profiler.build_layers

    def recording_build(spec_built, indices, **kwargs):
        built.append(spec_built.num_layers)
        return real_build(spec_built, indices, **kwargs)

    with patch.object(profiler, "build_layers", side_effect=recording_build):
        profile = measure_profile(spec, repeats=1, warmup=0, distinct=True)
    assert built == [3]                                           # embedding, one decoder, head
    assert [layer.name for layer in profile.layers] == spec.layer_names()
    decoders = profile.layers[1:-1]
    assert len(decoders) == 4 and all(replace(layer, name=decoders[0].name) == decoders[0] for layer in decoders)
    full = measure_profile(spec, repeats=1, warmup=0)
    for alone, whole in zip(profile.layers, full.layers):
        assert (alone.kind, alone.activation_bytes, alone.output_bytes, alone.param_bytes) == \
            (whole.kind, whole.activation_bytes, whole.output_bytes, whole.param_bytes)
        assert alone.forward > 0
    assert profile.flops_per_microbatch == full.flops_per_microbatch


def test_the_cli_profiles_distinct_layers_of_a_scaled_gemma(tmp_path):
    out = tmp_path / "gemma.json"
    assert main(["profile", "--model", "gemma-2-9b", "--scale", "--distinct-layers", "--repeats", "1",
                 "--warmup", "0", "--out", str(out)]) == 0
    profile = load_profile(json.loads(out.read_text()))
    assert profile.num_layers == GEMMA.num_layers
    local, global_ = profile.layers[1], profile.layers[2]
    assert profile.layers[3].forward == local.forward and profile.layers[4].forward == global_.forward


def test_profilers_alongside_time_the_distinct_layers_too():
    spec = load_model_preset("tiny-llama")
    profile = measure_profile_alongside(spec, processes=2, threads=1, repeats=1, warmup=0, distinct=True)
    decoders = profile.layers[1:-1]
    assert [layer.name for layer in profile.layers] == spec.layer_names()
    assert len({(layer.forward, layer.backward_input, layer.backward_weight) for layer in decoders}) == 1
