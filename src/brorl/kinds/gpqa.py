"""Multiple choice with four options (gpqa_diamond).

- converter: the question, the four options as ``A) ...`` lines (shuffled per record with a fixed seed) and
  :data:`GPQA_INSTRUCTION`; ``answer`` is the gold letter A-D, ``answer_text`` the gold option, ``choices``, ``domain``.
- scorer: 0/1, the letter :func:`extract_choice_letter` finds equals the gold letter. Not a training kind.
"""

from __future__ import annotations

import random
import re
from typing import Any, Sequence

from brorl import rewards
from brorl.kinds import PROMPT_SEPARATOR
from brorl.kinds.base import Kind, RowError, answer_part, binary_judge, gold_text, pick, record_id, text

GPQA_INSTRUCTION = ("Please reason step by step, and put the letter of your final answer (A, B, C or D) "
                    "within \\boxed{}.")
"""[our choice] the maths directive, asking for the option letter."""
GPQA_SHUFFLE_SEED = 0
"""The options of GPQA record ``r`` are shuffled with ``random.Random(f"brorl-gpqa:{seed}:{r.id}")``."""
CHOICE_LETTERS = "ABCD"
"""GPQA's option letters, in the order of a record's ``choices``."""


def gpqa_prompt(question: str, choices: Sequence[str]) -> str:
    options = "\n".join(f"{letter}) {text}" for letter, text in zip(CHOICE_LETTERS, choices))
    return f"{question}{PROMPT_SEPARATOR}{options}{PROMPT_SEPARATOR}{GPQA_INSTRUCTION}"


def shuffle_choices(record_id: str, correct: str, incorrect: Sequence[str],
                    seed: int = GPQA_SHUFFLE_SEED) -> tuple[list[str], str]:
    """The four options in a fixed per-record order and the gold letter."""
    options = [correct, *incorrect]
    order = list(range(len(options)))
    random.Random(f"brorl-gpqa:{seed}:{record_id}").shuffle(order)
    return [options[j] for j in order], CHOICE_LETTERS[order.index(0)]


def convert(spec, rel: str, i: int, row, source: str) -> dict:
    where = f"{spec.name} {rel}#{i}"
    question = text(pick(row, spec.fields["problem"], "problem", where))
    correct = text(pick(row, spec.fields["correct"], "correct answer", where))
    incorrect = [text(pick(row, spec.fields[f"incorrect_{j}"], f"incorrect answer {j}", where)) for j in (1, 2, 3)]
    if not question or not correct or not all(incorrect):
        raise RowError(f"{where}: empty question or option")
    rid = record_id(spec, rel, i, row)
    choices, letter = shuffle_choices(rid, correct, incorrect)
    domain = text(pick(row, spec.fields.get("domain", ()), "domain", where, required=False))
    return {"id": rid, "benchmark": spec.name, "prompt": gpqa_prompt(question, choices), "problem": question,
            "answer": letter, "answer_text": correct, "choices": choices, "domain": domain, "source": source}


_WRAPPERS = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mathit|bf|rm)\s*\{([^{}]*)\}")
_BOXED_LETTER = re.compile(r"^\(?([A-Da-d])\)?(?:$|[\s.:)\]]|\s*[-\u2013:]\s)")
_PHRASE_LETTER = re.compile(
    r"(?i:answer)(?:\s+(?i:is))?\s*[*_]*\s*(?:[:=]\s*)?[*_]*\s*(?:(?i:option|choice)\s*)?[*_]*\(?([A-D])\)?[*_]*"
    r"(?![A-Za-z0-9])")


def _letter_of(content: str) -> str | None:
    content = content.strip()
    for _ in range(3):  # \text{\textbf{C}} and the like
        new = _WRAPPERS.sub(r"\1", content)
        if new == content:
            break
        content = new
    content = content.strip().strip("$").strip()
    m = _BOXED_LETTER.match(content)
    return m.group(1).upper() if m else None


def extract_choice_letter(completion: Any) -> str | None:
    """The multiple-choice letter (A-D) a completion answers, or ``None``.

    The rule (ours: the papers do not state GPQA's extraction): look only at the text after the last
    ``</think>`` (the whole text when there is none), then take the first that applies of

    1. the last complete ``\\boxed{...}`` (:func:`brorl.rewards.extract_boxed`) whose content, after removing
       ``\\text{}``-style wrappers, ``$`` and parentheses, is a letter A-D, alone or followed by ``)``, ``.``,
       ``:`` or a space (``\\boxed{C}``, ``\\boxed{(C)}``, ``\\boxed{\\text{C}}``, ``\\boxed{C) 42 K}``; a lower-case
       letter counts inside a box);
    2. the last ``<answer>...</answer>`` whose content is such a letter;
    3. the last "answer is (C)" / "Answer: C" / "**Answer:** C" / "answer: option C" phrase (upper-case letter
       only, not followed by a letter or digit, so "Answer: Carbon" is no answer).

    Anything else (no box, a box holding a number or a word, garbage, non-text) is no answer.
    """
    text = rewards.completion_text(completion)
    if not text:
        return None
    part = answer_part(text)
    boxed = rewards.extract_boxed(part)
    if boxed is not None:
        letter = _letter_of(boxed)
        if letter is not None:
            return letter
    tagged = rewards.last_answer_tag(part)  # nested tags matched like braces, as the Reasoning Gym reward does
    if tagged is not None:
        letter = _letter_of(tagged)
        if letter is not None:
            return letter
    last = None
    for last in _PHRASE_LETTER.finditer(part[-4000:]):
        pass
    return last.group(1) if last is not None else None


def score(doc, completions) -> list[float]:
    """0/1 per completion: the extracted letter equals ``doc["answer"]``."""
    gold = doc.get("answer") if isinstance(doc, dict) else None
    if not isinstance(gold, str) or gold not in CHOICE_LETTERS or not gold:
        return [0.0] * len(list(completions))
    out = []
    for c in completions:
        try:
            out.append(1.0 if extract_choice_letter(c) == gold else 0.0)
        except Exception:  # noqa: BLE001
            out.append(0.0)
    return out


KIND = Kind(
    name="gpqa", description="paper profile, GPQA-Diamond: option letter in \\boxed{}", instruction=GPQA_INSTRUCTION,
    convert=convert, score=score, judge=binary_judge(score), request_extra={"gpqa_shuffle_seed": GPQA_SHUFFLE_SEED},
    code=(rewards, gold_text))
