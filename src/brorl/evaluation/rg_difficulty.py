"""The start model's pass rates on Reasoning Gym tasks, and the tasks whose prompts sit in BroRL's band.

For a candidate list of Reasoning Gym tasks (at reasoning-gym's default settings, or the dataset config keys of
``task_configs``: a difficulty), ``prompts`` problems each are
generated (:func:`brorl.kinds.reasoning_gym.generate_reasoning_gym`: RG's own prompt text, in the user turn
under the model's chat template, exactly as training and the lm-eval task see it), ``k`` completions per
problem are sampled with the training engine and temperature, and each is scored with the training reward
(:func:`brorl.data.training.make_paper_reward`: the last ``<answer>`` pair, the task's own verifier, a
completion cut off at ``max_new_tokens`` scores 0). A completion *passes* when it scores 1 (some verifiers
give partial credit, e.g. ``basic_arithmetic`` to a near number).

:func:`brorl.kinds.reasoning_gym.pick` keeps a task when its mean pass rate lies in ``[low, high]`` (BroRL's band: prompts that are
neither solved nor hopeless, between ~1/64 and ~1/2) and it has at least one prompt with 0 < passes < k (so
GRPO-style groups carry signal at the training N).
"""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Sequence
from brorl.atomic import atomic_open
from brorl.kinds.reasoning_gym import pick

def measure(model_dir: str | Path, tasks: Sequence[str], *, prompts: int, k: int, max_new_tokens: int,
            temperature: float = 1.0, seed: int = 0, rg_seed: int = 777, engine: str = "prefix_tree",
            chunk_samples: int = 64, task_configs: dict | None = None, log=print) -> list[dict]:
    """One row per problem: task, id, passes (of k), truncated (of k), mean completion tokens, seconds."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from brorl.kinds.reasoning_gym import generate_reasoning_gym
    from brorl.models.sampling import SAMPLERS
    from brorl.tasks.core import format_prompt
    from brorl.data.training import make_paper_reward, training_record

    records, _ = generate_reasoning_gym(seed=rg_seed, samples_per_task=prompts, tasks=list(tasks),
                                        task_configs=task_configs)
    records = [training_record("reasoning_gym", "reasoning_gym", r) for r in records]
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    reward = make_paper_reward(records, tok)
    eos, rows = tok.eos_token_id, []
    for i, r in enumerate(records):
        ids = tok(format_prompt(tok, r), add_special_tokens=False).input_ids
        t0 = time.perf_counter()
        block = SAMPLERS[engine](model, [ids], k, max_new_tokens, eos, tok.pad_token_id, temperature=temperature,
                                 seed=seed + i, chunk_samples=chunk_samples)[0]
        seconds = time.perf_counter() - t0
        comps = [row[: row.index(eos) + 1] if eos in row else row for row in block.tolist()]
        scores = reward(None, None, comps, [i] * k)
        rows.append({"task": r["rg_task"], "id": r["id"], "k": k, "passes": sum(s >= 1.0 for s in scores),
                     "truncated": sum(eos not in c for c in comps),
                     "mean_tokens": round(sum(map(len, comps)) / k, 1), "prompt_tokens": len(ids),
                     "seconds": round(seconds, 1)})
        log(f"[difficulty] {r['id']}: {rows[-1]['passes']}/{k} pass, {rows[-1]['truncated']} truncated, "
            f"{rows[-1]['mean_tokens']} tokens, {seconds:.0f} s")
    return rows


def config_errors(config: dict) -> list[str]:
    """The config check (brorl.pipeline.config_errors) of ``rg_difficulty``: the measured model is fetched; picked
    tasks are declared once (nowhere else) and trained."""
    scan, errors = config.get("rg_difficulty"), []
    if not isinstance(scan, dict):
        return errors
    if scan.get("model") not in (config.get("checkpoints", {}).get("fetch") or {}):
        errors.append(f"rg_difficulty.model: {scan.get('model')!r} is not a fetched checkpoint (checkpoints.fetch) "
                      "[rule: measured model exists]")
    if scan.get("pick"):
        data = (config.get("rl") or {}).get("data") or {}
        evaluation = config.get("evaluation")
        for where, section, key in (("rl.data", data, "reasoning_gym_tasks"),
                                    ("evaluation.reasoning_gym", (evaluation or {}).get("reasoning_gym") or {}, "tasks")):
            if section.get(key):
                errors.append(f"{where}.{key}: given while rg_difficulty.pick is true, which picks the tasks; omit it "
                              "[rule: the tasks are declared once]")
        if "reasoning_gym" not in (data.get("sources") or []):
            errors.append("rg_difficulty.pick: rl.data.sources has no reasoning_gym to train the picked tasks "
                          "[rule: picked tasks are trained]")
    return errors


def write_csv(path: str | Path, rows: Sequence[dict]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def run_rg_difficulty(config: dict, model_dir: str | Path, csv_path: str | Path, tasks_csv: str | Path) -> list[dict]:
    """``brorl rg-difficulty``: :func:`measure` the configured tasks (config: tasks, prompts, k, max_new_tokens,
    temperature, seed, band, task_configs), :func:`pick` those in the band; both tables written and logged to the
    rule's MLflow run. Returns the per-task rows."""
    import mlflow

    t0 = time.perf_counter()
    rows = measure(model_dir, config["tasks"], prompts=config["prompts"], k=config["k"],
                   max_new_tokens=config["max_new_tokens"], temperature=config["temperature"], seed=config["seed"],
                   task_configs=config.get("task_configs"))
    seconds = time.perf_counter() - t0
    tasks = pick(rows, *config["band"])
    write_csv(csv_path, rows)
    write_csv(tasks_csv, tasks)
    mlflow.log_metrics({"seconds": seconds, "tasks_picked": sum(t["picked"] for t in tasks),
                        **{f"pass_rate.{t['task']}": t["mean_pass_rate"] for t in tasks}})
    mlflow.log_artifact(csv_path)
    mlflow.log_artifact(tasks_csv)
    for t in tasks:
        print(f"[difficulty] {t['task']}: mean pass rate {t['mean_pass_rate']:.3f}, mixed prompts "
              f"{t['mixed_share']:.2f}, truncated {t['truncated_share']:.2f} -> {'picked' if t['picked'] else '-'}")
    return tasks
