"""lm-eval task definitions of the tiny profile: one generate-until task per evaluated tiny family and their group.

Tasks
    ``brorl_tiny_<family>`` (benchmark ``tiny_<family>``) for every family of :data:`brorl.tasks.FAMILIES` with
    ``evaluated=True`` (today ``add`` and ``multiple``), and the group ``brorl_tiny`` (all of them, averaged per
    problem). Nothing per family is written by hand: the YAMLs are rendered from the registry at run time.
    Documents are the pipeline's test split ``<data_dir>/<family>/test.jsonl`` (:func:`brorl.tasks.write_splits`);
    the prompt is ``record["prompt"]`` through the tokenizer's chat template (``--apply_chat_template``), which is
    exactly :func:`brorl.tasks.format_prompt` (the runner asserts it).

Decoding
    k samples per problem (lm-eval ``repeats: k``; the ``take_first_k`` filter keeps all k, since lm-eval's
    default ``take_first`` filter would drop all but the first), pure temperature sampling (``top_k: 0``,
    ``top_p: 1.0``; tiny default T = 1.0), ``until`` the tokenizer's end token, ``max_gen_toks`` from
    :func:`brorl.tasks.max_new_tokens` of the family (read from ``<data_dir>/tasks.json``). lm-eval decodes
    completions with ``skip_special_tokens=True``, so the end token itself is never in the text it returns;
    generation therefore also stops at the pad token (``eos_token_id: [eos, pad]``), and the returned text is
    what :func:`brorl.tasks.verify` reads in a raw completion (the text before the first end or pad token).
    The one difference left: an ``<unk>`` token before the end is dropped by lm-eval's decoding, where
    ``verify`` on raw text would see a wrong character (the tiny SFT model put one in 4 of 3,200 ``add``
    samples at T = 1).

Scoring
    ``utils.process_results`` scores each of the k completions with :func:`brorl.tasks.verify` and reports the
    document's ``mean_at_k`` and unbiased ``pass_at_<j>`` for j = 1, 2, 4, ... <= k; lm-eval averages them over
    documents (``aggregation: mean``), which is :func:`brorl.evaluation.metrics.sample_metrics`.

Two ways to get the YAMLs, both for the stock CLI:

1. The portable folder (default decoding: k = 16, T = 1.0, the default task settings' lengths; the data folder
   comes from ``--metadata``), rendered into a folder of your choice by ``python -m brorl.evaluation.tiny DIR``
   (prints DIR)::

       lm_eval --model hf --model_args pretrained=/abs/path/to/model,dtype=float32 --device cpu \\
           --batch_size 256 --apply_chat_template \\
           --include_path "$(python -m brorl.evaluation.tiny "$(mktemp -d)")" \\
           --metadata '{"data_dir": "/abs/path/to/results/data"}' \\
           --tasks brorl_tiny --seed 1234 --output_path results/lm_eval --log_samples

2. :func:`render_tasks` (what :func:`brorl.evaluation.evaluate` uses): the same YAMLs with another k,
   temperature or length and the absolute data file written in (no ``--metadata``)::

       python -c "from brorl.evaluation.tiny import render_tasks; render_tasks('results/data', 'tasks_k4', k=4)"
       lm_eval --model hf --model_args pretrained=/abs/path/to/model,dtype=float32 --device cpu \\
           --batch_size 256 --apply_chat_template --include_path tasks_k4 --tasks brorl_tiny_add \\
           --seed 1234 --output_path results/lm_eval --log_samples

With the same model, seed, batch size and decoding, the CLI samples exactly what ``evaluate`` samples (same
completions, same scores; tests/test_evaluation.py checks it). The hooks (``utils.py``) live in
``brorl/evaluation/lm_eval_tasks`` and are copied beside the rendered YAMLs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from brorl.evaluation.lm_eval_tasks import TASKS_DIR
from brorl.evaluation.task_yaml import FunctionRef, dump_yaml, metric_names, write_task_folder
from brorl.tasks.core import EOS_TOKEN, TaskSettings, max_new_tokens
from brorl.tasks.families import FAMILIES, evaluated_families

GROUP = "brorl_tiny"
DEFAULT_K = 16
DEFAULT_TEMPERATURE = 1.0
DEFAULT_STOP_TOKEN_IDS = (1, 0)
"""(eos, pad) ids of the tiny tokenizer: :data:`brorl.models.tokenizer.SPECIAL_TOKENS` is (pad, eos, unk), trained
first, so pad = 0 and eos = 1 in every tiny model. :func:`brorl.evaluation.evaluate` passes the evaluated
tokenizer's own ids."""
TASK_VERSION = 1.0
UTILS_FILE = "utils.py"


def task_name(family: str) -> str:
    return f"{GROUP}_{family}"


def task_settings_of(data_dir: str | Path | None) -> TaskSettings:
    """The task settings the data was written with (``<data_dir>/tasks.json``), else the defaults."""
    if data_dir is not None:
        path = Path(data_dir) / "tasks.json"
        if path.is_file():
            return TaskSettings.from_dict(json.loads(path.read_text()))
    return TaskSettings()


def default_max_gen_toks(data_dir: str | Path | None, family: str) -> int:
    """:func:`brorl.tasks.max_new_tokens` of one family under the data's task settings."""
    return max_new_tokens(task_settings_of(data_dir), [family])


def generation_kwargs(*, temperature: float, max_gen_toks: int,
                      stop_token_ids: Sequence[int] = DEFAULT_STOP_TOKEN_IDS) -> dict:
    temperature = float(temperature)
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if int(max_gen_toks) < 1:
        raise ValueError(f"max_gen_toks must be >= 1, got {max_gen_toks}")
    g: dict = {"until": [EOS_TOKEN], "do_sample": temperature > 0}
    if temperature > 0:
        g.update(temperature=temperature, top_k=0, top_p=1.0)
    g["max_gen_toks"] = int(max_gen_toks)
    if stop_token_ids:
        g["eos_token_id"] = [int(i) for i in stop_token_ids]
    return g


def task_config(family: str, *, k: int, temperature: float, max_gen_toks: int,
                stop_token_ids: Sequence[int] = DEFAULT_STOP_TOKEN_IDS, data_file: str | None = None,
                split: str = "test") -> dict:
    """The lm-eval task config of one family (``data_file`` None: read ``--metadata`` ``data_dir``)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown task family {family!r}; known: {sorted(FAMILIES)}")
    if not FAMILIES[family].evaluated:
        raise ValueError(f"task family {family!r} is not evaluated (FAMILIES[{family!r}].evaluated is False); "
                         f"evaluated: {', '.join(evaluated_families())}")
    k = int(k)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    dataset_kwargs: dict = {"family": family, "split": split}
    if data_file is not None:
        dataset_kwargs = {"data_file": str(data_file), **dataset_kwargs}
    return {
        "task": task_name(family),
        "dataset_path": "",
        "custom_dataset": FunctionRef("utils.load_split"),
        "dataset_kwargs": dataset_kwargs,
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": "prompt",
        "doc_to_target": "answer",
        "target_delimiter": "",
        "num_fewshot": 0,
        "repeats": k,
        "generation_kwargs": generation_kwargs(temperature=temperature, max_gen_toks=max_gen_toks,
                                               stop_token_ids=stop_token_ids),
        "filter_list": [{"name": "none", "filter": [{"function": "take_first_k", "k": k}]}],
        "process_results": FunctionRef("utils.process_results"),
        "metric_list": [{"metric": m, "aggregation": "mean", "higher_is_better": True} for m in metric_names(k)],
        "metadata": {"version": TASK_VERSION},
    }


def group_config(families: Iterable[str], k: int) -> dict:
    return {
        "group": GROUP,
        "task": [task_name(f) for f in families],
        "aggregate_metric_list": [{"metric": m, "aggregation": "mean", "weight_by_size": True}
                                  for m in metric_names(k)],
        "metadata": {"version": TASK_VERSION},
    }


def render_tasks(data_dir: str | Path | None, out_dir: str | Path, *, k: int = DEFAULT_K,
                 temperature: float = DEFAULT_TEMPERATURE, max_gen_toks: int | Mapping[str, int] | None = None,
                 families: Sequence[str] | None = None,
                 stop_token_ids: Sequence[int] = DEFAULT_STOP_TOKEN_IDS, split: str = "test") -> Path:
    """Write ``brorl_tiny_<family>.yaml`` (one per family), the group ``brorl_tiny.yaml`` and ``utils.py`` into
    ``out_dir`` and return it (the lm-eval ``include_path``).

    ``data_dir``: the pipeline's data folder; its ``<family>/<split>.jsonl`` is written into each YAML as an
    absolute path (``None``: the portable form that reads ``--metadata '{"data_dir": ...}'``).
    ``max_gen_toks``: one int for every family, a ``{family: int}`` mapping, or ``None`` for
    :func:`brorl.tasks.max_new_tokens` of each family under ``<data_dir>/tasks.json``. ``families`` None: every
    evaluated family (:func:`brorl.tasks.families.evaluated_families`). Earlier
    ``brorl_tiny*.yaml`` files in ``out_dir`` are removed, so the folder never holds stale task versions.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    families = list(evaluated_families() if families is None else families)
    if not families:
        raise ValueError("no families to render")
    data_root = None if data_dir is None else Path(data_dir).expanduser().resolve()
    files: dict[str, str] = {}
    for family in families:
        if isinstance(max_gen_toks, Mapping):
            length = int(max_gen_toks[family])
        elif max_gen_toks is None:
            length = default_max_gen_toks(data_root, family)
        else:
            length = int(max_gen_toks)
        data_file = None if data_root is None else str(data_root / family / f"{split}.jsonl")
        cfg = task_config(family, k=k, temperature=temperature, max_gen_toks=length,
                          stop_token_ids=stop_token_ids, data_file=data_file, split=split)
        files[f"{task_name(family)}.yaml"] = dump_yaml(cfg)
    files[f"{GROUP}.yaml"] = dump_yaml(group_config(families, k))
    return write_task_folder(out_dir, files, f"{GROUP}*.yaml", TASKS_DIR / UTILS_FILE)


def write_portable_tasks(out_dir: str | Path) -> Path:
    """The stock CLI's task folder: every evaluated family and the group, default decoding, data from
    ``--metadata '{"data_dir": ...}'``."""
    return render_tasks(None, out_dir, k=DEFAULT_K, temperature=DEFAULT_TEMPERATURE)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m brorl.evaluation.tiny",
                                description="Render the tiny profile's lm-eval tasks (portable form) into DIR.")
    p.add_argument("out_dir", help="folder to write (the lm-eval --include_path); printed")
    print(write_portable_tasks(p.parse_args(argv).out_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
