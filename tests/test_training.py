"""The RL training core (brorl.training): the paper's formulas against hand computations, TRL's
``scale_rewards="batch"`` against REINFORCE++-baseline (with TRL's own code), dynamic sampling, the stage
runner (metrics.csv, HF folder) and SIGKILL resume."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import json  # noqa: E402
import math  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from brorl.training import RLSettings  # noqa: E402
from brorl.training.trainer import (clipped_surrogate, dynamic_sampling, group_has_signal, k2_kl,  # noqa: E402
                                    learning_rate, reinforce_pp_advantages)

TASKS = {"tasks": ["add", "multiple"], "train_size": 64, "validation_size": 24, "test_size": 8,
         "probe_train_size": 16, "probe_validation_size": 8, "probe_test_size": 8, "seed": 5, "add_max_digits": 2}
SFT = {"model": {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64},
       "max_steps": 240, "batch_size": 64, "lr": 1e-2, "warmup_steps": 10, "eval_every": 80,
       "select_target": 2.0, "max_seconds": 0, "checkpoint_every": 1000, "threads": 1, "log_every": 1000}
RL = {"n_rollouts": 8, "prompts_per_step": 4, "steps": 3, "probe_every": 2, "checkpoint_every": 2,
      "micro_batch_size": 16, "eta0": 1e-3, "b0": 32, "max_rounds": 3, "threads": 1}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny SFT model (21k parameters, a few seconds) and its task data."""
    from brorl.models import train_sft
    from brorl.tasks import write_splits

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("rl")
    write_splits(root / "data", TASKS)
    train_sft(root / "data", root / "sft", SFT, TASKS, progress=False)
    return root


# --------------------------------------------------------------------------------------- advantages

def test_reinforce_pp_advantages_match_hand_computation():
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 0, 0])  # two groups of N=4
    # R~ = [.75 -.25 -.25 -.25 | .5 .5 -.5 -.5]; mean 0; unbiased std = sqrt(1.75 / 7) = 0.5
    expected = torch.tensor([1.5, -0.5, -0.5, -0.5, 1.0, 1.0, -1.0, -1.0])
    assert torch.allclose(reinforce_pp_advantages(rewards, 4, eps=0.0), expected)
    # insensitive to the reward scale / offset (the ProRLv2 post: 0/1 vs -1/1)
    assert torch.allclose(reinforce_pp_advantages(2 * rewards - 1, 4, eps=0.0), expected)


def test_trl_scale_rewards_batch_is_not_reinforce_pp(tiny):
    """TRL's scale_rewards="batch" = (R - mean_group R) / std(R over the whole generation batch): the std of the
    raw rewards, before any filtering (zero-variance groups included). REINFORCE++-baseline divides by the std
    of R - mean_group R over the kept batch. Shown by running TRL's own _generate_and_score_completions."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    scripted = [1.0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0]  # groups: mixed | all correct | mixed

    def scripted_reward(prompts, completions, **kw):
        return scripted[: len(prompts)]

    tok = AutoTokenizer.from_pretrained(str(tiny / "sft"), local_files_only=True)
    args = GRPOConfig(output_dir=str(tiny / "trl_out"), num_generations=4, per_device_train_batch_size=12,
                      max_completion_length=4, scale_rewards="batch", beta=0.0, report_to="none", bf16=False,
                      use_cpu=True, gradient_checkpointing=False, disable_tqdm=True)
    trainer = GRPOTrainer(model=str(tiny / "sft"), reward_funcs=scripted_reward, args=args,
                          train_dataset=Dataset.from_dict({"prompt": ["1+2=", "3+4=", "5+6="]}),
                          processing_class=tok)
    trainer.model.train()
    rows = [{"prompt": p} for p in ("1+2=", "3+4=", "5+6=") for _ in range(4)]
    trl_adv = trainer._generate_and_score_completions(rows)["advantages"]

    r = torch.tensor(scripted)
    centred = r - r.view(3, 4).mean(1).repeat_interleave(4)
    assert torch.allclose(trl_adv, centred / (r.std() + 1e-4), atol=1e-6)  # std of raw R, all 12 samples
    assert torch.all(trl_adv[4:8] == 0)  # the zero-variance group stays in the batch with A = 0

    kept = torch.cat([r[:4], r[8:]])  # dynamic sampling drops the all-correct group
    ours = reinforce_pp_advantages(kept, 4, eps=0.0)
    trl_kept = torch.cat([trl_adv[:4], trl_adv[8:]])
    assert not torch.allclose(ours, trl_kept, atol=1e-3)
    ratio = ours / trl_kept  # the two differ by one per-batch factor: std(R) / std_kept(R~)
    assert torch.allclose(ratio, ratio[0].expand_as(ratio), atol=1e-4)
    assert ratio[0].item() == pytest.approx((r.std() / torch.cat([centred[:4], centred[8:]]).std()).item(),
                                            rel=1e-3)


# --------------------------------------------------------------------------------------- dynamic sampling

def _scripted_rounds(rounds):
    """Round r returns the scripted rewards rounds[r] (its first `size` groups); records (r, size)."""
    calls = []

    def generate_round(r, size):
        calls.append((r, size))
        rewards = torch.tensor(rounds[r][:size], dtype=torch.float32)
        return rewards, [f"r{r}g{g}" for g in range(len(rewards))]

    return generate_round, calls


def test_group_filter_drops_zero_variance_groups():
    rewards = torch.tensor([[0.0, 0, 0], [1, 1, 1], [0, 1, 0], [0.5, 0.5, 0.5], [1, 0, 1]])
    assert group_has_signal(rewards).tolist() == [False, False, True, False, True]


def test_dynamic_sampling_refills_until_the_batch_is_full():
    rounds = [[[0, 0], [1, 0], [1, 1]],  # 1 of 3 groups has signal
              [[0, 1], [0, 0], [1, 0], [1, 0]]]  # 3 of 4: the batch (needed = 3) is full after this round
    gen, calls = _scripted_rounds(rounds)
    res = dynamic_sampling(gen, needed=3, max_rounds=10, round_prompts=4)  # DAPO: full-size refills
    assert calls == [(0, 3), (1, 4)]
    assert res.kept == ["r0g1", "r1g0", "r1g2"]  # extra kept groups are discarded (DAPO)
    assert res.filler == [] and res.rounds == 2
    assert (res.generated_groups, res.passing_groups) == (7, 4)
    assert res.pass_rate == pytest.approx(4 / 7)


def test_dynamic_sampling_adaptive_refill_size():
    # 3 of 4 pass in round 0 -> 1 missing at pass rate 3/4 -> refill ceil(1 / 0.75) = 2 prompts
    rounds = [[[0, 1], [1, 0], [0, 0], [1, 0]], [[0, 0], [0, 0], [1, 0]], [[0, 1], [1, 0], [1, 0], [1, 0]]]
    gen, calls = _scripted_rounds(rounds)
    res = dynamic_sampling(gen, needed=4, max_rounds=10)
    # round 1 (2 prompts) has no signal -> rate 3/6, 1 missing -> 2 prompts again
    assert calls == [(0, 4), (1, 2), (2, 2)]
    assert res.kept == ["r0g0", "r0g1", "r0g3", "r2g0"] and res.pass_rate == pytest.approx(5 / 8)


def test_dynamic_sampling_respects_the_round_cap():
    rounds = [[[0, 0], [1, 1]], [[0, 1], [0, 0]], [[1, 0], [1, 0]]]
    gen, calls = _scripted_rounds(rounds)
    res = dynamic_sampling(gen, needed=2, max_rounds=2)
    assert calls == [(0, 2), (1, 2)] and res.rounds == 2
    assert res.kept == ["r1g0"]
    assert res.filler == ["r0g0"]  # zero-weight filler keeps the batch shape
    assert res.pass_rate == pytest.approx(1 / 4)


def test_dynamic_sampling_disabled_keeps_one_round():
    gen, calls = _scripted_rounds([[[0, 0], [1, 0], [1, 1]]])
    res = dynamic_sampling(gen, needed=3, max_rounds=5, enabled=False)
    assert calls == [(0, 3)] and res.kept == ["r0g0", "r0g1", "r0g2"]
    assert res.pass_rate == pytest.approx(1 / 3)


# --------------------------------------------------------------------------------------- loss

def test_k2_kl_value_and_gradient_match_hand_computation():
    torch.manual_seed(0)
    z = torch.randn(5, 7, requires_grad=True)
    y = torch.tensor([0, 3, 6, 2, 2])
    ref = torch.log_softmax(torch.randn(5, 7), -1).gather(1, y[:, None]).squeeze(1)
    logp = torch.log_softmax(z, -1).gather(1, y[:, None]).squeeze(1)
    kl = k2_kl(logp, ref)
    d = (logp - ref).detach()
    assert torch.allclose(kl, 0.5 * d**2)
    kl.sum().backward()
    # d/dz 1/2 (log p_y - ref)^2 = (log p_y - ref) (onehot(y) - softmax(z))
    hand = d[:, None] * (torch.nn.functional.one_hot(y, 7) - torch.softmax(z.detach(), -1))
    assert torch.allclose(z.grad, hand, atol=1e-6)
    assert torch.all(k2_kl(torch.tensor([0.0]), torch.tensor([-30.0])) == 10.0)  # NeMo's output clamp


def test_clip_higher_is_asymmetric():
    ratio = torch.tensor([1.25, 1.30, 0.85, 0.75, 1.25, 0.75])
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0, -1.0, 1.0])
    logp = torch.log(ratio).requires_grad_(True)
    loss, low, high = clipped_surrogate(logp, torch.zeros(6), adv, 0.2, 0.28)
    # A>0: clipped above 1.28 only (1.25 would be clipped by a symmetric 0.2); A<0: clipped below 0.8
    assert torch.allclose(loss, torch.tensor([-1.25, -1.28, 0.85, 0.80, 1.25, -0.75]))
    assert high.tolist() == [False, True, False, False, False, False]
    assert low.tolist() == [False, False, False, True, False, False]
    loss.sum().backward()
    # d/dlogp (-r A) = -r A where unclipped, 0 where the clip is active
    assert torch.allclose(logp.grad, torch.tensor([-1.25, 0.0, 0.85, 0.0, 1.25, -0.75]))


# --------------------------------------------------------------------------------------- settings

def test_learning_rate_rule():
    base = dict(eta0=1e-3, b0=16 * 64)
    assert learning_rate(RLSettings(n_rollouts=16, prompts_per_step=64, **base)) == pytest.approx(1e-3)
    # BroRL: 512 x 128 = 65,536 samples vs ProRL 16 x 512 = 8,192 -> sqrt(8) ~ 2.83
    s = RLSettings(n_rollouts=512, prompts_per_step=128, eta0=2e-6, b0=16 * 512)
    assert learning_rate(s) == pytest.approx(2e-6 * math.sqrt(8))
    assert learning_rate(RLSettings(n_rollouts=512, prompts_per_step=128, lr_rule="constant", **base)) == 1e-3


@pytest.mark.parametrize("bad, key", [
    ({"n_rollouts": 1}, "n_rollouts"),
    ({"prompts_per_step": 6, "mini_batches": 4}, "mini_batches"),
    ({"sample_budget": 100, "n_rollouts": 16, "prompts_per_step": 64}, "sample_budget"),
    ({"steps": 0}, "steps"),
    ({"lr_rule": "linear"}, "lr_rule"),
    ({"epsilon_low": 1.5}, "epsilon_low"),
    ({"generation_engine": "sglang"}, "generation_engine"),
    ({"max_rounds": 0}, "max_rounds"),
    ({"prompt_kv": "per_row"}, "prompt_kv"),
    ({"token_draw": "gumbel"}, "token_draw"),
])
def test_settings_validation_names_the_key(bad, key):
    with pytest.raises(ValueError, match=key):
        RLSettings.from_dict(bad)


def test_settings_from_dict_rejects_unknown_keys_and_derives_steps():
    with pytest.raises(ValueError, match="unknown RL settings.*num_generations"):
        RLSettings.from_dict({"num_generations": 16})
    s = RLSettings.from_dict({"n_rollouts": 16, "prompts_per_step": 4, "steps": 0, "sample_budget": 200})
    assert s.samples_per_step == 64 and s.max_steps == 3
    assert RLSettings(n_rollouts=512, prompts_per_step=16, micro_batch_size=100).micro_batch == 64


# --------------------------------------------------------------------------------------- the stage

def test_training_run_writes_metrics_and_an_hf_folder(tiny):
    from transformers import AutoModelForCausalLM

    from brorl.training.stage import METRIC_COLUMNS, read_metrics, train_stage

    out = tiny / "stage"
    summary = train_stage(tiny / "sft", tiny / "data", out, RL, progress=False)
    assert summary["steps"] == 3
    with open(out / "metrics.csv") as f:
        assert tuple(f.readline().strip().split(",")) == METRIC_COLUMNS
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert 0 <= r["dynamic_sampling_pass_rate"] <= 1
        assert r["kept_prompts"] <= 4 and r["generation_rounds"] <= 3
        assert 8 * 4 <= r["generated_samples"] <= 8 * 4 * r["generation_rounds"]
        assert r["generated_samples"] % 8 == 0
        assert r["generation_samples_per_s"] > 0 and r["training_tokens_per_s"] > 0
        assert r["learning_rate"] == pytest.approx(1e-3)  # sqrt(32 / 32)
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-9)  # pi = pi_ref before the first update
    assert rows[1]["probe_q_pos_mean"] is not None and rows[0]["probe_q_pos_mean"] is None
    assert rows[2]["probe_frac_correct_improved"] is not None  # the last step is always probed
    assert summary["generated_samples"] == sum(r["generated_samples"] for r in rows)
    model = AutoModelForCausalLM.from_pretrained(str(out / "model"), local_files_only=True)
    assert model.config.model_type == "llama"
    assert (out / "model" / "optimizer.pt").exists() and not (out / "checkpoints").exists()
    assert not [p for p in out.iterdir() if ".tmp" in p.name]
    # a rerun of a finished stage returns its summary without training
    assert train_stage(tiny / "sft", tiny / "data", out, RL, progress=False)["steps"] == 3


def test_next_stage_keeps_or_resets_the_optimizer_and_finishes_from_its_last_checkpoint(tiny):
    """Reference reset = a new stage from <out>/model: AdamW moments kept (ProRLv2) or reset (ProRL v1). A stage
    killed after its last checkpoint but before summary.json is finished from that checkpoint, not retrained."""
    from brorl.training.stage import read_metrics, train_stage

    first = tiny / "stage"
    if not (first / "summary.json").exists():
        train_stage(tiny / "sft", tiny / "data", first, RL, progress=False)

    def adam_steps(folder):
        return int(torch.load(folder / "model" / "optimizer.pt", weights_only=True)["state"][0]["step"])

    assert adam_steps(first) == 3
    one = dict(RL, steps=1, keep_checkpoints=True)
    kept = tiny / "stage2_kept"
    train_stage(first / "model", tiny / "data", kept, one, progress=False)
    assert adam_steps(kept) == 4
    reset = tiny / "stage2_reset"
    train_stage(first / "model", tiny / "data", reset, dict(one, reset_optimizer=True), progress=False)
    assert adam_steps(reset) == 1

    import shutil

    (kept / "summary.json").unlink()
    shutil.rmtree(kept / "model")
    assert train_stage(first / "model", tiny / "data", kept, one, progress=False)["steps"] == 1
    assert [r["step"] for r in read_metrics(kept)] == [1] and adam_steps(kept) == 4
    with pytest.raises(ValueError, match="other settings"):
        train_stage(first / "model", tiny / "data", kept, dict(one, n_rollouts=4), progress=False)


def test_sigkill_resume_ends_with_the_same_steps(tiny):
    from brorl.training.stage import latest_checkpoint, read_metrics, train_stage

    settings = dict(RL, steps=6, checkpoint_every=1, probe_every=0)
    out = tiny / "killed"
    code = ("import sys, json; from brorl.training.stage import train_stage; "
            "train_stage(sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), progress=False)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tiny / "sft"), str(tiny / "data"), str(out),
                             json.dumps(settings)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    deadline = time.time() + 1200  # a hang guard, not a speed limit (2 steps take seconds on a quiet machine)
    try:
        while time.time() < deadline and proc.poll() is None:
            ckpt = latest_checkpoint(out / "checkpoints") if (out / "checkpoints").exists() else None
            if ckpt is not None and int(ckpt.name.split("-")[-1]) >= 2:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert not (out / "summary.json").exists()
    killed_at = int(latest_checkpoint(out / "checkpoints").name.split("-")[-1])
    assert 2 <= killed_at < 6

    summary = train_stage(tiny / "sft", tiny / "data", out, settings, progress=False)
    assert summary["steps"] == 6
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert summary["generated_samples"] == sum(r["generated_samples"] for r in rows)

    # the resumed run follows the uninterrupted one (seeded sampler, restored RNG and data position)
    ref = tiny / "uninterrupted"
    train_stage(tiny / "sft", tiny / "data", ref, settings, progress=False)
    for a, b in zip(read_metrics(ref), rows):
        assert a["reward_mean"] == pytest.approx(b["reward_mean"]), a["step"]
        assert a["kept_prompts"] == b["kept_prompts"]


@pytest.mark.parametrize("engine", ["prefix_tree", "shared_prompt", "hf"])
def test_every_cpu_engine_trains_with_ppo_mini_batches(tiny, engine):
    """Each CPU generation engine runs the same stage; mini_batches = 2 gives two AdamW steps per RL step, the
    second on reused rollouts (ratios leave 1, so the clip can act)."""
    from brorl.training.stage import read_metrics, train_stage

    out = tiny / f"engine-{engine}"
    settings = dict(RL, steps=2, mini_batches=2, generation_engine=engine, probe_every=0)
    summary = train_stage(tiny / "sft", tiny / "data", out, settings, progress=False)
    assert summary["steps"] == 2
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(math.isfinite(r["loss"]) and r["generated_samples"] % 8 == 0 for r in rows)
    state = torch.load(out / "model" / "optimizer.pt", weights_only=True)["state"][0]
    assert int(state["step"]) == 4  # 2 RL steps x 2 mini-batches


def test_the_small_profiles_sampling_recipe_reaches_the_sampler(tiny, monkeypatch):
    """token_draw: inverse_cdf and prompt_kv: shared (config/small.yaml) through the trainer: every decode step
    attends through the shared prompt (counted), and the stage trains."""
    from brorl.models.kv_cache import SharedPromptLayer
    from brorl.training.stage import read_metrics, train_stage

    calls = []
    attend = SharedPromptLayer.attend
    monkeypatch.setattr(SharedPromptLayer, "attend", lambda self, *a: calls.append(1) or attend(self, *a))
    out = tiny / "small-recipe"
    settings = dict(RL, steps=1, generation_engine="prefix_tree", token_draw="inverse_cdf", prompt_kv="shared",
                    probe_every=0)
    assert train_stage(tiny / "sft", tiny / "data", out, settings, progress=False)["steps"] == 1
    assert calls and math.isfinite(read_metrics(out)[0]["loss"])


def test_sample_budget_ends_the_stage(tiny):
    """steps = 0 and a budget: the stage stops at the first step whose running total of generated samples
    (before filtering, refill rounds included) reaches the budget."""
    from brorl.training.stage import read_metrics, train_stage

    out = tiny / "budget"
    budget = 3 * 8 * 4  # three single-round steps' worth
    summary = train_stage(tiny / "sft", tiny / "data", out, dict(RL, steps=0, sample_budget=budget,
                                                                  probe_every=0), progress=False)
    rows = read_metrics(out)
    totals = [r["generated_samples_total"] for r in rows]
    assert totals[-1] >= budget and all(t < budget for t in totals[:-1])
    assert summary["generated_samples"] == totals[-1] and summary["steps"] == len(rows) <= 3


def test_arm_work_folder_follows_the_start_models_content(tiny):
    """Same settings and start model: the rerun finds its stage folder (resume / done). The start model
    retrained in place (same path, new weights) or a changed setting: a fresh folder, never the old run."""
    import shutil

    from transformers import AutoModelForCausalLM

    from brorl.training.arms import run_arm, stages_arm

    init, work = tiny / "arm-init", tiny / "arm-work"
    shutil.copytree(tiny / "sft", init)
    stages = [dict(RL, steps=1, probe_every=0, sample_budget=0)]

    def run(st=stages):
        return run_arm(stages_arm("arm", st), init, tiny / "data", work, tiny / "arm-model", tiny / "arm-results",
                       progress=False)

    first = run()
    assert len(list(work.iterdir())) == 1
    again = run()
    assert len(list(work.iterdir())) == 1
    assert {k: again[k] for k in ("steps", "generated_samples", "validation_pass1_end")} == {
        k: first[k] for k in ("steps", "generated_samples", "validation_pass1_end")}
    model = AutoModelForCausalLM.from_pretrained(str(init), local_files_only=True)
    with torch.no_grad():
        next(model.parameters()).add_(0.05)
    model.save_pretrained(str(init))
    run()
    assert len(list(work.iterdir())) == 2
    run([dict(stages[0], eta0=2e-3)])
    assert len(list(work.iterdir())) == 3


def test_throughput_study_vllm_engines_need_vllm(tiny):
    """The vllm engines run vLLM's own engine (never the HF path under a vLLM label); without vLLM installed
    (CPU hosts) they stop with what to install."""
    import importlib.util

    from brorl.training.throughput import measure_throughput

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed: the GPU check measures these engines")
    for engine in ("vllm", "vllm_no_prefix_cache"):
        with pytest.raises(RuntimeError, match="requirements-gpu.lock"):
            measure_throughput(tiny / "sft", ns=(4, 8), total=16, engines=("prefix_tree", engine), progress=False)


def test_merged_duplicate_rows_give_the_same_update_and_logs(tiny, tmp_path):
    """merge_duplicates trains on one weighted row per distinct completion of each kept group and skips filler:
    one RL step from the same checkpoint and seed gives the N-row batch's gradient, weights after the step and
    logged numbers (reward, loss, kl, entropy, clip ratios: token means over the step, a merged row counting
    as often as it was drawn), with fewer rows. The reference model is perturbed (the same way in both runs) so
    that the step's kl is not 0."""
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback

    from brorl.tasks.core import format_prompt, read_split
    from brorl.training.stage import grpo_config, make_reward
    from brorl.training.trainer import BroRLTrainer

    tok = AutoTokenizer.from_pretrained(str(tiny / "sft"), local_files_only=True)
    records = read_split(tiny / "data", "train")
    dataset = Dataset.from_dict({"prompt": [format_prompt(tok, r) for r in records],
                                 "record_index": list(range(len(records)))})

    def one_step(merge: bool):
        s = RLSettings.from_dict({**RL, "n_rollouts": 16, "prompts_per_step": 4, "steps": 1, "max_rounds": 10,
                                  "micro_batch_size": 16, "merge_duplicates": merge, "probe_every": 0,
                                  "beta": 0.1, "temperature": 0.5})  # T < 1: more duplicate draws
        trainer = BroRLTrainer(model=str(tiny / "sft"), reward_funcs=make_reward(records, tok),
                               args=grpo_config(s, tmp_path / f"m{merge}", 6), train_dataset=dataset,
                               processing_class=tok, settings=s)
        gen = torch.Generator().manual_seed(3)
        with torch.no_grad():  # pi_ref != pi_theta, identically in both runs
            for p in trainer.ref_model.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
        grads = {}

        class Grab(TrainerCallback):
            def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
                grads.update({k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None})

        trainer.add_callback(Grab())
        trainer.train()
        weights = {k: p.detach().clone() for k, p in trainer.model.named_parameters()}
        logged = next(row for row in trainer.state.log_history if "loss" in row)
        return grads, weights, logged, trainer.last_rollout

    plain, w_plain, log_plain, roll_plain = one_step(False)
    merged, w_merged, log_merged, roll_merged = one_step(True)
    assert roll_plain["kept_prompts"] == roll_merged["kept_prompts"] > 0  # the same rollouts
    assert roll_merged["train_rows"] < roll_plain["train_rows"] <= 64
    # the plain step spreads its rows over more micro-batches than the merged one: a mean of per-micro-batch
    # means would differ; the logged token means must not
    assert -(-roll_plain["train_rows"] // 16) > -(-roll_merged["train_rows"] // 16)
    assert plain.keys() == merged.keys() and plain
    scale = max(g.abs().max().item() for g in plain.values())
    for k in plain:
        assert torch.allclose(plain[k], merged[k], atol=1e-5 * scale, rtol=1e-4), k
    lr = float(log_plain["learning_rate"])
    for k in w_plain:  # the update: AdamW's first step from the same weights, lr * g / (|g| + eps) per weight (plus the
        # same weight decay): sign-like, so where a gradient is within a few eps of 0 its rounding (the CPU's float
        # kernels: 2.5e-5 apart at g = 7e-9 on an AMD EPYC host, 2026-12-07, where the Intel hosts had passed a
        # whole-tensor 1e-6) moves the step by up to 2 lr; tight wherever the gradient is clear of eps (1e-8)
        clear = plain[k].abs() > 100 * 1e-8 if k in plain else torch.ones_like(w_plain[k], dtype=torch.bool)
        assert clear.float().mean() > 0.5, k
        assert torch.allclose(w_plain[k][clear], w_merged[k][clear], atol=1e-6, rtol=0), k
        assert float((w_plain[k] - w_merged[k]).abs().max()) <= 2 * lr * (1 + 1e-3), k
    assert log_plain["kl"] > 1e-3 and log_plain["entropy"] > 0
    for key in ("reward_mean", "kept_reward_mean", "kept_response_length", "loss", "grad_norm", "kl", "entropy",
                "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"):
        assert log_merged[key] == pytest.approx(log_plain[key], rel=1e-6, abs=1e-7), key


def test_merge_duplicate_rows_counts_every_draw():
    from brorl.training.trainer import _Sample, merge_duplicate_rows

    a, b = [1, 2, 9], [3, 9]
    kept = [[_Sample([5], a, None, 1.0), _Sample([5], b, None, 0.0), _Sample([5], a, None, 1.0),
             _Sample([5], a, None, 1.0)]]
    batch = kept[0] + [_Sample([6], [4, 9], None, 0.0)] * 4
    rows, weights, n_rows, first = merge_duplicate_rows(kept, 4, batch)
    assert n_rows == 2 and first == [0, 1] and weights[:2] == [3.0, 1.0]
    assert len(rows) == len(batch) == len(weights) and sum(weights) == 4 and weights[2:] == [0.0] * 6
    with pytest.raises(ValueError, match="merge_duplicates"):
        RLSettings(merge_duplicates=True, mini_batches=2, prompts_per_step=4)
