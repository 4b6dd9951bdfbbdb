"""Code-sandbox throughput: programs/s for a trivial correct program with 10 stdin/stdout test cases,
run one at a time (``run_program``) and as a batch of distinct programs (``code_rewards``, 2 workers), and
the sandbox processes' CPU time per program (less sensitive to other jobs on a shared machine).

    python benchmarks/bench_sandbox.py [--programs 60]

Prints the machine's load average next to the numbers (the development machine is shared)."""

from __future__ import annotations

import argparse
import os
import resource
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
    t0, cpu0 = time.perf_counter(), _children_cpu()
    scores = [sandbox.run_program(program(i), TESTS).score for i in range(n)]
    seq = n / (time.perf_counter() - t0)
    cpu_ms = 1000 * (_children_cpu() - cpu0) / n
    assert scores == [1.0] * n, scores
    completions = [f"```python\n{program(n + i)}```" for i in range(n)]
    t0 = time.perf_counter()
    scores = sandbox.code_rewards(completions, [TESTS] * n, max_workers=2)
    par = n / (time.perf_counter() - t0)
    assert scores == [1.0] * n, scores
    print(f"sequential: {seq:.1f} programs/s ({cpu_ms:.0f} ms CPU per program); code_rewards (2 workers): "
          f"{par:.1f} programs/s ({n} programs each; load average {os.getloadavg()[0]:.2f})")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
