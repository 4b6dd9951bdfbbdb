"""The `brorl` command line: a table of sub-commands, each calling one function of its stage's module."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from brorl import cli
from brorl.config import PROJECT_ROOT


def test_every_command_names_a_function_of_its_stage():
    for name, command in cli.COMMANDS.items():
        assert callable(cli.target(name)), name
        module, function = command.target.split(":")
        assert module.startswith("brorl.") and module != "brorl.cli", name


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_each_command_has_help_and_rule_commands_take_the_rule_arguments(name, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([name, "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    rule = cli.COMMANDS[name].run is not None
    for flag in ("--config CONFIG", "--tracking TRACKING", "--profile PROFILE", "--rule RULE", "--wildcard KEY=VALUE"):
        assert (flag in text) == rule or (flag.startswith("--tracking") and name == "init-tracking"), (name, flag)


def test_help_starts_without_the_heavy_libraries():
    code = ("import sys\nfrom brorl import cli\ntry:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'mlflow', 'transformers', 'pandas') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    assert "theory-simulate" in proc.stdout and "paper-table" in proc.stdout


def test_a_command_exits_0_whatever_its_step_returns(monkeypatch):
    """train-arm's step returns the arm summary (a dict): the command still exits 0 (sys.exit(dict) would be 1). The
    command builds the Arm once from its config slice and hands it on (N as a number, never read from the name)."""
    from brorl.training import arms

    seen = {}

    def fake(arm, *folders, **kwargs):
        seen.update(arm=arm, folders=folders, seed=kwargs["seed"], source=kwargs["source"])
        return {"arm": arm.name}

    monkeypatch.setattr(arms, "run_arm", fake)
    rl = {"recipe": {"eta0": 0.1}, "arms": {"sample_budget": 64, "batches": [{"n_rollouts": 8, "prompts_per_step": 2}]}}
    assert cli.main(["train-arm", "--rule", "train_arm", "--profile", "tiny", "--config", json.dumps(rl),
                     "--arm", "n8", "--seed", "2", "--init", "i", "--data", "d", "--work", "w", "--model-out", "m",
                     "--results", "r"]) == 0
    arm = seen.pop("arm")
    assert seen == {"folders": ("i", "d", "w", "m", "r"), "seed": 2, "source": "tasks"}
    assert isinstance(arm, arms.BatchArm) and arm.name == "n8" and arm.n == 8
    assert [s.n_rollouts for s in arm.settings(2)] == [8] and arm.settings(2)[0].seed == 2


def test_train_arm_names_an_arm_its_config_lacks():
    rl = {"arms": {"sample_budget": 64, "batches": [{"n_rollouts": 8, "prompts_per_step": 2}]}}
    with pytest.raises(SystemExit, match=r"--arm n16: no such arm in --config \(its arms: n8\)"):
        cli.main(["train-arm", "--rule", "train_arm", "--profile", "tiny", "--config", json.dumps(rl), "--arm", "n16",
                  "--init", "i", "--data", "d", "--work", "w", "--model-out", "m", "--results", "r"])


def test_under_launch_the_other_ranks_train_without_an_mlflow_run(tmp_path, monkeypatch):
    """`brorl launch -- brorl train-arm ...`: a process with RANK > 0 runs the stages quietly and opens no run."""
    from brorl.training import stage

    calls = []

    class Stop(Exception):
        pass

    def first_stage(init, data, out, settings, **kwargs):
        calls.append((init, data, settings.n_rollouts, settings.eta0, kwargs))
        raise Stop  # the stage itself is not the point: what reaches it, and that no run is open

    monkeypatch.setattr(stage, "train_stage", first_stage)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Stop):
        cli.main(["train-arm", "--rule", "prorl_stage", "--profile", "tiny", "--config",
                  '{"recipe": {"eta0": 0.1}, "prorl": {"n_rollouts": 4}}', "--tracking",
                  f'{{"uri": "sqlite:///{tmp_path}/mlflow.db"}}', "--arm", "prorl", "--init", "i", "--data", "d",
                  "--work", "w", "--model-out", "m", "--results", "r"])
    assert calls == [(Path("i"), "d", 4, 0.1, {"progress": False, "source": "tasks"})]
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "r" / "mlflow_run_id").exists()


def test_the_snakefile_imports_stay_without_torch():
    """What the Snakefile and its rules import to plan the DAG (a no-op rerun pays for every import: issue 31's
    <= 5 s) loads neither torch nor transformers; the validation of the default config included."""
    mods = ("brorl.config", "brorl.data.catalog", "brorl.data.training", "brorl.layout", "brorl.pipeline",
            "brorl.study.plan", "brorl.training.arms", "brorl.training.settings")
    code = ("import importlib, sys\n" + "".join(f"importlib.import_module({m!r})\n" for m in mods)
            + "from brorl.pipeline import Plan, load_config, validate_workflow_config\n"
            + "config = load_config('config/config.yaml')\n"
            + "validate_workflow_config(config, ['config/config.yaml'], {})\n"
            + "Plan(config, cores=2, gpu_total=None, dryrun=lambda: False)\n"
            + "print(sorted(m for m in ('torch', 'transformers', 'trl') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=PROJECT_ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
