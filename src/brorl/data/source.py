"""The paper training data as a data source kind (``profile.data: paper``; :class:`brorl.profile.Source`): what the
stage runner, the study and the reports ask of the arms' data when it is ``rl.data``'s sources, fetched and
converted by the train_data rule (:mod:`brorl.data.training`)."""

from __future__ import annotations

from brorl.data.training import TrainDataSettings, make_paper_reward


class PaperSource:
    """The paper training data as a data source kind (``profile.data: paper``; :class:`brorl.profile.Source`):
    ``<data_dir>/<source>/{train,validation}.jsonl`` written by the train_data rule
    (:func:`brorl.data.training.prepare_train_data`), each record scored by its source's reward kind. No exact
    probabilities: held-out p is sampled and scored."""

    kind = "paper"
    start = "fetched"
    """The start it pairs with: a fetched checkpoint trains on the paper data."""
    data_subdir = "data/rl"  # under the start group's results root: results/<root>/data/rl (brorl.layout)
    exact_heldout = False

    def read_split(self, data_dir, split: str, tasks=None) -> list[dict]:
        from brorl.data.jsonl import read_split

        return read_split(data_dir, split, tasks)

    def generation_length(self, data_dir, families) -> int:
        raise ValueError("rl.recipe.max_completion_length: required for the paper data (profile.data: paper): its "
                         "answers have no enumerable length [rule: completion length declared]")

    def probe_records(self, validation: list[dict]) -> list[dict]:
        """No exact probes (the answers are not enumerable)."""
        return []

    def reward(self, records: list[dict], tokenizer):
        return make_paper_reward(records, tokenizer)

    def default_benchmarks(self, tasks=None) -> list[str]:
        """The benchmarks of a config that names none: the catalog's paper evaluation set."""
        from brorl.data.catalog import BENCHMARK_NAMES

        return list(BENCHMARK_NAMES)

    def config_errors(self, rl: dict) -> list[str]:
        """The config check of the arms' data (brorl.pipeline.config_errors): ``rl.data`` given and valid."""
        if rl.get("data") is None:
            return ["rl.data: required without rl.prorl (profile.data: paper): the arms train on the paper data "
                    "(brorl.data.training) [rule: rl.data with data: paper]"]
        try:
            TrainDataSettings.from_dict(rl["data"])
        except (TypeError, ValueError) as err:
            return [f"rl.data: {err} [rule: brorl.data.training.TrainDataSettings]"]
        return []
