"""Named model specs shipped with the planner (``planner/presets/models/<name>.json``, our format).

The realistic presets are HuggingFace configs run through the importer (``planner.spec.build_presets``
regenerates them); ``tiny-llama`` and ``tiny-hybrid`` are small hand-written models for CPU runs and tests.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from planner.errors import SpecError
from planner.spec.model import ModelSpec, load_model_spec

MODEL_PRESET_DIR = Path(__file__).resolve().parent.parent / "presets" / "models"


def model_preset_names() -> list[str]:
    return sorted(path.stem for path in MODEL_PRESET_DIR.glob("*.json"))


@lru_cache(maxsize=None)
def load_model_preset(name: str) -> ModelSpec:
    known = model_preset_names()
    # Only listed names reach the file system: a name like '../x' must not read outside the preset folder.
    if name not in known:
        raise SpecError("preset", f"unknown model preset {name!r} (known: {', '.join(known)})")
    return load_model_spec(json.loads((MODEL_PRESET_DIR / f"{name}.json").read_text(encoding="utf-8")))
