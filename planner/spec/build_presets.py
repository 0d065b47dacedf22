"""Regenerate the realistic model presets from the HuggingFace configs kept as test fixtures.

    python -m planner.spec.build_presets tests/planner/fixtures/hf

Each preset is ``import_hf_config`` of its fixture at the default 4096-token sequence and micro-batch 1;
a test checks the shipped files still equal that output, so the presets cannot drift from the importer.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from planner.spec.hf import import_hf_config
from planner.spec.model import ModelSpec
from planner.spec.presets import MODEL_PRESET_DIR

# preset name -> the HuggingFace repository whose config.json the fixture of the same name copies
HF_PRESET_REPOS = {
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B",
    "gemma-2-9b": "google/gemma-2-9b",
    "gemma-3-27b": "google/gemma-3-27b-it",
    "deepseek-v2-lite": "deepseek-ai/DeepSeek-V2-Lite",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "nemotron-h-8b": "nvidia/Nemotron-H-8B-Base-8K",
    "qwen3-next-80b-a3b": "Qwen/Qwen3-Next-80B-A3B-Instruct",
    "minimax-text-01": "MiniMaxAI/MiniMax-Text-01",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "phi-3.5-moe": "microsoft/Phi-3.5-MoE-instruct",
    "gpt-oss-20b": "openai/gpt-oss-20b",
    "glm-4.5-air": "zai-org/GLM-4.5-Air",
    "falcon-mamba-7b": "tiiuae/falcon-mamba-7b",
    "jamba-v0.1": "ai21labs/Jamba-v0.1",
    "granite-4.0-h-small": "ibm-granite/granite-4.0-h-small",
    "gpt2": "openai-community/gpt2",
    # rebuilt from configs quoted in public code (tests/planner/test_hf_counts.py's docstring): Scout's text model in
    # the text-only form its derivatives ship, and Qwen3.5-35B-A3B's text_config
    "llama-4-scout-17b-16e-text": "meta-llama/Llama-4-Scout-17B-16E",
    "qwen3.5-35b-a3b": "Qwen/Qwen3.5-35B-A3B",
}


def build_hf_preset(name: str, fixture_dir: Path) -> ModelSpec:
    config = json.loads((fixture_dir / f"{name}.json").read_text(encoding="utf-8"))
    return import_hf_config(config, name=name, source=f"huggingface:{HF_PRESET_REPOS[name]}/config.json")


def write_hf_presets(fixture_dir: Path, preset_dir: Path = MODEL_PRESET_DIR) -> list[Path]:
    written = []
    for name in HF_PRESET_REPOS:
        path = preset_dir / f"{name}.json"
        path.write_text(json.dumps(build_hf_preset(name, fixture_dir).to_dict(), indent=2) + "\n", encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for path in write_hf_presets(Path(argv[0])):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
