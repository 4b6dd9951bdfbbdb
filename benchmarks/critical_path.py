"""Where the last pipeline run spent its time: wall time, the critical path and each job's share (issue 21).

    python benchmarks/critical_path.py [--configfile config/paper.yaml] [--logs logs/paper/benchmarks] [--since EPOCH]
    make critical-path

Every rule of the DAG has a ``benchmark:`` file, ``logs/<root>/benchmarks/<rule>[/<wildcards>].tsv`` (the root of
the run's profile, or its base's for the stages an overlay reuses: brorl.layout), which Snakemake
writes when the job ends: its ``s`` column is the job's wall time and ``cpu_time`` its CPU seconds, and the
file's modification time is the job's end (start = end - s). Only the files of the last run count: those
that started after that run's ``.snakemake/log`` file was created (``--since`` overrides). Which
job waits for which comes from Snakemake itself (the Snakefile and config, every job planned as if from
scratch; an untimed job passes its dependencies on). Printed:

- the wall time (first start to last end), the summed job time and CPU time, and two lower bounds: the
  longest dependency chain (unlimited cores) and the CPU time over the cores;
- the critical path: from the job that ended last back through, each time, the dependency that ended last
  before it started; a job's ``wait`` is the time between that dependency's end and its own start (a job
  that waited had its inputs and no free core);
- every rule's jobs, seconds and share of the summed job time.

``--write-table runs.csv`` also writes the run's jobs (threads and priority as planned, wall and CPU seconds);
``--replay runs.csv`` replays such a table (brorl.scheduling: Snakemake's job selection, no wall clock) as it ran
and under the current Snakefile's threads and priorities, to compare two plans on one measured run (issue 31).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Timing:
    seconds: float
    cpu: float
    end: float

    @property
    def start(self) -> float:
        return self.end - self.seconds


def job_name(path: str | Path, logs: str | Path = "logs/benchmarks") -> str:
    """``logs/benchmarks/train_arm/n16/seed0.tsv`` -> ``train_arm/n16/seed0``."""
    rel = Path(os.path.relpath(path, logs))
    return rel.with_suffix("").as_posix()


def read_benchmarks(logs: str | Path, since: float | None = None) -> dict[str, Timing]:
    """Every benchmark file under ``logs`` (its last row) whose job started at or after ``since``."""
    out = {}
    for path in sorted(Path(logs).rglob("*.tsv")):
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
        if not rows:
            raise ValueError(f"{path}: no benchmark row")
        row = rows[-1]
        cpu = row.get("cpu_time", "")
        t = Timing(float(row["s"]), float(cpu) if cpu not in ("", "NA") else float("nan"), path.stat().st_mtime)
        if since is None or t.start >= since - 1.0:
            out[job_name(path, logs)] = t
    return out


def benchmark_dirs(workdir: str | Path, configfiles: list[str]) -> list[Path]:
    """The benchmark folders of a config's roots (brorl.layout): ``logs/<root>/benchmarks`` of each root its stage
    groups write under (the Snakefile's default config/config.yaml without configfiles)."""
    from brorl.config import load_config
    from brorl.layout import GROUPS
    from brorl.profile import Profile

    files = [Path(workdir) / "config/config.yaml"] if not configfiles else [Path(c) for c in configfiles]
    layout = Profile.from_config(load_config(*files)).layout
    return [Path(workdir) / "logs" / root / "benchmarks" for root in sorted({layout.root_of(g) for g in GROUPS})]


def read_all_benchmarks(dirs: list[Path], since: float | None = None) -> dict[str, Timing]:
    out: dict[str, Timing] = {}
    for logs in dirs:
        out.update(read_benchmarks(logs, since))
    return out


def last_run_start(workdir: str | Path, logs: str | Path | list) -> float | None:
    """Start of the run that wrote the newest benchmark file: the newest ``.snakemake/log/*.snakemake.log``
    (named by its start time, written until its run ends) that began before that file's job and was still
    written when the job ended (a `--lint` or `-n --report` beside the run is not it)."""
    files = [f for d in (logs if isinstance(logs, list) else [logs]) for f in Path(d).rglob("*.tsv")]
    if not files:
        return None
    newest = max(files, key=lambda p: p.stat().st_mtime)
    last_end = newest.stat().st_mtime
    with open(newest, newline="") as f:
        last_start = last_end - float(list(csv.DictReader(f, delimiter="\t"))[-1]["s"])
    starts = []
    for log in (Path(workdir) / ".snakemake" / "log").glob("*.snakemake.log"):
        name = log.name[: -len(".snakemake.log")]
        for fmt in ("%Y-%m-%dT%H%M%S.%f", "%Y-%m-%dT%H%M%S"):  # isoformat() drops a zero microsecond
            try:
                start = datetime.datetime.strptime(name, fmt).timestamp()  # local time, as Snakemake wrote it
            except ValueError:
                continue
            if start <= last_start + 1.0 and log.stat().st_mtime >= last_end - 5.0:
                starts.append(start)
            break
    return max(starts, default=None)


def snakemake_dag(workdir: str | Path, configfiles: list[str], cores: int = 1,
                  plan: dict | None = None) -> dict[str, set[str]]:
    """{job: the jobs it waits for}, jobs named by their benchmark file (:func:`job_name`), from Snakemake's own
    DAG of the workflow in ``workdir`` (planned from scratch, so every job is in it). An untimed job (no
    ``benchmark:``) is left out and passes its dependencies on to the jobs that wait for it. ``plan``, a dict,
    gets {job: (threads, priority)} as Snakemake plans them on ``cores`` cores."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import (ConfigSettings, DAGSettings, OutputSettings, Quietness,
                                          ResourceSettings)

    workdir = Path(workdir).resolve()
    with SnakemakeApi(OutputSettings(quiet={Quietness.ALL}, dryrun=True)) as api:
        wf = api.workflow(resource_settings=ResourceSettings(cores=cores),
                          config_settings=ConfigSettings(configfiles=[Path(c).resolve() for c in configfiles]),
                          snakefile=workdir / "Snakefile", workdir=workdir)
        wf.dag(DAGSettings(forceall=True))
        workflow = wf._workflow  # the DAG itself has no public accessor in Snakemake 9
        workflow._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True)
        workflow._build_dag()
        dag = workflow.dag
        # logs/<root>/benchmarks/<rule>/...: named relative to its root's benchmark folder
        name = {job: job_name(workdir / job.benchmark, workdir / Path(job.benchmark).parents[-3] / "benchmarks")
                if job.benchmark else None for job in dag.jobs}
        memo: dict = {}

        def timed_deps(job) -> set[str]:
            if job not in memo:
                memo[job] = set()
                for dep in dag.dependencies[job]:
                    memo[job] |= {name[dep]} if name[dep] else timed_deps(dep)
            return memo[job]

        if plan is not None:
            dag.update_priority()
            plan.update({name[job]: (job.threads, dag.priority(job)) for job in dag.jobs if name[job]})
        return {name[job]: timed_deps(job) for job in dag.jobs if name[job]}


def critical_path(timings: dict[str, Timing], deps: dict[str, set[str]]) -> list[str]:
    """From the job that ended last back through the dependency that ended last, first job first."""
    job = max(timings, key=lambda j: timings[j].end)
    path = [job]
    while True:
        before = [d for d in deps.get(job, ()) if d in timings]
        if not before:
            return path[::-1]
        job = max(before, key=lambda d: timings[d].end)
        path.append(job)


def longest_chain(timings: dict[str, Timing], deps: dict[str, set[str]]) -> float:
    """Seconds of the longest dependency chain of timed jobs (the wall time with unlimited cores)."""
    memo: dict[str, float] = {}

    def finish(job: str) -> float:
        if job not in memo:
            memo[job] = timings[job].seconds + max((finish(d) for d in deps.get(job, ()) if d in timings), default=0)
        return memo[job]

    return max((finish(j) for j in timings), default=0.0)


def _minsec(s: float) -> str:
    return f"{int(s // 60)} min {s % 60:04.1f} s"


def report(timings: dict[str, Timing], deps: dict[str, set[str]], cores: int, untimed: list[str] = ()) -> str:
    """The printed report (see the module docstring)."""
    if not timings:
        return "no benchmark files: run the pipeline first"
    t0 = min(t.start for t in timings.values())
    wall = max(t.end for t in timings.values()) - t0
    job_s = sum(t.seconds for t in timings.values())
    cpu_s = sum(t.cpu for t in timings.values() if t.cpu == t.cpu)
    lines = [f"wall time {_minsec(wall)} ({wall:.0f} s), {len(timings)} timed jobs; summed job time {job_s:.0f} s, "
             f"CPU time {cpu_s:.0f} s",
             f"lower bounds: longest dependency chain {longest_chain(timings, deps):.0f} s; "
             f"CPU time / {cores} cores {cpu_s / cores:.0f} s", "",
             "critical path (wait: inputs ready, no free core)", "",
             "| job | start s | seconds | share of wall | wait s |", "|---|---|---|---|---|"]
    prev_end = t0
    for job in critical_path(timings, deps):
        t = timings[job]
        lines.append(f"| {job} | {t.start - t0:.0f} | {t.seconds:.1f} | {100 * t.seconds / wall:.1f}% | "
                     f"{max(t.start - prev_end, 0):.1f} |")
        prev_end = t.end
    by_rule: dict[str, list[Timing]] = {}
    for job, t in timings.items():
        by_rule.setdefault(job.split("/")[0], []).append(t)
    lines += ["", "per rule (share: of the summed job time)", "",
              "| rule | jobs | seconds | share | CPU s | longest job s |", "|---|---|---|---|---|---|"]
    for rule, ts in sorted(by_rule.items(), key=lambda kv: -sum(t.seconds for t in kv[1])):
        s = sum(t.seconds for t in ts)
        lines.append(f"| {rule} | {len(ts)} | {s:.1f} | {100 * s / job_s:.1f}% | "
                     f"{sum(t.cpu for t in ts if t.cpu == t.cpu):.0f} | {max(t.seconds for t in ts):.1f} |")
    if untimed:
        lines += ["", "planned jobs with no benchmark file from this run: " + ", ".join(sorted(untimed))]
    return "\n".join(lines)


TABLE_COLUMNS = ("job", "threads", "priority", "seconds", "cpu_s")


def write_table(path: str | Path, timings: dict[str, Timing], plan: dict) -> None:
    """The run's jobs as a replay table: its threads and priority as planned, wall and CPU seconds."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(TABLE_COLUMNS)
        for job in sorted(timings):
            threads, priority = plan.get(job, (1, 0))
            w.writerow([job, threads, priority, f"{timings[job].seconds:.2f}", f"{timings[job].cpu:.2f}"])


def read_table(path: str | Path) -> dict[str, dict]:
    """A replay table (:func:`write_table`): {job: {threads, priority, seconds, cpu_s}}; errors name file:line."""
    out = {}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != TABLE_COLUMNS:
            raise ValueError(f"{path}:1: columns must be {','.join(TABLE_COLUMNS)}, got {reader.fieldnames}")
        for line, row in enumerate(reader, start=2):
            try:
                out[row["job"]] = {"threads": int(row["threads"]), "priority": float(row["priority"]),
                                   "seconds": float(row["seconds"]), "cpu_s": float(row["cpu_s"])}
            except (TypeError, ValueError) as err:
                raise ValueError(f"{path}:{line}: {err}") from None
    return out


def replay(table: dict[str, dict], deps: dict[str, set[str]], plan: dict | None, cores: int):
    """The schedule of the table's jobs under ``plan`` ({job: (threads, priority)}; None: the table's own
    threads and priorities) on ``cores`` cores (brorl.scheduling). Returns (jobs, schedule)."""
    from brorl.scheduling import PlannedJob, simulate

    jobs = {}
    for job, row in table.items():
        threads, priority = (plan or {}).get(job, (row["threads"], row["priority"]))
        jobs[job] = PlannedJob(job, threads, priority, frozenset(deps.get(job, ())), row["seconds"], row["cpu_s"],
                               measured_threads=row["threads"])
    return jobs, simulate(jobs, cores)


def replay_report(table: dict[str, dict], deps: dict[str, set[str]], plan: dict, cores: int) -> str:
    """The table's jobs replayed as they ran and as planned now (threads, priorities), side by side."""
    from brorl.scheduling import critical_path as sim_path

    lines = [f"replayed on {cores} cores (brorl.scheduling; no wall clock: the table's seconds)", "",
             "| plan | makespan s | idle core-s | critical path (wait s) |", "|---|---|---|---|"]
    for label, p in (("as the table ran", None), ("as planned now", plan)):
        jobs, sched = replay(table, deps, p, cores)
        path = ", ".join(f"{j} ({sched.wait(j):.0f})" for j in sim_path(sched, jobs))
        lines.append(f"| {label} | {sched.makespan:.0f} | {sched.idle_core_seconds(cores):.0f} | {path} |")
    changed = sorted(j for j in table if j in plan and tuple(plan[j]) != (table[j]["threads"], table[j]["priority"]))
    lines += ["", "jobs whose threads or priority changed: " + (", ".join(
        f"{j} {table[j]['threads']}t/{table[j]['priority']:g} -> {plan[j][0]}t/{plan[j][1]:g}" for j in changed)
        or "none")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default=str(ROOT), help="the project folder of the run")
    parser.add_argument("--logs", default=None,
                        help="benchmark folder (default: <workdir>/logs/<root>/benchmarks of the config's roots)")
    parser.add_argument("--configfile", action="append", default=[], help="the run's --configfile (default: none)")
    parser.add_argument("--since", type=float, default=None,
                        help="count jobs that started at or after this epoch time (default: the last run's start)")
    parser.add_argument("--cores", type=int, default=os.cpu_count(), help="cores of the run (a lower bound's divisor)")
    parser.add_argument("--write-table", metavar="CSV", help="also write the run's jobs (threads, priority as "
                        "planned now, seconds, CPU s) as a replay table")
    parser.add_argument("--replay", metavar="CSV", help="replay a table (--write-table) as it ran and under the "
                        "current plan (threads, priorities) instead of reading logs/benchmarks")
    args = parser.parse_args(argv)
    plan: dict = {}
    deps = snakemake_dag(args.workdir, args.configfile, cores=args.cores, plan=plan)
    if args.replay:
        print(replay_report(read_table(args.replay), deps, plan, args.cores))
        return 0
    logs = [Path(args.logs)] if args.logs else benchmark_dirs(args.workdir, args.configfile)
    since = args.since if args.since is not None else last_run_start(args.workdir, logs)
    timings = read_all_benchmarks(logs, since)
    untimed = [job for job in deps if job not in timings]
    print(report(timings, deps, args.cores, untimed))
    if args.write_table:
        write_table(args.write_table, timings, plan)
    return 0


if __name__ == "__main__":
    sys.exit(main())
