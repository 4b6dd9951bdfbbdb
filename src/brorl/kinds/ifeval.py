"""Instruction following (ifeval): lm-eval's own IFEval checks.

- converter: the IFEval prompt unchanged (the instructions are the task), ``key``, ``instruction_id_list``,
  ``kwargs`` (a JSON string: lm-eval's checker arguments) and an empty ``answer``.
- scorer: prompt-level strict accuracy per completion, on the text after the last ``</think>`` (ProRL: "IFEval-style
  checks on the text after </think>"); the lm-eval task also reports ``prompt_level_loose_acc`` and the
  instruction-level accuracies (micro-averaged over all instructions of all samples, as lm-eval's IFEval task does).
  Needs lm-eval's ``ifeval`` extra and NLTK ``punkt_tab`` (not installed here): a missing one is a set-up error
  that says what to install. Not a training kind.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
from typing import Any

import numpy as np

from brorl import rewards
from brorl.kinds.base import Kind, RowError, answer_part, doc_id, gold_text, pick

logger = logging.getLogger(__name__)

IFEVAL_MODULES = ("langdetect", "immutabledict", "nltk")
IFEVAL_NLTK_DATA = ("tokenizers/punkt_tab",)


def convert(spec, rel: str, i: int, row, source: str) -> dict:
    where = f"{spec.name} {rel}#{i}"
    prompt = pick(row, spec.fields["problem"], "prompt", where)
    key = pick(row, spec.fields["key"], "key", where)
    ids = pick(row, spec.fields["instruction_id_list"], "instruction_id_list", where)
    kwargs = pick(row, spec.fields["kwargs"], "kwargs", where)
    if isinstance(kwargs, str):
        kwargs = json.loads(kwargs)
    if not isinstance(prompt, str) or not prompt or not isinstance(ids, (list, tuple)) or len(kwargs) != len(ids):
        raise RowError(f"{where}: malformed IFEval row")
    kwargs = [{k: v for k, v in (kw or {}).items() if v is not None} for kw in kwargs]  # Arrow-unified nulls
    return {"id": str(key), "benchmark": spec.name, "prompt": prompt, "problem": prompt, "answer": "",
            "key": int(key), "instruction_id_list": [str(x) for x in ids], "kwargs": json.dumps(kwargs),
            "source": source}


def ifeval_missing() -> list[str]:
    """What lm-eval's IFEval scoring needs and this environment lacks (empty: IFEval can be scored).

    ``lm_eval.tasks.ifeval`` imports ``langdetect`` and ``immutabledict`` (lm-eval's ``ifeval`` extra) and, on
    import, looks for NLTK's ``punkt_tab`` data and tries to *download* it when absent, so the data is checked
    here first and the module is never imported without it."""
    missing = []
    for mod in IFEVAL_MODULES:
        if mod in sys.modules:
            continue
        try:
            if importlib.util.find_spec(mod) is None:
                missing.append(mod)
        except (ImportError, ValueError):
            missing.append(mod)
    if "nltk" not in missing:
        import nltk

        for resource in IFEVAL_NLTK_DATA:
            try:
                nltk.data.find(resource)
            except LookupError:
                missing.append(f"nltk data {resource}")
    return missing


def _ifeval_utils():
    missing = ifeval_missing()
    if missing:
        raise RuntimeError(
            "IFEval scoring uses lm-eval's own checks (lm_eval.tasks.ifeval), which need "
            f"{', '.join(missing)}: install lm-eval's ifeval extra (pip install 'lm_eval[ifeval]', i.e. langdetect "
            "and immutabledict) and the NLTK data (python -m nltk.downloader punkt_tab; count_sentences also "
            "loads tokenizers/punkt). Nothing was scored.")
    from lm_eval.tasks.ifeval import utils as ifeval_utils

    return ifeval_utils


def ifeval_response(completion: Any) -> str:
    """The response IFEval checks: the text after the last ``</think>`` (the whole text without one)."""
    text = rewards.completion_text(completion)
    return answer_part(text) if text else ""


def _ifeval_kwargs(doc) -> list[dict]:
    kwargs = doc.get("kwargs")
    if isinstance(kwargs, (str, bytes)):
        kwargs = json.loads(kwargs)
    return [dict(k or {}) for k in kwargs]


def ifeval_results(doc, completion) -> dict:
    """lm-eval's four IFEval results for one completion (``prompt_level_*`` bools, ``inst_level_*`` lists)."""
    ifeval_utils = _ifeval_utils()
    inp = ifeval_utils.InputExample(key=doc.get("key"), instruction_id_list=list(doc["instruction_id_list"]),
                                    prompt=doc.get("problem", doc.get("prompt")), kwargs=_ifeval_kwargs(doc))
    response = ifeval_response(completion)
    strict = ifeval_utils.test_instruction_following_strict(inp, response)
    loose = ifeval_utils.test_instruction_following_loose(inp, response)
    return {"prompt_level_strict_acc": bool(strict.follow_all_instructions),
            "inst_level_strict_acc": [bool(x) for x in strict.follow_instruction_list],
            "prompt_level_loose_acc": bool(loose.follow_all_instructions),
            "inst_level_loose_acc": [bool(x) for x in loose.follow_instruction_list]}


def _ifeval_all(doc, completions) -> list[dict]:
    _ifeval_utils()  # a missing dependency raises here, before anything is scored
    n = len(doc.get("instruction_id_list") or []) if isinstance(doc, dict) else 0
    out = []
    for c in completions:
        try:
            out.append(ifeval_results(doc, c))
        except Exception:  # noqa: BLE001 -- a malformed doc or completion: every instruction fails
            logger.warning("IFEval check failed for doc %r", doc_id(doc), exc_info=True)
            out.append({"prompt_level_strict_acc": False, "inst_level_strict_acc": [False] * n,
                        "prompt_level_loose_acc": False, "inst_level_loose_acc": [False] * n})
    return out


def score(doc, completions) -> list[float]:
    """0/1 per completion: IFEval prompt-level strict accuracy (every instruction followed)."""
    return [float(r["prompt_level_strict_acc"]) for r in _ifeval_all(doc, list(completions))]


def judge(doc, completions) -> tuple[list[int], dict]:
    res = _ifeval_all(doc, list(completions))
    extra = {"prompt_level_loose_acc": float(np.mean([r["prompt_level_loose_acc"] for r in res])) if res else 0.0,
             "inst_level_strict_acc": [x for r in res for x in r["inst_level_strict_acc"]],
             "inst_level_loose_acc": [x for r in res for x in r["inst_level_loose_acc"]]}
    return [int(r["prompt_level_strict_acc"]) for r in res], extra


KIND = Kind(
    name="ifeval", description="paper profile, IFEval: lm-eval's checks, prompt-level strict", instruction="",
    convert=convert, score=score, judge=judge,
    extra_metrics=(("prompt_level_loose_acc", "mean"), ("inst_level_strict_acc", "inst"),
                   ("inst_level_loose_acc", "inst")),
    code=(rewards, gold_text))
