"""The KV caches of the project's samplers (:mod:`brorl.models.sampling`), and where the prompt's keys and values live.

:class:`PreallocatedLayer`: each row's keys/values in buffers with room for every token still to come, written in
place at each decode step (``DynamicCache`` concatenates the whole cache of every layer at every step).

The prompt's keys and values are declared (``prompt_kv``, ``rl.recipe.prompt_kv``; issue 31):

- ``copied``: every row holds its own copy of its prompt's keys and values (:class:`PreallocatedLayer`), and attention
  is the model's own kernel over the row's whole cache. The tiny profile's setting, so its runs replay.
- ``shared``: the prompt's keys and values are held once per prompt (:class:`SharedPromptLayer`); a decode step's
  attention is split in two and merged by log-sum-exp (cascade attention, :meth:`SharedPromptLayer.attend`): the
  rows of a prompt side by side against its keys (one matmul per prompt, the prompt read once), and each row against
  its own generated tokens. The same attention up to rounding; N x less memory for the prompt, and a decode step
  reads the prompt once per step instead of once per row (on 2 CPU cores at N = 256, a 129-token prompt and 128
  tokens generated, attention took ~42% of a step with per-row copies).

:func:`decoding` switches the model's attention to the shared-prompt kernel for the decode steps only (the prefill
runs the model's own kernel), and back.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from transformers import AttentionInterface
from transformers.cache_utils import DynamicLayer
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

PROMPT_KV = ("copied", "shared")  # brorl.training.settings.PROMPT_KV holds the same names (a test holds them equal)
SHARED_PROMPT_ATTENTION = "brorl_shared_prompt"  # the attention implementation name registered below


class PreallocatedLayer(DynamicLayer):
    """One layer of a KV cache whose keys/values ([B, H, S, D]) live in buffers of ``capacity`` positions:
    :meth:`update` writes the new positions in place (``DynamicLayer`` concatenates the whole cache every step) and
    ``keys`` / ``values`` are views of the filled part of the first B (live) rows. Grows by doubling if a step
    overflows the buffer (positions) or :meth:`move_rows` needs more rows.

    ``keys_transposed``: the keys' buffer holds them as [B, H, D, S], and ``keys`` is the [B, H, S, D] transposed view
    of its filled part, so ``keys.transpose(-1, -2)`` (what the attention's q.K^T reads) is a plain row-major matrix
    per row and head. A CPU bf16 batched matmul copies a transposed strided operand first: at 256 rows, 3 heads,
    128 positions the q.K^T of a layer took 2.0 ms over the [B, H, S, D] buffer and 1.06 ms over this one (6.5 vs 3.3
    ms at 250), the same numbers; in fp32 it was 1.4-1.6x slower (benchmarks/bench_transposed_keys.py, an AMD EPYC
    host, 2026-12-07)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, capacity: int, repeats: int = 1,
                 keys_transposed: bool = False):
        super().__init__()
        self.dtype, self.device = keys.dtype, keys.device
        self._n = keys.shape[-2]
        self._b = keys.shape[0] * repeats
        self._kt = keys_transposed
        self._k = self._buffer(keys, capacity, repeats, transposed=self._kt)
        self._v = self._buffer(values, capacity, repeats)
        self.is_initialized = True
        self._view()

    @staticmethod
    def _buffer(x: torch.Tensor, capacity: int, repeats: int, rows: int = 0, transposed: bool = False) -> torch.Tensor:
        """A buffer of ``max(rows, B * repeats)`` rows and ``capacity`` positions holding ``x`` ([B, H, n, D]) with
        each row repeated ``repeats`` times, as [rows, H, S, D] (or [rows, H, D, S] when ``transposed``)."""
        b, h, n, d = x.shape
        rows, capacity = max(rows, b * repeats), max(capacity, n)
        buf = x.new_empty((rows, h, d, capacity) if transposed else (rows, h, capacity, d))
        full = buf.transpose(-1, -2) if transposed else buf  # [rows, H, S, D] either way
        full[: b * repeats].view(b, repeats, h, -1, d)[:, :, :, :n] = x.unsqueeze(1)  # repeat_interleave, in place
        return buf

    def _keys_full(self) -> torch.Tensor:
        """The keys' whole buffer as [rows, H, capacity, D] (a transposed view of it with ``keys_transposed``): every
        write and view below goes through it, so only :meth:`_buffer` knows the layout; the row operations on dim 0
        (:meth:`batch_repeat_interleave`, :meth:`batch_select_indices`) keep the buffer's own layout."""
        return self._k.transpose(-1, -2) if self._kt else self._k

    def _capacity(self) -> int:
        return self._keys_full().shape[2]

    def _view(self) -> None:
        self.keys, self.values = self._keys_full()[: self._b, :, : self._n], self._v[: self._b, :, : self._n]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        s = key_states.shape[-2]
        if self._n + s > self._capacity():
            cap = max(2 * self._capacity(), self._n + s)
            self._k = self._buffer(self.keys, cap, 1, transposed=self._kt)
            self._v = self._buffer(self.values, cap, 1)
        self._keys_full()[: self._b, :, self._n: self._n + s] = key_states
        self._v[: self._b, :, self._n: self._n + s] = value_states
        self._n += s
        self._view()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._n

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._k, self._v = (x[: self._b].repeat_interleave(repeats, dim=0) for x in (self._k, self._v))
        self._b *= repeats
        self._view()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if indices.shape[0] == self._b and bool((indices == torch.arange(
                indices.shape[0], device=indices.device)).all()):
            return  # every row keeps its place
        self._k, self._v = self._k[indices], self._v[indices]
        self._b = indices.shape[0]
        self._view()

    def move_rows(self, dst: torch.Tensor, src: torch.Tensor, live: int) -> None:
        """Copy the filled part of rows ``src`` to rows ``dst`` (every source read before any write), then keep the
        first ``live`` rows: the prefix tree's re-seating, which copies only the rows that changed."""
        if live > self._k.shape[0]:
            rows, cap = max(live, 2 * self._k.shape[0]), self._capacity()
            self._k = self._buffer(self.keys, cap, 1, rows, transposed=self._kt)
            self._v = self._buffer(self.values, cap, 1, rows)
        if dst.numel():
            keys = self._keys_full()
            keys[dst, :, : self._n] = keys[src, :, : self._n]
            self._v[dst, :, : self._n] = self._v[src, :, : self._n]
        self._b = live
        self._view()


class SharedPromptLayer(PreallocatedLayer):
    """A :class:`PreallocatedLayer` for each row's *generated* tokens only, with its prompt's keys and values held once
    per prompt (``prompt_keys`` / ``prompt_values``: [P, H, L, D]) and ``owner[r]``, the prompt of row r, following the
    rows through :meth:`batch_repeat_interleave`, :meth:`batch_select_indices` and :meth:`move_rows`. Positions
    (:meth:`get_seq_length`) count the prompt; ``keys`` / ``values`` are views of the generated part."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, capacity: int, repeats: int = 1):
        self.prompt_keys, self.prompt_values = keys, values
        self.prompt_len = keys.shape[-2]
        super().__init__(keys[:, :, :0], values[:, :, :0], capacity, repeats,
                         keys_transposed=transposed_keys_pay(keys))
        self._set_owner(torch.arange(keys.shape[0], device=keys.device).repeat_interleave(repeats))

    def _set_owner(self, owner: torch.Tensor) -> None:
        self.owner, self._layout = owner, None

    def get_seq_length(self) -> int:
        return self.prompt_len + self._n

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        self._set_owner(self.owner.repeat_interleave(repeats))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        self._set_owner(self.owner[indices])

    def move_rows(self, dst: torch.Tensor, src: torch.Tensor, live: int) -> None:
        super().move_rows(dst, src, live)
        owner = self.owner.new_zeros(max(live, self.owner.shape[0]))
        owner[: self.owner.shape[0]] = self.owner
        owner[dst] = self.owner[src]
        self._set_owner(owner[:live])

    def _rows_by_prompt(self) -> tuple[torch.Tensor, int]:
        """``rank[r]``: row r's place among its prompt's rows, and the most rows any prompt has (kept until the rows
        change)."""
        if self._layout is None:
            owner = self.owner
            counts = torch.bincount(owner, minlength=self.prompt_keys.shape[0])
            order = torch.argsort(owner, stable=True)
            rank = torch.empty_like(order)
            rank[order] = torch.arange(owner.shape[0], device=owner.device) - (counts.cumsum(0) - counts)[owner[order]]
            self._layout = (rank, int(counts.max()))
        return self._layout

    def attend(self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scaling: float,
               layout: tuple[torch.Tensor, int] | None = None) -> torch.Tensor:
        """Attention of one new token per row ([B, Hq, 1, D] queries; ``keys`` / ``values``: the rows' generated part,
        [B, Hk, t, D], grouped-query heads as the model's kernels pair them) over its prompt and its own tokens:
        softmax(q.[Kp, Ks]) [Vp; Vs] = (e^(mp-m) op + e^(ms-m) os) / (e^(mp-m) lp + e^(ms-m) ls), with m = max(mp, ms),
        each part's max (m), sum of exponentials (l) and unnormalised output (o) in fp32. Returns [B, 1, Hq, D].
        ``layout``: :meth:`_rows_by_prompt` of a layer with the same rows (every layer of a cache has; the first
        layer's serves them all), else this layer's own."""
        b, hq, s, d = query.shape
        if s != 1:
            raise ValueError(f"shared-prompt attention decodes one token per row, got {s} queries")
        hk = keys.shape[1]
        g = hq // hk
        q = query.view(b, hk, g, d)  # query head h reads key head h // g
        rank, most = layout if layout is not None else self._rows_by_prompt()
        n_prompts = self.prompt_keys.shape[0]
        grid = q.new_zeros((n_prompts, most, hk, g, d))  # each prompt's rows side by side (zero rows unused)
        grid[self.owner, rank] = q
        grid = grid.permute(0, 2, 1, 3, 4).reshape(n_prompts, hk, most * g, d)

        def part(q_, k, v):  # one part's (max, sum of exponentials, unnormalised output), fp32
            scores = (q_ @ k.transpose(-1, -2)).float() * scaling
            m = scores.amax(-1, keepdim=True)
            e = (scores - m).exp()
            return m, e.sum(-1, keepdim=True), (e.to(v.dtype) @ v).float()

        def to_rows(x):  # [P, hk, most * g, k] -> [B, hk, g, k]
            return x.view(n_prompts, hk, most, g, -1).transpose(1, 2)[self.owner, rank]

        mp, lp, op = (to_rows(x) for x in part(grid, self.prompt_keys, self.prompt_values))
        ms, ls, os_ = part(q, keys, values)
        m = torch.maximum(mp, ms)
        wp, ws = (mp - m).exp(), (ms - m).exp()
        out = (op * wp + os_ * ws) / (lp * wp + ls * ws)
        return out.to(query.dtype).view(b, 1, hq, d)


def transposed_keys_pay(keys: torch.Tensor) -> bool:
    """Whether a :class:`SharedPromptLayer` keeps its generated keys transposed (``keys_transposed``): bf16 keys on the
    CPU, where that made q.K^T 1.7-2.0x faster with the same numbers; fp32 keys (the tiny and small profiles' training
    samplers: 1.4-1.6x slower there), fp16 and other devices (not measured) keep the [B, H, S, D] buffer."""
    return keys.device.type == "cpu" and keys.dtype == torch.bfloat16


def preallocate(cache, new_tokens: int, repeats: int = 1, prompt_kv: str = "copied"):
    """``cache`` (a prefilled ``DynamicCache``) with every layer moved into a :class:`PreallocatedLayer` with room
    for ``new_tokens`` more positions, each row repeated ``repeats`` times (``batch_repeat_interleave``), or, with
    ``prompt_kv="shared"``, into a :class:`SharedPromptLayer` that keeps the prefilled rows once."""
    if prompt_kv not in PROMPT_KV:
        raise ValueError(f"prompt_kv {prompt_kv!r}: must be one of {PROMPT_KV}")
    if prompt_kv == "shared":
        cache.layers = [SharedPromptLayer(layer.keys, layer.values, new_tokens, repeats) for layer in cache.layers]
    else:
        cache.layers = [PreallocatedLayer(layer.keys, layer.values, layer.keys.shape[-2] + new_tokens, repeats)
                        for layer in cache.layers]
    return cache


def _shared_prompt_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                             **kwargs):
    cache = kwargs.get("shared_prompt_cache")
    if cache is None:
        raise RuntimeError("shared-prompt attention runs inside brorl.models.kv_cache.decoding(model, cache)")
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    layout = cache.layers[0]._rows_by_prompt()  # the same rows in every layer: one layout per step, not per layer
    return cache.layers[module.layer_idx].attend(query, key, value, scale, layout), None


AttentionInterface.register(SHARED_PROMPT_ATTENTION, _shared_prompt_attention)
AttentionMaskInterface.register(SHARED_PROMPT_ATTENTION, sdpa_mask)  # decode steps: no padding, no mask


@contextmanager
def decoding(model, cache):
    """The extra keyword arguments of a decode step's ``model(...)`` for ``cache``: none for per-row copies; with
    :class:`SharedPromptLayer` layers, the cache itself, and the model's attention switched to the shared-prompt
    kernel until the block ends (then restored, whatever happens)."""
    if not isinstance(cache.layers[0], SharedPromptLayer):
        yield {}
        return
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = SHARED_PROMPT_ATTENTION
    try:
        yield {"shared_prompt_cache": cache}
    finally:
        config._attn_implementation = before
