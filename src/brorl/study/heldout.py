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

Where answers cannot be enumerated (the paper profile: math, code, Reasoning Gym), :func:`sampled_probabilities`
estimates p from ``samples`` completions per prompt scored by the training reward (reward 1 = correct), and
pass@k is the unbiased estimator 1 - C(n - c, k) / C(n, k) from c correct of n (Chen et al., 2021); k > n is
not reported (NaN). Its engines: ``hf`` (the trainer's prefix-sharing sampler, CPU or GPU) and ``vllm`` (GPU
hosts; not run here).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from brorl.atomic import atomic_path, write_text
from brorl.tasks.core import FAMILIES, is_probe, read_split
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


HELDOUT_DEFAULTS = {"mode": "exact", "split": "test", "samples": 256, "max_tokens": 0, "temperature": 1.0,
                    "top_p": 1.0, "engine": "hf", "seed": 1234, "vllm_args": {}}
"""``study.heldout``: ``exact`` (teacher-forced, enumerable answers) or ``sampled`` (``samples`` completions per
prompt from ``engine``, ``max_tokens`` new tokens each, 0 = the tiny tasks' length)."""


def _trim(row, eos_id: int) -> list[int]:
    """A sampled row up to and including its end token (what the trainer's reward sees)."""
    ids = [int(t) for t in row]
    return ids[: ids.index(eos_id) + 1] if eos_id in ids else ids


def sampled_probabilities(model_dir: str | Path, data_dir: str | Path, split: str = "validation", *,
                          samples: int = 256, max_tokens: int = 0, temperature: float = 1.0, top_p: float = 1.0,
                          engine: str = "hf", seed: int = 1234, vllm_args: dict | None = None,
                          chunk_samples: int = 4096, progress: bool = True,
                          source: str = "tasks") -> dict[str, np.ndarray]:
    """Per-prompt p estimated from ``samples`` completions scored by the training reward; ``source``: the data
    source kind (the declared profile.data, :func:`brorl.profile.sources`) that reads the split, gives the completion
    length when ``max_tokens`` is 0 and scores the completions. Same keys as :func:`probabilities` plus ``correct``
    and ``samples`` (no per-answer probe probabilities: ``answer_probs`` is empty)."""
    from transformers import AutoTokenizer

    from brorl.models.scoring import encode
    from brorl.profile import sources
    from brorl.tasks.core import format_prompt

    data = sources()[source]
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    records = data.read_split(data_dir, split)
    if not records:
        raise FileNotFoundError(f"no {split!r} records under {data_dir}")
    if not max_tokens:
        max_tokens = data.generation_length(data_dir, sorted({r["task"] for r in records}))
    prompts = [format_prompt(tok, r) for r in records]
    eos = tok.eos_token_id
    t0 = time.perf_counter()
    if engine == "vllm":
        rows = _vllm_samples(model_dir, prompts, samples, max_tokens, temperature, top_p, seed, vllm_args or {})
    elif engine == "hf":
        if top_p != 1.0:
            raise ValueError("heldout.top_p: the hf engine samples the full distribution (top_p 1.0); use vllm")
        from transformers import AutoModelForCausalLM

        from brorl.models.sampling import sample_token_ids_tree

        model = AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True)
        report = (lambda done, total: print(f"[heldout] {done}/{total} prompts x {samples} samples "
                                            f"({time.perf_counter() - t0:.0f} s)", flush=True)) if progress else None
        ids = sample_token_ids_tree(model, [encode(tok, p) for p in prompts], samples, max_tokens, eos,
                                    tok.pad_token_id if tok.pad_token_id is not None else eos,
                                    temperature=temperature, seed=seed, chunk_samples=chunk_samples,
                                    progress=report)
        rows = [[_trim(r, eos) for r in block.tolist()] for block in ids]
    else:
        raise ValueError(f"heldout.engine: {engine!r} is not one of hf, vllm")
    reward = data.reward(records, tok)
    flat = [r for block in rows for r in block]
    owner = [i for i, block in enumerate(rows) for _ in block]
    scores = np.asarray(reward(prompts=None, completions=tok.batch_decode(flat, skip_special_tokens=False),
                               completion_ids=flat, record_index=owner), dtype=float)
    correct = np.bincount(np.asarray(owner, dtype=np.int64), weights=(scores >= 1.0).astype(float),
                          minlength=len(records))
    if progress:
        print(f"[heldout] {model_dir}: {len(records)} prompts x {samples} samples ({engine}) in "
              f"{time.perf_counter() - t0:.0f} s, mean p {correct.mean() / samples:.4f}", flush=True)
    return {"p": correct / samples, "correct": correct.astype(np.int64), "samples": np.int64(samples),
            "task": np.array([r["task"] for r in records]), "ids": np.array([str(r["id"]) for r in records]),
            "answer_probs": np.zeros(0)}


def _vllm_samples(model_dir, prompts, samples, max_tokens, temperature, top_p, seed, vllm_args) -> list:
    """vLLM's offline engine, ``samples`` completions per prompt, seeded once at the engine (a per-request seed
    kills vLLM's CPU build: brorl.models.vllm_cpu.sampling_params)."""
    import torch

    from brorl.models.vllm_cpu import import_vllm, sampling_params

    LLM, SamplingParams = import_vllm("heldout.engine 'vllm'")
    llm = LLM(model=str(model_dir), seed=seed, **{"gpu_memory_utilization": 0.4, **vllm_args})
    params = sampling_params(SamplingParams, n=samples, temperature=temperature, top_p=top_p, max_tokens=max_tokens)
    outs = llm.generate(prompts, params)
    rows = [[list(c.token_ids) for c in o.outputs] for o in outs]
    del llm
    torch.cuda.empty_cache()
    return rows


def measure(model_dir: str | Path, data_dir: str | Path, heldout: dict | None = None, *,
            source: str = "tasks") -> dict[str, np.ndarray]:
    """Held-out per-prompt p of a checkpoint by the ``study.heldout`` settings (:data:`HELDOUT_DEFAULTS`);
    ``source``: the data source kind whose reward scores sampled completions (the declared profile.data)."""
    h = {**HELDOUT_DEFAULTS, **(heldout or {})}
    if h["mode"] == "exact":
        return probabilities(model_dir, data_dir, h["split"])
    return sampled_probabilities(model_dir, data_dir, h["split"], samples=h["samples"], max_tokens=h["max_tokens"],
                                 temperature=h["temperature"], top_p=h["top_p"], engine=h["engine"],
                                 seed=h["seed"], vllm_args=h["vllm_args"], source=source)


def measure_cached(model_dir: str | Path, data_dir: str | Path, heldout: dict | None, cache_dir, *,
                   source: str = "tasks") -> dict:
    """:func:`measure`, kept in ``cache_dir`` (keyed by the settings, the data folder and the model files'
    sizes and times) so a start model shared by many arms is measured once. ``cache_dir`` None: no cache."""
    if cache_dir is None:
        return measure(model_dir, data_dir, heldout, source=source)
    import hashlib

    files = sorted(p for p in Path(model_dir).rglob("*") if p.is_file())
    key = json.dumps({"model": str(Path(model_dir).resolve()), "data": str(Path(data_dir).resolve()),
                      "settings": {**HELDOUT_DEFAULTS, **(heldout or {})},
                      "files": [(str(p.relative_to(model_dir)), p.stat().st_size, p.stat().st_mtime_ns) for p in files]},
                     sort_keys=True)
    path = Path(cache_dir) / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.npz"
    if path.exists():
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    out = measure(model_dir, data_dir, heldout, source=source)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        np.savez(tmp, **out)
    return out


def pass_at_k(p: np.ndarray, k: int, samples: int | None = None) -> float:
    """Mean over prompts of pass@k: exact p -> 1 - (1 - p)^k; sampled (``samples`` = n, p = c / n) -> the
    unbiased 1 - C(n - c, k) / C(n, k), NaN for k > n."""
    if not p.size:
        return float("nan")
    if samples is None:
        return float(np.mean(1.0 - (1.0 - np.clip(p, 0.0, 1.0)) ** k))
    if k > samples:
        return float("nan")
    c = np.rint(p * samples).astype(np.int64)
    # C(n-c, k) / C(n, k) = prod_{i=0}^{k-1} (n - c - i) / (n - i), zero once n - c < k
    i = np.arange(k)
    ratio = np.prod(np.clip((samples - c[:, None] - i) / (samples - i), 0.0, None), axis=1)
    return float(np.mean(1.0 - ratio))


def histogram(p: np.ndarray) -> dict[str, float]:
    return {name: float(((p > lo) & (p <= hi)).mean()) for name, lo, hi in BINS} if p.size else {}


def metrics(end: dict, start: dict, ks=DEFAULT_K) -> dict:
    """Held-out metrics of ``end`` (see :func:`probabilities`), with tail / probe changes against ``start``."""
    if not np.array_equal(end["ids"], start["ids"]):
        raise ValueError("start and end were measured on different prompts")
    ks = sorted(set(ks) | {1, 16, 256})  # the report's columns
    n = int(end["samples"]) if "samples" in end else None
    out: dict = {"estimate": "exact" if n is None else f"sampled ({n} per prompt)"}
    groups = {"all": np.ones(end["p"].size, bool),
              **{t: end["task"] == t for t in sorted(set(end["task"].tolist()))}}
    for name, mask in groups.items():
        p = end["p"][mask]
        out[name] = {"prompts": int(mask.sum()), "mean_at_k": float(p.mean()),
                     **{f"pass@{k}": pass_at_k(p, k, n) for k in ks},
                     "coverage@256": pass_at_k(p, 256, n), "histogram": histogram(p)}
    single = np.array([not (t in FAMILIES and is_probe(t)) for t in end["task"]])  # paper sources: no probes
    q0, q1 = start["p"][single], end["p"][single]
    tail = (q0 > TAIL_LO) & (q0 < TAIL_HI)
    delta = end["answer_probs"] - start["answer_probs"]
    out["tail"] = {"prompts": int(tail.sum()), "q_pos_start": float(q0[tail].mean()) if tail.any() else None,
                   "q_pos_end": float(q1[tail].mean()) if tail.any() else None}
    out["probes"] = {"pairs": int(delta.size),
                     "frac_correct_improved": float((delta > 0).mean()) if delta.size else None,
                     "worst_correct_delta": float(delta.min()) if delta.size else None}
    return out


def save(path: str | Path, start: dict, end: dict, **extra) -> None:
    with atomic_path(path) as tmp:
        np.savez(tmp, p_start=start["p"], p_end=end["p"], task=end["task"], ids=end["ids"],
                 answer_probs_start=start["answer_probs"], answer_probs_end=end["answer_probs"], **extra)


def train_pool_metrics(start: dict, end: dict) -> dict:
    """The training pool's own pass rates (the tail pool: every prompt in the band at the start): mean exact p at
    the start and the end, and the share still at or below 1/512 (the mechanism BroRL names: N reaches the tail)."""
    return {"prompts": int(end["p"].size), "q_pos_start": float(start["p"].mean()) if start["p"].size else None,
            "q_pos_end": float(end["p"].mean()) if end["p"].size else None,
            "zero_share_end": float((end["p"] <= TAIL_LO).mean()) if end["p"].size else None}


def run_study_arm(config: dict, init_model_dir, data_dir, work_dir, model_out, results_out, *, arm: str, seed: int,
                  source: str | None, open_run) -> None:
    """``brorl study-arm``: one arm of the N-scaling study (or its later start): ``config["stages"]`` for
    ``seed`` in the rule's MLflow run (brorl.training.arms.run_arm), then, unless ``heldout`` is false,
    the held-out metrics of the end model against the start model (:func:`log_heldout`) in the same run."""
    from brorl.training.arms import run_arm, stages_arm

    def heldout(summary):
        log_heldout(config, init_model_dir, data_dir, model_out, results_out, arm=arm, seed=seed, source=source)

    run_arm(stages_arm(arm, config["stages"]), init_model_dir, data_dir, work_dir, model_out, results_out, seed=seed,
            source=source, open_run=open_run, after=heldout if config.get("heldout", True) else None)


def log_heldout(config: dict, init_model_dir, data_dir, model_out, results_out, *, arm: str, seed: int,
                source: str = "tasks") -> dict:
    """Held-out metrics of ``model_out`` against ``init_model_dir``: exact p on the test split (the tiny study), or
    sampled by ``config["heldout_settings"]`` (the paper data, scored by the reward of ``source``, the declared
    profile.data; the start model's kept in ``heldout_cache``);
    ``heldout.npz`` and ``heldout.json`` written beside the arm's results and logged to the active MLflow run."""
    import mlflow

    from brorl.tracking import numeric_metrics

    settings = config.get("heldout_settings")
    if settings is None:  # the tiny study: exact p on the test split
        start, end = probabilities(init_model_dir, data_dir), probabilities(model_out, data_dir)
    else:
        start = measure_cached(init_model_dir, data_dir, settings, config.get("heldout_cache"), source=source)
        end = measure(model_out, data_dir, settings, source=source)
    out = metrics(end, start, ks=config.get("heldout_k") or DEFAULT_K)
    extra = {}
    if config.get("train_pool"):  # the tail pool: the training prompts' own tail (exact p, tiny tasks)
        t0, t1 = probabilities(init_model_dir, data_dir, "train"), probabilities(model_out, data_dir, "train")
        out["train_pool"] = train_pool_metrics(t0, t1)
        extra = {"p_train_start": t0["p"], "p_train_end": t1["p"]}
    results = Path(results_out)
    save(results / "heldout.npz", start, end, **extra)
    write_text(results / "heldout.json", json.dumps(out, indent=1) + "\n")
    mlflow.log_metrics(numeric_metrics(out, "heldout/"))
    mlflow.log_artifact(str(results / "heldout.json"))
    a = out["all"]
    print(f"[study] {arm} seed {seed}: held-out mean@k {a['mean_at_k']:.4f}, pass@256 "
          f"{a.get('pass@256', float('nan')):.4f}, zero share {a['histogram'].get('zero', float('nan')):.3f}")
    return out
