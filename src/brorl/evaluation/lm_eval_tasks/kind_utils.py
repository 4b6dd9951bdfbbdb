"""lm-eval hooks of the ``brorl_paper_*`` tasks: the document loader and the k-sample scorers.

lm-eval imports this file by path (``!function paper_utils.<name>`` in the task YAMLs next to it), so it must
stay importable on its own; it only needs the installed ``brorl`` package (and, for IFEval, lm-eval's IFEval
dependencies). :func:`brorl.evaluation.paper_benchmarks.render_tasks` copies it byte for byte next to the
rendered YAMLs; :mod:`brorl.evaluation.paper_benchmarks` uses the same functions as the registry's scorers.

Loader
    :func:`load_records` (``custom_dataset``): the benchmark's JSONL as written by
    :func:`brorl.data.benchmarks.prepare_benchmark`, read as is. The file is ``data_file`` (rendered
    tasks) or ``<data_dir>/<benchmark>/test.jsonl`` (shipped tasks, ``--metadata '{"data_dir": ...}'``).

Scorers (one 0/1 or [0, 1] value per completion; garbage scores 0, nothing raises except a missing IFEval
dependency, which is a set-up error and says what to install)
    - math (:func:`score_math`): :func:`brorl.rewards.math_reward` against ``doc["answer"]`` (math-verify, gold
      first, in the reward pool's hard-timeout worker processes; the batch form
      ``get_default_pool().math_rewards`` is the same code, so evaluation grades by the training reward's rules;
      an answer that runs out of the training deadline is verified again with :data:`EVAL_RETRY_TIMEOUT`, then
      logged as a timeout);
    - GPQA (:func:`score_gpqa`): the letter :func:`extract_choice_letter` finds must equal ``doc["answer"]``;
    - Reasoning Gym (:func:`score_reasoning_gym`): :func:`brorl.rewards.reasoning_gym_reward` with the
      generated entry (``doc["entry"]``, a JSON string; :func:`brorl.rewards.parse_reasoning_gym_entry` restores
      what JSON loses);
    - IFEval (:func:`score_ifeval`): lm-eval's own IFEval checks (``lm_eval.tasks.ifeval.utils``), prompt-level
      strict accuracy per completion, on the text after the last ``</think>`` (ProRL: "IFEval-style checks on
      the text after </think>").
    - code (:func:`score_code`): :func:`brorl.sandbox.code_rewards` on ``doc["tests"]`` (the fraction of test
      cases passed, 0 on a syntax error, no program, or past the 5 s budget for all cases together; never
      raises). A completion *solves* the problem when it passes every test (fraction 1.0):
      :func:`score_code_solved`, the registry's scorer.

``process_*`` (``process_results``): the task keeps all k repeats (``take_first_k``), lm-eval passes
``[[c_1, ..., c_k]]``; the document's ``mean_at_k`` and unbiased ``pass_at_<j>`` are computed exactly as
:func:`brorl.evaluation.metrics.sample_metrics` does, on the scores binarised at 0.5 (what
:func:`brorl.evaluation.runner.collect_results` recomputes and checks). Code: ``mean_at_k`` and ``pass_at_<j>`` are on the *solved* 0/1 values (all tests
passed; ProRL v1: "strictly binary rewards for ... code"), because the runner recomputes both from
``Benchmark.score`` binarised at 0.5, which cannot give a continuous mean; ``mean_test_fraction`` reports the
mean fraction of tests passed (the partial-credit reading of BroRL Table 4, paper.md §7 item 4). Reasoning Gym
also reports
``mean_reward`` (the raw continuous reward, ProRL's reporting for logic puzzles); IFEval also reports
``prompt_level_loose_acc`` and the instruction-level accuracies (micro-averaged over all instructions of all
samples, as lm-eval's IFEval task does).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from brorl import rewards
from brorl.data.benchmarks import CHOICE_LETTERS, read_records
from brorl.evaluation.metrics import completions_of, doc_metrics
from brorl.rewards.adapters import report_timeouts

logger = logging.getLogger(__name__)

SPLIT_KEY = "test"
DATA_FILE_NAME = "test.jsonl"
THINK_END = "</think>"


# ---------------------------------------------------------------------------------------------------- loader

def data_file_of(data_dir: str | Path, benchmark: str) -> Path:
    """Where a benchmark's JSONL lives under a data folder: ``<data_dir>/<benchmark>/test.jsonl``."""
    return Path(data_dir) / benchmark / DATA_FILE_NAME


def load_records(data_file: str | None = None, data_dir: str | None = None, benchmark: str | None = None,
                 **_ignored):
    """``DatasetDict({"test": <records of the benchmark's JSONL>})`` for lm-eval's ``custom_dataset``."""
    import datasets

    if data_file is None:
        if data_dir is None or benchmark is None:
            raise ValueError(
                "brorl_paper tasks need their data: pass --metadata '{\"data_dir\": \"<folder>\"}' (the folder "
                "holding <benchmark>/test.jsonl, made by brorl.data.benchmarks.prepare_benchmark), or "
                "render the tasks with brorl.evaluation.paper_benchmarks.render_tasks(...), which writes an "
                "absolute data_file into each YAML")
        data_file = data_file_of(data_dir, benchmark)
    path = Path(data_file).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"brorl_paper task data not found: {path} (run prepare_benchmark first)")
    records = read_records(path)
    if not records:
        raise ValueError(f"no records in {path}")
    return datasets.DatasetDict({SPLIT_KEY: datasets.Dataset.from_list(records)})


# --------------------------------------------------------------------------------------------------- metrics

def binarize(scores) -> list[int]:
    return [int(float(s) >= 0.5) for s in scores]


def _safe(scorer, doc, completions) -> list[float]:
    from brorl.sandbox import SandboxUnavailable

    try:
        return [float(x) for x in scorer(doc, completions)]
    except SandboxUnavailable:  # the machine cannot score code safely: stop, do not report zeros
        raise
    except Exception:  # noqa: BLE001 -- a scorer bug must not take down a whole evaluation
        logger.warning("scoring failed for doc %r; all its completions score 0", _doc_id(doc), exc_info=True)
        return [0.0] * len(completions)


def _doc_id(doc) -> Any:
    return doc.get("id") if isinstance(doc, dict) else None


EVAL_RETRY_TIMEOUT = 60.0
"""Seconds per attempt for an answer whose verification ran out of the training deadline: evaluation is off the
training's critical path, so a right closed form that needs seconds of sympy on a loaded machine (the Basel sum,
an integral) is verified again with this budget before it counts as a timeout."""


def _with_eval_retry(score, completions: list, golds: list, what: str) -> list[float]:
    """``score(completions, golds)`` on the pool; the answers that timed out are scored again with
    :data:`EVAL_RETRY_TIMEOUT`, and those that time out again are logged as timeouts (never a silent 0)."""
    timeouts: list[bool] = []
    out = score(completions, golds, timeouts=timeouts)
    late = [i for i, t in enumerate(timeouts) if t]
    if late:
        again: list[bool] = []
        for i, v in zip(late, score([completions[i] for i in late], [golds[i] for i in late], timeouts=again,
                                    timeout=EVAL_RETRY_TIMEOUT)):
            out[i] = v
        report_timeouts(again, what)
    return out


# ------------------------------------------------------------------------------------------------------ math

def score_math(doc, completions) -> list[float]:
    """0/1 per completion: :func:`brorl.rewards.math_reward` (completion, ``doc["answer"]``)."""
    completions = list(completions)
    if not completions:
        return []
    gold = doc.get("answer") if isinstance(doc, dict) else None
    if gold is None or gold == "":  # load_records refuses such a record; say so if one comes another way
        logger.warning("doc %r has no gold answer: its %d completions score 0", _doc_id(doc), len(completions))
        return [0.0] * len(completions)
    return _with_eval_retry(rewards.get_default_pool().math_rewards, completions, [gold] * len(completions),
                            "math")


def process_math(doc, results) -> dict[str, float]:
    return doc_metrics(binarize(_safe(score_math, doc, completions_of(results))))


# ------------------------------------------------------------------------------------------------------ GPQA

_WRAPPERS = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mathit|bf|rm)\s*\{([^{}]*)\}")
_BOXED_LETTER = re.compile(r"^\(?([A-Da-d])\)?(?:$|[\s.:)\]]|\s*[-\u2013:]\s)")
_PHRASE_LETTER = re.compile(
    r"(?i:answer)(?:\s+(?i:is))?\s*[*_]*\s*(?:[:=]\s*)?[*_]*\s*(?:(?i:option|choice)\s*)?[*_]*\(?([A-D])\)?[*_]*"
    r"(?![A-Za-z0-9])")


def answer_part(text: str) -> str:
    """The text after the last ``</think>`` when there is one, else the whole text."""
    i = text.rfind(THINK_END)
    return text[i + len(THINK_END):] if i >= 0 else text


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


def score_gpqa(doc, completions) -> list[float]:
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


def process_gpqa(doc, results) -> dict[str, float]:
    return doc_metrics(binarize(_safe(score_gpqa, doc, completions_of(results))))


# ------------------------------------------------------------------------------------------ Reasoning Gym

def score_reasoning_gym(doc, completions) -> list[float]:
    """[0, 1] per completion: :func:`brorl.rewards.reasoning_gym_reward` (the task's own verifier on the text
    inside the last ``<answer>...</answer>``)."""
    completions = list(completions)
    try:  # parsed once for all k completions
        entry = rewards.parse_reasoning_gym_entry(doc.get("entry")) if isinstance(doc, dict) else None
    except ValueError:  # not JSON
        entry = None
    if entry is None or not completions:
        return [0.0] * len(completions)
    return _with_eval_retry(rewards.get_default_pool().reasoning_gym_rewards, completions,
                            [entry] * len(completions), "reasoning_gym")


def process_reasoning_gym(doc, results) -> dict[str, float]:
    scores = _safe(score_reasoning_gym, doc, completions_of(results))
    out = doc_metrics(binarize(scores))
    out["mean_reward"] = float(np.mean(scores)) if scores else 0.0
    return out


# ------------------------------------------------------------------------------------------------------ IFEval

IFEVAL_MODULES = ("langdetect", "immutabledict", "nltk")
IFEVAL_NLTK_DATA = ("tokenizers/punkt_tab",)


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
            logger.warning("IFEval check failed for doc %r", _doc_id(doc), exc_info=True)
            out.append({"prompt_level_strict_acc": False, "inst_level_strict_acc": [False] * n,
                        "prompt_level_loose_acc": False, "inst_level_loose_acc": [False] * n})
    return out


def score_ifeval(doc, completions) -> list[float]:
    """0/1 per completion: IFEval prompt-level strict accuracy (every instruction followed)."""
    return [float(r["prompt_level_strict_acc"]) for r in _ifeval_all(doc, list(completions))]


def process_ifeval(doc, results) -> dict:
    res = _ifeval_all(doc, completions_of(results))
    out: dict = doc_metrics([int(r["prompt_level_strict_acc"]) for r in res])
    out["prompt_level_loose_acc"] = float(np.mean([r["prompt_level_loose_acc"] for r in res])) if res else 0.0
    out["inst_level_strict_acc"] = [x for r in res for x in r["inst_level_strict_acc"]]
    out["inst_level_loose_acc"] = [x for r in res for x in r["inst_level_loose_acc"]]
    return out


def agg_inst_level_acc(items: Sequence[Sequence[bool]]) -> float:
    """Micro average over every instruction of every sample of every document (lm-eval's IFEval rule)."""
    flat = [x for sub in items for x in sub]
    return float(sum(flat) / len(flat)) if flat else 0.0


# ------------------------------------------------------------------------------------------------------ code

SOLVED_AT = 1.0 - 1e-9
"""A completion solves a code problem when its fraction of tests passed is 1.0 (every test)."""


def score_code(doc, completions) -> list[float]:
    """[0, 1] per completion: the fraction of ``doc["tests"]`` passed in the sandbox
    (:func:`brorl.sandbox.code_rewards`, which runs distinct programs in parallel and never raises for bad
    completions or tests)."""
    from brorl import sandbox

    completions = list(completions)
    tests = doc.get("tests") if isinstance(doc, dict) else None
    if not completions or tests is None or tests == "":
        return [0.0] * len(completions)
    if not isinstance(tests, str):
        tests = json.dumps(tests)  # one string for all k: identical programs run once
    out = []
    for x in sandbox.code_rewards(completions, [tests] * len(completions)):
        x = float(x)
        out.append(min(1.0, max(0.0, x)) if x == x else 0.0)
    return out


def score_code_solved(doc, completions) -> list[float]:
    """0/1 per completion: every test passed (:func:`score_code` is 1.0)."""
    return [1.0 if x >= SOLVED_AT else 0.0 for x in _safe(score_code, doc, list(completions))]


def process_code(doc, results) -> dict[str, float]:
    fractions = _safe(score_code, doc, completions_of(results))
    out = doc_metrics([1 if x >= SOLVED_AT else 0 for x in fractions])
    out["mean_test_fraction"] = float(np.mean(fractions)) if fractions else 0.0
    return out


SCORERS = {"math": score_math, "gpqa": score_gpqa, "reasoning_gym": score_reasoning_gym, "ifeval": score_ifeval,
           "code": score_code_solved}
PROCESSORS = {"math": "process_math", "gpqa": "process_gpqa", "reasoning_gym": "process_reasoning_gym",
              "ifeval": "process_ifeval", "code": "process_code"}
