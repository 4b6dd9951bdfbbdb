"""The throughput study (BroRL Table 2, and beyond): rollout samples/s and tokens/s against N for the same
total number of samples, per generation engine.

Each measurement runs ``BroRLTrainer._generate`` (the exact call the trainer times for
``generation_samples_per_s``: tokenize, sample, decode) on ``total / N`` prompts x N samples, so every N
generates the same number of samples. Engines: ``prefix_tree`` (the trainer's default), ``shared_prompt``,
``hf`` (TRL's ``model.generate`` on N repeated rows) on the CPU. TRL's vLLM path (GPU; prefix caching on / off
is vLLM's ``enable_prefix_caching``) is not set up here yet and is refused rather than measured as HF. Used by the ``throughput_study``
rule and by ``benchmarks/bench_generation.py``.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from pathlib import Path
from typing import Sequence

COLUMNS = ("n_rollouts", "prompts", "samples", "engine", "samples_per_s", "tokens_per_s", "mean_length",
           "seconds", "repeats", "threads")


def measure_throughput(model_dir: str | Path, *, ns: Sequence[int] = (16, 64, 128, 256, 512), total: int = 8192,
                       engines: Sequence[str] = ("prefix_tree", "shared_prompt", "hf"), repeats: int = 1,
                       threads: int = 2, chunk_samples: int = 1024, task: str = "add", seed: int = 99,
                       progress: bool = True) -> list[dict]:
    """One row per (N, engine): the best of ``repeats`` measurements of ``total`` samples (see module doc)."""
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ.setdefault(key, "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer

    from brorl.tasks.core import TaskSettings, format_prompt, generate_split, max_new_tokens
    from brorl.training.settings import RLSettings
    from brorl.training.stage import grpo_config
    from brorl.training.trainer import BroRLTrainer

    if "vllm" in engines:
        raise ValueError("engine 'vllm' needs TRL's vLLM generation (GPU, use_vllm), which the throughput study "
                         "does not set up yet; measure prefix_tree / shared_prompt / hf")
    if total < max(ns):
        raise ValueError(f"total = {total} is smaller than the largest N = {max(ns)}: every N needs a prompt")
    torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    records = generate_split(task, "train", max(total // n for n in ns), seed=seed,
                             partition_seed=TaskSettings().seed)
    prompts = [format_prompt(tok, r) for r in records]
    length = max_new_tokens(TaskSettings(), [task])
    base = RLSettings(n_rollouts=min(ns), prompts_per_step=1, beta=0.0, chunk_samples=chunk_samples,
                      threads=threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        trainer = BroRLTrainer(model=str(model_dir), reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                               args=grpo_config(base, Path(tmp) / "out", length),
                               train_dataset=Dataset.from_dict({"prompt": prompts}), processing_class=tok,
                               settings=base)
        trainer.model.train()  # the trainer generates in training mode
        for n in ns:
            batch = [p for p in prompts[: total // n] for _ in range(n)]
            for engine in engines:
                trainer.settings = dataclasses.replace(base, generation_engine=engine)
                trainer.num_generations = n
                best_s, tokens = float("inf"), 0
                for rep in range(repeats):
                    trainer._sampler_seed = rep
                    t0 = time.perf_counter()
                    _, completion_ids, *_ = trainer._generate(batch)
                    seconds = time.perf_counter() - t0
                    if seconds < best_s:
                        best_s, tokens = seconds, sum(map(len, completion_ids))
                row = {"n_rollouts": n, "prompts": len(batch) // n, "samples": len(batch), "engine": engine,
                       "samples_per_s": len(batch) / best_s, "tokens_per_s": tokens / best_s,
                       "mean_length": tokens / len(batch), "seconds": best_s, "repeats": repeats, "threads": threads}
                rows.append(row)
                if progress:
                    print(f"[throughput] N={n:4d} {engine:14s} {row['samples_per_s']:9.0f} samples/s "
                          f"{row['tokens_per_s']:9.0f} tokens/s", flush=True)
    return rows


def ratios(rows: list[dict]) -> dict[str, float]:
    """Per engine: samples/s at the largest N over samples/s at the smallest (BroRL Table 2: 1.98x)."""
    out = {}
    for engine in dict.fromkeys(r["engine"] for r in rows):
        mine = sorted((r for r in rows if r["engine"] == engine), key=lambda r: r["n_rollouts"])
        if len(mine) > 1:
            out[engine] = mine[-1]["samples_per_s"] / mine[0]["samples_per_s"]
    return out


def write_outputs(rows: list[dict], csv_path: str | Path, png_path: str | Path | None = None,
                  md_path: str | Path | None = None, title: str = "") -> dict[str, float]:
    """``throughput.csv`` (COLUMNS), an optional figure and markdown table; returns :func:`ratios`."""
    import csv

    Path(csv_path).parent.mkdir(parents=True, exist_ok=True)
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS))
        w.writeheader()
        w.writerows(rows)
    rat = ratios(rows)
    if md_path is not None:
        lines = [f"**Generation throughput against N, same total samples per cell{title}.** Paper (BroRL Table 2, "
                 "64 H100s, vLLM): 36.5 samples/s at N=16, 72.4 at N=512 (1.98x).", "",
                 "| N | prompts | engine | samples/s | tokens/s | mean length |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['n_rollouts']} | {r['prompts']} | {r['engine']} | {r['samples_per_s']:,.0f} | "
                  f"{r['tokens_per_s']:,.0f} | {r['mean_length']:.2f} |" for r in rows]
        lines += ["", "Largest N over smallest N: " + ", ".join(f"{e} {v:.2f}x" for e, v in rat.items()) + "."]
        Path(md_path).write_text("\n".join(lines) + "\n")
    if png_path is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for engine in dict.fromkeys(r["engine"] for r in rows):
            mine = sorted((r for r in rows if r["engine"] == engine), key=lambda r: r["n_rollouts"])
            for ax, key in zip(axes, ("samples_per_s", "tokens_per_s")):
                ax.plot([r["n_rollouts"] for r in mine], [r[key] for r in mine], marker="o", label=engine)
        for ax, label in zip(axes, ("samples/s", "tokens/s")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("N (rollouts per prompt)")
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
        axes[0].legend()
        fig.suptitle(f"Rollout throughput against N, equal samples per cell{title}")
        fig.tight_layout()
        fig.savefig(png_path, dpi=110)
        plt.close(fig)
    return rat
