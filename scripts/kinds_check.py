"""Same numbers across a move of the benchmark / training-data kinds (issue 33 step 3): one JSON digest of what
the kinds produce, to compare before and after a change.

It converts the stand-in hub fixtures the tests use (``tests/test_paper_benchmarks.py``'s ``make_hub`` and
``code_hub``, ``tests/test_train_data.py``'s ``hub``, and ``tests/data/rehearsal/hub/``), generates a few Reasoning
Gym tasks, scores fixed completions with every registered benchmark's scorer and with the training reward, and
renders every benchmark's lm-eval task. The digest holds the sha256 of every converted JSONL (benchmarks, training
splits, ``train_data.json`` without its paths), the cache request of each benchmark, every score, every lm-eval
task name and the tiny benchmarks' task hash inputs (the paper benchmarks' are listed too: their hook file is
expected to change).

    PYTHONPATH=src python scripts/kinds_check.py OUT.json      # then diff two digests (before / after)

Only the registry's and the converters' public calls are used (``get_benchmark``, ``prepare_benchmark``,
``prepare_train_data``, ``paper_rewards``), which a move must keep. No network.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def completions_for(record: dict) -> list[str]:
    """Fixed completions: the gold answer boxed / tagged / fenced, a wrong one, garbage."""
    gold = str(record.get("answer", ""))
    out = [f"<think>\nok\n</think>\nThe answer is \\boxed{{{gold}}}.", "\\boxed{-987654}", "", "</think> no idea",
           f"<answer>{gold}</answer>", "Answer: C", "\\boxed{A}"]
    if record.get("answers"):  # a tiny task: its first answer, then a wrong one
        out += [str(record["answers"][0]), str(record["answers"][0]) + "9"]
    if record.get("tests"):
        out += ["```python\na, b = map(int, input().split())\nprint(a + b)\n```",
                "```python\ndef add(a, b):\n    return a + b\nclass Solution:\n    def add(self, a, b):\n"
                "        return a + b\n```", "```python\nprint(0)\n```"]
    return out


def score_all(bench_name: str, records: list[dict]) -> list:
    from brorl.evaluation.benchmarks import get_benchmark

    bench = get_benchmark(bench_name)
    out = []
    for r in records:
        try:
            out.append([round(float(x), 12) for x in bench.score(r, completions_for(r))])
        except Exception as err:  # noqa: BLE001 -- e.g. IFEval without its dependencies: the message is the value
            out.append(f"error: {type(err).__name__}: {str(err)[:120]}")
    return out


def main(out_path: str) -> int:
    import test_paper_benchmarks as tpb
    import test_train_data as ttd

    from brorl.data import benchmarks as db
    from brorl.data import catalog
    from brorl.data import training as paper_data
    from brorl.evaluation import runner
    from brorl.evaluation.benchmarks import benchmark_names, get_benchmark

    digest: dict = {"benchmarks": {}, "scores": {}, "train": {}, "tasks": {}}
    with tempfile.TemporaryDirectory(prefix="kinds-check-") as tmp:
        tmp = Path(tmp)
        hub = tpb.make_hub(tmp / "hub")
        tpb.code_hub(tmp / "code-hub")
        data = tmp / "data"
        prepared = {}
        for name in catalog.BENCHMARK_NAMES:
            kwargs = {"samples_per_task": 2, "tasks": ["basic_arithmetic", "leg_counting", "word_ladder",
                                                      "isomorphic_strings", "list_functions"]} \
                if catalog.PAPER_BENCHMARKS[name].generated else {}
            prepared[name] = db.prepare_benchmark(name, hub, data / name / "test.jsonl", **kwargs)
        for name in catalog.CODE_BENCHMARK_NAMES:
            try:
                prepared[name] = db.prepare_benchmark(name, tmp / "code-hub", data / name / "test.jsonl")
            except Exception as err:  # noqa: BLE001 -- codeforces / codecontests have no rows in the stand-in
                digest["benchmarks"][name] = f"error: {type(err).__name__}: {str(err)[:160]}"
        rehearsal = ROOT / "tests" / "data" / "rehearsal" / "hub"
        prepared["rehearsal_math500"] = db.prepare_benchmark("math500", rehearsal, tmp / "reh" / "math500" / "test.jsonl")
        for name, info in prepared.items():
            meta = json.loads(Path(info["meta"]).read_text())
            digest["benchmarks"][name] = {"sha256": info["sha256"], "n_records": info["n_records"],
                                          "request_sha256": sha(json.dumps(meta["request"], sort_keys=True).encode()),
                                          "report": meta["report"]}
            bench = name if name != "rehearsal_math500" else "math500"
            digest["scores"][name] = score_all(bench, db.read_records(info["dest"]))

        # training data: the train-data test's stand-ins and the rehearsal hub's DeepScaleR
        for label, source, settings in (
                ("tests", ttd.hub(tmp / "train-hub"), dict(ttd.SETTINGS)),
                ("rehearsal", rehearsal, {"sources": ["deepscaler"], "validation_per_source": 1})):
            out = tmp / f"rl-{label}"
            marker = paper_data.prepare_train_data(out, settings, source=source, cache_dir=tmp / f"rl-cache-{label}")
            files = {p.relative_to(out).as_posix(): sha(p.read_bytes()) for p in sorted(out.rglob("*.jsonl"))}
            for info in marker["sources"].values():
                info.pop("raw", None)
            digest["train"][label] = {"files": files, "marker_sha256": sha(json.dumps(marker, sort_keys=True).encode())}
            records = [json.loads(line) for p in sorted(out.rglob("*.jsonl")) for line in p.read_text().splitlines()]
            rewards = []
            for r in records:
                comps = completions_for(r)
                try:
                    rewards.append([round(float(x), 12) for x in paper_data.paper_rewards([r] * len(comps), comps)])
                except Exception as err:  # noqa: BLE001
                    rewards.append(f"error: {type(err).__name__}: {str(err)[:120]}")
            digest["train"][label]["rewards"] = rewards

        # lm-eval tasks: every registered benchmark's task name; the rendered folder's files (name -> sha256)
        for name in benchmark_names():
            bench = get_benchmark(name)
            entry = {"lm_eval_task": bench.lm_eval_task, "category_field": bench.category_field,
                     "description": bench.description, "default_k": bench.default_k,
                     "default_temperature": bench.default_temperature, "source": bench.source}
            if name in prepared:
                task_dir = bench.render(data, tmp / "tasks" / name, k=4, temperature=0.6)
                inputs = runner.task_hash_inputs(bench, task_dir, data, {"k": 4})
                entry["task_hash"] = runner._json_hash(inputs)
                entry["files"] = inputs["task_files"]
                entry["scorer"] = inputs["scorer"]
            digest["tasks"][name] = entry
        # the tiny benchmarks' task hash on a written tiny data folder
        from brorl import tasks as tiny_tasks

        tiny_data = tmp / "tiny-data"
        tiny_tasks.write_splits(tiny_data, tiny_tasks.TaskSettings())
        for name in benchmark_names():
            bench = get_benchmark(name)
            if bench.source == "tasks":
                task_dir = bench.render(tiny_data, tmp / "tiny-tasks" / name, k=4, temperature=1.0)
                inputs = runner.task_hash_inputs(bench, task_dir, tiny_data, {"k": 4})
                digest["tasks"][name]["task_hash"] = runner._json_hash(inputs)
                digest["tasks"][name]["files"] = inputs["task_files"]
                digest["tasks"][name]["scorer"] = inputs["scorer"]
                recs = [json.loads(x) for x in (tiny_data / name.removeprefix("tiny_") / "test.jsonl")
                        .read_text().splitlines()[:20]]
                digest["scores"][name] = score_all(name, recs)
    Path(out_path).write_text(json.dumps(digest, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
