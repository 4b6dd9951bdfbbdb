"""The samplers' preallocated KV cache (``brorl.models.sampling.PreallocatedLayer``): the same sampled tokens for
the same seed as the concatenating ``DynamicCache`` it replaced (both engines, with end tokens that drop rows and
prefix-tree steps that copy rows), the prefix tree's re-seating of cache rows (``_reseat``: only changed rows are
copied, same tokens as gathering the whole cache in node order), and the layer's own bookkeeping (growth, row
selection, repetition, row moves)."""

from __future__ import annotations

import pytest
import torch

from brorl.models import sampling
from toy_llama import EOS, PAD, scaled_model

PROMPTS = [[2, 3, 4, 5], [5, 4, 3, 5], [3, 2, 5]]


@pytest.fixture(scope="module")
def model():
    return scaled_model(num_layers=2, scale=8.0)


def concatenating(cache, new_tokens, repeats=1, prompt_kv="copied"):
    """The cache before issue 31: DynamicCache as the model returns it (torch.cat every step)."""
    if repeats > 1:
        cache.batch_repeat_interleave(repeats)
    return cache


def gathering(cache, slot, parent):
    """The prefix tree's cache rows before issue 31: the whole cache gathered in node order at every step
    (``slot`` is then always the identity)."""
    cache.batch_select_indices(parent)
    return torch.arange(parent.shape[0])


@pytest.mark.parametrize("engine", ["shared_prompt", "prefix_tree"])
@pytest.mark.parametrize("eos", [EOS, -1])
def test_same_tokens_as_the_concatenating_cache(model, monkeypatch, engine, eos):
    sampler = sampling.SAMPLERS[engine]
    new = sampler(model, PROMPTS, 24, 7, eos_id=eos, pad_id=PAD, seed=5, chunk_samples=48)
    with monkeypatch.context() as m:
        m.setattr(sampling, "preallocate", concatenating)
        m.setattr(sampling, "_reseat", gathering)
        old = sampler(model, PROMPTS, 24, 7, eos_id=eos, pad_id=PAD, seed=5, chunk_samples=48)
    assert len(new) == len(old) == len(PROMPTS)
    for a, b in zip(new, old):
        assert a.shape == (24, 7)
        assert torch.equal(a, b)
    if eos == EOS:  # rows ended early: the path that drops rows from the cache ran
        assert any(bool((a == PAD).any()) for a in new)


@pytest.mark.parametrize("transposed", [False, True])  # keys held [B, H, S, D] or [B, H, D, S] (bf16 CPU layers)
def test_layer_matches_concatenation_through_growth_and_selection(transposed):
    g = torch.Generator().manual_seed(0)
    k, v = torch.randn(2, 3, 4, 5, generator=g), torch.randn(2, 3, 4, 5, generator=g)
    layer = sampling.PreallocatedLayer(k, v, capacity=5, repeats=3, keys_transposed=transposed)  # grows after a step
    assert layer._k.shape[-1 if transposed else -2] == 5  # the layout asked for
    ref_k, ref_v = k.repeat_interleave(3, 0), v.repeat_interleave(3, 0)
    assert torch.equal(layer.keys, ref_k) and layer.get_seq_length() == 4
    for step in range(4):
        nk, nv = torch.randn(6, 3, 1, 5, generator=g), torch.randn(6, 3, 1, 5, generator=g)
        ref_k, ref_v = torch.cat([ref_k, nk], 2), torch.cat([ref_v, nv], 2)
        out_k, out_v = layer.update(nk, nv)
        assert torch.equal(out_k, ref_k) and torch.equal(out_v, ref_v)
    assert layer.get_seq_length() == 8 and layer._capacity() >= 8
    if transposed:  # what q.K^T reads is a row-major slice of the buffer, not a copy
        assert layer.keys.transpose(-1, -2).stride()[-1] == 1 and layer.keys.data_ptr() == layer._k.data_ptr()
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


@pytest.mark.parametrize("eos", [EOS, -1])
def test_reseating_gives_the_tokens_of_gathering_in_node_order(model, monkeypatch, eos):
    """The same preallocated cache either way: only the row placement differs (and it did move rows)."""
    moved = []
    real = sampling._reseat

    def counting(cache, slot, parent):
        new = real(cache, slot, parent)
        moved.append(not torch.equal(new, torch.arange(new.shape[0])))
        return new

    monkeypatch.setattr(sampling, "_reseat", counting)
    new = sampling.sample_token_ids_tree(model, PROMPTS, 24, 7, eos_id=eos, pad_id=PAD, seed=5, chunk_samples=48)
    assert any(moved)  # some step left nodes off their node-order row
    monkeypatch.setattr(sampling, "_reseat", gathering)
    old = sampling.sample_token_ids_tree(model, PROMPTS, 24, 7, eos_id=eos, pad_id=PAD, seed=5, chunk_samples=48)
    for a, b in zip(new, old):
        assert torch.equal(a, b)


@pytest.mark.parametrize("parent, slot", [
    ([0, 0, 0, 1, 3, 3], [2, 0, 3, 1]),   # splits: extra children go to new rows
    ([1, 3], [0, 1, 2, 3]),               # nodes 0 and 2 ended: node 3's child moves down into a free row
    ([2, 2, 2], [3, 1, 0]),               # one node splits three ways into the rows of nodes that ended
    ([0] * 7, [0]),                       # more live rows than the buffer holds: it grows
    ([0, 1, 2], [0, 1, 2]),               # nothing split: no copy
])
@pytest.mark.parametrize("transposed", [False, True])
def test_reseat_puts_each_child_on_a_copy_of_its_parent(parent, slot, transposed):
    g = torch.Generator().manual_seed(2)
    rows = max(slot) + 1
    k, v = torch.randn(rows, 3, 4, 5, generator=g), torch.randn(rows, 3, 4, 5, generator=g)
    layer = sampling.PreallocatedLayer(k, v, capacity=6, keys_transposed=transposed)
    before_k, before_v = layer.keys.clone(), layer.values.clone()
    cache = type("Cache", (), {"layers": [layer]})()
    buf = layer._k
    parent, slot = torch.tensor(parent), torch.tensor(slot)
    new = sampling._reseat(cache, slot, parent)
    assert sorted(new.tolist()) == list(range(len(parent)))  # the live rows are exactly 0..b-1
    assert layer.keys.shape[0] == len(parent)
    for child, p in enumerate(parent.tolist()):
        assert torch.equal(layer.keys[new[child]], before_k[slot[p]])
        assert torch.equal(layer.values[new[child]], before_v[slot[p]])
    first = [i == 0 or parent[i] != parent[i - 1] for i in range(len(parent))]
    kept = [bool(f) and int(slot[parent[i]]) < len(parent) for i, f in enumerate(first)]
    assert all(int(new[i]) == int(slot[parent[i]]) for i in range(len(parent)) if kept[i])  # first child stays put
    if torch.equal(slot, torch.arange(len(slot))) and torch.equal(parent, torch.arange(len(parent))):
        assert layer._k is buf and torch.equal(new, slot)
