"""Evaluate one model on one benchmark through lm-eval (hf backend), with a content-keyed result cache.

:func:`evaluate` renders the benchmark's lm-eval task folder (:mod:`brorl.evaluation.benchmarks`), runs
``lm_eval.simple_evaluate`` (``model="hf"``, dtype float32, ``log_samples=True``, all four lm-eval seeds set to
``seed``), rebuilds every problem's k completions and 0/1 scores from the logged samples, recomputes the metrics
with :func:`brorl.evaluation.metrics.sample_metrics` and checks them against lm-eval's own aggregation (a mismatch
raises). Results are cached under ``cache_dir`` by (model hash, task hash):

- model hash: sha256 over the model folder's files (sorted relative paths, sizes and bytes), skipping what only
  training reads (optimizer / scheduler / RNG state, trainer state, ``training_info.json``) and hidden files
  (``.snakemake_timestamp``), so a re-saved identical model hits and any changed weight, config or tokenizer
  file misses;
- task hash: sha256 of the rendered task files (the data folder's path replaced by a placeholder, so moving the
  data does not invalidate), the data files' contents, the scorer's source and every decoding setting that
  changes the samples (k, temperature, lengths, stop ids, seed, batch size, limit, device, dtype, chat
  template, lm-eval / torch / transformers versions).

The module imports nothing heavy: lm-eval, torch and transformers load inside :func:`evaluate`.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import tempfile
import time
from fnmatch import fnmatch
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any, Callable

from brorl.evaluation import metrics as metrics_module
from brorl.evaluation.benchmarks import Benchmark, get_benchmark
from brorl.evaluation.metrics import metric_name, powers_of_two, sample_metrics

TRAINING_ONLY_PATTERNS = ("optimizer.pt", "optimizer.bin", "scheduler.pt", "scaler.pt", "rng_state*.pth",
                          "trainer_state.json", "training_args.bin", "training_info.json")
"""Files of a model folder that no inference reads (left out of the model hash)."""
DATA_PLACEHOLDER = "<DATA_DIR>"
METRIC_TOL = 1e-12
"""lm-eval averages with ``sum(x) / len(x)``, ``sample_metrics`` with ``np.mean`` (pairwise summation): the two
may differ in the last bits, never more."""
CACHE_VERSION = 1


def _log(msg: str) -> None:
    print(f"[brorl evaluate] {msg}", flush=True)


# ------------------------------------------------------------------------------------------------------ hashes

def _hidden(rel: Path) -> bool:
    return any(part.startswith(".") or part == "__pycache__" for part in rel.parts)


def model_files(model_dir: str | Path) -> list[Path]:
    """The files of a model folder that enter its hash (relative paths, sorted)."""
    root = Path(model_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"model folder not found: {root}")
    out = []
    for p in root.rglob("*"):
        if not p.is_file():
            continue
        rel = p.relative_to(root)
        if _hidden(rel) or any(fnmatch(rel.name, pat) for pat in TRAINING_ONLY_PATTERNS):
            continue
        out.append(rel)
    if not out:
        raise FileNotFoundError(f"no model files in {root}")
    return sorted(out, key=lambda r: r.as_posix())


def _update_file(h, path: Path) -> None:
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)


def model_hash(model_dir: str | Path) -> str:
    """sha256 over (relative path, size, bytes) of :func:`model_files`."""
    root = Path(model_dir)
    h = hashlib.sha256(b"brorl-model-v1\0")
    for rel in model_files(root):
        p = root / rel
        h.update(rel.as_posix().encode() + b"\0" + str(p.stat().st_size).encode() + b"\0")
        _update_file(h, p)
    return h.hexdigest()


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    _update_file(h, Path(path))
    return h.hexdigest()


def _json_hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _version(dist: str) -> str | None:
    try:
        return importlib_metadata.version(dist)
    except importlib_metadata.PackageNotFoundError:
        return None


def scorer_sources(bench: Benchmark) -> str:
    """sha256 of the code outside the task folder that turns completions into scores (``bench.code``, e.g.
    ``verify``, and the metrics module)."""
    parts = [inspect.getsource(obj) for obj in (*bench.code, metrics_module)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def task_hash_inputs(bench: Benchmark, task_dir: Path, data_dir: Path, settings: dict) -> dict:
    """What the task hash covers (also useful to see why two runs miss each other's cache)."""
    data_root = str(Path(data_dir).resolve())
    files = {}
    for p in sorted(Path(task_dir).rglob("*")):
        rel = p.relative_to(task_dir)
        if not p.is_file() or _hidden(rel):
            continue
        text = p.read_text(encoding="utf-8").replace(data_root, DATA_PLACEHOLDER)
        files[rel.as_posix()] = hashlib.sha256(text.encode()).hexdigest()
    data = {}
    for p in bench.data_files(Path(data_dir)):
        p = Path(p)
        if not p.is_file():
            raise FileNotFoundError(f"benchmark data file not found: {p}")
        try:
            key = p.resolve().relative_to(Path(data_root)).as_posix()
        except ValueError:
            key = str(p)
        data[key] = file_sha256(p)
    return {"task_files": files, "data_files": data, "scorer": scorer_sources(bench), "settings": settings}


# ---------------------------------------------------------------------------------------------------- helpers

def atomic_write_json(path: str | Path, obj) -> None:
    from brorl.atomic import write_json

    write_json(path, obj, indent=1, ensure_ascii=True, default=float)


def stop_token_ids_of(model_dir: str | Path) -> list[int]:
    """The model's end-of-sequence id(s) then its pad id, from generation_config.json / config.json."""
    ids: list[int] = []
    for name in ("generation_config.json", "config.json"):
        p = Path(model_dir) / name
        if not p.is_file():
            continue
        cfg = json.loads(p.read_text())
        eos, pad = cfg.get("eos_token_id"), cfg.get("pad_token_id")
        for v in ([] if eos is None else eos if isinstance(eos, list) else [eos]) + ([] if pad is None else [pad]):
            if int(v) not in ids:
                ids.append(int(v))
        if ids:
            break
    return ids


def cache_path(cache_dir: str | Path, benchmark: str, model_h: str, task_h: str) -> Path:
    return Path(cache_dir) / benchmark / f"{model_h[:32]}-{task_h[:32]}.json"


def _read_cache(path: Path, model_h: str, task_h: str) -> dict | None:
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if (entry.get("cache_version") != CACHE_VERSION or entry.get("model_hash") != model_h
            or entry.get("task_hash") != task_h or not isinstance(entry.get("result"), dict)):
        return None
    return entry["result"]


def _run_lm_eval(**kwargs) -> dict:
    """``lm_eval.simple_evaluate`` (one place, so tests can see whether it is called), with lm-eval's environment
    report replaced by :func:`_versions_env_info` for the call."""
    import lm_eval
    import lm_eval.evaluator

    report = lm_eval.evaluator.add_env_info
    lm_eval.evaluator.add_env_info = _versions_env_info
    try:
        return lm_eval.simple_evaluate(**kwargs)
    finally:
        lm_eval.evaluator.add_env_info = report


ENV_INFO_SKIPPED = "not collected by brorl (torch.utils.collect_env runs pip and other programs, ~1 s per call)"


def _versions_env_info(storage: dict) -> None:
    """What lm-eval's ``add_env_info`` (lm_eval/loggers/utils.py) adds to its results, without torch's
    ``collect_env`` report: it starts pip and other programs, about 1 s per benchmark (two per evaluate job of
    the tiny profile), and the project keeps only the metrics and samples of lm-eval's results
    (:func:`collect_results`); the versions it records stay (the evaluation JSONs also record them)."""
    storage.update({"pretty_env_info": ENV_INFO_SKIPPED, "transformers_version": _version("transformers"),
                    "lm_eval_version": _version("lm_eval")})


def _close(a: float, b: float) -> bool:
    return math.isclose(float(a), float(b), rel_tol=METRIC_TOL, abs_tol=METRIC_TOL)


# --------------------------------------------------------------------------------------------------- evaluate

def evaluate(model_dir: str | Path, benchmark: str, data_dir: str | Path, out_json: str | Path | None, *,
             k: int | None = None, temperature: float | None = None, seed: int = 1234, batch_size: int = 256,
             cache_dir: str | Path | None = None, limit: int | None = None, max_gen_toks: int | None = None,
             device: str = "cpu", dtype: str = "float32", threads: int | None = None, force: bool = False,
             backend: str = "hf", backend_args: dict | None = None,
             log: Callable[[str], None] | None = _log) -> dict:
    """Evaluate ``model_dir`` (an HF folder) on ``benchmark`` and write ``out_json``; returns the same dict.

    ``k`` / ``temperature`` default to the benchmark's (tiny: 16, 1.0); ``max_gen_toks`` to its length bound
    (tiny: :func:`brorl.tasks.max_new_tokens` of the family). ``seed`` sets lm-eval's python, numpy, torch and
    fewshot seeds (the CLI's ``--seed seed``); the batch size changes the random stream, so it is part of the
    task hash. ``limit``: evaluate the first ``limit`` problems only. ``cache_dir`` None: no cache; ``force``:
    re-evaluate and overwrite the cache entry. ``threads``: ``torch.set_num_threads`` before the run.
    ``backend``: lm-eval's model type (``hf`` here; ``vllm`` for the paper profile on GPUs, with
    ``backend_args`` such as ``tensor_parallel_size`` / ``gpu_memory_utilization`` / ``max_model_len`` added to
    its ``model_args``); both enter the task hash.
    """
    if backend not in ("hf", "vllm"):
        raise ValueError(f"backend must be 'hf' or 'vllm', got {backend!r}")
    backend_args = dict(backend_args or {})
    t0 = time.perf_counter()
    say = log or (lambda _msg: None)
    bench: Benchmark = get_benchmark(benchmark)
    k = int(bench.default_k if k is None else k)
    temperature = float(bench.default_temperature if temperature is None else temperature)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if limit is not None and int(limit) < 1:
        raise ValueError(f"limit must be >= 1 or None, got {limit}")
    model_dir = Path(model_dir)
    model_abs = model_dir.expanduser().resolve()
    data_dir = Path(data_dir).expanduser().resolve()
    model_h = model_hash(model_abs)
    stop_ids = stop_token_ids_of(model_abs)

    with tempfile.TemporaryDirectory(prefix=f"brorl-lm-eval-{benchmark}-") as tmp:
        task_dir = bench.render(data_dir, Path(tmp) / "tasks", k=k, temperature=temperature,
                                max_gen_toks=max_gen_toks, stop_token_ids=stop_ids)
        settings = {"benchmark": bench.name, "lm_eval_task": bench.lm_eval_task, "k": k,
                    "temperature": temperature, "max_gen_toks": max_gen_toks, "stop_token_ids": stop_ids,
                    "seed": int(seed), "batch_size": int(batch_size), "limit": None if limit is None else int(limit),
                    "device": device, "dtype": dtype, "apply_chat_template": bench.apply_chat_template,
                    **({"backend": backend, "backend_args": backend_args} if backend != "hf" or backend_args else {}),
                    "versions": {d: _version(d) for d in ("lm_eval", "torch", "transformers")},
                    "cache_version": CACHE_VERSION}
        hash_inputs = task_hash_inputs(bench, task_dir, data_dir, settings)
        task_h = _json_hash(hash_inputs)
        entry_path = cache_path(cache_dir, bench.name, model_h, task_h) if cache_dir is not None else None

        if entry_path is not None and not force:
            hit = _read_cache(entry_path, model_h, task_h)
            if hit is not None:
                result = {**hit, "model_dir": str(model_dir), "cached": True,
                          "seconds": time.perf_counter() - t0}
                if out_json is not None:
                    atomic_write_json(out_json, result)
                say(f"{bench.name}: cache hit for {model_dir} (model {model_h[:12]}, task {task_h[:12]}): "
                    + _summary(result["metrics"]))
                return result

        say(f"{bench.name}: evaluating {model_dir} with lm-eval task {bench.lm_eval_task} (k={k}, T={temperature}, "
            f"seed={seed}, batch_size={batch_size}, limit={limit}, device={device})")
        if threads:
            import torch

            torch.set_num_threads(int(threads))
        from lm_eval.tasks import TaskManager

        task_manager = TaskManager(include_path=str(task_dir), include_defaults=False)
        t_run = time.perf_counter()
        # vLLM samples from its engine's seed (lm-eval's model_args default: 1234), not from the seeds below
        engine_seed = {"seed": int(seed)} if backend == "vllm" else {}
        res = _run_lm_eval(model=backend, model_args={"pretrained": str(model_abs), "dtype": dtype, **engine_seed,
                                                      **backend_args},
                           tasks=[bench.lm_eval_task], batch_size=int(batch_size), device=device, limit=limit,
                           log_samples=True, apply_chat_template=bench.apply_chat_template,
                           task_manager=task_manager, random_seed=int(seed), numpy_random_seed=int(seed),
                           torch_random_seed=int(seed), fewshot_random_seed=int(seed))
        run_seconds = time.perf_counter() - t_run
        if backend == "vllm":  # lm-eval keeps no handle on its engine; its exit-time shutdown hung on the CPU build
            from brorl.models.vllm_cpu import stop_engine_processes

            stop_engine_processes()

    result = collect_results(res, bench, k, model_abs)
    result = {"model_dir": str(model_dir), "benchmark": bench.name, "lm_eval_task": bench.lm_eval_task,
              "model_hash": model_h, "task_hash": task_h, "k": k, "metrics": result["metrics"],
              "categories": result["categories"], "samples": result["samples"],
              "lm_eval_version": _version("lm_eval"), "cached": False, "seconds": time.perf_counter() - t0}
    if entry_path is not None:
        atomic_write_json(entry_path, {"cache_version": CACHE_VERSION, "model_hash": model_h, "task_hash": task_h,
                                       "task_hash_inputs": hash_inputs, "result": result})
    if out_json is not None:
        atomic_write_json(out_json, result)
    say(f"{bench.name}: {len(result['samples'])} problems x {k} samples in {run_seconds:.1f}s (lm-eval), "
        f"{result['seconds']:.1f}s total: " + _summary(result["metrics"]))
    return result


def run_evaluate(config: dict, model_dir: str | Path, benchmark: str, data_dir: str | Path, out_json: str | Path,
                 cache_dir: str | Path | None = None) -> dict:
    """``brorl evaluate``, one benchmark, inside its MLflow run: :func:`evaluate` with the config's settings (k,
    temperature, seed, batch_size, limit, threads, max_gen_toks, backend, backend_args, device, dtype); a gated
    benchmark's completions kept local (brorl.data.benchmarks.keep_gated_local, tagged ``gated_records_local``);
    the metrics (per category too), hashes and result JSON logged."""
    import mlflow

    from brorl.data.benchmarks import keep_gated_local
    from brorl.tracking import numeric_metrics

    cfg = config
    out = evaluate(model_dir, benchmark, data_dir, out_json, k=cfg.get("k"), temperature=cfg.get("temperature"),
                   seed=cfg.get("seed", 1234), batch_size=cfg.get("batch_size", 256), cache_dir=cache_dir,
                   limit=cfg.get("limit") or None, threads=cfg.get("threads") or None,
                   max_gen_toks=cfg.get("max_gen_toks") or None, backend=cfg.get("backend", "hf"),
                   backend_args=cfg.get("backend_args"), device=cfg.get("device", "cpu"),
                   dtype=cfg.get("dtype", "float32"))
    local = keep_gated_local(benchmark, out_json, share_gated=bool(cfg.get("share_gated")),
                             **({"local_root": cfg["gated_root"]} if cfg.get("gated_root") else {}))  # brorl.layout
    if local is not None:  # gated (GPQA): completions stay local, the result keeps scores and hashes
        mlflow.set_tag("gated_records_local", str(local))
    metrics = dict(out["metrics"])
    for category, values in out.get("categories", {}).items():
        metrics.update({f"category/{category}/{key}": value for key, value in values.items()})
    mlflow.log_metrics({**numeric_metrics(metrics), "seconds": float(out["seconds"]), "cached": float(out["cached"])})
    mlflow.set_tags({"model_hash": out["model_hash"], "task_hash": out["task_hash"]})
    mlflow.log_artifact(out_json)
    m, k = out["metrics"], out["k"]
    top = max((int(key[8:]) for key in m if key.startswith("pass_at_")), default=k)
    print(f"[evaluate] {model_dir} on {benchmark}: mean@{k} {m['mean_at_k']:.4f}, pass@{top} "
          f"{m[f'pass_at_{top}']:.4f} over {int(m['n_problems'])} problems{' (cached)' if out['cached'] else ''}"
          f" -> {out_json}")
    return out


def _summary(m: dict) -> str:
    keys = ["mean_at_k"] + [metric_name(j) for j in powers_of_two(int(m.get("n_samples", 1)))]
    return ", ".join(f"{key} {m[key]:.4f}" for key in keys if key in m)


def collect_results(res: dict, bench: Benchmark, k: int, model_dir: Path | None = None) -> dict:
    """Per-problem records, overall and per-category metrics from a ``simple_evaluate`` result, checked against
    what lm-eval computed (per problem and aggregated). Raises ``RuntimeError`` on any disagreement."""
    task = bench.lm_eval_task
    if not res or "samples" not in res or task not in res["samples"]:
        raise RuntimeError(f"lm-eval returned no logged samples for {task}")
    names = ["mean_at_k"] + [metric_name(j) for j in powers_of_two(k)]
    agg = res["results"][task]
    logged = sorted(res["samples"][task], key=lambda s: int(s["doc_id"]))
    tok = None
    if bench.prompt_of is not None and model_dir is not None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    samples = []
    for s in logged:
        doc = s["doc"]
        filtered = s["filtered_resps"]
        if len(filtered) != 1:
            raise RuntimeError(f"{task} doc {s['doc_id']}: expected one request per problem, got {len(filtered)}")
        completions = list(filtered[0]) if isinstance(filtered[0], (list, tuple)) else [filtered[0]]
        if len(completions) != k:
            raise RuntimeError(f"{task} doc {s['doc_id']}: {len(completions)} completions, expected k={k} "
                               "(is the take_first_k filter missing?)")
        if tok is not None:
            prompt = s["arguments"][0][0]
            want = bench.prompt_of(tok, doc)
            if prompt != want:
                raise RuntimeError(f"{task} doc {s['doc_id']}: lm-eval prompt {prompt!r} != {want!r}")
        correct = [int(x >= 0.5) for x in bench.score(doc, completions)]
        mine = bench.doc_metrics(correct)
        for name in names:
            if name not in s or not _close(s[name], mine[name]):
                raise RuntimeError(f"{task} doc {s['doc_id']}: lm-eval {name}={s.get(name)!r}, "
                                   f"recomputed {mine[name]!r}")
        category = str(doc.get(bench.category_field, bench.name)) if bench.category_field else bench.name
        samples.append({"doc_id": int(s["doc_id"]), "id": str(doc.get("id", s["doc_id"])), "category": category,
                        "correct": correct, "completions": [str(c) for c in completions]})
    if not samples:
        raise RuntimeError(f"lm-eval logged no samples for {task}")
    overall = sample_metrics([s["correct"] for s in samples], ks=powers_of_two(k))
    for name in names:
        key = f"{name},none"
        if key not in agg or not _close(agg[key], overall[name]):
            raise RuntimeError(f"{task}: lm-eval aggregated {key}={agg.get(key)!r}, recomputed {overall[name]!r}")
    n_eff = res.get("n-samples", {}).get(task, {}).get("effective")
    if n_eff is not None and int(n_eff) != len(samples):
        raise RuntimeError(f"{task}: lm-eval evaluated {n_eff} problems, {len(samples)} logged")
    by_cat: dict[str, list] = {}
    for s in samples:
        by_cat.setdefault(s["category"], []).append(s["correct"])
    categories = {c: sample_metrics(rows, ks=powers_of_two(k)) for c, rows in sorted(by_cat.items())}
    return {"metrics": overall, "categories": categories, "samples": samples}


def load_result(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())
