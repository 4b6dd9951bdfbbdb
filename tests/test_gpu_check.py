"""benchmarks/gpu_check.py: the --cpu mode runs every piece (two RL steps, the memory plan beside measured peaks,
throughput of the three engines at N = 16, 64, 256, 512) with only the one-GPU host's packages plus the carried
wheels importable; the time guard skips and records cells; the check refuses a tree over 64 MiB. No wall-clock
assertions: the CPU mode has no time limits (a shared CI machine is slow at times). The GPU mode is not exercised
here (no GPU)."""

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
    assert {k: v["status"] for k, v in report["pieces"].items()} == {"train": "ok", "memory": "ok", "throughput": "ok"}
    memory = report["pieces"]["memory"]["rows"]
    assert [(r["micro_batch"], r["seq_len"], r["checkpointing"]) for r in memory] == [(2, 64, False), (2, 64, True)]
    assert all(r["predicted_mib"] > 0 and r["measured_mib"] > 0 for r in memory)
    assert report["pieces"]["train"]["plan_mb"] > 0 and report["tree_mib"] < 64
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
        assert r["plan_mb"] > 0
    assert report["versions"]["trl"] == "1.16.0" and report["versions"]["torch"]
    assert {p.name for p in out.iterdir()} == {"gpu_check.json", "summary.md", "throughput.csv", "throughput.png",
                                                "gpu_check.log"}
    summary = (out / "summary.md").read_text()
    assert "| 512 | 1 | prefix_tree |" in summary and "plan: weights + KV MB" in summary
    assert "| tiny-qwen2 | 2 | 64 | True |" in summary


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


def test_one_run_and_a_rerun_fit_the_hosts_15_minutes():
    """The device time covers the host's start (minutes), the wheel install and two runs of the check: the
    budget keeps one run near 5 minutes (its pieces' caps inside it)."""
    gpu = gpu_check.PROFILES["gpu"]
    start, install = 180, 30  # seconds: a machine start, pip's install of the carried wheels [our estimates]
    assert start + 2 * (install + gpu["budget"]) <= 15 * 60
    assert gpu_check.TRAIN_LIMIT_S + gpu_check.MEMORY_LIMIT_S < gpu["budget"]


def test_generation_plan_counts_weights_and_kv_cache_by_hand():
    config = {**gpu_check.TINY_QWEN2, "model_type": "qwen2"}  # 2 layers, 2 KV heads of 16: 256 B/token in bf16
    from brorl.training.memory import Architecture

    params = Architecture.from_mapping(config).params
    kv = 2 * 2 * 2 * 16 * 2
    assert gpu_check.generation_plan(config, "hf", 16, 4, 8, 10, 2) == params * 2 + 64 * 18 * kv
    assert gpu_check.generation_plan(config, "prefix_tree", 16, 4, 8, 10, 2) == params * 2 + (4 * 8 + 64 * 10) * kv
    assert gpu_check.generation_plan(config, "hf", 16, 4, 8, 10, 4) == params * 4 + 64 * 18 * kv * 2


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_a_tree_over_64_mib_is_refused_naming_the_largest_files(tmp_path, monkeypatch, capsys):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "small.txt").write_text("x" * 1000)
    _git(repo, "add", "small.txt")
    with open(repo / "model.gguf", "wb") as f:  # sparse: 65 MiB of apparent size, what a copy would carry
        f.truncate(65 * 2**20)
    mib, problem = gpu_check.tree_problem(repo)
    assert mib > 64 and "model.gguf (65.0 MiB)" in problem and ".gitignore" in problem
    monkeypatch.setattr(gpu_check, "ROOT", repo)
    assert gpu_check.main(["--tree-only"]) == 2
    assert "refused" in capsys.readouterr().err
    (repo / ".gitignore").write_text("*.gguf\n")  # ignored: it no longer travels
    assert gpu_check.tree_problem(repo) == (pytest.approx(1010 / 2**20, rel=0.2), None)
    assert gpu_check.main(["--tree-only"]) == 0
    wheels = repo / "wheels"  # an ignored folder named to travel counts
    wheels.mkdir()
    with open(wheels / "big.whl", "wb") as f:
        f.truncate(70 * 2**20)
    (repo / ".gitignore").write_text("*.gguf\nwheels/\n")
    assert gpu_check.tree_problem(repo)[1] is None
    assert "wheels/big.whl" in gpu_check.tree_problem(repo, carry=["wheels"])[1]
    assert gpu_check.main(["--tree-only", "--carry", "wheels"]) == 2


def test_without_git_every_file_travelled(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.bin").write_bytes(b"0" * 2048)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "big").write_bytes(b"0" * 4096)
    assert gpu_check.travelling_files(tmp_path, skip=[tmp_path / "out"]) == {"a/x.bin": 2048}


def test_the_repository_ignores_model_weights():
    paths = ["resources/models/prorl/model.safetensors", "resources/wheels/x/SmolLM2.Q4_1.gguf", "m/optimizer.pt",
             "m/training_args.bin", "resources/models/sft.dvc"]
    proc = subprocess.run(["git", "check-ignore", *paths], cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert proc.stdout.split() == paths[:4]  # the .dvc file beside a model folder stays visible to git
