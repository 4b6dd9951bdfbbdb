"""The run's declared profile: what it starts from, what it trains on, whether hub sources must be pinned.

Config (every config file; documented once in ``workflow/schemas/config.schema.yaml``)::

    profile: {name: tiny, start: trained, data: tasks}
    profile: {name: paper, start: fetched, data: paper, pins: required}

:meth:`Profile.from_config` resolves it once into a frozen :class:`Profile` that the rules (``common.smk``) and
the code ask; nothing infers the profile from which keys exist, name prefixes, record shapes or marker files.
The ``brorl`` commands get it as JSON (``--profile``, or ``BRORL_PROFILE`` that ``common.smk`` exports once);
a bare name (``--profile ci``) is a profile with the defaults below.

A data source kind (:class:`Source`, chosen by ``data``; :func:`sources`) is the small protocol the stage runner,
the study, the reports and the config check ask: where its files are, how a split is read, the reward of its
records, the completion length, the exact probes, how held-out p is measured, the default benchmarks.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Protocol

STARTS = ("trained", "fetched")
"""``trained``: the tiny model, its SFT warm start and the ProRL stage are trained here (``sft``, ``rl.prorl``);
``fetched``: the arms start from the fetched checkpoint ``rl.start_model`` (``checkpoints.fetch``)."""
PINS = ("optional", "required")
"""``required``: every hub source must be pinned to a commit unless ``checkpoints.allow_unpinned``."""


class Source(Protocol):
    """A data source kind: what the stage runner, the study, the reports and the config check ask of the arms'
    data. Its implementations live with the data they describe, each in its package's ``source`` module:
    :class:`brorl.tasks.source.TaskSource` (the tiny tasks generated here) and :class:`brorl.data.source.PaperSource`
    (``rl.data``'s sources, fetched and converted by the train_data rule); :func:`sources` finds them by kind."""

    kind: str
    start: str
    """The ``profile.start`` it pairs with (:data:`STARTS`)."""
    data_subdir: str
    """Where its splits are under the start group's results root (brorl.layout):
    ``results/<root>/<data_subdir>/<task or source>/{train,validation,test}.jsonl`` (:meth:`Profile.data_dir`)."""
    exact_heldout: bool
    """Held-out p exactly (every answer enumerable) or sampled and scored by the reward."""

    def read_split(self, data_dir, split: str, tasks=None) -> list[dict]: ...

    def reward(self, records: list[dict], tokenizer):
        """The TRL reward function over the stage's rows (``record_index``)."""

    def generation_length(self, data_dir, families) -> int:
        """Completion tokens when ``rl.recipe.max_completion_length`` is unset (or an error saying it is needed)."""

    def probe_records(self, validation: list[dict]) -> list[dict]:
        """The validation records the stage's exact probes measure (none without exact probabilities)."""

    def default_benchmarks(self, tasks=None) -> list[str]:
        """The benchmarks the tables expect when a config names none."""

    def config_errors(self, rl: dict) -> list[str]:
        """The config check of the arms' data (``rl``), for brorl.pipeline.config_errors."""


SOURCE_MODULE = "source"
"""A package's module that defines its data source kinds (``brorl/<package>/source.py``)."""


def sources() -> dict[str, Source]:
    """Every data source kind by its ``profile.data`` name: one instance of each class with a ``kind`` defined in a
    package's ``source`` module (``brorl/tasks/source.py``: ``tasks``, ``brorl/data/source.py``: ``paper``); a new
    kind is a class there. Only those modules are imported, when asked (`brorl --help` stays light)."""
    import importlib
    from pathlib import Path

    root = Path(__file__).resolve().parent
    found: dict[str, Source] = {}
    for path in sorted(root.glob(f"*/{SOURCE_MODULE}.py")):
        module = importlib.import_module(f"brorl.{path.parent.name}.{SOURCE_MODULE}")
        for cls in vars(module).values():
            if not (isinstance(cls, type) and cls.__module__ == module.__name__
                    and isinstance(getattr(cls, "kind", None), str)):
                continue
            if cls.kind in found:
                raise ValueError(f"data source kind {cls.kind!r} is defined twice ({module.__name__}.{cls.__name__} "
                                 f"and {type(found[cls.kind]).__module__})")
            found[cls.kind] = cls()
    return found


@dataclass(frozen=True)
class Profile:
    name: str
    """The MLflow tag of every run (the tables read one profile's runs by it)."""
    start: str = "trained"
    data: str = "tasks"
    pins: str = "optional"
    overlay: str | None = None
    """An overlay's own name (its outputs under ``results/<name>-<overlay>/``; brorl.layout); none for a base."""
    reuses: tuple[str, ...] = ()
    """The stage groups an overlay takes from its base's root (brorl.layout.GROUPS)."""
    caveat: str | None = None
    """A sentence every generated markdown report and table opens with (:func:`report`), e.g. the rehearsal's "NOT a
    result"; declared in the config, never derived from the name."""

    def __post_init__(self):
        object.__setattr__(self, "reuses", tuple(self.reuses))
        self.layout  # checks the roots (brorl.layout.Layout)
        for key, value, allowed in (("start", self.start, STARTS), ("data", self.data, tuple(sources())),
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
    def layout(self):
        """Where this run's outputs live (brorl.layout.Layout): its own root and its base's for reused groups."""
        from brorl.layout import Layout

        return Layout(self.name, self.overlay, self.reuses)

    @property
    def data_dir(self) -> str:
        """The arms' data folder: the data source's folder under the start group's root."""
        return self.layout.results("start", self.source.data_subdir)

    @property
    def trains_start(self) -> bool:
        """The arms start from the ProRL stage trained here (else from the fetched ``rl.start_model``)."""
        return self.start == "trained"

    @property
    def pins_required(self) -> bool:
        return self.pins == "required"

    @property
    def source(self) -> Source:
        return sources()[self.data]

    def start_model(self, rl: dict) -> str:
        """The folder the arms start from."""
        return self.layout.resources("start", "models", "prorl" if self.trains_start else rl["start_model"])

    def config_errors(self, config: dict) -> list[str]:
        """The config check (brorl.pipeline.config_errors): the sections this profile needs (``start``, ``data``)
        and the pairs supported."""
        errors = []
        if self.start != self.source.start:
            errors.append(f"profile: start {self.start} with data {self.data} is not supported (the model trained "
                          "here learns the tiny tasks; a fetched one trains on the paper data) [rule: supported profiles]")
        if self.trains_start and "sft" not in config:
            errors.append("sft: required by profile.start: trained: the ProRL stage trains from the SFT model on the "
                          "tiny tasks [rule: ProRL stage needs sft]")
        if self.data == "tasks" and "tasks" not in config:
            errors.append("tasks: required by profile.data: tasks (the tiny task suite) [rule: the profile's sections]")
        return errors


def report(text: str, profile: "Profile | None" = None) -> str:
    """``text`` (a generated markdown report or table) opened by the profile's declared :attr:`Profile.caveat`.

    ``profile`` None: the declared profile of this command (``BRORL_PROFILE``, set by common.smk for every job);
    without one, or without a caveat, ``text`` unchanged. Every markdown writer of a pipeline output calls this once.
    """
    if profile is None:
        declared = os.environ.get("BRORL_PROFILE")
        profile = Profile.parse(declared) if declared else None
    if profile is None or not profile.caveat:
        return text
    return f"> **{profile.name} profile: {profile.caveat}**\n\n{text}"
