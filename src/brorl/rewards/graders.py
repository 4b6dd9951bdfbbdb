"""The graders, run in the pool's worker processes: math (math-verify) and Reasoning Gym.

``_TASKS`` is the production task table (name -> function run in a worker); ``_PREPARE`` holds one-time set-up
run before a task's deadline starts; ``_DOMAIN_MODULES`` the libraries a worker imports before it is ready.
"""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

# Domains a worker can serve, and the modules each one needs imported before the worker is "ready".
# Imports happen at worker start-up (outside any task deadline), never inside a timed task.
_DOMAIN_MODULES = {
    "math": ("math_verify",),
    "reasoning_gym": ("reasoning_gym",),
}

_GOLD_CACHE: collections.OrderedDict = collections.OrderedDict()
_GOLD_CACHE_SIZE = 4096
_RG_SCORERS: dict[str, Callable] = {}


def _mv_parse(text: str):
    from math_verify import parse

    # Timeouts are ours (soft timer + hard kill); math-verify's signal.alarm is switched off.
    return parse(text, parsing_timeout=None)


# Math delimiters of a "raw" answer snippet ("the answer is $\\frac{2}{3}$."): $$..$$, $..$, \\(..\\), \\[..\\].
_RAW_MATH = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
_RAW_JOIN = re.compile(r"\s*(?:,|,?\s*and)\s*")


_RAW_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")


def _raw_to_latex(snippet: str) -> str | None:
    """The LaTeX answer a raw snippet states (the line after "answer is" when it holds math delimiters): its one
    math group, or several joined by "," / "and" (a list, as math-verify reads "$1$ and $2$"); in prose whose math
    groups hold no digit ("the largest $n$ is 34"), the one number outside them. ``None`` when the snippet
    states several candidates otherwise ("12 | $13$", "$12$ or $13$", "$n$ is 12 or 13"). A snippet without
    math delimiters is returned as it is."""
    groups = list(_RAW_MATH.finditer(snippet))
    if not groups:
        return snippet
    contents = [next(g for g in m.groups() if g is not None) for m in groups]
    outside = snippet[:groups[0].start()] + " ".join(
        snippet[a.end():b.start()] for a, b in zip(groups, groups[1:])) + snippet[groups[-1].end():]
    numbers = _RAW_NUMBER.findall(outside)
    if numbers:
        if len(numbers) == 1 and not any(ch.isdigit() for c in contents for ch in c):
            return numbers[0]
        return None
    between = [snippet[a.end():b.start()] for a, b in zip(groups, groups[1:])]
    if not all(_RAW_JOIN.fullmatch(b) for b in between):
        return None
    return ", ".join(contents)


def _parse_whole(latex: str) -> list:
    """math-verify's reading of one answer *as a whole*: its own normalisation of ``\\boxed{latex}`` and
    latex2sympy on all of it, the first steps of ``math_verify.parse``. What does not parse whole is kept as
    its normalised text (compared with the gold as a string), never cut to a fragment: when the whole fails,
    ``parse`` goes on to the last side of an equation chain and then to any number in the text, so
    ``\\boxed{12 \\vee 13}`` or ``\\boxed{x = 12 \\vee x = 13}`` would be read as 13. Decimals are made exact
    (:func:`_exact`)."""
    from latex2sympy2_extended.latex2sympy2 import latex2sympy, normalize_latex
    from math_verify.grader import should_treat_as_complex

    normalized = normalize_latex("\\boxed{" + latex + "}", config=_normalization()).strip()
    if not normalized:
        return []
    try:
        expr = latex2sympy(normalized, is_real=not should_treat_as_complex(normalized), convert_degrees=False,
                           normalization_config=None)
    except Exception:  # not math-verify's LaTeX: the text itself is the answer
        return [normalized]
    if expr is None:
        return [normalized]
    return [_exact(expr), normalized]


def _normalization():
    from dataclasses import replace

    from math_verify.parser import LatexExtractionConfig

    return replace(LatexExtractionConfig().normalization_config, boxed="last")  # as parse() does for a box


def _exact(expr):
    """``expr`` with each decimal as the exact rational it writes (0.5000001 is 5000001/10^7): compared exactly, as
    ProRL's grader (DeepScaleR: sympy ``simplify(a - b) == 0``) does. math-verify alone rounds both sides to 6
    decimals, so 0.5000001 = 1/2 and 0.333333 = 1/3."""
    import sympy

    try:
        floats = expr.atoms(sympy.Float)
        if floats:
            return expr.xreplace({f: sympy.Rational(str(f)) for f in floats})
    except Exception:  # not a sympy object (a string), or one without atoms
        pass
    return expr


def _parse_gold(gold: str):
    cached = _GOLD_CACHE.get(gold)
    if cached is not None:
        _GOLD_CACHE.move_to_end(gold)
        return cached
    # A bare gold answer ("2\\sqrt{3}") is parsed as LaTeX, whole, like the answers it is compared with.
    if "\\boxed" in gold or "\\fbox" in gold:
        from brorl.rewards.extraction import extract_boxed

        # One box: its content, read whole. Several ("\\boxed{1} and \\boxed{2}"): math-verify's list of them.
        inner = extract_boxed(gold) if gold.count("\\boxed") + gold.count("\\fbox") == 1 else None
        parsed = _parse_whole(inner) if inner else _mv_parse(gold)
    else:
        latex = _raw_to_latex(gold)
        parsed = _parse_whole(latex) if latex is not None else _mv_parse(gold)
    _GOLD_CACHE[gold] = parsed
    if len(_GOLD_CACHE) > _GOLD_CACHE_SIZE:
        _GOLD_CACHE.popitem(last=False)
    return parsed


def _task_math(kind: str, answer: str, gold: str) -> float:
    """Verify one extracted answer against one gold answer with math-verify's comparison (gold first), both read
    whole (:func:`_parse_whole`)."""
    from math_verify import verify

    gold_parsed = _parse_gold(gold)
    if not gold_parsed:
        return 0.0
    if kind != "boxed":
        answer = _raw_to_latex(answer)
        if answer is None:
            return 0.0
    pred_parsed = _parse_whole(answer)
    if not pred_parsed or _false_equation(pred_parsed[0]):
        return 0.0
    return 1.0 if verify(gold_parsed, pred_parsed, timeout_seconds=None) else 0.0


def _false_equation(expr) -> bool:
    """True if ``expr`` is an equation (or chain of them) whose numeric sides disagree, like ``143 = 142``.

    math-verify compares only the last side of an equation with the gold (so that ``x = 142`` is 142), which
    would pay ``\\boxed{143 = 142}`` for 142.  DeepScaleR's grader pays neither (it strips only a short left
    side such as ``x =``).  Decision: a definition (``x = 142``, ``f(2) = 142``: a side that is not a number)
    is graded on its value, as math-verify does; a computation chain pays only if it is true
    (``\\frac{10}{2} = 5`` for 5); a false statement never pays.
    """
    import sympy
    from math_verify import verify

    parts = expr.args if isinstance(expr, sympy.And) else (expr,)
    numbers = [side for eq in parts if isinstance(eq, sympy.Equality) for side in eq.args
               if getattr(side, "is_number", False)]
    return any(not verify(numbers[0], side, timeout_seconds=None) for side in numbers[1:])


MAX_RG_ENTRY_CHARS = 10_000_000
_GRID_TASKS = frozenset({"arc_agi", "rearc"})


def _grid(value):
    if isinstance(value, list) and all(isinstance(row, list) for row in value):
        return tuple(tuple(row) for row in value)
    return value


def parse_reasoning_gym_entry(entry: Any) -> dict | None:
    """A Reasoning Gym entry (a dict, or its JSON string as records and TRL columns carry it) as its dataset's
    scorer expects it, or ``None`` when it is not one (no ``metadata.source_dataset`` string, bad JSON, too long).

    A ``metadata`` JSON string is loaded. JSON turns tuples into lists, and two scorers compare tuples:
    ``arc_agi`` and ``rearc`` test ``parse_board(answer) == metadata["output"]`` with a tuple-of-tuples board,
    so their ``input`` / ``output`` grids are turned back into tuples (otherwise a JSON-loaded entry scores even
    the gold answer 0.05). Every other task's gold answer scores the same before and after a JSON round trip in
    reasoning-gym 0.1.25 (:func:`brorl.data.benchmarks.prepare_benchmark` checks this when it generates data)."""
    if isinstance(entry, (str, bytes)):
        if len(entry) > MAX_RG_ENTRY_CHARS:
            return None
        entry = json.loads(entry)
    if not isinstance(entry, dict):
        return None
    metadata = entry.get("metadata")
    if isinstance(metadata, (str, bytes)):
        metadata = json.loads(metadata)
    if not isinstance(metadata, dict) or not isinstance(metadata.get("source_dataset"), str):
        return None
    if metadata["source_dataset"] in _GRID_TASKS:
        metadata = {**metadata, **{k: _grid(metadata[k]) for k in ("input", "output") if k in metadata}}
    return {**entry, "metadata": metadata}


def _prepare_reasoning_gym(answer: str, entry: dict) -> None:
    """Build the entry's Reasoning Gym scorer once per worker, outside the task's deadline: a scorer is its
    dataset's instance, and some load data first (``arc_agi``: about 1.3 s on a quiet machine, many times
    that on a busy one -- too slow to share a 3 s deadline with the scoring)."""
    name = entry["metadata"]["source_dataset"]
    if name not in _RG_SCORERS:
        import reasoning_gym

        _RG_SCORERS[name] = reasoning_gym.get_score_answer_fn(name)


def _task_reasoning_gym(answer: str, entry: dict) -> float:
    """Score with the entry's own Reasoning Gym dataset scorer (built by :func:`_prepare_reasoning_gym`)."""
    return _RG_SCORERS[entry["metadata"]["source_dataset"]](answer, entry)


# The production task table.  Tests run their own tasks (a hang, a slow answer, a crash) by passing a
# module-level function instead of a name: it is pickled by reference and imported in the worker, so no
# test hook ships here.
_TASKS: dict[str, Callable[..., Any]] = {
    "math": _task_math,
    "reasoning_gym": _task_reasoning_gym,
}
# One-time set-up a task needs in its worker (same arguments), run before its deadline starts: the worker
# says "started" when done, and the parent allows ``startup_timeout`` until then.
_PREPARE: dict[str, Callable[..., None]] = {"reasoning_gym": _prepare_reasoning_gym}
_TASK_DOMAIN = {"math": "math", "reasoning_gym": "reasoning_gym"}


def _load_domains(domains: Iterable[str]) -> str:
    """Import and warm up what the given domains need (called before a worker reports ready).

    Returns "" if all is well, else a description of what failed (the parent logs it).
    """
    import importlib

    problems = []
    for domain in domains:
        try:
            for module in _DOMAIN_MODULES.get(domain, ()):
                importlib.import_module(module)
            # The first parse compiles regexes and builds the ANTLR parser (~0.1 s): not inside a task.
            # It doubles as a self-test (e.g. of the memory limit).
            if domain == "math" and _task_math("boxed", "\\frac{1}{2}", "0.5") != 1.0:
                problems.append("math-verify self-test (1/2 == 0.5) failed")
        except BaseException as exc:  # noqa: BLE001 - report, never die
            problems.append(f"{domain}: {type(exc).__name__}: {exc}")
    return "; ".join(problems)
