"""Fast batched sampling of short completions with a shared-prompt KV cache, and a prefix-tree sampler.

For N samples of one prompt the prompt is prefilled once, its KV cache is repeated N times
(``DynamicCache.batch_repeat_interleave``) and the N continuations are decoded together; rows that
emitted the end token are dropped from the batch (``batch_select_indices``). Prompts of one length
are batched together without padding (every prompt of a task family has the same length), so
positions and attention need no masks. Pure temperature sampling: no top-k, no top-p.

``sample_token_ids_tree`` (engine ``prefix_tree``) has the same contract and law but decodes one row per
*distinct* partial completion with a sample count, splitting the count multinomially at each step, so its
forward batch is the number of distinct prefixes rather than N per prompt (many of the N short completions
of a trained model coincide). ``SAMPLERS`` maps the engine names to the two functions.

Both decode into a preallocated KV cache (:class:`PreallocatedLayer`): the prompt's cache is copied once into
buffers with room for every token still to come, and each step writes its keys and values in place, where
``DynamicCache`` concatenates (copies) the whole cache of every layer at every step; attention reads a view of the
filled part. Same numbers as the concatenating cache (tests/test_sampling_cache.py).

``hf_generate_token_ids`` is the plain ``model.generate(num_return_sequences=N)`` baseline (no
prefix sharing), kept for the benchmark and as a cross-check.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from transformers.cache_utils import DynamicLayer


class PreallocatedLayer(DynamicLayer):
    """One layer of a KV cache whose keys/values ([B, H, S, D]) live in buffers of ``capacity`` positions:
    :meth:`update` writes the new positions in place (``DynamicLayer`` concatenates the whole cache every step) and
    ``keys`` / ``values`` are views of the filled part. Grows by doubling if a step overflows the buffer."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, capacity: int, repeats: int = 1):
        super().__init__()
        self.dtype, self.device = keys.dtype, keys.device
        self._n = keys.shape[-2]
        self._k = self._buffer(keys, capacity, repeats)
        self._v = self._buffer(values, capacity, repeats)
        self.is_initialized = True
        self._view()

    @staticmethod
    def _buffer(x: torch.Tensor, capacity: int, repeats: int) -> torch.Tensor:
        b, h, n, d = x.shape
        buf = x.new_empty((b * repeats, h, max(capacity, n), d))
        buf.view(b, repeats, h, -1, d)[:, :, :, :n] = x.unsqueeze(1)  # repeat_interleave, written in place
        return buf

    def _view(self) -> None:
        self.keys, self.values = self._k[:, :, : self._n], self._v[:, :, : self._n]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        s = key_states.shape[-2]
        if self._n + s > self._k.shape[2]:
            cap = max(2 * self._k.shape[2], self._n + s)
            self._k, self._v = (self._buffer(x, cap, 1) for x in (self.keys, self.values))
        self._k[:, :, self._n: self._n + s] = key_states
        self._v[:, :, self._n: self._n + s] = value_states
        self._n += s
        self._view()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._n

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._k, self._v = (x.repeat_interleave(repeats, dim=0) for x in (self._k, self._v))
        self._view()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if indices.shape[0] == self._k.shape[0] and bool((indices == torch.arange(
                indices.shape[0], device=indices.device)).all()):
            return  # every row keeps its place (a prefix-tree step where no node split or finished)
        self._k, self._v = self._k[indices], self._v[indices]
        self._view()


def preallocate(cache, new_tokens: int, repeats: int = 1):
    """``cache`` (a prefilled ``DynamicCache``) with every layer moved into a :class:`PreallocatedLayer` with room
    for ``new_tokens`` more positions, each row repeated ``repeats`` times (``batch_repeat_interleave``)."""
    cache.layers = [PreallocatedLayer(layer.keys, layer.values, layer.keys.shape[-2] + new_tokens, repeats)
                    for layer in cache.layers]
    return cache


def model_device(model) -> torch.device:
    """The device of the model's parameters: prompts, outputs and the seeded generator live there (a CUDA
    generator for a model on the GPU, so seeded draws never cross devices)."""
    return next(model.parameters()).device


@torch.no_grad()
def _sample_block(model, prompts: torch.Tensor, repeats: int, max_new_tokens: int, eos_id: int, pad_id: int,
                  temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """[P, L] prompt ids -> [P * repeats, max_new_tokens] sampled ids (pad after the end token)."""
    n_rows = prompts.shape[0] * repeats
    out = torch.full((n_rows, max_new_tokens), pad_id, dtype=torch.long, device=prompts.device)
    res = model(input_ids=prompts, use_cache=True)
    cache = preallocate(res.past_key_values, max_new_tokens, repeats)
    logits = res.logits[:, -1, :].float()
    if repeats > 1:
        logits = logits.repeat_interleave(repeats, dim=0)
    active = torch.arange(n_rows, device=prompts.device)
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


def _sample_prompts(model, prompt_ids: list[list[int]], n: int, seed: int | None, chunk_samples: int, progress,
                    sample_block, shuffle: bool = False) -> list[torch.Tensor]:
    """The driver both samplers share: prompts grouped by length, ``chunk_samples // n`` prompts per call (a
    prompt with ``n > chunk_samples`` in calls of at most ``chunk_samples`` samples), progress, train/eval mode.

    ``sample_block(prompts [P, L], repeats, generator)`` returns P tensors [repeats, T]; ``shuffle`` puts each
    prompt's n rows in a random order from the seeded generator."""
    was_training = model.training
    model.eval()
    device = model_device(model)
    generator = None
    if seed is not None:
        generator = torch.Generator(device=device).manual_seed(int(seed))
    results: list[torch.Tensor | None] = [None] * len(prompt_ids)
    by_len = defaultdict(list)
    for i, p in enumerate(prompt_ids):
        by_len[len(p)].append(i)
    done = 0

    def finish(i: int, ids: torch.Tensor) -> None:
        results[i] = ids[torch.randperm(ids.shape[0], generator=generator, device=device)] if shuffle else ids

    try:
        for length in sorted(by_len):
            idx = by_len[length]
            if n <= chunk_samples:
                per_call = max(1, chunk_samples // n)
                blocks = [idx[s: s + per_call] for s in range(0, len(idx), per_call)]
            else:
                blocks = [[i] for i in idx]
            for block in blocks:
                prompts = torch.tensor([prompt_ids[i] for i in block], dtype=torch.long, device=device)
                if len(block) > 1 or n <= chunk_samples:
                    parts = [sample_block(prompts, n, generator)]
                else:
                    parts, left = [], n
                    while left > 0:
                        r = min(left, chunk_samples)
                        parts.append(sample_block(prompts, r, generator))
                        left -= r
                for j, i in enumerate(block):
                    finish(i, torch.cat([part[j] for part in parts]))
                done += len(block)
                if progress:
                    progress(done, len(prompt_ids))
    finally:
        model.train(was_training)
    return results  # type: ignore[return-value]


@torch.no_grad()
def sample_token_ids(model, prompt_ids: list[list[int]], n: int, max_new_tokens: int, eos_id: int, pad_id: int,
                     temperature: float = 1.0, seed: int | None = 0, chunk_samples: int = 1024,
                     progress=None) -> list[torch.Tensor]:
    """``n`` sampled continuations for each prompt: a list of [n, max_new_tokens] id tensors."""

    def block(prompts, repeats, generator):
        ids = _sample_block(model, prompts, repeats, max_new_tokens, eos_id, pad_id, temperature, generator)
        return list(ids.split(repeats))

    return _sample_prompts(model, prompt_ids, n, seed, chunk_samples, progress, block)


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
            prompts = torch.tensor([prompt_ids[i] for i in block], dtype=torch.long, device=model_device(model))
            gen = model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts),
                                 do_sample=temperature > 0, temperature=temperature if temperature > 0 else None,
                                 top_k=0, top_p=1.0, num_return_sequences=n, max_new_tokens=max_new_tokens,
                                 eos_token_id=eos_id, pad_token_id=pad_id)
            new = gen[:, length:]
            if new.shape[1] < max_new_tokens:
                fill = torch.full((new.shape[0], max_new_tokens - new.shape[1]), pad_id, dtype=torch.long,
                                  device=new.device)
                new = torch.cat([new, fill], dim=1)
            for j, i in enumerate(block):
                results[i] = new[j * n:(j + 1) * n]
    return results  # type: ignore[return-value]


# ----- prefix-tree sampler: one forward row per distinct partial completion

def _split_counts(probs: torch.Tensor, counts: torch.Tensor, generator: torch.Generator | None):
    """Multinomial(counts[r], probs[r]) for every row r, as the nonzero cells of the [R, V] count matrix:
    (parent row, token, count), ordered by parent then token.

    Each of the ``counts[r]`` samples at node r draws its next token independently from ``probs[r]``
    (exactly what i.i.d. sampling does); the draws are then tallied per (node, token) with ``torch.unique``
    (a dense [R, V] tally and its nonzero scan cost R x V per step). Rows with a count of 1 each (every
    node a single sample) draw from ``probs`` itself, without gathering a copy: the same draws."""
    n_rows, vocab = probs.shape
    owner = torch.repeat_interleave(torch.arange(n_rows, device=probs.device), counts)
    rows = probs if owner.shape[0] == n_rows else probs[owner]
    tok = torch.multinomial(rows, 1, replacement=True, generator=generator).squeeze(1)
    cells, child_counts = torch.unique(owner * vocab + tok, sorted=True, return_counts=True)
    return cells // vocab, cells % vocab, child_counts


@torch.no_grad()
def _sample_tree_block(model, prompts: torch.Tensor, repeats: int, max_new_tokens: int, eos_id: int, pad_id: int,
                       temperature: float, generator: torch.Generator | None) -> list[torch.Tensor]:
    """[P, L] prompt ids -> P tensors [repeats, max_new_tokens] (leaf order, not yet shuffled).

    The live set is the distinct partial completions (one KV-cache row each) with their sample counts;
    every decode step splits each count over the next tokens and keeps one child per token drawn."""
    n_prompts, device = prompts.shape[0], prompts.device
    if max_new_tokens <= 0:
        return [torch.full((repeats, 0), pad_id, dtype=torch.long, device=device) for _ in range(n_prompts)]
    res = model(input_ids=prompts, use_cache=True)
    cache = preallocate(res.past_key_values, max_new_tokens)
    logits = res.logits[:, -1, :].float()
    owner = torch.arange(n_prompts, device=device)       # prompt of each live node
    counts = torch.full((n_prompts,), repeats, dtype=torch.long, device=device)
    hist = torch.empty((n_prompts, 0), dtype=torch.long, device=device)  # tokens of each live node so far
    leaves: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (owner, count, padded ids)
    for t in range(max_new_tokens):
        if temperature > 0:  # children, grouped by parent
            parent, tok, child_counts = _split_counts(torch.softmax(logits / temperature, dim=-1), counts,
                                                      generator)
        else:
            parent, tok, child_counts = torch.arange(len(counts), device=device), logits.argmax(dim=-1), counts
        hist = torch.cat([hist[parent], tok.unsqueeze(1)], dim=1)
        owner = owner[parent]
        done = tok == eos_id
        if t == max_new_tokens - 1:
            done = torch.ones_like(done)
        if bool(done.any()):
            ids = torch.full((int(done.sum()), max_new_tokens), pad_id, dtype=torch.long, device=device)
            ids[:, : t + 1] = hist[done]
            leaves.append((owner[done], child_counts[done], ids))
        alive = ~done
        if not bool(alive.any()):
            break
        keep = alive.nonzero().squeeze(1)
        parent, tok, owner, counts, hist = parent[keep], tok[keep], owner[keep], child_counts[keep], hist[keep]
        cache.batch_select_indices(parent)                # repeated indices copy a parent's rows to each child
        res = model(input_ids=tok.unsqueeze(1), past_key_values=cache, use_cache=True)
        cache = res.past_key_values
        logits = res.logits[:, -1, :].float()
    leaf_owner = torch.cat([o for o, _, _ in leaves])
    leaf_counts = torch.cat([c for _, c, _ in leaves])
    leaf_ids = torch.cat([i for _, _, i in leaves])
    rows = torch.repeat_interleave(leaf_ids, leaf_counts, dim=0)
    row_owner = torch.repeat_interleave(leaf_owner, leaf_counts)
    order = torch.argsort(row_owner, stable=True)
    rows = rows[order]
    return list(rows.split(repeats))


@torch.no_grad()
def sample_token_ids_tree(model, prompt_ids: list[list[int]], n: int, max_new_tokens: int, eos_id: int, pad_id: int,
                          temperature: float = 1.0, seed: int | None = 0, chunk_samples: int = 1024,
                          progress=None) -> list[torch.Tensor]:
    """:func:`sample_token_ids`'s contract (a list of [n, max_new_tokens] id tensors, pad after the end token)
    through a prefix tree: the forward batch of a decode step is the number of *distinct* live partial
    completions, not ``n`` per prompt.

    A node is a distinct partial completion with a count c (the root: the prompt with count ``n``). Each step
    draws the next tokens of its c samples i.i.d. from the node's distribution (Multinomial(c, p)) and keeps
    one child per token drawn, with its count; children that emitted the end token are finished. The multiset
    of the n completions therefore has exactly the law of n i.i.d. samples; each leaf is expanded to ``count``
    identical rows and each prompt's n rows are put in a random order (from ``seed``'s generator), so the row
    order carries no information either. Not bit-identical to :func:`sample_token_ids` for the same seed.

    ``chunk_samples`` bounds the live rows of one forward: prompts of one length go ``chunk_samples // n``
    at a time (at most n distinct rows each); a prompt with ``n > chunk_samples`` is sampled as independent
    trees of at most ``chunk_samples`` samples, concatenated before the shuffle.
    """
    def block(prompts, repeats, generator):
        return _sample_tree_block(model, prompts, repeats, max_new_tokens, eos_id, pad_id, temperature, generator)

    return _sample_prompts(model, prompt_ids, n, seed, chunk_samples, progress, block, shuffle=True)


# engine name -> sampler with the sample_token_ids signature (the trainer's ``generation_engine``)
SAMPLERS = {"shared_prompt": sample_token_ids, "prefix_tree": sample_token_ids_tree}
