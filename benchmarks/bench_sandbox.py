"""Code-sandbox throughput: programs/s for a trivial correct program with 10 stdin/stdout test cases,
run one at a time (``run_program``) and as a batch of distinct programs (``code_rewards``, 2 workers).

    python benchmarks/bench_sandbox.py [--programs 60]

Prints the machine's load average next to the numbers (the development machine is shared)."""

from __future__ import annotations

import argparse
import os
import time

from brorl import sandbox

TESTS = {"inputs": [f"{i} {i + 1}\n" for i in range(10)], "outputs": [f"{2 * i + 1}\n" for i in range(10)]}


def program(i: int) -> str:
    return f"a, b = map(int, input().split())\nprint(a + b)  # {i}\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--programs", type=int, default=60)
    n = p.parse_args().programs
    iso = sandbox.isolation_report()
    print("isolation:", ", ".join(k for k, v in iso.items() if v))
    t0 = time.perf_counter()
    scores = [sandbox.run_program(program(i), TESTS).score for i in range(n)]
    seq = n / (time.perf_counter() - t0)
    assert scores == [1.0] * n, scores
    completions = [f"```python\n{program(n + i)}```" for i in range(n)]
    t0 = time.perf_counter()
    scores = sandbox.code_rewards(completions, [TESTS] * n, max_workers=2)
    par = n / (time.perf_counter() - t0)
    assert scores == [1.0] * n, scores
    print(f"sequential: {seq:.1f} programs/s; code_rewards (2 workers): {par:.1f} programs/s "
          f"({n} programs each; load average {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
