"""benchmarks/compare_runs.py: two runs' results equal apart from timings, run ids and paths (issue 33), and a
changed number anywhere else is reported."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SPEC = importlib.util.spec_from_file_location("compare_runs",
                                              Path(__file__).resolve().parents[1] / "benchmarks/compare_runs.py")
cr = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(cr)

TABLE = "| arm | val pass@1 | wall s |\n|---|---|---|\n| n16 | {v} | {w} |\n"


def write(root: Path, v: float, wall: float, run: str, steps: int = 30) -> Path:
    (root / "train/n16").mkdir(parents=True)
    (root / "train/n16/summary.json").write_text(json.dumps(
        {"arm": "n16", "steps": steps, "val": v, "wall_time_s": wall, "stage_summaries": [{"peak_rss_mb": wall}]}))
    (root / "train/n16/mlflow_run_id").write_text(run)
    (root / "train/metrics.csv").write_text(f"step,val,wall_time_s\n1,{v},{wall}\n")
    (root / "summary.md").write_text(TABLE.format(v=v, w=wall) + f"\nstopped after {steps} steps ({wall} s), "
                                     f"run `{run}`\n")
    return root


def test_timings_run_ids_and_paths_are_left_out(tmp_path):
    a = write(tmp_path / "a", 0.4605, 19.2, "a" * 32)
    b = write(tmp_path / "b", 0.4605, 16.1, "b" * 32)
    diffs, status = cr.compare(a, b)
    assert diffs == {}
    assert status["train/n16/mlflow_run_id"] == "skipped"
    assert status["summary.md"] == status["train/metrics.csv"] == "equal apart from timings, run ids, paths"
    assert cr.main([str(a), str(b)]) == 0


def test_a_changed_number_is_reported_in_every_format(tmp_path):
    a = write(tmp_path / "a", 0.4605, 19.2, "a" * 32)
    b = write(tmp_path / "b", 0.4606, 19.2, "a" * 32, steps=31)
    diffs, _ = cr.compare(a, b)
    assert set(diffs) == {"train/n16/summary.json", "train/metrics.csv", "summary.md"}
    assert any("/steps" in d for d in diffs["train/n16/summary.json"])
    assert cr.main([str(a), str(b)]) == 1
