"""A model of how Snakemake schedules the default DAG on a few cores (issue 31): replay a benchmark table.

``simulate(jobs, cores)`` starts jobs as Snakemake's default (ILP) job selector does: whenever a job ends, among
the jobs whose inputs are all done it picks the set that fits the free cores with the largest summed priority
(ties: the most cores used, then priority and name order, so a replay is deterministic), and never holds a core back.
Each job runs for its seconds at the threads it is given (:meth:`PlannedJob.seconds_at`). No wall clock is read:
the same table and plan give the same schedule on any machine, so the scheduling logic can be tested
(tests/test_scheduling.py) and two plans compared on one measured table (benchmarks/critical_path.py
``--replay``).

The durations come from a run's ``logs/benchmarks/*.tsv`` (``s``: wall seconds at the threads the job ran with,
``cpu_time``). A job replayed with other threads than it ran with: one thread takes its CPU seconds (the job was
CPU-bound), ``k`` threads take its one-thread time over :data:`THREAD_SPEEDUP` (what the tiny model's torch jobs
gain from a second core on this 2-core machine: ProRL stage 240 s wall for 301 CPU s, docs/speed.md).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

THREAD_SPEEDUP = 1.25
"""Speed-up of a torch job from 1 to 2+ threads on the project's 2-core machine (docs/speed.md, "Time")."""


@dataclass(frozen=True)
class PlannedJob:
    """One job of the plan: its threads and priority (what Snakemake schedules by), the jobs it waits for, and
    its measured ``seconds`` (wall) and ``cpu`` seconds at ``measured_threads``."""

    name: str
    threads: int
    priority: float
    deps: frozenset = field(default_factory=frozenset)
    seconds: float = 0.0
    cpu: float = 0.0
    measured_threads: int | None = None

    def seconds_at(self, threads: int) -> float:
        """Its duration at ``threads`` threads (module docstring)."""
        measured = self.measured_threads or threads
        if threads == measured or self.seconds <= 0:
            return self.seconds
        one = self.cpu if measured > 1 and self.cpu > 0 else self.seconds  # its one-thread time
        return one if threads == 1 else one / THREAD_SPEEDUP


@dataclass(frozen=True)
class Schedule:
    start: dict[str, float]
    end: dict[str, float]
    ready: dict[str, float]  # when its inputs were all done
    threads: dict[str, int]

    @property
    def makespan(self) -> float:
        return max(self.end.values(), default=0.0)

    def wait(self, job: str) -> float:
        """Seconds the job had its inputs and no free core."""
        return self.start[job] - self.ready[job]

    def busy_cores(self, t: float) -> int:
        return sum(self.threads[j] for j in self.start if self.start[j] <= t < self.end[j])

    def idle_core_seconds(self, cores: int) -> float:
        """Core-seconds no job held, from the first start to the last end."""
        return cores * self.makespan - sum((self.end[j] - self.start[j]) * self.threads[j] for j in self.start)


def _select(ready: list[PlannedJob], free: int, cores: int) -> tuple[PlannedJob, ...]:
    """The ready jobs Snakemake's ILP selector starts with ``free`` cores: the largest summed priority, then the
    most cores, then the first in (priority, name) order. Only the best few jobs per thread count can be part of it."""
    best_by_threads: dict[int, list[PlannedJob]] = {}
    for job in sorted(ready, key=lambda j: (-j.priority, j.name)):
        best_by_threads.setdefault(min(job.threads, cores), []).append(job)
    pool = sorted((j for t, js in best_by_threads.items() for j in js[: max(free // t, 0)]),
                  key=lambda j: (-j.priority, j.name))
    best, best_key = (), None
    for k in range(1, min(len(pool), free) + 1):
        for subset in itertools.combinations(pool, k):
            used = sum(min(j.threads, cores) for j in subset)
            if used > free:
                continue
            key = (sum(j.priority for j in subset), used)
            if best_key is None or key > best_key:  # the first such set in (priority, name) order
                best, best_key = subset, key
    return best


def simulate(jobs: dict[str, PlannedJob], cores: int) -> Schedule:
    """Replay ``jobs`` (name -> job) on ``cores`` cores (module docstring). A dependency not in ``jobs`` counts
    as done from the start."""
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    waiting = {name: {d for d in job.deps if d in jobs} for name, job in jobs.items()}
    start, end, ready_at, threads = {}, {}, {}, {}
    running: list[tuple[float, str]] = []
    done: set[str] = set()
    t, free = 0.0, cores
    while waiting or running:
        ready = [jobs[n] for n, deps in waiting.items() if deps <= done]
        for job in ready:
            ready_at.setdefault(job.name, t)
        for job in _select(ready, free, cores):
            th = min(job.threads, cores)
            free -= th
            threads[job.name], start[job.name] = th, t
            end[job.name] = t + job.seconds_at(th)
            heapq.heappush(running, (end[job.name], job.name))
            del waiting[job.name]
        if not running:
            raise ValueError(f"jobs whose dependencies never finish: {sorted(waiting)[:5]}")
        t, name = heapq.heappop(running)
        finished = [name]
        while running and running[0][0] <= t:
            finished.append(heapq.heappop(running)[1])
        for name in finished:
            done.add(name)
            free += threads[name]
    return Schedule(start, end, ready_at, threads)


def critical_path(schedule: Schedule, jobs: dict[str, PlannedJob]) -> list[str]:
    """From the job that ended last back through the dependency that ended last (first job first)."""
    job = max(schedule.end, key=lambda j: (schedule.end[j], j))
    path = [job]
    while True:
        deps = [d for d in jobs[job].deps if d in schedule.end]
        if not deps:
            return path[::-1]
        job = max(deps, key=lambda d: (schedule.end[d], d))
        path.append(job)
