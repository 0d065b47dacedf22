"""Small heterogeneous profiles for the search tests (fast to schedule, shaped like the real models)."""

from planner.cluster import load_cluster_preset
from planner.profile import LayerProfile, Profile

MB = 1 << 20


def layer(name: str, kind: str, forward: float, *, activation_mb: int = 64, params_mb: int = 100,
          weight_share: float = 0.5) -> LayerProfile:
    backward = 2 * forward
    return LayerProfile(name=name, kind=kind, forward=forward, backward_input=backward * (1 - weight_share),
                        backward_weight=backward * weight_share, activation_bytes=activation_mb * MB,
                        output_bytes=8 * MB, param_bytes=params_mb * MB)


def big_head_profile(num_decoders: int = 10, head_forward: float = 4.0) -> Profile:
    """Gemma-like: a cheap embedding, uniform decoders and a head several decoders heavy."""
    layers = [layer("embed", "embedding", 0.05, params_mb=400)]
    layers += [layer(f"layers.{index}", "decoder", 1.0) for index in range(num_decoders)]
    layers.append(layer("head", "head", head_forward, activation_mb=256, params_mb=400))
    return Profile(model="big-head", device="test", layers=tuple(layers), seq_len=1024)


def hybrid_profile() -> Profile:
    """Nemotron-like: alternating cheap mixers and heavier MLPs, a few attention layers, a head."""
    layers = [layer("embed", "embedding", 0.05)]
    for index in range(12):
        if index % 4 == 3:
            layers.append(layer(f"layers.{index}", "decoder", 1.6, activation_mb=96))
        elif index % 2:
            layers.append(layer(f"layers.{index}", "mlp", 1.2, weight_share=0.6))
        else:
            layers.append(layer(f"layers.{index}", "decoder", 0.6, weight_share=0.3))
    layers.append(layer("head", "head", 2.5, activation_mb=192))
    return Profile(model="hybrid", device="test", layers=tuple(layers), seq_len=1024)


def small_cluster():
    return load_cluster_preset("h100-sxm-1x8")
