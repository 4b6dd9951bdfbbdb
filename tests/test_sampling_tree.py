"""The prefix-tree sampler (``sample_token_ids_tree``): the law of its completions equals exact sequence
probabilities by teacher forcing (chi-square), with either token draw (``multinomial``, ``inverse_cdf``), the
output contract equals ``sample_token_ids``'s, and the row order carries no information. The inverse-CDF draw's
own law, zero-mass tokens and rounding edge.

The model is ``toy_llama.scaled_model``: a hand-made 6-token Llama with peaked, context-dependent next-token
distributions and a common end token."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from scipy.stats import chi2

from brorl.models import sampling
from brorl.models.sampling import SAMPLERS, sample_token_ids, sample_token_ids_tree
from brorl.training.settings import TOKEN_DRAWS
from toy_llama import EOS, PAD, scaled_model

T = 4
PROMPTS = [[2, 3, 4, 5], [5, 4, 3, 5], [3, 2, 5]]  # two of length 4, one of length 3


@pytest.fixture(scope="module")
def model():
    return scaled_model(num_layers=1, scale=20.0)


@torch.no_grad()
def exact_law(model, prompt: list[int], temperature: float) -> dict[tuple, float]:
    """P(completion) for every possible padded completion of length T, by teacher forcing."""
    law: dict[tuple, float] = {}
    prefixes = {(): 1.0}
    for d in range(T):
        rows = list(prefixes)
        ids = torch.tensor([prompt + list(r) for r in rows], dtype=torch.long)
        probs = torch.softmax(model(input_ids=ids).logits[:, -1, :].double() / temperature, dim=-1)
        nxt = {}
        for r, pr in zip(rows, probs.tolist()):
            for tok, q in enumerate(pr):
                seq, mass = r + (tok,), prefixes[r] * q
                if tok == EOS or d == T - 1:
                    law[seq + (PAD,) * (T - len(seq))] = mass
                else:
                    nxt[seq] = mass
        prefixes = nxt
    assert abs(sum(law.values()) - 1) < 1e-9
    return law


def chi2_pvalue(rows: torch.Tensor, law: dict[tuple, float]) -> float:
    """Goodness of fit of the rows to ``law``; cells expecting < 5 are pooled into one."""
    n = rows.shape[0]
    seen = Counter(map(tuple, rows.tolist()))
    assert set(seen) <= set(law), "a completion outside the support (e.g. not padded after eos)"
    big = [s for s, p in law.items() if n * p >= 5]
    obs = np.array([seen.get(s, 0) for s in big], dtype=float)
    exp = np.array([n * law[s] for s in big])
    rest_exp = n - exp.sum()
    if rest_exp > 0:
        obs, exp = np.append(obs, n - obs.sum()), np.append(exp, rest_exp)
    stat = float(((obs - exp) ** 2 / exp).sum())
    return float(chi2.sf(stat, len(exp) - 1))


def test_tree_law_matches_teacher_forcing(model):
    n = 12000
    for temperature in (1.0, 0.7):
        laws = [exact_law(model, p, temperature) for p in PROMPTS]
        # one tree per prompt (blocks of 2 prompts of one length) and, with n > chunk_samples, several trees
        for chunk in (1 << 15, 5000):
            out = sample_token_ids_tree(model, PROMPTS, n, T, EOS, PAD, temperature=temperature, seed=3,
                                        chunk_samples=chunk)
            for rows, law in zip(out, laws):
                assert chi2_pvalue(rows, law) > 1e-4, (temperature, chunk)
    # the reference sampler passes the same check (the exact law is right)
    ref = sample_token_ids(model, PROMPTS[:1], n, T, EOS, PAD, temperature=0.7, seed=3)[0]
    assert chi2_pvalue(ref, exact_law(model, PROMPTS[0], 0.7)) > 1e-4


@pytest.mark.parametrize("block", [1024, 4])  # one block (the whole 6-token vocabulary), or 2 (padded to 8)
def test_inverse_cdf_draw_has_the_law_of_teacher_forcing(model, monkeypatch, block):
    monkeypatch.setattr(sampling, "DRAW_BLOCK", block)
    n = 12000
    law = exact_law(model, PROMPTS[0], 0.7)
    for sampler in (sample_token_ids_tree, sample_token_ids):
        rows = sampler(model, PROMPTS[:1], n, T, EOS, PAD, temperature=0.7, seed=4, draw="inverse_cdf")[0]
        assert chi2_pvalue(rows, law) > 1e-4, sampler.__name__
        other = sampler(model, PROMPTS[:1], n, T, EOS, PAD, temperature=0.7, seed=4)[0]
        assert not torch.equal(rows, other)  # a different draw of the same law, not the multinomial's
    hot = sample_token_ids_tree(model, PROMPTS[:1], n, T, EOS, PAD, temperature=1.0, seed=4, draw="inverse_cdf")[0]
    assert chi2_pvalue(hot, law) < 1e-6


def test_inverse_cdf_frequencies_zero_mass_and_rounding(monkeypatch):
    """37 tokens in blocks of 8 (padded to 40): frequencies fit the probabilities, tokens and a whole block
    without mass are never drawn, and a uniform that rounds up to the total lands on the last token with mass."""
    g = torch.Generator().manual_seed(7)
    probs = torch.rand(37, generator=g) ** 3
    probs[[0, 5, 36, 35]] = 0.0
    probs[8:16] = 0.0                                   # block 1 has no mass
    probs = probs / probs.sum()
    n = 200_000
    tok = sampling._inverse_cdf(probs.expand(n, 37), g, block=8)
    counts = torch.bincount(tok, minlength=37)
    assert int(counts[probs == 0].sum()) == 0
    exp = (probs * n).numpy()
    big = exp >= 5
    obs = counts.numpy().astype(float)
    stat = float(((obs[big] - exp[big]) ** 2 / exp[big]).sum())
    assert chi2.sf(stat, int(big.sum()) - 1) > 1e-4
    skewed = probs.clone()
    skewed[1], skewed[2] = skewed[1] + skewed[2], 0.0   # a wrong law is caught at this n
    far = ((obs[big] - (skewed.numpy() * n)[big]) ** 2 / np.maximum((skewed.numpy() * n)[big], 1e-9)).sum()
    assert chi2.sf(float(far), int(big.sum()) - 1) < 1e-6
    monkeypatch.setattr(torch, "rand", lambda shape, **kw: torch.ones(shape, dtype=kw.get("dtype")))
    top = sampling._inverse_cdf(probs.expand(3, 37).contiguous(), g, block=8)
    assert top.tolist() == [34, 34, 34]                 # 35 and 36 have no mass
    with pytest.raises(ValueError, match="token_draw 'gumbel'"):
        sampling.draw_tokens(probs.expand(2, 37), g, "gumbel")
    for draw in TOKEN_DRAWS:  # every draw the settings accept, the sampler knows
        assert sampling.draw_tokens(probs.expand(2, 37), g, draw).shape == (2,)


def test_check_rejects_wrong_samplers(model):
    """The chi-square check has the power to catch a wrong temperature, greedy decoding, N copies of one
    sample, or a tree that sends a node's whole count down one sampled token."""
    n = 12000
    law = exact_law(model, PROMPTS[0], 0.7)
    hot = sample_token_ids_tree(model, PROMPTS[:1], n, T, EOS, PAD, temperature=1.0, seed=3)[0]
    assert chi2_pvalue(hot, law) < 1e-6
    greedy = sample_token_ids_tree(model, PROMPTS[:1], n, T, EOS, PAD, temperature=0.0, seed=3)[0]
    assert chi2_pvalue(greedy, law) < 1e-6
    good = sample_token_ids_tree(model, PROMPTS[:1], n, T, EOS, PAD, temperature=0.7, seed=3)[0]
    assert chi2_pvalue(good[:1].repeat(n, 1), law) < 1e-6
    # no split: every block of 64 rows is one sample repeated (count never divided)
    assert chi2_pvalue(good[::64].repeat_interleave(64, dim=0)[:n], law) < 1e-6
    # and the real output is not copies: many distinct completions, close to the expected number
    expected_distinct = sum(1 - (1 - p) ** n for p in law.values())
    assert abs(len(set(map(tuple, good.tolist()))) - expected_distinct) < 0.15 * expected_distinct


def test_contract_matches_sample_token_ids(model):
    for n in (1, 2, 7):
        tree = sample_token_ids_tree(model, PROMPTS, n, T, EOS, PAD, seed=0)
        ref = sample_token_ids(model, PROMPTS, n, T, EOS, PAD, seed=0)
        assert len(tree) == len(PROMPTS)
        for a, b in zip(tree, ref):
            assert a.shape == b.shape == (n, T) and a.dtype == b.dtype == torch.long
            for row in a.tolist():
                if EOS in row:
                    assert all(t == PAD for t in row[row.index(EOS) + 1:])
    # greedy decoding is the same path for every row, as in sample_token_ids
    for a, b in zip(sample_token_ids_tree(model, PROMPTS, 5, T, EOS, PAD, temperature=0.0),
                    sample_token_ids(model, PROMPTS, 5, T, EOS, PAD, temperature=0.0)):
        assert torch.equal(a, b) and len(set(map(tuple, a.tolist()))) == 1
    # a longer budget than any completion needs: rows end with pads, shapes still [n, max_new_tokens]
    long = sample_token_ids_tree(model, PROMPTS[:1], 50, 12, EOS, PAD, seed=1)[0]
    assert long.shape == (50, 12)
    assert SAMPLERS["prefix_tree"] is sample_token_ids_tree and SAMPLERS["shared_prompt"] is sample_token_ids


def test_deterministic_under_seed_and_restores_mode(model):
    model.train()
    a = sample_token_ids_tree(model, PROMPTS, 64, T, EOS, PAD, seed=11)
    assert model.training
    model.eval()
    b = sample_token_ids_tree(model, PROMPTS, 64, T, EOS, PAD, seed=11)
    c = sample_token_ids_tree(model, PROMPTS, 64, T, EOS, PAD, seed=12)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))


def test_n1_law_over_many_prompts(model):
    """n = 1 with 4000 copies of one prompt (blocks of many prompts, one node each at the root)."""
    law = exact_law(model, PROMPTS[2], 1.0)
    out = sample_token_ids_tree(model, [PROMPTS[2]] * 4000, 1, T, EOS, PAD, seed=5, chunk_samples=1024)
    assert all(o.shape == (1, T) for o in out)
    assert chi2_pvalue(torch.cat(out), law) > 1e-4


def test_row_order_carries_no_information(model):
    """n = 2: the two rows of a prompt are exchangeable (leaf order would put the smaller one first)."""
    out = sample_token_ids_tree(model, [PROMPTS[0]] * 3000, 2, T, EOS, PAD, seed=9)
    first_smaller = second_smaller = 0
    for rows in out:
        a, b = rows.tolist()
        first_smaller += a < b
        second_smaller += b < a
    m = first_smaller + second_smaller
    assert m > 1000
    assert abs(first_smaller - m / 2) < 4 * np.sqrt(m / 4)
    # the rows of one prompt are shuffled, not grouped by leaf
    rows = sample_token_ids_tree(model, PROMPTS[:1], 200, T, EOS, PAD, seed=2)[0].tolist()
    assert rows != sorted(rows)


def test_two_lengths_in_one_call_keep_prompt_order(model):
    prompts = [PROMPTS[2], PROMPTS[0], PROMPTS[2], PROMPTS[1]]
    out = sample_token_ids_tree(model, prompts, 3000, T, EOS, PAD, seed=4)
    laws = {tuple(p): exact_law(model, p, 1.0) for p in PROMPTS}
    assert [len(p) for p in prompts] != sorted(len(p) for p in prompts)
    for p, rows in zip(prompts, out):
        assert rows.shape == (3000, T)
        assert chi2_pvalue(rows, laws[tuple(p)]) > 1e-4
    # each prompt's rows fit its own law, not another prompt's
    assert chi2_pvalue(out[1], laws[tuple(PROMPTS[1])]) < 1e-6
    assert not torch.equal(out[0], out[2]), "two copies of a prompt are sampled independently"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_step_weights_reuse_one_buffer_and_keep_each_draws_numbers(dtype):
    """A decode step's weights (``StepWeights``): ``multinomial`` gets exactly the softmax of the fp32 logits over
    the temperature (its runs replay), ``inverse_cdf`` weights proportional to it, both read in the order ``rows``
    asks for (the prefix tree's cache order), and the step reuses one fp32 buffer instead of a fresh [R, V]
    tensor per operation."""
    g = torch.Generator().manual_seed(3)
    weights = sampling.StepWeights()
    seen = set()
    for rows in (None, torch.tensor([2, 0, 3, 1, 4]), torch.tensor([4, 3])):
        logits = (torch.randn(5, 300, generator=g) * 6).to(dtype)
        ordered = logits.float() if rows is None else logits.float()[rows]
        for temperature in (1.0, 0.7):
            exact = torch.softmax(ordered / temperature, dim=-1)
            assert torch.equal(weights(logits, temperature, "multinomial", rows), exact)
            w = weights(logits, temperature, "inverse_cdf", rows)
            assert w.dtype == torch.float32 and w.shape == exact.shape
            torch.testing.assert_close(w / w.sum(-1, keepdim=True), exact, rtol=1e-5, atol=1e-7)
            assert float(w.amax()) == 1.0                 # exp(0) at each row's top token: no overflow
            seen.add(w.data_ptr())
    assert len(seen) == 1                                 # one buffer, grown only if the rows grow
