"""The rehearsal profile end to end (issue 28; `make rehearsal`, `make rehearsal-slurm`): the paper DAG on this CPU
with its real engines (config/paper.yaml + config/rehearsal.yaml), one arm killed mid-way and resumed.

1. Snakemake runs the DAG up to the resumed arm (its inputs: the fetched start model, the training data) and that
   arm; as soon as the arm's first checkpoint is complete (``brorl_checkpoint.json`` in ``checkpoint-1``) every
   process of the run is killed with SIGKILL (under SLURM: the arm's job is cancelled with SIGKILL), as a
   preemption would.
2. The same Snakemake command for the whole DAG: the arm resumes from its sharded checkpoint and finishes; the
   rest runs (the other arm, lm-eval on vLLM, the throughput study, tables, DVC).

A record goes to ``--record`` (JSON): the commands, the phases' wall times, load averages, where the arm was
killed and the line its resumed log printed. Rehearsal of the code path: its numbers are not results.

    .venv-vllm/bin/python scripts/rehearsal.py [--record results/rehearsal_run.json]
    .venv-vllm/bin/python scripts/rehearsal.py --slurm --snakemake-python .venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ["config/paper.yaml", "config/rehearsal.yaml"]
DONE = "brorl_checkpoint.json"  # brorl.training.stage: a complete checkpoint's marker
SLURM_PROFILES = ["--profile", "profiles/slurm", "--profile", "profiles/slurm-local"]


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc), children first."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def arms_root() -> str:
    """The output root of the rehearsal's arms (brorl.layout: ``rehearsal``, the profile's declared name)."""
    from brorl.config import load_config
    from brorl.profile import Profile

    return Profile.from_config(load_config(*CONFIGS)).layout.root_of("arms")


def checkpoint_done(arm: str, seed: int) -> Path | None:
    """The arm's first complete checkpoint, wherever the profile's work root puts it (resources/**/work/)."""
    for marker in ROOT.glob(f"resources/**/work/{arm}/seed{seed}/**/checkpoint-1/{DONE}"):
        return marker
    return None


def slurm_cancel(arm: str) -> list[str]:
    """Cancel (SIGKILL) the SLURM jobs of rule train_arm for ``arm``: the executor puts the rule and its wildcards
    in the job's comment. Returns the job ids cancelled."""
    out = subprocess.run(["squeue", "--noheader", "--format", "%i|%k"], capture_output=True, text=True).stdout
    ids = [line.split("|")[0] for line in out.splitlines() if "train_arm" in line and arm in line]
    for job in ids:
        subprocess.run(["scancel", "--signal=KILL", "--full", job], check=False)
        subprocess.run(["scancel", job], check=False)
    return ids


def mlflow_runs(store: Path = Path("mlflow.db"), experiment: str = "brorl-rehearsal") -> list[dict]:
    """The experiment's MLflow runs (rule, wildcards, status, run id, profile tag), oldest first, from the sqlite
    store itself (no mlflow import)."""
    import sqlite3

    if not store.exists():
        return []
    with sqlite3.connect(store) as db:
        rows = db.execute(
            "select r.run_uuid, r.name, r.status, r.start_time, r.end_time,"
            " (select value from tags t where t.run_uuid = r.run_uuid and t.key = 'profile')"
            " from runs r join experiments e on r.experiment_id = e.experiment_id"
            " where e.name = ? order by r.start_time", (experiment,)).fetchall()
    return [{"run_id": rid, "name": name, "status": status, "profile": profile,
             "seconds": None if end is None else round((end - start) / 1000, 1)}
            for rid, name, status, start, end, profile in rows]


def slurm_jobs(workdir: Path | None = None) -> dict[str, str]:
    """``scontrol show job`` of every SLURM job slurmctld still knows whose working directory is this checkout
    (finished jobs stay for MinJobAge: a day with scripts/slurm-local.sh; no sacct without slurmdbd). Not from the
    executor's log files: it deletes those of successful jobs."""
    import re

    workdir = Path(workdir or ROOT).resolve()
    show = subprocess.run(["scontrol", "show", "job"], capture_output=True, text=True).stdout
    out = {}
    for block in re.split(r"\n\s*\n", show):
        job, where = re.search(r"JobId=(\d+)", block), re.search(r"WorkDir=(\S+)", block)
        if job and where and Path(where.group(1)).resolve() == workdir:
            out[job.group(1)] = block.strip()
    return dict(sorted(out.items(), key=lambda kv: int(kv[0])))


def collect(record: dict, slurm: bool) -> dict:
    record["mlflow_runs"] = mlflow_runs()
    if slurm:
        record["slurm_jobs"] = slurm_jobs()
    return record


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--slurm", action="store_true", help="every job through sbatch (scripts/slurm-local.sh up first)")
    p.add_argument("--arm", default="n4", help="the arm killed after its first checkpoint and resumed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--snakemake-python", default=sys.executable,
                   help="the Python that runs Snakemake (--slurm: the project's .venv, which has the SLURM executor "
                        "plugin; the jobs' `brorl` commands still come from PATH, .venv-vllm/bin first)")
    p.add_argument("--cores", default="2")
    p.add_argument("--record", default="results/rehearsal_run.json")
    p.add_argument("--timeout", type=float, default=3600, help="seconds phase 1 may wait for the checkpoint")
    p.add_argument("--collect", action="store_true",
                   help="only add the MLflow runs (and with --slurm the jobs' scontrol records) to --record")
    a = p.parse_args(argv)
    os.chdir(ROOT)
    if a.collect:
        record = json.loads(Path(a.record).read_text()) if Path(a.record).exists() else {}
        Path(a.record).write_text(json.dumps(collect(record, a.slurm), indent=1) + "\n")
        return 0
    snakemake = [a.snakemake_python, "-m", "snakemake", "--configfile", *CONFIGS]
    snakemake += SLURM_PROFILES if a.slurm else ["--cores", a.cores]
    arm_target = f"resources/{arms_root()}/checkpoints/{a.arm}/seed{a.seed}"  # the profile's own root (issue 32)
    record: dict = {"configs": CONFIGS, "slurm": a.slurm, "arm": a.arm, "seed": a.seed, "host_cpus": os.cpu_count(),
                    "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "load_start": loadavg(),
                    "note": "a rehearsal of the paper profile's code path on a 2-core CPU; no number here is a result"}
    t0 = time.time()

    # 1. up to the arm's first checkpoint, then kill everything of the run
    if checkpoint_done(a.arm, a.seed) is None and not (ROOT / arm_target).exists():
        cmd = snakemake + [arm_target]
        print("[rehearsal] phase 1:", " ".join(cmd), flush=True)
        proc = subprocess.Popen(cmd, start_new_session=True)
        marker = None
        while proc.poll() is None and time.time() - t0 < a.timeout:
            marker = checkpoint_done(a.arm, a.seed)
            if marker is not None:
                break
            time.sleep(1)
        if marker is None:
            proc.kill()
            print(f"[rehearsal] phase 1 ended (exit {proc.poll()}) without a checkpoint of {a.arm}", file=sys.stderr)
            return 1
        killed = {"checkpoint": str(marker.parent.relative_to(ROOT)), "after_s": round(time.time() - t0, 1),
                  "load": loadavg()}
        if a.slurm:
            killed["slurm_jobs_cancelled"] = slurm_cancel(a.arm)
        pids = [proc.pid] + descendants(proc.pid)  # Snakemake first: it must not see its job fail and react
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        killed["processes_killed"] = len(pids)
        record["killed"] = killed
        print(f"[rehearsal] killed the run ({len(pids)} processes) after {marker.parent}", flush=True)
        subprocess.run(snakemake + ["--unlock"], check=True, capture_output=True)
    record["phase1_s"] = round(time.time() - t0, 1)

    # 2. the whole DAG: the arm resumes from its checkpoint
    t1 = time.time()
    cmd = snakemake + ["--rerun-incomplete"]
    print("[rehearsal] phase 2:", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd).returncode
    record.update(phase2_s=round(time.time() - t1, 1), wall_s=round(time.time() - t0, 1), exit=rc,
                  load_end=loadavg(), ended_utc=time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()))
    logs = sorted(ROOT.glob(f"logs/**/train/{a.arm}/seed{a.seed}.log"))
    if logs:
        record["resumed"] = [line for line in logs[0].read_text(errors="replace").splitlines() if "resuming from" in line]
    if "killed" in record and not record.get("resumed"):  # the kill came after the arm's last step
        print(f"[rehearsal] {a.arm} did not resume mid-way (no 'resuming from' in its log)", file=sys.stderr)
        rc = rc or 1
    collect(record, a.slurm)
    Path(a.record).parent.mkdir(parents=True, exist_ok=True)
    Path(a.record).write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k not in ("mlflow_runs", "slurm_jobs")}, indent=1))
    return rc


if __name__ == "__main__":
    sys.exit(main())
