"""The tiny task suite: settings, deterministic splits, prompt formatting and answer checking.

Splits are disjoint by construction: every prompt text is assigned to ``test``, ``validation`` or
``train`` by a keyed hash (blake2b of the partition seed, the task and the prompt), and a split is
drawn by rejection from its own region of the prompt space, without duplicates. So the three files
never share a prompt whatever their sizes, and an unbounded stream of extra training examples (the
supervised warm start uses one) can be drawn from the ``train`` region with another sampling seed
without touching validation or test prompts.

Record (one JSON object per line of ``<out_dir>/<task>/<split>.jsonl``)::

    id        "<task>-<split>-<index>"
    task      family name
    split     train | validation | test
    prompt    the raw prompt text (apply the chat template with :func:`format_prompt`)
    answer    one correct answer (the gold string; for probes one correct answer drawn at random)
    answers   every correct answer (one element except for probe families)
    universe  [lo, hi]: the inclusive integer range that holds every possible answer (the candidates)
    ...       family fields (add/mul: a, b, max_digits; multiple: d, lo, hi, n_answers)
"""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from brorl.atomic import atomic_open, write_text
from brorl.settings import settings_kwargs
from brorl.tasks.families import FAMILIES, max_answer_chars

SPLITS = ("train", "validation", "test")
EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<pad>"
UNK_TOKEN = "<unk>"
_STOP_STRINGS = (EOS_TOKEN, PAD_TOKEN)


@dataclass(frozen=True)
class TaskSettings:
    """The tiny task suite (all procedural; no network)."""

    tasks: tuple[str, ...] = ("add", "multiple")
    """Families written by :func:`write_splits`: ``add`` (the pilot's a+b), ``mul`` (a*digit) and the
    multi-answer probe ``multiple``."""
    train_size: int = 1024
    """Prompts per single-answer family in ``train.jsonl`` (the RL prompt pool; the pilot used 1,024)."""
    validation_size: int = 200
    """Prompts per single-answer family in ``validation.jsonl`` (the pilot's 200 held-out prompts)."""
    test_size: int = 200
    """Prompts per single-answer family in ``test.jsonl``."""
    probe_train_size: int = 256
    """Prompts per probe family in ``train.jsonl``."""
    probe_validation_size: int = 64
    """Prompts per probe family in ``validation.jsonl``."""
    probe_test_size: int = 64
    """Prompts per probe family in ``test.jsonl``."""
    seed: int = 1234
    """Seeds both the prompt-space partition and the sampling of the three files."""
    validation_fraction: float = 0.1
    """Share of each family's prompt space reserved for validation (by hash)."""
    test_fraction: float = 0.1
    """Share of each family's prompt space reserved for test (by hash)."""
    add_max_digits: int = 4
    """add: operands have 1..add_max_digits digits (uniform), value uniform within the digit count."""
    add_align: bool = True
    """add: right-align each operand in its own fixed-width field (``"  12+   3="``) instead of
    left-padding the whole prompt (``"    12+3="``, the pilot's format). Aligned digits made the SFT
    transition reliable: validation pass@1 reached the 0.25-0.40 band at steps 260 / 240 / 220 for
    seeds 0 / 1 / 2, against step 300 (seed 0) and not by step 475 (seed 1) with the pilot's format."""
    mul_max_digits: int = 3
    """mul: the multiplicand has 1..mul_max_digits digits; the multiplier is one digit 2..9."""
    probe_max: int = 300
    """multiple: answers and candidates are the integers 1..probe_max."""
    probe_divisors: tuple[int, ...] = (3, 4, 5, 6, 7, 8, 9, 11, 12, 13)
    """multiple: the divisor d is drawn uniformly from these."""
    probe_min_answers: int = 5
    """multiple: every probe prompt has at least this many correct answers."""
    # issue 29: the weak-transfer family (brorl.tasks.lookup)
    lookup_digits: int = 6
    """lookup: the prompt ``x<q>=`` carries a ``lookup_digits``-digit q (10^6 prompts: the SFT stream sees few twice)."""
    lookup_answers: int = 100
    """lookup: answers are the integers 0..lookup_answers-1 (uniform prior 1/100, inside (1/512, 1/16) [our choice])."""
    lookup_key: int = 29
    """lookup: the hash key that sets each prompt's answer."""

    def __post_init__(self):
        unknown = [t for t in self.tasks if t not in FAMILIES]
        if unknown:
            raise ValueError(f"unknown task families {unknown}; known: {sorted(FAMILIES)}")
        if not 0 < self.validation_fraction + self.test_fraction < 1:
            raise ValueError("validation_fraction + test_fraction must lie in (0, 1)")
        from brorl.tasks.lookup import settings_errors

        if errors := settings_errors(self):
            raise ValueError("; ".join(errors))

    @classmethod
    def from_dict(cls, d: dict | None) -> "TaskSettings":
        return cls(**settings_kwargs(cls, d, "task"))

    def to_dict(self) -> dict:
        return asdict(self)

    def split_size(self, task: str, split: str) -> int:
        probe = FAMILIES[task].probe
        prefix = "probe_" if probe else ""
        return int(getattr(self, f"{prefix}{split}_size"))


def is_probe(task: str) -> bool:
    return FAMILIES[task].probe


def split_of(task: str, prompt: str, partition_seed: int, settings: TaskSettings) -> str:
    """The split whose region of the prompt space holds ``prompt`` (keyed hash; deterministic)."""
    h = hashlib.blake2b(f"{partition_seed}\x00{task}\x00{prompt}".encode(), digest_size=8).digest()
    u = int.from_bytes(h, "big") / 2.0**64
    if u < settings.test_fraction:
        return "test"
    if u < settings.test_fraction + settings.validation_fraction:
        return "validation"
    return "train"


def _rng(task: str, split: str, seed: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32(task.encode()), SPLITS.index(split)])


def make_record(task: str, split: str, index: int, problem, settings: TaskSettings) -> dict:
    lo, hi = FAMILIES[task].universe(settings)
    rec = {"id": f"{task}-{split}-{index:05d}", "task": task, "split": split, "prompt": problem.prompt,
           "answer": problem.answer, "answers": list(problem.answers), "universe": [lo, hi]}
    rec.update(problem.meta)
    return rec


def sample_problems(task: str, split: str, n: int, rng: np.random.Generator, partition_seed: int,
                    settings: TaskSettings, unique: bool = True):
    """``n`` problems of ``task`` from the ``split`` region of the prompt space (rejection sampling)."""
    family = FAMILIES[task]
    out, seen = [], set()
    attempts, max_attempts = 0, 200 * n + 10_000
    while len(out) < n:
        attempts += 1
        if attempts > max_attempts:
            raise RuntimeError(f"could not draw {n} distinct {task}/{split} prompts ({len(out)} found)")
        p = family.sample(rng, settings)
        if split_of(task, p.prompt, partition_seed, settings) != split:
            continue
        if unique:
            if p.prompt in seen:
                continue
            seen.add(p.prompt)
        out.append(p)
    return out


def generate_split(task: str, split: str, n: int, seed: int, *, partition_seed: int | None = None,
                   settings: TaskSettings | None = None, unique: bool = True) -> list[dict]:
    """``n`` records of ``task`` in ``split`` (deterministic in ``seed``).

    ``partition_seed`` (default: ``seed``) keys the prompt-space partition; pass the suite's seed with
    another ``seed`` to draw fresh examples that stay disjoint from that suite's other splits.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    settings = settings or TaskSettings()
    partition_seed = seed if partition_seed is None else partition_seed
    rng = _rng(task, split, seed)
    problems = sample_problems(task, split, n, rng, partition_seed, settings, unique=unique)
    return [make_record(task, split, i, p, settings) for i, p in enumerate(problems)]


def write_jsonl(path: str | Path, records: Iterable[dict]) -> int:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with atomic_open(path, encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=True) + "\n")
            n += 1
    return n


def read_jsonl(path: str | Path) -> list[dict]:
    """The records of a task / training-data JSON-lines file: each a JSON object with a usable ``answer``
    (:func:`brorl.data.jsonl.read_records`: a bad row is an error naming the file and line)."""
    from brorl.data.jsonl import read_records

    return read_records(path)


def split_path(data_dir: str | Path, task: str, split: str) -> Path:
    return Path(data_dir) / task / f"{split}.jsonl"


def read_split(data_dir: str | Path, split: str, tasks: Iterable[str] | None = None) -> list[dict]:
    """All records of ``split`` under ``data_dir`` (tasks in the given order; default: every task folder)."""
    from brorl.data.jsonl import read_split as read_folders

    return read_folders(data_dir, split, tasks)


def write_splits(out_dir: str | Path, settings: TaskSettings | dict | None = None) -> dict:
    """Write ``<out_dir>/<task>/{train,validation,test}.jsonl`` for every task; returns a metrics dict."""
    if not isinstance(settings, TaskSettings):
        settings = TaskSettings.from_dict(settings)
    out_dir = Path(out_dir)
    metrics: dict = {}
    for task in settings.tasks:
        for split in SPLITS:
            n = settings.split_size(task, split)
            recs = generate_split(task, split, n, settings.seed, settings=settings)
            write_jsonl(split_path(out_dir, task, split), recs)
            metrics[f"{task}/{split}/n"] = len(recs)
            metrics[f"{task}/{split}/mean_answers"] = float(np.mean([len(r["answers"]) for r in recs]))
            metrics[f"{task}/{split}/mean_answer_chars"] = float(np.mean([len(r["answer"]) for r in recs]))
    write_text(out_dir / "tasks.json", json.dumps(settings.to_dict(), indent=1) + "\n")
    return metrics


def run_tasks_generate(out_dir: str | Path, settings: TaskSettings | dict | None = None) -> dict:
    """``brorl tasks-generate``: :func:`write_splits`, its counts and ``tasks.json`` logged to the rule's MLflow run."""
    import mlflow

    metrics = write_splits(out_dir, settings)
    mlflow.log_metrics({k.replace("@", "_"): float(v) for k, v in metrics.items()})
    mlflow.log_artifact(str(Path(out_dir) / "tasks.json"))
    print(f"[tasks] wrote {out_dir}: " + ", ".join(f"{k}={v}" for k, v in metrics.items() if k.endswith("/n")))
    return metrics


def max_new_tokens(settings: TaskSettings | None = None, tasks: Iterable[str] | None = None) -> int:
    """A generation length that always fits an answer plus the end token (answers are 1 char/token).

    Any length above the longest answer also makes truncated (eos-less) outputs unverifiable, so a
    decoded completion with special tokens skipped is still checked exactly."""
    settings = settings or TaskSettings()
    tasks = settings.tasks if tasks is None else tasks
    return max(max_answer_chars(t, settings) for t in tasks) + 1


def format_prompt(tokenizer, record: dict) -> str:
    """The prompt text the model sees: the record's prompt through the tokenizer's chat template."""
    messages = [{"role": "user", "content": record["prompt"]}]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return record["prompt"]


def strip_completion(completion: str) -> str:
    """The answer part of a completion: everything before the first end-of-sequence or pad token."""
    for stop in _STOP_STRINGS:
        i = completion.find(stop)
        if i >= 0:
            completion = completion[:i]
    return completion


def verify(record: dict, completion) -> float:
    """1.0 if the completion (up to the end token) is exactly one of the record's correct answers.

    Strict (no whitespace stripping) so that the success event is exactly "answer + eos", the event
    whose probability :func:`brorl.models.scoring.exact_answer_probability` computes. Never raises.
    """
    try:
        if isinstance(completion, bytes):
            completion = completion.decode("utf-8", errors="replace")
        if not isinstance(completion, str):
            return 0.0
        text = strip_completion(completion)
        answers = record.get("answers") or [record["answer"]]
        return 1.0 if text in set(map(str, answers)) else 0.0
    except Exception:  # noqa: BLE001 -- a reward function must not raise on garbage
        return 0.0


def enumerate_candidates(record: dict) -> list[str]:
    """Every answer string the record's family can have (the probe families' answer space).

    It contains every correct answer; verify(record, c) == 1 exactly for the correct candidates."""
    lo, hi = record["universe"]
    return [str(i) for i in range(int(lo), int(hi) + 1)]


def correct_mask(record: dict, candidates: list[str] | None = None) -> np.ndarray:
    candidates = enumerate_candidates(record) if candidates is None else candidates
    answers = set(record["answers"])
    return np.fromiter((c in answers for c in candidates), dtype=bool, count=len(candidates))
