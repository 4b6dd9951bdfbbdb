"""Per-prompt difficulty of a model on a split: sampled pass rates plus the exact Q_pos.

``estimate_difficulty`` samples ``samples`` completions per prompt at temperature 1 with the
shared-prompt KV-cache sampler (:mod:`brorl.models.sampling`), checks each with
:func:`brorl.tasks.verify`, and adds the teacher-forced Q_pos (:mod:`brorl.models.scoring`), whose
expectation the sampled pass rate estimates. ``plot_difficulty`` draws the histogram over the pilot's
bins to a PNG.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from brorl.models.settings import DifficultySettings
from brorl.tasks.core import format_prompt, max_new_tokens, read_split, strip_completion, verify
from brorl.atomic import frame_to_csv, save_figure

BINS = ("=0", "(0,1/64)", "[1/64,1/16)", "[1/16,1/4)", "[1/4,3/4)", "[3/4,1)", "=1")
TAIL_LO, TAIL_HI = 1.0 / 512, 1.0 / 16
META_COLUMNS = ("max_digits", "d", "lo", "hi", "n_answers")


def bin_of(rate: np.ndarray) -> np.ndarray:
    """Index into :data:`BINS` for each pass rate."""
    rate = np.asarray(rate, dtype=np.float64)
    edges = np.array([1 / 64, 1 / 16, 1 / 4, 3 / 4])
    idx = 1 + np.searchsorted(edges, rate, side="right")
    idx = np.where(rate <= 0, 0, idx)
    idx = np.where(rate >= 1, 6, idx)
    return idx


def difficulty_histogram(df, column: str = "pass_rate", by_task: bool = True):
    """Share of prompts in each bin (rows: ``all`` and each task), plus pass@1 and tail shares."""
    import pandas as pd

    groups = [("all", df)]
    if by_task and df["task"].nunique() > 1:
        groups += [(t, g) for t, g in df.groupby("task", sort=False)]
    rows = []
    for name, g in groups:
        rate = g[column].to_numpy()
        counts = np.bincount(bin_of(rate), minlength=len(BINS)) / max(len(rate), 1)
        row = {"group": name, "n": len(rate), **dict(zip(BINS, counts)), "pass1": float(rate.mean())}
        row["tail_sampled(0,1/16)"] = float(((rate > 0) & (rate < TAIL_HI)).mean())
        if "q_pos_exact" in g:
            q = g["q_pos_exact"].to_numpy()
            row["tail_exact(1/512,1/16)"] = float(((q > TAIL_LO) & (q < TAIL_HI)).mean())
            row["q_pos_mean"] = float(q.mean())
        rows.append(row)
    return pd.DataFrame(rows)


def estimate_difficulty(model_dir, records: list[dict], samples: int = 512, temperature: float = 1.0,
                        seed: int = 0, chunk_samples: int = 1024, threads: int = 2,
                        settings: DifficultySettings | dict | None = None, progress: bool = True,
                        model=None, tokenizer=None):
    """Per-prompt table: id, task, pass_rate (``samples`` draws), n_correct, samples, q_pos_exact, ...

    ``settings`` (a :class:`DifficultySettings` or dict) overrides the keyword defaults. A loaded
    ``model`` / ``tokenizer`` may be passed instead of ``model_dir``.
    """
    import pandas as pd
    import torch

    from brorl.models.sampling import sample_token_ids
    from brorl.models.scoring import encode, exact_answer_probability
    from brorl.models.sft import load_model

    if settings is not None:
        s = settings if isinstance(settings, DifficultySettings) else DifficultySettings.from_dict(settings)
        samples, temperature, seed = s.samples, s.temperature, s.seed
        chunk_samples, threads = s.chunk_samples, s.threads
    if threads:
        torch.set_num_threads(threads)
    if model is None or tokenizer is None:
        model, tokenizer = load_model(model_dir)
    model.eval()
    t0 = time.perf_counter()
    prompt_ids = [encode(tokenizer, format_prompt(tokenizer, r)) for r in records]
    gen_len = max_new_tokens(tasks=sorted({r["task"] for r in records}))
    last = [0.0]

    def report(done, total):
        if progress and (time.perf_counter() - last[0] > 10 or done == total):
            last[0] = time.perf_counter()
            print(f"[difficulty] {done}/{total} prompts x {samples} samples ({last[0] - t0:.0f}s)", flush=True)

    ids = sample_token_ids(model, prompt_ids, samples, gen_len, tokenizer.eos_token_id, tokenizer.pad_token_id,
                           temperature=temperature, seed=seed, chunk_samples=chunk_samples, progress=report)
    t_sample = time.perf_counter() - t0
    n_correct, n_distinct, n_no_eos = [], [], []
    for rec, block in zip(records, ids):
        texts = tokenizer.batch_decode(block.tolist(), skip_special_tokens=False)
        ok = [verify(rec, t) for t in texts]
        n_correct.append(int(sum(ok)))
        answers = {strip_completion(t) for t, o in zip(texts, ok) if o}
        n_distinct.append(len(answers))
        n_no_eos.append(int((block == tokenizer.eos_token_id).sum(dim=1).eq(0).sum()))
    t1 = time.perf_counter()
    q = exact_answer_probability(model, tokenizer, records, temperature=temperature)
    t_exact = time.perf_counter() - t1
    df = pd.DataFrame({
        "id": [r["id"] for r in records],
        "task": [r["task"] for r in records],
        "pass_rate": np.asarray(n_correct, dtype=np.float64) / samples,
        "n_correct": n_correct,
        "samples": samples,
        "q_pos_exact": q,
        "pass_at_k_exact": 1.0 - (1.0 - q) ** samples,
        "distinct_correct": n_distinct,
        "no_eos": n_no_eos,
        "prompt": [r["prompt"] for r in records],
        "answer": [r["answer"] for r in records],
        "n_answers_total": [len(r.get("answers") or [r["answer"]]) for r in records],
    })
    for col in META_COLUMNS:
        if any(col in r for r in records):
            df[col] = [r.get(col) for r in records]
    seconds = time.perf_counter() - t0
    df.attrs.update({"seconds": seconds, "sample_seconds": t_sample, "exact_seconds": t_exact,
                     "samples_per_second": samples * len(records) / max(t_sample, 1e-9)})
    if progress:
        print(f"[difficulty] {len(records)} prompts x {samples}: sampling {t_sample:.1f}s "
              f"({df.attrs['samples_per_second']:.0f} samples/s), exact Q_pos {t_exact:.1f}s, "
              f"pass@1 {df['pass_rate'].mean():.3f} (exact {q.mean():.3f})", flush=True)
    return df


def plot_difficulty(df, png_path, title: str | None = None, column: str = "pass_rate") -> dict:
    """Bar chart of the share of prompts per pass-rate bin (one bar group per task); returns the shares."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hist = difficulty_histogram(df, column=column)
    fig, ax = plt.subplots(figsize=(8, 4))
    x = np.arange(len(BINS))
    width = 0.8 / len(hist)
    for i, (_, row) in enumerate(hist.iterrows()):
        ax.bar(x + (i - (len(hist) - 1) / 2) * width, [row[b] for b in BINS], width,
               label=f"{row['group']} (n={row['n']}, pass@1 {row['pass1']:.3f})")
    ax.set_xticks(x, BINS)
    samples = int(df["samples"].iloc[0]) if "samples" in df and len(df) else None
    ax.set_xlabel(f"per-prompt pass rate ({samples} samples, T=1)" if samples else "per-prompt pass rate")
    ax.set_ylabel("share of prompts")
    ax.axvspan(0.5, 2.5, color="grey", alpha=0.12, lw=0)
    ax.set_title(title or "Per-prompt difficulty (shaded: the (0, 1/16) tail)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    Path(png_path).parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, png_path, dpi=120)
    plt.close(fig)
    overall = hist.iloc[0]
    return {k: float(overall[k]) for k in hist.columns if k not in ("group",)}


def run_difficulty(config: dict, model_dir, data_dir, csv_path, png_path, title: str = "checkpoint"):
    """``brorl difficulty``: per-prompt pass rates of a checkpoint on the validation split (``csv_path``) and their
    histogram (``png_path``); the means and bin shares logged to the rule's MLflow run. Returns the table."""
    import mlflow

    from brorl.tracking import numeric_metrics

    records = read_split(data_dir, "validation", config["tasks"]["tasks"])
    t0 = time.perf_counter()
    frame = estimate_difficulty(model_dir, records, settings=config["difficulty"])
    seconds = time.perf_counter() - t0
    frame_to_csv(frame, csv_path, index=False)
    shares = plot_difficulty(frame, png_path, title=f"{title}: per-prompt pass rate")
    mlflow.log_metrics({"seconds": seconds, "pass_rate_mean": float(frame["pass_rate"].mean()),
                        "q_pos_exact_mean": float(frame["q_pos_exact"].mean()), **numeric_metrics(shares)})
    mlflow.log_artifact(csv_path)
    mlflow.log_artifact(png_path)
    print(f"[difficulty] {model_dir}: mean pass rate {frame['pass_rate'].mean():.3f} over {len(frame)} "
          f"prompts in {seconds:.1f} s -> {csv_path}")
    return frame
