"""`brorl launch` inside a real SLURM job, on the path Snakemake's SLURM executor takes (issue 27, defect 6).

The slurm executor submits each job with `sbatch`; inside it the jobstep plugin runs the job's command in a step of
its own (`srun -n1 --cpu-bind=q --cpus-per-task=C --nodes=1 ...`, after dropping the batch step's SLURM_* task
settings). That step holds the node's CPUs and memory, so the launchers' own `srun` must overlap it: before the fix
it waited forever for them (Slurm >= 20.11); and that step's environment does not know the job's node count, so the
launch asks scontrol. Here: a real `sbatch` of that nested path on the local one-node cluster
(`scripts/slurm-local.sh up`; needs root), `brorl launch --accelerate-config cpu` with 2 processes whose ranks do a
gloo all-reduce; profiles/slurm-local's plan of the paper DAG (a dry run, no cluster); and, opt-in, the paper arm's
DAG through `--executor slurm` (make slurm-dag). The cluster tests skip when there is no `sbatch` or no node takes
jobs.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

HANG_GUARD_S = 300  # the whole job: two accelerate/torch starts on a loaded 2-core machine take ~30-60 s
# What the jobstep plugin (snakemake-executor-plugin-slurm-jobstep 0.6.1, Executor.run_job) keeps of SLURM_*
# before its `srun -n1` (everything else SLURM_*, SRUN_*, SBATCH_* goes).
JOBSTEP_KEEP = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN",
                "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP", "SLURM_CLUSTER_NAME", "SLURM_SUBMIT_DIR",
                "SLURM_SUBMIT_HOST")

RANK = r'''
import json, os, sys
from pathlib import Path
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
Path(sys.argv[1], f"rank{rank}.json").write_text(json.dumps({
    "rank": rank, "world": world, "sum": total.item(), "job": os.environ.get("SLURM_JOB_ID"),
    "step": os.environ.get("SLURM_STEP_ID"), "step_tasks": os.environ.get("SLURM_STEP_NUM_TASKS")}))
dist.destroy_process_group()
'''


def cluster_state() -> str | None:
    """None when a node of the local cluster takes jobs, else why not (the skip reason)."""
    if not shutil.which("sbatch"):
        return "no sbatch: SLURM is not installed (scripts/slurm-local.sh up, as root)"
    try:
        proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"sinfo failed: {err}"
    states = proc.stdout.split()
    if proc.returncode != 0 or not any(s.rstrip("*~#") in ("idle", "mix", "alloc") for s in states):
        return f"the SLURM cluster is down (sinfo: {proc.stdout.strip() or proc.stderr.strip()}; " \
               "scripts/slurm-local.sh start)"
    return None


def scontrol_job(job_id: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True,
                         timeout=30).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def wait_for(job_id: str, guard_s: float) -> dict[str, str]:
    """The job's record once it ended; scancel and fail if it is still pending or running after ``guard_s``."""
    deadline = time.monotonic() + guard_s
    while time.monotonic() < deadline:
        info = scontrol_job(job_id)
        if info.get("JobState") not in (None, "PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            return info
        time.sleep(2)
    info = scontrol_job(job_id)
    subprocess.run(["scancel", job_id], timeout=30)
    raise AssertionError(f"hang guard: job {job_id} still {info.get('JobState')} (reason {info.get('Reason')}) "
                         f"after {guard_s} s")


@pytest.mark.slow
def test_launch_runs_both_ranks_inside_the_jobstep_plugins_step(tmp_path):
    reason = cluster_state()
    if reason:
        pytest.skip(reason)
    (tmp_path / "rank.py").write_text(RANK)
    out = tmp_path / "ranks"
    out.mkdir()
    launch = [sys.executable, "-m", "brorl.cli", "launch", "--accelerate-config", "cpu", "--processes-per-node", "2",
              "--", str(tmp_path / "rank.py"), str(out)]
    keep = "|".join(JOBSTEP_KEEP)
    script = tmp_path / "job.sh"
    script.write_text(f"""#!/bin/bash
set -u
echo "batch step: SLURM_STEP_ID=${{SLURM_STEP_ID:-batch}}"
# the jobstep plugin: drop the batch step's SLURM_*/SRUN_*/SBATCH_* settings but the job's identity, then one step
for v in $(env | grep -oE '^(SLURM|SRUN|SBATCH)_[A-Za-z0-9_]*'); do
    case $v in {keep}) ;; *) unset "$v" ;; esac
done
srun -n1 --cpu-bind=q --cpus-per-task=2 --nodes=1 \\
    bash -c 'echo "$SLURM_STEP_ID ${{SLURM_JOB_NUM_NODES:-unset}}" > {shlex.quote(str(out / "outer.txt"))}; exec "$@"' \\
    outer {shlex.join(launch)}
""")
    submit = subprocess.run(["sbatch", "--parsable", "--job-name", "brorl-launch-test", "--ntasks=1",
                             "--cpus-per-task=2", "--mem=2000", "--time=15", "--chdir", str(tmp_path),
                             "--output", str(tmp_path / "job.log"), str(script)],
                            capture_output=True, text=True, timeout=60)
    assert submit.returncode == 0, submit.stderr
    job_id = submit.stdout.strip().split(";")[0]
    try:
        info = wait_for(job_id, HANG_GUARD_S)
    finally:
        log = (tmp_path / "job.log").read_text() if (tmp_path / "job.log").exists() else "(no log)"
        print(log)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, log)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert all(r["world"] == 2 and r["sum"] == 3.0 and r["job"] == job_id for r in ranks), ranks
    # the ranks ran in the launchers' own step (a nested one: the plugin's step is 0, theirs 1), one task per node
    # the plugin's step does not know the job's node count (SLURM_JOB_NUM_NODES unset): the launch asks scontrol
    assert (out / "outer.txt").read_text().split() == ["0", "unset"]
    assert all(r["step"] == "1" and r["step_tasks"] == "1" for r in ranks), ranks
    assert "[launch] srun --overlap --nodes=1 --ntasks=1 --ntasks-per-node=1 --cpus-per-task=2 " in log, log



def test_slurm_local_profile_sizes_the_paper_dag_for_the_local_partition(tmp_path):  # a dry run, no cluster
    """profiles/slurm-local after profiles/slurm: every job of the paper DAG on the `local` partition within the
    node (2 CPUs, under its memory), no GPU, an arm on 1 node with 2 CPUs; squeue for status."""
    import yaml

    from brorl.config import PROJECT_ROOT

    local = yaml.safe_load((PROJECT_ROOT / "profiles/slurm-local/config.yaml").read_text())
    assert local["slurm-status-command"] == "squeue" and local["default-resources"]["slurm_partition"] == "local"
    proc = subprocess.run(
        ["snakemake", "-n", "--configfile", str(PROJECT_ROOT / "config/paper.yaml"), "--profile",
         str(PROJECT_ROOT / "profiles/slurm"), "--profile", str(PROJECT_ROOT / "profiles/slurm-local"),
         "--directory", str(tmp_path), "--snakefile", str(PROJECT_ROOT / "Snakefile")],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    blocks = [b for b in proc.stdout.split("\nrule ")[1:] if "resources:" in b]
    resources = {}
    for block in blocks:
        line = next(l for l in block.splitlines() if l.strip().startswith("resources:"))
        res = dict(kv.split("=", 1) for kv in line.split(":", 1)[1].replace(" ", "").split(","))
        resources.setdefault(block.split(":")[0], []).append(res)
    assert {"train_arm", "evaluate", "fetch_checkpoint"} <= set(resources)
    for rule, jobs in resources.items():
        for res in jobs:
            assert res["slurm_partition"] == "local" and int(res["cpus_per_task"]) <= 2, (rule, res)
            assert int(res["mem_mb"]) <= 16000 and "gres" not in res and "gpu" not in res, (rule, res)
    assert all(r["nodes"] == "1" and r["cpus_per_task"] == "2" for r in resources["train_arm"])


# --- the paper profile's arm through Snakemake's SLURM executor (every job a real sbatch) ---------------------------

DAG_RECORD = "BRORL_SLURM_DAG"  # a folder: run the DAG test and write its record there (make slurm-dag)
ARM = "n4"


def paper_arm_config(source) -> dict:
    """test_paper_study's toy form of config/paper.yaml (stand-in hub, cpu launch config), one tiny arm: N=4 x 2
    prompts per step (a prompt per process), a 16-sample budget (dynamic sampling's rounds may generate more)."""
    from test_paper_study import paper_ci_config

    cfg = paper_ci_config(source)
    cfg["rl"]["arms"] = {"seeds": [0], "sample_budget": 16, "batches": [{"n_rollouts": 4, "prompts_per_step": 2}],
                         "schedule": []}
    return cfg


def slurm_records(workdir: Path) -> list[dict[str, str]]:
    """`scontrol show job` of every job that ran in ``workdir`` (kept for MinJobAge: 1 day on the local cluster)."""
    out = subprocess.run(["scontrol", "-o", "show", "job"], capture_output=True, text=True, timeout=60).stdout
    jobs = [dict(f.split("=", 1) for f in line.split() if "=" in f) for line in out.splitlines() if line.strip()]
    return sorted((j for j in jobs if j.get("WorkDir") == str(workdir)), key=lambda j: int(j["JobId"]))


def scontrol_show(job_ids) -> str:
    """`scontrol show job <id>` of each job (it takes one id at a time), one after the other."""
    return "".join(subprocess.run(["scontrol", "show", "job", i], capture_output=True, text=True, timeout=60).stdout
                   for i in job_ids)


def jobcomp_lines(job_ids) -> str:
    """The jobs' lines of the jobcomp/filetxt file (JobCompLoc; scripts/slurm-local.sh sets one), or ''."""
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=60).stdout
    loc = next((line.split("=", 1)[1].strip() for line in config.splitlines() if line.startswith("JobCompLoc")), "")
    if not loc or not Path(loc).is_file():
        return ""
    ids = {f"JobId={i}" for i in job_ids}
    return "".join(line for line in open(loc) if line.split(" ", 1)[0] in ids)


@pytest.mark.slow
def test_paper_arm_dag_through_the_slurm_executor(tmp_path_factory):
    """fetch_checkpoint -> train_data -> train_arm of the paper profile (toy sizes) with `--executor slurm`
    (profiles/slurm + profiles/slurm-local): each job an sbatch whose command runs in the jobstep plugin's
    `srun -n1` step, the arm's `brorl launch` then a 2-process step of its own. Opt-in (minutes: the executor polls
    each job): set BRORL_SLURM_DAG to a folder for its record (`scontrol show job`, wall time, logs)."""
    import os
    import platform

    import yaml

    from brorl.config import PROJECT_ROOT
    from brorl.data.hub import write_local_snapshot
    from brorl.models.toy import toy_model
    from test_paper_study import REPO_ID
    from test_pipeline import sh
    from test_train_data import COMMIT, hub

    record = os.environ.get(DAG_RECORD)
    if not record:
        pytest.skip(f"the SLURM DAG run takes minutes: set {DAG_RECORD}=<folder for its record> (make slurm-dag)")
    reason = cluster_state()
    if reason:
        pytest.skip(reason)
    record = Path(record).resolve()
    record.mkdir(parents=True, exist_ok=True)
    root = tmp_path_factory.mktemp("slurm-dag")
    source = hub(root / "hub")
    toy_model(root / "toy_data", root / "toy_model", max_steps=30)
    files = {p.relative_to(root / "toy_model").as_posix(): p.read_bytes()
             for p in (root / "toy_model").rglob("*") if p.is_file()}
    write_local_snapshot(source, REPO_ID, "main", COMMIT, files)
    write_local_snapshot(source, REPO_ID, "brorl", "4" * 40, files)
    work = root / "work"
    work.mkdir()
    (work / "paper_arm.yaml").write_text(yaml.safe_dump(paper_arm_config(source)))
    target = f"results/paper/train/{ARM}/seed0/summary.json"
    cmd = ["snakemake", "--profile", str(PROJECT_ROOT / "profiles/slurm"), "--profile",
           str(PROJECT_ROOT / "profiles/slurm-local"), "--configfile", str(work / "paper_arm.yaml"),
           "--snakefile", str(PROJECT_ROOT / "Snakefile"), "--directory", str(work), "--", target]
    started, t0 = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), time.monotonic()
    load = open("/proc/loadavg").read().split()[:3]
    run = sh(cmd, PROJECT_ROOT, timeout=2400, check=False)
    wall = time.monotonic() - t0
    log = run.stdout + run.stderr
    (record / "snakemake.log").write_text(log)
    jobs = slurm_records(work)
    arm_log = work / f"logs/paper/train/{ARM}/seed0.log"
    if arm_log.exists():
        (record / "train_arm.log").write_text(arm_log.read_text())
    (record / "scontrol_show_job.txt").write_text(scontrol_show(j["JobId"] for j in jobs))
    (record / "jobcomp.txt").write_text(jobcomp_lines(j["JobId"] for j in jobs))
    rows = ["| SLURM job | rule (Comment) | state | exit | start | end | run time | nodes | CPUs | memory |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    rows += [f"| {j['JobId']} | {j.get('Comment', '')} | {j['JobState']} | {j['ExitCode']} | {j['StartTime']} | "
             f"{j['EndTime']} | {j['RunTime']} | {j['NodeList']} | {j['NumCPUs']} | {j.get('MinMemoryNode', '')} |"
             for j in jobs]
    (record / "README.md").write_text("\n".join([
        "# The paper profile's arm through a real SLURM (generated by tests/test_slurm.py, `make slurm-dag`)", "",
        f"- started: {started}; Snakemake wall time: {wall:.0f} s; exit code {run.returncode}",
        f"- machine: {platform.platform()}, {os.cpu_count()} cores; load average at start: {' '.join(load)}",
        f"- SLURM: {subprocess.run(['sinfo', '--version'], capture_output=True, text=True).stdout.strip()}, "
        "one node (scripts/slurm-local.sh: proctrack/linuxproc, task/none, no slurmdbd)",
        "- commit: " + subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT_ROOT, capture_output=True,
                                      text=True).stdout.strip(),
        "- command: `" + " ".join(["snakemake", "--profile", "profiles/slurm", "--profile", "profiles/slurm-local",
                                   "--configfile", "paper_arm.yaml", "--", target]) + "`",
        "  (paper_arm.yaml: config/paper.yaml at toy sizes as in tests/test_paper_study.py, a stand-in hub, the cpu",
        "  accelerate config, one arm of N=4 x 2 prompts with a 16-sample budget; its numbers are not results)", "",
        "`scontrol show job` of each job (no sacct without slurmdbd; full records in scontrol_show_job.txt, the",
        "jobcomp/filetxt lines in jobcomp.txt):", "",
        *rows, ""]))
    assert run.returncode == 0, log[-6000:]
    rules = sorted(j.get("Comment", "").removeprefix("rule_").split("_wildcards")[0] for j in jobs)
    assert len(jobs) == 3 and all(j["JobState"] == "COMPLETED" and j["ExitCode"] == "0:0" for j in jobs), rows
    assert any("train_arm" in r for r in rules) and any("fetch_checkpoint" in r for r in rules), rules
    text = arm_log.read_text()
    assert "[launch] srun --overlap --nodes=1 --ntasks=1 --ntasks-per-node=1 --cpus-per-task=2 " in text, text[-3000:]
    assert "--num_processes 2 --num_machines 1" in text, text[-3000:]  # the node's launcher: 2 processes
    summary = json.loads((work / target).read_text())
    assert summary, summary
