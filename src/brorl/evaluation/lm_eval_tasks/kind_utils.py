"""lm-eval hooks of the ``brorl_paper_*`` tasks (the data catalog's benchmarks, any kind): the document loader and
one ``process_results`` per kind.

lm-eval imports this file by path (``!function kind_utils.<name>`` in the task YAMLs next to it), so it must
stay importable on its own; it only needs the installed ``brorl`` package (and, for IFEval, lm-eval's IFEval
dependencies). :func:`brorl.evaluation.catalog_tasks.render_tasks` copies it byte for byte next to the rendered
YAMLs. Nothing here depends on a kind: what a kind scores lives in its module, ``brorl.kinds.<kind>``.

Loader
    :func:`load_records` (``custom_dataset``): the benchmark's JSONL as written by
    :func:`brorl.data.benchmarks.prepare_benchmark`, read as is. The file is ``data_file`` (rendered
    tasks) or ``<data_dir>/<benchmark>/test.jsonl`` (portable tasks, ``--metadata '{"data_dir": ...}'``).

``process_<kind>`` (``process_results``; one for every module of :mod:`brorl.kinds`)
    The task keeps all k repeats (``take_first_k``), lm-eval passes ``[[c_1, ..., c_k]]``; the kind's ``judge``
    gives the 0/1 value of each completion and its own per-document metrics, and the document's ``mean_at_k`` and
    unbiased ``pass_at_<j>`` are computed exactly as :func:`brorl.evaluation.metrics.sample_metrics` does (what
    :func:`brorl.evaluation.runner.collect_results` recomputes from the kind's ``score`` and checks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from brorl import kinds
from brorl.data.benchmarks import read_records
from brorl.evaluation.metrics import completions_of, doc_metrics

SPLIT_KEY = "test"
DATA_FILE_NAME = "test.jsonl"
PROCESS_PREFIX = "process_"


def data_file_of(data_dir: str | Path, benchmark: str) -> Path:
    """Where a benchmark's JSONL lives under a data folder: ``<data_dir>/<benchmark>/test.jsonl``."""
    return Path(data_dir) / benchmark / DATA_FILE_NAME


def load_records(data_file: str | None = None, data_dir: str | None = None, benchmark: str | None = None,
                 **_ignored):
    """``DatasetDict({"test": <records of the benchmark's JSONL>})`` for lm-eval's ``custom_dataset``."""
    import datasets

    if data_file is None:
        if data_dir is None or benchmark is None:
            raise ValueError(
                "brorl_paper tasks need their data: pass --metadata '{\"data_dir\": \"<folder>\"}' (the folder "
                "holding <benchmark>/test.jsonl, made by brorl.data.benchmarks.prepare_benchmark), or "
                "render the tasks with brorl.evaluation.catalog_tasks.render_tasks(...), which writes an "
                "absolute data_file into each YAML")
        data_file = data_file_of(data_dir, benchmark)
    path = Path(data_file).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"brorl_paper task data not found: {path} (run prepare_benchmark first)")
    records = read_records(path)
    if not records:
        raise ValueError(f"no records in {path}")
    return datasets.DatasetDict({SPLIT_KEY: datasets.Dataset.from_list(records)})


def process_results(kind: str, doc, results) -> dict:
    """One document's metrics under ``kind``: ``mean_at_k`` and ``pass_at_<j>`` of the kind's 0/1 values, then the
    kind's own (``mean_reward``, ``mean_test_fraction``, IFEval's loose and instruction-level accuracies)."""
    correct, extra = kinds.kind(kind).judge(doc, completions_of(results))
    out: dict = doc_metrics(correct)
    out.update(extra)
    return out


def __getattr__(name: str):
    """``process_<kind>``: :func:`process_results` of that kind (what a task YAML names)."""
    if name.startswith(PROCESS_PREFIX) and name[len(PROCESS_PREFIX):] in kinds.names():
        kind = name[len(PROCESS_PREFIX):]

        def process(doc, results) -> dict:
            return process_results(kind, doc, results)

        process.__name__ = name
        return process
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def agg_inst_level_acc(items: Sequence[Sequence[bool]]) -> float:
    """Micro average over every instruction of every sample of every document (lm-eval's IFEval rule)."""
    flat = [x for sub in items for x in sub]
    return float(sum(flat) / len(flat)) if flat else 0.0
