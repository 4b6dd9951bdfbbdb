"""benchmarks/gpu_check.py --cpu: every paper-profile piece (model, paper data through the fetch path, two RL
steps with the paper reward, lm-eval on a few problems, throughput at two N) runs on the CPU engines. About
2-3 minutes on a 2-core machine, hence slow. The GPU mode is not exercised here (no GPU)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from brorl.config import PROJECT_ROOT


@pytest.mark.slow
def test_gpu_check_cpu_mode_runs_every_piece(tmp_path):
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, str(PROJECT_ROOT / "benchmarks" / "gpu_check.py"), "--cpu",
                           "--work", str(tmp_path / "work"), "--out", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r["piece"]: r for r in json.loads(out.read_text())}
    assert list(rows) == ["model", "data", "train", "eval", "throughput"]
    assert all(r["status"] == "ok" for r in rows.values())
    assert len(rows["train"]["steps"]) == 2 and all(s["generated_samples"] >= 32 for s in rows["train"]["steps"])
    assert {r["n_rollouts"] for r in rows["throughput"]["rows"]} == {16, 64}
    assert "| piece | status | s | what |" in proc.stdout
    assert Path(tmp_path / "work" / "data" / "train_data.json").exists()
