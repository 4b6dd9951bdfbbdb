"""lm-eval hooks of the ``brorl_tiny_*`` tasks: the document loader and the k-sample scorer.

lm-eval imports this file by path (``!function utils.<name>`` in the task YAMLs next to it), so it must stay
importable on its own; it only needs the installed ``brorl`` package. :func:`brorl.evaluation.tiny.render_tasks`
copies it byte for byte next to the rendered YAMLs.

- :func:`load_split` (``custom_dataset``): the JSONL split the pipeline wrote, read as is (no Hugging Face
  ``datasets`` cache, no schema inference beyond ``Dataset.from_list``). lm-eval calls it with the task's
  ``metadata`` (the ``--metadata`` JSON merged with ``--model_args``) and ``dataset_kwargs`` as keyword
  arguments; the file is ``data_file`` when given (rendered tasks) or ``<data_dir>/<family>/<split>.jsonl``.
- :func:`process_results`: the task keeps all k repeats (``filter_list: take_first_k``, k = ``repeats``), so
  lm-eval passes ``[[c_1, ..., c_k]]``; every completion is scored with :func:`brorl.tasks.verify` and the
  document's ``mean_at_k`` and unbiased ``pass_at_<j>`` (j = 1, 2, 4, ... <= k) are returned for lm-eval to
  average over documents.
"""

from __future__ import annotations

from pathlib import Path

from brorl.evaluation.metrics import completions_of, doc_metrics
from brorl.tasks import read_jsonl, verify

SPLIT_KEY = "test"
"""The split name the loader returns (the YAMLs' ``test_split``), whatever split file it read."""


def load_split(data_file: str | None = None, data_dir: str | None = None, family: str | None = None,
               split: str = "test", **_ignored):
    """``DatasetDict({"test": <records of the JSONL file>})`` for lm-eval's ``custom_dataset``."""
    import datasets

    if data_file is None:
        if data_dir is None or family is None:
            raise ValueError(
                "brorl_tiny tasks need their data: pass --metadata '{\"data_dir\": \"<pipeline data dir>\"}' "
                "(the folder holding <family>/test.jsonl, e.g. results/data), or render the tasks with "
                "brorl.evaluation.tiny.render_tasks(...), which writes an absolute data_file into each YAML")
        data_file = Path(data_dir) / family / f"{split}.jsonl"
    path = Path(data_file).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"brorl_tiny task data not found: {path}")
    records = read_jsonl(path)
    if not records:
        raise ValueError(f"no records in {path}")
    return datasets.DatasetDict({SPLIT_KEY: datasets.Dataset.from_list(records)})


def score_completions(doc, completions) -> list[float]:
    """0/1 per completion (``brorl.tasks.verify``: never raises, garbage scores 0)."""
    out = []
    for c in completions:
        try:
            out.append(float(verify(doc, c)))
        except Exception:  # noqa: BLE001 -- e.g. a doc that is not a mapping
            out.append(0.0)
    return out


def process_results(doc, results) -> dict[str, float]:
    """lm-eval ``process_results``: score the document's k completions."""
    return doc_metrics(score_completions(doc, completions_of(results)))
