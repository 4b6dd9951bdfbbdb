"""Sampling metrics of the paper's evaluation protocol (BroRL §5; ProRL's pass@k view).

- ``mean@k``: pass@1 averaged over the k samples of each problem, then over problems (the paper's "pass@1"
  with 16 samples at temperature 0.6).
- unbiased ``pass@k`` (Chen et al. 2021, Codex): for a problem with n samples of which c are correct,
  pass@k = 1 - C(n - c, k) / C(n, k), averaged over problems; defined for k <= n.

Values are fractions in [0, 1]; tables multiply by 100.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem: 1 - C(n-c, k) / C(n, k), as a numerically stable product."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def powers_of_two(n: int) -> list[int]:
    """1, 2, 4, ... up to n (the k of the pass@k curves)."""
    ks, k = [], 1
    while k <= n:
        ks.append(k)
        k *= 2
    return ks


def metric_name(k: int) -> str:
    """MLflow-safe metric name of pass@k (``pass_at_4``)."""
    return f"pass_at_{k}"


def sample_metrics(correct: Sequence[Iterable[float]], ks: Sequence[int] | None = None) -> dict[str, float]:
    """``{"mean_at_k": ..., "pass_at_1": ..., "pass_at_2": ..., "n_problems": P, "n_samples": k}`` from one 0/1
    (or [0, 1] score) list per problem. Every problem must have the same number of samples n; ``ks`` defaults
    to the powers of two up to n. A score counts as correct when it is >= 0.5 for pass@k; mean@k averages the
    raw scores."""
    rows = [np.asarray(list(c), dtype=float) for c in correct]
    if not rows:
        raise ValueError("no problems")
    n = len(rows[0])
    if n == 0 or any(len(r) != n for r in rows):
        raise ValueError("every problem needs the same, non-zero number of samples")
    ks = powers_of_two(n) if ks is None else list(ks)
    out = {"mean_at_k": float(np.mean([r.mean() for r in rows])), "n_problems": float(len(rows)),
           "n_samples": float(n)}
    hits = [int((r >= 0.5).sum()) for r in rows]
    for k in ks:
        out[metric_name(k)] = float(np.mean([pass_at_k(n, c, k) for c in hits]))
    return out


def completions_of(results) -> list:
    """The k completions of one document from what lm-eval passes to a task's ``process_results``.

    With the ``take_first_k`` filter that is ``[[c_1, ..., c_k]]`` (one request per document); a flat list
    (e.g. a user-supplied filter that keeps strings) or a bare value is accepted too."""
    if isinstance(results, (list, tuple)):
        if len(results) == 1 and isinstance(results[0], (list, tuple)):
            return list(results[0])
        return list(results)
    return [results]


def doc_metrics(scores) -> dict[str, float]:
    """``mean_at_k`` and ``pass_at_<j>`` of one document, computed exactly as :func:`sample_metrics` computes
    its per-problem terms (a score counts as correct for pass@k when it is >= 0.5)."""
    row = np.asarray(list(scores), dtype=float)
    if row.size == 0:  # nothing generated: one failed sample
        row = np.zeros(1)
    n = int(row.size)
    c = int((row >= 0.5).sum())
    out = {"mean_at_k": float(row.mean())}
    for j in powers_of_two(n):
        out[metric_name(j)] = float(pass_at_k(n, c, j))
    return out
