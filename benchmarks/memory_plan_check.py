"""Check the memory plan's formulas (brorl.training.memory) against measured peak memory on the CPU.

    python benchmarks/memory_plan_check.py [--out docs/results/memory_plan] [--threads 2] [--cases small-256,...]

Each case builds a randomly initialised Qwen2 model (transformers' ``Qwen2ForCausalLM``, fp32) in a fresh child
process, adds TRL 1.16's fused LM head (``trl.trainer.utils.add_fused_lm_head``, as GRPOTrainer does), and runs
what one training process of an arm runs: forward + backward of a padded micro-batch (labels only on the
completion part, as TRL scores it), an AdamW step, then a second forward + backward while the first one's
gradients are still accumulated and the AdamW moments exist (the steady state of gradient accumulation: weights,
gradients, optimizer state and one micro-batch's activations at once).

**What is measured**: the child's peak resident set size (``VmHWM`` in ``/proc/self/status``) minus its resident
size after importing torch and transformers and before the model is built. glibc's malloc is told to serve every
allocation above 64 KiB by ``mmap`` (``MALLOC_MMAP_THRESHOLD_=65536``), so freed tensors go back to the system at
once and the RSS follows the live tensors (without it glibc's growing threshold keeps freed heap pages). The
prediction is :func:`brorl.training.memory.training_terms` for the same setting (one process, fp32, no sharding):
its ``peak``. Writes ``memory_plan_check.{csv,md}`` under ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

MODELS = {  # random Qwen2 models (transformers config keys); params from brorl.training.memory.Architecture
    "qwen2-7m": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                     intermediate_size=704, vocab_size=8192),
    "qwen2-90m": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
                      intermediate_size=2048, vocab_size=8192),
    # a wide MLP and a small vocabulary: with checkpointing the recomputed layer, not the LM head, sets the peak
    "qwen2-wide-65m": dict(hidden_size=1024, num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=4,
                           intermediate_size=4096, vocab_size=2048),
}
CASES = [(m, seq, ck) for m in ("qwen2-7m", "qwen2-90m") for seq in (256, 1024) for ck in (False, True)] + [
    ("qwen2-wide-65m", 1024, ck) for ck in (False, True)]
MICRO = 2


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def child(spec: dict) -> dict:
    """One case, in this (fresh) process: the measured peak bytes. ``spec``: model (Qwen2Config keys), seq, micro,
    checkpointing, threads, and optionally device (``cpu``: peak RSS above the post-import RSS; ``cuda``:
    ``torch.cuda.max_memory_allocated``, the model cast to bf16 whole, as ``benchmarks/gpu_check.py`` runs it)."""
    import torch
    import transformers
    from trl.trainer.utils import add_fused_lm_head

    cuda = spec.get("device", "cpu") == "cuda"
    if not cuda:
        torch.set_num_threads(spec["threads"])
    torch.manual_seed(0)
    device = "cuda" if cuda else "cpu"
    micro, seq, prompt = spec["micro"], spec["seq"], spec["seq"] // 8
    ids = torch.randint(3, spec["model"]["vocab_size"], (micro, seq), device=device)
    attn = torch.ones_like(ids)
    attn[0, :prompt // 2] = 0  # a left-padded prompt: transformers builds its 4-D mask, as for a GRPO batch
    labels = ids.masked_fill(attn == 0, -100)
    labels[:, :prompt] = -100  # only the completion is scored (TRL: labels[:, :-logits_to_keep] = -100)
    if not cuda:
        try:  # several cases in one process (gpu_check --cpu): reset the peak RSS to the current RSS
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            pass
    base = 0 if cuda else _status("VmRSS")
    keys = {k: v for k, v in spec["model"].items() if k not in ("model_type", "architectures", "torch_dtype")}
    config = transformers.Qwen2Config(**{**keys, "tie_word_embeddings": False, "use_cache": False,
                                         "max_position_embeddings": max(4096, seq)}, attn_implementation="sdpa")
    with torch.device(device):
        model = transformers.Qwen2ForCausalLM(config)
    model = model.to(torch.bfloat16 if cuda else torch.float32).train()
    if spec["checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for step in range(2):
        out = model(input_ids=ids, attention_mask=attn, labels=labels, fused_lm_head=True)
        loss = -(out.log_probs.sum() / (labels != -100).sum())
        loss.backward()
        del out, loss
        if step == 0:
            opt.step()  # the moments now exist; the gradients stay (accumulation) for the second backward
    if cuda:
        torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() if cuda else _status("VmHWM") - base
    return {"peak_bytes": peak, "base_rss_bytes": base, "seconds": round(time.perf_counter() - t0, 1),
            "torch": torch.__version__, "transformers": transformers.__version__}


def predict(model: dict, seq: int, micro: int, checkpointing: bool, device: str = "cpu") -> dict:
    """The plan's terms for a case: fp32 on the CPU; on CUDA a bf16 model (weights, gradients and AdamW moments in
    bf16) with TRL's Triton fold of the LM head."""
    from brorl.training.memory import Architecture, TrainSetting, training_terms

    arch = Architecture.from_mapping({**model, "model_type": "qwen2"})
    cuda = device == "cuda"
    setting = TrainSetting(micro_batch=micro, seq_len=seq, checkpointing=checkpointing, bf16=cuda,
                           master_bytes=2 if cuda else 4, triton=cuda and triton_available(), foreach=cuda,
                           float_mask=cuda)
    return {"params": arch.params, **training_terms(arch, setting)}


def triton_available() -> bool:
    """Whether TRL folds the LM head's tiles with Triton here (CUDA with triton importable)."""
    try:
        from trl.kernels.chunked_logprob import _TRITON_AVAILABLE
    except ImportError:
        return False
    return bool(_TRITON_AVAILABLE)


def row(name: str, model: dict, seq: int, micro: int, ck: bool, measured: dict, device: str = "cpu",
        threads: int | None = None) -> dict:
    """One table row: the plan's prediction beside the measured peak."""
    p = predict(model, seq, micro, ck, device)
    mib = 2 ** 20
    return {"model": name, "params_m": round(p["params"] / 1e6, 1), "micro_batch": micro, "seq_len": seq,
            "checkpointing": ck, "static_mib": round((p["weights"] + p["gradients"] + p["optimizer"]) / mib, 1),
            "activations_mib": round(p["activations"] / mib, 1),
            "transient_mib": round(p["backward_transient"] / mib, 1),
            "predicted_mib": round(p["peak"] / mib, 1), "measured_mib": round(measured["peak_bytes"] / mib, 1),
            "error_pct": round(100 * (p["peak"] - measured["peak_bytes"]) / measured["peak_bytes"], 1),
            "seconds": measured["seconds"], **({} if threads is None else {"threads": threads})}


def run_case(name: str, seq: int, ck: bool, threads: int) -> dict:
    spec = {"model": MODELS[name], "seq": seq, "micro": MICRO, "checkpointing": ck, "threads": threads}
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": str(threads),
           "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], env=env, capture_output=True,
                          text=True, timeout=3600)
    if proc.returncode:
        raise RuntimeError(f"case {name} seq {seq} checkpointing {ck} failed:\n{proc.stderr[-3000:]}")
    measured = json.loads(proc.stdout.strip().splitlines()[-1])
    return {**row(name, MODELS[name], seq, MICRO, ck, measured, threads=threads),
            "load_1min": round(os.getloadavg()[0], 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "memory_plan"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cases", default="", help="comma-separated model-seq[-ckpt] names (default: all)")
    ap.add_argument("--merge", action="store_true", help="keep the other rows of an existing CSV under --out")
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(json.loads(a.child))))
        return 0
    wanted = set(filter(None, a.cases.split(",")))
    rows = []
    for name, seq, ck in CASES:
        tag = f"{name}-{seq}" + ("-ckpt" if ck else "")
        if wanted and tag not in wanted:
            continue
        rows.append(run_case(name, seq, ck, a.threads))
        print(json.dumps(rows[-1]), flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.merge and (out / "memory_plan_check.csv").exists():
        with open(out / "memory_plan_check.csv") as fh:
            old = [{k: (v == "True" if k == "checkpointing" else v) for k, v in r.items()} for r in csv.DictReader(fh)]
        key = lambda r: (r["model"], int(r["seq_len"]), r["checkpointing"])  # noqa: E731
        new = {key(r) for r in rows}
        order = {c: i for i, c in enumerate(CASES)}
        rows = sorted([r for r in old if key(r) not in new] + rows, key=lambda r: order.get(key(r), len(order)))
    with open(out / "memory_plan_check.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[-1]), restval="")
        w.writeheader()
        w.writerows(rows)
    load = os.getloadavg()
    lines = [f"Memory plan vs measured CPU peak (peak RSS above the post-import RSS; {time.strftime('%Y-%m-%d')}, "
             f"{os.cpu_count()} cores, load average {load[0]:.1f} at the end; torch threads {a.threads})", "",
             "| " + " | ".join(rows[-1]) + " |", "|" + "---|" * len(rows[-1])]
    lines += ["| " + " | ".join(str(r.get(k, "")) for k in rows[-1]) + " |" for r in rows]
    worst = max(abs(float(r["error_pct"])) for r in rows)
    lines += ["", f"Largest error: {worst:.1f}% (error = (predicted - measured) / measured)."]
    (out / "memory_plan_check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
