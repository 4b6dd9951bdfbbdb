"""rg_difficulty.pick: the tasks the difficulty scan puts in BroRL's band are what the small profile trains and
evaluates (train_data / benchmark_data read the scan's tasks table), declared once (issue 19)."""

import copy
import subprocess
import sys

import pytest

from brorl.config import PROJECT_ROOT, ConfigError
from brorl.pipeline import load_config, validate_config
from brorl.kinds.reasoning_gym import apply_picked, pick, picked_tasks
from brorl.evaluation.rg_difficulty import write_csv


def _rows(task, passes, k=8):
    return [{"task": task, "prompt": i, "passes": p, "k": k, "truncated": 0} for i, p in enumerate(passes)]


def test_the_tasks_in_the_band_are_picked_and_read_back(tmp_path):
    rows = _rows("basic_arithmetic", [1, 2, 0, 1]) + _rows("leg_counting", [0, 0, 0, 0]) + _rows("easy", [8, 8, 7, 8])
    table = tmp_path / "tasks.csv"
    write_csv(table, pick(rows, 1 / 64, 1 / 2))
    assert picked_tasks(table) == ["basic_arithmetic"]  # 0/32 and 31/32 are outside (1/64, 1/2)


def test_no_task_in_the_band_is_an_error_naming_the_table(tmp_path):
    table = tmp_path / "tasks.csv"
    write_csv(table, pick(_rows("leg_counting", [0, 0, 0, 0]), 1 / 64, 1 / 2))
    with pytest.raises(ValueError, match=r"tasks\.csv: no task in BroRL's band.*leg_counting 0\.000"):
        picked_tasks(table)


def test_picked_tasks_replace_the_list_and_keep_only_their_configs():
    section = {"sources": ["reasoning_gym"], "reasoning_gym_task_configs": {"a": {"x": 1}, "b": {"x": 2}}}
    out = apply_picked(section, ["b"], "reasoning_gym_tasks", "reasoning_gym_task_configs")
    assert out == {"sources": ["reasoning_gym"], "reasoning_gym_tasks": ["b"],
                   "reasoning_gym_task_configs": {"b": {"x": 2}}}
    assert "reasoning_gym_tasks" not in section  # the config section itself is not changed


@pytest.mark.parametrize("where, key", [("rl.data", "reasoning_gym_tasks"), ("evaluation.reasoning_gym", "tasks")])
def test_a_task_list_beside_pick_is_refused_naming_the_key(where, key):
    cfg = copy.deepcopy(load_config(PROJECT_ROOT / "config" / "small.yaml"))
    section = cfg
    for part in where.split("."):
        section = section[part]
    section[key] = ["basic_arithmetic"]
    with pytest.raises(ConfigError, match=rf"{where}\.{key}: given while rg_difficulty\.pick is true"):
        validate_config(cfg)


def test_the_small_dag_trains_and_evaluates_what_the_scan_picks(tmp_path):
    out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", "--cores", "1", "--configfile",
                          str(PROJECT_ROOT / "config/small.yaml"), "--directory", str(tmp_path), "--snakefile",
                          str(PROJECT_ROOT / "Snakefile")], cwd=PROJECT_ROOT, capture_output=True, text=True,
                         check=True).stdout
    commands = [line for line in out.splitlines() if "--picked-tasks results/small/data/rg_difficulty_tasks.csv" in line]
    assert any("brorl train-data" in c for c in commands) and any("brorl prepare-benchmark" in c for c in commands)
