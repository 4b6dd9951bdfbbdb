"""`brorl launch` inside a real SLURM job, on the path Snakemake's SLURM executor takes (issue 27, defect 6).

The slurm executor submits each job with `sbatch`; inside it the jobstep plugin runs the job's command in a step of
its own (`srun -n1 --cpu-bind=q --cpus-per-task=C --nodes=1 ...`, after dropping the batch step's SLURM_* task
settings). That step holds the node's CPUs and memory, so the launchers' own `srun` must overlap it: before the fix
it waited forever for them (Slurm >= 20.11). Here: a real `sbatch` of that nested path on the local one-node
cluster (`scripts/slurm-local.sh up`; needs root), `brorl launch --accelerate-config cpu` with 2 processes whose
ranks do a gloo all-reduce. Skipped when there is no `sbatch` or no node takes jobs.
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

pytestmark = pytest.mark.slow

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
    bash -c 'echo "outer step: SLURM_STEP_ID=$SLURM_STEP_ID" > {shlex.quote(str(out / "outer.txt"))}; exec "$@"' \\
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
    assert (out / "outer.txt").read_text().split() == ["outer", "step:", "SLURM_STEP_ID=0"]
    assert all(r["step"] == "1" and r["step_tasks"] == "1" for r in ranks), ranks
    assert "[launch] srun --overlap" in log
