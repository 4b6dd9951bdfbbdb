"""`brorl launch`: the accelerate / srun command lines it builds (one node, SLURM nodes), and the CLI."""

from __future__ import annotations

import json
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
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": "8"}
    cmd = launch.plan(TRAIN, env=env, python="py")
    assert cmd[0] == "srun" and cmd[cmd.index("--processes-per-node") + 1] == "8"
    assert launch.plan(TRAIN, procs=8, node_step=True, env=env, python="py")[6] == "8"
    cmd = launch.plan(TRAIN, env={"SLURM_JOB_ID": "7", "SLURM_GPUS_PER_NODE": "h100:8"}, python="py")
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


SLURM = {"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "8", "SLURM_JOB_NODELIST": "gpu[100-107]",
         "SLURM_GPUS_ON_NODE": "8"}


def test_slurm_several_nodes_runs_one_launcher_per_node():
    outer = launch.plan(TRAIN, "fsdp2", env={**SLURM, "SLURM_JOB_CPUS_PER_NODE": "64(x8)"}, python="py")
    # --overlap: the step shares what the jobstep plugin's own `srun -n1` step holds (else it waits forever)
    assert outer[:7] == ["srun", "--overlap", "--nodes=8", "--ntasks=8", "--ntasks-per-node=1",
                         "--cpus-per-task=64", "--kill-on-bad-exit=1"]
    assert outer[7:10] == ["py", "-m", "brorl.training.launch"] and "--node" in outer
    assert "--main-port" not in outer  # each node's launcher takes the default port (or the one given)
    assert launch.plan(TRAIN, port=4321, env=SLURM, python="py")[-len(TRAIN) - 3:-len(TRAIN) - 1] == [
        "--main-port", "4321"]
    assert outer[outer.index("--processes-per-node") + 1] == "8" and outer[-len(TRAIN):] == TRAIN
    # what each node's launcher then runs (srun sets SLURM_NODEID per task)
    for rank in (0, 5):
        cmd = launch.plan(TRAIN, "fsdp2", procs=8, nodes=8, node_step=True, env={**SLURM, "SLURM_NODEID": str(rank)},
                          python="py")
        opt = lambda k: cmd[cmd.index(k) + 1]  # noqa: E731
        assert opt("--num_processes") == "64" and opt("--num_machines") == "8"  # accelerate: total processes
        assert opt("--machine_rank") == str(rank) and opt("--main_process_ip") == "gpu100"
        assert opt("--rdzv_backend") == "static"
        if rank == 0:
            assert opt("--main_process_port") == str(launch.DEFAULT_PORT)
    with pytest.raises(RuntimeError, match="SLURM allocation"):
        launch.plan(TRAIN, nodes=2, env={})
    with pytest.raises(RuntimeError, match="under srun"):
        launch.plan(TRAIN, nodes=8, node_step=True, env=SLURM)


def test_cli_dry_run_takes_the_command_after_double_dash():
    proc = subprocess.run([sys.executable, "-m", "brorl.cli", "launch", "--accelerate-config", "cpu",
                           "--processes-per-node", "2", "--dry-run", "--", *TRAIN],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    cmd = json.loads(proc.stdout)
    assert cmd[cmd.index("--num_processes") + 1] == "2" and cmd[-len(TRAIN) + 1:] == TRAIN[1:]
    assert "--" not in cmd


def test_job_cpus_per_node_and_the_nested_srun_environment():
    assert launch.job_cpus_per_node({"SLURM_JOB_CPUS_PER_NODE": "72(x2),36"}) == 36
    assert launch.job_cpus_per_node({"SLURM_JOB_CPUS_PER_NODE": "2"}) == 2
    assert launch.job_cpus_per_node({"SLURM_CPUS_ON_NODE": "16"}) == 16
    assert launch.job_cpus_per_node({}) is None
    assert "--cpus-per-task" not in " ".join(launch.plan(TRAIN, env={"SLURM_JOB_ID": "3"}, python="py"))
    # inside the jobstep plugin's `srun -n1 --cpus-per-task=64` step: its task settings stay out of the new srun
    # (srun reads some SLURM_* variables as options), the job's identity and everything else stays in
    step = {"SLURM_JOB_ID": "3", "SLURM_JOBID": "3", "SLURM_NTASKS": "1", "SLURM_CPUS_PER_TASK": "64",
            "SLURM_TRES_PER_TASK": "cpu:64", "SLURM_STEP_ID": "0", "SRUN_CPUS_PER_TASK": "64",
            "SBATCH_MEM_PER_NODE": "1", "SLURM_CONF": "/etc/slurm/slurm.conf", "PATH": "/bin", "BRORL_PROFILE": "x"}
    assert launch.srun_env(step) == {"SLURM_JOB_ID": "3", "SLURM_JOBID": "3", "SLURM_CONF": "/etc/slurm/slurm.conf",
                                     "PATH": "/bin", "BRORL_PROFILE": "x"}
