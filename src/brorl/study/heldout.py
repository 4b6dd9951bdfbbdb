"""Held-out metrics of a checkpoint, exactly, from teacher-forced probabilities (no sampling noise).

For a test prompt with correct answers A, p = sum_{a in A} P(a + eos | prompt) at temperature 1 is the
probability that one sampled completion is correct (the tiny tasks' answers are short strings, so every
correct completion is enumerated). From p per prompt:

- mean@k = mean p (the expected value of the paper's mean@k for any k);
- pass@k = mean (1 - (1 - p)^k) (the expected value of the unbiased pass@k estimator from k samples);
- coverage@k = pass@k read as "share of prompts with any correct sample among k";
- the per-prompt pass-rate histogram, whose zero bin is p <= 1/512 (not one correct sample expected in 512);
- against the start model: Q_pos on the hard tail (prompts with start p in (1/512, 1/16)) and, on the
  multi-answer probes, the share of (prompt, correct answer) pairs whose probability rose and the worst drop.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from brorl.tasks.core import is_probe, read_split
from brorl.training.stage import TAIL_HI, TAIL_LO

BINS = (("zero", -np.inf, TAIL_LO), ("(1/512,1/64]", TAIL_LO, 1 / 64), ("(1/64,1/16]", 1 / 64, 1 / 16),
        ("(1/16,1/4]", 1 / 16, 1 / 4), ("(1/4,3/4]", 1 / 4, 3 / 4), ("(3/4,1]", 3 / 4, np.inf))
"""Per-prompt pass-rate bins (lo, hi]; ``zero``: p <= 1/512."""
DEFAULT_K = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def probabilities(model_dir: str | Path, data_dir: str | Path, split: str = "test") -> dict[str, np.ndarray]:
    """Per-prompt p (all families, file order), its family, and per-answer probabilities of the probes."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from brorl.models.scoring import answer_string_probabilities, exact_answer_probability

    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True).eval()
    records = read_split(data_dir, split)
    with torch.no_grad():
        p = exact_answer_probability(model, tok, records)
        answer_probs = [answer_string_probabilities(model, tok, r, list(r["answers"])) for r in records
                        if is_probe(r["task"])]
    return {"p": p, "task": np.array([r["task"] for r in records]), "ids": np.array([r["id"] for r in records]),
            "answer_probs": np.concatenate(answer_probs) if answer_probs else np.zeros(0)}


def pass_at_k(p: np.ndarray, k: int) -> float:
    return float(np.mean(1.0 - (1.0 - np.clip(p, 0.0, 1.0)) ** k)) if p.size else float("nan")


def histogram(p: np.ndarray) -> dict[str, float]:
    return {name: float(((p > lo) & (p <= hi)).mean()) for name, lo, hi in BINS} if p.size else {}


def metrics(end: dict, start: dict, ks=DEFAULT_K) -> dict:
    """Held-out metrics of ``end`` (see :func:`probabilities`), with tail / probe changes against ``start``."""
    if not np.array_equal(end["ids"], start["ids"]):
        raise ValueError("start and end were measured on different prompts")
    ks = sorted(set(ks) | {1, 16, 256})  # the report's columns
    out: dict = {}
    groups = {"all": np.ones(end["p"].size, bool),
              **{t: end["task"] == t for t in sorted(set(end["task"].tolist()))}}
    for name, mask in groups.items():
        p = end["p"][mask]
        out[name] = {"prompts": int(mask.sum()), "mean_at_k": float(p.mean()),
                     **{f"pass@{k}": pass_at_k(p, k) for k in ks},
                     "coverage@256": pass_at_k(p, 256), "histogram": histogram(p)}
    single = np.array([not is_probe(t) for t in end["task"]])
    q0, q1 = start["p"][single], end["p"][single]
    tail = (q0 > TAIL_LO) & (q0 < TAIL_HI)
    delta = end["answer_probs"] - start["answer_probs"]
    out["tail"] = {"prompts": int(tail.sum()), "q_pos_start": float(q0[tail].mean()) if tail.any() else None,
                   "q_pos_end": float(q1[tail].mean()) if tail.any() else None}
    out["probes"] = {"pairs": int(delta.size),
                     "frac_correct_improved": float((delta > 0).mean()) if delta.size else None,
                     "worst_correct_delta": float(delta.min()) if delta.size else None}
    return out


def save(path: str | Path, start: dict, end: dict) -> None:
    np.savez(path, p_start=start["p"], p_end=end["p"], task=end["task"], ids=end["ids"],
             answer_probs_start=start["answer_probs"], answer_probs_end=end["answer_probs"])
