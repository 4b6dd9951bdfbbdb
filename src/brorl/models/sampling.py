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

Both decode into a preallocated KV cache (:class:`PreallocatedLayer`, brorl.models.kv_cache): the prompt's cache is
copied once into buffers with room for every token still to come, and each step writes its keys and values in place,
where ``DynamicCache`` concatenates (copies) the whole cache of every layer at every step; attention reads a view of
the filled part. Same numbers as the concatenating cache (tests/test_sampling_cache.py). The prefix tree keeps each
node's cache row where it is across steps (:func:`_reseat`: a node's first child inherits its row, other children
are copied into free rows), where it used to gather the whole cache in node order at every step that split a node.
With ``prompt_kv="shared"`` (brorl.models.kv_cache) the prompt's keys and values are kept once per prompt instead of
once per row, and a decode step's attention is split into the shared prompt and each row's own tokens.

The token draw is declared (``token_draw``, :func:`draw_tokens`): ``multinomial`` (torch.multinomial) or
``inverse_cdf`` (one uniform per row against a two-level running sum; the same law, and on CPU it skips the
exponential per vocabulary entry that torch.multinomial draws on one thread).

``hf_generate_token_ids`` is the plain ``model.generate(num_return_sequences=N)`` baseline (no
prefix sharing), kept for the benchmark and as a cross-check.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from brorl.models.kv_cache import PROMPT_KV, PreallocatedLayer, SharedPromptLayer, decoding, preallocate  # noqa: F401


def model_device(model) -> torch.device:
    """The device of the model's parameters: prompts, outputs and the seeded generator live there (a CUDA
    generator for a model on the GPU, so seeded draws never cross devices)."""
    return next(model.parameters()).device


@torch.no_grad()
def _sample_block(model, prompts: torch.Tensor, repeats: int, max_new_tokens: int, eos_id: int, pad_id: int,
                  temperature: float, generator: torch.Generator | None, draw: str = "multinomial",
                  prompt_kv: str = "copied") -> torch.Tensor:
    """[P, L] prompt ids -> [P * repeats, max_new_tokens] sampled ids (pad after the end token)."""
    n_rows = prompts.shape[0] * repeats
    out = torch.full((n_rows, max_new_tokens), pad_id, dtype=torch.long, device=prompts.device)
    res = model(input_ids=prompts, use_cache=True)
    cache = preallocate(res.past_key_values, max_new_tokens, repeats, prompt_kv)
    logits = res.logits[:, -1, :].float()
    if repeats > 1:
        logits = logits.repeat_interleave(repeats, dim=0)
    active = torch.arange(n_rows, device=prompts.device)
    with decoding(model, cache) as extra:
        _decode_rows(model, cache, extra, logits, out, active, max_new_tokens, eos_id, temperature, generator, draw)
    return out


def _decode_rows(model, cache, extra: dict, logits: torch.Tensor, out: torch.Tensor, active: torch.Tensor,
                 max_new_tokens: int, eos_id: int, temperature: float, generator, draw: str) -> None:
    """:func:`_sample_block`'s decode loop: fills ``out`` (rows ``active``) from the prefilled ``logits``."""
    weights = StepWeights()
    for t in range(max_new_tokens):
        if temperature > 0:
            tok = draw_tokens(weights(logits, temperature, draw), generator, draw)
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
        res = model(input_ids=tok.unsqueeze(1), past_key_values=cache, use_cache=True, **extra)
        logits = res.logits[:, -1, :]


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
                     progress=None, draw: str = "multinomial", prompt_kv: str = "copied") -> list[torch.Tensor]:
    """``n`` sampled continuations for each prompt: a list of [n, max_new_tokens] id tensors (``draw``: the token
    draw, :func:`draw_tokens`; ``prompt_kv``: where the prompt's keys and values live, brorl.models.kv_cache)."""

    def block(prompts, repeats, generator):
        ids = _sample_block(model, prompts, repeats, max_new_tokens, eos_id, pad_id, temperature, generator, draw,
                            prompt_kv)
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


# ----- the token draw (``token_draw``): torch.multinomial, or an inverse CDF in two levels

DRAW_BLOCK = 1024  # inverse_cdf: tokens per block of the first level


def _inverse_cdf(probs: torch.Tensor, generator: torch.Generator | None, block: int = DRAW_BLOCK) -> torch.Tensor:
    """One token per row of ``probs`` [R, V] (rows need not sum to 1), by inverse CDF in two levels: a block of
    ``block`` tokens in proportion to its mass (fp32 block sums, their running sum in fp64), then a token inside
    it in proportion to its probability (the block's running sum in fp64). One fp64 uniform per row.

    ``torch.multinomial`` on CPU draws an exponential per vocabulary entry (R x V of them, one thread): ~0.3 s
    per decode step at R = 256 and SmolLM2's 49,152 tokens. This reads the R x V probabilities once (the block
    sums) and then R x ``block``; the law is the same up to the fp32 rounding of the probabilities, which
    ``torch.multinomial`` shares. A token or block without mass is never drawn (a uniform that rounds up to
    the total goes to the last one with mass)."""
    n_rows, vocab = probs.shape
    block = min(block, vocab)
    if vocab % block:
        probs = torch.nn.functional.pad(probs, (0, block - vocab % block))
    blocks = probs.reshape(n_rows, -1, block)
    rows = torch.arange(n_rows, device=probs.device)

    def last_with_mass(x: torch.Tensor) -> torch.Tensor:
        return x.shape[-1] - 1 - (x > 0).flip(-1).int().argmax(-1)

    mass = blocks.sum(-1).double()                                      # [R, K]
    edges = mass.cumsum(-1)
    u = torch.rand((n_rows, 1), dtype=torch.float64, generator=generator, device=probs.device) * edges[:, -1:]
    blk = torch.minimum(torch.searchsorted(edges, u, right=True).squeeze(1), last_with_mass(mass))
    start = torch.where(blk > 0, edges[rows, (blk - 1).clamp_min(0)], torch.zeros_like(edges[:, 0]))
    inside = blocks[rows, blk]                                          # [R, block]
    local = inside.double().cumsum(-1)
    x = (u.squeeze(1) - start) / mass[rows, blk] * local[:, -1]        # the uniform, rescaled to the block's sum
    tok = torch.searchsorted(local, x.unsqueeze(1), right=True).squeeze(1)
    return blk * block + torch.minimum(tok, last_with_mass(inside))


class StepWeights:
    """The next-token weights of a decode step, from its logits [R, V] (the model's dtype), in one fp32 buffer reused
    from step to step (grown when R grows).

    A fresh [R, V] fp32 tensor per operation is what made the per-step logits work cost as much as the lm_head matmul
    on CPU (issue 31, 256 rows x 49,152 tokens = 50 MB: each fresh tensor is mapped and page-faulted anew, ~15-25 ms
    for a copy, a division, the softmax and the gather back to node order). Here the rows are read (``rows``: the
    logits row of each output row, the prefix tree's cache order; None: in order) and converted into the buffer,
    then, for ``token_draw``:

    - ``multinomial``: ``softmax(logits / temperature)``, the same numbers as before (the tiny profile's runs replay);
    - ``inverse_cdf``: ``exp((logits - max) / temperature)`` in place, unnormalised (:func:`_inverse_cdf` draws from
      any non-negative weights: the same law as the softmax, up to rounding).

    The result is valid until the next call."""

    def __init__(self):
        self._buf: torch.Tensor | None = None

    def __call__(self, logits: torch.Tensor, temperature: float, draw: str,
                 rows: torch.Tensor | None = None) -> torch.Tensor:
        n = logits.shape[0] if rows is None else rows.shape[0]
        buf = self._buf
        if buf is None or buf.shape[0] < n or buf.shape[1] != logits.shape[1] or buf.device != logits.device:
            buf = self._buf = logits.new_empty((n, logits.shape[1]), dtype=torch.float32)
        w = buf[:n]
        if rows is None:
            w.copy_(logits)
        elif logits.dtype == torch.float32:
            torch.index_select(logits, 0, rows, out=w)
        else:
            w.copy_(logits.index_select(0, rows))  # gathered in the model's dtype, then converted
        if draw != "inverse_cdf":
            return torch.softmax(w / temperature, dim=-1)
        w.sub_(w.amax(dim=-1, keepdim=True))
        if temperature != 1.0:
            w.div_(temperature)
        return w.exp_()


def draw_tokens(probs: torch.Tensor, generator: torch.Generator | None, draw: str = "multinomial") -> torch.Tensor:
    """One token id per row of ``probs`` [R, V]: ``multinomial`` (torch.multinomial, the project's draw before
    issue 31, so its runs replay) or ``inverse_cdf`` (:func:`_inverse_cdf`, the same law, faster on CPU)."""
    if draw == "multinomial":
        return torch.multinomial(probs, 1, replacement=True, generator=generator).squeeze(1)
    if draw == "inverse_cdf":
        return _inverse_cdf(probs, generator, DRAW_BLOCK)
    raise ValueError(f"token_draw {draw!r}: must be 'multinomial' or 'inverse_cdf'")


# ----- prefix-tree sampler: one forward row per distinct partial completion

def _split_counts(probs: torch.Tensor, counts: torch.Tensor, generator: torch.Generator | None,
                  draw: str = "multinomial"):
    """Multinomial(counts[r], probs[r]) for every row r, as the nonzero cells of the [R, V] count matrix:
    (parent row, token, count), ordered by parent then token.

    Each of the ``counts[r]`` samples at node r draws its next token independently from ``probs[r]``
    (exactly what i.i.d. sampling does); the draws are then tallied per (node, token) with ``torch.unique``
    (a dense [R, V] tally and its nonzero scan cost R x V per step). Rows with a count of 1 each (every
    node a single sample) draw from ``probs`` itself, without gathering a copy: the same draws. ``draw``: see
    :func:`draw_tokens`."""
    n_rows, vocab = probs.shape
    owner = torch.repeat_interleave(torch.arange(n_rows, device=probs.device), counts)
    rows = probs if owner.shape[0] == n_rows else probs[owner]
    tok = draw_tokens(rows, generator, draw)
    cells, child_counts = torch.unique(owner * vocab + tok, sorted=True, return_counts=True)
    return cells // vocab, cells % vocab, child_counts


def _reseat(cache, slot: torch.Tensor, parent: torch.Tensor) -> torch.Tensor:
    """Cache rows for the next decode step of the prefix tree, copying only the rows that change.

    ``slot[i]`` is the cache row of live node i; ``parent`` (non-decreasing) the node each kept child came from.
    A parent's first child keeps the parent's row in place; the other children, and first children whose row is
    past the new live count, are copied into the rows left free below it (the nodes that ended or had no kept
    child). Returns the children's rows, the cache holding exactly that many live rows. Before issue 31 every
    step with a split gathered the whole cache in child order (``batch_select_indices(parent)``); the nodes are
    still drawn in that order, so the samples are the same."""
    b = parent.shape[0]
    first = torch.ones(b, dtype=torch.bool, device=parent.device)
    first[1:] = parent[1:] != parent[:-1]
    new = slot[parent]                                  # every child starts on its parent's row
    inherited = new[first]
    used = torch.zeros(b, dtype=torch.bool, device=parent.device)
    used[inherited[inherited < b]] = True
    holes = (~used).nonzero().squeeze(1)
    movers = ((~first) | (new >= b)).nonzero().squeeze(1)
    src = new[movers]
    new[movers] = holes
    for layer in cache.layers:
        layer.move_rows(holes, src, b)
    return new


@torch.no_grad()
def _sample_tree_block(model, prompts: torch.Tensor, repeats: int, max_new_tokens: int, eos_id: int, pad_id: int,
                       temperature: float, generator: torch.Generator | None,
                       draw: str = "multinomial", prompt_kv: str = "copied") -> list[torch.Tensor]:
    """[P, L] prompt ids -> P tensors [repeats, max_new_tokens] (leaf order, not yet shuffled).

    The live set is the distinct partial completions (one KV-cache row each) with their sample counts;
    every decode step splits each count over the next tokens and keeps one child per token drawn."""
    n_prompts, device = prompts.shape[0], prompts.device
    if max_new_tokens <= 0:
        return [torch.full((repeats, 0), pad_id, dtype=torch.long, device=device) for _ in range(n_prompts)]
    res = model(input_ids=prompts, use_cache=True)
    cache = preallocate(res.past_key_values, max_new_tokens, 1, prompt_kv)
    logits, rows = res.logits[:, -1, :], None            # rows: the cache row of each node's logits (None: in order)
    weights = StepWeights()
    owner = torch.arange(n_prompts, device=device)       # prompt of each live node
    slot = torch.arange(n_prompts, device=device)        # cache row of each live node
    counts = torch.full((n_prompts,), repeats, dtype=torch.long, device=device)
    hist = torch.empty((n_prompts, 0), dtype=torch.long, device=device)  # tokens of each live node so far
    leaves: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (owner, count, padded ids)
    with decoding(model, cache) as extra:
        for t in range(max_new_tokens):
            if temperature > 0:  # children, grouped by parent
                parent, tok, child_counts = _split_counts(weights(logits, temperature, draw, rows), counts,
                                                          generator, draw)
            else:
                top = logits.argmax(dim=-1)
                parent, tok, child_counts = (torch.arange(len(counts), device=device),
                                             top if rows is None else top[rows], counts)
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
            slot = _reseat(cache, slot, parent)
            in_place = bool((slot == torch.arange(len(slot), device=device)).all())
            step = tok if in_place else torch.empty_like(tok).index_put_((slot,), tok)  # in cache-row order
            res = model(input_ids=step.unsqueeze(1), past_key_values=cache, use_cache=True, **extra)
            logits, rows = res.logits[:, -1, :], None if in_place else slot  # read back in node order
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
                          progress=None, draw: str = "multinomial", prompt_kv: str = "copied") -> list[torch.Tensor]:
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
    trees of at most ``chunk_samples`` samples, concatenated before the shuffle. ``draw``: the token draw
    (:func:`draw_tokens`); ``prompt_kv``: where the prompt's keys and values live (brorl.models.kv_cache).
    """
    def block(prompts, repeats, generator):
        return _sample_tree_block(model, prompts, repeats, max_new_tokens, eos_id, pad_id, temperature, generator,
                                  draw, prompt_kv)

    return _sample_prompts(model, prompt_ids, n, seed, chunk_samples, progress, block, shuffle=True)


# engine name -> sampler with the sample_token_ids signature (the trainer's ``generation_engine``)
SAMPLERS = {"shared_prompt": sample_token_ids, "prefix_tree": sample_token_ids_tree}
