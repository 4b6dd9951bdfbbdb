"""Generation throughput of the RL trainer's engines at N in {16, 64, 256, 512} for the same total samples.

Runs ``BroRLTrainer._generate`` (the exact call the trainer times for ``generation_samples_per_s``: tokenize,
sample, decode) on the tiny model with

- ``hf``: TRL's path, ``model.generate`` on the N-times repeated prompt rows (no prefix sharing);
- ``shared_prompt``: ``brorl.models.sample_token_ids``, one prefill per prompt, KV cache shared by its N rows;
- ``prefix_tree``: ``brorl.models.sampling.sample_token_ids_tree``, one forward row per *distinct* partial
  completion with a sample count split multinomially each step (same law as N i.i.d. samples); the
  trainer's default engine.

Each N uses total / N prompts (BroRL Table 2 compares samples/s at N = 16 and 512; pilot.md §6 the CPU case).
The summary gives each engine's samples/s ratio between the largest and the smallest N against the issue's
target (N=512 at least 2x N=16 on the CPU).

    .venv/bin/python benchmarks/bench_generation.py [--model DIR] [--total 8192] [--threads 2]

Without ``--model`` a randomly initialised tiny model (``ModelSettings`` defaults) is used: its completions
rarely sample the end token, so every completion runs to the full length (the slow case).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

for _k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_k, "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def random_model(folder: Path) -> Path:
    from brorl.models.settings import ModelSettings
    from brorl.models.sft import build_model, save_model_folder, tokenizer_corpus
    from brorl.models.tokenizer import build_tokenizer
    from brorl.tasks.core import TaskSettings

    tok = build_tokenizer(tokenizer_corpus(TaskSettings()))
    save_model_folder(build_model(ModelSettings(), tok, seed=0), tok, folder)
    return folder


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="HF model folder (default: random tiny model)")
    ap.add_argument("--total", type=int, default=8192, help="samples per measurement (same for every N)")
    ap.add_argument("--ns", type=int, nargs="+", default=[16, 64, 256, 512])
    ap.add_argument("--engines", nargs="+", default=["hf", "shared_prompt", "prefix_tree"])
    ap.add_argument("--repeats", type=int, default=1, help="measurements per cell (the best is shown)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunk-samples", type=int, default=1024)
    args = ap.parse_args(argv)

    from brorl.tasks.core import TaskSettings, max_new_tokens
    from brorl.training.throughput import measure_throughput, ratios

    tmp = tempfile.TemporaryDirectory()
    model_dir = args.model or random_model(Path(tmp.name) / "model")
    length = max_new_tokens(TaskSettings(), ["add"])
    measured = measure_throughput(model_dir, ns=args.ns, total=args.total, engines=args.engines,
                                  repeats=args.repeats, threads=args.threads, chunk_samples=args.chunk_samples)
    rows = [(r["n_rollouts"], r["prompts"], r["samples"], r["engine"], r["samples_per_s"], r["mean_length"])
            for r in measured]

    print(f"\nGeneration throughput, {args.total} samples per cell, {args.threads} threads, "
          f"max {length} new tokens, model {'random init' if args.model is None else args.model}")
    print(f"{'N':>5} {'prompts':>8} {'samples':>8} {'engine':>14} {'samples/s':>10} {'mean len':>9}")
    for n, p, total, engine, rate, mean_len in rows:
        print(f"{n:>5} {p:>8} {total:>8} {engine:>14} {rate:>10.0f} {mean_len:>9.2f}")
    by = {(n, e): r for n, _, _, e, r, _ in rows}
    if {"hf", "shared_prompt"} <= set(args.engines):
        print("shared_prompt / hf: " + ", ".join(f"N={n}: {by[(n, 'shared_prompt')] / by[(n, 'hf')]:.2f}x"
                                                 for n in args.ns))
    if "prefix_tree" in args.engines and "shared_prompt" in args.engines:
        print("prefix_tree / shared_prompt: " + ", ".join(
            f"N={n}: {by[(n, 'prefix_tree')] / by[(n, 'shared_prompt')]:.2f}x" for n in args.ns))
    lo, hi = min(args.ns), max(args.ns)
    for engine, ratio in ratios(measured).items():
        print(f"{engine:>14}: N={hi} / N={lo} = {ratio:.2f}x ({'meets' if ratio >= 2.0 else 'misses'} the 2x target)")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
