"""``brorl gpu-slot``: give a GPU job of a one-host run its own GPUs.

    brorl gpu-slot --gpus K --of N [--dir .snakemake/gpu-slots] -- COMMAND...

Snakemake's ``gpu`` resource is a counter: ``--resources gpu=8`` lets eight one-GPU jobs run at once, but nothing
tells each job *which* GPU is its own, so every vLLM engine would start on ``cuda:0`` (issue 27, defect 3). This
wrapper takes K free GPU ids out of the N the run declared, sets ``CUDA_VISIBLE_DEVICES`` to them and ``exec``s
the command (signals from Snakemake reach it directly).

- **One lock file per GPU id** (``<dir>/gpu<i>.lock``) held with ``flock``: the lock belongs to the open file,
  which the ``exec``ed command inherits, so the ids are held exactly as long as the command (or a process it
  hands the file to) lives, and the kernel frees them when it exits, is killed (SIGKILL included) or crashes.
- **The pool** is ids 0..N-1, or, when ``CUDA_VISIBLE_DEVICES`` is already set on the host (the user limited
  the run to some GPUs), those N ids. N is declared by the run (the local-gpu profile: ``--resources gpu=N``),
  never guessed; a host whose NVIDIA driver lists fewer GPUs than N is refused.
- **Under SLURM** (``SLURM_JOB_ID`` set) the scheduler has already bound the job to its GPUs and set
  ``CUDA_VISIBLE_DEVICES``: the command runs as is.
- If fewer than K ids are free (a killed job's orphan still holds one), it waits and says so.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

DEFAULT_DIR = ".snakemake/gpu-slots"
NVIDIA_PROC = Path("/proc/driver/nvidia/gpus")  # one entry per GPU the driver sees (Linux)


def gpu_pool(total: int, env: Mapping[str, str], driver_dir: Path = NVIDIA_PROC) -> list[str]:
    """The ids a run with ``total`` declared GPUs hands out: the host's ``CUDA_VISIBLE_DEVICES`` if set (it must
    name exactly ``total``), else ``0..total-1`` (the driver must see at least ``total`` GPUs, where it says)."""
    if total < 1:
        raise ValueError(f"the run declares {total} GPUs; declare the host's GPUs (--resources gpu=N)")
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip():
        ids = [d.strip() for d in visible.split(",") if d.strip()]
        if len(ids) != total:
            raise ValueError(f"CUDA_VISIBLE_DEVICES={visible} names {len(ids)} GPUs, the run declares {total} "
                             "(--resources gpu=N): make them agree")
        return ids
    if driver_dir.is_dir():
        seen = len(list(driver_dir.iterdir()))
        if seen < total:
            raise ValueError(f"the run declares {total} GPUs (--resources gpu={total}), the NVIDIA driver sees "
                             f"{seen} ({driver_dir})")
    return [str(i) for i in range(total)]


def try_acquire(folder: Path, pool: Sequence[str], want: int) -> tuple[list[str], list[int]]:
    """Lock ``want`` free ids of ``pool`` (lowest first); returns (ids, open lock fds), or ([], []) with nothing
    held when fewer are free."""
    folder.mkdir(parents=True, exist_ok=True)
    ids, fds = [], []
    for gpu in pool:
        fd = os.open(folder / f"gpu{gpu}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())  # who holds it (for a person looking; the lock is the truth)
        ids.append(gpu)
        fds.append(fd)
        if len(ids) == want:
            return ids, fds
    for fd in fds:
        os.close(fd)  # closing the only descriptor releases the lock
    return [], []


def acquire(folder: Path, pool: Sequence[str], want: int, poll_s: float = 1.0, log=None) -> tuple[list[str], list[int]]:
    """:func:`try_acquire` until it succeeds (no time limit: Snakemake's counter says the ids are due)."""
    if want > len(pool):
        raise ValueError(f"a job asks for {want} GPUs, the run declares {len(pool)}")
    waited = 0.0
    while True:
        ids, fds = try_acquire(folder, pool, want)
        if ids:
            return ids, fds
        if log and waited % 60 == 0:
            log(f"[gpu-slot] waiting for {want} of the GPUs {','.join(pool)} ({folder}): held by other jobs")
        time.sleep(poll_s)
        waited += poll_s


def plan_env(gpus: int, total: int | None, folder: Path, env: Mapping[str, str], log=None) -> tuple[dict, list[int]]:
    """The child's environment (and the lock fds it must inherit) for a job of ``gpus`` GPUs."""
    child = dict(env)
    if env.get("SLURM_JOB_ID") or gpus == 0:
        return child, []  # SLURM bound the job's GPUs itself; a job without GPUs gets none to lock
    if total is None:
        raise ValueError("a GPU job on one host needs the run's GPU count (--resources gpu=N)")
    ids, fds = acquire(folder, gpu_pool(total, env), gpus, log=log)
    child["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
    return child, fds


def shell_prefix(gpus: int, total: int | None, folder: str = DEFAULT_DIR) -> str:
    """What a rule puts before its GPU command: ``brorl gpu-slot --gpus K --of N --dir D -- `` for a job of K > 0
    GPUs (``--of`` left out when the run declares no total: under SLURM none is needed, elsewhere the job
    stops with a clear error), nothing for a job without GPUs."""
    if not gpus:
        return ""
    of = f" --of {int(total)}" if total else ""
    return f"brorl gpu-slot --gpus {int(gpus)}{of} --dir {folder} -- "


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpus", type=int, required=True, help="GPUs this job needs (Snakemake's resources.gpu)")
    p.add_argument("--of", type=int, default=None, dest="total",
                   help="GPUs the run declares on this host (--resources gpu=N)")
    p.add_argument("--dir", default=DEFAULT_DIR, help=f"lock files, one per GPU id (default {DEFAULT_DIR})")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command")


def main(args: argparse.Namespace) -> int:
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise SystemExit("brorl gpu-slot: no command (give it after `--`)")
    env, fds = plan_env(args.gpus, args.total, Path(args.dir), os.environ,
                        log=lambda msg: print(msg, file=sys.stderr, flush=True))
    for fd in fds:
        os.set_inheritable(fd, True)  # the command holds the locks; they go when it exits or is killed
    if fds:
        print(f"[gpu-slot] CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}", file=sys.stderr, flush=True)
    os.execvpe(command[0], command, env)
    return 127  # pragma: no cover - exec does not return
