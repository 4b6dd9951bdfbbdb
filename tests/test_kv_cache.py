"""Where the prompt's keys and values live (``prompt_kv``, brorl.models.kv_cache): ``shared`` holds them once per
prompt and splits a decode step's attention into the shared prompt and each row's own tokens, merged by log-sum-exp.
Against ``copied`` (a copy per row, the model's own attention kernel): the same logits up to rounding through row
drops and the prefix tree's row moves, on a grouped-query model (2 key/value heads for 4 query heads) with either of
the model's kernels (eager, sdpa); the same sampled tokens for the same seed on peaked toy models (both samplers,
prompts with different row counts in one block); the law of the completions by chi-square; the rows' prompts
followed through every row operation; the model's attention restored after decoding, also after an error."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from brorl.models import kv_cache, sampling
from brorl.models.kv_cache import PROMPT_KV, SharedPromptLayer, decoding, preallocate
from brorl.training import settings
from toy_llama import EOS, PAD, scaled_model

PROMPTS = [[2, 3, 4, 5], [5, 4, 3, 5], [3, 2, 5], [4, 4, 2, 3]]


def gqa_model(attn: str, scale: float = 3.0) -> LlamaForCausalLM:
    """A seeded 2-layer Llama with 4 query heads sharing 2 key/value heads (SmolLM2's grouping is 9 over 3)."""
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=6, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, bos_token_id=2, eos_token_id=EOS,
                      pad_token_id=PAD, tie_word_embeddings=False)
    cfg._attn_implementation = attn
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(scale)
    return model


def decode_with_drops_and_moves(model, caches: dict, steps: int = 6):
    """Teacher-forced decode steps over every cache of ``caches`` (each from the same two prompts x 3 rows), with rows
    dropped at step 2 (a prompt's rows unequal in number) and moved at step 4 as the prefix tree moves them, identically
    in each; yields (step, {name: last logits})."""
    g = torch.Generator().manual_seed(1)
    rows = 6
    for step in range(steps):
        if step == 2:  # drop rows 1 and 4: 2 rows of each prompt left
            for c in caches.values():
                c.batch_select_indices(torch.tensor([0, 2, 3, 5]))
            rows = 4
        if step == 4:  # the tree's re-seating: row 3 copied over row 0 (prompt 1's row now on prompt 0's slot)
            for c in caches.values():
                for layer in c.layers:
                    layer.move_rows(torch.tensor([0, 4]), torch.tensor([3, 1]), 5)
            rows = 5
        tok = torch.randint(0, 6, (rows, 1), generator=g)
        out = {}
        for name, c in caches.items():
            with decoding(model, c) as extra:
                out[name] = model(input_ids=tok, past_key_values=c, use_cache=True, **extra).logits[:, -1]
        yield step, out


def test_the_settings_and_the_cache_name_the_same_choices():
    assert settings.PROMPT_KV == PROMPT_KV == ("copied", "shared")
    assert settings.RLSettings().prompt_kv == "copied"  # the tiny profile's runs replay
    with pytest.raises(ValueError, match="prompt_kv 'per_row'"):
        preallocate(None, 4, 1, "per_row")


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@torch.no_grad()
def test_shared_prompt_logits_equal_the_models_own_attention(attn):
    """Two prompts x 3 rows; 6 teacher-forced decode steps; rows dropped (a prompt's rows unequal in number) and
    rows moved as the prefix tree moves them, identically in both caches."""
    model = gqa_model(attn)
    prompts = torch.tensor([PROMPTS[0], PROMPTS[1]])
    caches = {kv: preallocate(model(input_ids=prompts, use_cache=True).past_key_values, 3, 3, kv) for kv in PROMPT_KV}
    for step, out in decode_with_drops_and_moves(model, caches):
        assert torch.allclose(out["copied"], out["shared"], rtol=1e-5, atol=1e-5), step
    assert model.config._attn_implementation == attn
    shared = caches["shared"].layers[0]
    assert shared.owner.tolist() == [1, 0, 1, 1, 0] and shared.get_seq_length() == 4 + 6
    assert shared.prompt_keys.shape[0] == 2  # the prompts' keys once, not once per row
    assert caches["copied"].layers[0].keys.shape == (5, 2, 10, 8)


@torch.no_grad()
def test_bf16_shared_layers_hold_keys_transposed_with_the_same_logits(monkeypatch):
    """bf16 CPU layers keep their generated keys as [B, H, D, S] (q.K^T over a row-major slice: no copy in the
    CPU bf16 matmul); fp32 and fp16 ones do not. Through growth, row drops and the tree's row moves the logits equal those
    of the [B, H, S, D] layout exactly."""
    model = gqa_model("sdpa").to(torch.bfloat16)
    prompts = torch.tensor([PROMPTS[0], PROMPTS[1]])

    def cache(transposed):
        with monkeypatch.context() as m:
            m.setattr(kv_cache, "transposed_keys_pay", lambda keys: transposed)
            return preallocate(model(input_ids=prompts, use_cache=True).past_key_values, 2, 3, "shared")

    caches = {t: cache(t) for t in (True, False)}
    assert caches[True].layers[0]._kt and not caches[False].layers[0]._kt
    assert preallocate(model(input_ids=prompts, use_cache=True).past_key_values, 2, 3, "shared").layers[0]._kt
    for dtype in (torch.float32, torch.float16):  # the usual layout (fp32: slower transposed; fp16: not measured)
        assert not kv_cache.transposed_keys_pay(torch.zeros(1, 1, 1, 1, dtype=dtype))
    for step, out in decode_with_drops_and_moves(model, caches):  # capacity 2: the buffers grow twice
        assert torch.equal(out[True], out[False]), step
    assert caches[True].layers[0]._capacity() >= 6


@pytest.mark.parametrize("engine", ["shared_prompt", "prefix_tree"])
@pytest.mark.parametrize("make", [lambda: scaled_model(num_layers=2, scale=8.0), lambda: gqa_model("eager", 6.0)])
def test_same_tokens_for_the_same_seed(engine, make):
    """Peaked models (rounding too small to move a draw): both samplers sample exactly the same tokens with the
    prompt's keys and values shared; blocks of 3 and 1 prompts, rows dropped by end tokens."""
    model = make()
    sampler = sampling.SAMPLERS[engine]
    for draw in ("multinomial", "inverse_cdf"):
        a = sampler(model, PROMPTS, 16, 8, eos_id=EOS, pad_id=PAD, seed=7, chunk_samples=48, draw=draw)
        b = sampler(model, PROMPTS, 16, 8, eos_id=EOS, pad_id=PAD, seed=7, chunk_samples=48, draw=draw,
                    prompt_kv="shared")
        for x, y in zip(a, b):
            assert torch.equal(x, y), (engine, draw)
        assert any(bool((x == PAD).any()) for x in a)  # end tokens dropped rows
        assert len({tuple(r) for x in a for r in x.tolist()}) > 8  # many distinct completions: real splits


def test_shared_prompt_tree_law_matches_teacher_forcing():
    from test_sampling_tree import T, chi2_pvalue, exact_law

    model = scaled_model(num_layers=1, scale=20.0)
    laws = [exact_law(model, p, 0.7) for p in PROMPTS[:3]]
    out = sampling.sample_token_ids_tree(model, PROMPTS[:3], 12000, T, EOS, PAD, temperature=0.7, seed=3,
                                         chunk_samples=1 << 15, draw="inverse_cdf", prompt_kv="shared")
    for rows, law in zip(out, laws):
        assert chi2_pvalue(rows, law) > 1e-4


def test_owner_follows_every_row_operation():
    k = torch.randn(2, 1, 3, 4)
    layer = SharedPromptLayer(k, k.clone(), capacity=4, repeats=2)
    assert layer.owner.tolist() == [0, 0, 1, 1] and layer.keys.shape == (4, 1, 0, 4)
    layer.batch_select_indices(torch.tensor([1, 2, 3]))
    assert layer.owner.tolist() == [0, 1, 1]
    layer.move_rows(torch.tensor([3, 4, 0]), torch.tensor([0, 0, 2]), 5)  # grows past its rows
    assert layer.owner.tolist() == [1, 1, 1, 0, 0]
    rank, most = layer._rows_by_prompt()
    assert rank.tolist() == [0, 1, 2, 0, 1] and most == 3
    layer.batch_repeat_interleave(2)
    assert layer.owner.tolist() == [1, 1, 1, 1, 1, 1, 0, 0, 0, 0] and layer._layout is None


def test_the_models_attention_is_restored_after_an_error():
    model = gqa_model("sdpa")
    cache = preallocate(model(input_ids=torch.tensor([PROMPTS[0]]), use_cache=True).past_key_values, 2, 2, "shared")
    with pytest.raises(KeyError):
        with decoding(model, cache) as extra:
            assert model.config._attn_implementation == kv_cache.SHARED_PROMPT_ATTENTION
            assert extra == {"shared_prompt_cache": cache}
            raise KeyError("boom")
    assert model.config._attn_implementation == "sdpa"
    with pytest.raises(RuntimeError, match="inside brorl.models.kv_cache.decoding"):  # the kernel needs its cache
        model.config._attn_implementation = kv_cache.SHARED_PROMPT_ATTENTION
        try:
            model(input_ids=torch.tensor([[3]] * 2), past_key_values=cache, use_cache=True)
        finally:
            model.config._attn_implementation = "sdpa"
