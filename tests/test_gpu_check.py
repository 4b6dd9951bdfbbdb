"""benchmarks/gpu_check.py: the --cpu mode runs both pieces (two RL steps, throughput of the three engines at
N = 16, 64, 256, 512) with only the one-GPU host's packages plus the carried wheels importable; the time guard
skips and records cells. No wall-clock assertions: the CPU mode has no time limits (a shared CI machine is slow
at times). The GPU mode is not exercised here (no GPU)."""

import importlib.util
import json
import re
import subprocess
import time
import venv
from importlib import metadata
from pathlib import Path

import pytest

from brorl.config import PROJECT_ROOT

BENCH = PROJECT_ROOT / "benchmarks"
spec = importlib.util.spec_from_file_location("gpu_check", BENCH / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_check)


def _names(path: Path) -> set[str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return {re.sub(r"[-_.]+", "-", line.split("==")[0]).lower() for line in lines if line}


def host_python(folder: Path) -> Path:
    """A venv in which only the GPU host's preinstalled packages and the carried wheels can be imported (links to
    this environment's copies of them; brorl comes from src/ through PYTHONPATH, as on the host)."""
    allowed = _names(BENCH / "gpu_host_packages.txt") | _names(BENCH / "gpu_wheels.txt")
    venv.create(folder, with_pip=False, symlinks=True)
    site = next(folder.glob("lib/python*/site-packages"))
    for dist in metadata.distributions():
        if re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower() not in allowed:
            continue
        for top in {Path(f).parts[0] for f in dist.files or []} - {"..", "__pycache__"}:
            source = Path(dist.locate_file(top))
            if source.exists() and not (site / top).exists():
                (site / top).symlink_to(source)
    return folder / "bin" / "python"


def test_carried_wheels_cover_trl_and_datasets_requirements():
    """Every requirement of TRL and datasets (and theirs) is preinstalled on the host or a carried wheel."""
    have = _names(BENCH / "gpu_host_packages.txt") | _names(BENCH / "gpu_wheels.txt")
    missing = {}
    for name in _names(BENCH / "gpu_wheels.txt"):
        for req in metadata.requires(name) or []:
            if "extra ==" not in req:
                dep = re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.\-]+", req).group()).lower()
                if dep not in have:
                    missing.setdefault(name, []).append(dep)
    assert not missing


@pytest.mark.slow
def test_gpu_check_cpu_mode_runs_every_piece_with_the_host_packages(tmp_path):
    python = host_python(tmp_path / "host")
    probe = subprocess.run([python, "-c", "import importlib.util as u; print(u.find_spec('mlflow') is None, "
                            "u.find_spec('math_verify') is None, u.find_spec('trl') is not None)"],
                           capture_output=True, text=True)
    assert probe.stdout.split() == ["True", "True", "True"], probe.stderr  # the simulation holds
    out = tmp_path / "out"
    proc = subprocess.run([python, BENCH / "gpu_check.py", "--cpu", "--work", tmp_path / "work", "--out", out],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": PROJECT_ROOT
                                                               / "src", "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + (out / "gpu_check.log").read_text()[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    assert {k: v["status"] for k, v in report["pieces"].items()} == {"train": "ok", "throughput": "ok"}
    train = report["pieces"]["train"]
    assert len(train["steps"]) == 2 and train["engine"] == "prefix_tree" and train["model_device"] == "cpu"
    for step in train["steps"]:  # dynamic sampling ran: a refill round whenever the first one missed groups
        assert step["generated_samples"] >= 4 * train["n_rollouts"]
        assert step["generation_rounds"] >= 1 and 0 <= step["dynamic_sampling_pass_rate"] <= 1
    cells = {(r["n_rollouts"], r["engine"]): r for r in report["throughput"]}
    assert set(cells) == {(n, e) for n in (16, 64, 256, 512) for e in ("hf", "shared_prompt", "prefix_tree")}
    for (n, _), r in cells.items():
        assert r["status"] == "ok" and r["samples"] == 512 and r["prompts"] == 512 // n
        assert r["samples_per_s"] > 0 and r["tokens_per_s"] == pytest.approx(r["samples_per_s"] * 8)
    assert report["versions"]["trl"] == "1.16.0" and report["versions"]["torch"]
    assert {p.name for p in out.iterdir()} == {"gpu_check.json", "summary.md", "throughput.csv", "throughput.png",
                                                "gpu_check.log"}
    assert "| 512 | 1 | prefix_tree |" in (out / "summary.md").read_text()


def test_time_guard_estimates_a_cell_from_its_engine_else_the_slowest():
    assert gpu_check.guard({}, "hf", 10.0) is None  # nothing measured yet: run while time is left
    assert gpu_check.guard({}, "hf", 0.0).startswith("time guard:")
    assert gpu_check.guard({"hf": 20.0}, "hf", 30.0) is None
    assert gpu_check.guard({"hf": 20.0, "prefix_tree": 5.0}, "hf", 19.0) == "time guard: 20 s needed, 19 s left"
    assert gpu_check.guard({"hf": 20.0, "prefix_tree": 5.0}, "prefix_tree", 19.0) is None
    assert gpu_check.guard({"hf": 20.0, "prefix_tree": 5.0}, "shared_prompt", 19.0) is not None


def test_time_guard_records_skipped_and_cut_cells(tmp_path):
    """With the deadline already past every cell is skipped with its reason; a cell left 'started' by a piece
    the guard killed is reported as cut."""
    opts = {**gpu_check.PROFILES["cpu"], "cpu": True, "new_tokens": 2, "deadline": time.time()}
    gpu_check.piece_throughput(tmp_path, opts)
    rows = gpu_check.throughput_rows(tmp_path)
    assert len(rows) == 12 and all(r["status"] == "skipped" and r["reason"].startswith("time guard:") for r in rows)
    with open(tmp_path / "throughput.rows.jsonl", "a") as f:
        row = {"n_rollouts": 64, "engine": "hf", "prompts": 8, "samples": 512, "status": "started"}
        f.write(json.dumps(row) + "\n")
    cut = {(r["n_rollouts"], r["engine"]): r["status"] for r in gpu_check.throughput_rows(tmp_path)}
    assert cut[(64, "hf")] == "cut" and cut[(16, "hf")] == "skipped"


def test_a_piece_past_its_limit_is_killed_and_recorded(tmp_path):
    opts = {**gpu_check.PROFILES["cpu"], "cpu": True, "deadline": None}
    row = gpu_check.run_piece("train", tmp_path, opts, limit=0.5)  # importing torch alone takes longer
    assert row["status"] == "timeout" and "time guard" in row["error"]
