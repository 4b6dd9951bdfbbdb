"""What every kind is made of (:class:`Kind`) and what their converters and scorers share.

A kind's converter turns one row of a hub snapshot into one record (``convert(spec, file, row index, row, source)``;
:func:`brorl.data.benchmarks.convert_rows` calls it); it raises :class:`RowError` for a row it cannot use and
:class:`RowSkipped` for a row that may be dropped and counted (a maths row without a gold answer in a training
source, a code row without usable tests). Its scorer gives one 0/1 or [0, 1] value per completion (the registry's
``score``, :mod:`brorl.evaluation.benchmarks`), its ``judge`` the 0/1 values the lm-eval task's pass@k is computed
on plus the kind's own per-document metrics, its ``rewards`` the training reward of a batch of records.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

logger = logging.getLogger(__name__)

THINK_END = "</think>"


class RowError(ValueError):
    """A row the converter cannot use (the message names the benchmark, the file and the row)."""


class RowSkipped(Exception):
    """A row without what its kind needs (``reason``: ``no_gold`` or ``no_tests``): dropped and counted where the
    catalog row allows it (``skip_unusable_gold``; code rows always)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Kind:
    """One kind of problem: how its rows are converted, its completions scored and its records rewarded."""

    name: str
    description: str
    """One line for the benchmark registry (``Benchmark.description``)."""
    instruction: str
    """The instruction after the problem in its prompts (part of a converted file's cache request)."""
    score: Callable[[dict, list], list[float]]
    """One value per completion (0/1, or [0, 1]); the registry's scorer, which the evaluation runner re-scores with."""
    judge: Callable[[dict, list], tuple[list[int], dict]]
    """``(0/1 per completion, the kind's extra per-document metrics)``: the lm-eval task's ``process_results``."""
    convert: Callable[..., dict] | None = None
    """``(spec, rel, i, row, source) -> record`` for a hub snapshot's row; None for a generated kind."""
    generate: Callable[[Mapping], tuple[list[dict], dict]] | None = None
    """A generated kind's records and report from its generation request (no snapshot)."""
    generation_request: Callable[..., dict] | None = None
    """A generated kind's request (part of the cache request) from the converter's generation settings."""
    rewards: Callable[[Sequence[Mapping], Sequence[str]], tuple[list[float], list[bool]]] | None = None
    """The training reward of ``(records, completions)`` and a timed-out flag per completion; None: not a training
    kind."""
    extra_metrics: tuple[tuple[str, str], ...] = ()
    """The metrics ``judge`` adds, with their aggregation over documents (``mean``, or ``inst``: micro average)."""
    category_field: str | None = None
    """The record field the per-category metrics group by (None: the benchmark is one category)."""
    prompt_extra: Mapping[str, str] = field(default_factory=dict)
    """More prompt text of the cache request (e.g. the call-based code instruction)."""
    request_extra: Mapping[str, Any] = field(default_factory=dict)
    """More settings of the cache request (e.g. GPQA's shuffle seed)."""
    training_renames: Mapping[str, str] = field(default_factory=dict)
    """Record fields renamed in a training record (the training record's ``task`` is its source)."""
    code: tuple = ()
    """Modules / functions outside the kind's module whose source enters the lm-eval task hash."""


# ------------------------------------------------------------------------------------------------ row helpers

def pick(row: Mapping, candidates: Sequence[str], what: str, where: str, required: bool = True):
    """The value of the first of ``candidates`` present in ``row``."""
    for c in candidates:
        if c in row:
            return row[c]
    if required:
        raise RowError(f"{where}: no column for {what} among {list(candidates)}; the row has {sorted(row)}")
    return None


def text(value) -> str:
    if value is None:
        return ""
    return str(value).strip()


def gold_text(value) -> str:
    """A gold answer as text: a one-element list is its element, a longer list is joined with ", ", an
    integral float is written as an integer (AMC stores 142.0), anything else is ``str`` stripped."""
    if isinstance(value, (list, tuple)):
        parts = [gold_text(v) for v in value if v is not None]
        return ", ".join(p for p in parts if p)
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return text(value)


def usable_gold(value) -> bool:
    """Whether a gold answer can be scored: not missing, empty, blank, NaN or infinite (DeepScaleR has ``''``
    answers); a list, when each of its elements is."""
    if isinstance(value, (list, tuple)):
        return bool(value) and all(usable_gold(v) for v in value)
    if isinstance(value, float) and not math.isfinite(value):
        return False
    if not isinstance(value, (str, int, float)):  # None, a mapping: no answer
        return False
    return gold_text(value) != ""


def record_id(spec, rel: str, i: int, row: Mapping) -> str:
    """The row's id column, else ``<file stem>-<row>``."""
    value = pick(row, spec.fields.get("id", ()), "id", f"{spec.name} {rel}#{i}", required=False)
    if value is None or text(value) == "":
        return f"{Path(rel).name.split('.')[0]}-{i}"
    return text(value)


# -------------------------------------------------------------------------------------------- scoring helpers

EVAL_RETRY_TIMEOUT = 60.0
"""Seconds per attempt for an answer whose verification ran out of the training deadline: evaluation is off the
training's critical path, so a right closed form that needs seconds of sympy on a loaded machine (the Basel sum,
an integral) is verified again with this budget before it counts as a timeout."""


def binarize(scores) -> list[int]:
    return [int(float(s) >= 0.5) for s in scores]


def doc_id(doc) -> Any:
    return doc.get("id") if isinstance(doc, dict) else None


def safe(scorer, doc, completions) -> list[float]:
    """``scorer(doc, completions)``, all zeros (logged) when it raises; a sandbox that cannot run still raises."""
    from brorl.sandbox import SandboxUnavailable

    try:
        return [float(x) for x in scorer(doc, completions)]
    except SandboxUnavailable:  # the machine cannot score code safely: stop, do not report zeros
        raise
    except Exception:  # noqa: BLE001 -- a scorer bug must not take down a whole evaluation
        logger.warning("scoring failed for doc %r; all its completions score 0", doc_id(doc), exc_info=True)
        return [0.0] * len(completions)


def with_eval_retry(score, completions: list, golds: list, what: str) -> list[float]:
    """``score(completions, golds)`` on the pool; the answers that timed out are scored again with
    :data:`EVAL_RETRY_TIMEOUT`, and those that time out again are logged as timeouts (never a silent 0)."""
    from brorl.rewards.adapters import report_timeouts

    timeouts: list[bool] = []
    out = score(completions, golds, timeouts=timeouts)
    late = [i for i, t in enumerate(timeouts) if t]
    if late:
        again: list[bool] = []
        for i, v in zip(late, score([completions[i] for i in late], [golds[i] for i in late], timeouts=again,
                                    timeout=EVAL_RETRY_TIMEOUT)):
            out[i] = v
        report_timeouts(again, what)
    return out


def answer_part(text: str) -> str:
    """The text after the last ``</think>`` when there is one, else the whole text."""
    i = text.rfind(THINK_END)
    return text[i + len(THINK_END):] if i >= 0 else text


def binary_judge(score):
    """The judge of a kind scored 0/1 (or binarised at 0.5) with no extra metrics."""
    def judge(doc, completions) -> tuple[list[int], dict]:
        return binarize(safe(score, doc, completions)), {}

    return judge


def clip01(values) -> list[float]:
    """Rewards in [0, 1] (NaN -> 0)."""
    out = []
    for v in values:
        v = float(v)
        out.append(min(1.0, max(0.0, v)) if v == v else 0.0)
    return out
