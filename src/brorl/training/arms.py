"""The experiment's training plan: the ProRL saturation stage and the arms that continue from it.

Config (``rl`` section, see ``config/config.yaml``)::

    rl:
      recipe:   {...}        # RLSettings shared by every stage (the ProRLv2 recipe)
      prorl:    {...}        # the N=16 saturation stage (RLSettings on top of the recipe; a plateau rule)
      arms:
        seeds: [0, 1]
        sample_budget: 16384 # generated samples per arm (before filtering, as BroRL Table 1 counts them)
        batches:             # one arm n<N> per entry: its batch geometry (+ any RLSettings override)
          - {n_rollouts: 16, prompts_per_step: 32}
          - {n_rollouts: 512, prompts_per_step: 1}
        schedule: [16, 512]  # the chained arm: one stage per N (geometry of the n<N> arm), equal budget shares
        settings: {}         # RLSettings for every arm stage (on top of the recipe)

:func:`arm_plan` turns this, once, into ``{arm name: Arm}`` (an :class:`Arm` carries its N per stage, its stage
settings, its label, order and config slice) that the rules, the training report and the tables read;
:func:`plan` gives the stages per arm for one seed. An arm kind (:class:`BatchArm`: one stage ``n<N>``;
:class:`ScheduleArm`: the chained arm) is one class here (:data:`ARM_KINDS`) and its keys in the schema;
:func:`run_arm` runs the stages of
one arm and seed (each stage is a resumable :func:`brorl.training.stage.train_stage` in a work folder that
survives a killed job), chains them (stage k+1 starts from stage k's policy: the reference reset), and writes
the arm's outputs: the final HF folder, ``metrics.csv`` over all stages, ``probe.npz`` (exact per-prompt
validation pass@1 at the arm's start and end) and ``summary.json``.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import math
import os
import shutil
from dataclasses import dataclass
from typing import ClassVar
from pathlib import Path

import numpy as np

from brorl.atomic import atomic_dir, atomic_open, atomic_path, write_text
from brorl.training.settings import RLSettings

ARM_COLUMNS = ("arm", "seed", "stage", "stage_n_rollouts", "arm_step", "arm_generated_samples",
               "arm_wall_time_s")


@dataclass(frozen=True)
class Arm:
    """One training arm of ``rl.arms``: what a rule, the trainer, the training report and the tables need of it.
    A kind is a subclass (:data:`ARM_KINDS`) that builds its arms from the config (:meth:`from_rl`), checks its own
    keys (:meth:`errors`) and says how it is labelled and ordered; nothing reads an arm's kind or N from its name.

    N is ``n_rollouts`` here and in :class:`brorl.training.settings.RLSettings` (config: ``rl.arms.batches[].
    n_rollouts``); the trainer hands it to TRL as ``num_generations`` and to the sampler as ``n``."""

    name: str
    """For people and folders (``resources/checkpoints/<name>/seed<s>``, the ``arm`` wildcard); never parsed."""
    n_rollouts: tuple[int, ...]
    """N of each stage."""
    stages: tuple[dict, ...] = ()
    """Each stage's settings (RLSettings keys), seed left out; empty for an arm read back from its results."""
    per_seed: bool = True
    """Whether it runs once per seed of ``rl.arms.seeds`` (its stages take the seed); False: the ProRL stage, whose
    settings carry their own seed."""
    kind: ClassVar[str] = ""
    key: ClassVar[str] = ""
    """Its key under ``rl.arms`` (``batches``, ``schedule``, ...)."""

    @property
    def n(self) -> int | None:
        """The arm's one N; None for an arm whose N changes (the schedule)."""
        return None

    @property
    def order(self) -> tuple:
        """Batch arms by N, then the others."""
        return (1, 0)

    def label(self, smallest: bool = False) -> str:
        """Its row in the paper tables (``smallest``: the smallest-N arm, the ProRL continuation)."""
        return self.kind

    def stages_for(self, seed: int | None = None) -> list[dict]:
        """The stage settings of one seed (``None``: the seed key is left out)."""
        extra = {} if seed is None or not self.per_seed else {"seed": seed}
        return [{**stage, **extra} for stage in self.stages]

    def settings(self, seed: int = 0) -> list[RLSettings]:
        """What :func:`run_arm` trains: each stage's :class:`RLSettings` for one seed (N as ``n_rollouts``)."""
        return [RLSettings.from_dict(stage) for stage in self.stages_for(seed)]

    def config_slice(self, rl: dict) -> dict:
        """The part of ``rl`` this arm depends on (a rule's params): adding a seed or an arm, or changing another
        arm's batch, does not rerun its jobs; :func:`arm_plan` of the slice gives this arm the same stages."""
        arms = rl.get("arms", {})
        owned = [kind.key for kind in ARM_KINDS if kind.key != "batches"]
        keep = {k: v for k, v in arms.items() if k not in ("seeds", "batches", *owned)}
        ns = set(self.n_rollouts)
        return {"recipe": rl.get("recipe", {}),
                "arms": {**keep, "batches": [b for b in arms.get("batches", []) if b["n_rollouts"] in ns],
                         **{k: arms.get(k, []) if k == self.key else [] for k in owned}}}

    @classmethod
    def from_rl(cls, rl: dict, base: dict, budget: int) -> list["Arm"]:
        """This kind's arms of ``rl.arms`` (``base``: recipe + ``rl.arms.settings``; ``budget``: samples per arm)."""
        raise NotImplementedError

    @classmethod
    def errors(cls, arms: dict) -> list[str]:
        """This kind's own checks of ``rl.arms`` (before every stage's settings are checked)."""
        return []


@dataclass(frozen=True)
class BatchArm(Arm):
    """``rl.arms.batches[]``: one stage at one N and batch geometry, named ``n<N>``."""

    kind: ClassVar[str] = "batch"
    key: ClassVar[str] = "batches"

    @property
    def n(self) -> int:
        return self.n_rollouts[0]

    @property
    def order(self) -> tuple:
        return (0, self.n)

    def label(self, smallest: bool = False) -> str:
        return f"{'ProRL' if smallest else 'BroRL'} {self.name}"

    @classmethod
    def from_rl(cls, rl: dict, base: dict, budget: int) -> list[Arm]:
        return [cls(arm_name(b["n_rollouts"]), (b["n_rollouts"],), ({**base, **b, "sample_budget": budget, "steps": 0},))
                for b in rl.get("arms", {}).get("batches", [])]

    @classmethod
    def errors(cls, arms: dict) -> list[str]:
        ns = [b["n_rollouts"] for b in arms.get("batches", [])]
        return [f"rl.arms.batches: two arms with n_rollouts = {n} (arm names n<N> must be unique) [rule: unique N]"
                for n in sorted({n for n in ns if ns.count(n) > 1})]


@dataclass(frozen=True)
class ScheduleArm(Arm):
    """``rl.arms.schedule``: the chained arm, one stage per N (the batch geometry of the ``n<N>`` arm), equal
    shares of the budget; stage k+1 starts from stage k's policy."""

    kind: ClassVar[str] = "schedule"
    key: ClassVar[str] = "schedule"

    @classmethod
    def from_rl(cls, rl: dict, base: dict, budget: int) -> list[Arm]:
        arms = rl.get("arms", {})
        schedule = arms.get("schedule", [])
        if not schedule:
            return []
        by_n = {b["n_rollouts"]: b for b in arms.get("batches", [])}
        share = budget // len(schedule)
        return [cls("schedule", tuple(schedule),
                    tuple({**base, **by_n.get(n, {"n_rollouts": n}), "sample_budget": share, "steps": 0}
                          for n in schedule))]

    @classmethod
    def errors(cls, arms: dict) -> list[str]:
        ns = [b["n_rollouts"] for b in arms.get("batches", [])]
        return [f"rl.arms.schedule[{i}]: N = {n} has no entry in rl.arms.batches (the schedule's stages take the "
                "batch geometry of the n<N> arm) [rule: schedule N in batches]"
                for i, n in enumerate(arms.get("schedule", [])) if n not in ns]


ARM_KINDS: tuple[type[Arm], ...] = (BatchArm, ScheduleArm)
"""Every arm kind, in the order :func:`arm_plan` lists their arms. A new kind: its class here and its keys under
``rl.arms`` in the schema."""


def arm_name(n_rollouts: int) -> str:
    return f"n{n_rollouts}"


def arm_from_stages(name: str, n_rollouts) -> Arm:
    """An arm read back from its results (a summary's or an MLflow run's per-stage N, never its name): one stage is
    a batch arm, several the chained schedule."""
    ns = tuple(int(n) for n in n_rollouts)
    return BatchArm(name, ns) if len(ns) == 1 else ScheduleArm(name, ns)


def prorl_settings(rl: dict) -> dict:
    """Settings of the ProRL saturation stage (recipe + ``rl.prorl``)."""
    return {**rl.get("recipe", {}), **rl.get("prorl", {})}


def arm_plan(rl: dict, prorl: bool = False) -> dict[str, Arm]:
    """Every arm of ``rl.arms`` (each kind of :data:`ARM_KINDS` builds its own), with its stage settings (seed
    left out); ``prorl``: with the ProRL stage as the arm ``prorl`` where ``rl`` has one (what `brorl train-arm`
    may run)."""
    arms = rl.get("arms", {})
    base = {**rl.get("recipe", {}), **arms.get("settings", {})}
    budget = arms.get("sample_budget", 0)
    start = [stages_arm("prorl", [prorl_settings(rl)], per_seed=False)] if prorl and "prorl" in rl else []
    return {arm.name: arm for arm in start + [arm for kind in ARM_KINDS for arm in kind.from_rl(rl, base, budget)]}


def stages_arm(name: str, stages: list[dict], per_seed: bool = True) -> Arm:
    """An arm of given stage settings (the ProRL stage; a study arm's ``--config``), read as its N per stage says:
    one stage a batch arm, several the chained kind (:func:`arm_from_stages`)."""
    arm = arm_from_stages(name, [RLSettings.from_dict(stage).n_rollouts for stage in stages])
    return type(arm)(arm.name, arm.n_rollouts, tuple(stages), per_seed)


def plan(rl: dict, seed: int | None = None) -> dict[str, list[dict]]:
    """``{arm: [stage settings, ...]}`` for one seed (``seed=None``: the seed key is left out)."""
    return {name: arm.stages_for(seed) for name, arm in arm_plan(rl).items()}


def stage_config(rl: dict, arm: str) -> dict:
    """The part of ``rl`` one arm (or ``"prorl"``) depends on (:meth:`Arm.config_slice`): a rule's params hold
    this, not the whole ``rl`` section."""
    if arm == "prorl":
        return {"recipe": rl.get("recipe", {}), "prorl": rl.get("prorl", {})}
    the_arm = arm_plan(rl).get(arm)
    return the_arm.config_slice(rl) if the_arm is not None else Arm(arm, ()).config_slice(rl)


def plan_errors(rl: dict, prorl_stage: bool) -> list[str]:
    """Every invalid stage of the plan, naming the config key that causes it (for config validation);
    ``prorl_stage``: the profile trains its start (profile.start: trained), so ``rl.prorl`` is a stage."""
    errors = []
    arms = rl.get("arms", {})

    def origin(key: str, stage: dict, where: str) -> str:
        if key == "sample_budget" and where != "rl.prorl":
            return "rl.arms.sample_budget"
        if where == "rl.prorl" and key in rl.get("prorl", {}):
            return f"rl.prorl.{key}"
        for i, b in enumerate(arms.get("batches", [])):
            if where != "rl.prorl" and key in b and b["n_rollouts"] == stage.get("n_rollouts"):
                return f"rl.arms.batches[{i}].{key}"
        if where != "rl.prorl" and key in arms.get("settings", {}):
            return f"rl.arms.settings.{key}"
        return f"rl.recipe.{key}"

    def check(stage: dict, where: str):
        try:
            RLSettings.from_dict(stage)
        except (TypeError, ValueError) as err:
            msg = str(err)
            key = msg.split(":", 1)[0]
            if key.startswith("unknown "):
                errors.append(f"{where}: {msg} [rule: RLSettings fields]")
            else:
                errors.append(f"{origin(key, stage, where)}: {msg.split(':', 1)[1].strip()} (in {where})"
                              f" [rule: RLSettings]")

    if prorl_stage:
        check(prorl_settings(rl), "rl.prorl")
    for kind in ARM_KINDS:
        errors += kind.errors(arms)
    if not errors:
        for arm, stages in plan(rl).items():
            for k, stage in enumerate(stages):
                check(stage, f"arm {arm}" + (f" stage {k}" if len(stages) > 1 else ""))
    return list(dict.fromkeys(errors))


def start_errors(config: dict, profile) -> list[str]:
    """The config check (brorl.pipeline.config_errors) of where the arms start, as ``profile.start`` declares: the
    ProRL stage trained here (``rl.prorl``, from the SFT model on the tiny tasks) or a fetched checkpoint named by
    ``rl.start_model``."""
    rl, errors = config["rl"], []
    fetch = config.get("checkpoints", {}).get("fetch") or {}
    start = rl.get("start_model")
    if profile.trains_start:
        if start is not None:
            errors.append("rl.start_model: the arms start from the ProRL stage (profile.start: trained); set "
                          "profile.start: fetched to start from a fetched checkpoint [rule: one start model]")
        if rl.get("prorl") is None:
            errors.append("rl.prorl: required by profile.start: trained (the ProRL stage the arms start from) "
                          "[rule: one start model]")
        if "prorl" in fetch:
            errors.append("checkpoints.fetch.prorl: resources/<root>/models/prorl is the ProRL stage's output "
                          "(profile.start: trained); fetch the hub checkpoint under another name [rule: one writer per folder]")
    else:
        if rl.get("prorl") is not None:
            errors.append("rl.prorl: the ProRL stage runs only with profile.start: trained; the arms start from "
                          "rl.start_model [rule: one start model]")
        if start is None:
            errors.append("rl.start_model: required without rl.prorl (profile.start: fetched): name the fetched checkpoint "
                          "(checkpoints.fetch) the arms start from [rule: one start model]")
        elif start not in fetch:
            errors.append(f"rl.start_model: {start!r} is not a fetched checkpoint (checkpoints.fetch: "
                          f"{', '.join(fetch) or 'none'}) [rule: start model is fetched]")
    return errors


# --------------------------------------------------------------------------------------- running an arm

def _copy_folder(src: Path, dst: Path) -> None:
    """Copy an HF folder to ``dst`` atomically (temporary sibling, then rename)."""
    with atomic_dir(dst) as tmp:
        shutil.copytree(src, tmp, dirs_exist_ok=True)


def _write_rows(path: Path, rows: list[dict], columns) -> None:
    with atomic_open(path, newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        w.writerows({k: ("" if r.get(k) is None else r[k]) for k in columns} for r in rows)


def folder_digest(folder: Path) -> str:
    """sha256 over a folder's files (relative paths and bytes), in path order."""
    h = hashlib.sha256()
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        h.update(str(path.relative_to(folder)).encode() + b"\0")
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def stage_tag(s: RLSettings, init_model_dir: Path) -> str:
    """Names a stage's work folder by what determines its run: the settings that shape the policy and the
    *content* of the model it starts from. A changed config or a retrained start model (same path, new
    weights) gets a fresh folder instead of resuming, or returning, a run that belongs to the old one; the
    same job killed and rerun finds its folder again."""
    from brorl.training.stage import _settings_key

    key = _settings_key(s) + folder_digest(init_model_dir)
    return hashlib.sha256(key.encode()).hexdigest()[:10]


def _mean(x: np.ndarray) -> float:
    """Mean, NaN for no values (paper data has no exact probes) without numpy's empty-slice warning."""
    return float(x.mean()) if x.size else math.nan


# `brorl train-arm` and `brorl study-arm`: one arm inside the rule's MLflow run.

CURVES = ("reward_mean", "dynamic_sampling_pass_rate", "generated_samples", "kept_prompts", "generation_samples_per_s",
          "training_tokens_per_s", "entropy", "kl", "clip_ratio_low", "clip_ratio_high", "response_length_mean",
          "wall_time_s", "arm_generated_samples", "learning_rate", "loss", "grad_norm")
"""metrics.csv columns logged as per-step curves (step = arm step)."""
PROBES = ("probe_q_pos_mean", "probe_q_pos_tail_mean", "probe_q_pos_zero_fraction", "probe_frac_correct_improved",
          "probe_worst_correct_delta")
"""metrics.csv columns logged at the arm steps where the probe ran."""


def run_arm(arm: Arm, init_model_dir: str | Path, data_dir: str | Path, work_dir: str | Path,
            model_out: str | Path, results_out: str | Path, *, seed: int = 0, source: str = "tasks",
            open_run=None, after=None, progress: bool = True) -> dict | None:
    """`brorl train-arm` and `brorl study-arm`: the stages of one arm and seed (resumable), chained, and the arm's
    outputs; returns the arm summary. ``arm.settings(seed)`` gives each stage's RLSettings, and each stage is a
    :func:`brorl.training.stage.train_stage`. ``source``: the data source kind (brorl.profile.sources(); the
    declared profile.data).

    With ``open_run(params)`` (brorl.tracking.rule_run; params: every stage's settings as ``stage<k>.<key>``) it runs
    inside the rule's MLflow run, whose id goes to ``<results>/mlflow_run_id``; the curves, probes and summary
    (``final/...``), metrics.csv and summary.json are logged, and ``after(summary)`` runs in the same run (more
    metrics for it). Under `brorl launch` the other processes (``RANK`` > 0) only train, quietly, and return None:
    one MLflow run, from the main process."""
    import torch
    from accelerate import PartialState

    from brorl.training.stage import METRIC_COLUMNS, TAIL_HI, TAIL_LO, read_metrics, train_stage

    stages, settings = arm.stages_for(seed), arm.settings(seed)
    other_rank = open_run is not None and int(os.environ.get("RANK", "0")) != 0
    progress = progress and not other_rank
    params = {f"stage{k}.{key}": value for k, st in enumerate(stages) for key, value in st.items()}
    with open_run(params) if open_run is not None and not other_rank else contextlib.nullcontext() as run:
        work, results = Path(work_dir), Path(results_out)
        results.mkdir(parents=True, exist_ok=True)
        if run is not None:
            write_text(results / "mlflow_run_id", run.info.run_id + "\n")
        init = Path(init_model_dir)
        rows, summaries, folders = [], [], []
        step0 = samples0 = wall0 = 0.0
        for k, s in enumerate(settings):
            out = work / f"stage{k}-n{s.n_rollouts}-{stage_tag(s, init)}"
            folders.append(out)
            if progress:
                print(f"[arm {arm.name} seed {seed}] stage {k + 1}/{len(settings)}: N={s.n_rollouts} x "
                      f"{s.prompts_per_step} prompts/step from {init}", flush=True)
            summary = train_stage(init, data_dir, out, s, progress=progress, source=source)
            summaries.append(summary)
            for r in read_metrics(out):
                rows.append({**r, "arm": arm.name, "seed": seed, "stage": k, "stage_n_rollouts": s.n_rollouts,
                             "arm_step": step0 + r["step"],
                             "arm_generated_samples": samples0 + r["generated_samples_total"],
                             "arm_wall_time_s": wall0 + r["wall_time_s"]})
            step0 += summary["steps"]
            samples0 += summary["generated_samples"]
            wall0 += summary["wall_time_s"]
            init = out / "model"

        first, last = folders[0], folders[-1]
        z0, z1 = np.load(first / "probe_baseline.npz"), np.load(last / "probe_end.npz")
        q_start, q_end = z0["q_pos"], z1["q_pos"]
        tail = (q_start > TAIL_LO) & (q_start < TAIL_HI)
        dist = PartialState(cpu=not torch.cuda.is_available())  # the stage's state: one process or brorl launch's
        main = dist.is_main_process  # several processes: the main one writes
        if main:
            with atomic_path(results / "probe.npz") as tmp:
                np.savez(tmp, q_start=q_start, q_end=q_end, ids=z1["ids"])
            _write_rows(results / "metrics.csv", rows, ARM_COLUMNS + METRIC_COLUMNS)

        gen_s = sum(r["generation_seconds"] or 0.0 for r in rows)
        generated = sum(r["generated_samples"] or 0.0 for r in rows)
        kept_groups = sum(r["kept_prompts"] or 0.0 for r in rows)
        n_of = [r["stage_n_rollouts"] for r in rows]
        generated_groups = sum((r["generated_samples"] or 0.0) / n for r, n in zip(rows, n_of))
        end = summaries[-1]["probe_end"]
        summary = {
            "arm": arm.name, "seed": seed, "stages": len(settings),
            "n_rollouts": [s.n_rollouts for s in settings],
            "prompts_per_step": [s.prompts_per_step for s in settings],
            "steps": int(step0), "generated_samples": int(samples0),
            "sample_budget": int(sum(s.sample_budget for s in settings)),
            "kept_samples": int(sum(r["kept_samples"] or 0.0 for r in rows)),
            "wall_time_s": wall0, "generation_seconds": gen_s,
            "generation_samples_per_s": generated / gen_s if gen_s else math.nan,
            "dynamic_sampling_pass_rate": kept_groups / generated_groups if generated_groups else math.nan,
            "validation_pass1_start": _mean(q_start), "validation_pass1_end": _mean(q_end),
            "tail_prompts": int(tail.sum()),
            "q_pos_tail_start": float(q_start[tail].mean()) if tail.any() else math.nan,
            "q_pos_tail_end": float(q_end[tail].mean()) if tail.any() else math.nan,
            "zero_fraction_end": _mean(q_end <= TAIL_LO),
            "multi_frac_correct_improved": end.get("probe_frac_correct_improved"),
            "multi_worst_correct_delta": end.get("probe_worst_correct_delta"),
            "peak_rss_mb": max((x.get("peak_rss_mb") or 0.0) for x in summaries),
            "peak_cuda_mb": max((x.get("peak_cuda_mb") or 0.0) for x in summaries) or None,
            "stopped": [x["stopped"] for x in summaries], "plateau_step": summaries[-1].get("plateau_step"),
            "stage_summaries": summaries,
        }
        if main:
            _copy_folder(init, Path(model_out))
            write_text(results / "summary.json", json.dumps(summary, indent=1, default=float) + "\n")
        dist.wait_for_everyone()  # the outputs exist before any process returns
        if progress:
            print(f"[arm {arm.name} seed {seed}] done: validation pass@1 "
                  f"{summary['validation_pass1_start']:.4f} -> "
                  f"{summary['validation_pass1_end']:.4f}, {summary['generated_samples']} samples, "
                  f"{summary['wall_time_s']:.0f}s", flush=True)
        if run is not None:
            _log_arm_run(run, results, summary)
            if after is not None:
                after(summary)
    return None if other_rank else summary


def _log_arm_run(run, results: Path, summary: dict) -> None:
    """An arm's curves, probes and summary (``final/...``), metrics.csv and summary.json, in its MLflow run."""
    import mlflow

    from brorl.tracking import log_curves, numeric_metrics
    from brorl.training.stage import read_metrics

    rows = read_metrics(results)
    log_curves({key: [r[key] if r[key] is not None else float("nan") for r in rows] for key in CURVES}, step_offset=1)
    client, run_id = mlflow.MlflowClient(), run.info.run_id
    for key in PROBES:
        for r in rows:
            if r[key] is not None:
                client.log_metric(run_id, key, r[key], step=int(r["arm_step"]))
    mlflow.log_metrics(numeric_metrics({k: v for k, v in summary.items() if k != "stage_summaries"}, "final/"))
    for name in ("metrics.csv", "summary.json"):
        mlflow.log_artifact(str(results / name))
