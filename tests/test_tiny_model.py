"""The tiny model folder: offline loading, tokenizer round trip, exact answer probabilities against
Monte-Carlo sampling, resumable SFT, the difficulty estimate and lm-eval's hf backend."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import json  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from brorl.models import (BINS, candidate_probabilities, difficulty_histogram, estimate_difficulty,  # noqa: E402
                          exact_answer_probability, hf_generate_token_ids, load_model, plot_difficulty,
                          sample_token_ids, train_sft)
from brorl.models import sft as sft_module  # noqa: E402
from brorl.models.scoring import encode  # noqa: E402
from brorl.tasks import (enumerate_candidates, format_prompt, max_new_tokens, read_split, verify,  # noqa: E402
                         write_splits)

TASKS = {"tasks": ["add", "multiple"], "train_size": 64, "validation_size": 40, "test_size": 20,
         "probe_train_size": 16, "probe_validation_size": 8, "probe_test_size": 8, "seed": 11,
         "add_max_digits": 2}
SFT = {"model": {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "intermediate_size": 128},
       "max_steps": 300, "batch_size": 64, "lr": 5e-3, "warmup_steps": 10, "eval_every": 100,
       "select_rule": "target", "select_target": 2.0, "max_seconds": 0, "checkpoint_every": 100, "threads": 1, "log_every": 100}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("tiny")
    write_splits(root / "data", TASKS)
    metrics = train_sft(root / "data", root / "sft", SFT, TASKS)
    return root, metrics


@pytest.fixture(scope="module")
def loaded(trained):
    root, _ = trained
    return load_model(root / "sft")


def test_folder_loads_offline_with_auto_classes(trained):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root, metrics = trained
    path = root / "sft"
    names = {p.name for p in path.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja",
            "generation_config.json", "training_info.json"} <= names
    assert not (root / "sft.state").exists(), "state folder is removed after success"
    assert not [p for p in root.iterdir() if ".tmp" in p.name or ".old" in p.name]
    gen = json.loads((path / "generation_config.json").read_text())
    assert "max_new_tokens" not in gen and "max_length" not in gen
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert tok.eos_token == "<|endoftext|>" and tok.pad_token == "<pad>" and tok.pad_token_id != tok.eos_token_id
    assert metrics["steps"] == SFT["max_steps"] and metrics["selected_step"] % SFT["eval_every"] == 0
    info = json.loads((path / "training_info.json").read_text())
    assert [h["step"] for h in info["history"]] == [0, 100, 200, 300]
    assert 20_000 < metrics["n_params"] < 200_000
    assert 0.0 <= metrics["val_pass1"] <= 1.0


def test_token_ids_round_trip_through_saved_tokenizer_json(trained, loaded):
    from tokenizers import Tokenizer

    root, _ = trained
    _, tok = loaded
    raw = Tokenizer.from_file(str(root / "sft" / "tokenizer.json"))
    recs = read_split(root / "data", "validation")
    for rec in recs[:20] + recs[-5:]:
        text = format_prompt(tok, rec)
        assert text == rec["prompt"], "chat template renders a user turn as its bare text"
        ids = tok(text + rec["answer"], add_special_tokens=False)["input_ids"]
        assert ids == raw.encode(text + rec["answer"], add_special_tokens=False).ids
        assert len(ids) == len(text) + len(rec["answer"]), "one token per character"
        assert tok.decode(ids) == text + rec["answer"]
        assert raw.decode(ids) == text + rec["answer"]
    chat = tok.apply_chat_template([{"role": "user", "content": "  1+2="}, {"role": "assistant", "content": "3"}],
                                   tokenize=False)
    assert chat == "  1+2=3<|endoftext|>"


def _pick(q, k):
    order = np.argsort(np.abs(q - 0.4))
    return order[:k]


def test_exact_answer_probability_matches_sampling(trained, loaded):
    root, _ = trained
    model, tok = loaded
    recs = [r for r in read_split(root / "data", "validation") if r["task"] == "add"]
    q = exact_answer_probability(model, tok, recs)
    assert q.shape == (len(recs),) and np.all((q >= 0) & (q <= 1))
    # batched scoring equals one-by-one scoring
    q1 = np.array([exact_answer_probability(model, tok, [r])[0] for r in recs[:5]])
    np.testing.assert_allclose(q[:5], q1, rtol=1e-5, atol=1e-9)
    pick = _pick(q, 6)
    chosen = [recs[i] for i in pick]
    n = 3000
    prompt_ids = [encode(tok, format_prompt(tok, r)) for r in chosen]
    ids = sample_token_ids(model, prompt_ids, n, max_new_tokens(tasks=["add"]), tok.eos_token_id, tok.pad_token_id,
                           seed=123, chunk_samples=1024)
    rates, pass4 = [], []
    for rec, block, qi in zip(chosen, ids, q[pick]):
        ok = np.array([verify(rec, t) for t in tok.batch_decode(block.tolist(), skip_special_tokens=False)])
        rate = ok.mean()
        sigma = np.sqrt(max(qi * (1 - qi), 1e-4) / n)
        assert abs(rate - qi) < 4.5 * sigma + 2e-3, (rec["prompt"], rate, qi)
        rates.append(rate)
        pass4.append(ok.reshape(-1, 4).max(axis=1).mean())
    # pass@k = 1 - (1 - Q_pos)^k, averaged over prompts
    np.testing.assert_allclose(np.mean(pass4), np.mean(1 - (1 - q[pick]) ** 4), atol=0.03)
    # HF generate (no prefix sharing, pure temperature sampling) agrees too
    rec, qi = chosen[0], q[pick][0]
    hf = hf_generate_token_ids(model, prompt_ids[:1], 2000, max_new_tokens(tasks=["add"]), tok.eos_token_id,
                               tok.pad_token_id, seed=5)[0]
    rate = np.mean([verify(rec, t) for t in tok.batch_decode(hf.tolist(), skip_special_tokens=False)])
    assert abs(rate - qi) < 4.5 * np.sqrt(max(qi * (1 - qi), 1e-4) / 2000) + 2e-3


def test_probe_candidate_probabilities(trained, loaded):
    root, _ = trained
    model, tok = loaded
    rec = [r for r in read_split(root / "data", "validation") if r["task"] == "multiple"][0]
    cands = enumerate_candidates(rec)
    p = candidate_probabilities(model, tok, rec)
    assert p.shape == (len(cands),) and 0 < p.sum() <= 1 + 1e-6
    correct = np.array([c in set(rec["answers"]) for c in cands])
    np.testing.assert_allclose(p[correct].sum(), exact_answer_probability(model, tok, [rec])[0], rtol=1e-5)
    n = 4000
    ids = sample_token_ids(model, [encode(tok, format_prompt(tok, rec))], n, max_new_tokens(tasks=["multiple"]),
                           tok.eos_token_id, tok.pad_token_id, seed=7)[0]
    texts = [t.split(tok.eos_token)[0] if tok.eos_token in t else None
             for t in tok.batch_decode(ids.tolist(), skip_special_tokens=False)]
    index = {c: i for i, c in enumerate(cands)}
    counts = np.bincount([index[t] for t in texts if t in index], minlength=len(cands))
    top = np.argsort(-p)[:3]
    for i in top:
        assert abs(counts[i] / n - p[i]) < 4.5 * np.sqrt(p[i] * (1 - p[i]) / n) + 2e-3
    assert abs(counts.sum() / n - p.sum()) < 4.5 * np.sqrt(p.sum() * (1 - p.sum()) / n) + 2e-3


def test_sft_resumes_after_a_crash_to_the_same_weights(tmp_path, trained, monkeypatch):
    root, _ = trained
    settings = {**SFT, "max_steps": 40, "eval_every": 20, "checkpoint_every": 10}
    train_sft(root / "data", tmp_path / "ref", settings, TASKS, progress=False)
    original = sft_module.ExampleStream.batch

    def crashing(self, step):
        if step == 25:
            raise KeyboardInterrupt("simulated kill")
        return original(self, step)

    monkeypatch.setattr(sft_module.ExampleStream, "batch", crashing)
    with pytest.raises(KeyboardInterrupt):
        train_sft(root / "data", tmp_path / "run", settings, TASKS, progress=False)
    assert not (tmp_path / "run").exists() and (tmp_path / "run.state" / "state.pt").exists()
    monkeypatch.setattr(sft_module.ExampleStream, "batch", original)
    metrics = train_sft(root / "data", tmp_path / "run", settings, TASKS, progress=False)
    assert metrics["steps"] == 40 and not (tmp_path / "run.state").exists()
    a, _ = load_model(tmp_path / "ref")
    b, _ = load_model(tmp_path / "run")
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        torch.testing.assert_close(x, y, rtol=0, atol=1e-6, msg=name)


def test_estimate_difficulty_and_plot(tmp_path, trained):
    root, _ = trained
    recs = read_split(root / "data", "validation")[:12] + read_split(root / "data", "validation")[-3:]
    df = estimate_difficulty(root / "sft", recs, samples=64, seed=1, threads=1, progress=False)
    assert len(df) == 15 and {"id", "task", "pass_rate", "q_pos_exact", "n_correct", "samples"} <= set(df)
    assert df["pass_rate"].between(0, 1).all() and (df["samples"] == 64).all()
    assert abs(df["pass_rate"].mean() - df["q_pos_exact"].mean()) < 0.1
    hist = difficulty_histogram(df)
    assert list(hist["group"]) == ["all", "add", "multiple"]
    np.testing.assert_allclose(hist[list(BINS)].sum(axis=1), 1.0)
    shares = plot_difficulty(df, tmp_path / "hist.png")
    assert (tmp_path / "hist.png").stat().st_size > 5_000
    assert abs(sum(shares[b] for b in BINS) - 1) < 1e-9


def test_runs_in_lm_eval_hf_backend(tmp_path, trained, loaded):
    import lm_eval
    from lm_eval.tasks import TaskManager

    root, _ = trained
    model, tok = loaded
    recs = [r for r in read_split(root / "data", "validation") if r["task"] == "add"]
    q = exact_answer_probability(model, tok, recs)
    recs = [recs[i] for i in np.argsort(-q)[:16]]  # the likeliest first, so some greedy answers are right
    data = tmp_path / "tiny_add.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in recs))
    task_dir = tmp_path / "tasks"
    task_dir.mkdir()
    (task_dir / "tiny_add.yaml").write_text(f"""task: tiny_add
dataset_path: json
dataset_kwargs:
  data_files: {json.dumps(str(data.resolve()))}
test_split: train
output_type: generate_until
doc_to_text: "{{{{prompt}}}}"
doc_to_target: "{{{{answer}}}}"
target_delimiter: ""
generation_kwargs:
  until: ["<|endoftext|>"]
  do_sample: false
  max_gen_toks: {max_new_tokens()}
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
""")
    path = str(root / "sft")
    out = lm_eval.simple_evaluate(model="hf", model_args=f"pretrained={path},tokenizer={path},dtype=float32",
                                  tasks=["tiny_add"], task_manager=TaskManager(include_path=str(task_dir),
                                                                               include_defaults=False),
                                  batch_size=8, device="cpu", log_samples=True)
    score = out["results"]["tiny_add"]["exact_match,none"]
    samples = out["samples"]["tiny_add"]
    assert len(samples) == len(recs) and 0.0 <= score <= 1.0
    by_prompt = {r["prompt"]: r for r in recs}
    responses, mine = [], []
    for s in samples:
        rec = by_prompt[s["doc"]["prompt"]]
        assert s["arguments"][0][0] == rec["prompt"]
        resp = s["filtered_resps"][0]
        responses.append(resp)
        mine.append(verify(rec, resp))
    print(f"lm-eval exact_match {score:.3f} on {len(recs)} prompts")
    assert np.mean(mine) == pytest.approx(score)
    # our own greedy decoding gives the same strings
    prompt_ids = [encode(tok, format_prompt(tok, by_prompt[s["doc"]["prompt"]])) for s in samples]
    greedy = sample_token_ids(model, prompt_ids, 1, max_new_tokens(), tok.eos_token_id, tok.pad_token_id,
                              temperature=0.0)
    ours = [tok.decode(g[0].tolist(), skip_special_tokens=True) for g in greedy]
    assert np.mean([a == b for a, b in zip(ours, responses)]) >= 0.9


def test_checkpoint_selection_rules():
    from brorl.models.settings import SFTSettings
    from brorl.models.sft import _rank, _should_stop

    tail = SFTSettings()  # max_tail within the (0.25, 0.40) band
    evals = [(0.10, 0.60), (0.26, 0.30), (0.31, 0.20), (0.38, 0.25), (0.45, 0.05)]
    assert min(evals, key=lambda e: _rank(*e, tail)) == (0.26, 0.30)
    assert [_should_stop(v, tail) for v, _ in evals] == [False, False, False, False, True]
    target = SFTSettings(select_rule="target")
    assert min(evals, key=lambda e: _rank(*e, target)) == (0.31, 0.20)
    assert [_should_stop(v, target) for v, _ in evals] == [False, False, True, True, True]
    # nothing in band: the value nearest a band edge
    assert min([(0.10, 0.6), (0.60, 0.0)], key=lambda e: _rank(*e, tail)) == (0.10, 0.6)
    assert min([(0.10, 0.6), (0.45, 0.0)], key=lambda e: _rank(*e, tail)) == (0.45, 0.0)
    with pytest.raises(ValueError):
        SFTSettings(select_rule="best")
    with pytest.raises(ValueError, match="unknown SFT settings"):
        SFTSettings.from_dict({"lr": 1e-3, "learning_rate": 1e-3})
    s = SFTSettings.from_dict({"model": {"hidden_size": 64}, "select_band": [0.2, 0.3], "betas": [0.9, 0.95]})
    assert s.model.hidden_size == 64 and s.select_band == (0.2, 0.3) and s.betas == (0.9, 0.95)
    assert SFTSettings.from_dict(s.to_dict()) == s
