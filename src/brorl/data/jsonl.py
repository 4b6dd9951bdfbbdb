"""Reading JSON-lines files strictly: a bad row is an error that names the file and the line.

Every JSON-lines reader of the package goes through :func:`read_rows` (a file's rows, each a JSON object) or
:func:`read_records` (rows the pipeline wrote itself: each also carries a usable ``answer``). Python's ``json``
alone says "Expecting value: line 1 column 1 (char 0)" without the file or the line, accepts the non-standard
``NaN`` / ``Infinity`` constants, and returns a list or a number as happily as an object.

Where a *source* is known to hold unusable rows (DeepScaleR has rows without a gold answer), its converter counts
and skips them (:func:`brorl.data.benchmarks.convert_rows`); the files the pipeline writes never hold one, so a
reader refuses them.
"""

from __future__ import annotations

import json
import math
import os

__all__ = ["RecordError", "read_rows", "read_records", "read_split", "check_answer", "bad_answer", "refuse_non_finite"]


class RecordError(ValueError):
    """A JSON-lines file holds a row that cannot be used (malformed, not an object, no usable answer)."""


def refuse_non_finite(name: str):
    """``parse_constant`` for ``json.loads``: refuse ``NaN``, ``Infinity`` and ``-Infinity``."""
    raise ValueError(f"{name} is not JSON (a non-finite number)")


def read_rows(path: str | os.PathLike[str]) -> list[dict]:
    """The rows of a source's JSON-lines file, each a JSON object; blank lines are skipped.

    Raises :class:`RecordError` naming ``path:line`` for a line that is not JSON (with ``json``'s column) or whose
    value is not an object (``[1, 2, 3]``, ``"x"``, ``3``). ``NaN`` / ``Infinity`` are read as floats here: a
    source's values are judged by its converter (a training source counts and skips a row whose gold answer is
    NaN, a benchmark refuses it, naming the row)."""
    return [row for _, row in _numbered_rows(path, non_finite=True)]


def bad_answer(value) -> str | None:
    """Why ``value`` is not a usable answer (``"missing"``, ``"null"``, ``"not finite"``, ``"a list"``...), or
    ``None`` when it is one. An empty string is an answer: IFEval and code records carry ``""``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return "not finite"
    if isinstance(value, (str, int, float)):
        return None
    return f"a {type(value).__name__}, not text or a number"


def check_answer(row: dict, where: str) -> None:
    """Raise :class:`RecordError` naming ``where`` when ``row`` has no usable ``answer``."""
    if "answer" not in row:
        raise RecordError(f"{where}: the record has no 'answer' (keys: {sorted(row)[:12]})")
    why = bad_answer(row["answer"])
    if why:
        raise RecordError(f"{where}: the record's 'answer' is {why} ({row['answer']!r})")


def read_records(path: str | os.PathLike[str]) -> list[dict]:
    """The records of a JSON-lines file the pipeline wrote (tasks, benchmark and training data): :func:`read_rows`,
    and each must carry an ``answer`` that is text or a finite number, and no line may hold ``NaN`` / ``Infinity``
    (:class:`RecordError` naming the line)."""
    rows = []
    for lineno, row in _numbered_rows(path, non_finite=False):
        check_answer(row, f"{path}:{lineno}")
        rows.append(row)
    return rows


def read_split(data_dir: str | os.PathLike[str], split: str, names=None) -> list[dict]:
    """Every record of ``<data_dir>/<name>/<split>.jsonl`` (:func:`read_records`), names in the given order (default:
    every folder with the split): a tiny-task or a training-source folder alike."""
    from pathlib import Path

    data_dir = Path(data_dir)
    if names is None:
        names = sorted(p.name for p in data_dir.iterdir() if (p / f"{split}.jsonl").exists())
    return [r for name in names for r in read_records(data_dir / name / f"{split}.jsonl")]


def _numbered_rows(path: str | os.PathLike[str], non_finite: bool):
    constant = None if non_finite else refuse_non_finite
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line, parse_constant=constant)
            except json.JSONDecodeError as exc:
                raise RecordError(f"{path}:{lineno}: not JSON: {exc.msg} (column {exc.colno})") from None
            except ValueError as exc:
                raise RecordError(f"{path}:{lineno}: {exc}") from None
            if not isinstance(row, dict):
                raise RecordError(f"{path}:{lineno}: a row must be a JSON object, not {type(row).__name__} "
                                  f"({line.strip()[:60]})")
            yield lineno, row
