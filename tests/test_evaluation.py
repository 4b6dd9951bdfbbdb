"""Benchmark evaluation through lm-eval (brorl.evaluation): the stock ``lm_eval`` CLI against the pipeline's
``evaluate``, pass@k against brute force, the content-keyed cache, garbage completions and the per-sample
records. A 21k-parameter SFT model and 8 test problems per family, k = 4 (well under two minutes on one core)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import itertools  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from brorl.evaluation import runner, tiny  # noqa: E402
from brorl.evaluation.lm_eval_tasks import TASKS_DIR  # noqa: E402
from brorl.evaluation.lm_eval_tasks import utils as task_utils  # noqa: E402
from brorl.evaluation.metrics import sample_metrics  # noqa: E402
from brorl.tasks import read_jsonl, verify  # noqa: E402

TASKS = {"tasks": ["add", "multiple"], "train_size": 64, "validation_size": 24, "test_size": 8,
         "probe_train_size": 16, "probe_validation_size": 8, "probe_test_size": 8, "seed": 5, "add_max_digits": 2}
SFT = {"model": {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64},
       "max_steps": 240, "batch_size": 64, "lr": 1e-2, "warmup_steps": 10, "eval_every": 80,
       "select_target": 2.0, "max_seconds": 0, "checkpoint_every": 1000, "threads": 1, "log_every": 1000}
K = 4
SEED = 7
BATCH = 16
RESULT_KEYS = {"model_dir", "benchmark", "lm_eval_task", "model_hash", "task_hash", "k", "metrics", "categories",
               "samples", "lm_eval_version", "cached", "seconds"}
METRIC_KEYS = {"mean_at_k", "pass_at_1", "pass_at_2", "pass_at_4", "n_problems", "n_samples"}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A tiny SFT model (a few seconds) and its task data."""
    import torch

    from brorl.models import train_sft
    from brorl.tasks import write_splits

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("eval")
    write_splits(root / "data", TASKS)
    train_sft(root / "data", root / "sft", SFT, TASKS, progress=False)
    return root


@pytest.fixture(scope="module")
def multiple_result(tiny_model):
    root = tiny_model
    return runner.evaluate(root / "sft", "tiny_multiple", root / "data", root / "eval" / "multiple.json", k=K,
                           seed=SEED, batch_size=BATCH, threads=1)


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def _lm_eval_cli(args: list[str], out: Path) -> tuple[dict, list[dict]]:
    cmd = [str(Path(sys.executable).parent / "lm_eval"), *args, "--output_path", str(out), "--log_samples"]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = sorted(out.rglob("results_*.json"))
    assert len(results) == 1, list(out.rglob("*"))
    sample_files = sorted(out.rglob("samples_*.jsonl"))
    samples = {}
    for f in sample_files:
        task = f.name[len("samples_"):f.name.rfind("_")]  # samples_<task>_<timestamp>.jsonl
        samples[task] = [json.loads(line) for line in f.open()]
    return json.loads(results[0].read_text()), samples


# ------------------------------------------------------------------------------------ (a) stock CLI == evaluate

def test_stock_lm_eval_cli_gives_the_same_scores_as_evaluate(tiny_model, multiple_result, tmp_path):
    root = tiny_model
    task_dir = tiny.render_tasks(root / "data", tmp_path / "tasks", k=K)
    res, samples = _lm_eval_cli(
        ["--model", "hf", "--model_args", f"pretrained={(root / 'sft').resolve()},dtype=float32", "--device", "cpu",
         "--batch_size", str(BATCH), "--apply_chat_template", "--include_path", str(task_dir),
         "--tasks", "brorl_tiny_multiple", "--seed", str(SEED)], tmp_path / "cli")
    cli = res["results"]["brorl_tiny_multiple"]
    mine = multiple_result
    # the same k completions per problem, so the same 0/1 scores ...
    cli_samples = sorted(samples["brorl_tiny_multiple"], key=lambda s: s["doc_id"])
    assert [s["doc_id"] for s in cli_samples] == [s["doc_id"] for s in mine["samples"]]
    for c, m in zip(cli_samples, mine["samples"]):
        assert c["filtered_resps"][0] == m["completions"]
        assert [int(verify(c["doc"], x)) for x in c["filtered_resps"][0]] == m["correct"]
        assert c["mean_at_k"] == np.mean(m["correct"])
    # ... the same metrics: exactly when recomputed from the CLI's samples, and lm-eval's own aggregate
    cli_correct = [[int(verify(c["doc"], x)) for x in c["filtered_resps"][0]] for c in cli_samples]
    assert sample_metrics(cli_correct) == mine["metrics"]
    for name in ("mean_at_k", "pass_at_1", "pass_at_2", "pass_at_4"):
        assert abs(cli[f"{name},none"] - mine["metrics"][name]) <= 1e-12, name
    assert mine["metrics"]["pass_at_4"] > 0  # the comparison is not vacuous
    assert len({tuple(s["completions"]) for s in mine["samples"]}) > 1


def test_portable_tasks_are_the_default_rendering_and_load_from_metadata(tiny_model, tmp_path, capsys):
    from lm_eval.tasks import TaskManager

    # the stock CLI's folder (python -m brorl.evaluation.tiny DIR): rendered from the family registry, not shipped
    assert not list(TASKS_DIR.glob("*.yaml"))
    assert tiny.main([str(tmp_path / "portable")]) == 0
    portable = Path(capsys.readouterr().out.strip())
    rendered = tiny.render_tasks(None, tmp_path / "shipped")
    shipped = sorted(p.name for p in portable.iterdir())
    assert sorted(p.name for p in rendered.iterdir()) == shipped == [
        "brorl_tiny.yaml", "brorl_tiny_add.yaml", "brorl_tiny_multiple.yaml", "utils.py"]
    for name in shipped:
        assert (portable / name).read_text() == (rendered / name).read_text()
    assert (portable / "utils.py").read_text() == (TASKS_DIR / "utils.py").read_text()
    data = tiny_model / "data"
    tm = TaskManager(include_path=str(portable), include_defaults=False, metadata={"data_dir": str(data)})
    loaded = tm.load(["brorl_tiny"])
    children = loaded["tasks"]
    assert list(loaded["groups"]) == ["brorl_tiny"]
    assert sorted(children) == ["brorl_tiny_add", "brorl_tiny_multiple"]
    for name, task in children.items():
        family = name.removeprefix("brorl_tiny_")
        assert [d["id"] for d in task.eval_docs] == [r["id"] for r in read_jsonl(data / family / "test.jsonl")]
        assert task.config.repeats == tiny.DEFAULT_K
        gk = task.config.generation_kwargs
        assert gk["until"] == ["<|endoftext|>"] and gk["temperature"] == 1.0 and gk["do_sample"] is True
        assert gk["max_gen_toks"] == tiny.default_max_gen_toks(None, family)
    with pytest.raises(ValueError, match="data_dir"):
        task_utils.load_split(family="add")


def test_rendered_tasks_pin_the_data_and_the_decoding(tiny_model, tmp_path):
    import yaml

    data = tiny_model / "data"
    out = tiny.render_tasks(data, tmp_path / "t", k=8, temperature=0.6, families=["add"])
    assert sorted(p.name for p in out.iterdir()) == ["brorl_tiny.yaml", "brorl_tiny_add.yaml", "utils.py"]
    text = (out / "brorl_tiny_add.yaml").read_text()
    cfg = yaml.safe_load(text.replace("!function", ""))
    assert cfg["dataset_kwargs"]["data_file"] == str((data / "add" / "test.jsonl").resolve())
    assert cfg["repeats"] == 8 and cfg["filter_list"][0]["filter"][0] == {"function": "take_first_k", "k": 8}
    assert [m["metric"] for m in cfg["metric_list"]] == ["mean_at_k", "pass_at_1", "pass_at_2", "pass_at_4",
                                                         "pass_at_8"]
    assert cfg["generation_kwargs"]["temperature"] == 0.6
    assert cfg["generation_kwargs"]["max_gen_toks"] == 4  # add_max_digits=2: "198" + the end token
    assert cfg["generation_kwargs"]["eos_token_id"] == [1, 0]  # stop at the end or the pad token, as verify reads
    assert runner.stop_token_ids_of(tiny_model / "sft") == [1, 0]  # what evaluate renders for this model
    tiny.render_tasks(data, out, k=2, families=["multiple"])  # stale family files go
    assert sorted(p.name for p in out.iterdir()) == ["brorl_tiny.yaml", "brorl_tiny_multiple.yaml", "utils.py"]


# ------------------------------------------------------------------------------------ (b) pass@k vs brute force

def _brute_pass_at(row: list[int], k: int) -> float:
    subsets = list(itertools.combinations(range(len(row)), k))
    return sum(any(row[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 9])
def test_pass_at_k_matches_brute_force(n):
    rng = np.random.default_rng(n)
    for trial in range(6):
        p = rng.uniform()
        matrix = (rng.uniform(size=(int(rng.integers(1, 7)), n)) < p).astype(int).tolist()
        got = sample_metrics(matrix)
        docs = [task_utils.doc_metrics(row) for row in matrix]
        for k in [2**i for i in range(8) if 2**i <= n]:
            want = float(np.mean([_brute_pass_at(row, k) for row in matrix]))
            assert got[f"pass_at_{k}"] == pytest.approx(want, abs=1e-12)
            assert np.mean([d[f"pass_at_{k}"] for d in docs]) == pytest.approx(want, abs=1e-12)
        assert got["mean_at_k"] == pytest.approx(np.mean(matrix), abs=1e-12)
        assert got["pass_at_1"] == pytest.approx(got["mean_at_k"], abs=1e-12)
        assert [d["mean_at_k"] for d in docs] == [float(np.mean(r)) for r in matrix]
        assert set(docs[0]) == {"mean_at_k"} | {f"pass_at_{k}" for k in [1, 2, 4, 8] if k <= n}
    # a known case: 2 of 4 correct -> pass@2 = 1 - C(2,2)/C(4,2) = 5/6
    assert task_utils.doc_metrics([1, 0, 1, 0])["pass_at_2"] == pytest.approx(5 / 6)


# --------------------------------------------------------------------------------------------------- (c) cache

def test_lm_eval_runs_without_torchs_environment_report(tiny_model, tmp_path, monkeypatch):
    """lm-eval's add_env_info runs torch's collect_env (pip and other programs, ~1 s per benchmark, two per tiny
    evaluate job); the runner records the versions instead, and puts lm-eval's own function back afterwards."""
    import lm_eval.evaluator
    import torch.utils.collect_env as collect_env

    # pytest's Failed is a BaseException: lm-eval's `except Exception` around the report would not swallow it
    monkeypatch.setattr(collect_env, "get_pretty_env_info", lambda: pytest.fail("torch's collect_env was run"))
    original = lm_eval.evaluator.add_env_info
    seen, real = [], runner._run_lm_eval
    monkeypatch.setattr(runner, "_run_lm_eval", lambda **kw: seen.append(real(**kw)) or seen[-1])
    out = runner.evaluate(tiny_model / "sft", "tiny_add", tiny_model / "data", None, k=2, seed=SEED,
                          batch_size=BATCH, threads=1, limit=4)
    assert len(out["samples"]) == 4
    assert seen[0]["pretty_env_info"] == runner.ENV_INFO_SKIPPED
    assert seen[0]["lm_eval_version"] == runner._version("lm_eval") is not None
    assert lm_eval.evaluator.add_env_info is original


def test_cache_serves_an_unchanged_model_and_re_evaluates_a_changed_one(tiny_model, tmp_path, monkeypatch):
    import torch
    from safetensors.torch import load_file, save_file

    root = tiny_model
    model = tmp_path / "model"
    shutil.copytree(root / "sft", model)
    cache = tmp_path / "cache"
    calls = []
    real = runner._run_lm_eval

    def counting(**kw):
        calls.append(kw["tasks"])
        return real(**kw)

    monkeypatch.setattr(runner, "_run_lm_eval", counting)
    kw = dict(k=K, seed=SEED, batch_size=BATCH, cache_dir=cache, threads=1)
    first = runner.evaluate(model, "tiny_add", root / "data", tmp_path / "a1.json", **kw)
    assert first["cached"] is False and len(calls) == 1
    entries = list(cache.rglob("*.json"))
    assert len(entries) == 1 and not list(cache.rglob("*.tmp"))

    # unchanged content (a training-only file and a timestamp touched): served from the cache, no lm-eval call
    (model / "training_info.json").write_text("{}\n")
    (model / ".snakemake_timestamp").write_text("")
    monkeypatch.setattr(runner, "_run_lm_eval", lambda **kw: pytest.fail("lm-eval called on a cache hit"))
    second = runner.evaluate(model, "tiny_add", root / "data", tmp_path / "a2.json", **kw)
    assert second["cached"] is True
    assert json.loads((tmp_path / "a2.json").read_text())["cached"] is True
    for key in ("model_hash", "task_hash", "metrics", "categories", "samples"):
        assert second[key] == first[key], key

    # another decoding setting is another task hash
    monkeypatch.setattr(runner, "_run_lm_eval", counting)
    other = runner.evaluate(model, "tiny_add", root / "data", None, **{**kw, "seed": SEED + 1})
    assert other["cached"] is False and other["task_hash"] != first["task_hash"] and len(calls) == 2
    assert other["model_hash"] == first["model_hash"]

    # changed weights at the same path: re-evaluated, with another model hash
    weights = load_file(str(model / "model.safetensors"))
    name = next(n for n in weights if "embed" in n)
    weights[name] = weights[name] + 0.5 * torch.randn_like(weights[name])
    save_file(weights, str(model / "model.safetensors"), metadata={"format": "pt"})
    third = runner.evaluate(model, "tiny_add", root / "data", tmp_path / "a3.json", **kw)
    assert third["cached"] is False and len(calls) == 3
    assert third["model_hash"] != first["model_hash"] and third["task_hash"] == first["task_hash"]
    assert [s["completions"] for s in third["samples"]] != [s["completions"] for s in first["samples"]]
    assert len(list(cache.rglob("*.json"))) == 3


def test_model_hash_covers_inference_files_only(tiny_model, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(tiny_model / "sft", model)
    h = runner.model_hash(model)
    (model / "optimizer.pt").write_bytes(b"state")
    (model / ".snakemake_timestamp").write_text("x")
    (model / "training_info.json").write_text("{}")
    assert runner.model_hash(model) == h
    cfg = json.loads((model / "config.json").read_text())
    cfg["rms_norm_eps"] = 1e-5
    (model / "config.json").write_text(json.dumps(cfg))
    assert runner.model_hash(model) != h
    with pytest.raises(FileNotFoundError):
        runner.model_hash(tmp_path / "missing")


# ---------------------------------------------------------------------------------- (d) garbage completions

def test_garbage_completions_score_zero_and_never_crash():
    doc = {"id": "add-test-0", "task": "add", "prompt": " 4+ 5=", "answer": "9", "answers": ["9"]}
    garbage = [None, 123, 9, 9.0, b"\xff\xfe", "", "<pad>", "<|endoftext|>9", "x" * 10_000, {"a": 1}, ["9"], "9 ",
               " 9", "\u0669", "9\x00", object()]
    m = task_utils.process_results(doc, [garbage])
    assert m["mean_at_k"] == 0.0 and all(v == 0.0 for v in m.values())
    assert set(m) == {"mean_at_k", "pass_at_1", "pass_at_2", "pass_at_4", "pass_at_8", "pass_at_16"}
    for bad_doc in ({}, None, {"answers": None}, {"answers": [None]}, "doc"):
        out = task_utils.process_results(bad_doc, [["9", "9<|endoftext|>", None]])
        assert all(v == 0.0 for v in out.values())
    for shape in ([], [[]], None, "9", ["9"], [["9"]]):  # odd result shapes
        out = task_utils.process_results(doc, shape)
        assert set(out) >= {"mean_at_k", "pass_at_1"}
    # a correct completion among garbage counts once; text after the end / pad token is ignored
    m = task_utils.process_results(doc, [[None, "9", "<pad>", "9<pad>17"]])
    assert m["mean_at_k"] == 0.5 and m["pass_at_4"] == 1.0


# ---------------------------------------------------------------------------------- (e) per-sample records

def test_per_sample_records(tiny_model, multiple_result):
    res = multiple_result
    records = read_jsonl(tiny_model / "data" / "multiple" / "test.jsonl")
    out = json.loads((tiny_model / "eval" / "multiple.json").read_text())
    assert out == res
    assert set(res) == RESULT_KEYS
    assert res["benchmark"] == "tiny_multiple" and res["lm_eval_task"] == "brorl_tiny_multiple"
    assert res["k"] == K and res["cached"] is False and res["lm_eval_version"] == "0.4.13"
    assert len(res["model_hash"]) == 64 and len(res["task_hash"]) == 64 and res["seconds"] > 0
    assert len(res["samples"]) == len(records) == 8
    for i, (s, rec) in enumerate(zip(res["samples"], records)):
        assert s["doc_id"] == i and s["id"] == rec["id"] and s["category"] == "multiple"
        assert len(s["completions"]) == K and len(s["correct"]) == K
        assert s["correct"] == [int(verify(rec, c)) for c in s["completions"]]
    assert set(res["metrics"]) == METRIC_KEYS
    assert res["metrics"] == sample_metrics([s["correct"] for s in res["samples"]])
    assert res["metrics"]["n_problems"] == 8 and res["metrics"]["n_samples"] == K
    assert res["categories"] == {"multiple": res["metrics"]}


def test_lm_eval_disagreement_is_an_error(tiny_model, multiple_result):
    """collect_results recomputes every score; a result whose lm-eval values disagree raises."""
    from brorl.evaluation.benchmarks import get_benchmark

    bench = get_benchmark("tiny_multiple")
    s0 = multiple_result["samples"][0]
    rec = read_jsonl(tiny_model / "data" / "multiple" / "test.jsonl")[0]
    per_doc = task_utils.doc_metrics(s0["correct"])
    fake = {"results": {"brorl_tiny_multiple": {f"{k},none": v for k, v in per_doc.items()}},
            "samples": {"brorl_tiny_multiple": [{"doc_id": 0, "doc": rec, "filtered_resps": [s0["completions"]],
                                                 "arguments": [(rec["prompt"], {})], **per_doc}]},
            "n-samples": {"brorl_tiny_multiple": {"effective": 1}}}
    assert runner.collect_results(fake, bench, K)["metrics"]["mean_at_k"] == per_doc["mean_at_k"]
    bad = json.loads(json.dumps(fake))
    bad["results"]["brorl_tiny_multiple"]["pass_at_2,none"] += 0.01
    with pytest.raises(RuntimeError, match="aggregated pass_at_2"):
        runner.collect_results(bad, bench, K)
    bad = json.loads(json.dumps(fake))
    bad["samples"]["brorl_tiny_multiple"][0]["mean_at_k"] = 1.0 - per_doc["mean_at_k"]
    with pytest.raises(RuntimeError, match="mean_at_k"):
        runner.collect_results(bad, bench, K)
    bad = json.loads(json.dumps(fake))
    bad["samples"]["brorl_tiny_multiple"][0]["filtered_resps"] = [s0["completions"][:1]]
    with pytest.raises(RuntimeError, match="take_first_k"):
        runner.collect_results(bad, bench, K)


def test_vllm_backend_reaches_lm_eval_with_its_model_args(tiny_model, tmp_path, monkeypatch):
    """The paper profile's path (no GPU or vLLM here): evaluate hands lm-eval ``model="vllm"`` and the extra
    model_args; an unknown backend is refused."""
    root = tiny_model
    seen = {}

    def fake(**kw):
        seen.update(kw)
        raise RuntimeError("stop: no vLLM here")

    monkeypatch.setattr(runner, "_run_lm_eval", fake)
    with pytest.raises(RuntimeError, match="no vLLM"):
        runner.evaluate(root / "sft", "tiny_add", root / "data", None, k=K, seed=SEED, batch_size=BATCH,
                        backend="vllm", backend_args={"tensor_parallel_size": 2, "gpu_memory_utilization": 0.8})
    assert seen["model"] == "vllm"
    assert seen["model_args"]["tensor_parallel_size"] == 2 and seen["model_args"]["pretrained"].endswith("sft")
    with pytest.raises(ValueError, match="backend"):
        runner.evaluate(root / "sft", "tiny_add", root / "data", None, backend="sglang")
