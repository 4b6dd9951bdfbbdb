"""The run's declared profile: what it starts from, what it trains on, whether hub sources must be pinned.

Config (every config file; documented once in ``workflow/schemas/config.schema.yaml``)::

    profile: {name: tiny, start: trained, data: tasks}
    profile: {name: paper, start: fetched, data: paper, pins: required}

:meth:`Profile.from_config` resolves it once into a frozen :class:`Profile` that the rules (``common.smk``) and
the code ask; nothing infers the profile from which keys exist, name prefixes, record shapes or marker files.
The ``brorl`` commands get it as JSON (``--profile``, or ``BRORL_PROFILE`` that ``common.smk`` exports once);
a bare name (``--profile ci``) is a profile with the defaults below.

A data source kind (:data:`SOURCES`, chosen by ``data``) is the small protocol the stage runner and the study
ask: where its files are, how a split is read, the reward of its records and how held-out p is measured.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

STARTS = ("trained", "fetched")
"""``trained``: the tiny model, its SFT warm start and the ProRL stage are trained here (``sft``, ``rl.prorl``);
``fetched``: the arms start from the fetched checkpoint ``rl.start_model`` (``checkpoints.fetch``)."""
PINS = ("optional", "required")
"""``required``: every hub source must be pinned to a commit unless ``checkpoints.allow_unpinned``."""


@dataclass(frozen=True)
class Source:
    """A data source kind: the tiny tasks generated here (``tasks``) or the external training data fetched and
    converted by the train_data rule (``paper``: ``rl.data``'s sources)."""

    kind: str
    data_dir: str
    """Where its splits are: ``<data_dir>/<task or source>/{train,validation,test}.jsonl``."""
    exact_heldout: bool
    """Held-out p exactly (every answer of a tiny task enumerable) or sampled and scored by the reward."""

    def read_split(self, data_dir, split: str, tasks=None) -> list[dict]:
        from brorl.tasks.core import read_split

        return read_split(data_dir, split, tasks)

    def config_errors(self, rl: dict) -> list[str]:
        """The config check of the arms' data (brorl.pipeline.config_errors): ``rl.data`` is the paper data's and
        only its."""
        if self.kind == "tasks":
            return [] if rl.get("data") is None else [
                "rl.data: the paper training data is for profile.data: paper; these arms train on the tiny "
                "tasks [rule: rl.data with data: paper]"]
        if rl.get("data") is None:
            return ["rl.data: required without rl.prorl (profile.data: paper): the arms train on the paper data "
                    "(brorl.data.training) [rule: rl.data with data: paper]"]
        from brorl.data.training import TrainDataSettings

        try:
            TrainDataSettings.from_dict(rl["data"])
        except (TypeError, ValueError) as err:
            return [f"rl.data: {err} [rule: brorl.data.training.TrainDataSettings]"]
        return []

    def reward(self, records: list[dict], tokenizer):
        """The TRL reward function over the stage's rows (``record_index``)."""
        if self.kind == "paper":
            from brorl.data.training import make_paper_reward

            return make_paper_reward(records, tokenizer)
        from brorl.tasks.core import verify

        def verify_answer(prompts, completions, completion_ids, record_index, **kwargs):
            texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=False)
            return [verify(records[i], t) for i, t in zip(record_index, texts)]

        return verify_answer


SOURCES = {"tasks": Source("tasks", "results/data", exact_heldout=True),
           "paper": Source("paper", "results/data/rl", exact_heldout=False)}


@dataclass(frozen=True)
class Profile:
    name: str
    """The MLflow tag of every run (the tables read one profile's runs by it)."""
    start: str = "trained"
    data: str = "tasks"
    pins: str = "optional"

    def __post_init__(self):
        for key, value, allowed in (("start", self.start, STARTS), ("data", self.data, tuple(SOURCES)),
                                    ("pins", self.pins, PINS)):
            if value not in allowed:
                raise ValueError(f"profile.{key}: {value!r} is not one of {', '.join(allowed)}")

    @classmethod
    def from_config(cls, config: dict) -> "Profile":
        return cls(**config["profile"])

    @classmethod
    def parse(cls, text: str | None = None) -> "Profile":
        """From ``--profile``: the block as JSON, or a bare name; ``None``: ``BRORL_PROFILE`` (set by common.smk)."""
        text = text if text is not None else os.environ.get("BRORL_PROFILE")
        if not text:
            raise SystemExit("no profile: give --profile (a name or the config's `profile` block as JSON)")
        return cls(**json.loads(text)) if text.lstrip().startswith("{") else cls(name=text)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @property
    def trains_start(self) -> bool:
        """The arms start from the ProRL stage trained here (else from the fetched ``rl.start_model``)."""
        return self.start == "trained"

    @property
    def pins_required(self) -> bool:
        return self.pins == "required"

    @property
    def source(self) -> Source:
        return SOURCES[self.data]

    def start_model(self, rl: dict) -> str:
        """The folder the arms start from."""
        return "resources/models/prorl" if self.trains_start else f"resources/models/{rl['start_model']}"

    def config_errors(self, config: dict) -> list[str]:
        """The config check (brorl.pipeline.config_errors): the sections this profile needs (``start``, ``data``)
        and the pairs supported."""
        errors = []
        if (self.start, self.data) not in (("trained", "tasks"), ("fetched", "paper")):
            errors.append(f"profile: start {self.start} with data {self.data} is not supported (the model trained "
                          "here learns the tiny tasks; a fetched one trains on the paper data) [rule: supported profiles]")
        if self.trains_start and "sft" not in config:
            errors.append("sft: required by profile.start: trained: the ProRL stage trains from the SFT model on the "
                          "tiny tasks [rule: ProRL stage needs sft]")
        if self.data == "tasks" and "tasks" not in config:
            errors.append("tasks: required by profile.data: tasks (the tiny task suite) [rule: the profile's sections]")
        return errors

