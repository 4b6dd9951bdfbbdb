"""Adversarial probe of the rewards (issue 30, item 5): a policy must not be paid for a wrong answer, and a right
answer must not be refused for its spelling.

Each case is ``(completion, gold, expected reward)``; ``ISSUE`` marks the cases the issue's adversarial pass found,
the others are this probe's own attempts. Run alone (``python -m pytest tests/test_reward_probe.py -q``) it prints
nothing but failures; ``python tests/test_reward_probe.py`` prints the counts (cases tried, failures) per class.
The table of decisions these cases pin is in docs/evaluation.md ("Reward decisions").
"""

from __future__ import annotations

import sys

import pytest

from brorl import rewards as R
from brorl.rewards import RewardPool

GENEROUS = 60.0  # the cases check answers, not timeouts: a starved machine still passes

# Separators that list several values in one box: a list is not an answer unless the gold is one.
SEPARATORS = [r"\vee", r"\wedge", r"\lor", r"\land", r"\mid", r"\cup", r"\cap", "|", r"\\", r"\oplus",
              r"\setminus", r"\parallel", r"\|", r"\vert", "&", r"\&", r"\text{ or }", r"\textrm{ or }",
              r"\mathrm{or}", r"\text{ and }", ";", r"\;", r"\quad", r"\qquad", "~", r"\ ", r"\hspace{1em}",
              r"\\[2pt]", r"\newline", "\u2228", "\u222a", "\u2227"]
ISSUE_SEPARATORS = {r"\vee", r"\wedge", r"\lor", r"\mid", r"\cup", "|", r"\\", r"\text{ or }"}

MATH_LISTS = [  # (completion, gold, expected, from the issue)
    *[(rf"\boxed{{12 {sep} 13}}", g, 0.0, sep in ISSUE_SEPARATORS) for sep in SEPARATORS for g in ("13", "12")],
    *[(rf"\boxed{{12{sep}13}}", "13", 0.0, False) for sep in (r"\vee", "|", r"\\", r"\cup")],
    (r"\boxed{\begin{aligned}x&=12\\&=13\end{aligned}}", "13", 0.0, True),
    (r"\boxed{\begin{aligned}12\\13\end{aligned}}", "13", 0.0, True),
    (r"\boxed{\begin{cases}12\\13\end{cases}}", "13", 0.0, False),
    (r"\boxed{\begin{array}{c}12\\13\end{array}}", "13", 0.0, False),
    (r"\boxed{\substack{12\\13}}", "13", 0.0, False),
    (r"\boxed{x = 12 \vee x = 13}", "13", 0.0, False),
    (r"\boxed{x = 12 \text{ or } x = 13}", "13", 0.0, False),
    (r"\boxed{x=12 \\ x=13}", "13", 0.0, False),
    (r"\boxed{x \le 3 \vee x \ge 5}", "5", 0.0, False),
    (r"\boxed{12 \mathbin{\vee} 13}", "13", 0.0, False),
    (r"\boxed{12, 13}", "13", 0.0, False),
    (r"\boxed{\{12, 13\}}", "13", 0.0, False),
    (r"\boxed{13 \pm 1}", "13", 0.0, False),
    ("The answer is $12 \\vee 13$.", "13", 0.0, False),
    ("The answer is 12 | 13", "13", 0.0, False),
    ("The answer is 12 \\\\ 13", "13", 0.0, False),
    # no box: the last number of the tail pays only when its line states it alone (issue 30's probe, own attempts)
    ("I think it is 12 or 13", "13", 0.0, False),
    ("The total is 12, 13", "13", 0.0, False),
    ("we get 12 | 13", "13", 0.0, False),
    ("12 13", "13", 0.0, False),
    ("So 3 + 4 = 8", "8", 0.0, False),
    ("which is probably 13", "13", 0.0, False),
    ("so we get $\\frac{1+\\sqrt{5}}{2}$", "2", 0.0, False),
    ("the area is $x^2$", "2", 0.0, False),
    ("So 3 + 4 = 7", "7", 1.0, False),
    ("which gives 12 in total", "12", 1.0, False),
    # markup that hides one value behind another
    *[(rf"\boxed{{{t}}}", "13", 0.0, False) for t in (
        r"x \in \{12, 13\}", r"(12, 13)", r"13\ (12)", r"\overset{12}{13}", r"\cancel{12} 13", r"\sout{12}13",
        r"\color{red}{12}13", r"\phantom{12}13", r"\textcolor{white}{12} 13", r"{}^{12}13", r"\not 12 13",
        r"\mathrm{12}\mathrm{13}", r"12\hphantom{}13", r"\underbrace{12}_{13}", r"\stackrel{12}{13}", r"12 \atop 13",
        r"12 \text{ } 13", r"12\text{, }13", r"\{12\} \cup \{13\}", r"\text{either}~12~13", r"12 \approx 13",
        r"12 \sim 13", r"12 \neq 13", r"12 < 13", r"12 \leq x \leq 13", r"12, \ldots, 13", r"12 \to 13",
        r"12 \equiv 13",
        r"12 \quad\text{(or } 13)", "1\u20093", "1\u00a03", "12\u200a13", r"1\;3", r"1\hspace{0pt}3")],
    # juxtaposed numbers: read by math-verify as their sum (or product)
    (r"\boxed{12 13}", "25", 0.0, True),
    (r"\boxed{2 3}", "5", 0.0, True),
    (r"\boxed{2 3}", "6", 0.0, False),
    (r"\boxed{12 13}", "156", 0.0, False),
    (r"\boxed{12 13}", "13", 0.0, False),
    (r"\boxed{-3 4}", "-7", 0.0, False),
    (r"\boxed{1 2 3}", "6", 0.0, False),
    (r"\boxed{12.5 13}", "162.5", 0.0, False),
    (r"\boxed{12 \quad 13}", "25", 0.0, False),
    (r"\boxed{12\ 13}", "25", 0.0, False),
    (r"\boxed{12 \, 13}", "25", 0.0, False),
    ("The answer is 12 13", "25", 0.0, False),
    # a list is an answer when the gold is that list
    (r"\boxed{12 \vee 13}", r"12 \vee 13", 1.0, False),
    (r"\boxed{12 13}", "12 13", 1.0, False),
    (r"\boxed{1, 2}", "1, 2", 1.0, False),
    (r"\boxed{\{1,2\}}", "1, 2", 1.0, False),
    (r"\boxed{1 \text{ and } 2}", "1, 2", 1.0, False),
    # not lists: these stay right
    (r"\boxed{(1,2) \cup (3,4)}", r"(1,2) \cup (3,4)", 1.0, False),
    (r"\boxed{(-\infty, 1) \cup (3, \infty)}", r"(-\infty,1)\cup(3,\infty)", 1.0, False),
    (r"\boxed{|-3|}", "3", 1.0, False),
    (r"\boxed{2 \sqrt{3}}", r"2\sqrt3", 1.0, False),
    (r"\boxed{2 \pi}", r"2\pi", 1.0, False),
    (r"\boxed{12 \cdot 13}", "156", 1.0, False),
    (r"\boxed{12 \times 13}", "156", 1.0, False),
    (r"\boxed{1 000}", "1000", 1.0, False),
    (r"\boxed{1\,000}", "1000", 1.0, False),
    (r"\boxed{1{,}000}", "1000", 1.0, False),
    (r"\boxed{12\,345\,678}", "12345678", 1.0, False),
    (r"\boxed{12\hspace{1em}345}", "12345", 1.0, False),
    (r"\boxed{12\hspace{1em}345}", "121345", 0.0, False),
    (r"\boxed{\begin{pmatrix} 1 \\ 2 \end{pmatrix}}", r"\begin{pmatrix}1\\2\end{pmatrix}", 1.0, False),
    (r"\boxed{x = 13}", "13", 1.0, False),
    (r"\boxed{13 \text{ cm}}", "13", 1.0, False),
    (r"\boxed{\text{(B)}}", "B", 1.0, False),
    (r"\boxed{\max(12, 13)}", "13", 1.0, False),
]

MATH_UNICODE = [
    (r"\boxed{１２}", "12", 1.0, True),  # full-width
    (r"\boxed{١٢}", "12", 1.0, True),  # Arabic-Indic
    ("\\boxed{\U0001d7cf\U0001d7d0}", "12", 1.0, True),  # mathematical bold
    (r"\boxed{۱۲}", "12", 1.0, False),  # extended Arabic-Indic (Persian)
    (r"\boxed{१२}", "12", 1.0, False),  # Devanagari
    (r"\boxed{\frac{１}{２}}", "0.5", 1.0, False),
    (r"\boxed{１３}", "12", 0.0, False),
    (r"\boxed{１２}", "１２", 1.0, False),  # a gold written in full-width digits
    ("\\boxed{\u221212}", "-12", 1.0, False),  # U+2212 MINUS SIGN
    (r"\boxed{－１２}", "-12", 1.0, False),  # full-width hyphen-minus
    ("\\boxed{2\u00b2}", "22", 0.0, False),  # a superscript is not a digit
    ("The answer is ١٢.", "12", 1.0, False),
]

MATH_FLOATS = [
    (r"\boxed{0.5000001}", r"\frac{1}{2}", 0.0, True),
    (r"\boxed{0.4999999}", r"\frac{1}{2}", 0.0, False),
    (r"\boxed{0.5000004}", "0.5", 0.0, False),
    (r"\boxed{2.7400001}", "2.74", 0.0, False),
    (r"\boxed{1000000.0000001}", "1000000", 0.0, False),
    (r"\boxed{0.333333}", r"\frac{1}{3}", 0.0, False),  # decision: exact, as ProRL's (DeepScaleR's) grader
    (r"\boxed{3.14159}", r"\pi", 0.0, False),
    (r"\boxed{0.5}", r"\frac{1}{2}", 1.0, False),
    (r"\boxed{0.50}", r"\frac12", 1.0, False),
    (r"\boxed{\frac{1}{2}}", "0.5", 1.0, False),
    (r"\boxed{1.5}", r"\frac{3}{2}", 1.0, False),
    (r"\boxed{2.740}", "2.74", 1.0, False),
    (r"\boxed{0.1}", r"\frac{1}{10}", 1.0, False),
    (r"\boxed{0.5\pi}", r"\frac{\pi}{2}", 1.0, False),
    (r"\boxed{10^{-7}}", "0.0000001", 1.0, False),
    (r"\boxed{1.2 \times 10^{3}}", "1200", 1.0, False),
]

# Right closed forms that need a few seconds of sympy: they pay with a generous deadline (the timeout
# bookkeeping is tested in tests/test_rewards.py).
MATH_SLOW = [
    (r"\boxed{\int_0^1 x^2 \, dx}", r"\frac{1}{3}", 1.0, True),
    (r"\boxed{\sum_{n=1}^{\infty} \frac{1}{n^2}}", r"\frac{\pi^2}{6}", 1.0, True),
]

MATH_CASES = {"lists": MATH_LISTS, "unicode": MATH_UNICODE, "floats": MATH_FLOATS, "slow": MATH_SLOW}

# Reasoning Gym: the answer is read where the math reward reads it (after the last </think>).
RG_CASES = [  # (completion template, expected, from the issue); {a} is the gold answer
    ("<think><answer>{a}</answer></think>", 0.0, True),
    ("<think>so <answer>{a}</answer></think> I am not sure.", 0.0, True),
    ("<think><answer>{a}</answer>", 0.0, False),
    ("<think>x</think><answer><answer>{a}</answer></answer>", 1.0, True),
    ("<answer><answer>{a}</answer></answer>", 1.0, True),
    ("<think>x</think><answer>{a}</answer>", 1.0, False),
    ("<answer>{a}</answer>", 1.0, False),
    ("<think>x</think>{a}", 1.0, False),
    ("<think><answer>{a}</answer></think><answer>nope</answer>", 0.0, False),
    ("<answer>nope</answer><think><answer>{a}</answer></think>", 0.0, False),
    ("Let me see. <answer>{a}</answer></think> <answer>{a}</answer>", 1.0, False),
]


@pytest.fixture(scope="module")
def pool():
    with RewardPool(num_workers=2, timeout=GENEROUS, preload=("math", "reasoning_gym")) as p:
        yield p


def _ids(cases):
    return [f"{i}-{'issue' if c[-1] else 'own'}" for i, c in enumerate(cases)]


@pytest.mark.parametrize("kind", sorted(MATH_CASES))
def test_math_probe(pool, kind):
    """Every case of the class scores as expected (one assertion per class, listing all failures)."""
    cases = MATH_CASES[kind]
    got = pool.math_rewards([c for c, *_ in cases], [g for _, g, *_ in cases])
    failures = [(c, g, e, v) for (c, g, e, _), v in zip(cases, got) if v != e]
    assert not failures, "\n".join(f"{c!r} vs {g!r}: expected {e}, got {v}" for c, g, e, v in failures)


@pytest.fixture(scope="module")
def rg_entry():
    reasoning_gym = pytest.importorskip("reasoning_gym")
    return reasoning_gym.create_dataset("basic_arithmetic", size=1, seed=7)[0]


def test_reasoning_gym_probe(pool, rg_entry):
    completions = [t.format(a=rg_entry["answer"]) for t, *_ in RG_CASES]
    got = pool.reasoning_gym_rewards(completions, [rg_entry] * len(completions))
    failures = [(c, e, v) for c, (_, e, _), v in zip(completions, RG_CASES, got) if v != e]
    assert not failures, "\n".join(f"{c!r}: expected {e}, got {v}" for c, e, v in failures)


def _count() -> int:  # pragma: no cover - the probe's report (python tests/test_reward_probe.py)
    import reasoning_gym

    entry = reasoning_gym.create_dataset("basic_arithmetic", size=1, seed=7)[0]
    total = failed = 0
    with RewardPool(num_workers=2, timeout=GENEROUS, preload=("math", "reasoning_gym")) as p:
        for kind, cases in [*MATH_CASES.items(), ("reasoning_gym", RG_CASES)]:
            if kind == "reasoning_gym":
                got = p.reasoning_gym_rewards([t.format(a=entry["answer"]) for t, *_ in cases], [entry] * len(cases))
                expected, issue = [c[1] for c in cases], [c[2] for c in cases]
            else:
                got = p.math_rewards([c[0] for c in cases], [c[1] for c in cases])
                expected, issue = [c[2] for c in cases], [c[3] for c in cases]
            bad = [v != e for v, e in zip(got, expected)]
            n_issue = sum(issue)
            bad_issue = sum(b for b, i in zip(bad, issue) if i)
            print(f"{kind:14s} {len(cases):4d} cases ({n_issue} from the issue), {sum(bad):3d} failures "
                  f"({bad_issue} of the issue's)")
            for c, v, e, b in zip(cases, got, expected, bad):
                if b:
                    print(f"    {c[0]!r} vs {c[1]!r}: got {v}, expected {e}")
            total += len(cases)
            failed += sum(bad)
    print(f"total          {total:4d} cases, {failed:3d} failures")
    return failed


if __name__ == "__main__":  # pragma: no cover
    sys.exit(1 if _count() else 0)
