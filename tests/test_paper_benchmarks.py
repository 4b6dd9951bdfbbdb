"""The paper profile's benchmarks: data preparation through pinned (stand-in) hub snapshots, Reasoning Gym
generation, the rendered lm-eval tasks and their scorers. No model, no network."""

from __future__ import annotations

import csv
import io
import json
import sys
import types
from pathlib import Path

import pytest

from brorl import rewards
from brorl.data import benchmarks as data_benchmarks
from brorl.data import catalog
from brorl.data.blend import load_data_blend
from brorl.data.hub import ChecksumError, FetchError, write_local_snapshot
from brorl.evaluation import benchmarks, catalog_tasks
from brorl.evaluation.lm_eval_tasks import TASKS_DIR, kind_utils
from brorl.kinds import code as kind_code, gpqa as kind_gpqa, ifeval as kind_ifeval, math as kind_math
from brorl.kinds import reasoning_gym as kind_rg
from brorl.tasks import core as task_core

COMMIT = "1" * 40
COMMIT_V2 = "2" * 40
RG_SAMPLES = 1  # per task in the fixture (the real benchmark: 100)
REWARD_TIMEOUT = 60.0  # s per answer in the default reward pool: generous, see `prepared`

MATH_PROBLEMS = [  # (problem, gold) -- three problems per math benchmark
    ("What is $1 + 1$?", "2"),
    ("Simplify $\\frac{2}{4}$.", "\\frac{1}{2}"),
    ("Simplify $\\sqrt{12}$.", "2\\sqrt{3}"),
]


def _parquet(rows: list[dict]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    return buf.getvalue()


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _csv(rows: list[dict]) -> bytes:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue().encode()


GPQA_ROWS = [
    {"Record ID": "recA", "High-level domain": "Physics",
     "Question": "Which particle has\na negative electric charge?",  # a multi-line CSV field
     "Correct Answer": "electron", "Incorrect Answer 1": "proton", "Incorrect Answer 2": "neutron",
     "Incorrect Answer 3": "photon"},
    {"Record ID": "recB", "High-level domain": "Chemistry", "Question": "What is the chemical symbol of gold?",
     "Correct Answer": "Au", "Incorrect Answer 1": "Ag", "Incorrect Answer 2": "Gd", "Incorrect Answer 3": "Go"},
]
IFEVAL_ROWS = [
    {"key": 1001, "prompt": "Write a short note about cats without using any commas, all in lowercase.",
     "instruction_id_list": ["punctuation:no_comma", "change_case:english_lowercase"], "kwargs": [{}, {}]},
    {"key": 1002, "prompt": "Say hello in lowercase letters only.",
     "instruction_id_list": ["change_case:english_lowercase"], "kwargs": [{"num_words": None}]},
]


def standin_files(name: str) -> dict[str, bytes]:
    """The files of a stand-in snapshot laid out as the table says the real one is."""
    def rows(p, a, extra=lambda i: {}):
        return [{p: q, a: g, **extra(i)} for i, (q, g) in enumerate(MATH_PROBLEMS)]

    readme = {"README.md": b"stand-in; must not be fetched (allow_patterns)\n"}
    if name == "aime24":
        return {"data/train-00000-of-00001.parquet": _parquet(rows("problem", "answer", lambda i: {"id": 60 + i})),
                **readme}
    if name == "aime25":
        r = rows("question", "answer")
        return {"aime2025-I.jsonl": _jsonl(r[:2]), "aime2025-II.jsonl": _jsonl(r[2:]), **readme}
    if name == "amc":  # AMC stores answers as floats
        r = [{"id": i, "problem": q, "answer": float(g)} for i, (q, g) in enumerate(MATH_PROBLEMS[:1])]
        r += [{"id": 7, "problem": "What is $40 + 2$?", "answer": 42.0},
              {"id": 8, "problem": "What is $1/4$ as a decimal?", "answer": 0.25}]
        return {"data/train-00000-of-00001.parquet": _parquet(r), **readme}
    if name == "math500":
        return {"test.jsonl": _jsonl(rows("problem", "answer", lambda i: {"unique_id": f"test/algebra/{i}.json"})),
                **readme}
    if name == "minerva":
        return {"test.jsonl": _jsonl(rows("question", "answer")), **readme}
    if name == "olympiadbench":  # final_answer is a list of LaTeX strings
        r = [{"id": 2000 + i, "question": q, "final_answer": [f"${g}$"]} for i, (q, g) in enumerate(MATH_PROBLEMS)]
        return {"OlympiadBench/OE_TO_maths_en_COMP/OE_TO_maths_en_COMP.parquet": _parquet(r),
                "OlympiadBench/OE_MM_maths_en_COMP/OE_MM_maths_en_COMP.parquet": _parquet(r), **readme}
    if name == "gpqa_diamond":
        return {"gpqa_diamond.csv": _csv(GPQA_ROWS), "gpqa_main.csv": _csv(GPQA_ROWS), **readme}
    if name == "ifeval":
        return {"ifeval_input_data.jsonl": _jsonl(IFEVAL_ROWS), **readme}
    spec = catalog.PAPER_BENCHMARKS.get(name)
    writers = {".parquet": _parquet, ".jsonl": _jsonl, ".csv": _csv}
    path = Path(spec.files[0].replace("*", "standin")) if spec is not None and spec.files else None
    if spec is not None and spec.kind == "math" and path.suffix in writers:
        # any other math row: the problems above, laid out as its catalog row says (first file glob, first columns)
        f = spec.fields
        return {str(path): writers[path.suffix](rows(f["problem"][0], f["answer"][0],
                                                     (lambda i: {f["id"][0]: 90 + i}) if f.get("id") else (lambda i: {}))),
                **readme}
    raise KeyError(name)


def make_hub(root: Path, names=catalog.BENCHMARK_NAMES) -> Path:
    for name in names:
        spec = catalog.PAPER_BENCHMARKS[name]
        if not spec.generated:
            write_local_snapshot(root, spec.repo_id, spec.revision, COMMIT, standin_files(name), repo_type="dataset")
    return root


class FakeTokenizer:
    chat_template = "fake"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        assert not tokenize and add_generation_prompt
        return "".join(f"<|{m['role']}|>{m['content']}" for m in messages) + "<|assistant|><think>\n"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """Every paper benchmark prepared into one data folder (Reasoning Gym: every task, RG_SAMPLES each).

    The scorers run in the default reward pool with a generous deadline: these tests check answers, not the
    anti-hang timeout (tests/test_rewards.py does), and must pass on a machine whose cores are all busy."""
    rewards.configure(timeout=REWARD_TIMEOUT)
    root = tmp_path_factory.mktemp("paper")
    hub = make_hub(root / "hub")
    data = root / "data"
    results = catalog_tasks.prepare_benchmarks(data, hub, samples_per_task=RG_SAMPLES)
    yield {"hub": hub, "data": data, "results": results}
    rewards.configure()
    rewards.close()


def records(data: Path, name: str) -> list[dict]:
    return kind_utils.read_records(catalog_tasks.data_file(data, name))


# -------------------------------------------------------------------------------------- table and registry

def test_table_registry_and_placeholders():
    assert set(catalog.BENCHMARK_NAMES) == set(catalog.PAPER_BENCHMARKS)
    for name, spec in catalog.PAPER_BENCHMARKS.items():
        bench = benchmarks.get_benchmark(name)
        assert bench.lm_eval_task == f"brorl_paper_{name}"
        assert (bench.default_k, bench.default_temperature, bench.apply_chat_template) == (16, 0.6, True)
        assert bench.category_field == ("category" if name == "reasoning_gym" else None)
        assert bench.prompt_of is task_core.format_prompt
        if spec.generated:
            assert spec.kind == "reasoning_gym" and spec.repo_id is None
        else:  # no commit is known for any of them: "main" placeholders, resolved and recorded at first fetch
            assert spec.revision == "main" and spec.revision_pinned is False and spec.files
            assert set(spec.fields) >= {"problem"}
    # The same repositories as the project's data blend, except GPQA (the blend's copy has no distractors).
    blend = {e["name"]: e for e in load_data_blend()["entries"] if e["role"] == "eval"}
    for name, spec in catalog.PAPER_BENCHMARKS.items():
        if name in blend and name != "gpqa_diamond" and not spec.generated:
            assert blend[name]["repo_id"] == spec.repo_id, name
    assert blend["gpqa_diamond"]["repo_id"] == "spawn99/GPQA-diamond-ClaudeR1" != catalog.PAPER_BENCHMARKS[
        "gpqa_diamond"].repo_id


# ------------------------------------------------------------------------- prepare: fetch, verify, damage

def test_prepare_math_from_standin_hub_then_verify_and_detect_damage(tmp_path, monkeypatch):
    hub = make_hub(tmp_path / "hub", names=["math500"])
    dest = tmp_path / "data" / "math500" / "test.jsonl"
    first = data_benchmarks.prepare_benchmark("math500", hub, dest)
    assert first["status"] == "prepared" and first["n_records"] == 3 and first["commit"] == COMMIT
    recs = kind_utils.read_records(dest)
    assert [r["id"] for r in recs] == ["test/algebra/0.json", "test/algebra/1.json", "test/algebra/2.json"]
    assert [r["answer"] for r in recs] == [g for _, g in MATH_PROBLEMS]
    for r, (q, _) in zip(recs, MATH_PROBLEMS):
        assert r["problem"] == q and r["prompt"] == q + "\n\n" + kind_math.MATH_INSTRUCTION
        assert r["source"].startswith(f"HuggingFaceH4/MATH-500@{COMMIT}:test.jsonl#")
    snap = tmp_path / "data" / "math500" / "snapshot"
    assert sorted(p.name for p in snap.iterdir()) == ["test.jsonl"]  # only the allow-listed file was fetched
    meta = json.loads(data_benchmarks.default_meta_path(dest).read_text())
    assert meta["snapshot"]["commit"] == COMMIT and meta["request"]["revision"] == "main"

    # A rerun verifies: no source is needed (HF_HUB_OFFLINE is set, so any fetch would raise OfflineError).
    before = dest.stat().st_mtime_ns
    again = data_benchmarks.prepare_benchmark("math500", None, dest)
    assert again["status"] == "verified" and again["sha256"] == first["sha256"] and again["snapshot_checked"]
    assert dest.stat().st_mtime_ns == before

    # A damaged cache file is detected, named, and left alone.
    good = dest.read_bytes()
    dest.write_bytes(good.replace(b"\\\\frac{1}{2}", b"\\\\frac{1}{3}"))
    with pytest.raises(ChecksumError, match="test.jsonl"):
        data_benchmarks.prepare_benchmark("math500", None, dest)
    with pytest.raises(ChecksumError):
        data_benchmarks.verify_benchmark(dest)
    dest.write_bytes(good)
    assert data_benchmarks.verify_benchmark(dest)["status"] == "verified"

    # A lost JSONL is rebuilt from the verified snapshot, byte for byte (still no source).
    meta_text = data_benchmarks.default_meta_path(dest).read_text()
    dest.unlink()
    restored = data_benchmarks.prepare_benchmark("math500", None, dest)
    assert restored["status"] == "restored" and dest.read_bytes() == good
    assert data_benchmarks.default_meta_path(dest).read_text() == meta_text

    # A damaged snapshot file is detected too (by the fetch manifest).
    (snap / "test.jsonl").write_bytes(b"{}\n")
    with pytest.raises(ChecksumError, match="snapshot"):
        data_benchmarks.prepare_benchmark("math500", None, dest)

    # Another revision replaces both; a file the tool did not make is refused.
    import shutil

    shutil.rmtree(snap)
    write_local_snapshot(hub, "HuggingFaceH4/MATH-500", "v2", COMMIT_V2, {"test.jsonl": _jsonl(
        [{"problem": "What is $2 + 2$?", "answer": "4", "unique_id": "x"}])}, repo_type="dataset")
    v2 = data_benchmarks.prepare_benchmark("math500", hub, dest, revision="v2")
    assert v2["status"] == "replaced" and v2["n_records"] == 1 and v2["commit"] == COMMIT_V2
    stray = tmp_path / "stray" / "test.jsonl"
    stray.parent.mkdir()
    stray.write_text("{}\n")
    with pytest.raises(FetchError, match="not made by prepare_benchmark"):
        data_benchmarks.prepare_benchmark("math500", hub, stray)


def test_every_benchmark_is_prepared_with_its_fields(prepared):
    data = prepared["data"]
    res = prepared["results"]
    assert {n: r["status"] for n, r in res.items()} == {n: "prepared" for n in catalog.BENCHMARK_NAMES}
    for name in catalog.MATH_BENCHMARKS:
        recs = records(data, name)
        assert len({r["id"] for r in recs}) == len(recs) == 3, name
        assert all(r["prompt"].endswith(kind_math.MATH_INSTRUCTION) and r["answer"] for r in recs), name
    assert [r["id"] for r in records(data, "aime24")] == ["60", "61", "62"]
    assert [r["id"] for r in records(data, "aime25")] == ["aime2025-I-0", "aime2025-I-1", "aime2025-II-0"]
    assert [r["answer"] for r in records(data, "amc")] == ["2", "42", "0.25"]  # floats as written by AMC
    assert [r["answer"] for r in records(data, "olympiadbench")] == [f"${g}$" for _, g in MATH_PROBLEMS]
    assert res["olympiadbench"]["report"]["files"] == [
        "OlympiadBench/OE_TO_maths_en_COMP/OE_TO_maths_en_COMP.parquet"]  # the text-only subset only

    gpqa = records(data, "gpqa_diamond")
    assert [r["id"] for r in gpqa] == ["recA", "recB"]
    for rec, row in zip(gpqa, GPQA_ROWS):
        assert sorted(rec["choices"]) == sorted(row[k] for k in row if "Answer" in k)
        assert rec["choices"]["ABCD".index(rec["answer"])] == rec["answer_text"] == row["Correct Answer"]
        assert rec["problem"] == row["Question"] and f"{rec['answer']}) {row['Correct Answer']}" in rec["prompt"]
        assert rec["prompt"].endswith(kind_gpqa.GPQA_INSTRUCTION)
    assert kind_gpqa.shuffle_choices("recA", "a", ["b", "c", "d"]) == kind_gpqa.shuffle_choices(
        "recA", "a", ["b", "c", "d"])

    ifeval = records(data, "ifeval")
    assert [r["key"] for r in ifeval] == [1001, 1002] and ifeval[0]["prompt"] == IFEVAL_ROWS[0]["prompt"]
    assert json.loads(ifeval[1]["kwargs"]) == [{}]  # null arguments dropped, as lm-eval does

    rg = records(data, "reasoning_gym")
    tasks = kind_rg.reasoning_gym_tasks()
    assert len(rg) == len(tasks) * RG_SAMPLES and {r["task"] for r in rg} == set(tasks)
    assert {r["category"] for r in rg} == set(catalog.RG_CATEGORIES)
    assert all(r["category"] == tasks[r["task"]] and r["prompt"].endswith(kind_rg.RG_INSTRUCTION) for r in rg)


# --------------------------------------------------------------------------------------- Reasoning Gym data

def test_reasoning_gym_generates_offline_for_all_11_categories(prepared):
    assert kind_rg.missing_rg_categories() == []  # reasoning-gym 0.1.25 has every category
    report = prepared["results"]["reasoning_gym"]["report"]
    assert all(n >= 1 for n in report["categories"].values()) and "missing_categories" not in report
    assert report["categories"] == {c: sum(1 for t in kind_rg.reasoning_gym_tasks().values() if t == c)
                                    for c in catalog.RG_CATEGORIES}
    assert report["reasoning_gym"] == "0.1.25"
    assert report["gold_changes_through_json"] == []  # after parse_reasoning_gym_entry (arc_agi / rearc)
    assert set(report["tasks_without_gold"]) == {"boxnet", "graph_color", "propositional_logic", "rubiks_cube",
                                                 "rush_hour"}
    # Deterministic across processes and task orders, including the tasks whose items depend on the hash seed
    # or draw from the global RNGs.
    sensitive = ["word_ladder", "ransom_note", "polynomial_multiplication", "list_functions", "knight_swap",
                 "isomorphic_strings", "codeio"]
    again, _ = kind_rg.generate_reasoning_gym(samples_per_task=RG_SAMPLES, tasks=sensitive)
    first = [r for r in records(prepared["data"], "reasoning_gym") if r["task"] in sensitive]
    assert sorted(again, key=lambda r: r["id"]) == sorted(first, key=lambda r: r["id"])


# ------------------------------------------------------------------------------- rendered lm-eval tasks

def test_rendered_tasks_load_and_build_their_requests(prepared, tmp_path):
    from lm_eval.tasks import TaskManager

    data = prepared["data"]
    out = catalog_tasks.render_tasks(data, tmp_path / "tasks")
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"brorl_paper_{n}.yaml" for n in catalog.BENCHMARK_NAMES] + ["kind_utils.py"])
    tm = TaskManager(include_path=str(out), include_defaults=False)
    names = [catalog_tasks.task_name(n) for n in catalog.BENCHMARK_NAMES]
    loaded = tm.load(names)["tasks"]
    assert sorted(loaded) == sorted(names)
    tok = FakeTokenizer()
    def chat(msgs, add_generation_prompt=True):  # lm-eval's lm.apply_chat_template
        return tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=add_generation_prompt)
    for name in catalog.BENCHMARK_NAMES:
        task = loaded[catalog_tasks.task_name(name)]
        want = records(data, name)
        assert [d["id"] for d in task.eval_docs] == [r["id"] for r in want], name
        gk = task.config.generation_kwargs
        assert (gk["temperature"], gk["top_p"], gk["top_k"], gk["max_gen_toks"], gk["do_sample"]) == (
            0.6, 0.95, 0, 32768, True), name
        assert task.config.repeats == 16
        task.build_all_requests(apply_chat_template=True, chat_template=chat)
        assert len(task.instances) == len(want), name
        for inst, rec in zip(task.instances, want):
            assert inst.repeats == 16 and inst.request_type == "generate_until"
            assert inst.args[0] == task_core.format_prompt(tok, rec)  # what the runner's prompt_of checks
            assert inst.args[1]["max_gen_toks"] == 32768
    m = {x["metric"] for x in loaded["brorl_paper_reasoning_gym"].config.metric_list}
    assert m == {"mean_at_k", "pass_at_1", "pass_at_2", "pass_at_4", "pass_at_8", "pass_at_16", "mean_reward"}


def test_benchmark_render_pins_data_decoding_and_stop_ids(prepared, tmp_path):
    import yaml

    bench = benchmarks.get_benchmark("aime24")
    # As the runner calls it (hf or vllm backend): the stop ids are not rendered, the model's end token ends.
    out = bench.render(prepared["data"], tmp_path / "t", k=4, temperature=0.6, max_gen_toks=None,
                       stop_token_ids=[151643, 151643 + 1])
    cfg = yaml.safe_load((out / "brorl_paper_aime24.yaml").read_text().replace("!function", ""))
    assert cfg["generation_kwargs"] == {"until": [], "do_sample": True, "temperature": 0.6, "top_p": 0.95,
                                        "top_k": 0, "max_gen_toks": 32768}
    out = bench.render(prepared["data"], tmp_path / "t", k=4, temperature=0.6, max_gen_toks=None,
                       stop_token_ids=[151643, 151643 + 1], backend="hf")
    assert sorted(p.name for p in out.iterdir()) == ["brorl_paper_aime24.yaml", "kind_utils.py"]
    cfg = yaml.safe_load((out / "brorl_paper_aime24.yaml").read_text().replace("!function", ""))
    assert cfg["dataset_kwargs"]["data_file"] == str(catalog_tasks.data_file(prepared["data"].resolve(), "aime24"))
    assert bench.data_files(prepared["data"]) == [catalog_tasks.data_file(prepared["data"], "aime24")]
    assert cfg["repeats"] == 4 and cfg["filter_list"][0]["filter"][0] == {"function": "take_first_k", "k": 4}
    assert [x["metric"] for x in cfg["metric_list"]] == ["mean_at_k", "pass_at_1", "pass_at_2", "pass_at_4"]
    assert cfg["generation_kwargs"] == {"until": [], "do_sample": True, "temperature": 0.6, "top_p": 0.95,
                                        "top_k": 0, "max_gen_toks": 32768, "eos_token_id": [151643, 151644]}
    vllm = catalog_tasks.render_tasks(None, tmp_path / "v", names=["aime24"], stop_token_ids=[5], backend="vllm")
    gk = yaml.safe_load((vllm / "brorl_paper_aime24.yaml").read_text().replace("!function", ""))["generation_kwargs"]
    assert gk["stop_token_ids"] == [5] and "eos_token_id" not in gk
    bench.render(prepared["data"], out, k=2, temperature=0.6, names=["amc"])  # names is the benchmark's own
    assert sorted(p.name for p in out.iterdir()) == ["brorl_paper_aime24.yaml", "kind_utils.py"]


def test_portable_tasks_are_the_default_rendering_and_load_from_metadata(prepared, tmp_path, capsys):
    from lm_eval.tasks import TaskManager

    # the stock CLI's folder (python -m brorl.evaluation.catalog_tasks DIR): rendered from the catalog, not shipped
    assert not list(TASKS_DIR.glob("*.yaml"))
    assert catalog_tasks.main([str(tmp_path / "portable")]) == 0
    portable = Path(capsys.readouterr().out.strip())
    rendered = catalog_tasks.render_tasks(None, tmp_path / "shipped")
    shipped = sorted(p.name for p in portable.iterdir())
    assert sorted(p.name for p in rendered.iterdir()) == shipped == sorted(
        [*(f"brorl_paper_{n}.yaml" for n in catalog.BENCHMARK_NAMES), "kind_utils.py"])
    for name in shipped:
        assert (portable / name).read_text() == (rendered / name).read_text()
    tm = TaskManager(include_path=str(portable), include_defaults=False, metadata={"data_dir": str(prepared["data"])})
    task = tm.load(["brorl_paper_gpqa_diamond"])["tasks"]["brorl_paper_gpqa_diamond"]
    assert [d["id"] for d in task.eval_docs] == ["recA", "recB"]
    with pytest.raises(ValueError, match="data_dir"):
        kind_utils.load_records(benchmark="aime24")


# ---------------------------------------------------------------------------------------------- scoring

GARBAGE = ["", "no idea", "\\boxed{", "<answer></answer>", "\x00\ud800 \\boxed{\\frac{1}{", 12345, None,
           ["not", "a", "message"]]


def test_math_process_results_scores_hand_written_completions(prepared):
    for name in catalog.MATH_BENCHMARKS:
        bench = benchmarks.get_benchmark(name)
        for doc in records(prepared["data"], name):
            gold = doc["answer"].strip("$")
            right = f"<think>Let me work it out.</think>\nSo the answer is $\\boxed{{{gold}}}$."
            wrong = "<think>Hmm.</think> The answer is $\\boxed{123456789}$."
            completions = [right, wrong, *GARBAGE]
            assert bench.score(doc, completions) == [1.0] + [0.0] * (1 + len(GARBAGE)), (name, doc["id"])
            got = kind_utils.process_math(doc, [completions])
            assert got == kind_utils.doc_metrics([1] + [0] * (len(completions) - 1))
            assert got["mean_at_k"] == pytest.approx(1 / len(completions)) and got["pass_at_8"] == pytest.approx(0.8)
            assert kind_utils.process_math(doc, [[wrong] * 4]) == {"mean_at_k": 0.0, "pass_at_1": 0.0,
                                                                    "pass_at_2": 0.0, "pass_at_4": 0.0}
    # Equivalent forms of a gold answer count (math-verify), e.g. 0.5 for \frac{1}{2}.
    doc = records(prepared["data"], "math500")[1]
    assert kind_math.score(doc, ["\\boxed{0.5}", "\\boxed{\\dfrac{1}{2}}", "\\boxed{2}"]) == [1.0, 1.0, 0.0]
    assert kind_math.score({"id": "x"}, ["\\boxed{1}"]) == [0.0]  # a doc without a gold answer (warned)


def test_math_scorer_follows_the_training_rule():
    """The lm-eval math scorer is the training reward: a list of values in one box or an inexact decimal does not
    pay in evaluation either (issue 30)."""
    doc = {"id": "x", "answer": "13"}
    assert kind_math.score(doc, ["\\boxed{12 \\vee 13}", "\\boxed{12 13}", "\\boxed{１３}", "\\boxed{13}"]) == [
        0.0, 0.0, 1.0, 1.0]
    assert kind_math.score({"id": "y", "answer": "\\frac{1}{2}"}, ["\\boxed{0.5000001}"]) == [0.0]


def test_evaluation_retries_a_timed_out_answer_with_a_long_budget():
    """Evaluation is off the training's critical path: a right answer that runs out of the pool's deadline (10 ms
    here, far below the ~1.3 s of sympy the Basel sum takes) is verified again with EVAL_RETRY_TIMEOUT (60 s) and
    pays; training would count it as a timeout."""
    from brorl import rewards

    basel = "\\boxed{\\sum_{n=1}^{\\infty} \\frac{1}{n^2}}"
    rewards.configure(num_workers=1, timeout=0.01)
    try:
        assert kind_math.score({"id": "b", "answer": "\\frac{\\pi^2}{6}"}, [basel, "\\boxed{2}"]) == [1.0, 0.0]
        stats = rewards.get_default_pool().stats
        assert stats.timed_out_tasks >= 1 and stats.cache_hits == 0
    finally:
        rewards.configure()
        rewards.close()


@pytest.mark.parametrize("text,letter", [
    ("\\boxed{C}", "C"), ("so $\\boxed{(B)}$", "B"), ("\\boxed{\\text{D}}", "D"), ("\\boxed{\\textbf{(A)}}", "A"),
    ("\\boxed{C) electron}", "C"), ("\\boxed{b}", "B"), ("<answer>D</answer>", "D"),
    ("The answer is (A).", "A"), ("Answer: B", "B"), ("**Answer:** C", "C"), ("answer: option D", "D"),
    ("<think>The answer is A.</think> The answer is \\boxed{B}", "B"),
    ("<think>\\boxed{A}</think> I am not sure.", None), ("\\boxed{42}", None), ("Answer: Carbon", None),
    ("A", None), ("", None), (None, None), (7, None),
    ("<answer><answer>C</answer></answer>", "C"),  # nested tags: the Reasoning Gym reward's rule (issue 30)
])
def test_gpqa_letter_extraction_rule(text, letter):
    assert kind_gpqa.extract_choice_letter(text) == letter


def test_gpqa_process_results_scores_hand_written_completions(prepared):
    bench = benchmarks.get_benchmark("gpqa_diamond")
    for doc in records(prepared["data"], "gpqa_diamond"):
        gold = doc["answer"]
        other = next(x for x in "ABCD" if x != gold)
        completions = [f"<think>...</think>\nThe answer is \\boxed{{{gold}}}.", f"\\boxed{{{other}}}",
                       f"The answer is ({gold})", *GARBAGE]
        assert bench.score(doc, completions) == [1.0, 0.0, 1.0] + [0.0] * len(GARBAGE)
        got = kind_utils.process_gpqa(doc, [completions])
        assert got["mean_at_k"] == pytest.approx(2 / len(completions))
    assert kind_gpqa.score({"answer": "E"}, ["\\boxed{E}"]) == [0.0]


def test_reasoning_gym_process_results_scores_the_generated_gold_answers(prepared):
    bench = benchmarks.get_benchmark("reasoning_gym")
    rg = records(prepared["data"], "reasoning_gym")
    by_category = {}
    for r in rg:
        if r["answer"]:
            by_category.setdefault(r["category"], r)
    assert set(by_category) == set(catalog.RG_CATEGORIES)
    docs = [*by_category.values(), *(r for r in rg if r["task"] in ("arc_agi", "rearc"))]
    for doc in docs:
        right = f"<think>Working.</think>\n<answer>{doc['answer']}</answer>"
        scores = bench.score(doc, [right, "<answer>zzz not it 0</answer>", *GARBAGE])
        assert scores[0] == 1.0, (doc["task"], doc["answer"])
        assert all(s < 0.5 for s in scores[1:]), (doc["task"], scores)
        got = kind_utils.process_reasoning_gym(doc, [[right, "garbage"]])
        assert got["mean_at_k"] == 0.5 and got["pass_at_2"] == 1.0 and got["mean_reward"] >= 0.5
    # The reward's own entry parser restores ARC's tuple boards: the gold answer scores 1.0 straight from JSON
    # (before issue 18 the reward scored it 0.05 and only the evaluation's scorer repaired the entry).
    arc = next(r for r in rg if r["task"] == "arc_agi")
    assert rewards.reasoning_gym_reward(f"<answer>{arc['answer']}</answer>", arc["entry"]) == 1.0
    assert rewards.reasoning_gym_reward(f"<answer>{arc['answer']}</answer>", json.loads(arc["entry"])) == 1.0
    assert kind_rg.passed_reward({"entry": "not json"}, ["<answer>1</answer>"]) == [0.0]


@pytest.fixture
def fake_ifeval_deps(monkeypatch):
    """Stand-ins for what lm-eval's IFEval module imports but this environment may lack (langdetect,
    immutabledict, NLTK's punkt_tab), enough for instructions that need none of them for real."""
    import nltk

    langdetect = types.ModuleType("langdetect")
    langdetect.LangDetectException = type("LangDetectException", (Exception,), {})
    langdetect.detect = lambda text: "en"
    immutabledict = types.ModuleType("immutabledict")
    immutabledict.immutabledict = lambda *a, **k: types.MappingProxyType(dict(*a, **k))
    monkeypatch.setitem(sys.modules, "langdetect", langdetect)
    monkeypatch.setitem(sys.modules, "immutabledict", immutabledict)
    real_find = nltk.data.find
    monkeypatch.setattr(nltk.data, "find", lambda res, *a, **k: "stand-in" if res.startswith("tokenizers/punkt_tab")
                        else real_find(res, *a, **k))
    for mod in [m for m in sys.modules if m.startswith("lm_eval.tasks.ifeval")]:
        monkeypatch.delitem(sys.modules, mod)
    yield
    for mod in [m for m in sys.modules if m.startswith("lm_eval.tasks.ifeval")]:
        del sys.modules[mod]  # imported against the stand-ins: forget them


def test_ifeval_without_its_dependencies_says_what_is_missing(prepared):
    missing = kind_ifeval.ifeval_missing()
    if not missing:
        pytest.skip("lm-eval's IFEval dependencies are installed here")
    doc = records(prepared["data"], "ifeval")[0]
    with pytest.raises(RuntimeError, match="ifeval"):
        benchmarks.get_benchmark("ifeval").score(doc, ["hello"])


def test_ifeval_uses_lm_evals_checks_on_the_text_after_think(prepared, fake_ifeval_deps):
    bench = benchmarks.get_benchmark("ifeval")
    doc = records(prepared["data"], "ifeval")[0]  # no comma + all lower case
    right = "<think>Okay, commas are fine in here, Really.</think>\ncats are soft and they purr all day"
    comma = "</think>cats are soft, and they purr"
    upper = "Cats are soft and they purr"
    garbage = ["", "<think>an unfinished, thought", 12345, None, ["not", "a", "message"]]
    assert bench.score(doc, [right, comma, upper, *garbage]) == [1.0, 0.0, 0.0] + [0.0] * len(garbage)
    got = kind_utils.process_ifeval(doc, [[right, comma]])
    assert got["mean_at_k"] == 0.5 and got["pass_at_2"] == 1.0 and got["prompt_level_loose_acc"] == 0.5
    assert got["inst_level_strict_acc"] == [True, True, False, True]
    assert kind_utils.agg_inst_level_acc([got["inst_level_strict_acc"], [False]]) == 0.6


def _fake_lm_eval_result(bench, docs, completions_of_doc) -> dict:
    """What ``lm_eval.simple_evaluate(log_samples=True)`` returns, built from the task's own process_results."""
    process = getattr(kind_utils, f"process_{catalog.benchmark_spec(bench.name).kind}")
    samples = []
    for i, doc in enumerate(docs):
        comps = completions_of_doc(doc)
        samples.append({"doc_id": i, "doc": doc, "filtered_resps": [comps], "arguments": [[doc["prompt"], {}]],
                        **process(doc, [comps])})
    k = len(samples[0]["filtered_resps"][0])
    names = catalog_tasks.metric_names(k)
    agg = {f"{m},none": sum(s[m] for s in samples) / len(samples) for m in names}
    return {"samples": {bench.lm_eval_task: samples}, "results": {bench.lm_eval_task: agg},
            "n-samples": {bench.lm_eval_task: {"effective": len(samples)}}}


def test_the_runner_accepts_what_the_tasks_report(prepared):
    """brorl.evaluation.runner.collect_results re-scores the logged completions with Benchmark.score (binarised
    at 0.5) and checks lm-eval's per-problem and aggregated values: the tasks must agree with it, per category."""
    from brorl.evaluation import runner

    rg = benchmarks.get_benchmark("reasoning_gym")
    docs = [r for r in records(prepared["data"], "reasoning_gym") if r["answer"]][:12]
    res = _fake_lm_eval_result(rg, docs, lambda d: [f"<answer>{d['answer']}</answer>", "<answer>nope</answer>",
                                                    "garbage", f"<answer>{d['answer']}</answer>"])
    out = runner.collect_results(res, rg, 4)
    assert out["metrics"]["mean_at_k"] == 0.5 and out["metrics"]["pass_at_4"] == 1.0
    assert set(out["categories"]) == {d["category"] for d in docs}
    assert [s["correct"] for s in out["samples"]] == [[1, 0, 0, 1]] * len(docs)

    gpqa = benchmarks.get_benchmark("gpqa_diamond")
    docs = records(prepared["data"], "gpqa_diamond")
    res = _fake_lm_eval_result(gpqa, docs, lambda d: [f"\\boxed{{{d['answer']}}}", "\\boxed{E}"])
    out = runner.collect_results(res, gpqa, 2)
    assert out["metrics"]["mean_at_k"] == 0.5 and list(out["categories"]) == ["gpqa_diamond"]


# ------------------------------------------------------------------------------------------ code benchmarks

SUM_TESTS = {"inputs": ["1 2\n", "2 2\n", "5 7\n"], "outputs": ["3\n", "4\n", "12\n"]}
ADD_TESTS = {"fn_name": "add", "inputs": [[1, 2], [3, 4]], "outputs": [3, 7]}


def _prime_row(source: str, problem: str, ground_truth: str, ability: str = "code") -> dict:
    return {"data_source": source, "ability": ability,
            "prompt": [{"role": "system", "content": "PRIME's action prompt"}, {"role": "user", "content": problem}],
            "reward_model": {"style": "rule", "ground_truth": ground_truth},
            "extra_info": {"split": "dummy", "index": 0}}


def code_hub(root: Path) -> Path:
    """A PRIME-like validation.parquet (2 APPS problems, 1 TACO, 1 maths row) and a codeparrot-APPS-like copy."""
    rows = [_prime_row("apps", "Read two integers and print their sum.", json.dumps(SUM_TESTS)),
            _prime_row("apps", "Return the sum of a and b.\nclass Solution:\n    def add(self, a, b):",
                       json.dumps(ADD_TESTS)),
            _prime_row("taco", "Print the sum of two integers.", json.dumps(SUM_TESTS)),
            _prime_row("numina_olympiads", "What is 1 + 1?", "2", ability="math")]
    write_local_snapshot(root, "PRIME-RL/Eurus-2-RL-Data", "main", COMMIT,
                         {"validation.parquet": _parquet(rows), "train.parquet": b"not fetched",
                          "README.md": b"stand-in\n"}, repo_type="dataset")
    apps_like = [{"problem_id": 4000, "question": "Read two integers and print their sum.",
                  "input_output": json.dumps(SUM_TESTS)},
                 {"problem_id": 4001, "question": "Return a + b.", "input_output": json.dumps(ADD_TESTS)}]
    write_local_snapshot(root, "codeparrot/apps", "main", COMMIT, {"test.jsonl": _jsonl(apps_like)},
                         repo_type="dataset")
    return root


@pytest.fixture(scope="module")
def code_prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("code")
    hub = code_hub(root / "hub")
    data = root / "data"
    results = catalog_tasks.prepare_benchmarks(data, hub, names=["apps", "taco"])
    return {"hub": hub, "data": data, "results": results}


def test_code_table_and_registry():
    from brorl.tables import plan

    assert tuple(catalog.CODE_BENCHMARKS) == plan.CODE == catalog.CODE_BENCHMARK_NAMES
    assert not set(plan.CODE) & set(catalog.BENCHMARK_NAMES)  # not in the default list
    for name, spec in catalog.CODE_BENCHMARKS.items():
        assert catalog.benchmark_spec(name) is spec
        assert (spec.kind, spec.repo_id, spec.revision, spec.revision_pinned) == (
            "code", "PRIME-RL/Eurus-2-RL-Data", "main", False)
        assert spec.files == ("validation.parquet",) and spec.where == {"data_source": (name,)}
        bench = benchmarks.get_benchmark(name)
        assert bench.lm_eval_task == f"brorl_paper_{name}" and bench.score is kind_code.score
        assert (bench.default_k, bench.default_temperature) == (16, 0.6) and bench.category_field is None
    assert "where" not in catalog.PAPER_BENCHMARKS["aime24"].to_dict()  # old cache requests unchanged


def test_prepare_code_from_standin_hub(code_prepared, tmp_path):
    from brorl import sandbox

    res = code_prepared["results"]
    assert res["apps"]["n_records"] == 2 and res["taco"]["n_records"] == 1
    assert res["apps"]["report"]["n_rows"] == 4 and res["apps"]["report"]["n_selected"] == 2
    apps = records(code_prepared["data"], "apps")
    assert [r["id"] for r in apps] == ["validation-0", "validation-1"]
    stdio, call = apps
    assert set(stdio) >= {"id", "benchmark", "prompt", "problem", "tests", "answer", "source"}
    assert stdio["benchmark"] == "apps" and stdio["problem"] == "Read two integers and print their sum."
    assert stdio["prompt"] == stdio["problem"] + "\n\n" + kind_code.CODE_INSTRUCTION
    assert json.loads(stdio["tests"]) == SUM_TESTS and stdio["n_tests"] == 3 and stdio["fn_name"] == ""
    assert sandbox.parse_tests(stdio["tests"]).mode == "stdio"
    assert json.loads(call["tests"]) == ADD_TESTS and call["fn_name"] == "add"
    assert call["prompt"].endswith(kind_code.CODE_CALL_INSTRUCTION.format(fn_name="add"))
    assert call["source"] == f"PRIME-RL/Eurus-2-RL-Data@{COMMIT}:validation.parquet#1"
    again = data_benchmarks.prepare_benchmark("apps", code_prepared["hub"],
                                         catalog_tasks.data_file(code_prepared["data"], "apps"))
    assert again["status"] == "verified"
    with pytest.raises(data_benchmarks.BenchmarkDataError, match="no row matches"):  # says what data_source holds
        data_benchmarks.prepare_benchmark("codecontests", code_prepared["hub"], tmp_path / "cc" / "test.jsonl")
    # An APPS-style copy (input_output JSON, problem_id) through a replaced table entry.
    from dataclasses import replace

    spec = replace(catalog.CODE_BENCHMARKS["apps"], repo_id="codeparrot/apps", files=("test.jsonl",), where={})
    out = data_benchmarks.prepare_benchmark("apps", code_prepared["hub"], tmp_path / "apps" / "test.jsonl", spec=spec)
    got = kind_utils.read_records(out["dest"])
    assert [r["id"] for r in got] == ["4000", "4001"] and [json.loads(r["tests"]) for r in got] == [SUM_TESTS, ADD_TESTS]


def test_code_task_renders_and_loads_with_lm_eval(code_prepared, tmp_path):
    from lm_eval.tasks import TaskManager

    out = catalog_tasks.render_tasks(code_prepared["data"], tmp_path / "tasks", names=["apps", "taco"])
    tm = TaskManager(include_path=str(out), include_defaults=False)
    loaded = tm.load(["brorl_paper_apps", "brorl_paper_taco"])["tasks"]
    task = loaded["brorl_paper_apps"]
    assert [d["id"] for d in task.eval_docs] == ["validation-0", "validation-1"]
    assert json.loads(task.eval_docs[1]["tests"]) == ADD_TESTS
    assert {x["metric"] for x in task.config.metric_list} == {
        "mean_at_k", "pass_at_1", "pass_at_2", "pass_at_4", "pass_at_8", "pass_at_16", "mean_test_fraction"}
    tok = FakeTokenizer()
    task.build_all_requests(apply_chat_template=True, chat_template=lambda m, add_generation_prompt=True:
                            tok.apply_chat_template(m, tokenize=False, add_generation_prompt=add_generation_prompt))
    assert [i.args[0] for i in task.instances] == [task_core.format_prompt(tok, r)
                                                   for r in records(code_prepared["data"], "apps")]


def _fenced(code: str) -> str:
    return f"<think>\nplan\n</think>\nHere:\n```python\n{code}\n```\n"


def test_code_process_results_scores_programs(code_prepared):
    from brorl.evaluation import runner

    stdio, call = records(code_prepared["data"], "apps")
    correct = _fenced("a, b = map(int, input().split())\nprint(a + b)")
    partial = _fenced("a, b = map(int, input().split())\nprint(a + b if a != 5 else 0)")
    loop = _fenced("while True:\n    pass")
    comps = [correct, partial, loop, "no code at all", _fenced("def broken(:"), None, 12345]
    fractions = kind_code.passed_fraction(stdio, comps)
    assert fractions[0] == 1.0 and abs(fractions[1] - 2 / 3) < 1e-9 and fractions[2:] == [0.0] * 5
    assert kind_code.score(stdio, comps) == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    m = kind_utils.process_code(stdio, [comps[:4]])
    assert m["mean_at_k"] == 0.25 and m["pass_at_1"] == 0.25 and m["pass_at_4"] == 1.0
    assert abs(m["mean_test_fraction"] - (1 + 2 / 3) / 4) < 1e-9
    call_ok = _fenced("class Solution:\n    def add(self, a, b):\n        return a + b")
    assert kind_code.passed_fraction(call, [call_ok, correct]) == [1.0, 0.0]
    assert kind_utils.process_code({"id": "x"}, [[correct]])["mean_at_k"] == 0.0  # no tests: 0, no error
    assert kind_utils.process_code(stdio, [[]])["mean_at_k"] == 0.0
    # The runner re-scores with Benchmark.score (binarised at 0.5) and agrees with what the task reports.
    bench = benchmarks.get_benchmark("apps")
    res = _fake_lm_eval_result(bench, [stdio, call], lambda d: [correct if d is stdio else call_ok, partial])
    out = runner.collect_results(res, bench, 2)
    assert out["metrics"]["mean_at_k"] == 0.5 and [s["correct"] for s in out["samples"]] == [[1, 0], [1, 0]]
