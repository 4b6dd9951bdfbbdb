"""The study's tail-dominated pool (issue 29 item 3): training prompts where BroRL's theory says larger N wins.

BroRL argues that more rollouts per prompt help on the hard tail: prompts whose pass rate p at the start lies in
(1/512, 1/16), where N=16 rarely sees a correct answer and N=512 almost always does. The tiny study's default pool
has ~8.5% of its prompts there (issue 29), so the comparison mostly measured something else. This pool is:

- ``train``: ``candidates`` fresh training prompts per single-answer family (``probe_train_size`` per probe family)
  drawn from the train region of the prompt space, the prompts of the ``fixed`` pool (what the start was trained
  on) removed, each scored at the start checkpoint with the exact teacher-forced pass rate
  (:func:`brorl.study.heldout.probabilities`), and **only those in (1/512, 1/16) kept**;
- ``validation``: the suite's validation split (the training probes read it), unchanged;
- ``test``: the held-out split enlarged to ``test_size`` per single-answer family, so that enough test prompts fall
  in the band to compare arms on it (the report: the band and the full test set).

``families`` limits the pool (all three splits) to some families: ``config/study_weak.yaml`` trains on the
weak-transfer ``lookup`` family only, whose held-out prompts then show how much the arms transfer.

``tail_pool.json`` beside them counts candidates, kept prompts and test prompts in the band per family.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from brorl.atomic import write_text
from brorl.study.plan import tail_families
from brorl.tasks.core import TaskSettings, is_probe, read_split, split_path, write_jsonl, write_splits
from brorl.training.stage import TAIL_HI, TAIL_LO

BAND = (TAIL_LO, TAIL_HI)
"""BroRL's hard tail: per-prompt pass rate in (1/512, 1/16) (pilot.md §2; the study's ``tail`` columns)."""


def in_band(p: np.ndarray) -> np.ndarray:
    return (p > BAND[0]) & (p < BAND[1])


def candidate_tasks(tasks: dict, tail_pool: dict) -> TaskSettings:
    """The tiny task settings of the candidates: ``candidates`` train prompts per single-answer family of the pool
    (:func:`tail_families`) and ``test_size`` test prompts (the validation split and the prompt-space partition are
    the suite's)."""
    return TaskSettings.from_dict({**tasks, "tasks": tail_families(tasks, tail_pool), "train_size": tail_pool["candidates"],
                                   "test_size": tail_pool["test_size"]})


def select(records: list[dict], p: np.ndarray, exclude: set[tuple[str, str]]) -> tuple[list[dict], dict]:
    """The records in the band and not in ``exclude`` ({(task, prompt)}), and counts per family."""
    keep, counts = [], {}
    for r, q in zip(records, p):
        c = counts.setdefault(r["task"], {"candidates": 0, "seen_in_fixed_pool": 0, "zero": 0, "band": 0, "above": 0})
        if (r["task"], r["prompt"]) in exclude:
            c["seen_in_fixed_pool"] += 1
            continue
        c["candidates"] += 1
        kind = "zero" if q <= BAND[0] else "band" if q < BAND[1] else "above"
        c[kind] += 1
        if kind == "band":
            keep.append({**r, "start_pass_rate": float(q)})
    return keep, counts


def build_tail_pool(config: dict, model_dir, exclude_dir, out_dir, work_dir=None) -> dict:
    """Write the tail pool under ``out_dir`` (see the module) from the start model ``model_dir``; ``config``:
    ``{"tasks": <tasks section>, "tail_pool": <study.tail_pool>}``; ``exclude_dir``: the fixed pool (its train
    prompts are not candidates). Returns the counts (also ``tail_pool.json``)."""
    from brorl.study.heldout import probabilities

    tp, out = config["tail_pool"], Path(out_dir)
    settings = candidate_tasks(config["tasks"], tp)
    cand = Path(work_dir) if work_dir else out.with_name(out.name + "_candidates")
    write_splits(cand, settings)
    train = read_split(cand, "train", settings.tasks)
    exclude = {(r["task"], r["prompt"]) for r in read_split(exclude_dir, "train")}
    p_train = probabilities(model_dir, cand, "train")["p"]
    kept, counts = select(train, p_train, exclude)
    min_prompts = int(tp.get("min_prompts", 1))
    if len(kept) < min_prompts:
        raise ValueError(f"study.tail_pool: {len(kept)} of {len(train)} candidates lie in (1/512, 1/16) at the start, "
                         f"fewer than study.tail_pool.min_prompts = {min_prompts}; raise study.tail_pool.candidates")
    test = probabilities(model_dir, cand, "test")
    for task in settings.tasks:
        write_jsonl(split_path(out, task, "train"), [r for r in kept if r["task"] == task])
        for split in ("validation", "test"):
            shutil.copyfile(split_path(cand, task, split), split_path(out, task, split))
        band = in_band(test["p"][test["task"] == task])
        counts[task].update(test_prompts=int(band.size), test_in_band=int(band.sum()))
    write_text(out / "tasks.json", json.dumps(settings.to_dict(), indent=1) + "\n")
    single = np.array([not is_probe(t) for t in test["task"]])
    summary = {"band": list(BAND), "candidates": len(train), "kept": len(kept),
               "kept_share": len(kept) / max(1, sum(c["candidates"] for c in counts.values())),
               "test_prompts": int(test["p"].size), "test_in_band_single_answer": int((in_band(test["p"]) & single).sum()),
               "families": counts}
    write_text(out / "tail_pool.json", json.dumps(summary, indent=1) + "\n")
    shutil.rmtree(cand, ignore_errors=True)
    return summary


def run_study_tail_pool(config: dict, model_dir, exclude_dir, out_dir) -> dict:
    """``brorl study-tail-pool``: :func:`build_tail_pool` in the rule's MLflow run (its counts as metrics,
    ``tail_pool.json`` as an artifact)."""
    import mlflow

    s = build_tail_pool(config, model_dir, exclude_dir, out_dir)
    mlflow.log_metrics({"candidates": s["candidates"], "kept": s["kept"], "kept_share": s["kept_share"],
                        "test_in_band": s["test_in_band_single_answer"]})
    mlflow.log_artifact(str(Path(out_dir) / "tail_pool.json"))
    print(f"[tail pool] {s['kept']} of {s['candidates']} candidates in (1/512, 1/16) at the start "
          f"({s['kept_share']:.3f}); {s['test_in_band_single_answer']} of {s['test_prompts']} test prompts in the band")
    return s


