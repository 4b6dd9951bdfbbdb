"""brorl.scheduling (a replay of Snakemake's job selection, no wall clock) and the default DAG's plan (issue 31):
threads and priorities as Snakemake plans them, replayed on a measured benchmark table."""

import importlib.util
import sys
from pathlib import Path

import pytest

from brorl.config import PROJECT_ROOT
from brorl.scheduling import THREAD_SPEEDUP, PlannedJob, critical_path, simulate

spec = importlib.util.spec_from_file_location("critical_path", PROJECT_ROOT / "benchmarks/critical_path.py")
cp = sys.modules.setdefault("critical_path", importlib.util.module_from_spec(spec))
spec.loader.exec_module(cp)

# The default DAG as main 016b0dc planned it (threads, priorities from its Snakefile) with each job's CPU seconds
# from a measured run (docs/results/tiny/run_time.md, 2026-12-05: a rule's CPU seconds over its jobs) and, for a
# quiet machine, seconds = CPU seconds (2-thread jobs: CPU / 1.25). docs/results/timing/README.md.
BEFORE_TABLE = PROJECT_ROOT / "tests/data/timing/before_jobs.csv"


def job(name, threads, priority, deps=(), seconds=10.0, cpu=None, measured=None):
    return PlannedJob(name, threads, priority, frozenset(deps), seconds, seconds if cpu is None else cpu, measured)


def test_one_core_runs_jobs_by_priority_and_dependencies():
    jobs = {"a": job("a", 1, 1), "b": job("b", 1, 5, seconds=20), "c": job("c", 1, 9, deps=["a"], seconds=5)}
    s = simulate(jobs, cores=1)
    assert (s.start["b"], s.start["a"], s.start["c"]) == (0, 20, 30)  # b first (priority); c waits for a
    assert s.makespan == 35 and s.wait("a") == 20 and s.wait("c") == 0
    assert critical_path(s, jobs) == ["a", "c"]
    assert s.idle_core_seconds(1) == 0


def test_an_all_core_job_outweighs_one_thread_jobs_of_smaller_summed_priority():
    """Snakemake's ILP picks the set with the largest summed priority: 2 x 3 < 50, so the 2-thread job runs alone
    first; with one-thread priorities summing above it, they would go first (what the plan must avoid)."""
    jobs = {"all": job("all", 2, 50, seconds=10), "x": job("x", 1, 3), "y": job("y", 1, 3)}
    s = simulate(jobs, cores=2)
    assert s.start["all"] == 0 and s.start["x"] == s.start["y"] == 10
    assert s.busy_cores(5) == 2
    heavy = {**jobs, "x": job("x", 1, 30), "y": job("y", 1, 30)}
    s = simulate(heavy, cores=2)
    assert s.start["x"] == s.start["y"] == 0 and s.start["all"] == 10


def test_a_free_core_is_never_held_back():
    jobs = {"long": job("long", 1, 1, seconds=30), "hi": job("hi", 1, 9, deps=["short"]),
            "short": job("short", 1, 0, seconds=5)}
    s = simulate(jobs, cores=2)
    assert s.start["long"] == s.start["short"] == 0  # both cores busy from the start
    assert s.start["hi"] == 5 and s.makespan == 30


def test_threads_beyond_the_cores_are_scaled_down_and_durations_follow_the_threads():
    assert job("j", 2, 0, seconds=80, cpu=100, measured=2).seconds_at(2) == 80
    assert job("j", 2, 0, seconds=80, cpu=100, measured=2).seconds_at(1) == 100  # its CPU seconds
    assert job("j", 1, 0, seconds=50, measured=1).seconds_at(2) == pytest.approx(50 / THREAD_SPEEDUP)
    s = simulate({"big": job("big", 8, 0, seconds=10, measured=2)}, cores=2)
    assert s.threads["big"] == 2 and s.makespan == 10


def test_a_cycle_or_missing_dependency_is_an_error_not_a_hang():
    jobs = {"a": job("a", 1, 0, deps=["b"]), "b": job("b", 1, 0, deps=["a"])}
    with pytest.raises(ValueError, match="never finish"):
        simulate(jobs, cores=2)


def test_a_bad_replay_table_names_its_line(tmp_path):
    bad = tmp_path / "jobs.csv"
    bad.write_text("job,threads,priority,seconds,cpu_s\nsft,2,100,69.3,85\nprorl_stage,two,100,240,301\n")
    with pytest.raises(ValueError, match=r"jobs\.csv:3: "):
        cp.read_table(bad)
    bad.write_text("job,seconds\nsft,3\n")
    with pytest.raises(ValueError, match=r"jobs\.csv:1: columns must be"):
        cp.read_table(bad)


@pytest.fixture(scope="module")
def default_plan():
    """{job: (threads, priority)} and the dependencies of the default DAG on 2 cores, from Snakemake itself."""
    plan: dict = {}
    deps = cp.snakemake_dag(PROJECT_ROOT, [], cores=2, plan=plan)
    return plan, deps


def test_the_default_plan_threads_and_priorities(default_plan):
    """What issue 31 changed: the arms come before the short theory jobs and the evaluations (they used to come
    last: the first arm waited minutes after the ProRL stage), the extended sweep (the longest one-thread job)
    first of the one-thread jobs, and the difficulty profiles take one core (16 CPU s in 30 s at 2 threads). The
    critical path before the arms (tasks, SFT, ProRL stage) and the throughput study (it measures speed) still
    run alone, and no pair of one-thread jobs outweighs an all-core job (Snakemake's ILP sums priorities)."""
    plan, _ = default_plan
    for name in ("tiny_tasks", "sft", "throughput_study"):
        assert plan[name][0] == 2, name
    # The ProRL stage: one core for Snakemake (torch keeps all cores' threads: torch_threads_env), so the theory
    # jobs run beside it; SFT takes all cores (alone: it uses ~1.5 of them); both the highest priority
    assert plan["sft"][1] == plan["prorl_stage"][1] == 100 and plan["prorl_stage"][0] == 1
    assert plan["difficulty_sft"][0] == plan["difficulty_prorl"][0] == 1
    arms = {j: p for j, p in plan.items() if j.startswith("train_arm/")}
    assert len(arms) == 10 and all(t == 1 for t, _ in arms.values())
    later = {j: p for j, (t, p) in plan.items() if j.startswith(("evaluate/", "paper_", "theory_simulation",
                                                                   "theory_figure3", "train_summary"))}
    assert min(p for _, p in arms.values()) > max(later.values())
    assert plan["theory_extended_sweep"][1] > max(p for _, p in arms.values())
    # The ProRL stage is never ready beside an all-core job (SFT before it, the throughput study after it)
    one_thread = sorted((p for j, (t, p) in plan.items() if t == 1 and j != "prorl_stage"), reverse=True)
    assert one_thread[0] + one_thread[1] < min(p for t, p in plan.values() if t == 2)


def test_replayed_on_a_measured_run_the_plan_is_shorter_and_the_arms_come_first(default_plan):
    """A run before issue 31 replayed as it ran and under the current plan (the same seconds: only the scheduling
    differs). As it ran, the arms came after the theory jobs and the evaluation of the ProRL checkpoint (issue 31:
    the first arm waited 575 s for a core on a quiet machine); now the theory jobs run beside SFT and the ProRL
    stage, every arm starts before any evaluation, and the replay ends earlier."""
    plan, deps = default_plan
    table = cp.read_table(BEFORE_TABLE)
    before_jobs, before = cp.replay(table, deps, None, cores=2)
    jobs, now = cp.replay(table, deps, plan, cores=2)
    arms = [j for j in jobs if j.startswith("train_arm/")]
    later = [j for j in jobs if j.startswith(("evaluate/", "theory_simulation", "theory_figure3"))]
    assert max(before.start[a] for a in arms) > min(before.start[j] for j in later)  # the old order, replayed
    evals = [j for j in jobs if j.startswith("evaluate/")]
    assert max(now.start[a] for a in arms) <= min(now.start[j] for j in evals)
    # The replay runs a job planned at 1 thread for its CPU seconds (brorl.scheduling), so the ProRL stage, whose
    # torch keeps 2 threads, is replayed slower than it runs (301 s for the ProRL stage's 240 s here): a
    # conservative bound; the measured gain is in docs/results/timing/.
    assert now.makespan < before.makespan - 5
    for alone in ("sft", "throughput_study"):
        assert now.threads[alone] == 2 and now.busy_cores(now.start[alone]) == 2, alone
    theory = [j for j in jobs if j.startswith("theory_")]
    assert all(now.end["sft"] <= now.start[j] < now.end["prorl_stage"] for j in theory)  # beside the ProRL stage


def test_one_core_jobs_keep_all_cores_threads_in_every_library():
    """SFT and the ProRL stage count as one core for Snakemake, which then exports each thread variable at 1 in the
    job's shell (snakemake/shell.py); torch_threads_env must set every one of them back to all cores (MKL_NUM_THREADS
    left at 1 under OMP_NUM_THREADS=2 changed the SFT checkpoint, issue 31)."""
    import inspect
    import re

    import snakemake.shell

    from brorl.pipeline import THREAD_VARS, torch_threads_env

    exported = set(re.findall(r'envvars\["(\w+)"\] = threads', inspect.getsource(snakemake.shell)))
    assert "MKL_NUM_THREADS" in exported and exported <= set(THREAD_VARS)
    env = dict(kv.split("=") for kv in torch_threads_env().format(resources=type("R", (), {"torch_threads": 2})).split())
    assert all(env[v] == "2" for v in THREAD_VARS) and env["OMP_WAIT_POLICY"] == "PASSIVE"
    # a template: the rule's code stays the same whatever --cores is (Snakemake's code trigger would rerun it)
    assert "{resources.torch_threads}" in torch_threads_env()
