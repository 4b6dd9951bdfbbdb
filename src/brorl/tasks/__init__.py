"""The tiny task suite: procedural direct-answer arithmetic plus a multi-answer probe family.

Public API (see :mod:`brorl.tasks.core`):

- :class:`TaskSettings`, :func:`write_splits`, :func:`generate_split`, :func:`read_split`;
- :func:`format_prompt`, :func:`verify`, :func:`enumerate_candidates`, :func:`max_new_tokens`.

The exact teacher-forced probabilities of a model (they need torch) are :mod:`brorl.models.scoring`'s: the tasks
sit below the models and import none of them.
"""

from brorl.tasks.core import (SPLITS, TaskSettings, correct_mask, enumerate_candidates, format_prompt,
                              generate_split, is_probe, max_new_tokens, read_jsonl, read_split, split_of,
                              strip_completion, verify, write_jsonl, write_splits)
from brorl.tasks.families import ALPHABET, FAMILIES

__all__ = ["SPLITS", "TaskSettings", "correct_mask", "enumerate_candidates", "format_prompt", "generate_split",
           "is_probe", "max_new_tokens", "read_jsonl", "read_split", "split_of", "strip_completion", "verify",
           "write_jsonl", "write_splits", "ALPHABET", "FAMILIES"]
