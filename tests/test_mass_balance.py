"""BroRL Theorem 1 (mass balance) and Lemma 2 (unsampled second moments)."""

import numpy as np
import pytest

from brorl.theory.mass_balance import (
    expected_unsampled_second_moments,
    logit_update,
    mass_balance,
    monte_carlo_unsampled_second_moments,
)


def random_instance(rng, v=None, n=None):
    v = v or int(rng.integers(3, 60))
    logits = rng.normal(0, rng.uniform(0.2, 3.0), v)
    p = np.exp(logits - logits.max())
    p /= p.sum()
    correct = rng.random(v) < rng.uniform(0.1, 0.9)
    correct[rng.integers(v)] = True  # P non-empty
    n = n or int(rng.integers(1, 3 * v))
    counts = rng.multinomial(n, p)
    return p, correct, counts, n


def test_first_order_matches_exact_with_error_linear_in_eta():
    rng = np.random.default_rng(0)
    ratios = []
    checked = 0
    for _ in range(300):
        p, correct, counts, n = random_instance(rng)
        r_c, r_w = rng.uniform(0.1, 2.0), -rng.uniform(0.1, 2.0)
        base = mass_balance(p, correct, counts, r_c, r_w, eta=1.0, n=n)
        if abs(base.first_order) < 1e-6:
            continue  # degenerate instance (no signal to compare against)
        errors = []
        for eta in (1e-2, 1e-3, 1e-4):
            mb = mass_balance(p, correct, counts, r_c, r_w, eta=eta, n=n)
            errors.append(abs(mb.exact - mb.first_order) / abs(mb.first_order))
        # relative error -> 0 and shrinks ~linearly: 10x smaller eta, ~10x smaller error
        assert errors[-1] < 1e-3
        ratios.append(errors[1] / errors[2])
        checked += 1
    assert checked > 200
    ratios = np.array(ratios)
    assert np.median(ratios) == pytest.approx(10.0, rel=0.05)
    assert np.all((ratios > 9) & (ratios < 11))


def test_theorem_terms_equal_the_direct_first_order_change():
    """Sum of the three terms == sum_P p_i dz_i - Q_pos sum_j p_j dz_j (an algebraic identity)."""
    rng = np.random.default_rng(1)
    for _ in range(200):
        p, correct, counts, n = random_instance(rng)
        eta = rng.uniform(0.01, 5)
        dz = logit_update(p, correct, counts, 1.0, -1.0, eta, n)
        direct = float((p * dz)[correct].sum() - p[correct].sum() * (p * dz).sum())
        mb = mass_balance(p, correct, counts, 1.0, -1.0, eta, n)
        assert mb.first_order == pytest.approx(direct, rel=1e-9, abs=1e-15)


def test_sampled_terms_are_never_negative():
    rng = np.random.default_rng(2)
    for _ in range(500):
        p, correct, counts, n = random_instance(rng)
        mb = mass_balance(p, correct, counts, rng.uniform(0, 3), -rng.uniform(0, 3), 1.0, n)
        assert mb.sampled_correct >= 0
        assert mb.sampled_incorrect >= 0


def _instance_with_unsampled(correct_unsampled: bool, positive_mood: bool):
    """Hand-built cases for the coupling term's sign: tokens 0, 1 correct; 2, 3 incorrect."""
    correct = np.array([True, True, False, False])
    if positive_mood:
        p = np.array([0.5, 0.1, 0.2, 0.2])  # S_R = P_pos - P_neg > 0
    else:
        p = np.array([0.1, 0.2, 0.4, 0.3])  # S_R < 0
    # exactly one token is unsampled: correct token 1 or incorrect token 3
    counts = np.array([1, 0, 1, 1]) if correct_unsampled else np.array([1, 1, 1, 0])
    return p, correct, counts


@pytest.mark.parametrize("positive_mood", [True, False])
@pytest.mark.parametrize("correct_unsampled", [True, False])
def test_coupling_sign_cases(positive_mood, correct_unsampled):
    p, correct, counts = _instance_with_unsampled(correct_unsampled, positive_mood)
    mb = mass_balance(p, correct, counts, 1.0, -1.0, eta=1.0)
    assert (mb.s_r > 0) == positive_mood
    # S_R > 0 pushes unsampled logits down: hurts when the unsampled mass is correct, helps when incorrect.
    # S_R < 0 flips both signs.
    hurts = correct_unsampled == positive_mood
    assert (mb.unsampled_coupling < 0) == hurts
    assert mb.unsampled_coupling != 0


def test_balanced_batch_has_no_coupling_and_full_sampling_has_no_coupling():
    p = np.array([0.25, 0.25, 0.3, 0.2])
    correct = np.array([True, False, False, True])
    # S_R = R_c * 0.25 + R_w * 0.25 = 0 with R_c = 1, R_w = -1: the coupling term vanishes.
    mb = mass_balance(p, correct, np.array([2, 1, 0, 0]), 1.0, -1.0)
    assert mb.s_r == pytest.approx(0.0)
    assert mb.unsampled_coupling == pytest.approx(0.0)
    # Everything sampled: U is empty.
    mb = mass_balance(p, correct, np.array([1, 1, 1, 1]), 1.0, -1.0)
    assert mb.u_pos2 == mb.u_neg2 == 0 and mb.unsampled_coupling == 0


def test_bad_inputs_are_rejected():
    p = np.array([0.5, 0.5])
    with pytest.raises(ValueError, match="R_c >= 0 >= R_w"):
        mass_balance(p, [True, False], [1, 1], r_c=-1.0, r_w=1.0)
    with pytest.raises(ValueError, match="probability vector"):
        mass_balance(np.array([0.5, 0.6]), [True, False], [1, 1])
    with pytest.raises(ValueError, match="same length"):
        mass_balance(p, [True], [1, 1])


@pytest.mark.parametrize("n", [1, 5, 40, 300])
def test_lemma2_matches_monte_carlo(n):
    rng = np.random.default_rng(3)
    v = 50
    p = rng.dirichlet(np.full(v, 0.5))
    correct = rng.random(v) < 0.3
    e_pos, e_neg = expected_unsampled_second_moments(p, correct, n)
    mc_pos, mc_neg = monte_carlo_unsampled_second_moments(p, correct, n, trials=40_000, seed=4)
    for expected, draws in ((e_pos, mc_pos), (e_neg, mc_neg)):
        se = draws.std(ddof=1) / np.sqrt(len(draws))
        assert abs(draws.mean() - expected) < 5 * se + 1e-12


def test_lemma2_decreases_in_n_and_vectorises():
    p = np.array([0.5, 0.3, 0.15, 0.05])
    correct = np.array([True, False, True, False])
    ns = np.array([1, 2, 4, 8, 16, 1000])
    pos, neg = expected_unsampled_second_moments(p, correct, ns)
    assert pos.shape == ns.shape
    assert np.all(np.diff(pos) < 0) and np.all(np.diff(neg) < 0)
    single = expected_unsampled_second_moments(p, correct, 4)
    assert single[0] == pytest.approx(pos[2]) and single[1] == pytest.approx(neg[2])
    assert pos[0] == pytest.approx(0.5**2 * 0.5 + 0.15**2 * 0.85)
