"""The training-source converter: the paper profile's RL training data and its reward (ProRL v1's blend).

BroRL does not say what its continued training used (``shared/brief/paper.md`` §7 item 3); ProRL v1 trained on
136K problems (§3.2): DeepScaleR math (40K, binary reward), Eurus-2-RL code (24K, fraction of tests passed; 0 on
a compile error or past 5 s), SCP-116K STEM (25K, judged by GPT-4o: not public), Reasoning Gym (37K, its own
continuous scorers) and Llama-Nemotron instruction following (10K). The three sources with a reward this
project can compute are built here (:data:`brorl.data.catalog.TRAIN_SOURCES`); STEM and instruction following
are left out and say so in ``results/data/rl/train_data.json``.

:func:`prepare_train_data` writes ``<out_dir>/<source>/{train,validation}.jsonl`` (the layout
:func:`brorl.tasks.core.read_split` reads) and ``<out_dir>/train_data.json`` (what was asked, the hub commit of
each source, the record counts). Hub sources go through the same pinned, sha256-manifested fetch and the same
converters as the paper benchmarks (:func:`brorl.data.benchmarks.prepare_benchmark`, with a training
:class:`~brorl.data.catalog.BenchmarkSpec`); the raw cache (snapshot + ``all.jsonl``) lives under
``<cache_dir>/<source>/``. Reasoning Gym is generated locally with a seed far from the evaluation's
(:data:`brorl.kinds.reasoning_gym.RG_SEED`), so training and held-out items differ. Each source is split
into validation / train by a keyed hash of the record id (stable when sources grow); ``validation`` holds the
first ``validation_per_source`` records in that order.

Every training record carries ``task`` (the source: the folder name), ``reward`` (its kind: ``math`` | ``code`` |
``reasoning_gym``), ``prompt`` (the user message; the stage applies the chat template) and the fields its
scorer reads (``answer``; ``tests``; ``entry``). :func:`make_paper_reward` is the stage's reward for these
records: each kind's reward (``brorl.kinds.<kind>``), the same rules the evaluation scores with (math-verify in
the hard-timeout pool of :mod:`brorl.rewards`, the sandboxed code reward as a fraction of tests, the Reasoning Gym
verifiers), with 0 for a completion cut at the length limit (NeMo's ProRLv2 ``stop_properly_penalty_coef: 0``).
The data source kind these records make (``profile.data: paper``) is :class:`brorl.data.source.PaperSource`.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from brorl import kinds
from brorl.data import benchmarks
from brorl.data.catalog import LEFT_OUT, TRAIN_SOURCES

FORMAT = "brorl.train_data/1"
MARKER = "train_data.json"
"""Written last into the data folder: its presence marks paper training data (not the tiny tasks)."""
REWARD_KINDS = tuple(dict.fromkeys(spec.kind for spec in TRAIN_SOURCES.values()))
"""The kinds of the training sources (math, code, reasoning_gym): a training record's ``reward``."""
RG_TRAIN_SEED = 0
"""Reasoning Gym generator seed for training items (evaluation: RG_SEED = 1e9)."""

@dataclass(frozen=True)
class TrainDataSettings:
    """``rl.data`` of the paper profile (validated by :func:`TrainDataSettings.from_dict`)."""

    sources: tuple[str, ...] = tuple(TRAIN_SOURCES)
    validation_per_source: int = 256
    """Held-out problems per source (the stage's validation split)."""
    max_train_per_source: int = 0
    """Cap on training problems per source (0: all). Applied in keyed-hash order, so a cap is a uniform subset."""
    reasoning_gym_samples_per_task: int = 360
    """Items per Reasoning Gym task: 104 tasks x 360 = 37,440, ProRL's 37K [paper size; per-task split ours]."""
    reasoning_gym_seed: int = RG_TRAIN_SEED
    reasoning_gym_tasks: tuple[str, ...] = ()
    """A subset of Reasoning Gym tasks (empty: every task of the 11 categories). Tests use a few."""
    reasoning_gym_task_configs: Mapping[str, Mapping] = field(default_factory=dict)
    """Task -> its reasoning-gym dataset config keys (a difficulty; small profile); default: reasoning-gym's."""
    split_seed: int = 0
    revisions: Mapping[str, str] = field(default_factory=dict)
    """Pinned hub revision (commit) per hub source; default: the table's ``main`` (the manifest records the commit)."""
    dedup_against: tuple[str, ...] = ()
    """Evaluation benchmarks whose problems are removed from the training data (exact match of the whitespace- and
    case-normalised problem text), so the evaluation is disjoint from training; counted per source in
    ``train_data.json``. [our choice] Reasoning Gym's small tasks repeat problems across seeds (basic_arithmetic
    at the small profile's difficulty has ~121 distinct problems)."""

    def __post_init__(self):
        unknown = [s for s in self.sources if s not in TRAIN_SOURCES]
        if unknown or not self.sources:
            raise ValueError(f"sources: unknown or empty {list(self.sources)} (known: {list(TRAIN_SOURCES)})")
        if self.validation_per_source < 1:
            raise ValueError("validation_per_source: must be >= 1")
        if self.max_train_per_source < 0 or self.reasoning_gym_samples_per_task < 1:
            raise ValueError("max_train_per_source must be >= 0 and reasoning_gym_samples_per_task >= 1")
        bad = [k for k in self.revisions if k not in TRAIN_SOURCES or TRAIN_SOURCES[k].generated]
        if bad:
            raise ValueError(f"revisions: {bad} are not hub sources")
        from brorl.data.catalog import ALL_BENCHMARK_NAMES

        unknown = [b for b in self.dedup_against if b not in ALL_BENCHMARK_NAMES]
        if unknown:
            raise ValueError(f"dedup_against: unknown benchmarks {unknown} (known: {list(ALL_BENCHMARK_NAMES)})")

    @classmethod
    def from_dict(cls, d: Mapping | None) -> "TrainDataSettings":
        d = dict(d or {})
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown rl.data keys {sorted(unknown)}")
        for k in ("sources", "reasoning_gym_tasks", "dedup_against"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(**d)

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, Mapping) else v)
                for k, v in ((k, getattr(self, k)) for k in self.__dataclass_fields__)}


def hub_revisions(settings: TrainDataSettings) -> dict[str, tuple[str, None]]:
    """``{source: (revision, None)}`` of the hub sources in ``settings`` (for :func:`brorl.data.hub.unpinned`): the
    configured revision, else the table's ``main``."""
    return {name: (settings.revisions.get(name) or TRAIN_SOURCES[name].revision, None) for name in settings.sources
            if not TRAIN_SOURCES[name].generated}


def is_paper_record(record: Mapping) -> bool:
    return record.get("reward") in REWARD_KINDS


def _split_key(seed: int, source: str, record_id: str) -> str:
    return hashlib.blake2b(f"{seed}:{source}:{record_id}".encode(), digest_size=8).hexdigest()


def training_record(source: str, kind: str, record: Mapping) -> dict:
    """A converted benchmark-style record as a training record (``task`` = the source, ``reward`` = its kind; the
    kind's ``training_renames``: Reasoning Gym keeps its dataset name as ``rg_task``)."""
    out = {k: v for k, v in record.items() if k != "benchmark"}
    for old, new in kinds.kind(kind).training_renames.items():
        out[new] = out.pop(old)
    out["task"], out["reward"] = source, kind
    return out


def problem_key(record: Mapping) -> str:
    """The text two records are the same problem by: the problem (else the prompt), whitespace collapsed, casefolded."""
    return " ".join(str(record.get("problem") or record.get("prompt") or "").split()).casefold()


def held_out_problems(files: Sequence[str | os.PathLike[str]]) -> set[str]:
    """:func:`problem_key` of every problem in the evaluation files (``<benchmark>/test.jsonl``)."""
    return {problem_key(r) for f in files for r in benchmarks.read_table(f)} - {""}


def split_records(records: Sequence[Mapping], source: str, settings: TrainDataSettings) -> tuple[list, list]:
    """(train, validation) by keyed-hash order of the record ids."""
    order = sorted(records, key=lambda r: _split_key(settings.split_seed, source, str(r["id"])))
    validation = list(order[: settings.validation_per_source])
    train = list(order[settings.validation_per_source:])
    if settings.max_train_per_source:
        train = train[: settings.max_train_per_source]
    if not train:
        raise ValueError(f"{source}: {len(records)} records leave none for training after "
                         f"{settings.validation_per_source} validation problems")
    return train, validation


def prepare_train_data(out_dir: str | os.PathLike[str], settings: TrainDataSettings | Mapping | None = None, *,
                       source=None, cache_dir: str | os.PathLike[str] = "resources/data/rl",
                       log_fn: Callable[[str], None] | None = None,
                       exclude: Sequence[str | os.PathLike[str]] = ()) -> dict:
    """Fetch / generate every source, convert, split, and write ``<out_dir>/<source>/{train,validation}.jsonl``
    and the marker ``<out_dir>/train_data.json`` (last). ``source``: ``None`` = the Hugging Face Hub (refused
    offline), a folder = a local stand-in (:mod:`brorl.data.hub`). ``exclude``: the evaluation files of
    ``settings.dedup_against`` (one per benchmark, required then): their problems are dropped from every source
    before the split, and counted. Returns the marker's content."""
    s = settings if isinstance(settings, TrainDataSettings) else TrainDataSettings.from_dict(settings)
    say = log_fn or (lambda msg: None)
    out, cache = Path(out_dir), Path(cache_dir)
    (out / MARKER).unlink(missing_ok=True)  # until every split is written, this is not a finished data folder
    if len(exclude) != len(s.dedup_against):
        raise ValueError(f"rl.data.dedup_against names {list(s.dedup_against)}, but {len(exclude)} evaluation "
                         f"file(s) were given: {[str(f) for f in exclude]}")
    held = held_out_problems(exclude)
    sources = {}
    for name in s.sources:
        spec = TRAIN_SOURCES[name]
        raw = cache / name / "all.jsonl"
        kwargs = {}
        if spec.generated:
            kwargs = {"samples_per_task": s.reasoning_gym_samples_per_task, "seed": s.reasoning_gym_seed,
                      "tasks": list(s.reasoning_gym_tasks) or None,
                      "task_configs": dict(s.reasoning_gym_task_configs) or None}
        info = benchmarks.prepare_benchmark(name, source, raw, spec=spec, revision=s.revisions.get(name),
                                            log_fn=say, **kwargs)
        records = [training_record(name, spec.kind, r) for r in benchmarks.read_records(raw)]
        kept = [r for r in records if problem_key(r) not in held]
        overlap, records = len(records) - len(kept), kept
        train, validation = split_records(records, name, s)
        for split, rows in (("train", train), ("validation", validation)):
            benchmarks.write_atomic(out / name / f"{split}.jsonl", benchmarks.jsonl_bytes(rows))
        reported = (info.get("report") or {}).get("skipped", {})
        skipped = {} if spec.generated else {k: int(reported.get(k, 0)) for k in ("no_gold", "no_tests")}
        sources[name] = {"reward": spec.kind, "repo_id": spec.repo_id, "commit": info.get("commit"),
                         "raw": str(raw), "raw_sha256": info["sha256"], "n_records": len(records),
                         "n_train": len(train), "n_validation": len(validation), "skipped": skipped,
                         "n_removed_in_evaluation": overlap,
                         "paper": spec.paper, "note": spec.note}
        say(f"{name}: {len(train)} train / {len(validation)} validation ({spec.kind} reward)"
            + "".join(f", {v} rows skipped ({k.replace('_', ' ')})" for k, v in skipped.items() if v)
            + (f"; {overlap} problems removed: they are in the evaluation ({', '.join(s.dedup_against)})"
               if s.dedup_against else ""))
    marker = {"format": FORMAT, "settings": s.to_dict(), "sources": sources, "left_out": LEFT_OUT,
              "dedup_against": {b: str(f) for b, f in zip(s.dedup_against, exclude)}}
    benchmarks.write_atomic(out / MARKER, (json.dumps(marker, indent=1) + "\n").encode())
    return marker


def with_picked_tasks(config: dict, picked_tasks: str | os.PathLike[str] | None) -> dict:
    """``brorl train-data --picked-tasks``: rg_difficulty.pick's in-band tasks (its tasks table) become the
    Reasoning Gym training tasks of ``config["data"]``; ``config`` as is without a table."""
    if not picked_tasks:
        return config
    from brorl.kinds.reasoning_gym import apply_picked, picked_tasks as read_picked

    config = {**config, "data": apply_picked(config["data"], read_picked(picked_tasks), "reasoning_gym_tasks",
                                             "reasoning_gym_task_configs")}
    print(f"[train-data] Reasoning Gym tasks picked by {picked_tasks}: "
          f"{', '.join(config['data']['reasoning_gym_tasks'])}", flush=True)
    return config


def run_train_data(config: dict, out_dir: str | os.PathLike[str], cache_dir: str | os.PathLike[str], *,
                   pins_required: bool, exclude: Sequence[str] = ()) -> dict:
    """``brorl train-data``: the pin check (:func:`brorl.data.hub.require_pins`), then :func:`prepare_train_data`
    of ``config["data"]`` from ``config["source"]``; per-source counts and commits logged to the rule's MLflow run."""
    import mlflow

    from brorl.data.hub import require_pins

    require_pins(config, hub_revisions(TrainDataSettings.from_dict(config.get("data"))), "rl.data.revisions.<source>",
                 pins_required=pins_required)
    marker = prepare_train_data(out_dir, config.get("data"), source=config.get("source"), cache_dir=cache_dir,
                                log_fn=lambda msg: print(f"[train-data] {msg}", flush=True), exclude=exclude)
    for name, info in marker["sources"].items():
        mlflow.log_metrics({f"{name}/n_train": float(info["n_train"]),
                            f"{name}/n_validation": float(info["n_validation"]),
                            f"{name}/n_removed_in_evaluation": float(info["n_removed_in_evaluation"]),
                            **{f"{name}/n_skipped_{k}": float(v) for k, v in info["skipped"].items()}})
        mlflow.set_tag(f"{name}/commit", str(info["commit"]))
    mlflow.log_artifact(str(Path(out_dir) / MARKER))
    return marker


# --------------------------------------------------------------------------------------------------- reward

def paper_rewards(records: Sequence[Mapping], completions: Sequence[str], *,
                  timeouts: list | None = None) -> list[float]:
    """The training reward of each (record, completion), by the record's kind (``reward``; ``brorl.kinds.<kind>``'s
    ``rewards``): math 0/1 (math-verify), code the fraction of tests passed (sandbox), Reasoning Gym the task's
    verifier score. Never raises for a bad completion; batched per kind (one math-pool call, one sandbox batch, one
    Reasoning Gym call). ``timeouts``, if a list, is filled with one flag per completion: True where a math or
    Reasoning Gym reward is 0.0 because verification ran out of time (the code reward's own budget is part of its
    score)."""
    if len(records) != len(completions):
        raise ValueError(f"{len(records)} records but {len(completions)} completions")
    out = [0.0] * len(records)
    late = [False] * len(records)
    by_kind: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        if not is_paper_record(r):
            raise ValueError(f"record {r.get('id')!r} has no paper reward kind (reward: {r.get('reward')!r})")
        by_kind.setdefault(r["reward"], []).append(i)
    for kind, idx in by_kind.items():
        scores, flags = kinds.kind(kind).rewards([records[i] for i in idx], [completions[i] for i in idx])
        for i, v, t in zip(idx, scores, flags):
            v = float(v)
            out[i] = min(1.0, max(0.0, v)) if v == v else 0.0
            late[i] = bool(t)
    if timeouts is not None:
        timeouts[:] = late
    return out


def make_paper_reward(records: Sequence[Mapping], tokenizer, truncated_reward: float | None = 0.0):
    """TRL reward function over the stage's dataset rows (``record_index`` column), like
    :func:`brorl.training.stage.make_reward` for the tiny tasks. Completions are decoded without special
    tokens; one without the end token (cut at ``max_completion_length``) scores ``truncated_reward``
    (None: scored like any other)."""
    eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()

    def paper_reward(prompts, completions, completion_ids, record_index, **kwargs):
        from brorl.rewards.adapters import report_timeouts

        texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
        timeouts: list[bool] = []
        scores = paper_rewards([records[i] for i in record_index], texts, timeouts=timeouts)
        report_timeouts(timeouts, "verify", kwargs.get("log_metric"))
        if truncated_reward is not None:
            scores = [truncated_reward if not ids or ids[-1] not in eos else v
                      for v, ids in zip(scores, map(list, completion_ids))]
        return scores

    paper_reward.__name__ = "paper_reward"
    return paper_reward


__all__ = ["TrainDataSettings", "prepare_train_data", "run_train_data", "with_picked_tasks", "paper_rewards",
           "make_paper_reward", "hub_revisions", "is_paper_record", "split_records",
           "training_record", "MARKER", "REWARD_KINDS"]
