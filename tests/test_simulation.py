"""The Figure-3 simulation: sampler, analytic gradient, paper settings, outputs."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from brorl.theory.report import (
    lemma2_thresholds,
    smallest_n_no_loss,
    summary_table,
    sweep_n_values,
    write_summary,
    write_sweep,
)
from brorl.theory.simulation import (
    CSV_COLUMNS,
    SimulationSettings,
    results_frame,
    run_grid,
    run_one,
    sample_counts,
)

SMALL = SimulationSettings(vocab_size=400, num_correct=40, steps=30, n_rollouts=(4, 64), seeds=(0, 1))


def test_paper_defaults_and_initial_q_pos():
    s = SimulationSettings()
    assert (s.vocab_size, s.num_correct, s.lr, s.steps) == (128_000, 10_000, 1e-3, 1000)
    assert s.n_rollouts == (4, 8, 16, 512, 51_200)
    p = s.initial_probs()
    q0 = p[s.correct_mask()].sum()
    # Seeded start: 10,000 e^3 / (10,000 e^3 + e^5 + 117,999) = 0.63 (the Fig. 3 axis starts near 0.60)
    expected = 10_000 * math.e**3 / (10_000 * math.e**3 + math.e**5 + 117_999)
    assert q0 == pytest.approx(expected, rel=1e-12)
    assert 0.62 < q0 < 0.64
    assert not s.correct_mask()[s.anchor_index]


def test_settings_reject_unknown_keys():
    with pytest.raises(ValueError, match="unknown simulation settings"):
        SimulationSettings.from_dict({"vocab": 10})


def test_sample_counts_is_multinomial():
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([0.5, 0.25, 0.125, 0.0625, 0.0625], dtype=torch.float32)
    n, trials = 64, 4000
    counts = torch.stack([sample_counts(p, n, g) for _ in range(trials)]).numpy()
    assert np.all(counts.sum(1) == n)
    mean = counts.mean(0)
    se = np.sqrt(n * p.numpy() * (1 - p.numpy()) / trials)
    assert np.all(np.abs(mean - n * p.numpy()) < 5 * se)
    var = counts.var(0)
    assert np.allclose(var, n * p.numpy() * (1 - p.numpy()), rtol=0.1)
    # P(token unsampled) = (1 - p)^N, the quantity behind Lemma 2
    assert np.mean(counts[:, 4] == 0) == pytest.approx((1 - 0.0625) ** n, abs=0.01)


def test_vectorised_gradient_equals_autograd_of_the_paper_surrogate():
    """dL/dz from counts == autograd of L_sur = -(1/N) sum_j (R_j - b) p_(j) over the N draws."""
    s = SimulationSettings(vocab_size=50, num_correct=10, temperature=0.7)
    rng = np.random.default_rng(0)
    z = torch.tensor(rng.normal(size=50), dtype=torch.float64, requires_grad=True)
    reward = torch.full((50,), -1.0, dtype=torch.float64)
    reward[:10] = 1.0
    draws = torch.tensor(rng.integers(0, 50, size=37))
    n = len(draws)
    p = torch.softmax(z / s.temperature, 0)
    b = reward[draws].mean()
    loss = -((reward[draws] - b) * p[draws]).sum() / n
    loss.backward()
    with torch.no_grad():
        counts = torch.bincount(draws, minlength=50).double()
        w = counts * (reward - (counts @ reward) / n)
        grad = -(p * (w - torch.dot(w, p))) / (n * s.temperature)
    assert torch.allclose(grad, z.grad, atol=1e-14)


def test_runs_are_deterministic_per_seed_and_differ_across_seeds():
    a = run_one(SMALL, 4, 0)
    b = run_one(SMALL, 4, 0)
    c = run_one(SMALL, 4, 1)
    assert np.array_equal(a.metrics, b.metrics)
    assert not np.array_equal(a.metrics, c.metrics)
    assert a.metrics.shape == (SMALL.steps + 1, 3)
    assert a.metrics[0, 1] == 0 and a.metrics[0, 2] == 0  # step 0 is the reference


def test_metrics_are_consistent_with_the_final_distribution():
    res = run_one(SMALL, 64, 0, keep_final_probs=True)
    p = res.final_probs
    p0 = SMALL.initial_probs()
    k = SMALL.num_correct
    assert res.metrics[-1, 0] == pytest.approx(p[:k].sum(), abs=1e-5)
    assert res.metrics[-1, 1] == pytest.approx(np.mean(p[:k] > p0[:k]), abs=1.5 / k)
    assert res.metrics[-1, 2] == pytest.approx((p[:k] - p0[:k]).min(), abs=1e-6)


def test_large_n_beats_small_n_on_q_pos():
    """The paper's qualitative claim holds in a small instance: more rollouts, more correct mass."""
    s = SimulationSettings(vocab_size=2000, num_correct=150, steps=150, seeds=(0, 1, 2))
    small = np.mean([run_one(s, 4, seed).metrics[-1, 0] for seed in s.seeds])
    large = np.mean([run_one(s, 2048, seed).metrics[-1, 0] for seed in s.seeds])
    assert large > small


def test_csv_contract_and_summary(tmp_path):
    frame = results_frame(run_grid(SMALL, progress=False))
    assert tuple(frame.columns) == CSV_COLUMNS
    assert len(frame) == len(SMALL.n_rollouts) * len(SMALL.seeds) * (SMALL.steps + 1)
    table = write_summary(frame, [10, 30], tmp_path / "s.md", tmp_path / "s.csv", SMALL)
    assert list(table["n_rollouts"]) == [4, 64]
    md = (tmp_path / "s.md").read_text()
    assert "| 4 |" in md and "| 64 |" in md and "Reading against the paper" in md
    means = frame[frame.step == 30].groupby("n_rollouts")["q_pos"].mean()
    assert table.set_index("n_rollouts")["q_pos@30"].to_dict() == pytest.approx(means.to_dict())


def test_sweep_values_and_thresholds(tmp_path):
    assert sweep_n_values(4, 65536) == [2**k for k in range(2, 17)]
    assert sweep_n_values(5, 100) == [8, 16, 32, 64]
    table = pd.DataFrame({"n_rollouts": [4, 8, 16, 32], "x": [-1.0, 0.5, -0.1, 0.2]})
    assert smallest_n_no_loss(table, "x") == 32
    assert smallest_n_no_loss(table.assign(x=-1.0), "x") is None
    # Lemma-2 threshold for the coupling term, checked against its closed form for two probability levels:
    # Q_pos K_w p_w^2 e^{-p_w N} >= Q_neg K_c p_c^2 e^{-p_c N}  (approximating (1-p)^N by e^{-pN}).
    s = SimulationSettings(vocab_size=20_000, num_correct=1000, anchor_logit=3.0, anchor_in_correct=True)
    p = s.initial_probs()
    p_c, p_w = p[0], p[-1]
    q = p[:1000].sum()
    closed = math.log(((1 - q) * 1000 * p_c**2) / (q * 19_000 * p_w**2)) / (p_c - p_w)
    got = lemma2_thresholds(s)["n_coupling_nonnegative"]
    assert got == pytest.approx(closed, rel=0.01)
    frame = results_frame(run_grid(SMALL, n_values=[4, 8], seeds=[0], steps=5, progress=False))
    found = write_sweep(frame, SMALL, tmp_path / "x.csv", tmp_path / "x.md", tmp_path / "x.png")
    assert set(found) >= {"n_no_loss_final", "n_coupling_nonnegative"}
    assert (tmp_path / "x.png").stat().st_size > 10_000
    assert pd.read_csv(tmp_path / "x.csv")["n_rollouts"].tolist() == [4, 8]


def test_summary_table_handles_missing_steps():
    frame = results_frame(run_grid(SMALL, n_values=[4], seeds=[0], steps=5, progress=False))
    table = summary_table(frame, [5, 500])
    assert "q_pos@5" in table and "q_pos@500" not in table
