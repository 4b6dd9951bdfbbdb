"""The tiny task suite: procedural direct-answer arithmetic plus a multi-answer probe family.

Public API (see :mod:`brorl.tasks.core`):

- :class:`TaskSettings`, :func:`write_splits`, :func:`generate_split`, :func:`read_split`;
- :func:`format_prompt`, :func:`verify`, :func:`enumerate_candidates`, :func:`max_new_tokens`;
- exact teacher-forced probabilities (need torch; imported lazily from :mod:`brorl.models.scoring`):
  :func:`exact_answer_probability`, :func:`candidate_probabilities`.
"""

from brorl.tasks.core import (SPLITS, TaskSettings, correct_mask, enumerate_candidates, format_prompt,
                              generate_split, is_probe, max_new_tokens, read_jsonl, read_split, split_of,
                              strip_completion, verify, write_jsonl, write_splits)
from brorl.tasks.families import ALPHABET, FAMILIES

_LAZY = {"exact_answer_probability", "candidate_probabilities", "answer_string_probabilities"}


def __getattr__(name):
    if name in _LAZY:
        from brorl.models import scoring

        return getattr(scoring, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["SPLITS", "TaskSettings", "correct_mask", "enumerate_candidates", "format_prompt", "generate_split",
           "is_probe", "max_new_tokens", "read_jsonl", "read_split", "split_of", "strip_completion", "verify",
           "write_jsonl", "write_splits", "ALPHABET", "FAMILIES", *sorted(_LAZY)]
