"""The throughput study on a real model: SmolLM2-135M-Instruct (the small profile's start model) at N in
{16, 64, 256} for the same total samples, on Reasoning Gym prompts of the small profile's tasks.

Engines: ``hf`` (TRL's ``model.generate`` on N repeated rows), ``shared_prompt``, ``prefix_tree`` (the trainer's
``_generate``, brorl.training.throughput) on the converted fp32 HF folder, and ``llama_cpp`` (llama-cpp-python on
the wheel's own Q4_1 GGUF; a CPU user's pick) when it is importable -- else its row is missing and the reason is
printed. Every sample runs to its EOS or ``--max-tokens``.

    python benchmarks/bench_smollm2_throughput.py --model resources/small/models/smollm2 \\
        --gguf <SmolLM2-135M-Instruct.Q4_1.gguf> [--total 256] [--max-tokens 64] [--threads 1] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True, help="the converted HF folder (resources/small/models/smollm2)")
    ap.add_argument("--gguf", type=Path, default=None, help="the GGUF file, for the llama_cpp engine")
    ap.add_argument("--config", type=Path, default=Path("config/small.yaml"), help="the tasks: rg_difficulty")
    ap.add_argument("--total", type=int, default=256)
    ap.add_argument("--ns", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--engines", nargs="+", default=["hf", "shared_prompt", "prefix_tree", "llama_cpp"])
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("results/bench/smollm2_throughput"))
    args = ap.parse_args(argv)

    from brorl.kinds.reasoning_gym import generate_reasoning_gym
    from brorl.training.throughput import measure_throughput, write_outputs

    engines = list(args.engines)
    if "llama_cpp" in engines:
        try:
            import llama_cpp  # noqa: F401
        except ImportError as err:
            print(f"[throughput] llama_cpp row missing: {err} (llama-cpp-python is an sdist only: README)")
            engines.remove("llama_cpp")
    rg = yaml.safe_load(args.config.read_text())["rg_difficulty"]
    per_task = -(-args.total // min(args.ns) // len(rg["tasks"]))
    records, _ = generate_reasoning_gym(seed=1, samples_per_task=per_task, tasks=rg["tasks"],
                                        task_configs=rg.get("task_configs"))
    rows = measure_throughput(args.model, ns=args.ns, total=args.total, engines=engines, threads=args.threads,
                              max_tokens=args.max_tokens, records=records, gguf=args.gguf)
    args.out.mkdir(parents=True, exist_ok=True)
    rat = write_outputs(rows, args.out / "throughput.csv", args.out / "throughput.png", args.out / "throughput.md",
                        title=f", SmolLM2-135M-Instruct on {args.threads} CPU thread(s), <= {args.max_tokens} new tokens")
    print((args.out / "throughput.md").read_text())
    print("largest N / smallest N: " + ", ".join(f"{e} {v:.2f}x" for e, v in rat.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
