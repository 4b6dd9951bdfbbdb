"""Fast batched sampling of short completions with a shared-prompt KV cache.

For N samples of one prompt the prompt is prefilled once, its KV cache is repeated N times
(``DynamicCache.batch_repeat_interleave``) and the N continuations are decoded together; rows that
emitted the end token are dropped from the batch (``batch_select_indices``). Prompts of one length
are batched together without padding (every prompt of a task family has the same length), so
positions and attention need no masks. Pure temperature sampling: no top-k, no top-p.

``hf_generate_completions`` is the plain ``model.generate(num_return_sequences=N)`` baseline (no
prefix sharing), kept for the benchmark and as a cross-check.
"""

from __future__ import annotations

from collections import defaultdict

import torch


@torch.no_grad()
def _sample_block(model, prompts: torch.Tensor, repeats: int, max_new_tokens: int, eos_id: int, pad_id: int,
                  temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """[P, L] prompt ids -> [P * repeats, max_new_tokens] sampled ids (pad after the end token)."""
    n_rows = prompts.shape[0] * repeats
    out = torch.full((n_rows, max_new_tokens), pad_id, dtype=torch.long)
    res = model(input_ids=prompts, use_cache=True)
    cache = res.past_key_values
    logits = res.logits[:, -1, :].float()
    if repeats > 1:
        cache.batch_repeat_interleave(repeats)
        logits = logits.repeat_interleave(repeats, dim=0)
    active = torch.arange(n_rows)
    for t in range(max_new_tokens):
        if temperature > 0:
            probs = torch.softmax(logits / temperature, dim=-1)
            tok = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        else:
            tok = logits.argmax(dim=-1)
        out[active, t] = tok
        alive = tok != eos_id
        if t == max_new_tokens - 1 or not bool(alive.any()):
            break
        if not bool(alive.all()):
            keep = alive.nonzero().squeeze(1)
            cache.batch_select_indices(keep)
            active, tok = active[keep], tok[keep]
        res = model(input_ids=tok.unsqueeze(1), past_key_values=cache, use_cache=True)
        cache = res.past_key_values
        logits = res.logits[:, -1, :].float()
    return out


@torch.no_grad()
def sample_token_ids(model, prompt_ids: list[list[int]], n: int, max_new_tokens: int, eos_id: int, pad_id: int,
                     temperature: float = 1.0, seed: int | None = 0, chunk_samples: int = 1024,
                     progress=None) -> list[torch.Tensor]:
    """``n`` sampled continuations for each prompt: a list of [n, max_new_tokens] id tensors."""
    was_training = model.training
    model.eval()
    generator = None
    if seed is not None:
        generator = torch.Generator().manual_seed(int(seed))
    results: list[torch.Tensor | None] = [None] * len(prompt_ids)
    by_len = defaultdict(list)
    for i, p in enumerate(prompt_ids):
        by_len[len(p)].append(i)
    done = 0
    for length in sorted(by_len):
        idx = by_len[length]
        if n <= chunk_samples:
            per_call = max(1, chunk_samples // n)
            for s in range(0, len(idx), per_call):
                block = idx[s: s + per_call]
                prompts = torch.tensor([prompt_ids[i] for i in block], dtype=torch.long)
                ids = _sample_block(model, prompts, n, max_new_tokens, eos_id, pad_id, temperature, generator)
                for j, i in enumerate(block):
                    results[i] = ids[j * n:(j + 1) * n]
                done += len(block)
                if progress:
                    progress(done, len(prompt_ids))
        else:
            for i in idx:
                parts, left = [], n
                prompts = torch.tensor([prompt_ids[i]], dtype=torch.long)
                while left > 0:
                    r = min(left, chunk_samples)
                    parts.append(_sample_block(model, prompts, r, max_new_tokens, eos_id, pad_id, temperature,
                                               generator))
                    left -= r
                results[i] = torch.cat(parts)
                done += 1
                if progress:
                    progress(done, len(prompt_ids))
    model.train(was_training)
    return results  # type: ignore[return-value]


def decode_completions(tokenizer, ids: torch.Tensor) -> list[str]:
    """Decode sampled ids keeping special tokens (so the end token is visible to ``verify``)."""
    return tokenizer.batch_decode(ids.tolist(), skip_special_tokens=False)


@torch.no_grad()
def hf_generate_token_ids(model, prompt_ids: list[list[int]], n: int, max_new_tokens: int, eos_id: int,
                          pad_id: int, temperature: float = 1.0, seed: int | None = 0,
                          chunk_samples: int = 1024) -> list[torch.Tensor]:
    """The same contract as :func:`sample_token_ids` through ``model.generate`` (no prefix sharing)."""
    if seed is not None:
        torch.manual_seed(int(seed))
    model.eval()
    results: list[torch.Tensor | None] = [None] * len(prompt_ids)
    by_len = defaultdict(list)
    for i, p in enumerate(prompt_ids):
        by_len[len(p)].append(i)
    for length in sorted(by_len):
        idx = by_len[length]
        per_call = max(1, chunk_samples // n)
        for s in range(0, len(idx), per_call):
            block = idx[s: s + per_call]
            prompts = torch.tensor([prompt_ids[i] for i in block], dtype=torch.long)
            gen = model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts),
                                 do_sample=temperature > 0, temperature=temperature if temperature > 0 else None,
                                 top_k=0, top_p=1.0, num_return_sequences=n, max_new_tokens=max_new_tokens,
                                 eos_token_id=eos_id, pad_token_id=pad_id)
            new = gen[:, length:]
            if new.shape[1] < max_new_tokens:
                fill = torch.full((new.shape[0], max_new_tokens - new.shape[1]), pad_id, dtype=torch.long)
                new = torch.cat([new, fill], dim=1)
            for j, i in enumerate(block):
                results[i] = new[j * n:(j + 1) * n]
    return results  # type: ignore[return-value]
