"""The training summary (brorl.training.report) reads the planned arms (arm_plan) when given the rl section."""

from __future__ import annotations

import json

import numpy as np
import pytest

from brorl.training.report import load_arms, training_summary

RL = {"arms": {"batches": [{"n_rollouts": 16, "prompts_per_step": 4}, {"n_rollouts": 64, "prompts_per_step": 1}],
               "schedule": [16, 64], "seeds": [0, 1], "sample_budget": 1024}}


def _arm(root, arm, seed, n, rng):
    d = root / arm / f"seed{seed}"
    d.mkdir(parents=True)
    q0 = rng.uniform(0, 1, 40)
    np.savez(d / "probe.npz", q_start=q0, q_end=np.clip(q0 + rng.normal(0.01 * n[-1] / 16, 0.01, 40), 0, 1))
    summary = {"arm": arm, "seed": seed, "n_rollouts": n, "prompts_per_step": [1024 // n[0]] * len(n), "steps": 4,
               "generated_samples": 1024, "sample_budget": 1024, "kept_samples": 512,
               "validation_pass1_start": float(q0.mean()), "validation_pass1_end": float(q0.mean()) + 0.01 * seed,
               "tail_prompts": 3, "q_pos_tail_start": 0.01, "q_pos_tail_end": 0.02, "zero_fraction_end": 0.1,
               "multi_frac_correct_improved": 0.5, "multi_worst_correct_delta": -0.01,
               "dynamic_sampling_pass_rate": 0.4 + n[0] / 1000, "generation_samples_per_s": 100.0 + n[0],
               "wall_time_s": 10.0, "peak_rss_mb": 500.0}
    (d / "summary.json").write_text(json.dumps(summary))
    (d / "metrics.csv").write_text("arm_generated_samples,probe_q_pos_mean\n0,0.5\n1024,0.6\n")


@pytest.fixture()
def results(tmp_path):
    rng = np.random.default_rng(0)
    root = tmp_path / "train"
    for arm, n in (("n16", [16]), ("n64", [64]), ("schedule", [16, 64]), ("n4", [4])):  # n4: not in the plan
        for seed in (0, 1):
            _arm(root, arm, seed, n, rng)
    return root


def test_summary_reads_the_planned_arms(results, tmp_path):
    planned = load_arms(results, RL)
    assert list(planned) == ["n16", "n64", "schedule"]  # arm_plan's arms (Arm.order), the stale n4 left out
    assert list(load_arms(results)) == ["n4", "n16", "n64", "schedule"]  # no plan: every result folder
    out = training_summary(results, tmp_path / "s.md", tmp_path / "s.csv", tmp_path / "s.png", rl=RL)
    md = (tmp_path / "s.md").read_text()
    assert "| n4 |" not in md and "| schedule |" in md
    assert "against the ProRL continuation n16" in md  # the smallest-N batch arm of the plan
    assert set(out["metrics"]) >= {"delta_vs_base/n64", "delta_vs_base/schedule", "pass_rate/n64"}
    assert "pass_rate/n4" not in out["metrics"]
    # without the plan (the command's old call) the folders decide, n4 included
    old = training_summary(results, tmp_path / "o.md", tmp_path / "o.csv", tmp_path / "o.png")
    assert "against the ProRL continuation n4" in (tmp_path / "o.md").read_text()
    assert old["metrics"]["pass_rate/n4"] == pytest.approx(0.404)


def test_summary_names_a_missing_planned_seed(results, tmp_path):
    rl = {"arms": {**RL["arms"], "seeds": [0, 1, 2]}}
    with pytest.raises(FileNotFoundError, match=r"arm 'n16' of rl.arms has no summary: .*n16/seed2/summary.json"):
        load_arms(results, rl)


def test_no_exact_validation_reads_as_not_measured_never_as_worse(tmp_path):
    """Arms of a profile with no exact validation pass@1 (the small profile: Reasoning Gym, summaries carry NaN and
    no probe) read as "not measured"; a NaN test is never worded as a significant change."""
    root = tmp_path / "train"
    rl = {"arms": {"batches": [{"n_rollouts": 16, "prompts_per_step": 8}, {"n_rollouts": 64, "prompts_per_step": 2}],
                   "seeds": [0], "sample_budget": 128}}
    for arm, n, rate in (("n16", 16, 0.667), ("n64", 64, 1.0)):
        d = root / arm / "seed0"
        d.mkdir(parents=True)
        nan = float("nan")
        (d / "summary.json").write_text(json.dumps({
            "arm": arm, "seed": 0, "n_rollouts": [n], "prompts_per_step": [128 // n], "steps": 1,
            "generated_samples": 128, "validation_pass1_start": nan, "validation_pass1_end": nan,
            "q_pos_tail_start": nan, "q_pos_tail_end": nan, "zero_fraction_end": nan, "tail_prompts": 0,
            "multi_frac_correct_improved": nan, "multi_worst_correct_delta": nan,
            "dynamic_sampling_pass_rate": rate, "generation_samples_per_s": 1.7 if n == 16 else 2.7,
            "wall_time_s": 500.0, "peak_rss_mb": 7500.0}))
        (d / "metrics.csv").write_text("arm_generated_samples,reward_mean,probe_q_pos_mean\n128,0.3,nan\n")
        np.savez(d / "probe.npz", q_start=np.zeros(0), q_end=np.zeros(0), ids=np.zeros(0))  # as train_arm writes it
    training_summary(root, tmp_path / "s.md", tmp_path / "s.csv", tmp_path / "s.png", rl=rl, source="paper")
    md = (tmp_path / "s.md").read_text()
    assert "not measured by this profile's arms" in md
    assert "significantly" not in md and "ProRL stalls" not in md and "+nan" not in md
    assert "N=16: 0.667, N=64: 1.000" in md and "N=16: 1.7/s, N=64: 2.7/s" in md
    # one seed, one step (the small profile's run): nothing is read as "yes" (it printed "**yes**, strictly rising")
    assert "**yes**" not in md and md.count("**not testable** (1 seed(s), 1 step(s)") == 2


def test_seeds_are_the_unit_of_every_reading(tmp_path):
    """Three seeds per arm, arm n64 better on every seed: "yes" at the seed level; the same arms with the seed-to-seed
    spread larger than the difference: within noise, though the prompt-level test over 40 prompts is tiny."""
    rl = {"arms": {"batches": [{"n_rollouts": 16, "prompts_per_step": 4}, {"n_rollouts": 64, "prompts_per_step": 1}],
                   "seeds": [0, 1, 2], "sample_budget": 1024}}

    def write(root, spread):
        rng = np.random.default_rng(7)
        q0 = rng.uniform(0.1, 0.9, 40)
        for arm, gain in (("n16", 0.0), ("n64", 0.02)):
            for seed in (0, 1, 2):
                d = root / arm / f"seed{seed}"
                d.mkdir(parents=True)
                shift = gain + spread * (seed - 1) * (1 if arm == "n64" else -1)
                q1 = np.clip(q0 + shift + rng.normal(0, 0.001, 40), 0, 1)
                np.savez(d / "probe.npz", q_start=q0, q_end=q1)
                (d / "summary.json").write_text(json.dumps({
                    "arm": arm, "seed": seed, "n_rollouts": [int(arm[1:])], "prompts_per_step": [1024 // int(arm[1:])],
                    "steps": 4, "generated_samples": 1024, "validation_pass1_start": float(q0.mean()),
                    "validation_pass1_end": float(q1.mean()), "tail_prompts": 0, "q_pos_tail_start": 0.0,
                    "q_pos_tail_end": 0.0, "zero_fraction_end": 0.0, "multi_frac_correct_improved": 0.5,
                    "multi_worst_correct_delta": 0.0, "dynamic_sampling_pass_rate": 0.4 + (0.1 if arm == "n64" else 0)
                    + 0.001 * seed, "generation_samples_per_s": 100.0 + seed, "wall_time_s": 1.0, "peak_rss_mb": 1.0}))
                (d / "metrics.csv").write_text("arm_generated_samples,probe_q_pos_mean\n1024,0.5\n")
        training_summary(root, tmp_path / f"{spread}.md", tmp_path / f"{spread}.csv", tmp_path / f"{spread}.png", rl=rl)
        return (tmp_path / f"{spread}.md").read_text()

    clear = write(tmp_path / "clear", 0.0)
    row = next(line for line in clear.splitlines() if line.startswith("| n64 |") and "paired by seed" in line)
    assert row.endswith("| yes |")
    assert "strictly rising (largest vs smallest N: seed-level p" in clear  # DS pass rate 0.4 -> 0.5 on every seed
    assert "Generation throughput rises with N** (paper: 1.98× from N=16 to N=512): N=16: 101.0/s, N=64: 101.0/s" in clear
    assert "**not strictly rising**" in clear  # equal throughput: no claim
    noisy = write(tmp_path / "noisy", 0.03)
    row = next(line for line in noisy.splitlines() if line.startswith("| n64 |") and "paired by seed" in line)
    assert row.endswith("| not resolved (within noise) |")
    prompt_p = float(row.split("|")[6])
    assert prompt_p < 1e-6  # the test over prompts would have called it
