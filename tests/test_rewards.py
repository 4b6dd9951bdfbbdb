"""Tests for brorl.rewards: correctness on realistic completions, TRL adapters, Reasoning Gym scoring,
and robustness -- adversarial fuzzing, hung / crashing workers, clean shutdown.

The fuzz corpus is generated deterministically (fixed seed) so a failure is reproducible.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import reward_tasks as T
from brorl import rewards as R
from brorl.rewards import RewardPool

FUZZ_TIMEOUT = 0.4  # hard per-call limit for the fuzz pool (s)
MARGIN = 1.5  # slack for IPC (s)
SUBPROCESS_LIMIT = 600  # s, a guard against a hung test script only
GENEROUS = 60.0  # deadline of pools whose tests check answers, not timeouts: a starved machine still passes


@contextlib.contextmanager
def _generous(p):
    """Let ``p`` verify with a generous deadline for a while (health checks on a short-timeout pool)."""
    timeout, p.timeout = p.timeout, GENEROUS
    try:
        yield p
    finally:
        p.timeout = timeout


def _startup_seconds(p) -> float:
    """Seconds to restart ``p``'s workers and score one answer, measured now: the unit in which the time
    bounds below are stated, so that they scale with the machine's load instead of failing on a busy one."""
    p.close()
    t = time.monotonic()
    with _generous(p):
        assert p.math_reward("\\boxed{1}", "1") == 1.0
    return time.monotonic() - t


def _gone(pid: int) -> bool:
    """True if process ``pid`` is gone: neither running nor an unreaped zombie."""
    return not os.path.exists(f"/proc/{pid}")


@pytest.fixture(scope="module")
def pool():
    """A 2-worker pool with a generous timeout for correctness tests (Reasoning Gym preloaded)."""
    with RewardPool(num_workers=2, timeout=GENEROUS, preload=("math", "reasoning_gym")) as p:
        yield p


@pytest.fixture(scope="module")
def fuzz_pool():
    """A short-timeout pool without a cache or retries, so every fuzz input reaches a worker once."""
    with RewardPool(num_workers=2, timeout=FUZZ_TIMEOUT, cache_size=0, timeout_retries=0) as p:
        p.startup = _startup_seconds(p)  # also warms the workers up outside the timed loop
        yield p


# --------------------------------------------------------------------------------------------------
# Extraction (pure functions, no workers)
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so \\boxed{3}", "3"),
        ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{\\frac{\\sqrt{3}}{2}}.", "\\frac{\\sqrt{3}}{2}"),
        ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),  # escaped braces are literal
        ("\\boxed{2} and finally \\boxed{", "2"),  # truncated last box -> previous complete one
        ("\\boxed{\\boxed{7}}", "7"),
        ("\\fbox{5}", "5"),
        ("\\boxed {4}", "4"),
        ("no box here", None),
        ("\\boxed{", None),
        ("}}}}\\boxed{8}{{{{", "8"),
    ],
)
def test_extract_boxed(text, expected):
    assert R.extract_boxed(text) == expected


def test_extract_boxed_is_linear_on_huge_inputs():
    """Milliseconds of CPU on 100k characters (a quadratic scan would take minutes). Timed in this process's
    CPU seconds, which other processes on a busy machine do not inflate."""
    for text in ("{" * 100_000, "\\boxed{" * 15_000, "}" * 100_000, "\\boxed{" + "{" * 100_000 + "}"):
        t = time.process_time()
        R.extract_boxed(text)
        assert time.process_time() - t < 0.5


@pytest.mark.parametrize(
    "text, expected",
    [
        ("... so the final answer is $\\frac{1}{2}$.", ("raw", "$\\frac{1}{2}$")),
        ("Therefore, the answer is 42.", ("boxed", "42")),
        ("Answer: 7\nDone", ("boxed", "7")),
        ("we get 3 apples, then 1,250 more", ("boxed", "1250")),  # prose between two numbers: the last
        ("we get 3, 1,250", None),  # a list on the answer's line: neither is the answer
        ("so 3 + 4 = 7", ("boxed", "7")),  # a true computation states its value
        ("so 3 + 4 = 8", None),
        ("nothing numeric", None),
        ("", None),
        (None, None),
    ],
)
def test_extract_math_answer_fallbacks(text, expected):
    assert R.extract_math_answer(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>hmm</think><answer> 42 </answer>", "42"),
        ("<answer>1</answer> wait <answer>2</answer>", "2"),
        ("<think>long</think>\n  final  ", "final"),
        ("<think>truncated reasoning", None),
        ("just text", None),  # prose without a final answer (final_line_answer)
        ("1 + 6 = 7", "7"),
        ([{"role": "assistant", "content": "<answer>x</answer>"}], "x"),
        (None, None),
    ],
)
def test_extract_reasoning_gym_answer(text, expected):
    assert R.extract_reasoning_gym_answer(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        # what SmolLM2-135M-Instruct writes instead of <answer> tags (sampled 2026-12-04)
        ("1 + 6 = 7", "7"),
        ("1 + 6 equals 7.", None),
        ("2 + 0 = 2\n\nThe answer is: 2", "2"),
        ("The answer would be 2 + 0 = 2.", "2"),
        ("The final answer is 42.", "42"),
        ("Answer: -5", "-5"),
        ("x = 4", "4"),
        ("There are 4 legs in total if you have 1 deer.", None),
        # strict: a false computation, hedges, several answers, hidden characters, an answer not on the last line
        ("1 + 6 = 8", None),
        ("3 + 4 = 7 = 8", None),
        ("5 / 0 = 3", None),
        ("The answer is 7 or 8", None),
        ("The answer is 7?", None),
        ("The answer is 7, 8", None),
        ("The answer is 1\u200b4", None),
        ("14\x00", None),
        ("The answer is 7.\nOr maybe not.", None),
        ("", None),
    ],
)
def test_final_line_answer(text, expected):
    assert R.final_line_answer(text) == expected


def test_reasoning_gym_tagless_fallback_order():
    # tags win over the final line; unclosed reasoning has no answer; the text after </think> is the answer
    assert R.extract_reasoning_gym_answer("<answer>3</answer>\nSo 1 + 6 = 7") == "3"
    assert R.extract_reasoning_gym_answer("<think>1 + 6 = 7") is None
    assert R.extract_reasoning_gym_answer("<think>ok</think>\nhello world") == "hello world"
    assert R.extract_reasoning_gym_answer("The answer is 18 or 19") is None  # no partial credit for a hedge


def test_completion_text_formats():
    assert R.completion_text("a") == "a"
    assert R.completion_text([{"role": "assistant", "content": "a"}]) == "a"
    assert R.completion_text([{"role": "assistant", "content": [{"type": "text", "text": "b"}]}]) == "b"
    assert R.completion_text(b"\xffz").endswith("z")
    assert R.completion_text(3) is None
    assert R.completion_text([{"role": "assistant"}]) is None
    assert R.completion_text([{"role": "user", "content": "a"}]) is None  # no assistant turn: no text
    assert R.completion_text([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]) == "b"


# --------------------------------------------------------------------------------------------------
# Math correctness on realistic completions
# --------------------------------------------------------------------------------------------------

COT = "Let's think step by step. First we simplify the expression, then we check the edge cases.\n"


@pytest.mark.parametrize(
    "completion, gold, expected",
    [
        (COT + "So the result is \\boxed{\\frac{1}{2}}", "0.5", 1.0),
        (COT + "\\boxed{0.5}", "\\frac{1}{2}", 1.0),
        (COT + "\\boxed{\\dfrac{3}{4}}", "$\\frac{3}{4}$", 1.0),
        (COT + "\\boxed{2\\sqrt{3}}", "\\sqrt{12}", 1.0),
        (COT + "\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}", 1.0),
        (COT + "\\boxed{-7}", "-7", 1.0),
        (COT + "\\boxed{3}", "4", 0.0),
        (COT + "\\boxed{2\\sqrt{3}}", "2", 0.0),
        (COT + "\\boxed{x = 5}", "5", 1.0),
        (COT + "\\boxed{(1, 2)}", "(1,2)", 1.0),
        (COT + "\\boxed{10\\%}", "10\\%", 1.0),
        (COT + "\\boxed{\\text{(B)}}", "B", 1.0),
        (COT + "\\boxed{[1,2]}", "[1,2)", 0.0),
        (COT + "\\boxed{1} hmm no, \\boxed{2}", "2", 1.0),
        (COT + "\\boxed{1} hmm no, \\boxed{2}", "1", 0.0),
        (COT + "Therefore the final answer is 18.", "18", 1.0),
        (COT + "The answer is $\\frac{2}{3}$.", "\\frac{2}{3}", 1.0),
        (COT + "which gives 12 in total", "12", 1.0),
        (COT + "no answer at all", "3", 0.0),
        ("", "3", 0.0),
        ([{"role": "assistant", "content": COT + "\\boxed{9}"}], "9", 1.0),
        (COT + "\\boxed{9}", 9, 1.0),  # numeric gold column
        (COT + "\\boxed{\\pi}", "\\pi", 1.0),
    ],
)
def test_math_reward_realistic(pool, completion, gold, expected):
    assert R.math_reward(completion, gold, pool=pool) == expected


# --------------------------------------------------------------------------------------------------
# Reward decisions: wrong answers a policy could learn to write must not pay (issue 20, item 3).
# The references are the paper's graders: math-verify 0.9.0 (what brorl verifies with) and the
# DeepScaleR / ProRL grader (deepscaler/rewards/math_reward.py: last \boxed{} after </think>, Hendrycks /
# PRM800K normalisation).
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "completion, gold, expected",
    [
        # Equation chains: math-verify grades the last side only (so x = 142 is 142), which alone would pay
        # a false statement.  A definition pays on its value; a numeric chain only if it is true.
        ("\\boxed{143 = 142}", "142", 0.0),
        ("\\boxed{142 = 143}", "142", 0.0),
        ("\\boxed{143 \\equiv 142}", "142", 0.0),
        ("\\boxed{x = 143 = 142}", "142", 0.0),
        ("\\boxed{143 = x = 142}", "142", 0.0),
        ("\\boxed{143 \\to 142}", "142", 0.0),  # arrows and := read as "="
        ("\\boxed{143 \\Rightarrow 142}", "142", 0.0),
        ("\\boxed{143 := 142}", "142", 0.0),
        ("\\boxed{x = 142}", "142", 1.0),
        ("\\boxed{f(2) = 142}", "142", 1.0),
        ("\\boxed{\\frac{284}{2} = 142}", "142", 1.0),
        ("\\boxed{2 \\cdot 71 = 142}", "142", 1.0),
        ("\\boxed{x \\to 142}", "142", 1.0),
        ("\\boxed{\\lim_{x \\to 0} f(x) = 142}", "142", 1.0),  # an arrow inside braces is not a chain
        # Hedged answers: neither candidate pays (math-verify alone read "142 (or maybe 143)" as 143).
        ("the answer is 142 (or maybe 143)", "143", 0.0),
        ("the answer is 142 (or maybe 143)", "142", 0.0),
        ("\\boxed{142 (or maybe 143)}", "143", 0.0),
        ("\\boxed{142 \\text{ (probably)}}", "142", 0.0),
        ("The answer is 142?", "142", 0.0),
        ("\\boxed{\\text{odd or even}}", "\\text{odd or even}", 1.0),  # unless the gold reads that way
        # Hidden characters inside the answer: "14\x002" is not 142 (it used to be, once the NUL was dropped).
        ("\\boxed{14\x002}", "142", 0.0),
        ("\\boxed{1\u200b42}", "142", 0.0),  # zero-width space
        ("\\boxed{\u202e241}", "142", 0.0),  # right-to-left override
        ("\\boxed{14\ud8002}", "142", 0.0),  # lone surrogate
        ("\x00 noise \x00 then \\boxed{142}", "142", 1.0),  # outside the answer: harmless
        # Message lists: only the model's own turns are scored.
        ([{"role": "user", "content": "\\boxed{7}"}], "7", 0.0),
        ([{"role": "system", "content": "\\boxed{7}"}, {"role": "user", "content": "solve"}], "7", 0.0),
        ([{"role": "user", "content": "\\boxed{7}"}, {"role": "assistant", "content": "\\boxed{8}"}], "7", 0.0),
        ({"role": "tool", "content": "\\boxed{7}"}, "7", 0.0),
        ([{"role": "assistant", "content": "\\boxed{7}"}], "7", 1.0),
        # Percent: the sign is a unit (DeepScaleR's grader drops it, math-verify accepts the bare form), so
        # 50\% is 50 either way round; it is not the fraction 0.5.
        ("\\boxed{50\\%}", "50", 1.0),
        ("\\boxed{50}", "50\\%", 1.0),
        ("\\boxed{50%}", "50", 1.0),
        ("The answer is $50\\%$.", "50", 1.0),
        ("\\boxed{50\\%}", "51", 0.0),
        ("\\boxed{0.5}", "50\\%", 0.0),
        ("\\boxed{50\\%}", "0.5", 0.0),
        # Reasoning is not the answer: only the text after the last </think> counts (DeepScaleR); an
        # unclosed <think> is truncated reasoning.
        ("<think>\\boxed{3}</think> The answer is 4", "3", 0.0),
        ("<think>\\boxed{3}</think> The answer is 4", "4", 1.0),
        ("<think>so \\boxed{3}</think> I am not sure.", "3", 0.0),
        ("<think>so \\boxed{3}", "3", 0.0),
        ("Let me see. \\boxed{3}</think> \\boxed{3}", "3", 1.0),  # template put <think> in the prompt
        # Several boxes: the last complete one is the answer (DeepScaleR), the others never pay.
        ("\\boxed{142} no wait \\boxed{143}", "142", 0.0),
        ("\\boxed{142}\\boxed{143}", "143", 1.0),
    ],
)
def test_math_reward_decisions(pool, completion, gold, expected):
    assert R.math_reward(completion, gold, pool=pool) == expected


HEDGES = [
    "\\boxed{{{a} \\text{{ or }} {b}}}", "\\boxed{{{a}, {b}}}", "\\boxed{{\\{{{a}, {b}\\}}}}", "\\boxed{{{a} \\\\ {b}}}",
    "\\boxed{{{a} \\quad {b}}}", "\\boxed{{{a}\\ {b}}}", "\\boxed{{{a} \\sim {b}}}", "\\boxed{{{a} \\mid {b}}}",
    "\\boxed{{{a} ({b})}}", "\\boxed{{{a} \\approx {b}}}", "\\boxed{{{a}/{b}}}", "\\boxed{{{a} \\pm 1}}",
    "\\boxed{{{a} = {b}}}", "\\boxed{{x = {a} = {b}}}", "\\boxed{{{a} \\to {b}}}", "\\boxed{{{a} \\lor {b}}}",
    "\\boxed{{{a}}}\\boxed{{{b}}}", "\\boxed{{{a} \\boxed{{{b}}}}}", "\\boxed{{\\boxed{{{a}}}\\boxed{{{b}}}}}",
    "<think>\\boxed{{{a}}}</think>\\boxed{{{b}}}", "The answer is {a} or {b}.", "The answer is {a}, or {b}",
    "answer: {a} (or maybe {b})", "{a} or {b}", "\\boxed{{[{a}, {b}]}}", "\\boxed{{({a}, {b})}}",
    "\\boxed{{{a} \\text{{ and }} {b}}}", "\\boxed{{{a}\\%\\ {b}}}", "\\boxed{{{a}\x00{b}}}",
]  # fmt: skip


@pytest.mark.parametrize("template", HEDGES)
def test_no_completion_pays_for_two_different_answers(pool, template):
    """Whatever a completion says, it cannot be right for both 142 and 143 (in either order)."""
    for a, b in ((142, 143), (143, 142)):
        text = template.format(a=a, b=b)
        paid = [g for g in ("142", "143") if R.math_reward(text, g, pool=pool) == 1.0]
        assert len(paid) <= 1, (text, paid)


def test_huge_and_deep_completions_stay_cheap_and_unpaid(pool):
    """A 5 MB completion (answer at the end, behind a long think block) is scored from its tail in the parent;
    over-long or over-nested answers are refused there without reaching a worker."""
    tasks = pool.stats.tasks
    long_think = "<think>" + "wait, " * 800_000 + "</think>"
    assert R.math_reward(long_think + " \\boxed{142}", "142", pool=pool) == 1.0
    assert R.math_reward(long_think + " \\boxed{" + "1" * 5000 + "}", "142", pool=pool) == 0.0
    assert R.math_reward("\\boxed{" + "{" * 50 + "142" + "}" * 50 + "}", "142", pool=pool) == 0.0
    assert R.math_reward("\\boxed{142}" + "x" * 5_000_000, "142", pool=pool) == 0.0  # the box is out of reach
    assert pool.stats.tasks - tasks <= 2


def test_math_rewards_batch_and_cache(pool):
    completions = [COT + f"\\boxed{{{i % 7}}}" for i in range(60)]
    golds = [str(i % 7 if i % 3 else (i + 1) % 7) for i in range(60)]
    expected = [1.0 if i % 3 else 0.0 for i in range(60)]
    assert pool.math_rewards(completions, golds) == expected
    hits = pool.stats.cache_hits
    assert pool.math_rewards(completions, golds) == expected
    assert pool.stats.cache_hits >= hits + 60
    with pytest.raises(ValueError):
        pool.math_rewards(completions, golds[:-1])


def test_module_level_default_pool():
    R.configure(num_workers=1, timeout=GENEROUS)
    try:
        assert R.math_reward("... \\boxed{\\frac{1}{2}}", "0.5") == 1.0
        assert R.math_reward("\\boxed{3}", "4") == 0.0
        p = R.get_default_pool()
        assert p.num_workers == 1 and p.timeout == GENEROUS
        pids = p.worker_pids
        R.close()
        assert all(_gone(pid) for pid in pids)
        assert R.math_reward("\\boxed{5}", "5") == 1.0  # a new default pool starts lazily
    finally:
        R.configure()
        R.close()


# --------------------------------------------------------------------------------------------------
# TRL adapters
# --------------------------------------------------------------------------------------------------


def _trl_kwargs():
    """Extra kwargs GRPOTrainer._calculate_rewards passes to every reward function."""
    return {"completion_ids": None, "trainer_state": object(), "log_extra": lambda *a, **k: None,
            "log_metric": lambda *a, **k: None}


def test_trl_math_reward_strings_and_messages(pool):
    fn = R.make_trl_math_reward(pool)
    prompts = ["Q1", "Q2", "Q3"]
    completions = [COT + "\\boxed{1}", COT + "\\boxed{2}", COT + "\\boxed{4}"]
    out = fn(prompts=prompts, completions=completions, answer=["1", "2", "3"], **_trl_kwargs())
    assert out == [1.0, 1.0, 0.0] and all(type(x) is float for x in out)
    messages = [[{"role": "assistant", "content": c}] for c in completions]
    conv_prompts = [[{"role": "user", "content": p}] for p in prompts]
    assert fn(prompts=conv_prompts, completions=messages, solution=["1", "0", "4"], **_trl_kwargs()) == [1.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="no 'answer'"):
        fn(prompts=prompts, completions=completions, **_trl_kwargs())
    assert R.trl_math_reward.__name__ == "trl_math_reward"
    assert pickle.loads(pickle.dumps(R.trl_math_reward)) is R.trl_math_reward


def test_trl_module_level_adapters_use_default_pool():
    R.configure(num_workers=1, timeout=GENEROUS)
    try:
        out = R.trl_math_reward(prompts=["q", "q"], completions=["\\boxed{2}", "\\boxed{3}"], answer=["2", "2"],
                                **_trl_kwargs())
        assert out == [1.0, 0.0]
        assert R.trl_reasoning_gym_reward(prompts=["q"], completions=["<answer>1</answer>"],
                                          entry=[{"answer": "1", "metadata": {}}], **_trl_kwargs()) == [0.0]
    finally:
        R.configure()
        R.close()


# --------------------------------------------------------------------------------------------------
# Reasoning Gym
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rg_entries():
    reasoning_gym = pytest.importorskip("reasoning_gym")
    entries = []
    for name in ("basic_arithmetic", "spell_backward", "leg_counting"):
        entries.extend(reasoning_gym.create_dataset(name, size=3, seed=7))
    return entries


def test_reasoning_gym_reward(pool, rg_entries):
    correct = [f"<think>working</think>\n<answer>{e['answer']}</answer>" for e in rg_entries]
    assert pool.reasoning_gym_rewards(correct, rg_entries) == [1.0] * len(rg_entries)
    wrong = ["<answer>definitely not it</answer>"] * len(rg_entries)
    assert all(r < 1.0 for r in pool.reasoning_gym_rewards(wrong, rg_entries))
    e = rg_entries[0]
    assert R.reasoning_gym_reward(f"<think>x</think>{e['answer']}", e, pool=pool) == 1.0  # after </think>
    assert R.reasoning_gym_reward(f"<think>{e['answer']}", e, pool=pool) == 0.0  # truncated reasoning
    assert R.reasoning_gym_reward(f"<answer>{e['answer']}</answer>", json.dumps(e), pool=pool) == 1.0
    for garbage_entry in (None, {}, {"metadata": {}}, {"metadata": {"source_dataset": "no_such_task"}},
                          "not json", {"answer": "1", "metadata": {"source_dataset": 3}}):
        assert R.reasoning_gym_reward("<answer>1</answer>", garbage_entry, pool=pool) == 0.0
    assert R.reasoning_gym_reward(None, e, pool=pool) == 0.0
    assert R.reasoning_gym_reward("<answer>" + "x" * 100_000 + "</answer>", e, pool=pool) == 0.0


def test_reasoning_gym_scorer_is_built_outside_the_deadline():
    """arc_agi's scorer loads the ARC data when it is built (0.4-1.3 s on a quiet machine, many times that on a
    busy one; the scoring itself takes microseconds): that one-time set-up runs before the task's clock starts,
    so a correct answer scores 1.0 with a deadline of half the set-up time measured now. The deadline scales
    with the machine's load and stays below the set-up, which would time out if it ran inside it."""
    reasoning_gym = pytest.importorskip("reasoning_gym")
    entry = reasoning_gym.create_dataset("arc_agi", size=1, seed=1)[0]
    t = time.monotonic()
    reasoning_gym.get_score_answer_fn("arc_agi")  # not cached: every call loads the data again
    setup = time.monotonic() - t
    with RewardPool(num_workers=1, timeout=setup / 2, preload=("math", "reasoning_gym")) as p:
        assert p.reasoning_gym_reward(f"<answer>{entry['answer']}</answer>", entry) == 1.0
        assert p.reasoning_gym_reward("<answer>0 0\n0 0</answer>", entry) < 0.5  # partial credit at most
        assert p.stats.timeouts == 0


def test_trl_reasoning_gym_reward(pool, rg_entries):
    fn = R.make_trl_reasoning_gym_reward(pool)
    completions = [[{"role": "assistant", "content": f"<answer>{e['answer']}</answer>"}] for e in rg_entries]
    kwargs = {
        "answer": [e["answer"] for e in rg_entries],
        "metadata": [json.dumps(e["metadata"]) for e in rg_entries],  # JSON column (Arrow-friendly)
        "question": [e["question"] for e in rg_entries],
    }
    assert fn(prompts=[e["question"] for e in rg_entries], completions=completions, **kwargs, **_trl_kwargs()) == [
        1.0
    ] * len(rg_entries)
    entry_col = {"entry": [json.dumps(e) for e in rg_entries]}
    assert fn(prompts=None, completions=completions, **entry_col, **_trl_kwargs()) == [1.0] * len(rg_entries)
    with pytest.raises(ValueError):
        fn(prompts=None, completions=completions, **_trl_kwargs())


# --------------------------------------------------------------------------------------------------
# Robustness: hung, crashing, slow and misbehaving workers (test tasks from tests/reward_tasks.py)
# --------------------------------------------------------------------------------------------------


def test_test_hooks_are_not_in_the_production_table():
    assert set(R._TASKS) == {"math", "reasoning_gym"}


def test_hung_worker_is_killed_and_replaced():
    with RewardPool(num_workers=2, timeout=GENEROUS) as p:
        assert p.math_rewards(["\\boxed{1}", "\\boxed{2}"], ["1", "2"]) == [1.0, 1.0]
        before = set(p.worker_pids)
        assert p._run([(T.hang, ())], timeout=0.5) == [0.0]  # ignores the soft timer, like C code; retried once
        assert (p.stats.timeouts, p.stats.hard_timeouts, p.stats.retries) == (2, 2, 1)
        killed = before - set(p.worker_pids)
        assert killed and all(_gone(pid) for pid in killed)
        assert p.math_reward("... \\boxed{\\frac{1}{2}}", "0.5") == 1.0
        assert p.math_reward("\\boxed{3}", "4") == 0.0
        # Both workers hung at once, then more work than workers: all detected, all replaced.
        assert p._run([(T.hang, ())] * 3, timeout=0.5) == [0.0] * 3
        assert p.stats.hard_timeouts == 2 + 3 * 2
        assert p.math_rewards(["\\boxed{2}", "\\boxed{3}"], ["2", "3"]) == [1.0, 1.0]
        assert len(p.worker_pids) == 2


def test_soft_timeout_is_a_timeout_and_keeps_the_worker():
    """The soft timer (1 s) ends an interruptible task long before the hard deadline (60 s), so the worker
    replies in time however busy the machine is."""
    with RewardPool(num_workers=1, timeout=GENEROUS, soft_timeout_fraction=1.0 / GENEROUS) as p:
        assert p._run([(T.sleep, (0.0,))], timeout=GENEROUS) == [1.0]
        pid = p.worker_pids
        failed = [False]
        assert p._run([(T.sleep, (3600,))], failed=failed) == [0.0]  # interruptible: ended by the soft timer
        assert failed == [True]
        assert p.worker_pids == pid
        assert (p.stats.timeouts, p.stats.hard_timeouts, p.stats.retries) == (2, 0, 1)
        assert p._run([(T.sleep, (0.0,))], timeout=GENEROUS) == [1.0]


def test_a_task_slow_on_its_first_attempt_is_retried_and_scores(tmp_path):
    """The first attempt is ended by the soft timer (2 s); the retry returns at once (microseconds of CPU), far
    within both limits on a busy machine."""
    with RewardPool(num_workers=1, timeout=GENEROUS, soft_timeout_fraction=2.0 / GENEROUS) as p:
        assert p._run([(T.slow_first_time, (str(tmp_path / "tried"),))]) == [1.0]
        assert (p.stats.timeouts, p.stats.retries) == (1, 1)


@pytest.mark.parametrize("cache_timeouts", [False, True])
def test_slow_correct_answer_scores_once_the_machine_is_free(tmp_path, cache_timeouts):
    """A correct answer that timed out on a starved machine is a timeout, not a cached 0.0: once the machine
    is free, the same (answer, gold) key is verified again and scores 1.0."""
    busy = tmp_path / "busy"
    busy.touch()
    key = ("math", "boxed", "142", "142")

    def score():
        return p._run_cached([key], lambda k: (T.slow_while_busy, (str(busy),)))

    with RewardPool(num_workers=1, timeout=1.0, cache_timeouts=cache_timeouts, timeout_ttl=3600) as p:
        assert score() == [0.0]
        assert (p.stats.timeouts, p.stats.retries) == (2, 1)
        assert key not in p._cache
        busy.unlink()  # the machine is free (a generous deadline: the test's own machine may not be)
        with _generous(p):
            if cache_timeouts:  # remembered as a timeout (not run again) until its time-to-live has passed
                assert score() == [0.0] and p.stats.remembered_timeouts == 1 and p.stats.timeouts == 2
                p._timed_out[key] = 0.0
            assert score() == [1.0]
            assert p._cache[key] == 1.0
            tasks = p.stats.tasks
            assert score() == [1.0] and p.stats.tasks == tasks  # a real answer is cached


def test_a_retry_gets_a_longer_deadline(tmp_path):
    """Issue 30: a right answer that needs more than the soft limit twice on a loaded machine (the Basel sum, an
    integral) was scored 0.0. The retry's deadline is ``retry_timeout_factor`` times the first: the task sees
    more than the first attempt's whole soft budget (1.6 s) left when its retry starts."""
    with RewardPool(num_workers=1, timeout=2.0, retry_timeout_factor=2.0) as p:
        assert p._run([(T.budget_above, (str(tmp_path / "tried"), 1.6))]) == [1.0]
        assert (p.stats.timeouts, p.stats.retries, p.stats.timed_out_tasks) == (1, 1, 0)
    with RewardPool(num_workers=1, timeout=2.0, retry_timeout_factor=1.0) as p:  # the old behaviour
        assert p._run([(T.budget_above, (str(tmp_path / "tried-again"), 1.6))]) == [0.0]
    with pytest.raises(ValueError, match="retry_timeout_factor"):
        RewardPool(num_workers=1, retry_timeout_factor=0.5)


BASEL = ("\\boxed{\\sum_{n=1}^{\\infty} \\frac{1}{n^2}}", "\\frac{\\pi^2}{6}")  # ~1.3 s of sympy on a quiet machine


def test_a_timeout_is_reported_not_silent():
    """An answer that runs out of time on every attempt scores 0.0 *as a timeout*: flagged in ``timeouts``, counted
    in ``stats.timed_out_tasks``, logged by the TRL adapter as ``rewards/math_timeouts`` (and remembered, flagged
    again); a wrong answer is not a timeout. 10 ms is far below what the sum takes on any machine."""
    logged = []
    with RewardPool(num_workers=1, timeout=0.01, retry_timeout_factor=2.0) as p:
        flags: list = []
        assert p.math_rewards([BASEL[0], BASEL[0]], [BASEL[1], BASEL[1]], timeouts=flags) == [0.0, 0.0]
        assert flags == [True, True] and p.stats.timed_out_tasks == 1 and p.stats.retries == 1
        fn = R.make_trl_math_reward(p)
        kwargs = {**_trl_kwargs(), "log_metric": lambda name, value: logged.append((name, value))}
        assert fn(prompts=["q"], completions=[BASEL[0]], answer=[BASEL[1]], **kwargs) == [0.0]
        assert logged == [("rewards/math_timeouts", 1.0)] and p.stats.remembered_timeouts == 1
    with RewardPool(num_workers=1, timeout=GENEROUS) as p:
        flags = []
        assert p.math_rewards([BASEL[0], "\\boxed{2}"], [BASEL[1], "3"], timeouts=flags) == [1.0, 0.0]
        assert flags == [False, False] and p.stats.timed_out_tasks == 0


def test_crashing_and_externally_killed_workers():
    with RewardPool(num_workers=2, timeout=30.0) as p:
        assert p.math_reward("\\boxed{1}", "1") == 1.0
        assert p._run([(T.exit_, ())]) == [0.0]  # dies mid-task: not retried
        assert p.stats.worker_deaths == 1 and p.stats.retries == 0
        assert p._run([(T.raise_, ())]) == [0.0]
        for pid in p.worker_pids:  # both idle workers killed behind the pool's back
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        assert p.math_rewards(["\\boxed{7}"] * 3 + ["\\boxed{8}"], ["7", "7", "7", "9"]) == [1.0, 1.0, 1.0, 0.0]
        assert len(p.worker_pids) == 2


def test_worker_outputs_are_sanitised(pool):
    tasks = [(T.value, (v,)) for v in (float("nan"), 5.0, -1.0, "x", None, 0.25, float("inf"))]
    assert pool._run(tasks) == [0.0, 1.0, 0.0, 0.0, 0.0, 0.25, 0.0]
    assert pool._run([("no_such_task", ())]) == [0.0]
    assert pool._run([("__sleep__", (0.0,))]) == [0.0]  # the old test hooks are gone from production


def _rendezvous(p, folder, n, threads):
    """Run ``n`` rendezvous tasks (one batch, or one per thread); each scores 1.0 only if all ``n`` ran at
    once. Generous limits: the check is logical (who saw whom), not a wall clock."""
    task = (T.rendezvous, (str(folder), n, 60.0))
    if not threads:
        return p._run([task] * n)
    results = [None] * n

    def work(i):
        results[i] = p._run([task])[0]

    pool_threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for th in pool_threads:
        th.start()
    for th in pool_threads:
        th.join(300)
    return results


def test_batch_runs_in_parallel(tmp_path):
    with RewardPool(num_workers=3, timeout=120.0) as p:
        assert _rendezvous(p, tmp_path, 3, threads=False) == [1.0] * 3


def test_concurrent_callers_share_all_workers(tmp_path):
    """N threads with one slow task each, N workers: all N tasks run at the same time (before, one caller's
    batch held the pool and the others waited while workers sat idle)."""
    n = 4
    with RewardPool(num_workers=n, timeout=120.0) as p:
        assert _rendezvous(p, tmp_path, n, threads=True) == [1.0] * n
        assert p.stats.timeouts == 0 and len(p.worker_pids) == n


def test_a_caller_is_served_while_another_runs_a_long_batch(tmp_path):
    with RewardPool(num_workers=2, timeout=120.0) as p:
        p._run([(T.sleep, (0.0,))] * 2)  # both workers up
        busy = tmp_path / "busy"
        busy.touch()
        long_batch = threading.Thread(target=p._run, args=([(T.slow_while_busy, (str(busy),))],))
        long_batch.start()
        try:
            # The other worker serves this caller while the first is still busy with the long task.
            assert p.math_rewards(["\\boxed{2}", "\\boxed{3}"], ["2", "4"]) == [1.0, 0.0]
            assert busy.exists() and long_batch.is_alive()
        finally:
            busy.unlink()
            long_batch.join(60)
        assert not long_batch.is_alive()


def test_thread_safety(pool):
    results = []

    def work(k):
        results.append(pool.math_rewards([f"\\boxed{{{k}}}"] * 20, [str(k)] * 20))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert results == [[1.0] * 20] * 4


def test_close_reaps_workers_and_pool_restarts():
    p = RewardPool(num_workers=2, timeout=GENEROUS)
    assert p.math_reward("\\boxed{1}", "1") == 1.0
    pids = p.worker_pids
    p.close()
    assert p.worker_pids == [] and all(_gone(pid) for pid in pids)
    assert p.math_reward("\\boxed{1}", "1") == 1.0
    p.close()


def test_fork_and_interpreter_exit_leave_no_processes(tmp_path):
    """A forked child gets its own workers (not the parent's); at exit, without close(), the atexit
    hooks stop and reap every worker and the fork server, in parent and child."""
    script = textwrap.dedent(
        """
        import os, sys
        import multiprocessing.forkserver as fs
        from brorl import rewards as R
        def pids():
            return " ".join(map(str, R.get_default_pool().worker_pids + [fs._forkserver._forkserver_pid]))
        if __name__ == "__main__":
            assert R.math_reward("\\\\boxed{3}", "3") == 1.0
            parent_pids = pids()
            r, w = os.pipe()
            child = os.fork()
            if child == 0:
                os.close(r)
                ok = R.math_reward("\\\\boxed{5}", "5") == 1.0 and R.math_reward("\\\\boxed{5}", "6") == 0.0
                os.write(w, (pids() + (" ok" if ok else " bad")).encode())
                sys.exit(0)  # normal exit: atexit hooks run in the child too
            os.close(w)
            child_out = os.read(r, 1000).decode()
            os.waitpid(child, 0)
            print(parent_pids)
            print(child_out)
            # no close(): the atexit hooks must clean up
        """
    )
    path = tmp_path / "exit_script.py"
    path.write_text(script)
    # The unit of time: one interpreter that scores one answer and exits, measured now (scales with load).
    t = time.monotonic()
    base = subprocess.run([sys.executable, "-c", "from brorl import rewards as R\n"
                           "assert R.math_reward('\\\\boxed{3}', '3') == 1.0"], timeout=SUBPROCESS_LIMIT)
    assert base.returncode == 0
    unit = time.monotonic() - t
    t = time.monotonic()
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=SUBPROCESS_LIMIT)
    assert proc.returncode == 0, proc.stderr
    parent_line, child_line = proc.stdout.splitlines()
    assert child_line.endswith(" ok"), proc.stdout
    parent_pids = [int(x) for x in parent_line.split()]
    child_pids = [int(x) for x in child_line.split()[:-1]]
    assert len(parent_pids) == 3 and len(child_pids) == 3 and not set(parent_pids) & set(child_pids)
    time.sleep(0.2)
    assert all(_gone(pid) for pid in parent_pids + child_pids)
    assert time.monotonic() - t < 4 * unit + MARGIN  # parent and child each start a pool; nothing stalls exit


def test_workers_do_not_reimport_main_script(tmp_path):
    """A script without a ``__main__`` guard: workers (and their replacements) must not re-run it."""
    path = tmp_path / "unguarded.py"
    path.write_text(textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {os.path.dirname(T.__file__)!r})
        import reward_tasks
        from brorl.rewards import RewardPool
        print("MAIN-RAN", flush=True)
        p = RewardPool(num_workers=2, timeout={GENEROUS})
        assert p._run([(reward_tasks.hang, ())], timeout=0.5) == [0.0]  # forces replacement workers
        assert p.math_rewards(["\\\\boxed{{2}}"] * 4, ["2", "2", "2", "3"]) == [1.0, 1.0, 1.0, 0.0]
        """
    ))
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=SUBPROCESS_LIMIT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("MAIN-RAN") == 1, proc.stdout


def test_spawn_start_method():
    with RewardPool(num_workers=1, timeout=GENEROUS, start_method="spawn") as p:
        assert p.math_rewards(["\\boxed{\\frac{1}{2}}", "\\boxed{3}"], ["0.5", "4"]) == [1.0, 0.0]


def test_timeouts_are_remembered_unless_disabled():
    """A real math input that hangs in math-verify (hard timeout): remembered as a timeout (not re-run
    within ``timeout_ttl``) unless ``cache_timeouts=False``; never stored as a reward."""
    slow = "\\boxed{{{{{{{{{{{{1}}}}}}}}}}}}"
    with RewardPool(num_workers=1, timeout=0.25, soft_timeout_fraction=0, timeout_retries=0) as p:
        assert p.math_reward(slow, "1") == 0.0 and p.stats.timeouts == 1
        assert p.math_reward(slow, "1") == 0.0
        assert p.stats.timeouts == 1 and p.stats.remembered_timeouts == 1 and not p._cache
    with RewardPool(num_workers=1, timeout=0.25, soft_timeout_fraction=0, timeout_retries=0,
                    cache_timeouts=False) as p:
        assert p.math_rewards([slow, slow], ["1", "1"]) == [0.0, 0.0]  # de-duplicated in the batch
        assert p.math_reward(slow, "1") == 0.0
        assert p.stats.timeouts == 2 and not p._cache


def test_default_pool_reads_environment(monkeypatch):
    R.close()
    R.configure()
    monkeypatch.setenv("BRORL_REWARD_WORKERS", "1")
    monkeypatch.setenv("BRORL_REWARD_TIMEOUT", "2.5")
    try:
        p = R.get_default_pool()  # creating a pool starts no process
        assert (p.num_workers, p.timeout, p.worker_pids) == (1, 2.5, [])
    finally:
        R.close()


def test_config_validation():
    with pytest.raises(ValueError):
        RewardPool(timeout=0)
    with pytest.raises(ValueError):
        RewardPool(start_method="fork")
    with pytest.raises(ValueError):
        RewardPool(preload=("chess",))


# --------------------------------------------------------------------------------------------------
# Fuzzing
# --------------------------------------------------------------------------------------------------

LATEX_TOKENS = [
    "1", "2", "3", "9", "0", "x", "y", "n", "\\pi", "e", "i", "+", "-", "*", "/", "^", "_", "=", "<", ">",
    "(", ")", "[", "]", "{", "}", "\\{", "\\}", "|", ",", ".", "!", "'", "\\frac", "\\dfrac", "\\sqrt",
    "\\sqrt[3]", "\\cdot", "\\times", "\\div", "\\left(", "\\right)", "\\left[", "\\right]", "\\infty",
    "\\sin", "\\cos", "\\log", "\\ln", "\\sum", "\\int", "\\prod", "\\lim", "\\to", "\\binom", "\\cup",
    "\\cap", "\\in", "\\text{", "\\mathrm{", "\\begin{pmatrix}", "\\end{pmatrix}", "&", "\\\\", "%", "$",
    "\\boxed{", "\\", "^{", "_{", "\\%", "\\circ", "\\pm", "\\mp", "\\le", "\\ge", "\\neq", "10^{", " ",
]  # fmt: skip


def adversarial_cases(seed: int = 1234, n_bytes: int = 150, n_soup: int = 1050) -> list[tuple]:
    """Deterministic adversarial (completion, gold) pairs: size bombs, nesting bombs, number bombs,
    malformed LaTeX, unicode, NUL bytes, random bytes, random LaTeX token soup, non-string inputs."""
    rng = random.Random(seed)
    big = "1" + "0" * 10_000
    fixed = [
        "x" * 100_000, "{" * 100_000, "}" * 100_000, "\\boxed{" * 15_000, "\\boxed{" + "{" * 100_000,
        "\\boxed{" + "9" * 100_000 + "}", "\\boxed{9^{9^{9^{9}}}}", "\\boxed{10^{10^{10}}}",
        "\\boxed{2^{2^{2^{2^{2^{2}}}}}}", "\\boxed{100000!}", "\\boxed{(10^{100})!}", "\\boxed{9^{9^{9}}}",
        "\\boxed{10^{10000}}", "\\boxed{1e1000000}", "\\boxed{1e309}", "\\boxed{" + big + "}",
        "The answer is " + big, "the answer is 10**10000", big, "\\boxed{", "\\boxed{3", "\\boxed{\\frac{1}{",
        "\\boxed{\\sqrt[}", "\\boxed{\\left(}", "\\boxed{\\begin{pmatrix} 1 & 2 \\\\ 3}", "\\boxed{\\\\\\\\\\\\}",
        "\\boxed{^^^^^^}", "\\boxed{_{_{_{_{}", "\\boxed{\\frac\\frac\\frac}", "\\boxed{}", "\\boxed{ }",
        "\\boxed{\\}", "\\boxed{\x00}", "\x00" * 1000 + "\\boxed{1\x002}", "\\boxed{１２３}", "\\boxed{😀}",
        "\\boxed{\u202e123}", "\\boxed{a\u0301\u0302\u0303}", "答案是 \\boxed{三}", "\\boxed{\ud800}",
        "\\boxed{" + "\\sqrt{" * 40 + "2" + "}" * 40 + "}", "\\boxed{" + "(" * 45 + "1" + ")" * 45 + "}",
        "\\boxed{" + "1+" * 400 + "1}", "\\boxed{" + "x^" * 300 + "2}", "\\boxed{\\sum_{n=1}^{\\infty} n^{-s}}",
        "\\boxed{\\int_0^\\infty e^{-x^2} dx}", "\\boxed{x^{x^{x^{x^{x}}}}=2}", "\\boxed{\\prod_{k=1}^{10^{9}} k}",
        "\\boxed{\\binom{10^{9}}{10^{8}}}", "\\boxed{\\begin{pmatrix}" + " & ".join(["1"] * 300) + "\\end{pmatrix}}",
        "answer: " + "9" * 5000, "answer is $" + "\\frac{" * 30 + "$", "\\fbox{3", "\\boxed" + " " * 100_000 + "{3}",
        "<think>" * 20_000, "".join(chr(i) for i in range(1, 0x3000, 7)),
    ]  # fmt: skip
    cases = [(c, "3") for c in fixed]
    cases += [("\\boxed{" + "{" * n + "1" + "}" * n + "}", "1") for n in (5, 12, 17, 100, 10_000)]
    for _ in range(n_bytes):  # random bytes decoded leniently
        raw = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
        mode = rng.choice(["replace", "surrogateescape", "ignore", "latin-1"])
        text = raw.decode("latin-1") if mode == "latin-1" else raw.decode("utf-8", errors=mode)
        cases.append((text if rng.random() < 0.5 else "\\boxed{" + text + "}", "3"))
    for _ in range(n_soup):  # random LaTeX token soup, in and out of \boxed{}, also as gold
        soup = "".join(rng.choice(LATEX_TOKENS) for _ in range(rng.randrange(1, 40)))
        r = rng.random()
        text = ("Let me think. So \\boxed{" + soup + "}") if r < 0.6 else ("The answer is " + soup if r < 0.8 else soup)
        cases.append((text, rng.choice(["3", "\\frac{1}{2}", "x^2", "(1,2)", soup[:20] or "0"])))
    weird = [None, 0, 1.5, b"\\boxed{3}", bytearray(b"\xff\xfe"), [], {}, [{"role": "assistant"}],
             [{"role": "assistant", "content": None}], object(), float("nan"), ["\\boxed{3}"], set()]
    for w in weird:
        cases += [(w, "3"), ("\\boxed{3}", w)]
    return cases


def _assert_pool_healthy(p):
    with _generous(p):
        assert p.math_reward("... \\boxed{\\frac{1}{2}}", "0.5") == 1.0
        assert p.math_reward("\\boxed{3}", "4") == 0.0
        assert p.math_reward(COT + "\\boxed{2\\sqrt{3}}", "\\sqrt{12}") == 1.0


def _call_bound(p) -> float:
    """Longest a single call may take: every attempt ends at the timeout, plus a wait for a replacement
    worker (in units of the measured start-up time) and IPC."""
    return (p.timeout_retries + 1) * p.timeout + 4 * p.startup + MARGIN


def test_fuzz_single_calls(fuzz_pool):
    cases = adversarial_cases()
    assert len(cases) > 1200
    worst = 0.0
    for completion, gold in cases:
        t = time.monotonic()
        r = R.math_reward(completion, gold, pool=fuzz_pool)
        dt = time.monotonic() - t
        worst = max(worst, dt)
        assert type(r) is float and r in (0.0, 1.0), (completion, gold, r)
        assert dt < _call_bound(fuzz_pool), (repr(completion)[:200], dt, fuzz_pool.startup)
    _assert_pool_healthy(fuzz_pool)


def test_fuzz_batch_via_trl_adapter(fuzz_pool):
    cases = adversarial_cases(seed=99, n_bytes=100, n_soup=600)
    fn = R.make_trl_math_reward(fuzz_pool)
    completions = [c for c, _ in cases]
    tasks, kills = fuzz_pool.stats.tasks, fuzz_pool.stats.hard_timeouts + fuzz_pool.stats.worker_deaths
    t = time.monotonic()
    out = fn(prompts=[""] * len(cases), completions=completions, answer=[g for _, g in cases], **_trl_kwargs())
    elapsed = time.monotonic() - t
    assert len(out) == len(cases) and all(type(r) is float and 0.0 <= r <= 1.0 for r in out)
    # Every task is bounded by the timeout, the batch is spread over both workers, and each killed worker
    # costs at most a replacement's start-up.
    tasks = fuzz_pool.stats.tasks - tasks
    kills = fuzz_pool.stats.hard_timeouts + fuzz_pool.stats.worker_deaths - kills
    assert elapsed < tasks * FUZZ_TIMEOUT / 2 + kills * fuzz_pool.startup + 30
    _assert_pool_healthy(fuzz_pool)


def test_fuzz_hard_kills_on_real_slow_inputs():
    """With the soft timer off, slow math-verify inputs must be hard-killed; the pool keeps working."""
    slow = ["\\boxed{" + "(" * 30 + "1" + ")" * 30 + "}", "\\boxed{{{{{{{{{{{{1}}}}}}}}}}}}",
            "\\boxed{\\int_0^\\infty e^{-x^2} dx}", "\\boxed{" + "[" * 12 + "1" + "]" * 12 + "}",
            "\\boxed{" + "(" * 12 + "1" + ")" * 12 + "}"]
    # Measured on a quiet 2-core machine, each non-prefiltered input needs 0.9-1.5 s of math-verify (the
    # 30-deep one is rejected by the nesting cap first), so at least 3 of them hit the 0.25 s hard timeout
    # (0.5 s once let two finish in time on a loaded machine).
    with RewardPool(num_workers=2, timeout=0.25, cache_size=0, soft_timeout_fraction=0, timeout_retries=0) as p:
        p.startup = _startup_seconds(p)
        _assert_pool_healthy(p)
        for text in slow:
            t = time.monotonic()
            assert p.math_reward(text, "3") == 0.0
            assert time.monotonic() - t < _call_bound(p)
        assert p.stats.hard_timeouts >= 3
        t = time.monotonic()
        assert p.math_rewards(slow * 2, ["3"] * 10) == [0.0] * 10
        assert time.monotonic() - t < 5 * _call_bound(p)
        _assert_pool_healthy(p)


def test_fuzz_reasoning_gym(pool, rg_entries):
    rng = random.Random(5)
    cases = adversarial_cases(seed=3, n_bytes=50, n_soup=100)
    completions = [c for c, _ in cases] + ["<answer>" + c + "</answer>" for c, _ in cases if isinstance(c, str)]
    entries = [rng.choice(rg_entries) for _ in completions]
    out = pool.reasoning_gym_rewards(completions, entries)
    assert len(out) == len(completions) and all(type(r) is float and 0.0 <= r <= 1.0 for r in out)
    e = rg_entries[0]
    assert pool.reasoning_gym_reward(f"<answer>{e['answer']}</answer>", e) == 1.0
