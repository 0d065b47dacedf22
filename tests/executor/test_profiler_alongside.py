"""Profiles measured the way local ranks run: one profiler process per rank at once, combined layer by layer."""

from __future__ import annotations

from dataclasses import replace

import billiard
import pytest

from executor.measuring.profiler import fastest_of, measure_profile_alongside
from planner.spec.presets import load_model_preset


@pytest.fixture(scope="module")
def two_processes_profile():
    """tiny-llama profiled by two processes at once, one thread each."""
    return measure_profile_alongside(load_model_preset("tiny-llama"), processes=2, threads=1, repeats=1, warmup=0,
                                     timeout_s=240)


def test_every_process_profiles_every_layer_at_once(two_processes_profile):
    spec, profile = load_model_preset("tiny-llama"), two_processes_profile
    assert [layer.name for layer in profile.layers] == list(spec.layer_names())
    assert profile.device.endswith("2 processes at once") and "1 threads" in profile.device
    decoders = [layer for layer in profile.layers if layer.kind == "decoder"]
    assert all(layer.forward > 0 and layer.backward_input > 0 and layer.backward_weight > 0 for layer in decoders)


def test_without_the_split_the_whole_backward_is_timed_as_input_gradient():
    spec = load_model_preset("tiny-llama")
    profile = measure_profile_alongside(spec, processes=2, threads=1, split_backward=False, repeats=1, warmup=0,
                                        timeout_s=240)
    decoders = [layer for layer in profile.layers if layer.kind == "decoder"]
    # nothing was deferred, so W has no work (split, a decoder's W is a quarter of its I)
    assert all(layer.backward_input > 0 and layer.backward_weight == 0.0 for layer in decoders)


def test_a_process_slowed_down_throughout_does_not_set_the_profile(two_processes_profile):
    steady = two_processes_profile   # a measured profile, as one process's would be
    slowed = replace(steady, layers=tuple(replace(layer, forward=layer.forward * 3,
                                                  backward_input=layer.backward_input * 3,
                                                  backward_weight=layer.backward_weight * 3)
                                          for layer in steady.layers))
    # only one layer of the steady process was the slower one
    mixed = replace(steady, layers=(replace(steady.layers[0], forward=steady.layers[0].forward * 5),
                                    *steady.layers[1:]))
    combined = fastest_of([slowed, mixed])
    assert combined.layers[0].forward == slowed.layers[0].forward
    assert [layer.forward for layer in combined.layers[1:]] == [layer.forward for layer in steady.layers[1:]]
    assert [layer.backward_weight for layer in combined.layers] == [layer.backward_weight for layer in steady.layers]
    assert combined.device == f"{slowed.device}, 2 processes at once"


def _profile_in_a_pool_process():
    return measure_profile_alongside(load_model_preset("tiny-llama"), processes=2, threads=1, repeats=1, warmup=0,
                                     timeout_s=240).to_dict()


def test_a_celery_prefork_pool_process_measures_a_profile():
    with billiard.Pool(1) as pool:   # its processes are daemonic, as the runs worker's are
        profile = pool.apply(_profile_in_a_pool_process)
    assert profile["source"] == "measured" and len(profile["layers"]) == load_model_preset("tiny-llama").num_layers
