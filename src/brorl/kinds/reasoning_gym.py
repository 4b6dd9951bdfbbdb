"""Reasoning Gym (reasoning_gym): problems generated locally by the pinned reasoning-gym package (no hub snapshot),
scored by each task's own verifier; for evaluation and for training.

A record: ``category`` (one of the paper's 11), ``task`` (the reasoning-gym dataset), ``entry`` (the
reasoning-gym item as a JSON string, what its verifier scores) and ``answer`` (its gold answer, "" for the tasks
whose verifier checks validity instead: boxnet, graph_color, propositional_logic, rubiks_cube, rush_hour in
0.1.25). Its prompt is the question, then reasoning-gym's own ``SYSTEM_PROMPTS["default"]`` text
(:data:`RG_INSTRUCTION`) asking for the answer in ``<answer></answer>`` tags, put in the user turn (DeepSeek-R1's
recommendation: no system prompt). ProRL says only that answers go in ``<answer>`` tags; the wording is our choice.
A training record keeps the dataset name as ``rg_task`` (its ``task`` is the training source).

100 samples per task (ProRL's "100 held-out samples per task") for every reasoning-gym dataset
whose module lies in one of the paper's 11 categories (algebra, algorithmic, arc, arithmetic, code,
cognition, games, geometry, graphs, induction, logic: 104 tasks in reasoning-gym 0.1.25, every category
present; the package's ``probability`` category and the ``composite`` wrapper are not among them). Default
configs (the ones :func:`brorl.rewards.reasoning_gym_reward` scores with) and one fixed seed,
:data:`RG_SEED`, far from the small seeds training generators use, which is what "held out" means here.
Generation runs offline in a child process (``python -m brorl.kinds.reasoning_gym``) with ``PYTHONHASHSEED=0``
and the global ``random`` / numpy RNGs seeded per task: five tasks (isomorphic_strings, knight_swap,
polynomial_multiplication, ransom_note, word_ladder) iterate over sets of strings, so their items change with
the hash seed, and two (list_functions, codeio) draw from the global RNGs; without both measures a rerun does
not reproduce the file.

Reward and scorer: :func:`brorl.rewards.reasoning_gym_reward` (the task's verifier on the text inside the last
``<answer>...</answer>``), a value in [0, 1] in the reward pool's workers; the lm-eval task's pass@k counts a
reward >= 0.5 as solved and also reports ``mean_reward`` (the raw continuous reward, ProRL's reporting for logic
puzzles); its per-category metrics group by ``category``.

The start model's pass rates per task (``brorl rg-difficulty``, :mod:`brorl.evaluation.rg_difficulty`) pick the
tasks in BroRL's band: :func:`pick`, the picked tasks table (:func:`picked_tasks`) and the config sections they
rewrite (:func:`apply_picked`, for ``rl.data`` and ``evaluation.reasoning_gym``) live here with the generator.
"""

from __future__ import annotations

import contextlib
import csv
import decimal
import fractions
import hashlib
import io
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from brorl import rewards
from brorl.kinds import PROMPT_SEPARATOR
from brorl.kinds.base import Kind, binarize, gold_text, safe, with_eval_retry

RG_CATEGORIES = ("algebra", "algorithmic", "arc", "arithmetic", "code", "cognition", "games", "geometry",
                 "graphs", "induction", "logic")
"""The 11 Reasoning Gym categories of BroRL Table 5 / ProRL v1."""

RG_INSTRUCTION = (
    "Given a problem, your task is to answer the question by thinking step-by-step in a clear and specific "
    "manner.\nOnce you have thought about the reasoning process, provide the answer in the following format:\n"
    "<answer>answer here</answer>\nDo not explain your reasoning inside the answer tags, provide only the final "
    "answer. When an example is provided, you should strictly follow the format of the output/answer in that "
    "example.")
"""reasoning-gym 0.1.25's ``SYSTEM_PROMPTS["default"]`` (one trailing newline dropped), used as part of the user
message [our choice of wording; ProRL: answers in <answer></answer> tags]."""

RG_SAMPLES_PER_TASK = 100
RG_SEED = 1_000_000_000
"""Item i of every task is generated from seed ``RG_SEED + i`` (reasoning-gym's per-item seeding); training
generators must stay clear of [RG_SEED, RG_SEED + samples_per_task)."""


BAND = (1 / 64, 1 / 2)
"""The pass-rate band whose tasks ``rg_difficulty.pick`` keeps (BroRL's: neither solved nor hopeless)."""


def pick(rows: Sequence[dict], low: float = BAND[0], high: float = BAND[1]) -> list[dict]:
    """Per task: mean pass rate, share of prompts strictly between 0 and 1, in band or not."""
    out = []
    for task in dict.fromkeys(r["task"] for r in rows):
        mine = [r for r in rows if r["task"] == task]
        rates = [r["passes"] / r["k"] for r in mine]
        mean = sum(rates) / len(rates)
        mixed = sum(0 < x < 1 for x in rates) / len(rates)
        out.append({"task": task, "prompts": len(mine), "mean_pass_rate": round(mean, 4),
                    "mixed_share": round(mixed, 3),
                    "truncated_share": round(sum(r["truncated"] for r in mine) / sum(r["k"] for r in mine), 3),
                    "picked": low <= mean <= high and mixed > 0})
    return out


def picked_tasks(path: str | Path) -> list[str]:
    """The tasks the rule picked (``picked`` true in its tasks table), in the table's order; none picked is an error
    naming the table, so no arm trains on tasks outside the band."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    tasks = [r["task"] for r in rows if r.get("picked") == "True"]
    if not tasks:
        measured = ", ".join(f"{r['task']} {float(r['mean_pass_rate']):.3f}" for r in rows) or "no rows"
        raise ValueError(f"{path}: no task in BroRL's band (rg_difficulty.band) was picked ({measured}); change "
                         "rg_difficulty.tasks or task_configs")
    return tasks


def apply_picked(section: dict, tasks: Sequence[str], tasks_key: str, configs_key: str) -> dict:
    """A copy of a config section (rl.data or evaluation.reasoning_gym) whose Reasoning Gym task list is the picked
    ``tasks`` and whose task configs are those of the picked tasks only."""
    out = dict(section)
    out[tasks_key] = list(tasks)
    if out.get(configs_key):
        out[configs_key] = {t: c for t, c in out[configs_key].items() if t in tasks}
    return out


def reasoning_gym_version() -> str | None:
    """The installed reasoning-gym's version (None when it is not installed)."""
    try:
        return importlib_metadata.version("reasoning-gym")
    except importlib_metadata.PackageNotFoundError:
        return None


def reasoning_gym_tasks(categories: Sequence[str] = RG_CATEGORIES) -> dict[str, str]:
    """``{task: category}`` for every registered reasoning-gym dataset whose module lies in ``categories``
    (the category is the subpackage: ``reasoning_gym.<category>.<module>``)."""
    import reasoning_gym  # noqa: F401 -- registers the datasets
    from reasoning_gym.factory import DATASETS

    out = {}
    for name, (cls, _config) in sorted(DATASETS.items()):
        parts = cls.__module__.split(".")
        if len(parts) > 1 and parts[0] == "reasoning_gym" and parts[1] in categories:
            out[name] = parts[1]
    return out


def missing_rg_categories(categories: Sequence[str] = RG_CATEGORIES) -> list[str]:
    """Categories with no reasoning-gym dataset in the installed version (none in 0.1.25)."""
    present = set(reasoning_gym_tasks(categories).values())
    return [c for c in categories if c not in present]


def _json_default(o):
    if isinstance(o, (set, frozenset)):
        return sorted(o, key=repr)
    if isinstance(o, (fractions.Fraction, decimal.Decimal)):
        return str(o)
    if hasattr(o, "tolist"):  # numpy arrays and scalars
        return o.tolist()
    return str(o)


def _seed_numpy(seed: int, task: str) -> None:
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        return
    np.random.seed(int.from_bytes(hashlib.sha256(f"brorl-rg:{seed}:{task}".encode()).digest()[:4], "little"))


def _generate_rg(params: Mapping) -> tuple[list[dict], dict]:
    """Generate the records (run in the child process, see :func:`generate_reasoning_gym`)."""
    import reasoning_gym

    version = reasoning_gym_version()
    seed, n = int(params["seed"]), int(params["samples_per_task"])
    task_cats = reasoning_gym_tasks(params["categories"])
    tasks = params.get("tasks") or sorted(task_cats)
    unknown = [t for t in tasks if t not in task_cats]
    if unknown:
        raise ValueError(f"not reasoning-gym tasks of the categories {list(params['categories'])}: {unknown}")
    configs = params.get("task_configs") or {}  # task -> its dataset config keys (default: reasoning-gym's)
    records, no_gold, mismatch, below_one = [], [], [], []
    for task in tasks:
        # Some generators draw from the global RNGs (list_functions calls random.randint; codeio runs code
        # snippets that may): seed them per task, so a task's items do not depend on what ran before.
        random.seed(f"brorl-rg:{seed}:{task}")
        _seed_numpy(seed, task)
        with contextlib.redirect_stdout(io.StringIO()):  # a few generators print
            ds = reasoning_gym.create_dataset(task, seed=seed, size=n, **configs.get(task, {}))
            items = [ds[i] for i in range(n)]
        score = reasoning_gym.get_score_answer_fn(task)  # what brorl.rewards scores with
        for i, item in enumerate(items):
            entry = json.dumps(item, default=_json_default, ensure_ascii=True)
            answer = item.get("answer")
            if answer is None:
                no_gold.append(task)
            else:
                with contextlib.redirect_stdout(io.StringIO()):
                    try:
                        s_orig = float(score(answer, item))
                        s_json = float(score(answer, rewards.parse_reasoning_gym_entry(entry)))
                    except Exception as e:  # noqa: BLE001
                        s_orig, s_json = float("nan"), repr(e)
                if s_json != s_orig:
                    mismatch.append(task)
                if not s_orig >= 1.0:
                    below_one.append(task)
            question = str(item["question"])
            records.append({
                "id": f"{task}-{i:03d}", "benchmark": "reasoning_gym", "category": task_cats[task], "task": task,
                "prompt": question + PROMPT_SEPARATOR + RG_INSTRUCTION, "problem": question,
                "answer": "" if answer is None else str(answer), "entry": entry,
                "source": f"reasoning-gym=={version} {task} seed={seed} index={i}"
                          + (f" config={json.dumps(configs[task], sort_keys=True)}" if task in configs else "")})
    report = {"reasoning_gym": version, "n_tasks": len(tasks),
              "categories": {c: sum(1 for t in tasks if task_cats[t] == c) for c in params["categories"]},
              "tasks_without_gold": sorted(set(no_gold)), "gold_changes_through_json": sorted(set(mismatch)),
              "gold_below_one": sorted(set(below_one))}
    return records, report


def generate_reasoning_gym(*, seed: int = RG_SEED, samples_per_task: int = RG_SAMPLES_PER_TASK,
                           tasks: Sequence[str] | None = None, categories: Sequence[str] = RG_CATEGORIES,
                           timeout: float | None = 3600,
                           task_configs: Mapping[str, Mapping] | None = None) -> tuple[list[dict], dict]:
    """The Reasoning Gym records and a generation report, made in a child process with ``PYTHONHASHSEED=0``
    (offline: reasoning-gym ships its data). ``tasks`` None: every task of ``categories``. ``task_configs``: task ->
    its reasoning-gym dataset config keys (a difficulty, e.g. ``{"max_terms": 2}``); default: reasoning-gym's."""
    if int(samples_per_task) < 1:
        raise ValueError(f"samples_per_task must be >= 1, got {samples_per_task}")
    params = {"seed": int(seed), "samples_per_task": int(samples_per_task),
              "tasks": None if tasks is None else list(tasks), "categories": list(categories)}
    if task_configs:  # only when given: the parameters (and the records) of existing runs stay as they were
        params["task_configs"] = {t: dict(c) for t, c in task_configs.items()}
    src_root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONHASHSEED": "0",
           "PYTHONPATH": os.pathsep.join(p for p in (src_root, os.environ.get("PYTHONPATH")) if p)}
    with tempfile.TemporaryDirectory(prefix="brorl-rg-") as tmp:
        params_path, out_path = Path(tmp) / "params.json", Path(tmp) / "out.json"
        params_path.write_text(json.dumps(params))
        proc = subprocess.run([sys.executable, "-m", "brorl.kinds.reasoning_gym", "--generate-reasoning-gym",
                               str(params_path), str(out_path)], env=env, capture_output=True, text=True,
                              timeout=timeout, cwd=tmp)  # some generators write files (planet.com) into the cwd
        if proc.returncode != 0 or not out_path.is_file():
            raise RuntimeError(f"reasoning-gym generation failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        out = json.loads(out_path.read_text())
    return out["records"], out["report"]


def generation_request(*, seed: int = RG_SEED, samples_per_task: int = RG_SAMPLES_PER_TASK,
                       tasks: Sequence[str] | None = None, task_configs: Mapping[str, Mapping] | None = None) -> dict:
    """What a generated file is made from (part of its cache request)."""
    rg = {"seed": int(seed), "samples_per_task": int(samples_per_task),
          "tasks": None if tasks is None else sorted(tasks), "categories": list(RG_CATEGORIES),
          "reasoning_gym": reasoning_gym_version()}
    if task_configs:  # only when given: existing requests (and their cached files) stay valid
        rg["task_configs"] = {t: dict(c) for t, c in sorted(task_configs.items())}
    return rg


def generate(request: Mapping, *, tasks: Sequence[str] | None = None,
             task_configs: Mapping[str, Mapping] | None = None) -> tuple[list[dict], dict]:
    """The records of a generation request (:func:`generation_request`) and its report (``missing_categories``
    when every task was asked and a category has none; a warning when a gold answer scores differently after a
    JSON round trip). ``tasks`` / ``task_configs``: as given to the request (the request sorts them)."""
    records, report = generate_reasoning_gym(seed=request["seed"], samples_per_task=request["samples_per_task"],
                                             tasks=tasks, task_configs=task_configs)
    missing = [c for c, n in report["categories"].items() if n == 0]
    if tasks is None and missing:
        report["missing_categories"] = missing
    if report["gold_changes_through_json"]:
        logging.getLogger(__name__).warning("reasoning_gym: the gold answer of %s scores differently after a JSON "
                                            "round trip", report["gold_changes_through_json"])
    return records, report


def passed_reward(doc, completions) -> list[float]:
    """[0, 1] per completion: :func:`brorl.rewards.reasoning_gym_reward` (the task's own verifier on the text
    inside the last ``<answer>...</answer>``)."""
    completions = list(completions)
    try:  # parsed once for all k completions
        entry = rewards.parse_reasoning_gym_entry(doc.get("entry")) if isinstance(doc, dict) else None
    except ValueError:  # not JSON
        entry = None
    if entry is None or not completions:
        return [0.0] * len(completions)
    return with_eval_retry(rewards.get_default_pool().reasoning_gym_rewards, completions,
                           [entry] * len(completions), "reasoning_gym")


def judge(doc, completions) -> tuple[list[int], dict]:
    scores = safe(passed_reward, doc, completions)
    return binarize(scores), {"mean_reward": float(np.mean(scores)) if scores else 0.0}


def reward(records, completions) -> tuple[list[float], list[bool]]:
    """The verifier's score per (record, completion) in one call of the reward pool, and whether each timed out."""
    flags: list[bool] = []
    scores = rewards.get_default_pool().reasoning_gym_rewards(list(completions), [r.get("entry") for r in records],
                                                              timeouts=flags)
    return scores, flags


KIND = Kind(
    name="reasoning_gym", description="paper profile, Reasoning Gym: each task's verifier, 11 categories",
    instruction=RG_INSTRUCTION, score=passed_reward, judge=judge, generate=generate,
    generation_request=generation_request, rewards=reward, extra_metrics=(("mean_reward", "mean"),),
    category_field="category", training_renames={"task": "rg_task"}, code=(rewards, gold_text))


def _main(argv: Sequence[str]) -> int:
    if len(argv) == 3 and argv[0] == "--generate-reasoning-gym":
        params = json.loads(Path(argv[1]).read_text())
        records, report = _generate_rg(params)
        Path(argv[2]).write_text(json.dumps({"records": records, "report": report}))
        return 0
    print("usage: python -m brorl.kinds.reasoning_gym --generate-reasoning-gym PARAMS.json OUT.json",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))


__all__ = [
    "generate_reasoning_gym", "reasoning_gym_tasks", "missing_rg_categories", "reasoning_gym_version",
    "RG_CATEGORIES", "RG_INSTRUCTION", "RG_SAMPLES_PER_TASK", "RG_SEED", "KIND", "pick", "picked_tasks", "apply_picked",
]
