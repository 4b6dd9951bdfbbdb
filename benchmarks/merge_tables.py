"""Replay tables (benchmarks/critical_path.py --replay) for a run's measured CPU seconds, before and with
``merge_duplicates`` (issue 31, item 3).

    python benchmarks/merge_tables.py --benchmarks <run>/logs/tiny/benchmarks --ratio n16=0.577 --ratio n512=0.48 \\
        --prorl-ratio n16 --before tests/data/timing/df9ea32_jobs.csv --after tests/data/timing/merge_jobs.csv

``--before``: every job of the run with its CPU seconds (the benchmark's ``cpu_time``), the threads and priority
the current Snakefile plans, and as ``seconds`` a quiet-machine estimate: the CPU seconds, over 1.25 for a
2-thread job (the convention of tests/data/timing/before_jobs.csv). ``--after``: the same, with each arm's CPU
seconds times the merged / unmerged CPU ratio measured for its N (benchmarks/merge_ab.py); arms whose N was not
measured (and the chained schedule arm) take the mean of the measured ratios; ``--prorl-ratio nX`` also scales
the ProRL stage by arm nX's ratio (same N and batch geometry).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from critical_path import ROOT, TABLE_COLUMNS, read_benchmarks, snakemake_dag  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--benchmarks", required=True, help="the run's logs/<root>/benchmarks folder")
    p.add_argument("--ratio", action="append", default=[], metavar="ARM=R", help="merged / unmerged CPU of an arm")
    p.add_argument("--prorl-ratio", default=None, metavar="ARM", help="scale the ProRL stage by this arm's ratio")
    p.add_argument("--before", required=True)
    p.add_argument("--after", required=True)
    p.add_argument("--cores", type=int, default=2)
    a = p.parse_args()
    ratios = {k: float(v) for k, v in (x.split("=", 1) for x in a.ratio)}
    mean = sum(ratios.values()) / len(ratios)
    plan: dict = {}
    snakemake_dag(ROOT, [], cores=a.cores, plan=plan)
    timings = read_benchmarks(a.benchmarks, since=0)
    missing = sorted(set(plan) - set(timings))
    if missing:
        raise SystemExit(f"{a.benchmarks}: no benchmark for {', '.join(missing)}")

    def scale(job: str) -> float:
        if job.startswith("train_arm/"):
            return ratios.get(job.split("/")[1], mean)
        if job == "prorl_stage" and a.prorl_ratio:
            return ratios[a.prorl_ratio]
        return 1.0

    for path, scaled in ((a.before, False), (a.after, True)):
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(TABLE_COLUMNS)
            for job in sorted(plan):
                threads, priority = plan[job]
                cpu = timings[job].cpu * (scale(job) if scaled else 1.0)
                w.writerow([job, threads, priority, f"{cpu / (1.25 if threads > 1 else 1.0):.2f}", f"{cpu:.2f}"])
        print("wrote", path)


if __name__ == "__main__":
    main()
