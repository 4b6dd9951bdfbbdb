"""BroRL Figures 1 and 4 and the pass@k curves, drawn from the MLflow store beside the paper's numbers.

- ``figure1``: the paper's math score against hours (its Table 1 points; the figure itself gives no numbers),
  then ours: the arms' validation pass@1 (the exact probe, ``probe_q_pos_mean``) against training hours and
  against generated samples, one line per arm and seed.
- ``figure4``: per-task pass@1 against training hours: lines from the training probes where a task has one
  (a tiny family drawn alone for its kind: a single-answer family <- ``probe_q_pos_mean``, a probe family
  <- ``probe_multi_q_pos_mean``; :func:`tiny_probe`, from :data:`brorl.tasks.FAMILIES`),
  markers from the evaluate runs (test split: the ProRL checkpoint at 0 h, each arm at its final hours).
  In the paper profile the tasks are the paper's Figure 4 tasks (a benchmark's ``mean_at_k`` or a
  ``category/<task>/mean_at_k``).
- ``passk``: pass@k against k (powers of two up to the largest k sampled) per benchmark, one line per model,
  mean ± sd over seeds.

A series the plan expects but the store lacks is listed under the figure ("missing: ...") and in the result.
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

from brorl.tables.build import Builder, Subject
from brorl.tables.plan import Plan
from brorl.tasks.families import FAMILIES, family_of_benchmark, tiny_benchmarks
from brorl.tables.reference import load_reference
from brorl.tables.store import RunStore
from brorl.atomic import atomic_open, save_figure

FIGURES = ("figure1", "figure4", "passk")
PROBES = {False: "probe_q_pos_mean", True: "probe_multi_q_pos_mean"}
"""The training probe of a family kind (``Family.probe``): the mean over every validation prompt of that kind."""


def tiny_probe(task: str, tasks) -> str | None:
    """The training probe drawn as ``task``'s line in figure 4: its family's kind's probe (:data:`PROBES`), when no
    other of the drawn ``tasks`` has a family of the same kind (the probe averages over the kind's families)."""
    family = family_of_benchmark(task)
    if family is None:
        return None
    kind = FAMILIES[family].probe
    same = [t for t in tasks if (f := family_of_benchmark(t)) is not None and FAMILIES[f].probe == kind]
    return PROBES[kind] if same == [task] else None


def __getattr__(name: str):
    if name == "TINY_PROBES":  # the registry's view now: {tiny benchmark: its probe}
        tasks = tiny_benchmarks()
        return {t: p for t in tasks if (p := tiny_probe(t, tasks))}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _grid(n: int, width: float = 4.6, height: float = 3.6):
    plt = _plt()
    ncols = min(3, max(n, 1))
    nrows = math.ceil(max(n, 1) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows + 0.6), squeeze=False)
    axes = [a for row in axes for a in row]
    for ax in axes[n:]:
        ax.axis("off")
    return plt, fig, axes[:max(n, 1)]


def _footer(fig, gaps: list[str]) -> None:
    if gaps:
        shown = gaps[:6] + ([f"... and {len(gaps) - 6} more"] if len(gaps) > 6 else [])
        fig.text(0.01, 0.005, "Gaps: " + " | ".join(shown), fontsize=6.5, va="bottom", wrap=True)


class FigureBuilder:
    def __init__(self, store: RunStore, plan: Plan):
        self.store, self.plan, self.ref = store, plan, load_reference()
        self.tables = Builder(store, plan)
        self.points: list[dict] = []
        self.gaps: list[str] = []
        self.run_ids: list[str] = []
        self.metrics: dict[str, float] = {}

    def _point(self, figure, panel, series, x, y, run_id=""):
        self.points.append({"figure": figure, "panel": panel, "series": series, "x": x, "y": y, "run_id": run_id})
        if run_id and run_id not in self.run_ids:
            self.run_ids.append(run_id)

    def color(self, s: Subject) -> str:
        """One colour per model across figures: the ProRL checkpoint black, arms C0, C1, ... in plan order."""
        if s.kind == "prorl":
            return "k"
        keys = [*(a.name for a in self.plan.arms), *self.plan.extra_models]
        return f"C{keys.index(s.key) % 10}" if s.key in keys else "C9"

    def arms(self) -> list[Subject]:
        return [s for s in self.tables.subjects(trained_only=True) if s.kind == "arm"]

    def _arm_curves(self, s: Subject):
        """[(seed, run, curve frame)] of an arm; missing seeds go to the gaps."""
        out = []
        for seed in s.seeds:
            run = self.store.arm(s.key, seed)
            if run is None:
                self.gaps.append(self.store.arm_missing(s.key, seed))
                continue
            out.append((seed, run, self.store.curve(run)))
        return out

    # ------------------------------------------------------------------ Figure 1
    def figure1(self, out_png) -> None:
        plt, fig, (ax0, ax1, ax2) = _grid(3)
        t1 = {r["row"]: r for r in self.ref["table1"]["rows"]}
        base = t1["Baseline (ProRLv2)"]
        for method, color in (("ProRL", "C0"), ("BroRL", "C3")):
            pts = [(0.0, base["math"])] + [(r["hours"], r["math"]) for r in t1.values() if r["method"] == method]
            ax0.plot(*zip(*pts), "o-", color=color, label=f"{method} (N={16 if method == 'ProRL' else 512})")
            for x, y in pts:
                self._point("figure1", "paper", method, x, y)
        ax0.set(title="paper: BroRL Table 1 math vs hours", xlabel="training hours after the 3k checkpoint",
                ylabel="math pass@1 (%)")
        ax0.legend(fontsize=8)
        for s in self.arms():
            finals = []
            for k, (seed, run, m) in enumerate(self._arm_curves(s)):
                col = "probe_q_pos_mean"
                if col not in m.columns:
                    self.gaps.append(f"missing: no probe_q_pos_mean in train_arm run {run.run_id} ({s.key} seed {seed})")
                    continue
                m = m.dropna(subset=[col])
                xs_h, xs_s, ys = list(m["hours"]), list(m["samples"]), [100 * v for v in m[col]]
                start = run.metric("final/validation_pass1_start")
                if start is not None:
                    xs_h, xs_s, ys = [0.0] + xs_h, [0.0] + xs_s, [100 * start] + ys
                label = s.key if k == 0 else None
                ax1.plot(xs_h, ys, ".-", color=self.color(s), alpha=0.85, label=label)
                ax2.plot(xs_s, ys, ".-", color=self.color(s), alpha=0.85, label=label)
                for xh, xsm, y in zip(xs_h, xs_s, ys):
                    self._point("figure1", "ours_hours", f"{s.key}/seed{seed}", xh, y, run.run_id)
                    self._point("figure1", "ours_samples", f"{s.key}/seed{seed}", xsm, y, run.run_id)
                if ys:
                    finals.append(ys[-1])
            if finals:
                self.metrics[f"figure1/{s.key}/final_validation_pass1"] = sum(finals) / len(finals)
        prof = self.plan.profile
        ax1.set(title=f"ours ({prof}): validation pass@1 vs hours", xlabel="training hours (arm)",
                ylabel="exact validation pass@1 (%)")
        ax2.set(title=f"ours ({prof}): validation pass@1 vs samples", xlabel="generated samples (arm)",
                ylabel="exact validation pass@1 (%)")
        for ax in (ax1, ax2):
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
            else:
                ax.text(0.5, 0.5, "no FINISHED train_arm runs", ha="center", transform=ax.transAxes)
        fig.suptitle("Figure 1: score against training hours and samples (paper beside ours)")
        _footer(fig, self.gaps)
        fig.tight_layout(rect=(0, 0.04 if self.gaps else 0, 1, 1))
        save_figure(fig, out_png, dpi=110)
        plt.close(fig)

    # ------------------------------------------------------------------ Figure 4
    def _task_score(self, model: str, task: str):
        """(pass@1 in %, run id) of ``task`` for ``model`` or (None, gap reason)."""
        if task in self.plan.benchmarks:
            v, what, rid = self.tables.score(model, task)
            return (v, rid) if v is not None else (None, what)
        key = f"category/{task}/mean_at_k"
        for b in self.plan.benchmarks:
            run = self.store.evaluation(model, b)
            if run is not None and run.metric(key) is not None:
                return 100 * run.metric(key), run.run_id
        return None, f"missing: no FINISHED evaluate run of model {model} with {task}"

    def figure4(self, out_png) -> None:
        tiny = self.plan.data == "tasks"  # the tiny tasks' families, else the paper's Figure 4 tasks
        if tiny:
            tasks = [t for t in tiny_benchmarks() if t in self.plan.benchmarks] or list(tiny_benchmarks())
        else:
            tasks = [t for group in self.ref["figure4"]["patterns"].values() for t in group]
        plt, fig, axes = _grid(len(tasks))
        arms = self.arms()
        curves = {s.key: self._arm_curves(s) for s in arms}
        start, start_id = {}, {}
        for task in tasks:
            v, rid = self._task_score(self.plan.start_model, task)
            if v is None:
                self.gaps.append(rid)
            else:
                start[task], start_id[task] = v, rid
        for ax, task in zip(axes, tasks):
            drawn = False
            probe = tiny_probe(task, tasks) if tiny else None
            if task in start:
                ax.plot([0.0], [start[task]], "k*", ms=10, label="ProRL checkpoint (test)")
                self._point("figure4", task, "prorl/test", 0.0, start[task], start_id[task])
                drawn = True
            for s in arms:
                runs = {seed: (run, m) for seed, run, m in curves[s.key]}
                for k, seed in enumerate(s.seeds):
                    run, m = runs.get(seed, (None, None))
                    if run is not None and probe and probe in m.columns:
                        mm = m.dropna(subset=[probe])
                        xs, ys = [float(x) for x in mm["hours"]], [100 * float(y) for y in mm[probe]]
                        v0 = run.metric("final/validation_pass1_start") if probe == "probe_q_pos_mean" else None
                        if v0 is not None and xs:
                            xs, ys = [0.0, *xs], [100 * v0, *ys]
                        if xs:
                            ax.plot(xs, ys, "-", color=self.color(s), alpha=0.6,
                                    label=f"{s.key} (validation probe)" if k == 0 else None)
                            for x, y in zip(xs, ys):
                                self._point("figure4", task, f"{s.key}/seed{seed}/probe", float(x), float(y),
                                            run.run_id)
                            drawn = True
                    v, rid = self._task_score(model_of(s, seed), task)
                    hours = run.metric("final/wall_time_s") if run is not None else None
                    if v is None:
                        self.gaps.append(rid)
                    elif hours is None:
                        self.gaps.append(f"no training hours for {model_of(s, seed)}: "
                                         + (self.store.arm_missing(s.key, seed) if run is None else
                                            f"final/wall_time_s not logged by run {run.run_id}"))
                    else:
                        ax.plot([hours / 3600], [v], "o", color=self.color(s), mec="k",
                                label=f"{s.key} (test)" if k == 0 else None)
                        self._point("figure4", task, f"{s.key}/seed{seed}/test", hours / 3600, v, rid)
                        self.metrics[f"figure4/{task}/{s.key}/seed{seed}"] = v
                        drawn = True
            ax.set(title=task, xlabel="training hours (arm)", ylabel="pass@1 (%)")
            if drawn:
                ax.legend(fontsize=7)
            else:
                ax.text(0.5, 0.5, "no data (see gaps)", ha="center", transform=ax.transAxes)
        fig.suptitle(f"Figure 4: per-task pass@1 against training hours (ours, {self.plan.profile} profile)"
                     + ("" if tiny else "; paper tasks"))
        self.gaps = list(dict.fromkeys(self.gaps))
        _footer(fig, self.gaps)
        fig.tight_layout(rect=(0, 0.04 if self.gaps else 0, 1, 0.97))
        save_figure(fig, out_png, dpi=110)
        plt.close(fig)

    # ------------------------------------------------------------------ pass@k
    def passk(self, out_png) -> None:
        subjects = self.tables.subjects()
        benches = list(self.plan.benchmarks)
        plt, fig, axes = _grid(len(benches))
        for ax, b in zip(axes, benches):
            drawn = False
            for s in subjects:
                per_seed, ids = [], []
                for model in s.models:
                    run = self.store.evaluation(model, b)
                    if run is None:
                        self.gaps.append(self.store.eval_missing(model, b))
                        continue
                    ks = sorted(int(m.group(1)) for key in run.metrics
                                if (m := re.fullmatch(r"pass_at_(\d+)", key)) and run.metric(key) is not None)
                    if not ks:
                        self.gaps.append(f"missing: no pass_at_k metrics in evaluate run {run.run_id} ({model} / {b})")
                        continue
                    per_seed.append({k: 100 * run.metric(f"pass_at_{k}") for k in ks})
                    ids.append(run.run_id)
                if not per_seed:
                    continue
                ks = sorted(set(per_seed[0]).intersection(*per_seed[1:]))
                means = [sum(p[k] for p in per_seed) / len(per_seed) for k in ks]
                sds = [math.sqrt(sum((p[k] - mu) ** 2 for p in per_seed) / (len(per_seed) - 1))
                       if len(per_seed) > 1 else 0.0 for k, mu in zip(ks, means)]
                planned = len(s.models)
                seeds = (f" ({len(per_seed)} of {planned} seeds)" if len(per_seed) < planned else
                         f" ({planned} seeds)" if planned > 1 else "")
                ax.errorbar(ks, means, yerr=sds, fmt="o-", ms=3, capsize=2, color=self.color(s),
                            label=s.key + seeds)
                for k, mu in zip(ks, means):
                    self._point("passk", b, s.key, k, mu, ";".join(ids))
                self.run_ids += [r for r in ids if r not in self.run_ids]
                self.metrics[f"passk/{b}/{s.key}/pass_at_{ks[-1]}"] = means[-1]
                drawn = True
            ax.set_xscale("log", base=2)
            ax.set(title=b, xlabel="k (samples per problem)", ylabel="pass@k (%)")
            if drawn:
                ax.legend(fontsize=7)
            else:
                ax.text(0.5, 0.5, "no data (see gaps)", ha="center", transform=ax.transAxes)
        fig.suptitle(f"pass@k per model (unbiased estimator; ours, {self.plan.profile} profile)")
        self.gaps = list(dict.fromkeys(self.gaps))
        _footer(fig, self.gaps)
        fig.tight_layout(rect=(0, 0.04 if self.gaps else 0, 1, 0.97))
        save_figure(fig, out_png, dpi=110)
        plt.close(fig)


def model_of(s: Subject, seed: str) -> str:
    return s.models[s.seeds.index(seed)]


def build_figure(name: str, *, tracking_uri: str, experiment: str, profile, out_png,
                 plan: Plan | dict | None = None, out_csv=None) -> dict:
    """Draw one figure (``figure1``, ``figure4``, ``passk``) into ``out_png``; with ``out_csv``, also the plotted
    points (figure, panel, series, x, y, run_id). ``profile`` and ``plan`` as in
    :func:`brorl.tables.build.build_table`. Returns ``{"metrics", "run_ids", "gaps", "outputs"}``."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; one of {', '.join(FIGURES)}")
    if isinstance(plan, dict):
        plan = Plan.from_config(plan)
    declared = None if isinstance(profile, str) else profile
    store = RunStore(tracking_uri, experiment, profile if declared is None else declared.name)
    try:
        fb = FigureBuilder(store, plan or Plan.infer(store, declared))
        Path(out_png).parent.mkdir(parents=True, exist_ok=True)
        getattr(fb, name)(out_png)
        outputs = [str(out_png)]
        if out_csv:
            Path(out_csv).parent.mkdir(parents=True, exist_ok=True)
            with atomic_open(out_csv, newline="") as f:
                w = csv.DictWriter(f, fieldnames=["figure", "panel", "series", "x", "y", "run_id"])
                w.writeheader()
                w.writerows(fb.points)
            outputs.append(str(out_csv))
        fb.metrics[f"{name}/gaps"] = float(len(dict.fromkeys(fb.gaps)))
        return {"metrics": fb.metrics, "run_ids": fb.run_ids, "gaps": list(dict.fromkeys(fb.gaps)),
                "outputs": outputs}
    finally:
        store.close()


def file_theory_figure(source, out_png, *, tracking_uri: str, experiment: str, profile: str) -> dict:
    """BroRL Figure 3 is drawn by the theory rules; file it with the tables, citing the latest FINISHED
    theory_figure3 run of the profile (none: an error)."""
    import shutil

    store = RunStore(tracking_uri, experiment, profile)
    try:
        run = store.get("theory_figure3")
    finally:
        store.close()
    if run is None:  # its input exists (Snakemake checked) but not the run that made it, in this profile's store
        raise SystemExit(f"figure3: {source} exists, but there is {store.missing_hint(['theory_figure3'])}")
    Path(out_png).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, out_png)
    return {"run_ids": [run.run_id], "gaps": [], "metrics": {}}
