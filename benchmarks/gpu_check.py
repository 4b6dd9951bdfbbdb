"""One-command check of the paper-profile pieces at toy size, on one GPU (or, with --cpu, on the CPU engines).

    python benchmarks/gpu_check.py --model /path/to/hf-folder        # one GPU, a local checkpoint
    python benchmarks/gpu_check.py --hub nvidia/Nemotron-Research-Reasoning-Qwen-1.5B@main   # fetched (pinned)
    python benchmarks/gpu_check.py --cpu                              # CPU engines, a tiny model trained here

Pieces, each in its own process (vLLM engines do not share a process well), each with a time limit:

    model       the checkpoint: --model as is, --hub through brorl.fetch (revision pinned in a manifest), or
                (--cpu) a tiny Llama trained here on the tiny tasks in a few seconds
    data        the paper training data path (brorl.training.paper_data.prepare_train_data) from a local
                stand-in of the hub (a few DeepScaleR-, Eurus-2- and Reasoning Gym-like problems): no network
    train       two RL steps of BroRLTrainer on that data with the paper reward (math-verify, sandboxed code,
                Reasoning Gym verifiers) at small N: vLLM rollouts (TRL colocate, truncated importance sampling)
                on the GPU, the prefix-tree sampler with --cpu. The stage runner (brorl.training.stage) is not
                used: it lacks the paper-data hook (see README, "Paper-profile training")
    eval        a few math problems through lm-eval (brorl.evaluation.runner.evaluate; vllm backend on the GPU,
                hf with --cpu), k = 2
    throughput  samples/s at two values of N for the same total samples: vLLM (prefix caching on) on the GPU,
                the CPU engines of the throughput study (brorl.training.throughput) with --cpu

It prints one table row per piece (seconds, what it measured, ok / the error) and writes the rows to --out.
Status: the --cpu mode runs in the test suite; the GPU mode has NOT run yet (no GPU was lent to this project's
sessions so far), so expect to fix details (vLLM memory settings, dtype) on the first GPU run.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

COMMIT = "0" * 40
MATH = [("What is $1 + 1$?", "2"), ("What is $2 + 3$?", "5"), ("What is $3 \\cdot 4$?", "12"),
        ("What is $10 - 4$?", "6"), ("What is $2^5$?", "32"), ("What is $9 + 9$?", "18"),
        ("What is $7 \\cdot 6$?", "42"), ("What is $100 / 4$?", "25")]
SUM_TESTS = {"inputs": ["1 2\n", "2 2\n", "5 7\n"], "outputs": ["3\n", "4\n", "12\n"]}
RG_TASKS = ["basic_arithmetic", "leg_counting"]
PIECES = ("model", "data", "train", "eval", "throughput")


# --------------------------------------------------------------------------------------------------- pieces

def piece_model(work: Path, opts: dict) -> dict:
    if opts.get("model"):
        return {"model": str(Path(opts["model"]).resolve()), "detail": "local folder"}
    if opts.get("hub"):
        from brorl.fetch import fetch_model

        repo, _, rev = opts["hub"].partition("@")
        info = fetch_model(repo, rev or "main", work / "model", source=opts.get("source"))
        return {"model": str(work / "model"), "detail": f"{repo}@{info['commit'][:12]} ({info['status']})"}
    if not opts["cpu"]:
        raise SystemExit("on the GPU give --model FOLDER or --hub REPO@REV")
    from brorl.models.toy import toy_model

    toy_model(work / "tiny_tasks", work / "model", max_steps=60, threads=2)
    return {"model": str(work / "model"), "detail": "tiny Llama (hidden 32, 2 layers) trained here"}


def _parquet(rows: list[dict]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    return buf.getvalue()


def standin_hub(root: Path) -> Path:
    """A local stand-in of the training sources' hub repositories (the layout brorl.fetch reads)."""
    from brorl.fetch import write_local_snapshot

    write_local_snapshot(root, "agentica-org/DeepScaleR-Preview-Dataset", "main", COMMIT,
                         {"deepscaler.json": json.dumps([{"problem": p, "answer": a} for p, a in MATH]).encode()},
                         repo_type="dataset")
    rows = [{"data_source": "apps", "ability": "code", "reward_model": {"ground_truth": json.dumps(SUM_TESTS)},
             "prompt": [{"role": "user", "content": f"Problem {i}: read two integers and print their sum."}]}
            for i in range(4)]
    write_local_snapshot(root, "PRIME-RL/Eurus-2-RL-Data", "main", COMMIT, {"train.parquet": _parquet(rows)},
                         repo_type="dataset")
    return root


def piece_data(work: Path, opts: dict) -> dict:
    from brorl.training.paper_data import prepare_train_data

    hub = standin_hub(work / "hub")
    marker = prepare_train_data(work / "data", {"validation_per_source": 1, "reasoning_gym_samples_per_task": 4,
                                                "reasoning_gym_tasks": RG_TASKS},
                                source=hub, cache_dir=work / "data_cache")
    # a few math problems as the math500 benchmark's test file (the evaluation piece reads it)
    bench = work / "bench" / "math500"
    bench.mkdir(parents=True, exist_ok=True)
    from brorl.evaluation.paper_data import MATH_INSTRUCTION, PROMPT_SEPARATOR

    with open(bench / "test.jsonl", "w") as f:
        for i, (p, a) in enumerate(MATH[:4]):
            f.write(json.dumps({"id": f"check-{i}", "benchmark": "math500", "prompt": p + PROMPT_SEPARATOR +
                                MATH_INSTRUCTION, "problem": p, "answer": a, "source": "gpu_check"}) + "\n")
    n = {k: v["n_train"] for k, v in marker["sources"].items()}
    return {"data": str(work / "data"), "detail": "train problems " + ", ".join(f"{k} {v}" for k, v in n.items())}


def piece_train(work: Path, opts: dict) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer

    from brorl.tasks.core import format_prompt, read_split
    from brorl.training.paper_data import make_paper_reward
    from brorl.training.settings import RLSettings
    from brorl.training.stage import grpo_config
    from brorl.training.trainer import BroRLTrainer, learning_rate

    gpu, model = not opts["cpu"], opts["state"]["model"]
    length = opts["max_tokens"]
    s = RLSettings(n_rollouts=opts["n"], prompts_per_step=4, steps=2, micro_batch_size=8, eta0=1e-6 if gpu else 1e-3,
                   b0=4 * opts["n"], max_rounds=2, probe_every=0, checkpoint_every=10, threads=0 if gpu else 2,
                   temperature=1.0, max_completion_length=length,
                   generation_engine="vllm" if gpu else "prefix_tree")
    tok = AutoTokenizer.from_pretrained(model, local_files_only=True)
    records = read_split(opts["state"]["data"], "train")
    ds = Dataset.from_dict({"prompt": [format_prompt(tok, r) for r in records], "record_index": list(range(len(records)))})
    args = grpo_config(s, work / "train_ckpt", length)
    if gpu:  # toy-size vLLM engine beside the trained model on one GPU
        args.vllm_gpu_memory_utilization = 0.3
        args.vllm_max_model_length = 2048 + length
    trainer = BroRLTrainer(model=model, reward_funcs=make_paper_reward(records, tok), args=args, train_dataset=ds,
                           processing_class=tok, settings=s)
    steps, inner = [], trainer._generate_and_score_completions

    def record(inputs):
        out = inner(inputs)
        if trainer.model.training:
            steps.append(dict(trainer.last_rollout))
        return out

    trainer._generate_and_score_completions = record
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    gen = sum(x["generated_samples"] for x in steps)
    return {"detail": f"{len(steps)} steps, N={s.n_rollouts} x 4 prompts, engine {s.generation_engine}, "
                      f"{gen} samples, reward {sum(x['reward_mean'] for x in steps) / max(len(steps), 1):.3f}, "
                      f"pass rate {sum(x['dynamic_sampling_pass_rate'] for x in steps) / max(len(steps), 1):.2f}, "
                      f"lr {learning_rate(s):.2g}, {seconds:.1f} s",
            "steps": steps, "cuda_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if gpu else None}


def piece_eval(work: Path, opts: dict) -> dict:
    from brorl.evaluation.runner import evaluate

    gpu = not opts["cpu"]
    out = evaluate(opts["state"]["model"], "math500", work / "bench", work / "eval" / "math500.json", k=2, limit=4,
                   max_gen_toks=opts["max_tokens"], backend="vllm" if gpu else "hf", device="cuda" if gpu else "cpu",
                   dtype="bfloat16" if gpu else "float32", threads=None if gpu else 2,
                   backend_args={"gpu_memory_utilization": 0.4, "max_model_len": 2048 + opts["max_tokens"]}
                   if gpu else None, log=None)
    m = out["metrics"]
    return {"detail": f"math500 stand-in: {int(m['n_problems'])} problems, k=2, mean@2 {m['mean_at_k']:.3f}, "
                      f"{out['seconds']:.1f} s ({'vllm' if gpu else 'hf'} backend)"}


def piece_throughput(work: Path, opts: dict) -> dict:
    ns, model = opts["ns"], opts["state"]["model"]
    if opts["cpu"]:
        from brorl.training.throughput import measure_throughput

        rows = measure_throughput(model, ns=ns, total=max(ns) * 2, engines=["prefix_tree", "hf"], repeats=1,
                                  threads=2, progress=False)
        return {"detail": "; ".join(f"{r['engine']} N={r['n_rollouts']}: {r['samples_per_s']:.0f} samples/s"
                                    for r in rows), "rows": rows}
    from brorl.training.throughput import measure_throughput

    rows = measure_throughput(model, ns=ns, total=max(ns) * 4, engines=["vllm", "vllm_no_prefix_cache"], repeats=1,
                              max_tokens=opts["max_tokens"], progress=False,
                              vllm_args={"gpu_memory_utilization": 0.3, "max_model_len": 2048 + opts["max_tokens"]})
    return {"detail": "; ".join(f"{r['engine']} N={r['n_rollouts']}: {r['samples_per_s']:.0f} samples/s, "
                                f"{r['tokens_per_s']:.0f} tok/s" for r in rows), "rows": rows}


RUNNERS = {"model": piece_model, "data": piece_data, "train": piece_train, "eval": piece_eval,
           "throughput": piece_throughput}


# --------------------------------------------------------------------------------------------------- driver

def run_piece(name: str, work: Path, opts: dict, timeout: float) -> dict:
    """Run one piece in a child process; returns its row (status ok / failed / timeout)."""
    spec = work / f"{name}.in.json"
    result = work / f"{name}.out.json"
    spec.write_text(json.dumps(opts))
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "0" if opts.get("hub") else "1"),
           "TRL_EXPERIMENTAL_SILENCE": "1", "TOKENIZERS_PARALLELISM": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, __file__, "--piece", name, "--work", str(work)], env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"piece": name, "status": "timeout", "seconds": time.perf_counter() - t0,
                "detail": f"past {timeout:.0f} s"}
    seconds = time.perf_counter() - t0
    (work / f"{name}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0 or not result.exists():
        tail = [line for line in (proc.stderr or proc.stdout).strip().splitlines() if line.strip()][-1:] or ["?"]
        return {"piece": name, "status": "failed", "seconds": seconds, "detail": tail[0][:300],
                "log": str(work / f"{name}.log")}
    return {"piece": name, "status": "ok", "seconds": seconds, **json.loads(result.read_text())}


def table(rows: list[dict]) -> str:
    lines = ["| piece | status | s | what |", "|---|---|---|---|"]
    lines += [f"| {r['piece']} | {r['status']} | {r['seconds']:.1f} | {r.get('detail', '')} |" for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="a local HF checkpoint folder")
    p.add_argument("--hub", help="REPO[@REVISION] fetched through brorl.fetch (needs the hub, or --source)")
    p.add_argument("--source", help="a local stand-in folder of the hub for --hub (brorl.fetch layout)")
    p.add_argument("--cpu", action="store_true", help="CPU engines and a tiny model trained here")
    p.add_argument("--work", default=None, help="working folder (default: a new one under /tmp)")
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    p.add_argument("--n", type=int, default=None, help="rollouts per prompt in the training piece (GPU 16, CPU 8)")
    p.add_argument("--ns", type=int, nargs=2, default=None, help="the two N of the throughput piece (16 64)")
    p.add_argument("--max-tokens", type=int, default=None, help="completion tokens (GPU 512, CPU 8)")
    p.add_argument("--piece", choices=PIECES, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    work = Path(args.work) if args.work else Path(__import__("tempfile").mkdtemp(prefix="brorl-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.piece:  # child process
        opts = json.loads((work / f"{args.piece}.in.json").read_text())
        out = RUNNERS[args.piece](work, opts)
        (work / f"{args.piece}.out.json").write_text(json.dumps(out, default=str))
        return 0
    opts = {"model": args.model, "hub": args.hub, "source": args.source, "cpu": args.cpu,
            "n": args.n or (8 if args.cpu else 16), "ns": args.ns or [16, 64],
            "max_tokens": args.max_tokens or (8 if args.cpu else 512), "state": {}}
    limits = {"model": 300, "data": 120, "train": 240, "eval": 180, "throughput": 180}
    rows, t0 = [], time.perf_counter()
    for name in PIECES:
        row = run_piece(name, work, opts, limits[name])
        rows.append(row)
        print(f"[gpu_check] {name}: {row['status']} ({row['seconds']:.1f} s) {row.get('detail', '')}", flush=True)
        if name in ("model", "data"):
            if row["status"] != "ok":
                break
            opts["state"][name] = row[name]
    print(f"\n{'CPU' if args.cpu else 'GPU'} check, {time.perf_counter() - t0:.0f} s in all (work folder {work}):\n")
    print(table(rows))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1, default=str) + "\n")
    return 0 if all(r["status"] == "ok" for r in rows) and len(rows) == len(PIECES) else 1


if __name__ == "__main__":
    sys.exit(main())
