"""Programs checked against test cases in the sandbox (apps, codecontests, codeforces, taco; Eurus-2 code for
training).

- converter: the problem statement (a chat's last user message for PRIME rows), then :data:`CODE_INSTRUCTION` (a
  complete program in a ```python block, reading stdin and writing stdout) or, for call-based problems,
  :data:`CODE_CALL_INSTRUCTION`; ``tests`` (the sandbox's test cases, ``{"inputs": [...], "outputs": [...]}`` plus
  ``"fn_name"`` for call-based problems, stored as a JSON *string*: Arrow cannot hold stdio and call-based cases in
  one column), ``n_tests``, ``fn_name`` ("" for stdin/stdout problems), ``data_source`` and an empty ``answer``. A row
  without usable test cases is dropped and counted. **Our choice**: the papers say only "answers in triple
  backticks" (ProRL's grader); a PRIME row's problem already ends with PRIME's own "Present the code in
  ```python```" line, which is kept, so such prompts say it twice.
- reward: :func:`brorl.sandbox.code_rewards`, the fraction of tests passed (0 on a syntax error, no program, or past
  the 5 s budget for all cases together; never raises). Scorer: a completion *solves* the problem when it passes
  every test (ProRL v1: "strictly binary rewards for ... code"); the lm-eval task also reports
  ``mean_test_fraction`` (the partial-credit reading of BroRL Table 4).
"""

from __future__ import annotations

import json
import logging
from typing import Mapping

import numpy as np

from brorl import rewards, sandbox
from brorl.kinds import PROMPT_SEPARATOR
from brorl.kinds.base import Kind, RowError, RowSkipped, gold_text, pick, record_id, safe, text

logger = logging.getLogger(__name__)

CODE_INSTRUCTION = ("Write a complete Python 3 program that solves the problem. It must read the input from "
                    "standard input and write the answer to standard output. Give the program in a single "
                    "```python code block at the end of your response.")
"""[our choice] the code directive (ProRL: "answers in triple backticks"); the sandbox runs the last ```python
block after ``</think>`` (:func:`brorl.sandbox.extract_code`)."""
CODE_CALL_INSTRUCTION = ("Write Python 3 code that defines the function `{fn_name}` (it is called with each test's "
                         "arguments and its return value is checked). Give the code in a single ```python code "
                         "block at the end of your response.")
"""[our choice] the directive of call-based (``fn_name``) APPS / TACO problems."""
SOLVED_AT = 1.0 - 1e-9
"""A completion solves a code problem when its fraction of tests passed is 1.0 (every test)."""


def problem_text(value) -> str:
    """A problem statement: a string as is, or a chat (a list of ``{"role", "content"}``, PRIME's ``prompt``
    column) as the content of its last user message."""
    if isinstance(value, (list, tuple)):
        users = [m.get("content") for m in value if isinstance(m, Mapping) and m.get("role", "user") == "user"]
        return text(users[-1]) if users else ""
    return text(value)


def code_tests(value) -> dict | None:
    """The sandbox's test-case dict (``inputs``, ``outputs``, optional ``fn_name``) of a row's tests column: a
    dict or its JSON string, APPS / TACO ``input_output``, PRIME ``reward_model`` (``ground_truth``), or a list of
    ``{"input", "output"}``; ``None`` when :func:`brorl.sandbox.parse_tests` cannot use it."""
    for _ in range(4):  # unwrap {"ground_truth": "<json>"} and JSON strings
        if isinstance(value, (bytes, bytearray)):
            value = bytes(value).decode("utf-8", errors="replace")
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                return None
        elif isinstance(value, Mapping) and "inputs" not in value and value.get("ground_truth") is not None:
            value = value["ground_truth"]
        else:
            break
    spec = sandbox.parse_tests(value)
    if spec is None:
        return None
    # The normalised cases (stdio: strings; call: argument lists), which parse_tests reads back unchanged.
    out = {"inputs": list(spec.inputs), "outputs": list(spec.outputs)}
    if spec.fn_name:
        out["fn_name"] = spec.fn_name
    return out


def code_prompt(problem: str, fn_name: str | None = None) -> str:
    instruction = CODE_CALL_INSTRUCTION.format(fn_name=fn_name) if fn_name else CODE_INSTRUCTION
    return problem + PROMPT_SEPARATOR + instruction


def convert(spec, rel: str, i: int, row, source: str) -> dict:
    where = f"{spec.name} {rel}#{i}"
    problem = problem_text(pick(row, spec.fields["problem"], "problem", where))
    if not problem:
        raise RowError(f"{where}: empty problem")
    tests = code_tests(pick(row, spec.fields["tests"], "tests", where))
    if tests is None:
        logger.warning("%s: no usable test cases; dropped", where)
        raise RowSkipped("no_tests", f"{where}: no usable test cases")
    fn_name = tests.get("fn_name") or ""
    data_source = text(pick(row, spec.fields.get("data_source", ()), "data_source", where, required=False))
    return {"id": record_id(spec, rel, i, row), "benchmark": spec.name, "prompt": code_prompt(problem, fn_name),
            "problem": problem, "answer": "", "tests": json.dumps(tests, ensure_ascii=True),
            "n_tests": len(tests["inputs"]), "fn_name": fn_name, "data_source": data_source or spec.name,
            "source": source}


def passed_fraction(doc, completions) -> list[float]:
    """[0, 1] per completion: the fraction of ``doc["tests"]`` passed in the sandbox
    (:func:`brorl.sandbox.code_rewards`, which runs distinct programs in parallel and never raises for bad
    completions or tests)."""
    completions = list(completions)
    tests = doc.get("tests") if isinstance(doc, dict) else None
    if not completions or tests is None or tests == "":
        return [0.0] * len(completions)
    if not isinstance(tests, str):
        tests = json.dumps(tests)  # one string for all k: identical programs run once
    out = []
    for x in sandbox.code_rewards(completions, [tests] * len(completions)):
        x = float(x)
        out.append(min(1.0, max(0.0, x)) if x == x else 0.0)
    return out


def score(doc, completions) -> list[float]:
    """0/1 per completion: every test passed (:func:`passed_fraction` is 1.0)."""
    return [1.0 if x >= SOLVED_AT else 0.0 for x in safe(passed_fraction, doc, list(completions))]


def judge(doc, completions) -> tuple[list[int], dict]:
    fractions = safe(passed_fraction, doc, completions)
    return ([1 if x >= SOLVED_AT else 0 for x in fractions],
            {"mean_test_fraction": float(np.mean(fractions)) if fractions else 0.0})


def reward(records, completions) -> tuple[list[float], list[bool]]:
    """The fraction of tests passed per (record, completion), in one sandbox batch (its own budget is part of the
    score: nothing times out)."""
    tests = [r.get("tests") for r in records]
    tests = [t if isinstance(t, str) else json.dumps(t) for t in tests]
    return sandbox.code_rewards(list(completions), tests), [False] * len(records)


KIND = Kind(
    name="code", description="paper profile, code: sandboxed tests, solved = all tests passed",
    instruction=CODE_INSTRUCTION, convert=convert, score=score, judge=judge, rewards=reward,
    extra_metrics=(("mean_test_fraction", "mean"),), prompt_extra={"call_instruction": CODE_CALL_INSTRUCTION},
    code=(rewards, gold_text, sandbox))
