"""GPU slots on one host (issue 27, defect 3): `brorl gpu-slot` gives each GPU job its own GPU ids out of the N the
run declares, through lock files that the kernel frees when the job ends or is killed; SLURM's binding is left as
is. Real processes on this CPU stand in for the jobs (CUDA_VISIBLE_DEVICES is only an environment variable)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brorl.config import PROJECT_ROOT
from brorl.gpu_slots import gpu_pool, plan_env, shell_prefix, try_acquire

# a job: report its GPUs, then wait until every job of the test has reported (so all hold their GPUs at once)
JOB = r'''
import os, sys, time
from pathlib import Path
out, name, jobs = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
(out / f"{name}.tmp").write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))
os.replace(out / f"{name}.tmp", out / f"{name}.txt")
while len(list(out.glob("*.txt"))) < jobs:
    time.sleep(0.05)
'''


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID")}
    return {**env, **extra}


def _job(tmp_path: Path, name: str, gpus: int, total: int, jobs: int, env=None, script=JOB) -> subprocess.Popen:
    code = tmp_path / "job.py"
    code.write_text(script)
    return subprocess.Popen([sys.executable, "-m", "brorl.cli", "gpu-slot", "--gpus", str(gpus), "--of", str(total),
                             "--dir", str(tmp_path / "slots"), "--", sys.executable, str(code), str(tmp_path / "out"),
                             name, str(jobs)], env=env or _env(), stderr=subprocess.PIPE, text=True)


def test_concurrent_jobs_get_disjoint_gpus(tmp_path):
    """Four jobs of 2 GPUs on a run that declares 8, all started at once and all holding their GPUs together:
    every GPU goes to exactly one job."""
    (tmp_path / "out").mkdir()
    procs = [_job(tmp_path, f"job{i}", 2, 8, 4) for i in range(4)]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()
    got = [(tmp_path / "out" / f"job{i}.txt").read_text().split(",") for i in range(4)]
    assert all(len(ids) == 2 for ids in got)
    flat = [g for ids in got for g in ids]
    assert sorted(flat, key=int) == [str(i) for i in range(8)]  # disjoint, and together the whole host


def test_a_killed_job_gives_its_gpus_back(tmp_path):
    """A job holding both GPUs of a 2-GPU run; a second job waits (and says so); SIGKILL on the first hands its
    GPUs to the second."""
    (tmp_path / "out").mkdir()
    holder = _job(tmp_path, "holder", 2, 2, 99)  # never sees 99 reports: runs until killed
    guard = time.monotonic() + 300  # hang guard only
    while not (tmp_path / "out" / "holder.txt").exists():
        assert holder.poll() is None and time.monotonic() < guard, holder.stderr.read()
        time.sleep(0.05)
    assert (tmp_path / "out" / "holder.txt").read_text() == "0,1"
    waiter = _job(tmp_path, "waiter", 1, 2, 2)
    assert "waiting for 1 of the GPUs 0,1" in waiter.stderr.readline()  # blocks until it has tried and failed
    assert not (tmp_path / "out" / "waiter.txt").exists()
    holder.send_signal(signal.SIGKILL)  # the exec'd job itself: its lock files close with it
    holder.wait(timeout=120)
    assert waiter.wait(timeout=300) == 0, waiter.stderr.read()
    assert (tmp_path / "out" / "waiter.txt").read_text() in ("0", "1")


def test_slurm_binding_and_host_restrictions(tmp_path):
    """Under SLURM the scheduler's CUDA_VISIBLE_DEVICES stays; a host's own CUDA_VISIBLE_DEVICES is the pool (its
    length must be the declared N); an undeclared N, a job larger than N and a driver with fewer GPUs are refused."""
    env, fds = plan_env(2, 8, tmp_path / "a", {"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "3,5"})
    assert env["CUDA_VISIBLE_DEVICES"] == "3,5" and fds == [] and not (tmp_path / "a").exists()
    env, fds = plan_env(1, 2, tmp_path / "b", {"CUDA_VISIBLE_DEVICES": "4,6"})
    second, fds2 = plan_env(1, 2, tmp_path / "b", {"CUDA_VISIBLE_DEVICES": "4,6"})
    assert {env["CUDA_VISIBLE_DEVICES"], second["CUDA_VISIBLE_DEVICES"]} == {"4", "6"}
    for fd in fds + fds2:
        os.close(fd)
    assert plan_env(0, None, tmp_path / "c", {})[0].get("CUDA_VISIBLE_DEVICES") is None  # no GPUs, nothing locked
    with pytest.raises(ValueError, match="names 2 GPUs, the run declares 4"):
        gpu_pool(4, {"CUDA_VISIBLE_DEVICES": "0,1"})
    with pytest.raises(ValueError, match="--resources gpu=N"):
        plan_env(1, None, tmp_path / "d", {})
    with pytest.raises(ValueError, match="asks for 3 GPUs, the run declares 2"):
        plan_env(3, 2, tmp_path / "e", {})
    driver = tmp_path / "driver"
    for bus in ("0000:01:00.0", "0000:02:00.0"):
        (driver / bus).mkdir(parents=True)
    assert gpu_pool(2, {}, driver) == ["0", "1"]
    with pytest.raises(ValueError, match="the NVIDIA driver sees 2"):
        gpu_pool(4, {}, driver)
    # all taken: nothing is held after a failed try (no half-taken job)
    ids, fds = try_acquire(tmp_path / "f", ["0", "1"], 2)
    assert ids == ["0", "1"] and try_acquire(tmp_path / "f", ["0", "1"], 1) == ([], [])
    for fd in fds:
        os.close(fd)
    assert try_acquire(tmp_path / "f", ["0", "1"], 1)[0] == ["0"]
    assert shell_prefix(0, 8) == "" and shell_prefix(1, None) == "brorl gpu-slot --gpus 1 --dir .snakemake/gpu-slots -- "


def test_local_gpu_profile_gives_every_gpu_job_its_slot(tmp_path):
    """The paper DAG under profiles/local-gpu on an 8-GPU host: every evaluate job (vLLM) and the throughput study
    run under `brorl gpu-slot --gpus 1 --of 8`, each arm's `brorl launch` under `--gpus 8 --of 8`; a job without
    a GPU resource is not wrapped."""
    proc = subprocess.run(
        ["snakemake", "-n", "-p", "--configfile", str(PROJECT_ROOT / "config/paper.yaml"), "--profile",
         str(PROJECT_ROOT / "profiles/local-gpu"), "--resources", "gpu=8", "--directory", str(tmp_path),
         "--snakefile", str(PROJECT_ROOT / "Snakefile")],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    blocks = proc.stdout.split("\nrule ")
    slot = "brorl gpu-slot --gpus {} --of 8 --dir .snakemake/gpu-slots -- brorl {}"
    evaluate = [b for b in blocks if b.startswith("evaluate:")]
    assert evaluate and all(slot.format(1, "evaluate ") in b for b in evaluate)
    arms = [b for b in blocks if b.startswith("train_arm:")]
    assert len(arms) == 2 and all(slot.format(8, "launch --accelerate-config fsdp2 -- brorl train-arm") in b
                                  for b in arms)
    assert slot.format(1, "throughput") in next(b for b in blocks if b.startswith("throughput_study:"))
    assert "gpu-slot" not in next(b for b in blocks if b.startswith("train_data:"))
