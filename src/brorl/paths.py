"""Where the project is: the folders the package reads beside its code (the config schema, the accelerate
configs). A ground-floor module: it imports nothing of the package, so any module may ask it."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = PROJECT_ROOT / "workflow" / "schemas" / "config.schema.yaml"
