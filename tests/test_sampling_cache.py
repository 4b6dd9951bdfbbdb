"""The samplers' preallocated KV cache (``brorl.models.sampling.PreallocatedLayer``): the same sampled tokens for
the same seed as the concatenating ``DynamicCache`` it replaced (both engines, with end tokens that drop rows and
prefix-tree steps that copy rows), and the layer's own bookkeeping (growth, row selection, repetition)."""

from __future__ import annotations

import pytest
import torch

from brorl.models import sampling
from toy_llama import EOS, PAD, scaled_model

PROMPTS = [[2, 3, 4, 5], [5, 4, 3, 5], [3, 2, 5]]


@pytest.fixture(scope="module")
def model():
    return scaled_model(num_layers=2, scale=8.0)


def concatenating(cache, new_tokens, repeats=1):
    """The cache before issue 31: DynamicCache as the model returns it (torch.cat every step)."""
    if repeats > 1:
        cache.batch_repeat_interleave(repeats)
    return cache


@pytest.mark.parametrize("engine", ["shared_prompt", "prefix_tree"])
@pytest.mark.parametrize("eos", [EOS, -1])
def test_same_tokens_as_the_concatenating_cache(model, monkeypatch, engine, eos):
    sampler = sampling.SAMPLERS[engine]
    new = sampler(model, PROMPTS, 24, 7, eos_id=eos, pad_id=PAD, seed=5, chunk_samples=48)
    with monkeypatch.context() as m:
        m.setattr(sampling, "preallocate", concatenating)
        old = sampler(model, PROMPTS, 24, 7, eos_id=eos, pad_id=PAD, seed=5, chunk_samples=48)
    assert len(new) == len(old) == len(PROMPTS)
    for a, b in zip(new, old):
        assert a.shape == (24, 7)
        assert torch.equal(a, b)
    if eos == EOS:  # rows ended early: the path that drops rows from the cache ran
        assert any(bool((a == PAD).any()) for a in new)


def test_layer_matches_concatenation_through_growth_and_selection():
    g = torch.Generator().manual_seed(0)
    k, v = torch.randn(2, 3, 4, 5, generator=g), torch.randn(2, 3, 4, 5, generator=g)
    layer = sampling.PreallocatedLayer(k, v, capacity=5, repeats=3)  # room for one step, then it grows
    ref_k, ref_v = k.repeat_interleave(3, 0), v.repeat_interleave(3, 0)
    assert torch.equal(layer.keys, ref_k) and layer.get_seq_length() == 4
    for step in range(4):
        nk, nv = torch.randn(6, 3, 1, 5, generator=g), torch.randn(6, 3, 1, 5, generator=g)
        ref_k, ref_v = torch.cat([ref_k, nk], 2), torch.cat([ref_v, nv], 2)
        out_k, out_v = layer.update(nk, nv)
        assert torch.equal(out_k, ref_k) and torch.equal(out_v, ref_v)
    assert layer.get_seq_length() == 8 and layer._k.shape[2] >= 8
    idx = torch.tensor([5, 0, 0, 2])
    layer.batch_select_indices(idx)
    assert torch.equal(layer.keys, ref_k[idx]) and torch.equal(layer.values, ref_v[idx])
    buf = layer._k
    layer.batch_select_indices(torch.arange(4))  # identity: no copy
    assert layer._k is buf
    layer.batch_repeat_interleave(2)
    assert torch.equal(layer.keys, ref_k[idx].repeat_interleave(2, 0))


def dense_split(probs, counts, generator):
    """The prefix-tree tally before issue 31: a dense [R, V] count matrix and its nonzero cells."""
    n_rows, vocab = probs.shape
    owner = torch.repeat_interleave(torch.arange(n_rows), counts)
    tok = torch.multinomial(probs[owner], 1, replacement=True, generator=generator).squeeze(1)
    split = torch.bincount(owner * vocab + tok, minlength=n_rows * vocab).view(n_rows, vocab)
    parent, tok = split.nonzero(as_tuple=True)
    return parent, tok, split[parent, tok]


@pytest.mark.parametrize("counts", [[1, 1, 1, 1, 1], [7, 1, 3, 1, 20]])
def test_split_counts_equals_the_dense_tally(counts):
    probs = torch.softmax(torch.randn(5, 11, generator=torch.Generator().manual_seed(1)) * 2, dim=-1)
    counts = torch.tensor(counts)
    new = sampling._split_counts(probs, counts, torch.Generator().manual_seed(3))
    old = dense_split(probs, counts, torch.Generator().manual_seed(3))
    for a, b in zip(new, old):
        assert torch.equal(a, b)
    assert int(new[2].sum()) == int(counts.sum())
