"""The paper's data blend: ProRL v1's training blend and the evaluation sets, as the papers describe them.

``paper_data_blend.yaml`` (next to this module) is the papers' account of their data -- sizes, which copy of each
set, how sure the ids are, what BroRL leaves unstated --, not what the pipeline fetches: that is
:mod:`brorl.data.catalog` (``tests/test_paper_benchmarks.py`` checks that both name the same repositories).
:func:`load_data_blend` reads and checks it, :func:`fetch_blend_entry` fetches one ``hf_dataset`` entry through
:mod:`brorl.data.hub`, :func:`write_blend_table` writes it as CSV and Markdown (the ``paper_data_blend`` rule).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from brorl.data.hub import FetchError, HubClient, fetch_dataset
from brorl.atomic import frame_to_csv, write_text
from brorl.profile import report

BLEND_FORMAT = "brorl.data_blend/1"

BLEND_ENTRY_FIELDS = (
    "name", "role", "domain", "source_kind", "repo_id", "repo_type", "revision", "allow_patterns",
    "size_paper", "size_source", "reward", "id_confidence", "brorl_unstated", "note",
)
_ROLES = {"train", "eval"}
_KINDS = {"hf_dataset", "python_package"}


def load_data_blend(path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Load and check the data-blend manifest (default: the copy shipped in the package).

    Every entry has all of :data:`BLEND_ENTRY_FIELDS` (values may be ``null`` where noted in the
    file); ``hf_dataset`` entries have a ``repo_id`` and ``repo_type: dataset``.
    """
    import yaml

    if path is None:
        text = resources.files("brorl.data").joinpath("paper_data_blend.yaml").read_text()
        where = "brorl/data/paper_data_blend.yaml"
    else:
        text = Path(path).read_text()
        where = str(path)
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or data.get("format") != BLEND_FORMAT:
        raise ValueError(f"{where}: not a {BLEND_FORMAT} file")
    errors = []
    names = set()
    for i, e in enumerate(data.get("entries") or []):
        tag = f"{where}: entry {i} ({e.get('name', '?') if isinstance(e, dict) else '?'})"
        if not isinstance(e, dict):
            errors.append(f"{tag}: not a mapping")
            continue
        missing = [k for k in BLEND_ENTRY_FIELDS if k not in e]
        if missing:
            errors.append(f"{tag}: missing {missing}")
            continue
        if e["name"] in names:
            errors.append(f"{tag}: duplicate name")
        names.add(e["name"])
        if e["role"] not in _ROLES:
            errors.append(f"{tag}: role must be one of {sorted(_ROLES)}")
        if e["source_kind"] not in _KINDS:
            errors.append(f"{tag}: source_kind must be one of {sorted(_KINDS)}")
        if e["source_kind"] == "hf_dataset":
            if not isinstance(e["repo_id"], str) or e["repo_type"] != "dataset":
                errors.append(f"{tag}: hf_dataset needs repo_id and repo_type: dataset")
        if e["size_paper"] is not None and not isinstance(e["size_paper"], int):
            errors.append(f"{tag}: size_paper must be an integer or null")
        if not isinstance(e["brorl_unstated"], list) or not e["brorl_unstated"]:
            errors.append(f"{tag}: brorl_unstated must be a non-empty list")
    if not names:
        errors.append(f"{where}: no entries")
    if errors:
        raise ValueError("\n".join(errors))
    return data


def blend_entry(name: str, blend: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One entry of the data blend by name."""
    blend = blend if blend is not None else load_data_blend()
    for e in blend["entries"]:
        if e["name"] == name:
            return dict(e)
    raise KeyError(f"no data-blend entry {name!r}; known: {[e['name'] for e in blend['entries']]}")


def fetch_blend_entry(name: str, dest_root: str | os.PathLike[str] = "resources/data", *,
                      source: str | os.PathLike[str] | HubClient | None = None,
                      blend: Mapping[str, Any] | None = None, refresh: bool = False) -> dict[str, Any]:
    """Fetch the ``hf_dataset`` entry ``name`` into ``<dest_root>/<name>/`` (revision ``null`` -> main;
    the manifest then pins the commit actually fetched)."""
    e = blend_entry(name, blend)
    if e["source_kind"] != "hf_dataset":
        raise FetchError(f"data-blend entry {name!r} is a {e['source_kind']} ({e['note'] or ''}); nothing to fetch")
    return fetch_dataset(e["repo_id"], e["revision"], Path(dest_root) / e["name"], source=source,
                         allow_patterns=e["allow_patterns"], refresh=refresh)


TABLE_COLUMNS = ("name", "role", "domain", "source_kind", "repo_id", "revision", "size_paper", "id_confidence",
                 "brorl_unstated", "note")


def write_blend_table(csv: str | os.PathLike[str], md: str | os.PathLike[str],
                      blend: Mapping[str, Any] | None = None):
    """The blend as a table: ``csv`` (one row per entry, :data:`TABLE_COLUMNS`) and ``md`` (the caveat, then the
    same table in Markdown). Returns the table (a pandas DataFrame)."""
    import pandas as pd

    blend = blend if blend is not None else load_data_blend()
    cols = list(TABLE_COLUMNS)
    frame = pd.DataFrame([{c: e.get(c) for c in cols} for e in blend["entries"]])
    frame["revision"] = frame["revision"].fillna("(not pinned: main at fetch time)")
    frame["brorl_unstated"] = frame["brorl_unstated"].map(lambda v: "; ".join(v) if isinstance(v, list) else (v or ""))
    Path(csv).parent.mkdir(parents=True, exist_ok=True)
    frame_to_csv(frame, csv, index=False)
    lines = ["# The paper's data blend (manifest)", "", blend["caveat"], "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join("" if pd.isna(row[c]) else str(row[c]).replace("|", "/") for c in cols) + " |")
    write_text(md, report("\n".join(lines) + "\n"))
    return frame


def run_data_blend(csv: str | os.PathLike[str], md: str | os.PathLike[str]):
    """``brorl data-blend``: :func:`write_blend_table`, its counts and files logged to the rule's MLflow run."""
    import mlflow

    frame = write_blend_table(csv, md)
    train = frame[frame["role"] == "train"]
    mlflow.log_metrics({"train_entries": len(train), "train_size_paper": float(train["size_paper"].sum()),
                        "eval_entries": int((frame["role"] == "eval").sum())})
    mlflow.log_artifact(csv)
    mlflow.log_artifact(md)
    print(f"[data-blend] wrote {csv} ({len(frame)} entries)")
    return frame
