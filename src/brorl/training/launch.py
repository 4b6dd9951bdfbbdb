"""``brorl launch``: start a command on every GPU of the allocation through ``accelerate launch``.

    brorl launch [--accelerate-config fsdp2|zero3|cpu|FILE] [--processes-per-node N] [--nodes N] -- brorl train-arm ...

- **No SLURM job** (``SLURM_JOB_ID`` unset): ``accelerate launch --config_file <cfg> --num_processes <GPUs>
  --num_machines 1 ... -m brorl.cli train-arm ...`` (a ``brorl ...`` command becomes ``-m brorl.cli ...``, a
  ``*.py`` script is passed as is, anything else with ``--no_python``).
- **Inside a SLURM job** (one node or several): ``srun --overlap --nodes N --ntasks N --ntasks-per-node 1
  --cpus-per-task <the job's CPUs per node> --kill-on-bad-exit=1 python -m brorl.training.launch --node ...``,
  N and the CPUs from slurmctld (``scontrol show job``; see :func:`slurm_allocation` for why not the
  environment): one launcher per node, which then runs ``accelerate launch`` (on several nodes with
  ``--num_machines N --machine_rank $SLURM_NODEID --main_process_ip <first host of SLURM_STEP_NODELIST>
  --main_process_port <port>``; ``--num_processes`` is the total over all nodes, as accelerate wants it). One
  path for 1 and 8 nodes, so the one-node SLURM test (tests/test_slurm.py) runs the 8-node job's nested step.

  ``--overlap``: Snakemake's SLURM jobstep plugin runs each job's command in a step of its own (``srun -n1
  --cpus-per-task C``), which holds the node's CPUs, memory and GPUs; since Slurm 20.11 a second step waits for
  resources another step holds unless it overlaps, so without it the launchers' step never starts (the arm
  hangs). The launchers' ``srun`` also gets a clean environment: the outer step's ``SLURM_*`` task settings
  (``SLURM_NTASKS=1``, ``SLURM_CPUS_PER_TASK``, ``SLURM_TRES_PER_TASK``...) are input variables of ``srun`` in
  some Slurm versions and would conflict with its flags, so only the job's identity is kept (as the jobstep
  plugin itself does for its step).

Processes per node: ``--processes-per-node``, else ``SLURM_GPUS_ON_NODE``, else the ids in
``CUDA_VISIBLE_DEVICES``, else ``torch.cuda.device_count()``, else 2 for the ``cpu`` config (1 otherwise).
The launcher ``exec``s the command, so signals from Snakemake or SLURM reach it; ``--dry-run`` prints the
command as JSON instead (what the tests check). The accelerate configs live in ``workflow/accelerate/``; the
``cpu`` one runs several CPU processes through accelerate's torchrun launcher (``--multi_gpu``: gloo, no GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from brorl.config import PROJECT_ROOT

ACCELERATE_DIR = PROJECT_ROOT / "workflow" / "accelerate"
CONFIGS = ("fsdp2", "zero3", "cpu", "fsdp2-cpu")
DEFAULT_PORT = 29500


def accelerate_config_path(name_or_path: str) -> Path:
    """``fsdp2`` -> ``workflow/accelerate/fsdp2.yaml``; a path is returned as is (it must exist)."""
    path = ACCELERATE_DIR / f"{name_or_path}.yaml" if name_or_path in CONFIGS else Path(name_or_path)
    if not path.is_file():
        raise FileNotFoundError(f"accelerate config {name_or_path!r}: no file {path} (named ones: {CONFIGS})")
    return path


def expand_nodelist(nodelist: str) -> list[str]:
    """SLURM's compact host list (``gpu[01-03,07],login5``) as host names, in order (what
    ``scontrol show hostnames`` prints, for the forms SLURM writes: one bracket group per name)."""
    hosts, i, n = [], 0, len(nodelist)
    while i < n:
        m = re.compile(r"([^,\[]+)(?:\[([^\]]+)\])?([^,]*)").match(nodelist, i)
        if not m or m.end() == i:
            raise ValueError(f"cannot parse SLURM node list {nodelist!r}")
        prefix, ranges, suffix = m.group(1), m.group(2), m.group(3)
        if ranges is None:
            hosts.append(prefix + suffix)
        else:
            for part in ranges.split(","):
                lo, _, hi = part.partition("-")
                if hi:
                    width = len(lo)
                    hosts += [f"{prefix}{k:0{width}d}{suffix}" for k in range(int(lo), int(hi) + 1)]
                else:
                    hosts.append(f"{prefix}{lo}{suffix}")
        i = m.end() + 1  # skip the comma
    return hosts


def _count_gpus_env(env: Mapping[str, str]) -> int | None:
    value = env.get("SLURM_GPUS_ON_NODE")
    if value and value.isdigit():
        return int(value)
    per_node = env.get("SLURM_GPUS_PER_NODE")  # "8" or "h100:8"
    if per_node:
        tail = per_node.split(":")[-1].split("(")[0]
        if tail.isdigit():
            return int(tail)
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() not in ("", "-1"):
        return len([d for d in visible.split(",") if d.strip()])
    return None


def _cpu_processes(config: str) -> int | None:
    """``num_processes`` of a named accelerate config that runs on the CPU (``use_cpu: true``), else None."""
    import yaml

    cfg = yaml.safe_load(accelerate_config_path(config).read_text()) or {}
    return int(cfg["num_processes"]) if cfg.get("use_cpu") and cfg.get("num_processes") else None


def processes_per_node(explicit: int | None, config: str, env: Mapping[str, str]) -> int:
    if explicit:
        return explicit
    if config == "cpu":
        return 2
    if config in CONFIGS and _cpu_processes(config):  # a CPU config (use_cpu) says its own process count
        return _cpu_processes(config)
    found = _count_gpus_env(env)
    if found is not None:
        return found
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.device_count()
    except ImportError:  # pragma: no cover
        pass
    return 1


@dataclass(frozen=True)
class Allocation:
    """The SLURM job's allocation as slurmctld reports it: nodes, their names, the fewest CPUs on any node."""

    nodes: int
    hosts: tuple[str, ...]
    cpus_per_node: int | None


def _count_ids(ids: str) -> int:
    """``0-31,64-95`` -> 64."""
    total = 0
    for part in filter(None, ids.split(",")):
        lo, _, hi = part.partition("-")
        total += int(hi) - int(lo) + 1 if hi else 1
    return total


def parse_scontrol_job(line: str) -> Allocation:
    """``scontrol -o -d show job <id>``: NumNodes, NodeList and the per-node ``Nodes=... CPU_IDs=...`` groups."""
    fields = re.findall(r"(\S+?)=(\S*)", line)
    get = dict(fields)
    if "NumNodes" not in get or "NodeList" not in get:
        raise ValueError(f"scontrol show job: no NumNodes/NodeList in {line[:200]!r}")
    nodes = int(get["NumNodes"].split("-")[0])
    cpus = [_count_ids(v) for k, v in fields if k == "CPU_IDs" and v]
    if not cpus and get.get("NumCPUs", "").isdigit():
        cpus = [int(get["NumCPUs"]) // max(nodes, 1)]
    return Allocation(nodes, tuple(expand_nodelist(get["NodeList"])), min(cpus) if cpus else None)


def slurm_allocation(job_id: str) -> Allocation:
    """Ask slurmctld (``scontrol``) for the job's allocation. The environment cannot say: inside the step that
    Snakemake's jobstep plugin runs a job in (``srun -n1``, started with the job's ``SLURM_*`` variables removed),
    ``SLURM_JOB_NUM_NODES`` and ``SLURM_JOB_CPUS_PER_NODE`` are unset (seen on Slurm 22.05, tests/test_slurm.py)
    and ``SLURM_NNODES`` / ``SLURM_STEP_NUM_NODES`` describe that one-task step (one node), so an 8-node arm
    would have started its processes on one node only."""
    import subprocess

    cmd = ["scontrol", "-o", "-d", "show", "job", job_id]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise RuntimeError(f"SLURM job {job_id}: `{' '.join(cmd)}` failed ({err}); give --nodes") from err
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RuntimeError(f"SLURM job {job_id}: `{' '.join(cmd)}` failed: {proc.stderr.strip()}; give --nodes")
    return parse_scontrol_job(proc.stdout.strip().splitlines()[0])


def target_args(command: Sequence[str]) -> list[str]:
    """What follows the accelerate options: ``-m brorl.cli ...`` for a ``brorl`` command, a script as is,
    anything else with ``--no_python``."""
    if not command:
        raise ValueError("no command to launch (give it after `--`)")
    head = Path(command[0]).name
    if head == "brorl":
        return ["-m", "brorl.cli", *command[1:]]
    if head.endswith(".py"):
        return list(command)
    return ["--no_python", *command]


def accelerate_command(command: Sequence[str], config: str, procs_per_node: int, *, num_machines: int = 1,
                       machine_rank: int | str = 0, main_ip: str | None = None, port: int = DEFAULT_PORT,
                       python: str = sys.executable) -> list[str]:
    """The ``accelerate launch`` command line for one node."""
    cfg = accelerate_config_path(config)
    out = [python, "-m", "accelerate.commands.launch", "--config_file", str(cfg),
           "--num_processes", str(procs_per_node * num_machines), "--num_machines", str(num_machines),
           "--machine_rank", str(machine_rank), "--main_process_port", str(port)]
    if num_machines > 1:
        if not main_ip:
            raise ValueError("several machines need the main process's address")
        out += ["--main_process_ip", main_ip, "--rdzv_backend", "static", "--same_network"]
    if config == "cpu" and procs_per_node * num_machines > 1:
        # accelerate's --cpu picks its simple launcher (one process, or mpirun); the torchrun launcher gives
        # N CPU processes on gloo (the config's use_cpu keeps them off any GPU)
        out += ["--multi_gpu"]
    return out + target_args(command)


# What a nested srun keeps of the SLURM_* environment: the job's identity (the jobstep plugin keeps the same).
SRUN_KEEP = frozenset({"SLURM_JOB_ID", "SLURM_JOBID", "SLURM_CLUSTER_NAME", "SLURM_CONF", "SLURM_SUBMIT_DIR",
                       "SLURM_SUBMIT_HOST", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN",
                       "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP"})


def srun_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for the launchers' ``srun``: without the enclosing step's ``SLURM_*`` task settings (and any
    ``SRUN_*`` / ``SBATCH_*`` defaults), which ``srun`` would read as options of the new step."""
    return {k: v for k, v in env.items()
            if not (k.startswith(("SRUN_", "SBATCH_")) or (k.startswith("SLURM_") and k not in SRUN_KEEP))}


def srun_command(command: Sequence[str], config: str, ppn: int, n_nodes: int, cpus: int | None,
                 port: int | None, python: str) -> list[str]:
    """The ``srun`` step of one launcher per node, inside the job (see the module docstring for --overlap); each
    launcher gets all the job's CPUs on its node (``cpus``), else a CPU-binding site confines a node's ranks to one."""
    out = ["srun", "--overlap", f"--nodes={n_nodes}", f"--ntasks={n_nodes}", "--ntasks-per-node=1",
           *([f"--cpus-per-task={cpus}"] if cpus else []), "--kill-on-bad-exit=1",
           python, "-m", "brorl.training.launch", "--node", "--accelerate-config", config,
           "--processes-per-node", str(ppn), "--nodes", str(n_nodes)]
    if port:
        out += ["--main-port", str(port)]
    return out + ["--", *command]


def plan(command: Sequence[str], config: str = "fsdp2", *, procs: int | None = None, nodes: int | None = None,
         port: int | None = None, node_step: bool = False, env: Mapping[str, str] | None = None,
         allocation: Allocation | None = None, python: str = sys.executable) -> list[str]:
    """The command ``brorl launch`` execs, from its options and the environment (``env``: ``os.environ``).

    Inside a SLURM job (``SLURM_JOB_ID``): the launchers' ``srun`` over the job's nodes (``allocation``: default
    :func:`slurm_allocation`; ``nodes`` overrides its node count). ``node_step``: this process is a per-node
    launcher that ``srun`` started (rank ``SLURM_NODEID`` among the step's nodes, ``SLURM_STEP_NODELIST``).
    ``port`` None: on one node a free port (several launches side by side, e.g. two arms of the small profile
    on one CPU machine, must not share one), across nodes :data:`DEFAULT_PORT`."""
    env = os.environ if env is None else env
    ppn = processes_per_node(procs, config, env)
    if not node_step and env.get("SLURM_JOB_ID"):
        if allocation is None:
            try:
                allocation = slurm_allocation(env["SLURM_JOB_ID"])
            except RuntimeError as err:
                if not nodes:
                    raise
                print(f"[launch] {err}: {nodes} nodes as given, the CPUs of srun's default", file=sys.stderr)
                allocation = Allocation(nodes, (), None)
        return srun_command(command, config, ppn, nodes or allocation.nodes, allocation.cpus_per_node, port, python)
    n_nodes = nodes or 1
    if n_nodes == 1:
        return accelerate_command(command, config, ppn, port=port or free_port(), python=python)
    if not node_step:
        raise RuntimeError(f"{n_nodes} nodes need a SLURM allocation (SLURM_JOB_ID is not set)")
    rank = env.get("SLURM_NODEID")
    if rank is None:
        raise RuntimeError("the per-node launcher runs under srun (SLURM_NODEID is not set)")
    hosts = expand_nodelist(env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or "")
    if len(hosts) < n_nodes:
        raise RuntimeError(f"SLURM_STEP_NODELIST names {len(hosts)} hosts for {n_nodes} nodes")
    return accelerate_command(command, config, ppn, num_machines=n_nodes, machine_rank=int(rank),
                              main_ip=hosts[0], port=port or DEFAULT_PORT, python=python)


def free_port() -> int:
    """A TCP port nothing listens on now (the OS picks it), for a one-node launch's rendezvous."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--accelerate-config", default="fsdp2",
                   help=f"one of {CONFIGS} (workflow/accelerate/<name>.yaml) or an accelerate config file")
    p.add_argument("--processes-per-node", type=int, default=None, help="default: the node's GPUs")
    p.add_argument("--nodes", type=int, default=None,
                   help="default: the SLURM job's nodes (scontrol show job), or 1 outside SLURM")
    p.add_argument("--main-port", type=int, default=None,
                   help=f"rendezvous port; default: a free one on one node, {DEFAULT_PORT} across nodes")
    p.add_argument("--node", action="store_true", help=argparse.SUPPRESS)  # the per-node step under srun
    p.add_argument("--dry-run", action="store_true", help="print the command as JSON instead of running it")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command (e.g. brorl train-arm ...)")


def main(args: argparse.Namespace) -> int:
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    argv = plan(command, args.accelerate_config, procs=args.processes_per_node, nodes=args.nodes,
                port=args.main_port, node_step=args.node)
    if args.dry_run:
        print(json.dumps(argv))
        return 0
    print("[launch] " + " ".join(shlex.quote(a) for a in argv), file=sys.stderr, flush=True)
    env = srun_env(os.environ) if argv[0] == "srun" else os.environ
    os.execvpe(argv[0], argv, env)
    return 127  # pragma: no cover - exec does not return


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m brorl.training.launch")
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))


def config_errors(rl: dict, profile) -> list[str]:
    """The config check (brorl.pipeline.config_errors): arms under `brorl launch` split each step's prompts across
    its processes: with the CPU accelerate config (a fixed 2 processes; a GPU host's count is known only where it
    runs) every arm's prompts per step must be a multiple of them, or the arm fails only once its job starts (found
    with SmolLM2, issue 19)."""
    if profile.trains_start or (rl.get("launch") or {}).get("accelerate_config") != "cpu":
        return []
    procs = processes_per_node(None, "cpu", {})
    return [f"rl.arms.batches[{i}].prompts_per_step: {b.get('prompts_per_step')} is not a multiple of the {procs} "
            f"processes of rl.launch.accelerate_config: cpu [rule: prompts split across processes]"
            for i, b in enumerate((rl.get("arms") or {}).get("batches") or [])
            if isinstance(b, dict) and isinstance(b.get("prompts_per_step"), int) and b["prompts_per_step"] % procs]
