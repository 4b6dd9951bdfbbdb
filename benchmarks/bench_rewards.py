"""Throughput of the math reward: rewards/s for realistic completions through brorl.rewards' pool.

What: generates N (default 10,000) chain-of-thought-like completions ending in ``\\boxed{...}``
(integers, fractions, decimals, square-root expressions; about 30% wrong; golds in mixed formats, so
math-verify has to do real equivalence checks), then scores them

1. cold: one batch, cache off -- every completion is verified by math-verify in a worker;
2. GRPO-like: batches of 512 completions for 32-prompt groups, cache on (repeated answers within a
   group are verified once), which is what a training step sees;
3. concurrent callers: 4 threads per worker, each scoring one slow answer (math-verify needs about a
   second for an integral), against the same answers scored one after another: with the pool shared by
   all callers the wall time is about serial / workers.

Why: the grader runs inside the RL loop; this tells whether it can keep up with sampling.

Run: ``python benchmarks/bench_rewards.py [--n 10000] [--workers 2] [--timeout 3]``
"""

from __future__ import annotations

import argparse
import random
import threading
import time

from brorl.rewards import RewardPool

FILLER = [
    "Let's think step by step.",
    "First, we rewrite the equation in standard form.",
    "Substituting the value back, we check that both sides agree.",
    "By the Pythagorean theorem, $a^2 + b^2 = c^2$.",
    "We factor the quadratic as $(x - 2)(x + 3) = 0$.",
    "The sum of the first $n$ integers is $\\frac{n(n+1)}{2}$.",
    "Hmm, wait, let me double-check the arithmetic here.",
    "Multiplying both sides by $4$ gives $4x = 12$.",
    "So the probability is the ratio of favourable to total outcomes.",
    "Taking square roots, $x = \\pm\\sqrt{5}$, and only the positive root is valid.",
]


def _answer(rng: random.Random) -> tuple[str, str, str]:
    """(predicted-if-correct LaTeX, gold, a wrong prediction) in one of several answer shapes."""
    kind = rng.random()
    if kind < 0.35:
        n = rng.randint(-50, 2000)
        return str(n), str(n), str(n + rng.choice([-2, -1, 1, 3]))
    if kind < 0.6:
        p, q = rng.randint(1, 30), rng.randint(2, 31)
        pred = rng.choice([f"\\frac{{{p}}}{{{q}}}", f"\\dfrac{{{p}}}{{{q}}}", f"{p}/{q}"])
        return pred, f"\\frac{{{p}}}{{{q}}}", f"\\frac{{{p + 1}}}{{{q}}}"
    if kind < 0.75:
        p = rng.choice([1, 2, 4, 5, 8])
        q = rng.choice([2, 4, 5, 8, 10])
        return f"{p / q:g}", f"\\frac{{{p}}}{{{q}}}", f"{p / q + 0.1:g}"
    if kind < 0.95:
        a, b = rng.randint(2, 9), rng.choice([2, 3, 5, 6, 7])
        return f"{a}\\sqrt{{{b}}}", f"\\sqrt{{{a * a * b}}}", f"{a + 1}\\sqrt{{{b}}}"
    a, b = rng.randint(1, 9), rng.randint(2, 9)
    return f"\\frac{{{a}\\sqrt{{3}}}}{{{b}}}", f"\\frac{{{a}\\sqrt3}}{{{b}}}", f"\\frac{{{a}}}{{{b}}}"


def make_completions(n: int, seed: int = 0, wrong_fraction: float = 0.3) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    completions, golds = [], []
    for _ in range(n):
        right, gold, wrong = _answer(rng)
        body = " ".join(rng.choice(FILLER) for _ in range(rng.randint(5, 40)))
        pred = wrong if rng.random() < wrong_fraction else right
        completions.append(f"{body}\n\nTherefore, the final answer is $\\boxed{{{pred}}}$.")
        golds.append(gold)
    return completions, golds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=3.0)
    args = ap.parse_args()

    completions, golds = make_completions(args.n)
    print(f"{args.n} completions, mean {sum(map(len, completions)) / args.n:.0f} chars")

    with RewardPool(num_workers=args.workers, timeout=args.timeout, cache_size=0) as pool:
        t = time.perf_counter()
        pool.math_rewards(["\\boxed{1}"] * args.workers, ["1"] * args.workers)  # start the workers
        startup = time.perf_counter() - t
        t = time.perf_counter()
        rewards = pool.math_rewards(completions, golds)
        cold = time.perf_counter() - t
        print(f"pool start-up: {startup:.2f} s ({pool.start_method}, {pool.num_workers} workers)")
        print(f"cold (cache off): {args.n / cold:,.0f} rewards/s with {pool.num_workers} workers "
              f"({cold:.1f} s; mean reward {sum(rewards) / len(rewards):.3f}; timeouts {pool.stats.timeouts})")

    # GRPO-like: 32 prompts x 16 samples per step; samples of one prompt share a gold answer and
    # often the same final answer.
    rng = random.Random(1)
    steps = max(1, args.n // 512)
    batches = []
    for _ in range(steps):
        batch_c, batch_g = [], []
        for _ in range(32):
            right, gold, wrong = _answer(rng)
            for _ in range(16):
                body = " ".join(rng.choice(FILLER) for _ in range(rng.randint(5, 40)))
                pred = wrong if rng.random() < 0.3 else right
                batch_c.append(f"{body}\n\nTherefore, the final answer is $\\boxed{{{pred}}}$.")
                batch_g.append(gold)
        batches.append((batch_c, batch_g))
    with RewardPool(num_workers=args.workers, timeout=args.timeout) as pool:
        pool.math_rewards(["\\boxed{1}"] * args.workers, ["1"] * args.workers)
        t = time.perf_counter()
        for batch_c, batch_g in batches:
            pool.math_rewards(batch_c, batch_g)
        grpo = time.perf_counter() - t
        total = steps * 512
        print(f"GRPO-like (512/batch, cache on): {total / grpo:,.0f} rewards/s with {pool.num_workers} workers "
              f"({grpo / steps * 1000:.0f} ms per 512-completion step; cache hits {pool.stats.cache_hits})")


    # Concurrent callers, one slow answer each (distinct integrals, so neither cache nor de-duplication helps).
    slow = [(f"\\boxed{{\\int_0^{{{k}}} e^{{-x^2}} dx}}", "1") for k in range(2, 2 + 4 * args.workers)]
    with RewardPool(num_workers=args.workers, timeout=60.0, cache_size=0) as pool:
        pool.math_rewards(["\\boxed{1}"] * args.workers, ["1"] * args.workers)
        t = time.perf_counter()
        for completion, gold in slow:
            pool.math_reward(completion, gold)
        serial = time.perf_counter() - t
        threads = [threading.Thread(target=pool.math_reward, args=pair) for pair in slow]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        concurrent = time.perf_counter() - t
        print(f"concurrent callers: {len(slow)} threads x 1 slow answer in {concurrent:.1f} s with "
              f"{pool.num_workers} workers; the same answers one after another: {serial:.1f} s "
              f"(ratio {serial / concurrent:.2f}, ideal {pool.num_workers})")


if __name__ == "__main__":
    main()
