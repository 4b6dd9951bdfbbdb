"""GPU check: rollout throughput of the RL engines on the paper model's architecture, two RL steps on CUDA, and
the memory plan's predictions beside measured peaks.

On the one-GPU host (an H100 80 GB or an H200 141 GB; no vLLM, no TRL, no network; docs/profiles.md,
"Paper-profile training"), from the repo root with the wheels of `make gpu-wheels` carried in `.gpu-wheels/`:

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu-wheels/*.whl &&
    PYTHONPATH=/tmp/site:src python3 benchmarks/gpu_check.py --out $OUT

    python benchmarks/gpu_check.py --cpu --out DIR     # the same pieces at tiny size on the CPU (the test suite)
    python benchmarks/gpu_check.py --tree-only         # only the size of the tree that travels (run it here first)

Before anything it adds up the tree that travels to the host (git's tracked and untracked-not-ignored files plus
the ``--carry`` folders, default ``.gpu-wheels``; without git, every file under the root) and refuses to start,
naming the largest files, when it is over 64 MiB (the device tool's limit).

Pieces, each in a child process (its own log; killed at the time guard, keeping what it already wrote):

    train       a toy model (a tiny Llama trained on 2-digit addition, 60 steps on the CPU) and two ``BroRLTrainer``
                RL steps on it: prefix-tree engine, dynamic sampling, N=16 x 4 prompts, bf16 on the GPU; its peak
                beside the memory plan's (the toy model's config.json)
    memory      forward + backward + AdamW step + a second forward + backward (benchmarks/memory_plan_check.py)
                of a random model of the paper checkpoint's architecture, bf16, at a few micro-batches, sequence lengths and
                with and without checkpointing: ``torch.cuda.max_memory_allocated`` beside
                ``brorl.training.memory.training_terms``' peak for the same setting
    throughput  samples/s, tokens/s and peak GPU memory of HF generate (``model.generate`` on N repeated
                rows), the shared-prompt and the prefix-tree engines (``brorl.models.sampling``) at
                N = 16, 64, 256, 512 with the same total samples per cell, on a randomly initialised model of
                the paper checkpoint's architecture (``benchmarks/qwen2_1p5b.yaml``, 1.78B parameters), bf16,
                512 new tokens per sample with no end token (every sample runs the full length); beside each
                peak, the plan's weights + KV cache of the cell (``brorl.training.memory``'s KV formula)

The random model's next-token distribution is nearly uniform over 151,936 tokens, so the N samples of a prompt
differ from their first token on: the prefix tree has nothing to merge and this measures its overhead, not the
gain on a trained model's repeated prefixes.

Time guard (GPU): the whole check keeps to ``--budget`` seconds (default 270: with the host's start, one run and
a rerun fit in its 15 minutes of device time).
Throughput cells run in the order N = 16, 512, 64, 256 (the paper's pair first), engine by engine; a cell is
skipped when the time its engine took on an earlier cell no longer fits, and a cell still running at the
budget's end is killed; both are recorded. A cell is one batch of 512 samples, the fewest that give N = 512 a
prompt, so the guard drops cells rather than shrinking them. ``--cpu`` has no time limits (a shared CI machine is
slow at times).

Writes to ``--out`` (default ``$OUT`` if set, else a folder under the work folder): ``gpu_check.json`` (package
versions, device, every row), ``summary.md`` (the tables), ``throughput.csv``, ``throughput.png`` and
``gpu_check.log`` (the pieces' output). Exit 0 when every piece ran and wrote its numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # memory_plan_check, beside this file
QWEN2_1P5B = ROOT / "benchmarks" / "qwen2_1p5b.yaml"
TINY_QWEN2 = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 128, "vocab_size": 1024, "max_position_embeddings": 512}
NS = (16, 64, 256, 512)
CELL_ORDER = (16, 512, 64, 256)  # BroRL Table 2's pair (N=16 against N=512) first, should the guard cut
ENGINES = ("hf", "shared_prompt", "prefix_tree")
PROFILES = {  # per mode: samples per cell (>= the largest N), new tokens, prompt tokens, RL steps' N, budget (s)
    "gpu": {"total": 512, "new_tokens": 512, "prompt_len": 256, "train_n": 16, "budget": 270},
    "cpu": {"total": 512, "new_tokens": 8, "prompt_len": 8, "train_n": 8, "budget": 0},
}
PACKAGES = ("torch", "transformers", "trl", "accelerate", "datasets", "peft", "safetensors", "tokenizers",
            "numpy", "pandas", "pyarrow", "dill", "multiprocess", "pyyaml", "matplotlib")
PIECES = ("train", "memory", "throughput")
TRAIN_LIMIT_S = 120  # the most of the GPU budget the train piece may take (CPU mode here: about 70 s)
MEMORY_LIMIT_S = 60  # the same for the memory piece (GPU: four cases of a 1.78B model, each a few seconds)
MAX_TREE_MIB = 64  # what the device tool carries to the host: tracked + untracked-not-ignored files + carried paths
MEMORY_CASES = {  # (micro-batch, sequence length, checkpointing) per mode
    "gpu": ((1, 2048, False), (1, 4096, False), (1, 4096, True), (2, 8192, True)),
    "cpu": ((2, 64, False), (2, 64, True)),
}


# --------------------------------------------------------------------------------------------------- pieces

def device_info(gpu: bool) -> dict:
    import torch

    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "threads": torch.get_num_threads()}
    if gpu:
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 1), capability=f"{p.major}.{p.minor}",
                    bf16=torch.cuda.is_bf16_supported())
    return info


def piece_train(work: Path, opts: dict) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer

    from brorl.models.toy import TOY_TASKS, toy_model
    from brorl.tasks.core import TaskSettings, format_prompt, max_new_tokens, read_split
    from brorl.training.settings import RLSettings
    from brorl.training.stage import grpo_config, make_reward
    from brorl.training.trainer import BroRLTrainer

    gpu = not opts["cpu"]
    if gpu and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --cpu on a machine without a GPU")
    t0 = time.perf_counter()
    data, model = work / "tiny_tasks", work / "toy_model"
    toy_model(data, model, max_steps=60, threads=2)  # trained on the CPU
    s = RLSettings(n_rollouts=opts["train_n"], prompts_per_step=4, steps=2, micro_batch_size=16, eta0=1e-3,
                   b0=4 * opts["train_n"], max_rounds=3, probe_every=0, checkpoint_every=10, bf16=gpu,
                   threads=0 if gpu else 2, generation_engine="prefix_tree", dynamic_sampling=True)
    tok = AutoTokenizer.from_pretrained(str(model), local_files_only=True)
    records = read_split(data, "train")
    ds = Dataset.from_dict({"prompt": [format_prompt(tok, r) for r in records],
                            "record_index": list(range(len(records)))})
    length = max_new_tokens(TaskSettings.from_dict(TOY_TASKS), ["add"])
    trainer = BroRLTrainer(model=str(model), reward_funcs=make_reward(records, tok),
                           args=grpo_config(s, work / "train_ckpt", length), train_dataset=ds,
                           processing_class=tok, settings=s)
    steps, inner = [], trainer._generate_and_score_completions

    def record(inputs):  # the trainer's per-step rollout numbers (dynamic sampling: rounds, pass rate)
        out = inner(inputs)
        if trainer.model.training:
            steps.append(dict(trainer.last_rollout))
        return out

    trainer._generate_and_score_completions = record
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    param = next(trainer.model.parameters())
    prompt_len = max(len(tok(p, add_special_tokens=False)["input_ids"]) for p in ds["prompt"])
    plan = train_plan(model / "config.json", s, prompt_len + length, gpu)
    return {"plan_mb": plan / 2**20, "steps": steps, "n_rollouts": s.n_rollouts, "prompts_per_step": s.prompts_per_step,
            "engine": s.generation_engine, "bf16": bool(trainer.args.bf16), "model_device": str(param.device),
            "param_dtype": str(param.dtype), "seconds": time.perf_counter() - t0,
            "cuda_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if gpu else None, "device": device_info(gpu)}


def train_plan(config_json: Path, s, seq: int, gpu: bool) -> int:
    """The memory plan's peak for the train piece (``brorl.training.memory.training_terms``; the architecture from
    the toy model's config.json): micro-batch, prompt + completion tokens, the reference model (beta > 0). On the
    GPU, transformers' bf16 is autocast over fp32 weights: counted as bf16 activations with fp32 weights."""
    from memory_plan_check import triton_available

    from brorl.training.memory import Architecture, TrainSetting, training_terms

    arch = Architecture.from_file(config_json)
    setting = TrainSetting(micro_batch=s.micro_batch, seq_len=seq, checkpointing=s.gradient_checkpointing,
                           bf16=gpu, reference_model=s.beta > 0, triton=gpu and triton_available(), foreach=gpu,
                           float_mask=gpu)
    return training_terms(arch, setting)["peak"]


def generation_plan(config: dict, engine: str, n: int, prompts: int, prompt_len: int, new: int,
                    dtype_bytes: int) -> int:
    """The plan's weights + KV cache of a throughput cell (``Architecture.kv_bytes_per_token``, vLLM's formula,
    at this dtype): HF generate keeps the prompt per row, the shared-prompt and prefix-tree engines once per
    prompt (a random model's samples share nothing after it)."""
    from brorl.training.memory import Architecture

    arch = Architecture.from_mapping(config)
    kv = arch.kv_bytes_per_token // 2 * dtype_bytes
    rows = prompts * n
    tokens = rows * (prompt_len + new) if engine == "hf" else prompts * prompt_len + rows * new
    return arch.params * dtype_bytes + tokens * kv


def piece_memory(work: Path, opts: dict) -> dict:
    """The memory plan beside measured peaks: benchmarks/memory_plan_check.py's forward + backward + AdamW step +
    forward + backward of a random model of the paper checkpoint's architecture (GPU: bf16,
    ``torch.cuda.max_memory_allocated``; --cpu: the tiny model in fp32, peak RSS)."""
    import yaml

    from memory_plan_check import child, row

    gpu = not opts["cpu"]
    if gpu:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("no CUDA device: run with --cpu on a machine without a GPU")
    config = yaml.safe_load(QWEN2_1P5B.read_text()) if gpu else TINY_QWEN2
    name = QWEN2_1P5B.stem if gpu else "tiny-qwen2"
    rows = []
    for micro, seq, ck in MEMORY_CASES["gpu" if gpu else "cpu"]:
        spec = {"model": config, "seq": seq, "micro": micro, "checkpointing": ck, "threads": 2,
                "device": "cuda" if gpu else "cpu"}
        measured = child(spec)
        rows.append(row(name, config, seq, micro, ck, measured, device=spec["device"]))
        print(f"[memory] micro {micro} x {seq} tokens, checkpointing {ck}: plan {rows[-1]['predicted_mib']:,.0f} "
              f"MiB, measured {rows[-1]['measured_mib']:,.0f} MiB ({rows[-1]['error_pct']:+.1f}%)", flush=True)
        (work / "memory.info.json").write_text(json.dumps({"rows": rows}))  # kept should the time guard end it
        if gpu:
            import gc

            import torch

            gc.collect()
            torch.cuda.empty_cache()
    return {"rows": rows, "measure": "torch.cuda.max_memory_allocated" if gpu else "peak RSS above the RSS before "
            "the model", "device": device_info(gpu)}


def random_qwen2(config: dict, device: str, dtype):
    """A randomly initialised Qwen2 causal LM of ``config`` (Qwen2Config keywords) without an end token."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    kw = {k: v for k, v in config.items() if k not in ("model_type", "architectures", "torch_dtype")}
    cfg = Qwen2Config(**{**kw, "eos_token_id": None, "bos_token_id": None, "pad_token_id": None})
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg)
    return model.to(dtype).eval()


def generate(engine: str, model, prompts: list[list[int]], n: int, new_tokens: int, chunk: int):
    """[n, new_tokens] ids per prompt; no end token (HF: the model has none; samplers: id -1 never drawn)."""
    from brorl.models.sampling import SAMPLERS, hf_generate_token_ids

    if engine == "hf":
        return hf_generate_token_ids(model, prompts, n, new_tokens, None, 0, seed=0, chunk_samples=chunk)
    return SAMPLERS[engine](model, prompts, n, new_tokens, -1, 0, seed=0, chunk_samples=chunk)


def guard(took: dict[str, float], engine: str, left: float) -> str | None:
    """Why a cell must be skipped with ``left`` seconds to go, or None: it needs what its engine took on an earlier
    cell (cells of one engine generate the same samples and tokens), else the slowest engine's time so far."""
    need = took.get(engine, max(took.values(), default=0.0))
    if left <= 0 or need > left:
        return f"time guard: {need:.0f} s needed, {max(left, 0):.0f} s left"
    return None


def piece_throughput(work: Path, opts: dict) -> dict:
    import torch
    import yaml

    gpu, total, new = not opts["cpu"], opts["total"], opts["new_tokens"]
    device, dtype = ("cuda", torch.bfloat16) if gpu else ("cpu", torch.float32)
    if not gpu:
        torch.set_num_threads(2)
    config = yaml.safe_load(QWEN2_1P5B.read_text()) if gpu else TINY_QWEN2
    model = random_qwen2(config, device, dtype)
    params = sum(p.numel() for p in model.parameters())
    weights_mb = torch.cuda.memory_allocated() / 2**20 if gpu else 0.0
    info = {"model": f"random Qwen2, {params / 1e9:.3g}B parameters" + (f" ({QWEN2_1P5B.name})" if gpu else ""),
            "params": params, "dtype": str(dtype), "weights_mb": weights_mb, "device": device_info(gpu)}
    (work / "throughput.info.json").write_text(json.dumps(info))  # kept should the time guard end the piece
    gen = torch.Generator().manual_seed(1)
    prompts = torch.randint(0, config["vocab_size"], (total // min(NS), opts["prompt_len"]), generator=gen).tolist()
    rows_file, deadline = work / "throughput.rows.jsonl", opts.get("deadline")

    def write(row):
        with open(rows_file, "a") as f:
            f.write(json.dumps(row) + "\n")

    def sync():
        if gpu:
            torch.cuda.synchronize()

    for engine in ENGINES:  # warm-up: kernels, allocator, cuBLAS handles
        generate(engine, model, prompts[:1], 16, 8, total)
    sync()
    took: dict[str, float] = {}
    for n in CELL_ORDER:
        for engine in ENGINES:
            cell = {"n_rollouts": n, "engine": engine, "prompts": total // n, "samples": total}
            reason = deadline and guard(took, engine, deadline - time.time())
            if reason:
                write({**cell, "status": "skipped", "reason": reason})
                continue
            write({**cell, "status": "started"})
            if gpu:
                torch.cuda.reset_peak_memory_stats()
            sync()
            t0 = time.perf_counter()
            out = generate(engine, model, prompts[: total // n], n, new, total)
            sync()
            seconds = time.perf_counter() - t0
            took[engine] = seconds
            shapes = {tuple(t.shape) for t in out}
            if shapes != {(n, new)}:
                raise RuntimeError(f"{engine} at N={n} returned blocks of shape {shapes}, expected {(n, new)}")
            peak = torch.cuda.max_memory_allocated() / 2**20 if gpu else None
            plan = generation_plan(config, engine, n, total // n, opts["prompt_len"], new, 2 if gpu else 4) / 2**20
            write({**cell, "status": "ok", "plan_mb": plan, "new_tokens": new, "seconds": seconds,
                   "samples_per_s": total / seconds,
                   "tokens_per_s": total * new / seconds, "mean_length": float(new), "repeats": 1,
                   "threads": torch.get_num_threads(), "peak_mb": peak,
                   "peak_over_weights_mb": None if peak is None else peak - weights_mb})
            print(f"[throughput] N={n:4d} {engine:14s} {total / seconds:9.1f} samples/s "
                  f"{total * new / seconds:10.0f} tokens/s  {seconds:6.1f} s  peak {peak or 0:8.0f} MB "
                  f"(plan: weights + KV {plan:8.0f} MB)", flush=True)
            del out
    return info


RUNNERS = {"train": piece_train, "memory": piece_memory, "throughput": piece_throughput}


# --------------------------------------------------------------------------------------------------- driver

def travelling_files(root: Path, carry=(), skip=()) -> dict[str, int]:
    """{path relative to ``root``: bytes} of what travels to the device host: git's tracked and untracked files
    that are not ignored, plus every file under the ``carry`` paths (ignored folders named to travel); without
    git (the copy on the host) every file under ``root`` travelled. ``skip``: folders left out (the check's
    own output and work folders)."""
    root = Path(root).resolve()
    skip = [Path(x).resolve() for x in skip]
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout.decode()
        paths = [root / f for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        paths = [p for p in root.rglob("*") if not p.is_dir() or p.is_symlink()]
    for c in carry:
        c = root / c
        if c.is_dir():
            paths += [p for p in c.rglob("*") if not p.is_dir() or p.is_symlink()]
        elif c.exists():
            paths.append(c)
    sizes = {}
    for p in paths:
        if any(p.resolve().is_relative_to(s) for s in skip) or not (p.exists() or p.is_symlink()):
            continue
        sizes[str(p.relative_to(root))] = p.lstat().st_size
    return sizes


def tree_problem(root: Path, carry=(), skip=(), limit_mib: float = MAX_TREE_MIB) -> tuple[float, str | None]:
    """(MiB that travel, None) or, over ``limit_mib``, the refusal naming the largest files."""
    sizes = travelling_files(root, carry, skip)
    mib = sum(sizes.values()) / 2**20
    if mib <= limit_mib:
        return mib, None
    top = sorted(sizes.items(), key=lambda kv: -kv[1])[:8]
    return mib, (f"the tree that travels to the GPU host is {mib:.1f} MiB, over its {limit_mib:g} MiB: largest "
                 + ", ".join(f"{k} ({v / 2**20:.1f} MiB)" for k, v in top)
                 + ". Git-ignore them (.gitignore: *.gguf, model folders) or move them out of the tree.")


def run_piece(name: str, work: Path, opts: dict, limit: float | None) -> dict:
    """Run one piece in a child process (killed after ``limit`` seconds, if given); its row."""
    (work / f"{name}.in.json").write_text(json.dumps(opts))
    result, log = work / f"{name}.out.json", work / f"{name}.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRL_EXPERIMENTAL_SILENCE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, __file__, "--piece", name, "--work", str(work)], env=env,
                                stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    row = {"piece": name, "seconds": time.perf_counter() - t0}
    if proc.returncode == 0 and result.exists():
        return {**row, "status": "ok", **json.loads(result.read_text())}
    info = work / f"{name}.info.json"  # what a piece wrote before it was cut
    row.update(json.loads(info.read_text()) if info.exists() else {})
    if proc.returncode == -signal.SIGKILL:
        return {**row, "status": "timeout", "error": f"ended by the time guard after {limit:.0f} s"}
    lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()] or ["?"]
    return {**row, "status": "failed", "error": lines[-1][:400]}


def throughput_rows(work: Path) -> list[dict]:
    """The cells the throughput piece wrote; a cell started but never finished was cut by the time guard."""
    path = work / "throughput.rows.jsonl"
    rows: dict[tuple, dict] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        r = json.loads(line)
        rows[(r["n_rollouts"], r["engine"])] = r
    for r in rows.values():
        if r["status"] == "started":
            r.update(status="cut", reason="still running when the time guard ended the piece")
    return sorted(rows.values(), key=lambda r: (r["n_rollouts"], ENGINES.index(r["engine"])))


def versions() -> dict:
    import brorl

    out = {"python": sys.version.split()[0], "brorl": brorl.__version__}  # brorl: the source tree (src/)
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def summary_md(report: dict) -> str:
    from brorl.training.throughput import ratios

    v, tp, tr = report["versions"], report["pieces"]["throughput"], report["pieces"]["train"]
    dev = tp.get("device") or tr.get("device") or {}
    lines = [f"**GPU check** ({report['mode']}, {report['date']}, {report['seconds']:.0f} s): "
             f"{dev.get('gpu', 'CPU')}, torch {v['torch']} (CUDA {dev.get('cuda')}), transformers "
             f"{v['transformers']}, trl {v['trl']}, accelerate {v['accelerate']}, python {v['python']}.", "",
             f"Throughput: {tp.get('model', '?')}, {tp.get('dtype', '?')}, {report['new_tokens']} new tokens per "
             f"sample (no end token), {report['prompt_len']}-token prompts, {report['total']} samples per cell "
             f"(piece {tp['status']}).", "",
             "| N | prompts | engine | samples/s | tokens/s | s | peak GPU MB | plan: weights + KV MB | "
             "over weights MB | status |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["throughput"]:
        if r["status"] == "ok":
            mb = ("-", "-") if r["peak_mb"] is None else (f"{r['peak_mb']:,.0f}", f"{r['peak_over_weights_mb']:,.0f}")
            lines.append(f"| {r['n_rollouts']} | {r['prompts']} | {r['engine']} | {r['samples_per_s']:,.1f} | "
                         f"{r['tokens_per_s']:,.0f} | {r['seconds']:.1f} | {mb[0]} | {r['plan_mb']:,.0f} | {mb[1]} "
                         "| ok |")
        else:
            lines.append(f"| {r['n_rollouts']} | {r['prompts']} | {r['engine']} | | | | | | | {r['status']}: "
                         f"{r.get('reason', '')} |")
    rat = ratios([r for r in report["throughput"] if r["status"] == "ok"])
    lines += ["", "Samples/s at the largest N over the smallest measured: "
              + (", ".join(f"{e} {x:.2f}x" for e, x in rat.items()) or "-")
              + " (BroRL Table 2, vLLM on 64 H100s: 1.98x).", ""]
    if tr["status"] == "ok":
        st = tr["steps"]
        lines.append(f"RL steps: {len(st)} BroRLTrainer steps, N={tr['n_rollouts']} x {tr['prompts_per_step']} "
                     f"prompts, engine {tr['engine']}, bf16 {tr['bf16']}, model on {tr['model_device']} "
                     f"({tr['param_dtype']}); generated samples " + ", ".join(str(x["generated_samples"]) for x in st)
                     + ", generation rounds " + ", ".join(str(x["generation_rounds"]) for x in st)
                     + ", dynamic-sampling pass rate " + ", ".join(f"{x['dynamic_sampling_pass_rate']:.2f}" for x in st)
                     + (f"; peak GPU memory {tr['cuda_peak_mb']:,.0f} MB" if tr["cuda_peak_mb"] else "")
                     + f" (memory plan: {tr['plan_mb']:,.0f} MB)"
                     + f"; {tr['seconds']:.0f} s with the toy model's training.")
    else:
        lines.append(f"RL steps: {tr['status']}: {tr.get('error', '')}")
    mem = report["pieces"].get("memory", {})
    lines += ["", f"Memory plan beside measured peaks (forward + backward + AdamW step + forward + backward; "
              f"{mem.get('measure', '?')}; piece {mem.get('status', '?')}"
              + (f": {mem['error']}" if mem.get("error") else "") + ").", "",
              "| model | micro | tokens | checkpointing | plan MiB | measured MiB | error % |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['micro_batch']} | {r['seq_len']} | {r['checkpointing']} | "
              f"{r['predicted_mib']:,.0f} | {r['measured_mib']:,.0f} | {r['error_pct']:+.1f} |"
              for r in mem.get("rows", [])]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", action="store_true", help="tiny sizes on the CPU, no time limits (the test suite)")
    p.add_argument("--out", default=os.environ.get("OUT"), help="results folder (default: $OUT, else under --work)")
    p.add_argument("--work", default=None, help="working folder (default: a new one under /tmp)")
    p.add_argument("--budget", type=float, default=None, help="seconds for the whole check (GPU 450; 0: none)")
    p.add_argument("--total", type=int, default=None, help="samples per throughput cell (>= 512; default 512)")
    p.add_argument("--new-tokens", type=int, default=None, help="new tokens per sample (GPU 1024, CPU 8)")
    p.add_argument("--carry", action="append", default=None,
                   help="an ignored path that travels with the tree (repeat; default .gpu-wheels)")
    p.add_argument("--tree-only", action="store_true", help="only add up the tree that travels, then exit")
    p.add_argument("--piece", choices=PIECES, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.piece:  # child process
        work = Path(args.work)
        opts = json.loads((work / f"{args.piece}.in.json").read_text())
        out = RUNNERS[args.piece](work, opts)
        (work / f"{args.piece}.out.json").write_text(json.dumps(out, default=str))
        return 0
    skip = [x for x in (args.out, args.work) if x]
    mib, problem = tree_problem(ROOT, [".gpu-wheels"] if args.carry is None else args.carry, skip)
    if problem:
        print(f"[gpu_check] refused: {problem}", file=sys.stderr)
        return 2
    print(f"[gpu_check] the tree that travels: {mib:.1f} MiB (limit {MAX_TREE_MIB} MiB)", flush=True)
    if args.tree_only:
        return 0
    work = Path(args.work or tempfile.mkdtemp(prefix="brorl-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)

    t_start, mode = time.time(), "cpu" if args.cpu else "gpu"
    opts = {**PROFILES[mode], "cpu": args.cpu}
    for key in ("budget", "total", "new_tokens"):
        if getattr(args, key) is not None:
            opts[key] = getattr(args, key)
    if opts["total"] < max(NS) or opts["total"] % max(NS):
        p.error(f"--total {opts['total']}: must be a multiple of the largest N, {max(NS)} (equal samples per cell)")
    out = Path(args.out) if args.out else work / "results"
    out.mkdir(parents=True, exist_ok=True)
    deadline = t_start + opts["budget"] if opts["budget"] else None
    (work / "throughput.rows.jsonl").unlink(missing_ok=True)
    pieces = {}
    for name in PIECES:
        left = None if deadline is None else deadline - time.time()
        cap = {"train": TRAIN_LIMIT_S, "memory": MEMORY_LIMIT_S}.get(name)
        limit = None if left is None else (min(left, cap) if cap else left)
        pieces[name] = (run_piece(name, work, {**opts, "deadline": deadline}, limit) if limit is None or limit > 0
                        else {"piece": name, "seconds": 0.0, "status": "skipped", "error": "time guard: no time left"})
        row = pieces[name]
        print(f"[gpu_check] {name}: {row['status']} ({row['seconds']:.1f} s) {row.get('error', '')}", flush=True)
    report = {"tree_mib": round(mib, 1), "mode": mode,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t_start)),
              "seconds": time.time() - t_start, "versions": versions(), "pieces": pieces,
              "throughput": throughput_rows(work), **{k: opts[k] for k in ("total", "new_tokens", "prompt_len",
                                                                          "budget")}}
    with open(out / "gpu_check.log", "w") as f:
        for name in PIECES:
            f.write(f"===== {name}\n" + (work / f"{name}.log").read_text(errors="replace"))
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    ok_rows = [r for r in report["throughput"] if r["status"] == "ok"]
    if ok_rows:
        from brorl.training.throughput import COLUMNS, write_outputs

        write_outputs([{k: r[k] for k in COLUMNS} for r in ok_rows], out / "throughput.csv", out / "throughput.png",
                      title=f", random Qwen2, {report['new_tokens']} new tokens")
    text = summary_md(report)
    (out / "summary.md").write_text(text)
    print("\n" + text + f"\nresults in {out}")
    # every piece wrote its numbers (a throughput piece ended by the time guard keeps the cells it measured)
    ran = all(pieces[k]["status"] == "ok" for k in ("train", "memory")) and pieces["throughput"]["status"] in (
        "ok", "timeout")
    return 0 if ran and ok_rows else 1


if __name__ == "__main__":
    sys.exit(main())
