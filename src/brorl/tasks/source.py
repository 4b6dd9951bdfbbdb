"""The tiny tasks as a data source kind (``profile.data: tasks``; :class:`brorl.profile.Source`): what the stage
runner, the study and the reports ask of the arms' data when it is the tiny task suite generated here."""

from __future__ import annotations

import json
from pathlib import Path

from brorl.tasks.core import TaskSettings, max_new_tokens, read_split, verify
from brorl.tasks.families import FAMILIES, benchmark_name


class TaskSource:
    """``<data_dir>/<family>/{train,validation,test}.jsonl`` and ``tasks.json`` (:func:`brorl.tasks.write_splits`):
    every answer enumerable, so held-out p and the probes are exact (teacher-forced)."""

    kind = "tasks"
    start = "trained"
    """The start it pairs with: the model trained here learns the tiny tasks."""
    data_subdir = "data"  # under the start group's results root: results/<root>/data (brorl.layout)
    exact_heldout = True
    """Held-out p exactly (every answer of a tiny task enumerable), not sampled and scored by the reward."""

    def read_split(self, data_dir, split: str, tasks=None) -> list[dict]:
        return read_split(data_dir, split, tasks)

    def task_settings(self, data_dir) -> TaskSettings:
        """The settings the folder was written with (its ``tasks.json``; the defaults for a folder written
        without one, as a test's)."""
        path = Path(data_dir) / "tasks.json"
        return TaskSettings.from_dict(json.loads(path.read_text())) if path.exists() else TaskSettings()

    def generation_length(self, data_dir, families) -> int:
        """Completion tokens that always fit an answer plus the end token (``rl.recipe.max_completion_length``
        unset)."""
        return max_new_tokens(self.task_settings(data_dir), families)

    def probe_records(self, validation: list[dict]) -> list[dict]:
        """The validation records whose exact probabilities the stage's probes measure: all of them."""
        return validation

    def reward(self, records: list[dict], tokenizer):
        """The TRL reward over the stage's rows (``record_index``): the exact check of the task's answer."""
        def verify_answer(prompts, completions, completion_ids, record_index, **kwargs):
            texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=False)
            return [verify(records[i], t) for i, t in zip(record_index, texts)]

        return verify_answer

    def default_benchmarks(self, tasks=None) -> list[str]:
        """The benchmarks of a config that names none: the trained families that are evaluated (``tasks``: the
        config's ``tasks.tasks``; None: every evaluated family)."""
        from brorl.tasks.families import tiny_benchmarks

        if tasks is None:
            return list(tiny_benchmarks())
        return [benchmark_name(f) for f in tasks if f in FAMILIES and FAMILIES[f].evaluated]

    def config_errors(self, rl: dict) -> list[str]:
        """The config check of the arms' data (brorl.pipeline.config_errors): no ``rl.data`` (the paper data's)."""
        return [] if rl.get("data") is None else [
            "rl.data: the paper training data is for profile.data: paper; these arms train on the tiny "
            "tasks [rule: rl.data with data: paper]"]
