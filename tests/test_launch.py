"""`brorl launch`: the accelerate / srun command lines it builds (one node, SLURM nodes), and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from brorl.training import launch

TRAIN = ["brorl", "train-arm", "--arm", "n16", "--config", '{"a": 1}']


def test_expand_nodelist():
    assert launch.expand_nodelist("gpu[01-03,07]") == ["gpu01", "gpu02", "gpu03", "gpu07"]
    assert launch.expand_nodelist("a1,b[8-10],c") == ["a1", "b8", "b9", "b10", "c"]
    assert launch.expand_nodelist("node-7") == ["node-7"]


def test_single_node_uses_every_visible_gpu():
    env = {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    cmd = launch.plan(TRAIN, "fsdp2", env=env, python="py")
    assert cmd[:3] == ["py", "-m", "accelerate.commands.launch"]
    opts = dict(zip(cmd[3:13:2], cmd[4:14:2]))
    assert opts["--num_processes"] == "4" and opts["--num_machines"] == "1" and opts["--machine_rank"] == "0"
    assert opts["--config_file"].endswith("workflow/accelerate/fsdp2.yaml")
    assert cmd[-len(TRAIN) - 1:] == ["-m", "brorl.cli", *TRAIN[1:]]  # the console script as a module
    assert "--main_process_ip" not in cmd
    # one node: a free port each launch, so two launches side by side do not collide; a given one is kept
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        assert all(launch.free_port() != taken for _ in range(20))
    assert launch.plan(TRAIN, "fsdp2", port=1234, env=env, python="py")[12] == "1234"
    # a one-node SLURM job: the node's GPUs from SLURM, counted by the per-node launcher's step
    env = {"SLURM_JOB_ID": "7", "SLURM_GPUS_ON_NODE": "8"}
    one = launch.Allocation(1, ("gpu1",), 64)
    cmd = launch.plan(TRAIN, env=env, allocation=one, python="py")
    assert cmd[0] == "srun" and "--nodes=1" in cmd and cmd[cmd.index("--processes-per-node") + 1] == "8"
    assert launch.plan(TRAIN, procs=8, node_step=True, env=env, python="py")[6] == "8"
    cmd = launch.plan(TRAIN, env={"SLURM_JOB_ID": "7", "SLURM_GPUS_PER_NODE": "h100:8"}, allocation=one, python="py")
    assert cmd[cmd.index("--processes-per-node") + 1] == "8"

def test_cpu_config_and_other_commands():
    cmd = launch.plan(["python", "script.py"], "cpu", env={}, python="py")
    assert "--multi_gpu" in cmd and cmd[cmd.index("--num_processes") + 1] == "2"  # torchrun launcher, gloo
    assert "--multi_gpu" not in launch.plan(["x.py"], "cpu", procs=1, env={}, python="py")
    assert cmd[-3:] == ["--no_python", "python", "script.py"]
    assert launch.plan(["train.py", "--x"], "cpu", procs=3, env={}, python="py")[-2:] == ["train.py", "--x"]
    with pytest.raises(FileNotFoundError):
        launch.plan(TRAIN, "megatron", env={})
    with pytest.raises(ValueError, match="no command"):
        launch.plan([], "cpu", env={})


SLURM = {"SLURM_JOB_ID": "42", "SLURM_GPUS_ON_NODE": "8"}
EIGHT = launch.Allocation(8, tuple(f"gpu{k}" for k in range(100, 108)), 64)


def test_slurm_several_nodes_runs_one_launcher_per_node():
    # inside the jobstep plugin's step the environment says 1 node (SLURM_NNODES of its `srun -n1`, no
    # SLURM_JOB_NUM_NODES): the node count comes from the allocation (scontrol), not from there
    step_env = {**SLURM, "SLURM_NNODES": "1", "SLURM_STEP_NUM_NODES": "1", "SLURM_JOB_NODELIST": "gpu100"}
    outer = launch.plan(TRAIN, "fsdp2", env=step_env, allocation=EIGHT, python="py")
    # --overlap: the step shares what the jobstep plugin's own `srun -n1` step holds (else it waits forever)
    assert outer[:7] == ["srun", "--overlap", "--nodes=8", "--ntasks=8", "--ntasks-per-node=1",
                         "--cpus-per-task=64", "--kill-on-bad-exit=1"]
    assert outer[7:10] == ["py", "-m", "brorl.training.launch"] and "--node" in outer
    assert outer[outer.index("--processes-per-node") + 1] == "8" and outer[-len(TRAIN):] == TRAIN
    assert "--main-port" not in outer  # each node's launcher takes the default port (or the one given)
    assert launch.plan(TRAIN, port=4321, env=SLURM, allocation=EIGHT, python="py")[-len(TRAIN) - 3:-len(TRAIN) - 1] \
        == ["--main-port", "4321"]
    assert "--nodes=2" in launch.plan(TRAIN, nodes=2, env=SLURM, allocation=EIGHT, python="py")  # --nodes wins
    # what each node's launcher then runs (srun sets SLURM_NODEID and SLURM_STEP_NODELIST per task)
    for rank in (0, 5):
        node_env = {**SLURM, "SLURM_NODEID": str(rank), "SLURM_STEP_NODELIST": "gpu[100-107]"}
        cmd = launch.plan(TRAIN, "fsdp2", procs=8, nodes=8, node_step=True, env=node_env, python="py")
        opt = lambda k: cmd[cmd.index(k) + 1]  # noqa: E731
        assert opt("--num_processes") == "64" and opt("--num_machines") == "8"  # accelerate: total processes
        assert opt("--machine_rank") == str(rank) and opt("--main_process_ip") == "gpu100"
        assert opt("--rdzv_backend") == "static" and opt("--main_process_port") == str(launch.DEFAULT_PORT)
    with pytest.raises(RuntimeError, match="SLURM allocation"):
        launch.plan(TRAIN, nodes=2, env={})
    with pytest.raises(RuntimeError, match="under srun"):
        launch.plan(TRAIN, nodes=8, node_step=True, env=SLURM)
    with pytest.raises(RuntimeError, match="names 1 hosts for 8 nodes"):
        launch.plan(TRAIN, nodes=8, node_step=True, env={**SLURM, "SLURM_NODEID": "0", "SLURM_STEP_NODELIST": "a"})


def test_allocation_from_scontrol_and_the_nested_srun_environment(monkeypatch, tmp_path):
    line = ("JobId=42 JobName=arm UserId=u(1) NodeList=gpu[100-101],cpu7 BatchHost=gpu100 NumNodes=3 NumCPUs=200 "
            "NumTasks=3 CPUs/Task=64 TRES=cpu=200,node=3 JOB_GRES=gpu:16   Nodes=gpu[100-101] CPU_IDs=0-31,64-95 "
            "Mem=512000 GRES=gpu:8(IDX:0-7)   Nodes=cpu7 CPU_IDs=0-71 Mem=1000 GRES= MinCPUsNode=64 WorkDir=/w")
    assert launch.parse_scontrol_job(line) == launch.Allocation(3, ("gpu100", "gpu101", "cpu7"), 64)
    # without the per-node details (no -d): the job's CPUs over its nodes
    assert launch.parse_scontrol_job("JobId=1 NodeList=vm NumNodes=1 NumCPUs=2").cpus_per_node == 2
    with pytest.raises(ValueError, match="NumNodes"):
        launch.parse_scontrol_job("slurm_load_jobs error: Invalid job id specified")
    # no scontrol (or it fails): an error that says to give --nodes, and with --nodes the launch goes on
    no_scontrol = {"SLURM_JOB_ID": "3"}
    monkeypatch.setenv("PATH", str(tmp_path))  # subprocess finds no scontrol
    with pytest.raises(RuntimeError, match="give --nodes"):
        launch.plan(TRAIN, env=no_scontrol, python="py")
    cmd = launch.plan(TRAIN, nodes=2, env=no_scontrol, python="py")
    assert cmd[:3] == ["srun", "--overlap", "--nodes=2"] and "--cpus-per-task" not in " ".join(cmd)
    assert "--cpus-per-task" not in " ".join(launch.plan(TRAIN, env={"SLURM_JOB_ID": "3"},
                                                         allocation=launch.Allocation(1, ("a",), None), python="py"))
    # inside the jobstep plugin's `srun -n1 --cpus-per-task=64` step: its task settings stay out of the new srun
    # (srun reads some SLURM_* variables as options), the job's identity and everything else stays in
    step = {"SLURM_JOB_ID": "3", "SLURM_JOBID": "3", "SLURM_NTASKS": "1", "SLURM_CPUS_PER_TASK": "64",
            "SLURM_TRES_PER_TASK": "cpu:64", "SLURM_STEP_ID": "0", "SRUN_CPUS_PER_TASK": "64",
            "SBATCH_MEM_PER_NODE": "1", "SLURM_CONF": "/etc/slurm/slurm.conf", "PATH": "/bin", "BRORL_PROFILE": "x"}
    assert launch.srun_env(step) == {"SLURM_JOB_ID": "3", "SLURM_JOBID": "3", "SLURM_CONF": "/etc/slurm/slurm.conf",
                                     "PATH": "/bin", "BRORL_PROFILE": "x"}


def test_cli_dry_run_takes_the_command_after_double_dash():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}  # outside SLURM even in a job
    proc = subprocess.run([sys.executable, "-m", "brorl.cli", "launch", "--accelerate-config", "cpu",
                           "--processes-per-node", "2", "--dry-run", "--", *TRAIN],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    cmd = json.loads(proc.stdout)
    assert cmd[cmd.index("--num_processes") + 1] == "2" and cmd[-len(TRAIN) + 1:] == TRAIN[1:]
    assert "--" not in cmd

