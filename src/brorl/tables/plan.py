"""What the tables expect to find: the arms, seeds, benchmarks and extra models of a profile.

A cell whose run the plan expects but the store lacks becomes an explicit gap ("missing: ..."); a column
the profile has no benchmark for is a gap of another kind ("not in the tiny profile"). Build the plan from
the pipeline config (:meth:`Plan.from_config`) or, without one, from the declared profile
(:class:`brorl.profile.Profile`) and the runs in the store (:meth:`Plan.infer`).

The tiny columns (:func:`tiny_benchmarks`, also the module attribute ``TINY``) are the evaluated families of
:data:`brorl.tasks.FAMILIES`, read from the registry when asked (a family added in process has columns too).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from brorl.data.catalog import BENCHMARK_NAMES, RG_CATEGORIES  # noqa: F401 -- RG_CATEGORIES: Table 5's columns
from brorl.data.catalog import CODE_BENCHMARK_NAMES as CODE
from brorl.data.catalog import MATH_BENCHMARKS as MATH
from brorl.tasks.families import tiny_benchmarks
from brorl.tables.store import model_name
from brorl.training.arms import Arm, arm_from_stages, arm_plan

REASONING_GYM = "reasoning_gym"
OTHER = tuple(b for b in BENCHMARK_NAMES if b not in MATH and b != REASONING_GYM)  # gpqa_diamond, ifeval



def __getattr__(name: str):
    if name == "TINY":  # the registry's view now, not a copy taken at import
        return tiny_benchmarks()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def default_benchmarks(profile, tasks=None) -> list[str]:
    """The benchmarks a profile evaluates when its config names none: its data source's
    (:meth:`brorl.profile.Source.default_benchmarks`; ``tasks``: the config's ``tasks.tasks``)."""
    return profile.source.default_benchmarks(tasks)


@dataclass
class Plan:
    profile: str
    arms: list[Arm] = field(default_factory=list)       # brorl.training.arms objects: BatchArm n16, ..., ScheduleArm
    seeds: list[str] = field(default_factory=list)      # "0", "1"
    benchmarks: list[str] = field(default_factory=list)
    extra_models: list[str] = field(default_factory=list)  # evaluated checkpoints not trained here
    train_prorl: bool = True                             # False: the ProRL checkpoint is fetched
    data: str = "tasks"                                  # the profile's data source kind (brorl.profile)
    start_model: str = "prorl"                           # the arms' start: the ProRL stage or rl.start_model

    def __post_init__(self):
        self.arms = sorted({a.name: a for a in self.arms}.values(), key=lambda a: a.order)
        self.seeds = sorted(dict.fromkeys(str(s) for s in self.seeds), key=int)
        self.benchmarks = list(dict.fromkeys(self.benchmarks))

    @property
    def base_arm(self) -> Arm | None:
        """The smallest-N arm: the ProRL continuation (n16) every larger N is compared with."""
        ns = [a for a in self.arms if a.n is not None]
        return ns[0] if ns else None

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)

    def has(self, benchmarks) -> list[str]:
        return [b for b in benchmarks if b in self.benchmarks]

    @classmethod
    def from_config(cls, config: dict) -> "Plan":
        """From the pipeline's config (the ``profile`` block, ``rl.arms``, optional ``evaluation``)."""
        from brorl.profile import Profile

        declared = Profile.from_config(config)
        profile = declared.name
        rl = config.get("rl") or {}
        arms_cfg = rl.get("arms") or {}
        arms = list(arm_plan(rl).values())
        start = "prorl" if declared.trains_start else rl.get("start_model") or "prorl"
        ev = config.get("evaluation") or {}
        benchmarks = ev.get("benchmarks") or default_benchmarks(declared, (config.get("tasks") or {}).get("tasks"))
        trained = {model_name(a.name, s) for a in arms for s in arms_cfg.get("seeds", [])}
        if ev.get("models") is not None:
            extra = [m for m in ev["models"] if m != start and m not in trained]
        else:
            extra = [m for m in ((config.get("checkpoints") or {}).get("fetch") or {}) if m != start]
        return cls(profile=profile, arms=arms, seeds=arms_cfg.get("seeds", []), benchmarks=list(benchmarks),
                   extra_models=extra, train_prorl=declared.trains_start, data=declared.data, start_model=start)

    @classmethod
    def infer(cls, store, profile=None) -> "Plan":
        """Without a config: the declared profile (``profile``, a :class:`brorl.profile.Profile`; None: the one in
        ``BRORL_PROFILE``, as every ``brorl`` command gets it) and every arm, seed, benchmark and model seen in the
        store's runs (any status). Nothing about the profile is guessed from the runs; an arm is read back from
        its training runs' per-stage N (``stage<k>.n_rollouts`` params, :func:`brorl.training.arms.arm_from_stages`),
        never from its name, and an evaluated model is an arm's when it is ``<arm>-seed<s>`` of a trained arm and
        seed."""
        from brorl.profile import Profile
        from brorl.tables.store import RULE_ARM, RULE_EVAL

        declared = profile if profile is not None else Profile.parse()
        if declared.name != store.profile:
            raise ValueError(f"the declared profile {declared.name!r} is not the store's {store.profile!r}")
        recs = [*store.finished.values(), *store.other.values()]
        arms, seeds, benchmarks, extra = {}, [], [], []
        for r in recs:
            if r.rule == RULE_ARM and "arm" in r.wildcards:
                ns = [r.params[f"stage{k}.n_rollouts"] for k in range(len(r.params))
                      if f"stage{k}.n_rollouts" in r.params]
                arms.setdefault(r.wildcards["arm"], arm_from_stages(r.wildcards["arm"], ns))
                if "seed" in r.wildcards:
                    seeds.append(r.wildcards["seed"])
        trained = {model_name(a, s) for a in arms for s in seeds}
        for r in recs:
            if r.rule == RULE_EVAL:
                if "benchmark" in r.wildcards:
                    benchmarks.append(r.wildcards["benchmark"])
                if r.wildcards.get("model") not in (None, "prorl", *trained):
                    extra.append(r.wildcards["model"])
        if not benchmarks:
            benchmarks = default_benchmarks(declared)
        order = {b: i for i, b in enumerate([*MATH, *CODE, *OTHER, REASONING_GYM, *tiny_benchmarks()])}
        benchmarks = sorted(set(benchmarks), key=lambda b: (order.get(b, len(order)), b))
        return cls(profile=declared.name, arms=list(arms.values()), seeds=seeds, benchmarks=benchmarks,
                   extra_models=sorted(set(extra)), train_prorl=declared.trains_start, data=declared.data)
