"""Test helper for the sampler tests: a hand-made 6-token Llama (``build_model`` with a stub tokenizer) whose
2-D weights are scaled up, so that next-token distributions are peaked and depend on the whole context (a wrong
KV-cache row would show) and the end token is common (eos = 1, pad = 0)."""

from __future__ import annotations

import torch

from brorl.models.settings import ModelSettings
from brorl.models.sft import build_model

EOS, PAD, VOCAB = 1, 0, 6


class Tok:
    """The tokenizer attributes ``build_model`` reads."""

    eos_token_id, pad_token_id = EOS, PAD

    def __len__(self):
        return VOCAB


def scaled_model(num_layers: int, scale: float):
    """A seeded random Llama (hidden 16, 2 heads, untied embeddings) with every matrix multiplied by ``scale``,
    in eval mode, on one thread."""
    torch.set_num_threads(1)
    m = build_model(ModelSettings(hidden_size=16, num_layers=num_layers, num_heads=2, intermediate_size=32,
                                  tie_word_embeddings=False), Tok(), seed=0)
    with torch.no_grad():
        for p in m.parameters():
            if p.ndim == 2:
                p.mul_(scale)
    return m.eval()
