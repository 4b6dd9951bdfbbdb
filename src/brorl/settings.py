"""One way to build the frozen settings dataclasses (simulation, tasks, model, SFT, RL) from config."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Mapping


def settings_kwargs(cls, d: Mapping[str, Any] | None, what: str) -> dict[str, Any]:
    """Keyword arguments for ``cls`` from a config mapping.

    Unknown keys raise ``ValueError("unknown <what> settings: [...]")``, so a typo never silently falls back
    to a default; YAML lists become tuples for the fields declared as tuples.
    """
    d = dict(d or {})
    declared = {f.name: str(f.type) for f in fields(cls)}
    unknown = set(d) - set(declared)
    if unknown:
        raise ValueError(f"unknown {what} settings: {sorted(unknown)}")
    for key, value in d.items():
        if isinstance(value, list) and declared[key].startswith("tuple"):
            d[key] = tuple(value)
    return d
