"""Exact one-step mass balance for a categorical policy (BroRL Theorem 1, Lemma 2).

Notation follows BroRL Section 2 / Appendix C (see ``shared/brief/paper.md`` section 1):

* ``p``          probabilities of a categorical "token" distribution over a vocabulary of size V.
* ``correct``    boolean mask of the correct set P (the rest is the incorrect set, called N in the paper;
                 here ``n`` always means the number of rollouts).
* ``counts``     how many of the N rollouts drew each token (multiplicities). A token is *sampled* when its
                 count is positive. As in the paper's derivation, a sampled token carries its reward once
                 (R_c or R_w), whatever its multiplicity; unsampled tokens carry reward 0.
* Sets           A = sampled & correct, B = sampled & incorrect, U = unsampled.
* Masses         P_pos = sum_A p, P_neg = sum_B p, Q_pos = sum_P p, Q_neg = 1 - Q_pos.
* Second moments A_2, B_2, U_pos2 = sum_{U & P} p^2, U_neg2 = sum_{U & not P} p^2.
* Batch mood     S_R = R_c P_pos + R_w P_neg.

Update (linear surrogate, gradient step on the logits):  dz_j = (eta / N) p_j (R_j - S_R).

Theorem 1:  dQ_pos = (eta/N) [ (R_c - S_R) Q_neg A_2 + (S_R - R_w) Q_pos B_2
                               + S_R (Q_pos U_neg2 - Q_neg U_pos2) ]      (first order in eta)

Lemma 2:    E[U_2] = sum_i p_i^2 (1 - p_i)^N  for N i.i.d. draws.

Everything is computed in float64 numpy: these functions are for checking the algebra, not for speed
(the simulation in :mod:`brorl.theory.simulation` is the fast path).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class MassBalance:
    """The three terms of Theorem 1, their sum, and the exact change of Q_pos."""

    sampled_correct: float
    """(eta/N) (R_c - S_R) Q_neg A_2: sampled correct tokens pushed up (never negative)."""
    sampled_incorrect: float
    """(eta/N) (S_R - R_w) Q_pos B_2: mass freed by sampled incorrect tokens (never negative)."""
    unsampled_coupling: float
    """(eta/N) S_R (Q_pos U_neg2 - Q_neg U_pos2): the unsampled coupling term (either sign)."""
    first_order: float
    """Sum of the three terms: Theorem 1's first-order dQ_pos."""
    exact: float
    """Q_pos after applying dz and re-normalising, minus Q_pos before."""
    q_pos: float
    s_r: float
    a2: float
    b2: float
    u_pos2: float
    u_neg2: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def _as_inputs(p, correct, counts):
    p = np.asarray(p, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    counts = np.asarray(counts)
    if p.ndim != 1 or correct.shape != p.shape or counts.shape != p.shape:
        raise ValueError("p, correct and counts must be 1-D arrays of the same length")
    if np.any(p < 0) or not np.isclose(p.sum(), 1.0, rtol=0, atol=1e-9):
        raise ValueError("p must be a probability vector (non-negative, summing to 1)")
    if np.any(counts < 0):
        raise ValueError("counts must be non-negative")
    return p, correct, counts


def logit_update(p, correct, counts, r_c: float = 1.0, r_w: float = -1.0, eta: float = 1.0,
                 n: int | None = None) -> np.ndarray:
    """dz_j = (eta/N) p_j (R_j - S_R), with R_j = R_c / R_w on sampled tokens and 0 elsewhere."""
    p, correct, counts = _as_inputs(p, correct, counts)
    n = int(counts.sum()) if n is None else n
    sampled = counts > 0
    reward = np.where(sampled, np.where(correct, r_c, r_w), 0.0)
    s_r = float(np.sum(reward * p))  # = R_c P_pos + R_w P_neg
    return (eta / n) * p * (reward - s_r)


def mass_balance(p, correct, counts, r_c: float = 1.0, r_w: float = -1.0, eta: float = 1.0,
                 n: int | None = None) -> MassBalance:
    """Theorem 1's decomposition of dQ_pos and the exact change, for one update.

    ``n`` defaults to ``counts.sum()`` (the number of rollouts). Requires R_c >= 0 >= R_w as in the paper.
    """
    if not r_c >= 0 >= r_w:
        raise ValueError(f"Theorem 1 assumes R_c >= 0 >= R_w, got R_c={r_c}, R_w={r_w}")
    p, correct, counts = _as_inputs(p, correct, counts)
    n = int(counts.sum()) if n is None else n
    if n <= 0:
        raise ValueError("n (number of rollouts) must be positive")
    sampled = counts > 0
    a, b, u = sampled & correct, sampled & ~correct, ~sampled
    p2 = p * p
    a2, b2 = float(p2[a].sum()), float(p2[b].sum())
    u_pos2, u_neg2 = float(p2[u & correct].sum()), float(p2[u & ~correct].sum())
    q_pos = float(p[correct].sum())
    q_neg = 1.0 - q_pos
    s_r = r_c * float(p[a].sum()) + r_w * float(p[b].sum())

    scale = eta / n
    t_a = scale * (r_c - s_r) * q_neg * a2
    t_b = scale * (s_r - r_w) * q_pos * b2
    t_u = scale * s_r * (q_pos * u_neg2 - q_neg * u_pos2)

    # Exact: p'_i = p_i e^{dz_i} / sum_j p_j e^{dz_j}. Written with expm1 so that the change, not the new
    # value, is computed: dQ = sum_P p_i (expm1(dz_i) - M) / (1 + M), M = sum_j p_j expm1(dz_j). This keeps
    # full relative precision even when eta is tiny (no cancellation of two sums near Q_pos).
    dz = logit_update(p, correct, counts, r_c, r_w, eta, n)
    growth = np.expm1(dz)
    m = float(np.dot(p, growth))
    exact = float(np.sum((p * (growth - m))[correct]) / (1.0 + m))

    return MassBalance(t_a, t_b, t_u, t_a + t_b + t_u, exact, q_pos, s_r, a2, b2, u_pos2, u_neg2)


def unsampled_probability(p, n) -> np.ndarray:
    """P(a token is never drawn in N i.i.d. draws) = (1 - p_i)^N, shape ``n.shape + p.shape``.

    Computed as exp(N log1p(-p)) to stay accurate for tiny p and huge N.
    """
    p = np.asarray(p, dtype=np.float64)
    log_miss = np.log1p(-np.clip(p, 0.0, 1.0 - 1e-300))
    return np.exp(np.multiply.outer(np.asarray(n, dtype=np.float64), log_miss))


def expected_unsampled_second_moments(p, correct, n) -> tuple[np.ndarray, np.ndarray]:
    """Lemma 2: E[U_pos2] and E[U_neg2] = sum p_i^2 (1 - p_i)^N over correct / incorrect tokens.

    ``n`` may be a scalar or an array of rollout counts; the result has its shape.
    """
    p = np.asarray(p, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    weight = unsampled_probability(p, n) * (p * p)
    return weight[..., correct].sum(-1), weight[..., ~correct].sum(-1)


def monte_carlo_unsampled_second_moments(p, correct, n: int, trials: int, seed: int = 0
                                         ) -> tuple[np.ndarray, np.ndarray]:
    """Monte Carlo draws of (U_pos2, U_neg2) for ``trials`` independent batches of N i.i.d. samples."""
    p = np.asarray(p, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, p / p.sum(), size=trials)
    unsampled = counts == 0
    p2 = p * p
    return (unsampled & correct) @ p2, (unsampled & ~correct) @ p2
