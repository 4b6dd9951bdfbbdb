"""Procedural task families with short, directly-given answers (no chain of thought).

Every family draws one problem from a ``numpy.random.Generator`` and returns its prompt text, its
canonical answer and the full set of correct answers. Answers are decimal integers written
most-significant digit first; the model ends them with the tokenizer's end-of-sequence token.

Adding a family is one entry in :data:`FAMILIES` (its lm-eval task, benchmark ``tiny_<name>``, table columns and
figure probe derive from it) plus the configs that train and evaluate it (``tasks.tasks``,
``evaluation.benchmarks``); the config check validates family names against :data:`FAMILIES`.

Families:

``add``       ``a+b=`` with each operand's digit count uniform in 1..``add_max_digits`` and the value
              uniform within that digit count (the pilot's task). The prompt is left-padded with spaces
              to a fixed width so every prompt of the family has the same length. One correct answer.
``mul``       ``a*d=``: a 1..``mul_max_digits``-digit number times one digit 2..9. One correct answer. Trained
              only (``evaluated=False``: no lm-eval benchmark, no table columns).
``multiple``  the multi-answer probe: ``d|x,lo-hi=`` asks for any multiple of ``d`` in [lo, hi]
              (inclusive), 1 <= lo <= hi <= ``probe_max``, at least ``probe_min_answers`` correct
              answers. The answer space (candidates) is every integer 1..``probe_max``, small enough to
              score each candidate exactly.
``lookup``    ``x<q>=``: the answer is a keyed hash of the prompt, one of ``lookup_answers`` integers, so other prompts'
              answers say nothing about it (weak transfer; :mod:`brorl.tasks.lookup`). Trained only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

# Characters a task prompt or answer may contain (the tokenizer's base alphabet).
ALPHABET = tuple("0123456789+*=|x,- ")


@dataclass(frozen=True)
class Problem:
    prompt: str
    answer: str
    answers: tuple[str, ...]
    meta: dict


def _draw_operand(rng: np.random.Generator, max_digits: int, min_digits: int = 1) -> int:
    digits = int(rng.integers(min_digits, max_digits + 1))
    lo = 0 if digits == 1 else 10 ** (digits - 1)
    return int(rng.integers(lo, 10**digits))


def add_width(s) -> int:
    return 2 * s.add_max_digits + 2


def mul_width(s) -> int:
    return s.mul_max_digits + 3


def multiple_width(s) -> int:
    d = len(str(max(s.probe_divisors)))
    n = len(str(s.probe_max))
    return d + 3 + 2 * n + 2  # e.g. '13|x,300-300='


def sample_add(rng: np.random.Generator, s) -> Problem:
    a = _draw_operand(rng, s.add_max_digits)
    b = _draw_operand(rng, s.add_max_digits)
    ans = str(a + b)
    if s.add_align:
        w = s.add_max_digits
        prompt = f"{a:>{w}}+{b:>{w}}="
    else:
        prompt = f"{a}+{b}=".rjust(add_width(s))
    return Problem(prompt, ans, (ans,), {"a": a, "b": b, "max_digits": max(len(str(a)), len(str(b)))})


def sample_mul(rng: np.random.Generator, s) -> Problem:
    a = _draw_operand(rng, s.mul_max_digits)
    d = int(rng.integers(2, 10))
    ans = str(a * d)
    prompt = f"{a}*{d}=".rjust(mul_width(s))
    return Problem(prompt, ans, (ans,), {"a": a, "b": d, "max_digits": len(str(a))})


def multiple_answers(d: int, lo: int, hi: int) -> tuple[str, ...]:
    first = -(-lo // d) * d
    return tuple(str(m) for m in range(first, hi + 1, d))


def sample_multiple(rng: np.random.Generator, s) -> Problem:
    d = int(rng.choice(np.asarray(s.probe_divisors)))
    width = s.probe_min_answers * d  # any window of this many integers holds >= probe_min_answers multiples
    if width > s.probe_max:
        raise ValueError(f"probe_max={s.probe_max} too small for divisor {d} x {s.probe_min_answers} answers")
    lo = int(rng.integers(1, s.probe_max - width + 2))
    hi = int(rng.integers(lo + width - 1, s.probe_max + 1))
    answers = multiple_answers(d, lo, hi)
    answer = answers[int(rng.integers(len(answers)))]
    prompt = f"{d}|x,{lo}-{hi}=".rjust(multiple_width(s))
    return Problem(prompt, answer, answers, {"d": d, "lo": lo, "hi": hi, "n_answers": len(answers)})


@dataclass(frozen=True)
class Family:
    name: str
    sample: Callable[[np.random.Generator, object], Problem]
    universe: Callable[[object], tuple[int, int]]
    """Inclusive integer range holding every answer the family can have (the candidate set)."""
    probe: bool = False
    """Multi-answer probe family (several correct answers per prompt)."""
    evaluated: bool = True
    """Has an lm-eval benchmark ``tiny_<name>`` (:mod:`brorl.evaluation.tiny`, registered in
    :mod:`brorl.evaluation.benchmarks`) and its columns in the tables (:data:`brorl.tables.plan.TINY`). Everything
    else about a family (its task YAML, the benchmark, the columns, the figure's probe) is derived from this entry."""


FAMILIES: dict[str, Family] = {
    "add": Family("add", sample_add, lambda s: (0, 2 * (10**s.add_max_digits - 1))),
    "mul": Family("mul", sample_mul, lambda s: (0, 9 * (10**s.mul_max_digits - 1)), evaluated=False),
    "multiple": Family("multiple", sample_multiple, lambda s: (1, s.probe_max), probe=True),
}

# --- issue 29: the weak-transfer family (its code: brorl.tasks.lookup) -----------------------------------------
from brorl.tasks.lookup import draw_lookup, lookup_universe  # noqa: E402


def sample_lookup(rng: np.random.Generator, s) -> Problem:
    prompt, ans, q = draw_lookup(rng, s)
    return Problem(prompt, ans, (ans,), {"q": q})


FAMILIES["lookup"] = Family("lookup", sample_lookup, lookup_universe, evaluated=False)
# --- end of issue 29's block -------------------------------------------------------------------------------------


BENCHMARK_PREFIX = "tiny_"
"""A family's benchmark name is ``tiny_<family>`` (the evaluate rule's wildcard, the tables' column)."""


def evaluated_families() -> tuple[str, ...]:
    """The families with an lm-eval benchmark and table columns (:attr:`Family.evaluated`), in registry order."""
    return tuple(name for name, f in FAMILIES.items() if f.evaluated)


def benchmark_name(family: str) -> str:
    return f"{BENCHMARK_PREFIX}{family}"


def tiny_benchmarks() -> tuple[str, ...]:
    """Every evaluated family's benchmark name, in registry order (the tables' tiny columns)."""
    return tuple(benchmark_name(f) for f in evaluated_families())


def family_of_benchmark(name: str) -> str | None:
    """The evaluated family behind a benchmark name, else None."""
    family = name[len(BENCHMARK_PREFIX):] if name.startswith(BENCHMARK_PREFIX) else None
    return family if family in FAMILIES and FAMILIES[family].evaluated else None


def max_answer_chars(task: str, s) -> int:
    lo, hi = FAMILIES[task].universe(s)
    return max(len(str(lo)), len(str(hi)))


def config_errors(config: dict) -> list[str]:
    """The config check (brorl.pipeline.config_errors): task family names (``tasks.tasks``, ``sft.select_tasks``)
    against the registry, :data:`FAMILIES`."""
    errors = []
    for where, section, key in (("tasks", config.get("tasks"), "tasks"), ("sft", config.get("sft"), "select_tasks")):
        names = section.get(key) if isinstance(section, dict) else None
        for i, name in enumerate(names if isinstance(names, list) else []):
            if name not in FAMILIES:
                errors.append(f"{where}.{key}[{i}]: unknown task family {name!r} (registered: "
                              f"{', '.join(FAMILIES)}) [rule: brorl.tasks.FAMILIES]")
    return errors
