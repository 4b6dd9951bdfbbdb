"""The paper's numbers (``paper_reference.yaml``, transcribed from BroRL Tables 1-5, the t-test and Figures)."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import yaml

REFERENCE_FILE = "paper_reference.yaml"


@lru_cache(maxsize=1)
def _load() -> dict:
    return yaml.safe_load(resources.files("brorl.tables").joinpath(REFERENCE_FILE).read_text())


def load_reference() -> dict:
    """The reference as a dict: ``table1`` ... ``table5`` (``rows`` with ``source`` per row), ``ttest``,
    ``figure1``, ``figure4`` and ``released_model`` (secondary)."""
    import copy

    return copy.deepcopy(_load())


def paper_row(table: str, row: str) -> dict:
    """One row of a paper table by its ``row`` label (``paper_row("table3", "BroRL +191")``)."""
    for r in _load()[table]["rows"]:
        if r["row"] == row:
            return dict(r)
    raise KeyError(f"{table} has no row {row!r}")
