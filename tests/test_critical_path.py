"""benchmarks/critical_path.py on hand-made benchmark files (a known schedule), and on the real DAG."""

import importlib.util
import os
import sys

import pytest

from brorl.config import PROJECT_ROOT

spec = importlib.util.spec_from_file_location("critical_path", PROJECT_ROOT / "benchmarks/critical_path.py")
cp = sys.modules["critical_path"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cp)

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
T0 = 1_800_000_000.0
# job: (start, end, cpu seconds); c ends early, e waits 10 s for a core after c, ends last
SCHEDULE = {"a": (0, 10, 10), "train_arm/n16/seed0": (10, 40, 29), "c": (10, 20, 9), "d": (40, 45, 5),
            "e": (30, 50, 18)}
DEPS = {"a": set(), "train_arm/n16/seed0": {"a"}, "c": {"a"}, "d": {"train_arm/n16/seed0", "c"}, "e": {"c"}}


def write_benchmarks(logs, schedule, t0=T0):
    for job, (start, end, cpu) in schedule.items():
        path = logs / f"{job}.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(HEADER + f"{end - start:.4f}\t0:00:{end - start:02d}\t1\t1\t1\t1\t0\t0\t50\t{cpu}\n")
        os.utime(path, (t0 + end, t0 + end))


def test_known_schedule_gives_its_critical_path_wall_time_and_waits(tmp_path):
    logs = tmp_path / "logs/benchmarks"
    write_benchmarks(logs, SCHEDULE)
    timings = cp.read_benchmarks(logs)
    assert set(timings) == set(SCHEDULE)
    assert timings["e"].start == pytest.approx(T0 + 30) and timings["e"].cpu == 18
    assert cp.critical_path(timings, DEPS) == ["a", "c", "e"]  # e ended last; c released it
    assert cp.longest_chain(timings, DEPS) == pytest.approx(45)  # a -> train_arm -> d
    text = cp.report(timings, DEPS, cores=2, untimed=["paper_table1"])
    assert "wall time 0 min 50.0 s (50 s), 5 timed jobs; summed job time 75 s, CPU time 71 s" in text
    assert "longest dependency chain 45 s; CPU time / 2 cores 36 s" in text
    assert "| a | 0 | 10.0 | 20.0% | 0.0 |" in text
    assert "| c | 10 | 10.0 | 20.0% | 0.0 |" in text
    assert "| e | 30 | 20.0 | 40.0% | 10.0 |" in text  # waited 10 s for a core
    assert "| train_arm | 1 | 30.0 | 40.0% | 29 | 30.0 |" in text
    assert "no benchmark file from this run: paper_table1" in text


def test_only_the_last_run_counts(tmp_path):
    """Files of an earlier run (older than the last run's Snakemake log) are left out."""
    logs = tmp_path / "logs/benchmarks"
    write_benchmarks(logs, {"old": (0, 5, 5)}, t0=T0 - 3600)
    write_benchmarks(logs, SCHEDULE)
    log_dir = tmp_path / ".snakemake/log"
    log_dir.mkdir(parents=True)
    import datetime

    # (start, last write): the earlier run, the last run, a `--lint` during it, a later no-op rerun
    for start, end in ((T0 - 3700, T0 - 3590), (T0 - 1, T0 + 51), (T0 + 5, T0 + 6), (T0 + 100, T0 + 103)):
        log = log_dir / (datetime.datetime.fromtimestamp(start).isoformat().replace(":", "") + ".snakemake.log")
        log.write_text("")
        os.utime(log, (end, end))
    since = cp.last_run_start(tmp_path, logs)
    assert since == pytest.approx(T0 - 1, abs=1e-3)
    assert set(cp.read_benchmarks(logs, since)) == set(SCHEDULE)
    assert "old" in cp.read_benchmarks(logs)


def test_a_bad_benchmark_file_names_itself(tmp_path):
    (tmp_path / "x.tsv").write_text(HEADER)
    with pytest.raises(ValueError, match="x.tsv: no benchmark row"):
        cp.read_benchmarks(tmp_path)


def test_snakemake_dag_of_the_default_profile():
    """The DAG comes from Snakemake: jobs named by their benchmark files; the evaluations wait for their
    model's training job and the tasks; tables wait for every evaluation (untimed jobs pass theirs on)."""
    deps = cp.snakemake_dag(PROJECT_ROOT, [])
    assert deps["sft"] == {"tiny_tasks"}
    assert deps["prorl_stage"] == {"sft", "tiny_tasks"}
    assert deps["evaluate/prorl"] == {"prorl_stage", "tiny_tasks"}
    assert deps["evaluate/n512-seed1"] == {"train_arm/n512/seed1", "tiny_tasks"}
    assert {"evaluate/prorl", "evaluate/schedule-seed0", "train_arm/n16/seed0"} <= deps["paper_table1"]
    assert "all" not in deps and len([j for j in deps if j.startswith("evaluate/")]) == 11
