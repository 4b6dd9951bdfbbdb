"""The benchmark registry: benchmark name -> lm-eval task, how to render its task folder, its category field.

A :class:`Benchmark` is everything :func:`brorl.evaluation.evaluate` needs besides the model:

- ``lm_eval_task``: the task name inside the rendered include_path (one task, not a group);
- ``render(data_dir, out_dir, *, k, temperature, max_gen_toks, stop_token_ids) -> Path``: writes the task
  YAMLs (+ hooks) into ``out_dir`` and returns the include_path. ``max_gen_toks`` may be ``None`` (the
  benchmark's default); ``stop_token_ids`` are the evaluated tokenizer's (eos, pad) ids, which a benchmark
  may ignore. The folder's content (with ``data_dir`` replaced by a placeholder) plus the content of
  ``data_files(data_dir)`` make the task hash, so every input of the scores must be in one or the other;
- ``score(doc, completions) -> [0/1 ...]``: the scorer its ``process_results`` uses (the runner re-scores the
  logged completions with it and checks lm-eval's per-problem values), ``doc_metrics(correct) -> dict``: the
  per-problem metrics ``process_results`` reports, and ``code``: the functions / modules whose source enters
  the task hash (the scorer's dependencies outside the rendered folder);
- ``prompt_of(tokenizer, doc) -> str`` (optional): the prompt lm-eval must have sent (checked per problem);
- ``category_field``: the document field the per-category metrics group by (``None``: one category, the
  benchmark itself);
- decoding defaults (``default_k``, ``default_temperature``) and ``apply_chat_template``.

The tiny task families' benchmarks are registered here, one ``tiny_<family>`` per evaluated family of
:data:`brorl.tasks.FAMILIES` (kept in step with the family registry on every lookup, so a family added in
process gets its benchmark too). The data catalog's (AIME24, AIME25, AMC, MATH500, Minerva,
OlympiadBench, GPQA-Diamond, ..., scored by their kind's module in :mod:`brorl.kinds`) go in a separate module,
``brorl.evaluation.catalog_tasks``, which calls :func:`register_benchmark` at import; :func:`get_benchmark` imports it on first use when it exists (no change to
this file needed), and any other module can register more the same way.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from brorl.evaluation import tiny
from brorl.evaluation.lm_eval_tasks import utils
from brorl.tasks import core as task_core
from brorl.tasks.families import benchmark_name, evaluated_families

RenderFn = Callable[..., Path]


@dataclass(frozen=True)
class Benchmark:
    name: str
    lm_eval_task: str
    render: RenderFn
    data_files: Callable[[Path], Sequence[Path]]
    score: Callable[[dict, list], list[float]]
    doc_metrics: Callable[[list], dict] = utils.doc_metrics
    code: tuple = ()
    prompt_of: Callable | None = None
    category_field: str | None = None
    default_k: int = 16
    default_temperature: float = 1.0
    apply_chat_template: bool = True
    description: str = ""
    source: str = "benchmark"
    """Where its problems come from: ``tasks`` = the tiny tasks' test splits (profile.data: tasks; brorl.profile);
    ``benchmark`` = its own JSONL (brorl.data.benchmarks: fetched or generated)."""
    extra: dict = field(default_factory=dict)
    """Free-form facts a later module may need (e.g. the paper's reported numbers); not hashed."""


BENCHMARKS: dict[str, Benchmark] = {}

PLUGIN_MODULES = ("brorl.evaluation.catalog_tasks",)
"""Modules imported by :func:`get_benchmark` / :func:`benchmark_names` when present (they register more)."""
_plugins_loaded = False


def register_benchmark(benchmark: Benchmark, *, replace: bool = False) -> Benchmark:
    if benchmark.name in BENCHMARKS and not replace:
        raise ValueError(f"benchmark {benchmark.name!r} is already registered")
    BENCHMARKS[benchmark.name] = benchmark
    return benchmark


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for mod in PLUGIN_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:  # the plugin exists but one of its imports is missing: say so
                raise


def get_benchmark(name: str) -> Benchmark:
    _sync_tiny()
    if name not in BENCHMARKS:
        _load_plugins()
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; known: {sorted(BENCHMARKS)}") from None


def benchmark_names() -> list[str]:
    _sync_tiny()
    _load_plugins()
    return sorted(BENCHMARKS)


def reads_tasks(name: str) -> bool:
    """Whether a benchmark reads the tiny tasks' test splits (its declared ``source``)."""
    return get_benchmark(name).source == "tasks"


def config_errors(config: dict, profile) -> list[str]:
    """The config check (brorl.pipeline.config_errors) of ``evaluation``: registered benchmarks, tiny benchmarks only
    where the profile makes the tiny tasks, evaluated models that are fetched checkpoints."""
    evaluation, errors = config.get("evaluation"), []
    if not isinstance(evaluation, dict):
        return errors
    known = benchmark_names()
    for i, name in enumerate(evaluation.get("benchmarks") or []):
        if name not in known:
            errors.append(f"evaluation.benchmarks[{i}]: unknown benchmark {name!r} (registered: "
                          f"{', '.join(known)}) [rule: brorl.evaluation.benchmarks]")
    tiny = [b for b in evaluation.get("benchmarks") or [] if b in known and reads_tasks(b)]
    if tiny and profile.data != "tasks":
        errors.append(f"evaluation.benchmarks: {', '.join(tiny)} read the tiny tasks' test splits, which only a "
                      "profile with `data: tasks` makes [rule: tiny benchmarks need the tiny tasks]")
    for i, name in enumerate(evaluation.get("models") or []):
        if name not in (config.get("checkpoints", {}).get("fetch") or {}):
            errors.append(f"evaluation.models[{i}]: {name!r} is not a fetched checkpoint "
                          "(checkpoints.fetch) [rule: evaluated models exist]")
    return errors


# ------------------------------------------------------------------------------------------------ tiny profile

def _tiny_benchmark(family: str) -> Benchmark:
    def render(data_dir, out_dir, *, k, temperature, max_gen_toks=None,
               stop_token_ids=tiny.DEFAULT_STOP_TOKEN_IDS, **_ignored) -> Path:
        return tiny.render_tasks(data_dir, out_dir, k=k, temperature=temperature, max_gen_toks=max_gen_toks,
                                 families=[family], stop_token_ids=stop_token_ids)

    def data_files(data_dir) -> list[Path]:
        return [Path(data_dir) / family / "test.jsonl"]

    return Benchmark(name=benchmark_name(family), lm_eval_task=tiny.task_name(family), render=render,
                     data_files=data_files, score=utils.score_completions, doc_metrics=utils.doc_metrics,
                     code=(task_core.strip_completion, task_core.verify, task_core.format_prompt),
                     prompt_of=task_core.format_prompt, category_field="task", default_k=tiny.DEFAULT_K,
                     default_temperature=tiny.DEFAULT_TEMPERATURE, apply_chat_template=True,
                     description=f"tiny profile: the {family!r} family's test split", source="tasks")


_TINY_REGISTERED: set[str] = set()


def _sync_tiny() -> None:
    """Register ``tiny_<family>`` for every evaluated family, drop those whose family left the registry."""
    want = {benchmark_name(f): f for f in evaluated_families()}
    for name in _TINY_REGISTERED - set(want):
        BENCHMARKS.pop(name, None)
    _TINY_REGISTERED.intersection_update(want)
    for name, family in want.items():
        if name not in _TINY_REGISTERED:
            register_benchmark(_tiny_benchmark(family))
            _TINY_REGISTERED.add(name)


_sync_tiny()
