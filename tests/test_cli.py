"""The `brorl` command line: a table of sub-commands, each calling one function of its stage's module."""

import subprocess
import sys

import pytest

from brorl import cli


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
    """train-arm's step returns the arm summary (a dict): the command still exits 0 (sys.exit(dict) would be 1)."""
    from brorl.training import arms

    seen = {}

    def fake(rl, *folders, **kwargs):
        seen.update(rl=rl, folders=folders, arm=kwargs["arm"], seed=kwargs["seed"], source=kwargs["source"])
        return {"arm": kwargs["arm"]}

    monkeypatch.setattr(arms, "run_train_arm", fake)
    assert cli.main(["train-arm", "--rule", "train_arm", "--profile", "tiny", "--config", '{"a": 1}', "--arm", "n16",
                     "--seed", "2", "--init", "i", "--data", "d", "--work", "w", "--model-out", "m",
                     "--results", "r"]) == 0
    assert seen == {"rl": {"a": 1}, "folders": ("i", "d", "w", "m", "r"), "arm": "n16", "seed": 2, "source": "tasks"}


def test_under_launch_the_other_ranks_train_without_an_mlflow_run(tmp_path, monkeypatch):
    """`brorl launch -- brorl train-arm ...`: a process with RANK > 0 runs the stages quietly and opens no run."""
    from brorl.training import arms

    calls = []
    monkeypatch.setattr(arms, "run_arm", lambda *args, **kwargs: calls.append((args, kwargs)) or {"arm": "prorl"})
    monkeypatch.setenv("RANK", "1")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train-arm", "--rule", "prorl_stage", "--profile", "tiny", "--config",
                     '{"recipe": {"eta0": 0.1}, "prorl": {"n_rollouts": 4}}', "--tracking",
                     f'{{"uri": "sqlite:///{tmp_path}/mlflow.db"}}', "--arm", "prorl", "--init", "i", "--data", "d",
                     "--work", "w", "--model-out", "m", "--results", "r"]) == 0
    assert calls == [(("i", "d", "w", [{"eta0": 0.1, "n_rollouts": 4}], "m", "r"),
                      {"arm": "prorl", "seed": 0, "progress": False, "source": "tasks"})]
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "r").exists()
