"""How much does training on some prompts of a family raise the pass rate on its other prompts? (issue 29)

The tail-pool comparison found N=16 lifting its own hard tail 0.02 -> 0.42 on ``add``: an update on one sum helps all
sums (strong transfer), so what N=512 costs at equal samples (32x fewer distinct prompts) dominated. The ``lookup``
family (:mod:`brorl.tasks.lookup`) is built to transfer weakly. This check measures it, the same way for every family:

1. split ``prompts`` records of the family into two halves A and B (seeded);
2. from a copy of the model, take ``steps`` AdamW steps of teacher forcing on A's correct answers (the update a
   rewarded correct sample pushes towards; supervised, so no sampling noise);
3. measure the exact pass rate p (:func:`brorl.models.scoring.exact_answer_probability`) on A and B before and after.

``transfer`` = gain on B / gain on A: ~1 when every prompt shares one rule, ~0 when answers are prompt-specific.
It reads transfer only when A is large and each of its prompts is seen a few times: from the tiny ProRL checkpoint,
256 ``add`` prompts repeated ~15 times each were memorised at the other half's cost (transfer < 0), 2,048 prompts seen
~2 times each gave 0.41 (docs/study.md "The weak-transfer family", measured 2026-12-06).
``python -m brorl.study.transfer MODEL_DIR DATA_DIR --families add lookup`` prints one JSON line per family.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class TransferSettings:
    """One transfer check (defaults: the pilot's of issue 29)."""

    prompts: int = 512
    """Records of the family used (half trained on, half held out)."""
    steps: int = 60
    """AdamW steps of teacher forcing on half A."""
    batch_size: int = 64
    """Records of half A per step (drawn with replacement)."""
    lr: float = 1e-3
    """AdamW learning rate (constant; weight decay 0)."""
    seed: int = 0
    """The split of the records and the batches."""


def split_halves(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of halves A and B of ``n`` records (a seeded permutation; A gets the extra one when n is odd)."""
    order = np.random.default_rng([seed, 29]).permutation(n)
    half = (n + 1) // 2
    return np.sort(order[:half]), np.sort(order[half:])


def _pairs(tokenizer, records):
    from brorl.models.scoring import encode
    from brorl.tasks.core import format_prompt

    eos = tokenizer.eos_token_id
    return [(encode(tokenizer, format_prompt(tokenizer, r)), encode(tokenizer, r["answer"]) + [eos]) for r in records]


def _teacher_force(model, pairs, settings: TransferSettings) -> None:
    """``settings.steps`` AdamW steps of cross-entropy on the continuation tokens of ``pairs``."""
    import torch

    rng = np.random.default_rng([settings.seed, 7])
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.0)
    model.train()
    for _ in range(settings.steps):
        batch = [pairs[i] for i in rng.integers(0, len(pairs), settings.batch_size)]
        width = max(len(p) + len(c) for p, c in batch)
        ids = torch.zeros((len(batch), width), dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        for row, (p, c) in enumerate(batch):
            seq = p + c
            ids[row, : len(seq)] = torch.tensor(seq)
            labels[row, len(p): len(seq)] = torch.tensor(c)
        logits = model(input_ids=ids).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                                                 ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()


def transfer_check(model, tokenizer, records: list[dict], settings: TransferSettings | None = None) -> dict:
    """The check on ``records`` (one family's single-answer records, at least 2; the first ``settings.prompts`` are
    used). ``model`` is trained in place: pass a copy. Returns the halves' mean exact p before and after, the gains
    and ``transfer`` (gain on B / gain on A; NaN when A did not gain)."""
    import torch

    from brorl.models.scoring import exact_answer_probability

    settings = settings or TransferSettings()
    records = records[: settings.prompts]
    if len(records) < 2:
        raise ValueError(f"transfer check: {len(records)} record(s); needs at least 2 (two halves)")
    families = sorted({r["task"] for r in records})
    a, b = split_halves(len(records), settings.seed)
    half_a, half_b = [records[i] for i in a], [records[i] for i in b]
    model.eval()
    with torch.no_grad():
        a0, b0 = exact_answer_probability(model, tokenizer, half_a), exact_answer_probability(model, tokenizer, half_b)
    _teacher_force(model, _pairs(tokenizer, half_a), settings)
    with torch.no_grad():
        a1, b1 = exact_answer_probability(model, tokenizer, half_a), exact_answer_probability(model, tokenizer, half_b)
    gain_a, gain_b = float(a1.mean() - a0.mean()), float(b1.mean() - b0.mean())
    return {"families": families, "prompts_a": len(half_a), "prompts_b": len(half_b),
            "a_start": float(a0.mean()), "a_end": float(a1.mean()), "b_start": float(b0.mean()), "b_end": float(b1.mean()),
            "gain_a": gain_a, "gain_b": gain_b, "transfer": gain_b / gain_a if gain_a > 0 else math.nan,
            "settings": asdict(settings)}


def run_transfer(model_dir, data_dir, families, split: str = "train", settings: TransferSettings | None = None,
                 threads: int = 1) -> dict[str, dict]:
    """:func:`transfer_check` for each family on ``<data_dir>/<family>/<split>.jsonl``, each from a fresh load of
    the model in ``model_dir``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from brorl.tasks.core import read_split

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed((settings or TransferSettings()).seed)
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    out = {}
    for family in families:
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True)
        out[family] = transfer_check(model, tok, read_split(data_dir, split, [family]), settings)
    return out


if __name__ == "__main__":  # python -m brorl.study.transfer MODEL_DIR DATA_DIR --families add lookup [--steps 60 ...]
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("data_dir")
    ap.add_argument("--families", nargs="+", required=True)
    ap.add_argument("--split", default="train")
    for field, default in asdict(TransferSettings()).items():
        ap.add_argument(f"--{field.replace('_', '-')}", type=type(default), default=default)
    args = ap.parse_args()
    s = TransferSettings(**{k: getattr(args, k) for k in asdict(TransferSettings())})
    for family, result in run_transfer(args.model_dir, args.data_dir, args.families, args.split, s).items():
        print(json.dumps({"family": family, **result}))
