"""Exact answer probabilities by teacher forcing.

With direct answers and a character-level tokenizer every answer string has exactly one token
sequence, so the probability that temperature-1 sampling produces a correct answer is

    Q_pos(x) = sum over correct answers y of  P(y + eos | x)  =  sum_y prod_t p(y_t | x, y_<t)

and pass@k(x) = 1 - (1 - Q_pos(x))^k (BroRL Section 2.1). Sequences are scored in batches of
right-padded (prompt + continuation) token ids; only the continuation tokens are summed.
"""

from __future__ import annotations

import numpy as np
import torch

from brorl.tasks.core import enumerate_candidates, format_prompt


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@torch.no_grad()
def sequence_logprobs(model, pairs: list[tuple[list[int], list[int]]], batch_tokens: int = 32_768,
                      temperature: float = 1.0) -> np.ndarray:
    """log P(continuation | prompt) for each (prompt_ids, continuation_ids) pair (float64 array)."""
    out = np.zeros(len(pairs), dtype=np.float64)
    if not pairs:
        return out
    pad_id = 0
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
    device = next(model.parameters()).device
    chunks, cur, cur_max = [], [], 0
    for i in order:
        length = len(pairs[i][0]) + len(pairs[i][1])
        new_max = max(cur_max, length)
        if cur and (len(cur) + 1) * new_max > batch_tokens:
            chunks.append(cur)
            cur, new_max = [], length
        cur.append(i)
        cur_max = new_max
    if cur:
        chunks.append(cur)
    for idx in chunks:
        max_len = max(len(pairs[i][0]) + len(pairs[i][1]) for i in idx)
        ids = torch.full((len(idx), max_len), pad_id, dtype=torch.long)
        mask = torch.zeros((len(idx), max_len), dtype=torch.bool)
        for row, i in enumerate(idx):
            p, c = pairs[i]
            seq = list(p) + list(c)
            ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
            mask[row, len(p): len(seq)] = True
        ids = ids.to(device)
        logits = model(input_ids=ids).logits[:, :-1].float()
        if temperature != 1.0:
            logits = logits / temperature
        logp = torch.log_softmax(logits, dim=-1)
        tok_lp = logp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        tok_lp = torch.where(mask[:, 1:].to(device), tok_lp, torch.zeros_like(tok_lp))
        out[idx] = tok_lp.sum(dim=1).double().cpu().numpy()
    return out


def _answer_pairs(tokenizer, record: dict, strings: list[str]) -> list[tuple[list[int], list[int]]]:
    prompt_ids = encode(tokenizer, format_prompt(tokenizer, record))
    eos = tokenizer.eos_token_id
    return [(prompt_ids, encode(tokenizer, s) + [eos]) for s in strings]


def answer_string_probabilities(model, tokenizer, record: dict, strings: list[str],
                                temperature: float = 1.0) -> np.ndarray:
    """P(s + eos | prompt) for each string s."""
    return np.exp(sequence_logprobs(model, _answer_pairs(tokenizer, record, strings), temperature=temperature))


def exact_answer_probability(model, tokenizer, records: list[dict], temperature: float = 1.0) -> np.ndarray:
    """Q_pos per record: the sum over its correct answers of P(answer + eos | prompt), exactly."""
    pairs, owner = [], []
    for r_i, rec in enumerate(records):
        answers = rec.get("answers") or [rec["answer"]]
        p = _answer_pairs(tokenizer, rec, list(dict.fromkeys(answers)))
        pairs.extend(p)
        owner.extend([r_i] * len(p))
    probs = np.exp(sequence_logprobs(model, pairs, temperature=temperature))
    return np.bincount(np.asarray(owner, dtype=np.int64), weights=probs, minlength=len(records))


def candidate_probabilities(model, tokenizer, record: dict, candidates: list[str] | None = None,
                            temperature: float = 1.0) -> np.ndarray:
    """P(c + eos | prompt) for every candidate c of :func:`enumerate_candidates` (same order)."""
    candidates = enumerate_candidates(record) if candidates is None else candidates
    return answer_string_probabilities(model, tokenizer, record, candidates, temperature=temperature)
