"""Maths problems with a gold answer (aime24, aime25, amc, math500, minerva, olympiadbench; DeepScaleR for training).

- converter: ``prompt = problem + "\\n\\n" + MATH_INSTRUCTION``, ``answer`` the gold answer as text (lists joined
  with ", ", integral floats as integers). The instruction is DeepSeek-R1's usage recommendation for maths (the
  DeepSeek-R1 README, which also covers the R1-Distill-Qwen models ProRL starts from); BroRL and ProRL state no
  evaluation prompt, so using it here is **our choice**, as is the separator. A row without a usable gold answer
  stops a benchmark; a training source (``skip_unusable_gold``) skips and counts it.
- reward and scorer: :func:`brorl.rewards.math_reward` (math-verify, gold first) in the reward pool's hard-timeout
  worker processes, 0/1; the evaluation scores by the training reward's rules, and an answer that runs out of the
  training deadline is verified again with :data:`brorl.kinds.base.EVAL_RETRY_TIMEOUT`, then logged as a timeout.
"""

from __future__ import annotations

import logging

from brorl import rewards
from brorl.kinds import PROMPT_SEPARATOR
from brorl.kinds.base import (Kind, RowError, RowSkipped, binary_judge, doc_id, gold_text, pick, record_id, text,
                              usable_gold, with_eval_retry)

logger = logging.getLogger(__name__)

MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
"""DeepSeek-R1's recommended maths directive (DeepSeek-R1 README, usage recommendations) [our choice for
BroRL, whose papers state no evaluation prompt]."""


def convert(spec, rel: str, i: int, row, source: str) -> dict:
    where = f"{spec.name} {rel}#{i}"
    problem = text(pick(row, spec.fields["problem"], "problem", where))
    raw = pick(row, spec.fields["answer"], "answer", where)
    if not usable_gold(raw):
        raise RowSkipped("no_gold", f"{where}: {'empty' if gold_text(raw) == '' else 'unusable'} answer ({raw!r})")
    answer = gold_text(raw)
    if not problem:
        raise RowError(f"{where}: empty problem")
    return {"id": record_id(spec, rel, i, row), "benchmark": spec.name,
            "prompt": problem + PROMPT_SEPARATOR + MATH_INSTRUCTION, "problem": problem, "answer": answer,
            "source": source}


def score(doc, completions) -> list[float]:
    """0/1 per completion: :func:`brorl.rewards.math_reward` (completion, ``doc["answer"]``)."""
    completions = list(completions)
    if not completions:
        return []
    gold = doc.get("answer") if isinstance(doc, dict) else None
    if gold is None or gold == "":  # load_records refuses such a record; say so if one comes another way
        logger.warning("doc %r has no gold answer: its %d completions score 0", doc_id(doc), len(completions))
        return [0.0] * len(completions)
    return with_eval_retry(rewards.get_default_pool().math_rewards, completions, [gold] * len(completions), "math")


def reward(records, completions) -> tuple[list[float], list[bool]]:
    """0/1 per (record, completion) in one call of the math pool, and whether each timed out."""
    golds = [r.get("answer") for r in records]
    for r, gold in zip(records, golds):
        if not usable_gold(gold):  # the readers refuse such records: this is a caller's mistake
            raise ValueError(f"math record {r.get('id')!r} has no usable gold answer ({gold!r})")
    flags: list[bool] = []
    scores = rewards.get_default_pool().math_rewards(list(completions), golds, timeouts=flags)
    return scores, flags


KIND = Kind(
    name="math", description="paper profile, math: math-verify against the gold answer", instruction=MATH_INSTRUCTION,
    convert=convert, score=score, judge=binary_judge(score), rewards=reward, code=(rewards, gold_text))
