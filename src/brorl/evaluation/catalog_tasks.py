"""The data catalog's benchmarks (the paper profile's, any kind) as lm-eval tasks, registered in
:mod:`brorl.evaluation.benchmarks`.

Benchmarks (registry name -> lm-eval task ``brorl_paper_<name>``; data ``<data_dir>/<name>/test.jsonl`` from
:func:`brorl.data.benchmarks.prepare_benchmark`; the sources are rows of :mod:`brorl.data.catalog`). How a benchmark
is scored is its kind's, ``brorl.kinds.<kind>`` (nothing here depends on a kind):

========================  ============  ===================================================================
name                      kind          scorer (its module in :mod:`brorl.kinds`)
========================  ============  ===================================================================
aime24, aime25, amc,      math          :func:`brorl.rewards.math_reward` (math-verify, gold first)
math500, minerva,
olympiadbench
gpqa_diamond              gpqa          the letter :func:`brorl.kinds.gpqa.extract_choice_letter` finds (last
                                        ``\\boxed{}`` letter, then ``<answer>``, then "answer is X")
ifeval                    ifeval        lm-eval's own IFEval checks, prompt-level strict (needs lm-eval's
                                        ``ifeval`` extra and NLTK ``punkt_tab``: not installed here)
reasoning_gym             reasoning_gym :func:`brorl.rewards.reasoning_gym_reward` (each task's verifier);
                                        ``category_field="category"`` (the paper's 11 categories)
apps, codecontests,       code          :func:`brorl.sandbox.code_rewards` (fraction of tests passed); solved
codeforces, taco                        = every test passed (registered, not in the catalog's default
                                        ``BENCHMARK_NAMES``: ask for them by name)
========================  ============  ===================================================================

Decoding (BroRL App. D / ProRL v1 §4, :data:`PAPER_DECODING`): k = 16 samples per problem (``repeats: 16`` and
a ``take_first_k`` filter that keeps all 16), nucleus sampling with temperature 0.6 and top_p 0.95 (``top_k: 0``,
no top-k cut: Hugging Face's generate would otherwise apply its default top_k = 50; vLLM 0.8+ reads 0 as "off"
too [inferred]), up to 32,768 new tokens ("32k"), the chat template applied, zero-shot. The paper's engine is
vLLM; :func:`brorl.evaluation.evaluate` runs lm-eval's ``hf`` (or ``vllm``) backend. Both take the same task
YAMLs. The one backend-specific setting is how stop token ids would be passed, so by default (``backend=None``,
also what the registry's ``render`` does unless given ``backend=``) none are: generation ends at the model's own
end token (its ``generation_config`` for both engines, plus lm-eval's ``until`` = the tokenizer's end string).
``backend="hf"`` renders the given ids as ``eos_token_id``, ``backend="vllm"`` as ``stop_token_ids`` (vLLM's
``SamplingParams`` rejects ``eos_token_id``).

Metrics per task: ``mean_at_k`` (the paper's pass@1 averaged over 16 samples) and unbiased ``pass_at_<j>``,
j = 1, 2, 4, 8, 16, on 0/1 scores, then the kind's own (``Kind.extra_metrics``): Reasoning Gym adds
``mean_reward`` (the continuous reward average), code ``mean_test_fraction`` (its 0/1 score is "all tests
passed"), IFEval ``prompt_level_loose_acc``, ``inst_level_strict_acc``, ``inst_level_loose_acc``.

Stock CLI (vLLM, as in the paper), with the portable folder (rendered from the catalog into a folder of your
choice by ``python -m brorl.evaluation.catalog_tasks DIR [NAME ...]``, which prints DIR; default names: the
catalog's default list) and the data folder in ``--metadata``::

    lm_eval --model vllm --model_args pretrained=/abs/path/to/model,max_model_len=34816 \\
        --apply_chat_template \\
        --include_path "$(python -m brorl.evaluation.catalog_tasks "$(mktemp -d)")" \\
        --metadata '{"data_dir": "/abs/path/to/resources/benchmarks"}' \\
        --tasks brorl_paper_aime24,brorl_paper_math500 --seed 1234 --output_path results/lm_eval --log_samples

No task YAML is committed: every benchmark's task is rendered from its catalog row at run time (a new benchmark
of an existing kind is a catalog row, its pin in the profile's config and its paper values; a new kind also its
module in :mod:`brorl.kinds`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from brorl import kinds
from brorl.data import benchmarks as data_benchmarks
from brorl.data.catalog import ALL_BENCHMARK_NAMES, BENCHMARK_NAMES, benchmark_spec
from brorl.evaluation.benchmarks import Benchmark, register_benchmark
from brorl.evaluation.lm_eval_tasks import TASKS_DIR, kind_utils
from brorl.evaluation.metrics import doc_metrics
from brorl.evaluation.task_yaml import FunctionRef, dump_yaml, metric_names, write_task_folder
from brorl.tasks import core as task_core

TASK_PREFIX = "brorl_paper_"
UTILS_FILE = "kind_utils.py"
TASK_VERSION = 1.0
PAPER_DECODING = {"k": 16, "temperature": 0.6, "top_p": 0.95, "top_k": 0, "max_gen_toks": 32768}
"""BroRL App. D: pass@1 averaged over 16 samples, top_p 0.95, temperature 0.6, 32k context; ProRL v1 §4: vLLM,
maximum response length 32k. ``top_k: 0`` = no top-k truncation (our explicit setting; the papers use none)."""
BACKENDS = (None, "hf", "vllm")

def task_name(name: str) -> str:
    return f"{TASK_PREFIX}{name}"


def data_file(data_dir: str | Path, name: str) -> Path:
    """``<data_dir>/<name>/test.jsonl``: where :func:`render_tasks` and the registry expect a benchmark's JSONL."""
    return kind_utils.data_file_of(data_dir, name)


def generation_kwargs(*, temperature: float, top_p: float, top_k: int, max_gen_toks: int,
                      stop_token_ids: Sequence[int] = (), backend: str | None = None) -> dict:
    temperature = float(temperature)
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if int(max_gen_toks) < 1:
        raise ValueError(f"max_gen_toks must be >= 1, got {max_gen_toks}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    g: dict = {"until": [], "do_sample": temperature > 0}
    if temperature > 0:
        g.update(temperature=temperature, top_p=float(top_p), top_k=int(top_k))
    else:
        g["temperature"] = 0.0
    g["max_gen_toks"] = int(max_gen_toks)
    if stop_token_ids and backend is not None:  # no backend named: the model's own end token only
        key = "eos_token_id" if backend == "hf" else "stop_token_ids"
        g[key] = [int(i) for i in stop_token_ids]
    return g


def task_config(name: str, *, k: int, temperature: float, top_p: float, top_k: int, max_gen_toks: int,
                stop_token_ids: Sequence[int] = (), backend: str | None = None,
                data_file: str | None = None) -> dict:
    """The lm-eval task config of one paper benchmark (``data_file`` None: read ``--metadata`` ``data_dir``)."""
    spec = benchmark_spec(name)
    k = int(k)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    dataset_kwargs: dict = {"benchmark": name}
    if data_file is not None:
        dataset_kwargs = {"data_file": str(data_file), **dataset_kwargs}
    metrics = [{"metric": m, "aggregation": "mean", "higher_is_better": True} for m in metric_names(k)]
    for metric, agg in kinds.kind(spec.kind).extra_metrics:
        metrics.append({"metric": metric,
                        "aggregation": "mean" if agg == "mean" else FunctionRef("kind_utils.agg_inst_level_acc"),
                        "higher_is_better": True})
    return {
        "task": task_name(name),
        "dataset_path": "",
        "custom_dataset": FunctionRef("kind_utils.load_records"),
        "dataset_kwargs": dataset_kwargs,
        "test_split": kind_utils.SPLIT_KEY,
        "output_type": "generate_until",
        "doc_to_text": "prompt",
        "doc_to_target": "answer",
        "target_delimiter": "",
        "num_fewshot": 0,
        "repeats": k,
        "generation_kwargs": generation_kwargs(temperature=temperature, top_p=top_p, top_k=top_k,
                                               max_gen_toks=max_gen_toks, stop_token_ids=stop_token_ids,
                                               backend=backend),
        "filter_list": [{"name": "none", "filter": [{"function": "take_first_k", "k": k}]}],
        "process_results": FunctionRef(f"kind_utils.{kind_utils.PROCESS_PREFIX}{spec.kind}"),
        "metric_list": metrics,
        "metadata": {"version": TASK_VERSION},
    }


def render_tasks(data_dir: str | Path | None, out_dir: str | Path, *, names: Sequence[str] = BENCHMARK_NAMES,
                 k: int = PAPER_DECODING["k"], temperature: float = PAPER_DECODING["temperature"],
                 top_p: float = PAPER_DECODING["top_p"], top_k: int = PAPER_DECODING["top_k"],
                 max_gen_toks: int | None = None, stop_token_ids: Sequence[int] = (), backend: str | None = None,
                 **_ignored) -> Path:
    """Write ``brorl_paper_<name>.yaml`` for each of ``names`` and ``kind_utils.py`` into ``out_dir`` and return
    it (the lm-eval ``include_path``).

    ``data_dir``: the folder holding ``<name>/test.jsonl``, written into each YAML as an absolute path
    (``None``: the portable form reading ``--metadata '{"data_dir": ...}'``). ``max_gen_toks``
    None: 32,768. ``stop_token_ids`` are rendered only for a named ``backend`` (``"hf"``: ``eos_token_id``,
    ``"vllm"``: ``stop_token_ids``). Earlier ``brorl_paper_*.yaml`` files in ``out_dir`` are removed.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    names = list(names)
    if not names:
        raise ValueError("no benchmarks to render")
    data_root = None if data_dir is None else Path(data_dir).expanduser().resolve()
    length = PAPER_DECODING["max_gen_toks"] if max_gen_toks is None else int(max_gen_toks)
    files: dict[str, str] = {}
    for name in names:
        df = None if data_root is None else str(data_file(data_root, name))
        cfg = task_config(name, k=k, temperature=temperature, top_p=top_p, top_k=top_k, max_gen_toks=length,
                          stop_token_ids=stop_token_ids, backend=backend, data_file=df)
        files[f"{task_name(name)}.yaml"] = dump_yaml(cfg)
    return write_task_folder(out_dir, files, f"{TASK_PREFIX}*.yaml", TASKS_DIR / UTILS_FILE)


def write_portable_tasks(out_dir: str | Path, names: Sequence[str] = BENCHMARK_NAMES) -> Path:
    """The stock CLI's task folder: the paper's decoding, no stop ids, data from ``--metadata``."""
    return render_tasks(None, out_dir, names=names)


def prepare_benchmarks(data_dir: str | Path, source, *, names: Sequence[str] = BENCHMARK_NAMES, **kwargs) -> dict:
    """:func:`brorl.data.benchmarks.prepare_benchmark` for each of ``names`` into
    ``<data_dir>/<name>/test.jsonl``; returns ``{name: result}``."""
    return {name: data_benchmarks.prepare_benchmark(name, source, data_file(data_dir, name), **kwargs) for name in names}


# -------------------------------------------------------------------------------------------------- registry

def _benchmark(name: str) -> Benchmark:
    spec = benchmark_spec(name)
    kind = kinds.kind(spec.kind)

    def render(data_dir, out_dir, *, k, temperature, max_gen_toks=None, stop_token_ids=(), **options) -> Path:
        options.pop("names", None)  # a benchmark renders its own task only
        return render_tasks(data_dir, out_dir, names=[name], k=k, temperature=temperature,
                            max_gen_toks=max_gen_toks, stop_token_ids=stop_token_ids, **options)

    def data_files(data_dir) -> list[Path]:
        return [data_file(data_dir, name)]

    return Benchmark(
        name=name, lm_eval_task=task_name(name), render=render, data_files=data_files,
        score=kind.score, doc_metrics=doc_metrics, code=(*kind.code, kinds.module(spec.kind)),
        prompt_of=task_core.format_prompt, category_field=kind.category_field,
        default_k=PAPER_DECODING["k"], default_temperature=PAPER_DECODING["temperature"], apply_chat_template=True,
        description=kind.description,
        extra={"kind": spec.kind, "repo_id": spec.repo_id, "revision": spec.revision,
               "revision_pinned": spec.revision_pinned, "files": list(spec.files), "paper": spec.paper,
               "note": spec.note, "decoding": dict(PAPER_DECODING), "engine_paper": "vllm"})


for _name in ALL_BENCHMARK_NAMES:
    register_benchmark(_benchmark(_name), replace=True)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m brorl.evaluation.catalog_tasks",
                                description="Render the catalog benchmarks' lm-eval tasks (portable form) into DIR.")
    p.add_argument("out_dir", help="folder to write (the lm-eval --include_path); printed")
    p.add_argument("names", nargs="*", help=f"benchmarks (default: {', '.join(BENCHMARK_NAMES)})")
    args = p.parse_args(argv)
    print(write_portable_tasks(args.out_dir, args.names or BENCHMARK_NAMES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
