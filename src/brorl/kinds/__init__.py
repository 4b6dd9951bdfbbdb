"""Kinds of problems: one module per kind owns everything that depends on it.

A benchmark or training source of the data catalog (:mod:`brorl.data.catalog`) names its ``kind``; the module
``brorl.kinds.<kind>`` holds, in one place, what that kind needs along the pipeline (a :class:`~brorl.kinds.base.Kind`
named ``KIND``):

========================  =====================================================================================
kind (module)             converter / reward / lm-eval scorer
========================  =====================================================================================
``math``                  maths rows -> prompt + gold answer; math-verify (0/1), the same for training and evaluation
``gpqa``                  four options shuffled per record, gold letter; the letter the completion boxes
``ifeval``                IFEval's instructions; lm-eval's own IFEval checks (prompt-level strict)
``code``                  problem + sandbox test cases; fraction of tests passed (training), all passed (evaluation)
``reasoning_gym``         generated locally by the reasoning-gym package; each task's own verifier
========================  =====================================================================================

A converted record's ``prompt`` is the user message; the chat template is applied later (lm-eval's
``--apply_chat_template``, the training stage).

The tiny tasks are the sixth kind: they are generated, verified and described by :mod:`brorl.tasks` (one entry per
family in :data:`brorl.tasks.families.FAMILIES`) and their lm-eval tasks rendered by
:mod:`brorl.evaluation.tiny`.

Adding a kind: a module here defining ``KIND`` (its converter, scorer and, for training data, its reward) and a
catalog row naming it; :func:`kind` finds the module by the name (nothing to register), the converters
(:mod:`brorl.data.benchmarks`), the training reward (:mod:`brorl.data.training`) and the lm-eval tasks
(:mod:`brorl.evaluation.catalog_tasks`) ask it.

This package sits below :mod:`brorl.data` and :mod:`brorl.evaluation`: its modules import only the rewards, the
sandbox, numpy and the standard library (this file only the standard library).
"""

from __future__ import annotations

import importlib
import pkgutil

PROMPT_SEPARATOR = "\n\n"
"""Between a problem and its instruction in every converted prompt (every kind's converter)."""

_NOT_KINDS = {"base"}


def names() -> tuple[str, ...]:
    """Every kind: the modules of this package (sorted)."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in _NOT_KINDS))


def module(name: str):
    """The module ``brorl.kinds.<name>``; an unknown name is a ValueError naming the known kinds."""
    if name not in names():
        raise ValueError(f"unknown kind {name!r}; known: {', '.join(names())} (a module of brorl.kinds)")
    return importlib.import_module(f"{__name__}.{name}")


def kind(name: str):
    """The :class:`~brorl.kinds.base.Kind` of ``brorl.kinds.<name>`` (its ``KIND``)."""
    return module(name).KIND


__all__ = ["PROMPT_SEPARATOR", "kind", "module", "names"]
