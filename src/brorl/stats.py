"""Seed-level tests: the statistical unit of a training comparison is the seed (a whole training run), not the
prompt. Prompts within one run share that run's noise, so a test over prompts overstates certainty; it is kept only
as a secondary column beside these.

- :func:`one_sample` -- a t-test of per-seed contrasts against 0 (paired by seed: seed s of each arm gives one
  contrast; also a gain, end minus start, per seed), df = seeds - 1.
- :func:`welch` -- Welch's t-test of two arms' per-seed values when their seeds do not match.
- :func:`seed_level` -- the one of the two that fits two arms' ``{seed: value}``.

Fewer than :data:`MIN_SEEDS` seeds: **not testable** (``p`` is NaN), whatever the numbers; with 3 seeds a sign
test cannot reach p < 0.05 (every seed agreeing has p = 0.25), so agreement of signs is shown, never used as a test.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

ALPHA = 0.05
MIN_SEEDS = 3  # [our choice] a comparison from fewer seeds (or from one step) is "not testable", never "yes"


def _t_p(t: float, df: float) -> tuple[float, float]:
    from scipy import stats

    return float(2 * stats.t.sf(abs(t), df)), float(stats.t.sf(t, df))


def _untestable(delta: float, n: int, test: str, why: str) -> dict:
    return {"delta": delta, "t": math.nan, "df": math.nan, "p_two_sided": math.nan, "p_greater": math.nan,
            "seeds": n, "test": test, "testable": False, "why": why}


def one_sample(values: Sequence[float]) -> dict:
    """Per-seed contrasts (or gains) against 0: mean, t, df, two-sided and one-sided (mean > 0) p."""
    v = [float(x) for x in values if x is not None and not math.isnan(float(x))]
    n = len(v)
    mean = sum(v) / n if n else math.nan
    if n < MIN_SEEDS:
        return _untestable(mean, n, "paired by seed", f"{n} seed(s) < {MIN_SEEDS}")
    sd = math.sqrt(sum((x - mean) ** 2 for x in v) / (n - 1))
    if sd == 0.0:  # every seed gave the same contrast: no spread to test against
        p2, p1 = (1.0, 1.0) if mean == 0 else (0.0, 0.0 if mean > 0 else 1.0)
        return {"delta": mean, "t": math.copysign(math.inf, mean) if mean else 0.0, "df": n - 1, "p_two_sided": p2,
                "p_greater": p1, "seeds": n, "test": "paired by seed", "testable": True, "why": ""}
    t = mean / (sd / math.sqrt(n))
    p2, p1 = _t_p(t, n - 1)
    return {"delta": mean, "t": t, "df": n - 1, "p_two_sided": p2, "p_greater": p1, "seeds": n,
            "test": "paired by seed", "testable": True, "why": ""}


def welch(a: Sequence[float], b: Sequence[float]) -> dict:
    """Welch's t-test of mean(a) - mean(b) over per-seed values (Welch-Satterthwaite df)."""
    a = [float(x) for x in a if not math.isnan(float(x))]
    b = [float(x) for x in b if not math.isnan(float(x))]
    na, nb = len(a), len(b)
    delta = (sum(a) / na if na else math.nan) - (sum(b) / nb if nb else math.nan)
    if min(na, nb) < MIN_SEEDS:
        return _untestable(delta, min(na, nb), "Welch", f"{min(na, nb)} seed(s) < {MIN_SEEDS}")
    ma, mb = sum(a) / na, sum(b) / nb
    va = sum((x - ma) ** 2 for x in a) / (na - 1) / na
    vb = sum((x - mb) ** 2 for x in b) / (nb - 1) / nb
    if va + vb == 0.0:
        p2, p1 = (1.0, 1.0) if delta == 0 else (0.0, 0.0 if delta > 0 else 1.0)
        return {"delta": delta, "t": math.copysign(math.inf, delta) if delta else 0.0, "df": na + nb - 2,
                "p_two_sided": p2, "p_greater": p1, "seeds": min(na, nb), "test": "Welch", "testable": True, "why": ""}
    t = delta / math.sqrt(va + vb)
    df = (va + vb) ** 2 / ((va ** 2 / (na - 1) if va else 0.0) + (vb ** 2 / (nb - 1) if vb else 0.0))
    p2, p1 = _t_p(t, df)
    return {"delta": delta, "t": t, "df": df, "p_two_sided": p2, "p_greater": p1, "seeds": min(na, nb),
            "test": "Welch", "testable": True, "why": ""}


def seed_level(a: Mapping[int, float], b: Mapping[int, float]) -> dict:
    """Arm ``a`` against arm ``b`` from their ``{seed: value}``: paired by seed when both ran the same seeds (seed s
    of each arm shares its seed-derived data order), else Welch; ``per_seed`` holds the seed-matched differences
    (empty for Welch)."""
    if set(a) == set(b):
        seeds = sorted(a)
        diffs = [a[s] - b[s] for s in seeds]
        return {**one_sample(diffs), "per_seed": diffs}
    return {**welch(list(a.values()), list(b.values())), "per_seed": []}


def verdict(test: Mapping, words: tuple[str, str, str, str] = ("won", "lost", "tied", "not testable"),
            one_sided: bool = False) -> str:
    """``words`` = (better, worse, within noise, not testable) from a seed-level test: better / worse when the
    (two-sided, or ``one_sided`` for "better") p is below :data:`ALPHA`."""
    better, worse, tie, untestable = words
    if not test.get("testable") or math.isnan(test["p_two_sided"]):
        return untestable
    if test["delta"] > 0 and (test["p_greater"] if one_sided else test["p_two_sided"]) < ALPHA:
        return better
    if test["delta"] < 0 and test["p_two_sided"] < ALPHA:
        return worse
    return tie


def fmt_p(p: float) -> str:
    return "–" if p is None or math.isnan(p) else (f"{p:.1e}" if p < 1e-3 else f"{p:.3f}")


def describe(test: Mapping) -> str:
    """``p 0.052 (paired by seed, df 2)`` or ``not testable (2 seed(s) < 3)``."""
    if not test.get("testable"):
        return f"not testable ({test.get('why') or 'no spread'})"
    return f"p {fmt_p(test['p_two_sided'])} ({test['test']}, df {test['df']:.3g})"
