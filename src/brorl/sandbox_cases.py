"""What a sandboxed program is and how its output is judged: the program extraction from a completion, the
test-case format and the output comparison. Pure text handling in the parent (no processes); the sandbox that
runs the program is :mod:`brorl.sandbox`, which re-exports these names.

Program extraction rule
-----------------------
1. The *answer region* is the text after the last ``</think>``.  Without ``</think>``: a completion that
   opened ``<think>`` and never closed it (truncated reasoning) has no program; otherwise the region is
   the whole completion.  Only the last 400,000 characters are scanned.
2. In the region, the last *closed* fenced block whose info string is ``python`` / ``py`` / ``python3``
   (any case) is the program; failing that, the last closed fence with no info string.
3. Failing that, if the completion had a ``</think>``, the whole region (stripped) is the program (a
   bare-code answer; prose there simply fails to compile and scores 0).  Otherwise there is no program.
4. No program, or more than 100,000 characters of it, scores 0.0.

Test cases
----------
APPS / TACO / CodeContests / PRIME style: ``{"inputs": [...], "outputs": [...]}`` (a dict or its JSON
string; APPS rows' ``input_output`` and PRIME's ``reward_model.ground_truth`` are unwrapped).  Without
``fn_name`` each case is a stdin/stdout pair: the program reads the input on stdin and its stdout is
compared with the expected output (exact; else line-wise ignoring trailing whitespace and blank edge
lines; else token-wise, where two tokens that are not both integers may differ by 1e-6 absolute or
relative).  With ``fn_name`` (APPS / TACO call-based problems) the program defines that function (or a
LeetCode-style ``class Solution`` with that method); each input is the argument list, and the return value
(through JSON, so tuples become lists) must equal the expected output or, as in APPS, its only element.
A list of ``{"input": ..., "output": ...}`` dicts is accepted too.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from brorl.rewards import completion_text

_SCAN_CHARS = 400_000
_THINK_END = "</think>"
_PY_TAGS = frozenset({"python", "py", "python3", "py3"})


@dataclass(frozen=True)
class TestSpec:
    """Normalised test cases: ``mode`` is ``"stdio"`` (inputs/outputs are strings) or ``"call"``
    (inputs are argument lists, outputs are JSON values, ``fn_name`` names the function)."""

    mode: str
    inputs: tuple
    outputs: tuple
    fn_name: str | None = None

    def __len__(self) -> int:
        return len(self.inputs)


# --------------------------------------------------------------------------------------------------
# Program extraction (linear time, tail only)
# --------------------------------------------------------------------------------------------------


def extract_code(completion: Any, *, max_chars: int = 100_000) -> str | None:
    """The program in a model completion, by the rule in the module docstring, or ``None``.

    ``completion`` may be a string, bytes or a list of chat messages (see
    :func:`brorl.rewards.completion_text`).  Programs longer than ``max_chars`` give ``None``.
    """
    try:
        text = completion_text(completion)
    except Exception:
        return None
    if not text:
        return None
    if len(text) > _SCAN_CHARS:
        text = text[-_SCAN_CHARS:]
    end = text.rfind(_THINK_END)
    if end >= 0:
        region, had_think = text[end + len(_THINK_END):], True
    else:
        if "<think>" in text:
            return None
        region, had_think = text, False
    code = _last_fenced_block(region)
    if code is None and had_think:
        code = region.strip() or None
    if code is None or len(code) > max_chars or not code.strip():
        return None
    return code


def _last_fenced_block(text: str) -> str | None:
    """Body of the last closed python-tagged fence (else the last closed untagged one), or ``None``."""
    best_python = best_plain = None
    open_tag: str | None = None
    fence = ""
    body_start = 0
    pos = 0
    n = len(text)
    while pos <= n:
        nl = text.find("\n", pos)
        line_end = n if nl < 0 else nl
        line = text[pos:line_end]
        stripped = line.strip()
        if open_tag is None:
            lead = line[: len(line) - len(line.lstrip(" "))]
            if len(lead) <= 3 and stripped.startswith("```"):
                ticks = len(stripped) - len(stripped.lstrip("`"))
                info = stripped[ticks:].strip()
                if "`" not in info:
                    open_tag = info.split()[0].lower() if info else ""
                    fence = "`" * ticks
                    body_start = line_end + 1
        elif stripped.startswith(fence) and stripped.strip("`") == "" and len(stripped) >= len(fence):
            body = text[body_start:pos] if pos > body_start else ""
            if open_tag in _PY_TAGS:
                best_python = body
            elif open_tag == "":
                best_plain = body
            open_tag = None
        if nl < 0:
            break
        pos = nl + 1
    result = best_python if best_python is not None else best_plain
    return result


# --------------------------------------------------------------------------------------------------
# Test cases
# --------------------------------------------------------------------------------------------------

_TEST_WRAPPER_KEYS = ("input_output", "ground_truth", "tests", "test_cases")


def parse_tests(tests: Any, _depth: int = 0) -> TestSpec | None:
    """Normalise a test-case specification (see the module docstring), or ``None`` if it is unusable."""
    if _depth > 4:
        return None
    if isinstance(tests, (bytes, bytearray)):
        tests = bytes(tests).decode("utf-8", errors="replace")
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except (ValueError, RecursionError):
            return None
        return parse_tests(tests, _depth + 1)
    if isinstance(tests, (list, tuple)):
        if tests and all(isinstance(t, Mapping) and "input" in t and "output" in t for t in tests):
            return parse_tests({"inputs": [t["input"] for t in tests], "outputs": [t["output"] for t in tests]},
                               _depth + 1)
        return None
    if not isinstance(tests, Mapping):
        return None
    if "inputs" not in tests:
        if isinstance(tests.get("reward_model"), Mapping):
            return parse_tests(tests["reward_model"], _depth + 1)
        for key in _TEST_WRAPPER_KEYS:
            if tests.get(key) is not None:
                return parse_tests(tests[key], _depth + 1)
        return None
    inputs, outputs = tests.get("inputs"), tests.get("outputs")
    if not isinstance(inputs, (list, tuple)) or not isinstance(outputs, (list, tuple)):
        return None
    if not inputs or len(inputs) != len(outputs):
        return None
    fn_name = tests.get("fn_name")
    if isinstance(fn_name, str) and fn_name.strip():
        if not fn_name.strip().isidentifier():
            return None
        args = tuple(list(x) if isinstance(x, (list, tuple)) else [x] for x in inputs)
        return TestSpec("call", args, tuple(outputs), fn_name.strip())
    ins = tuple(_as_text(x) for x in inputs)
    outs = tuple(_as_text(x) for x in outputs)
    if any(x is None for x in ins) or any(x is None for x in outs):
        return None
    return TestSpec("stdio", ins, outs)


def _as_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in value):
        return "\n".join(str(v) for v in value) + ("\n" if value else "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


# --------------------------------------------------------------------------------------------------
# Output comparison (parent side)
# --------------------------------------------------------------------------------------------------

_INT_TOKEN = re.compile(r"[+-]?\d+")


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    start = 0
    while start < len(lines) and not lines[start]:
        start += 1
    return lines[start:]


def _tokens_close(a: str, b: str) -> bool:
    if a == b:
        return True
    if _INT_TOKEN.fullmatch(a) and _INT_TOKEN.fullmatch(b):
        return False
    try:
        fa, fb = float(a), float(b)
    except (ValueError, OverflowError):
        return False
    if not (math.isfinite(fa) and math.isfinite(fb)):
        return False
    return math.isclose(fa, fb, rel_tol=1e-6, abs_tol=1e-6)


def outputs_match(got: str, expected: str) -> bool:
    """Whether a program's stdout ``got`` matches ``expected`` (stdio tests; rule in the module docstring)."""
    if got == expected:
        return True
    if _lines(got) == _lines(expected):
        return True
    got_tokens, expected_tokens = got.split(), expected.split()
    if len(got_tokens) != len(expected_tokens):
        return False
    return all(_tokens_close(a, b) for a, b in zip(got_tokens, expected_tokens))


def _values_equal(got: Any, expected: Any, depth: int = 0) -> bool:
    if depth > 100:
        return False
    if isinstance(expected, float) or isinstance(got, float):
        if isinstance(got, (int, float)) and isinstance(expected, (int, float)) \
                and not isinstance(got, bool) and not isinstance(expected, bool):
            if math.isfinite(got) and math.isfinite(expected):
                return math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-9)
        return got == expected
    if isinstance(expected, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(got) == len(expected) and all(_values_equal(g, e, depth + 1) for g, e in zip(got, expected))
    if isinstance(expected, dict) and isinstance(got, dict):
        return got.keys() == expected.keys() and all(_values_equal(got[k], expected[k], depth + 1) for k in got)
    try:
        return bool(got == expected)
    except Exception:
        return False


def _call_match(got_text: str, expected: Any) -> bool:
    try:
        got = json.loads(got_text)
    except (ValueError, RecursionError):
        return False
    try:
        if _values_equal(got, expected):
            return True
        if isinstance(expected, list) and len(expected) == 1:
            return _values_equal(got, expected[0])
    except RecursionError:
        return False
    return False


__all__ = ["TestSpec", "extract_code", "parse_tests", "outputs_match"]
