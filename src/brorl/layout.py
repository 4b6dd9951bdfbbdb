"""Where a run's outputs live: each profile (and each overlay that changes params) under its own root (issue 32).

A run writes under ``results/<root>/``, ``resources/<root>/`` and ``logs/<root>/``, with its ``.dvc`` files beside
the folders they track (``results/<root>/theory.dvc``). The root is derived from what the config declares, never
from which keys or files exist::

    profile: {name: tiny, ...}                                   root tiny
    profile: {overlay: strong, reuses: [theory, start]}          root tiny-strong (an overlay, after its base)

An overlay names the stage groups (:data:`GROUPS`) it takes from its base's root (``reuses``); every other group
runs and writes under its own root. A reused group must be the base's exactly: :func:`reuse_errors` refuses an
overlay that changes a key a reused group reads (its jobs would rerun into the base's root and replace the base's
outputs). The tables read the runs of each group's root only (``root`` tag, :func:`run_root`).

A checkout with the old layout (``results/theory``, ``results/train``, ... at the top, before 2026-12-06) is refused
before any job (:func:`old_layout_paths`) until ``brorl migrate-layout --configfile FILE...`` moves it
(:func:`migrate`).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

GROUPS = ("theory", "start", "arms", "study")
"""Stage groups an overlay may reuse from its base: ``theory`` (the Figure-3 simulation and sweep), ``start``
(everything upstream of the arms: data, tasks, SFT, difficulty, the ProRL stage or fetched checkpoints, training
and benchmark data, the throughput study), ``arms`` (the arms, their summary, evaluations, paper tables and
figures), ``study`` (the N-scaling study)."""
NEEDS = {"arms": ("start",), "study": ("start",)}
"""A reused group reads these groups' outputs: reusing it means reusing them too."""
NAME = re.compile(r"^[a-z0-9_]+$")
OLD_TOP = {"results": ("theory", "data", "train", "eval", "tables", "figures", "study"),
           "resources": ("models", "checkpoints", "study", "work", "eval-cache", "data", "gated")}
"""The top-level output folders of the layout before issue 32 (no profile root); no root may take these names."""
RESERVED = frozenset(name for names in OLD_TOP.values() for name in names)

_RULE_GROUPS = {
    "theory_simulation": "theory", "theory_figure3": "theory", "theory_extended_sweep": "theory",
    "fetch_checkpoint": "start", "paper_data_blend": "start", "rg_difficulty": "start", "tiny_tasks": "start",
    "sft": "start", "difficulty": "start", "train_data": "start", "prorl_stage": "start",
    "benchmark_data": "start", "throughput_study": "start",
    "train_arm": "arms", "train_summary": "arms", "evaluate": "arms",
}


def rule_group(rule: str) -> str:
    """The stage group of a rule (``paper_*``: arms, ``study_*``: study)."""
    if rule in _RULE_GROUPS:
        return _RULE_GROUPS[rule]
    if rule.startswith("paper_"):
        return "arms"
    if rule.startswith("study_"):
        return "study"
    raise KeyError(f"rule {rule!r} has no stage group (brorl.layout._RULE_GROUPS)")


@dataclass(frozen=True)
class Layout:
    """The roots of one run: its own (``name`` or ``name-overlay``) and its base's (``name``) for reused groups."""

    name: str
    overlay: str | None = None
    reuses: tuple[str, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "reuses", tuple(self.reuses))
        for err in layout_errors(self.name, self.overlay, self.reuses):
            raise ValueError(err)

    @property
    def root(self) -> str:
        """This run's own root: ``results/<root>/``, ``resources/<root>/``, ``logs/<root>/``."""
        return f"{self.name}-{self.overlay}" if self.overlay else self.name

    def root_of(self, group: str) -> str:
        if group not in GROUPS:
            raise KeyError(f"no stage group {group!r} (brorl.layout.GROUPS)")
        return self.name if group in self.reuses else self.root

    def results(self, group: str, *parts: str) -> str:
        return "/".join(("results", self.root_of(group), *parts))

    def resources(self, group: str, *parts: str) -> str:
        return "/".join(("resources", self.root_of(group), *parts))

    def logs(self, group: str, *parts: str) -> str:
        return "/".join(("logs", self.root_of(group), *parts))

    def path(self, group: str, path: str) -> str:
        """``results/x/y`` (or ``resources/...``, ``logs/...``) under the group's root: ``results/<root>/x/y``."""
        top, _, rest = path.partition("/")
        if top not in ("results", "resources", "logs") or not rest:
            raise ValueError(f"{path!r}: not under results/, resources/ or logs/")
        return f"{top}/{self.root_of(group)}/{rest}"

    def owns(self, group: str) -> bool:
        """The group runs under this run's own root (not reused from the base)."""
        return group not in self.reuses

    def run_root(self, rule: str) -> str:
        """The root a rule's outputs (and its MLflow run's ``root`` tag) belong to."""
        return self.root_of(rule_group(rule))


def layout_errors(name, overlay=None, reuses=()) -> list[str]:
    """What is wrong with a profile block's roots (names, ``reuses``), as config errors."""
    errors = []
    for key, value in (("name", name), ("overlay", overlay)):
        if value is not None and not (isinstance(value, str) and NAME.match(value)):
            errors.append(f"profile.{key}: {value!r} is not a root name (lower-case letters, digits, _) "
                          "[rule: profile roots]")
    if name in RESERVED:
        errors.append(f"profile.name: {name!r} is a top-level output folder of the old layout "
                      f"({', '.join(sorted(RESERVED))}) [rule: profile roots]")
    for group in reuses or ():
        if group not in GROUPS:
            errors.append(f"profile.reuses: {group!r} is not one of {', '.join(GROUPS)} [rule: profile roots]")
        for need in NEEDS.get(group, ()):
            if need not in reuses:
                errors.append(f"profile.reuses: {group} reads the {need} group's outputs: reuse {need} too "
                              "[rule: profile roots]")
    if reuses and not overlay:
        errors.append("profile.reuses: only an overlay (profile.overlay) reuses its base's stages "
                      "[rule: profile roots]")
    return errors


def group_projection(group: str, config: dict, prorl_stage) -> dict:
    """What a group's jobs read from the config: two configs with equal projections plan the group's jobs alike.
    ``prorl_stage(rl, "prorl")``: the ProRL stage's settings as the stage reads them (brorl.training.arms.stage_config,
    given by brorl.pipeline: this module imports nothing above it)."""
    rl = config.get("rl") or {}
    profile = config.get("profile") or {}
    switches = config.get("stages") or {}  # the stage switches a group's jobs follow (brorl.pipeline.STAGES)
    if group == "theory":
        return {"theory": config.get("theory")}
    if group == "start":
        prorl = None
        if rl.get("prorl") is not None and profile.get("start", "trained") == "trained":
            prorl = prorl_stage(rl, "prorl")
        evaluation = config.get("evaluation") or {}
        return {**{k: config.get(k) for k in ("tasks", "sft", "difficulty", "checkpoints", "rg_difficulty",
                                              "throughput")},
                "profile": {k: profile.get(k) for k in ("name", "start", "data", "pins")},
                "rl.data": rl.get("data"), "rl.start_model": rl.get("start_model"), "rl": prorl,  # rl: as the ProRL stage reads it
                "evaluation": {k: evaluation.get(k) for k in ("revisions", "reasoning_gym", "share_gated")},
                "stages": {k: switches.get(k) for k in ("train", "evaluation", "throughput", "rg_difficulty")}}
    if group == "arms":
        return {**group_projection("start", config, prorl_stage), "rl": rl, "evaluation": config.get("evaluation")}
    if group == "study":
        return {**group_projection("arms", config, prorl_stage), "study": config.get("study"), "stages": switches}
    raise KeyError(group)


def _diff(a, b, path=""):
    """The first key path where two projections differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if (found := _diff(a.get(key), b.get(key), f"{path}.{key}" if path else str(key))) is not None:
                return found
        return None
    return None if a == b else path


def base_files(files) -> list:
    """The config files of the base: those before the first that declares ``profile.overlay``."""
    out = []
    for f in files:
        if "overlay" in (f.data.get("profile") or {}):
            break
        out.append(f)
    return out


def reuse_errors(base: dict, config: dict, layout: Layout, prorl_stage) -> list[str]:
    """An overlay may reuse a group only if it leaves every key that group reads as the base has it
    (``prorl_stage``: :func:`group_projection`)."""
    errors = []
    for group in layout.reuses:
        where = _diff(group_projection(group, base, prorl_stage), group_projection(group, config, prorl_stage))
        if where is not None:
            errors.append(f"profile.reuses: {group}: the overlay changes {where}, which the {group} stages read; "
                          f"reused, they would rerun into the base's root results/{layout.name}/ and replace its "
                          f"outputs: leave {where} as in the base, or drop {group} from profile.reuses (it then runs "
                          f"under results/{layout.root}/) [rule: a reused stage is the base's]")
    return errors


def old_layout_paths(project: str | Path = ".") -> list[str]:
    """Outputs of the layout before issue 32 in this checkout (``results/theory`` ...; their ``.dvc`` files)."""
    project = Path(project)
    found = []
    for top, names in OLD_TOP.items():
        for name in names:
            for path in (project / top / name, project / top / f"{name}.dvc"):
                if path.exists():
                    found.append(path.relative_to(project).as_posix())
    return found


def old_layout_message(paths: list[str], configfiles=()) -> str:
    files = " ".join(str(f) for f in configfiles) or "config/config.yaml"
    return (f"this checkout has outputs in the old layout (before per-profile roots, issue 32): {', '.join(paths)}. "
            "Nothing was run or changed. Move them under the root of the config that wrote them: "
            f"`brorl migrate-layout --configfile {files} --dry-run` to see the moves, then without --dry-run "
            "(docs/profiles.md, \"Output roots\"); or move them away yourself")


def migration_moves(layout: Layout, project: str | Path = ".") -> list[tuple[str, str]]:
    """(old, new) paths, relative to the project: every old top-level output folder and its ``.dvc`` file into the
    root of the group that writes it under ``layout``; old logs into ``logs/<root>/``."""
    project = Path(project)
    group_of = {("results", "theory"): "theory", ("results", "data"): "start", ("resources", "models"): "start",
                ("resources", "data"): "start", ("resources", "gated"): "start", ("results", "train"): "arms",
                ("results", "eval"): "arms", ("results", "tables"): "arms", ("results", "figures"): "arms",
                ("resources", "checkpoints"): "arms", ("resources", "eval-cache"): "arms",
                ("resources", "work"): "arms", ("results", "study"): "study", ("resources", "study"): "study"}
    moves = []
    for (top, name), group in group_of.items():
        for suffix in ("", ".dvc"):
            old = Path(top) / f"{name}{suffix}"
            if not (project / old).exists():
                continue
            if (top, name, suffix) in (("results", "train", ""), ("resources", "work", "")):
                # split: the ProRL stage's results and work folder are the start group's, the study's work the
                # study group's, the arms' the arms group's (they may live under different roots)
                for child in sorted((project / old).iterdir()):
                    sub = {"prorl": "start", "study": "study"}.get(child.name, group)
                    moves.append((f"{old.as_posix()}/{child.name}", f"{top}/{layout.root_of(sub)}/{name}/{child.name}"))
                continue
            moves.append((old.as_posix(), f"{top}/{layout.root_of(group)}/{name}{suffix}"))
    logs = project / "logs"
    if logs.is_dir():  # logs/<stage>/... and logs/benchmarks/<rule>/... into their group's logs/<root>/
        roots = {layout.name, layout.root}
        by_folder = {"theory": "theory", "data": "start", "models": "start", "fetch": "start", "train": "arms",
                     "eval": "arms", "tables": "arms", "study": "study", "results": "start", "resources": "start"}
        for entry in sorted(logs.iterdir()):
            if entry.name in roots:
                continue
            if entry.name == "benchmarks" and entry.is_dir():
                for child in sorted(entry.iterdir()):
                    try:
                        group = rule_group(child.name.removesuffix(".tsv"))
                    except KeyError:
                        group = "arms"
                    moves.append((f"logs/benchmarks/{child.name}", f"logs/{layout.root_of(group)}/benchmarks/{child.name}"))
            elif entry.name == "train" and entry.is_dir() and (entry / "prorl.log").exists():
                for child in sorted(entry.iterdir()):
                    group = "start" if child.name == "prorl.log" else "arms"
                    moves.append((f"logs/train/{child.name}", f"logs/{layout.root_of(group)}/train/{child.name}"))
            else:
                group = by_folder.get(entry.name, "arms")
                moves.append((f"logs/{entry.name}", f"logs/{layout.root_of(group)}/{entry.name}"))
    return moves


def migrate(layout: Layout, project: str | Path = ".", *, dry_run: bool = False) -> list[tuple[str, str]]:
    """Move the old layout's outputs under ``layout``'s roots (refusing to replace anything), with their ``.dvc``
    files (whose ``path:`` is relative to the file, so they stay valid beside their folder). Returns the moves.
    ``brorl migrate-layout`` (brorl.tracking.run_migrate_layout) then tags the profile's MLflow runs."""
    project = Path(project)
    moves = migration_moves(layout, project)
    clashes = [new for _, new in moves if (project / new).exists()]
    if clashes:
        raise SystemExit(f"migrate-layout: {', '.join(clashes)} already exist(s); nothing was moved. Move them "
                         "away first (they belong to a run in the new layout)")
    for old, new in moves:
        print(f"{'would move' if dry_run else 'move'} {old} -> {new}")
        if not dry_run:
            (project / new).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(project / old), str(project / new))
    for top in ("results/train", "resources/work", "logs/benchmarks", "logs/train"):  # emptied: children moved one by one
        path = project / top
        if not dry_run and path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    return moves


def dvc_folders(root: str, outputs, fetched=(), models=(), manifests=()) -> dict[str, list[str]]:
    """The DVC-tracked folders of one run (rule dvc_track) and the outputs each stands for, in the root ``root`` only
    (the groups an overlay reuses are its base's, tracked by the base's own run): each output under its
    ``results/<root>/<folder>``; a fetched model folder by its manifest; a model trained here and a fetch manifest
    each as its own entry."""
    folders: dict[str, list[str]] = {}

    def track(folder: str, paths: list[str]) -> None:
        if folder.split("/")[1] == root:
            folders.setdefault(folder, []).extend(paths)

    for path in outputs:
        track("/".join(path.split("/")[:3]), [path])  # results/<root>/<folder>
    for folder in fetched:
        track(folder, [f"{folder}.manifest.json"])
    for folder in models:
        track(folder, [folder])
    for manifest in manifests:
        track(manifest, [manifest])
    return folders
