"""merge_duplicates off vs on for the tiny arms, from one ProRL checkpoint (issue 31, item 3).

Runs each arm (``brorl train-arm``, one thread, the tiny profile's settings from config/config.yaml) twice, with
``rl.arms.settings.merge_duplicates`` false and true, evaluates both checkpoints (``brorl evaluate``, as the
pipeline does), and writes the CPU seconds of every job (its children's user + system time, from
``resource.getrusage``; not wall time, the machine is shared), the 1-minute load average at its start and end,
and where the two runs' logged and evaluation numbers differ:

    python benchmarks/merge_ab.py --init resources/tiny/models/prorl --data results/tiny/data \\
        --work resources/work/merge_ab --arms n16 n64 n256 n512 --seed 0 --out docs/results/timing/merge_ab.json

Everything it writes except ``--out`` goes under ``--work``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import resource
import subprocess
import time
from pathlib import Path

import yaml


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def run(cmd: list[str], log: Path) -> dict:
    """Run one job at one thread; its CPU seconds (children's user + system) and the load around it."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    l0, t0 = load1(), time.perf_counter()
    with open(log, "w") as f:
        subprocess.run(cmd, check=True, stdout=f, stderr=subprocess.STDOUT,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2),
            "wall_s": round(time.perf_counter() - t0, 1), "load1_start": l0, "load1_end": load1()}


def arm_config(cfg: dict, arm: str, merge: bool) -> dict:
    """The train_arm rule's --config for one arm (stage_config in workflow/rules/common.smk), merge set."""
    rl = cfg["rl"]
    batch = next(b for b in rl["arms"]["batches"] if f"n{b['n_rollouts']}" == arm)
    arms = {k: v for k, v in rl["arms"].items() if k not in ("seeds", "batches", "schedule")}
    return {"arms": {**arms, "batches": [batch], "schedule": [],
                     "settings": {**rl["arms"].get("settings", {}), "merge_duplicates": merge}},
            "recipe": rl["recipe"]}


def _num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None  # empty (probe columns between probes) or a name (arm)


def read_metrics(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return [{k: _num(v) for k, v in row.items()} for row in csv.DictReader(f)]


def numbers(x, prefix=""):
    """Flatten a JSON document to {dotted key: float} for its numeric leaves."""
    if isinstance(x, dict):
        return {k: v for key, val in x.items() for k, v in numbers(val, f"{prefix}{key}.").items()}
    if isinstance(x, list):
        return {k: v for i, val in enumerate(x) for k, v in numbers(val, f"{prefix}{i}.").items()}
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return {prefix.rstrip("."): float(x)}
    return {}


def diff(a: dict, b: dict) -> dict:
    """Largest |a - b| per key present in both (NaN-safe), keys whose values differ only."""
    out = {}
    for k in sorted(set(a) & set(b)):
        x, y = a[k], b[k]
        if x is None or y is None or (isinstance(x, float) and math.isnan(x) and math.isnan(y)):
            continue
        if x != y:
            out[k] = {"off": x, "on": y, "abs_diff": abs(x - y)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--init", required=True, help="the ProRL stage's model folder")
    p.add_argument("--data", required=True, help="the tiny tasks' folder")
    p.add_argument("--work", required=True)
    p.add_argument("--arms", nargs="+", default=["n16", "n64", "n256", "n512"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    cfg = yaml.safe_load(Path(a.config).read_text())
    ev = {k: v for k, v in cfg["evaluation"].items() if k not in ("benchmarks", "models", "revisions")}
    work = Path(a.work)
    report = {"config": a.config, "init": a.init, "seed": a.seed, "cpu": os.cpu_count(), "arms": {}}
    for arm in a.arms:
        res = {}
        for merge in (False, True):
            tag = f"{arm}-seed{a.seed}-{'on' if merge else 'off'}"
            d = work / tag
            d.mkdir(parents=True, exist_ok=True)
            model, results = d / "model", d / "train"
            if (d / "cost.json").exists():  # measured before: analyse only
                res["on" if merge else "off"] = json.loads((d / "cost.json").read_text())
                continue
            train = run(["brorl", "train-arm", "--rule", "train_arm", "--config",
                         json.dumps(arm_config(cfg, arm, merge)), "--wildcard", f"arm={arm}",
                         "--wildcard", f"seed={a.seed}", "--arm", arm, "--seed", str(a.seed), "--init", a.init,
                         "--data", a.data, "--work", str(d / "work"), "--model-out", str(model),
                         "--results", str(results)], d / "train.log")
            bench = [x for b in cfg["evaluation"]["benchmarks"]
                     for x in ("--benchmark", b, a.data, str(d / "eval" / f"{b}.json"))]
            evaluate = run(["brorl", "evaluate", "--rule", "evaluate", "--config", json.dumps(ev),
                            "--wildcard", f"model={tag}", "--model", str(model), *bench,
                            "--cache", str(d / "eval-cache")], d / "eval.log")
            res["on" if merge else "off"] = {"train": train, "evaluate": evaluate, "dir": str(d)}
            (d / "cost.json").write_text(json.dumps(res["on" if merge else "off"]))
            print(tag, "train", train, "evaluate", evaluate, flush=True)
        off, on = (Path(res[k]["dir"]) for k in ("off", "on"))
        m_off, m_on = read_metrics(off / "train/metrics.csv"), read_metrics(on / "train/metrics.csv")
        per_column: dict[str, float] = {}
        for r0, r1 in zip(m_off, m_on):
            for k, v in diff(r0, r1).items():
                per_column[k] = max(per_column.get(k, 0.0), v["abs_diff"])
        first_step = {k: min((int(r0["step"]) for r0, r1 in zip(m_off, m_on) if k in diff(r0, r1)), default=None)
                      for k in per_column}
        evals = {}
        for b in cfg["evaluation"]["benchmarks"]:
            e0 = numbers(json.loads((off / "eval" / f"{b}.json").read_text()))
            e1 = numbers(json.loads((on / "eval" / f"{b}.json").read_text()))
            evals[b] = diff(e0, e1)
        s0 = json.loads((off / "train/summary.json").read_text())
        s1 = json.loads((on / "train/summary.json").read_text())
        res.update(steps=[len(m_off), len(m_on)], metrics_max_abs_diff=per_column, metrics_first_step=first_step,
                   final_row={"off": m_off[-1], "on": m_on[-1]}, summary_diff=diff(numbers(s0), numbers(s1)),
                   eval_diff=evals)
        report["arms"][arm] = res
        Path(a.out).write_text(json.dumps(report, indent=1))
    print("wrote", a.out)


if __name__ == "__main__":
    main()
