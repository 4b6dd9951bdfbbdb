"""The paper profile's RL training data (brorl.data.training): pinned fetch from local stand-ins of the
hub, Reasoning Gym generation, splits the stage reads, and the reward the stage trains on. No network."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from brorl.data.hub import write_local_snapshot
from brorl.kinds.base import usable_gold
from brorl.tasks.core import read_split
from brorl.data import catalog
from brorl.data import training as paper_data

COMMIT = "3" * 40
SUM_TESTS = {"inputs": ["1 2\n", "2 2\n", "5 7\n"], "outputs": ["3\n", "4\n", "12\n"]}
RG_TASKS = ["basic_arithmetic", "leg_counting"]
MATH = [("What is $1 + 1$?", "2"), ("Simplify $\\frac{2}{4}$.", "\\frac{1}{2}"), ("What is $3 \\cdot 3$?", "9"),
        ("What is $10 - 4$?", "6"), ("What is $2^5$?", "32")]


def _parquet(rows: list[dict]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    return buf.getvalue()


def _prime_row(i: int, ability: str, ground_truth: str) -> dict:
    return {"data_source": "apps" if ability == "code" else "numina_olympiads", "ability": ability,
            "prompt": [{"role": "system", "content": "PRIME's action prompt"},
                       {"role": "user", "content": f"Problem {i}: read two integers and print their sum."}],
            "reward_model": {"style": "rule", "ground_truth": ground_truth}, "extra_info": {"index": i}}


# DeepScaleR has rows with an empty gold answer (its discussion #4: 6 samples; upstream math.json has ''), so the
# stand-in has them too: '' and a blank one among the usable rows, a null one, and non-finite numbers (a source
# read through pandas writes NaN for a missing value).
NO_GOLD = [("Find the value of $x$.", ""), ("Compute the sum.", "  "), ("What is the answer?", None),
           ("What is the limit?", float("nan")), ("How far is it?", float("inf"))]


def hub(root: Path) -> Path:
    math = MATH[:2] + NO_GOLD[:2] + MATH[2:] + NO_GOLD[2:]
    write_local_snapshot(root, "agentica-org/DeepScaleR-Preview-Dataset", "main", COMMIT,
                         {"deepscaler.json": json.dumps([{"problem": p, "answer": a, "solution": "..."}
                                                         for p, a in math]).encode(),
                          "README.md": b"stand-in\n"}, repo_type="dataset")
    # a maths row between the code rows: the code rows keep their row numbers in the file (ids train-<row>)
    rows = ([_prime_row(i, "code", json.dumps(SUM_TESTS)) for i in range(2)] + [_prime_row(9, "math", "2")]
            + [_prime_row(i, "code", json.dumps(SUM_TESTS)) for i in range(2, 4)])
    write_local_snapshot(root, "PRIME-RL/Eurus-2-RL-Data", "main", COMMIT,
                         {"train.parquet": _parquet(rows), "validation.parquet": b"not fetched"},
                         repo_type="dataset")
    return root


SETTINGS = {"validation_per_source": 1, "reasoning_gym_samples_per_task": 3, "reasoning_gym_tasks": RG_TASKS}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("train-data")
    source = hub(root / "hub")
    said = []
    marker = paper_data.prepare_train_data(root / "data", SETTINGS, source=source, cache_dir=root / "cache",
                                           log_fn=said.append)
    return {"root": root, "data": root / "data", "marker": marker, "source": source, "log": said}


def test_splits_in_the_layout_the_stage_reads(prepared):
    data, marker = prepared["data"], prepared["marker"]
    assert (data / paper_data.MARKER).is_file()
    assert sorted(marker["sources"]) == ["deepscaler", "eurus2_code", "reasoning_gym"]
    counts = {k: (v["n_train"], v["n_validation"]) for k, v in marker["sources"].items()}
    # 5 math problems, 4 code rows (the maths row of the code file is not ability=code), 2 RG tasks x 3 items
    assert counts == {"deepscaler": (4, 1), "eurus2_code": (3, 1), "reasoning_gym": (5, 1)}
    assert marker["sources"]["deepscaler"]["commit"] == COMMIT and "scp116k" in marker["left_out"]
    # the rows without a usable gold answer are skipped and counted per source (train_data.json)
    assert marker["sources"]["deepscaler"]["skipped"] == {"no_gold": 5, "no_tests": 0}
    assert marker["sources"]["eurus2_code"]["skipped"] == {"no_gold": 0, "no_tests": 0}
    assert marker["sources"]["reasoning_gym"]["skipped"] == {}
    on_disk = json.loads((data / paper_data.MARKER).read_text())
    assert on_disk["sources"]["deepscaler"]["skipped"]["no_gold"] == 5
    assert any("deepscaler: 4 train / 1 validation (math reward), 5 rows skipped (no gold)" in m
               for m in prepared["log"])
    train, validation = read_split(data, "train"), read_split(data, "validation")
    assert len(train) == 12 and len(validation) == 3
    ids = {r["id"] for r in train}
    assert not ids & {r["id"] for r in validation}
    for r in train + validation:
        assert r["task"] in catalog.TRAIN_SOURCES and r["reward"] in paper_data.REWARD_KINDS
        assert r["prompt"] and "benchmark" not in r
    math = [r for r in train if r["task"] == "deepscaler"]
    assert all(r["prompt"].endswith("\\boxed{}.") and r["answer"] for r in math)
    code = [r for r in train if r["task"] == "eurus2_code"]
    assert all(json.loads(r["tests"]) == SUM_TESTS and "```python" in r["prompt"] for r in code)
    every_code = code + [r for r in validation if r["task"] == "eurus2_code"]
    assert sorted(r["id"] for r in every_code) == ["train-0", "train-1", "train-3", "train-4"]
    assert all(r["source"].endswith(f"train.parquet#{r['id'][6:]}") for r in every_code)
    rg = [r for r in train if r["task"] == "reasoning_gym"]
    assert {r["rg_task"] for r in rg} <= set(RG_TASKS) and all(r["entry"] for r in rg)


def test_rerun_verifies_and_splits_are_stable(prepared):
    root = prepared["root"]
    before = (prepared["data"] / "deepscaler" / "train.jsonl").read_bytes()
    again = paper_data.prepare_train_data(root / "data2", SETTINGS, source=prepared["source"],
                                          cache_dir=root / "cache")
    assert (root / "data2" / "deepscaler" / "train.jsonl").read_bytes() == before
    assert again["sources"]["deepscaler"]["raw_sha256"] == prepared["marker"]["sources"]["deepscaler"]["raw_sha256"]


def test_evaluation_problems_are_removed_from_training(prepared, tmp_path):
    """rl.data.dedup_against: problems of the evaluation file (one math problem written twice, differently spaced and
    cased; one Reasoning Gym item) are dropped from every source before the split and counted; none is left."""
    train = read_split(prepared["data"], "train") + read_split(prepared["data"], "validation")
    rg = next(r for r in train if r["task"] == "reasoning_gym")
    held = tmp_path / "reasoning_gym" / "test.jsonl"
    held.parent.mkdir()
    rows = [{"id": "e0", "problem": "  what is   $1 + 1$?", "answer": "2"}, {"id": "e1", "problem": rg["problem"], "answer": "x"}]
    held.write_text("".join(json.dumps(r) + "\n" for r in rows))
    settings = {**SETTINGS, "dedup_against": ["reasoning_gym"]}
    marker = paper_data.prepare_train_data(tmp_path / "data", settings, source=prepared["source"],
                                           cache_dir=prepared["root"] / "cache", exclude=[held])
    removed = {k: v["n_removed_in_evaluation"] for k, v in marker["sources"].items()}
    same_rg = sum(1 for r in train if r["task"] == "reasoning_gym" and paper_data.problem_key(r) == paper_data.problem_key(rg))
    assert removed == {"deepscaler": 1, "eurus2_code": 0, "reasoning_gym": same_rg}
    after = read_split(tmp_path / "data", "train") + read_split(tmp_path / "data", "validation")
    keys = {paper_data.problem_key(r) for r in rows}
    assert len(after) == len(train) - 1 - same_rg and not any(paper_data.problem_key(r) in keys for r in after)
    assert marker["dedup_against"] == {"reasoning_gym": str(held)}
    with pytest.raises(ValueError, match="dedup_against names"):  # the file list must match the declared benchmarks
        paper_data.prepare_train_data(tmp_path / "data3", settings, source=prepared["source"],
                                      cache_dir=prepared["root"] / "cache")


def test_settings_are_validated():
    with pytest.raises(ValueError, match="dedup_against: unknown benchmarks"):
        paper_data.TrainDataSettings.from_dict({"dedup_against": ["aime2099"]})
    with pytest.raises(ValueError, match="scp116k"):
        paper_data.TrainDataSettings.from_dict({"sources": ["scp116k"]})
    with pytest.raises(ValueError, match="unknown rl.data keys"):
        paper_data.TrainDataSettings.from_dict({"validation": 3})
    with pytest.raises(ValueError, match="not hub sources"):
        paper_data.TrainDataSettings.from_dict({"revisions": {"reasoning_gym": "abc"}})


def test_benchmarks_still_fail_on_an_empty_gold_answer(prepared, tmp_path):
    """Only training sources skip unusable rows: the same file read as a benchmark stops, naming the row."""
    from dataclasses import replace

    from brorl.data import benchmarks as bench_data

    spec = replace(catalog.TRAIN_SOURCES["deepscaler"], skip_unusable_gold=False)
    with pytest.raises(bench_data.BenchmarkDataError, match=r"deepscaler deepscaler\.json#2: empty answer"):
        bench_data.prepare_benchmark("deepscaler", prepared["source"], tmp_path / "bench" / "test.jsonl", spec=spec)


def test_benchmarks_refuse_a_non_finite_or_missing_gold_answer():
    """A benchmark row whose gold answer is NaN, infinite or null stops the conversion, naming the row (a NaN used
    to become the gold answer "nan")."""
    from dataclasses import replace

    from brorl.data import benchmarks as bench_data

    spec = replace(catalog.TRAIN_SOURCES["deepscaler"], skip_unusable_gold=False)
    for value in (float("nan"), float("inf"), None, [1, float("nan")]):
        with pytest.raises(bench_data.BenchmarkDataError, match=r"deepscaler f\.json#4: (unusable|empty) answer"):
            bench_data.convert_rows(spec, [("f.json", 4, {"problem": "p", "answer": value})], COMMIT)


# --------------------------------------------------------------------------------------------------------------
# Readers: a bad row names its file and line (issue 30, item 4)
# --------------------------------------------------------------------------------------------------------------

BAD_ROWS = [
    ("{oops", r":2: not JSON: Expecting property name"),
    ("[1, 2, 3]", r":2: a row must be a JSON object, not list"),
    ('"text"', r":2: a row must be a JSON object, not str"),
    ('{"id": "b", "answer": NaN}', r":2: NaN is not JSON"),
    ('{"id": "b", "answer": Infinity}', r":2: Infinity is not JSON"),
    ('{"id": "b", "answer": null}', r":2: the record's 'answer' is null"),
    ('{"id": "b"}', r":2: the record has no 'answer'"),
    ('{"id": "b", "answer": {"x": 1}}', r":2: the record's 'answer' is a dict"),
]


@pytest.mark.parametrize("line, message", BAD_ROWS)
def test_record_readers_name_the_file_and_line(tmp_path, line, message):
    """Every reader of the files the pipeline writes (tasks, benchmarks, training data) refuses a bad row with the
    file and line; Python's json alone said "Expecting value: line 1 column 1 (char 0)" and accepted the rest."""
    from brorl.data import benchmarks as bench_data
    from brorl.data.jsonl import RecordError
    from brorl.tasks.core import read_jsonl

    path = tmp_path / "task" / "train.jsonl"
    path.parent.mkdir()
    path.write_text('{"id": "a", "answer": "3"}\n' + line + "\n\n")
    for reader in (read_jsonl, bench_data.read_records, lambda p: read_split(tmp_path, "train", ["task"])):
        with pytest.raises(RecordError, match=str(path).replace(".", r"\.") + message):
            reader(path)


def test_source_rows_must_be_objects(tmp_path):
    """A source's raw rows (JSON lines, a JSON list) must be objects; their values are the converter's business
    (NaN is read, and judged by usable_gold)."""
    from brorl.data import benchmarks as bench_data
    from brorl.data.jsonl import RecordError

    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"problem": "p", "answer": NaN}\n[1, 2, 3]\n')
    with pytest.raises(RecordError, match=r"rows\.jsonl:2: a row must be a JSON object, not list"):
        bench_data.read_table(rows)
    rows.write_text('{"problem": "p", "answer": NaN}\n')
    (row,) = bench_data.read_table(rows)
    assert row["answer"] != row["answer"] and not usable_gold(row["answer"])
    listed = tmp_path / "rows.json"
    listed.write_text('{"data": [{"problem": "p"}, 3]}')
    with pytest.raises(bench_data.BenchmarkDataError, match=r"rows\.json: row 1 is a int, not an object"):
        bench_data.read_table(listed)
    listed.write_text("{not json")
    with pytest.raises(bench_data.BenchmarkDataError, match=r"rows\.json: not JSON"):
        bench_data.read_table(listed)


def test_paper_rewards_refuse_a_math_record_without_gold():
    """A math record without a gold answer is a caller's mistake, not a 0.0 (it used to score 0 silently)."""
    record = {"id": "m1", "reward": "math", "task": "deepscaler"}
    for gold in (None, float("nan"), ""):
        with pytest.raises(ValueError, match="math record 'm1' has no usable gold answer"):
            paper_data.paper_rewards([{**record, "answer": gold}], ["\\boxed{0}"])


@pytest.mark.parametrize("batch_rows", [1, 2, 4096])
def test_parquet_rows_are_filtered_in_arrow_by_batch(tmp_path, batch_rows):
    """Eurus-2's train.parquet (1.7 GB) is filtered in Arrow, batch by batch, reading only the columns the spec
    names; the rows kept, their row numbers and their values are those of the whole-file read."""
    from brorl.data import benchmarks as bench_data

    rows = [_prime_row(i, ability, json.dumps(SUM_TESTS))
            for i, ability in enumerate(["code", "math", "Code", "math", "math", "code", None])]
    path = tmp_path / "train.parquet"
    path.write_bytes(_parquet(rows))
    spec = catalog.TRAIN_SOURCES["eurus2_code"]
    kept, n, seen = bench_data.select_rows(spec, path, batch_rows=batch_rows)
    assert n == 7 and [i for i, _ in kept] == [0, 2, 5]
    whole = [(i, {k: v for k, v in r.items() if k != "extra_info"}) for i, r in enumerate(rows)
             if i in (0, 2, 5)]
    assert kept == whole  # same values; extra_info (no spec field) is never read
    assert set(seen) == {"ability"} and set(seen["ability"]) == {"None", "code", "Code", "math"}
    other = tmp_path / "other.parquet"
    other.write_bytes(_parquet([{**r, "ability": "math"} for r in rows]))
    root = tmp_path / "hub"
    write_local_snapshot(root, spec.repo_id, "main", COMMIT, {"train.parquet": other.read_bytes()}, repo_type="dataset")
    with pytest.raises(bench_data.BenchmarkDataError, match=r"no row matches .*'ability': \['math'\]"):
        bench_data.prepare_benchmark("eurus2_code", root, tmp_path / "out" / "all.jsonl", spec=spec)


def _fenced(code: str) -> str:
    return f"<think>a plan</think>\n```python\n{code}\n```"


def test_paper_rewards_use_the_benchmark_scorers(prepared):
    train = read_split(prepared["data"], "train")
    math = next(r for r in train if r["task"] == "deepscaler")
    code = next(r for r in train if r["task"] == "eurus2_code")
    rg = next(r for r in train if r["task"] == "reasoning_gym")
    correct = _fenced("a, b = map(int, input().split())\nprint(a + b)")
    partial = _fenced("a, b = map(int, input().split())\nprint(a + b if a != 5 else 0)")
    records = [math, math, code, code, code, rg, rg]
    completions = [f"<think>easy</think> The answer is $\\boxed{{{math['answer']}}}$.", "\\boxed{-7}",
                   correct, partial, "no code", f"<answer>{rg['answer']}</answer>", "<answer>surely wrong</answer>"]
    scores = paper_data.paper_rewards(records, completions)
    assert scores[:2] == [1.0, 0.0]
    assert scores[2] == 1.0 and abs(scores[3] - 2 / 3) < 1e-9 and scores[4] == 0.0  # code: fraction of tests
    assert scores[5] == 1.0 and scores[6] < 1.0
    with pytest.raises(ValueError, match="no paper reward kind"):
        paper_data.paper_rewards([{"id": "tiny", "answer": "3"}], ["3"])


class _Tok:
    eos_token_id = 0

    def batch_decode(self, ids, skip_special_tokens=True):
        return ["".join(chr(i) for i in row if i != 0) for row in ids]


def test_trl_reward_decodes_and_zeroes_truncated_completions(prepared):
    math = next(r for r in read_split(prepared["data"], "train") if r["task"] == "deepscaler")
    text = f"\\boxed{{{math['answer']}}}"
    ids = [ord(c) for c in text]
    reward = paper_data.make_paper_reward([math], _Tok())
    assert reward(None, None, [ids + [0], ids, ids[:3]], [0, 0, 0]) == [1.0, 0.0, 0.0]
    keep = paper_data.make_paper_reward([math], _Tok(), truncated_reward=None)
    assert keep(None, None, [ids], [0]) == [1.0]


@pytest.mark.slow
def test_an_arm_trains_on_paper_data_with_the_paper_reward(prepared, tmp_path):
    """run_arm on the paper data with the paper reward (CPU, a tiny model): the declared source (paper) gives
    paper_data.make_paper_reward and no exact probes."""
    from brorl.models.toy import toy_model
    from brorl.training import arms

    toy_model(tmp_path / "tiny", tmp_path / "sft", max_steps=30)
    stages = [{"n_rollouts": 4, "prompts_per_step": 2, "steps": 2, "probe_every": 0, "checkpoint_every": 1,
               "max_completion_length": 8, "micro_batch_size": 8, "eta0": 1e-3, "b0": 8, "max_rounds": 2,
               "threads": 1}]
    summary = arms.run_arm(arms.stages_arm("n4", stages), tmp_path / "sft", prepared["data"], tmp_path / "work",
                           tmp_path / "model", tmp_path / "results", progress=False, source="paper")
    assert summary["steps"] == 2 and summary["generated_samples"] >= 16
    assert (tmp_path / "model" / "config.json").exists() and (tmp_path / "results" / "metrics.csv").exists()


@pytest.mark.slow
def test_sampled_heldout_scores_paper_data_with_the_training_reward(prepared, tmp_path):
    """The paper study's held-out p (brorl.study.heldout, sampled mode): completions of the validation problems
    scored by the paper reward, per-prompt counts, pass@k from them (NaN beyond the samples)."""
    from brorl.models.toy import toy_model
    from brorl.study import heldout as H

    toy_model(tmp_path / "tiny", tmp_path / "sft", max_steps=30)
    settings = {"mode": "sampled", "split": "validation", "samples": 4, "max_tokens": 8, "engine": "hf"}
    cache = tmp_path / "cache"
    start = H.measure_cached(tmp_path / "sft", prepared["data"], settings, cache, source="paper")
    records = read_split(prepared["data"], "validation")
    assert list(start["ids"]) == [str(r["id"]) for r in records] and int(start["samples"]) == 4
    assert set(np.unique(start["p"] * 4)) <= {0.0, 1.0, 2.0, 3.0, 4.0}
    assert len(list(cache.glob("*.npz"))) == 1
    again = H.measure_cached(tmp_path / "sft", prepared["data"], settings, cache, source="paper")  # read back, not re-sampled
    assert np.array_equal(again["p"], start["p"]) and len(list(cache.glob("*.npz"))) == 1
    out = H.metrics(start, start, ks=[1, 4, 16])
    assert out["estimate"] == "sampled (4 per prompt)" and out["probes"]["pairs"] == 0
    assert np.isnan(out["all"]["pass@16"]) and 0.0 <= out["all"]["pass@4"] <= 1.0
    assert set(out) >= {"deepscaler", "all", "tail"}
    with pytest.raises(ValueError, match="heldout.engine"):
        H.measure(tmp_path / "sft", prepared["data"], {**settings, "engine": "sglang"})
