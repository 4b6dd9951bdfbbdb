"""The memory plan (brorl.training.memory): its formulas on hand-computed cases, the config check's refusal of an arm
that cannot fit (naming the keys, with its table), config/paper.yaml passing it, `brorl memory-plan`, and
rl.recipe.gradient_checkpointing reaching TRL's GRPOConfig."""

import copy
import importlib.util
import json
import subprocess
import sys

import pytest
import yaml

from brorl.config import PROJECT_ROOT, ConfigError
from brorl.pipeline import load_config, run_memory_plan, validate_config
from brorl.training.memory import (HEAD_FOLD_TEMPORARIES, Architecture, TrainSetting, arm_plans,
                                   checkpointing_errors, layer_activation_bytes, memory_plan_errors, training_terms)
from brorl.training.settings import RLSettings

PAPER = PROJECT_ROOT / "config" / "paper.yaml"
# h 4, 2 heads of 2 (head_dim 2), 1 KV head, MLP 8, vocab 16, 2 layers: small enough to count by hand
TOY = Architecture(hidden_size=4, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                   intermediate_size=8, vocab_size=16, attention_bias=True)


def test_the_paper_checkpoint_has_1_777_billion_parameters_and_28_kib_of_kv_per_token():
    arch = Architecture.from_file("benchmarks/qwen2_1p5b.yaml")
    # embedding and LM head 151,936 x 1,536 each; per layer q 1536^2 + 1536, k and v 1536 x 256 + 256, o 1536^2,
    # MLP 3 x 1536 x 8960, two norms 2 x 1536; the final norm 1536
    layer = 1536 * 1536 + 1536 + 2 * (1536 * 256 + 256) + 1536 * 1536 + 3 * 1536 * 8960 + 2 * 1536
    assert layer == 46_797_824 and arch.layer_params == layer
    assert arch.params == 2 * 151_936 * 1536 + 28 * layer + 1536 == 1_777_088_000
    assert arch.kv_bytes_per_token == 28 * 2 * 2 * 128 * 2 == 28_672


def test_layer_activations_counted_by_hand():
    # fp32 (a = 4): norms 2 x (4h + 2ah + 4) = 2 x (16 + 32 + 4) = 104; attention 5ah + 4 x heads = 80 + 8 = 88;
    # MLP 4ai = 128
    assert layer_activation_bytes(TOY, 4) == 104 + 88 + 128 == 320
    # bf16 (a = 2): norms 2 x (16 + 16 + 4) = 72; attention 40 + 8 = 48; MLP 64
    assert layer_activation_bytes(TOY, 2) == 72 + 48 + 64 == 184


def test_training_terms_by_hand_with_and_without_checkpointing():
    P = TOY.params  # 16*4 + 2 layers + 4 + 16*4
    assert P == 64 + 2 * (4 * 4 + 4 + 2 * (4 * 2 + 2) + 4 * 4 + 3 * 4 * 8 + 8) + 4 + 64 == 452
    s = TrainSetting(micro_batch=2, seq_len=8, checkpointing=False)  # T = 16 tokens, fp32, one process
    t = training_terms(TOY, s)
    assert (t["weights"], t["gradients"], t["optimizer"], t["reference_model"], t["fsdp_buffers"]) == \
        (4 * P, 4 * P, 8 * P, 0, 0)
    final = 16 * (4 * 4 + 3 * 4 * 4)  # final norm's fp32 input, normalised x, output; the head's hidden copy
    mask = 2 * 8 * 8  # the 4-D boolean mask: micro x seq^2 bytes
    assert t["activations"] == 2 * 16 * 320 + final + mask
    head_tile = 16 * 16 * 4  # min(T, 4096) x min(V, 32768) x 4 B
    head = 16 * 4 * 4 + 16 * 4 * 4 + head_tile + HEAD_FOLD_TEMPORARIES * head_tile  # grad hidden, grad head, tiles
    layer = 16 * 4 * (3 * 8 + 2 * 4)  # one layer's gradients in flight
    assert t["backward_transient"] == max(head, layer) == head
    assert t["peak"] == 16 * P + t["activations"] + t["backward_transient"]
    assert t["optimizer_step_transient"] == 16 * 4 * 4  # the CPU's AdamW: a temporary of the largest parameter

    ck = training_terms(TOY, TrainSetting(micro_batch=2, seq_len=8, checkpointing=True))
    assert ck["activations"] == 2 * 16 * 4 * 4 + final + mask  # a layer keeps only its input
    assert ck["backward_transient"] == max(head, 16 * 320 + layer)  # the recomputed layer + its gradients
    assert ck["peak"] < t["peak"]
    # a per-layer additive copy of the mask (micro x seq^2 x a): every layer keeps one, or the recomputed layer
    fm = training_terms(TOY, TrainSetting(micro_batch=2, seq_len=8, checkpointing=False, float_mask=True))
    assert fm["activations"] == t["activations"] + 2 * 2 * 8 * 8 * 4
    fm = training_terms(TOY, TrainSetting(micro_batch=2, seq_len=8, checkpointing=True, float_mask=True))
    assert fm["backward_transient"] == max(head, 16 * 320 + 2 * 8 * 8 * 4 + layer)


def test_sharding_divides_the_static_terms_and_adds_fsdp_buffers():
    one = training_terms(TOY, TrainSetting(micro_batch=1, seq_len=4, checkpointing=True, bf16=True, triton=True))
    eight = training_terms(TOY, TrainSetting(micro_batch=1, seq_len=4, checkpointing=True, bf16=True, triton=True,
                                             shards=8, reference_model=True))
    assert eight["weights"] == -(-4 * TOY.params // 8) and eight["optimizer"] == -(-8 * TOY.params // 8)
    assert eight["reference_model"] == -(-2 * TOY.params // 8)  # frozen, in bf16
    assert eight["fsdp_buffers"] == 2 * TOY.layer_params * 2 * 2 + 16 * 4 * 2 and one["fsdp_buffers"] == 0
    assert eight["optimizer_step_transient"] == 16 * 4 * 4  # the largest parameter (foreach off)
    foreach = training_terms(TOY, TrainSetting(micro_batch=1, seq_len=4, checkpointing=True, shards=8, foreach=True))
    assert foreach["optimizer_step_transient"] == -(-4 * TOY.params // 8)  # foreach (CUDA): all local parameters
    assert one["activations"] == eight["activations"]


@pytest.fixture(scope="module")
def paper():
    return load_config(PAPER)


def test_the_paper_profile_passes_its_memory_plan(paper):
    plans = arm_plans(paper)
    assert [p.arm for p in plans] == ["n16", "n512"]
    for p in plans:
        assert p.fits and p.total <= 79.1
        assert p.setting.checkpointing and p.setting.micro_batch == 4 and p.setting.seq_len == 2048 + 16384
        assert p.setting.shards == 8 and p.setting.bf16 and p.setting.reference_model


def _with(config, **recipe):
    c = copy.deepcopy(config)
    c["rl"]["recipe"].update(recipe)
    return c


def test_an_arm_that_cannot_fit_is_refused_naming_the_keys_with_its_table(paper):
    bad = _with(paper, micro_batch_size=8, gradient_checkpointing=False)  # the profile before issue 27
    with pytest.raises(ConfigError) as err:
        validate_config(bad)
    text = str(err.value)
    for key in ("rl.memory_plan: arm n16", "rl.recipe.micro_batch_size", "rl.recipe.gradient_checkpointing",
                "rl.recipe.vllm_gpu_memory_utilization", "rl.memory_plan.gpu_memory_gib", "| activations |",
                "| total per GPU |", "checkpointing off"):
        assert key in text
    assert memory_plan_errors(_with(paper, micro_batch_size=16, gradient_checkpointing=True))  # 119 GiB > 79.1


def test_a_vllm_share_without_room_for_one_sequence_is_refused(paper):
    errors = memory_plan_errors(_with(paper, vllm_gpu_memory_utilization=0.08))  # 6.3 GiB: weights + overhead
    assert len(errors) == 2 and "cannot hold one sequence of 18432 tokens" in errors[0]
    assert "rl.recipe.vllm_max_model_length" in errors[0]


def test_a_sequence_longer_than_vllms_context_is_refused(paper):
    c = copy.deepcopy(paper)
    c["rl"]["memory_plan"]["prompt_tokens"] = 4096
    errors = memory_plan_errors(c)
    assert errors and "20480 tokens is more than rl.recipe.vllm_max_model_length = 18432" in errors[0]


def test_a_profile_without_gpus_has_no_plan():
    assert memory_plan_errors(load_config(PROJECT_ROOT / "config" / "config.yaml")) == []


def test_a_missing_architecture_file_is_named(paper):
    c = copy.deepcopy(paper)
    c["rl"]["memory_plan"]["architecture"] = "benchmarks/nope.yaml"
    (error,) = memory_plan_errors(c)
    assert error.startswith("rl.memory_plan: no such file") and "nope.yaml" in error


def test_fsdp_activation_checkpointing_is_refused_beside_the_recipe_key(tmp_path):
    assert checkpointing_errors({"launch": {"accelerate_config": "fsdp2"}}) == []  # the shipped file keeps it off
    shipped = yaml.safe_load((PROJECT_ROOT / "workflow" / "accelerate" / "fsdp2.yaml").read_text())
    assert shipped["fsdp_config"]["fsdp_activation_checkpointing"] is False
    shipped["fsdp_config"]["fsdp_activation_checkpointing"] = True
    path = tmp_path / "fsdp2_ac.yaml"
    path.write_text(yaml.safe_dump(shipped))
    (error,) = checkpointing_errors({"launch": {"accelerate_config": str(path)}})
    assert "fsdp_activation_checkpointing: true" in error and "rl.recipe.gradient_checkpointing" in error


def test_gradient_checkpointing_reaches_the_grpo_config(tmp_path):
    from brorl.training.stage import grpo_config

    for on in (True, False):
        s = RLSettings(n_rollouts=4, prompts_per_step=2, steps=1, gradient_checkpointing=on)
        assert grpo_config(s, tmp_path / str(on), 8).gradient_checkpointing is on
    assert RLSettings.from_dict({"gradient_checkpointing": True}).gradient_checkpointing is True


def test_switching_checkpointing_keeps_a_stage_resumable():
    """Checkpointing changes memory, not the policy: an arm stopped for memory and restarted with it on resumes its
    work folder (the stage's settings key leaves it out, as threads)."""
    from brorl.training.stage import _settings_key

    on, off = (RLSettings(n_rollouts=4, prompts_per_step=2, steps=1, gradient_checkpointing=x) for x in (True, False))
    assert _settings_key(on) == _settings_key(off)
    assert _settings_key(on) != _settings_key(RLSettings(n_rollouts=4, prompts_per_step=2, steps=2))


def test_cli_prints_the_tables_and_fails_for_an_arm_that_cannot_fit(tmp_path, capsys):
    assert run_memory_plan([str(PAPER)]) == 0
    out = capsys.readouterr().out
    assert out.count("fits") == 2 and "| total per GPU | 61.69 |" in out
    overlay = tmp_path / "big.yaml"
    overlay.write_text("rl:\n  recipe:\n    micro_batch_size: 16\n")
    assert run_memory_plan([str(PAPER), str(overlay)]) == 1
    out = capsys.readouterr().out
    assert "arm n16: DOES NOT FIT" in out and "micro 16 x 18432 tokens" in out
    proc = subprocess.run([sys.executable, "-m", "brorl.cli", "memory-plan", "--configfile", str(PAPER)],
                          capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert proc.returncode == 0 and "arm n512: fits" in proc.stdout, proc.stderr


@pytest.mark.slow
def test_the_plan_is_within_ten_percent_of_a_measured_cpu_peak(tmp_path):
    """One case of benchmarks/memory_plan_check.py (a 7M-parameter Qwen2, 2 x 256 tokens, fp32): the peak RSS
    of a forward + backward + AdamW step + a second forward + backward in a child process."""
    spec = importlib.util.spec_from_file_location("memory_plan_check",
                                                  PROJECT_ROOT / "benchmarks" / "memory_plan_check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    row = check.run_case("qwen2-7m", 256, False, threads=1)
    assert row["measured_mib"] > 100 and abs(row["error_pct"]) < 10, json.dumps(row)


def test_gradient_checkpointing_gives_the_same_update_on_a_real_step(tmp_path):
    """One BroRLTrainer step on a tiny SFT model with checkpointing on and off: the same rollouts (same seed) and
    the same gradients (checkpointing recomputes, it does not change the update); the model checkpoints when on."""
    import torch
    from datasets import Dataset
    from test_training import SFT, TASKS
    from transformers import AutoTokenizer, TrainerCallback

    from brorl.models import train_sft
    from brorl.tasks import write_splits
    from brorl.tasks.core import format_prompt, read_split
    from brorl.training.stage import grpo_config, make_reward
    from brorl.training.trainer import BroRLTrainer

    torch.set_num_threads(1)
    write_splits(tmp_path / "data", TASKS)
    train_sft(tmp_path / "data", tmp_path / "sft", SFT, TASKS, progress=False)
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "sft"), local_files_only=True)
    records = read_split(tmp_path / "data", "train")
    dataset = Dataset.from_dict({"prompt": [format_prompt(tok, r) for r in records],
                                 "record_index": list(range(len(records)))})

    def one_step(on: bool):
        s = RLSettings(n_rollouts=8, prompts_per_step=4, steps=1, max_rounds=1, micro_batch_size=8, eta0=1e-3,
                       b0=32, probe_every=0, threads=1, gradient_checkpointing=on)
        trainer = BroRLTrainer(model=str(tmp_path / "sft"), reward_funcs=make_reward(records, tok),
                               args=grpo_config(s, tmp_path / f"ck{on}", 6), train_dataset=dataset,
                               processing_class=tok, settings=s)
        grads = {}

        class Grab(TrainerCallback):
            def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
                grads.update({k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None})

        trainer.add_callback(Grab())
        trainer.train()
        return grads, trainer.model.is_gradient_checkpointing

    on, checkpointed = one_step(True)
    off, plain = one_step(False)
    assert checkpointed and not plain
    assert on.keys() == off.keys() and on
    for k in on:
        assert torch.allclose(on[k], off[k], atol=1e-6), k
