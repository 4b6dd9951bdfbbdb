"""BroRL Tables 1-5 and the paired t-test, rebuilt from the MLflow store beside the paper's numbers.

Each table keeps the paper's rows (from ``paper_reference.yaml``, each citing its table and row) and adds our
rows, one per model of the profile: the ProRL checkpoint the arms start from, every arm (mean ± sd over its
seeds) and any extra evaluated checkpoint. Every one of our rows names its profile, every cell the MLflow
runs behind it; a cell without a value is an explicit gap with its reason.

Which run counts: the latest FINISHED run of the rule and wildcards (see :mod:`brorl.tables.store`); scores
are the ``mean_at_k`` of the ``evaluate`` runs (the paper's pass@1: mean over the k samples), in percent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from brorl.tables.plan import CODE, MATH, REASONING_GYM, RG_CATEGORIES, Plan, tiny_benchmarks
from brorl.tables.reference import load_reference
from brorl.tables.render import (Cell, Row, Table, fmt_fixed, fmt_hours, fmt_int, fmt_sci, gap, join_gaps,
                                 over_seeds, text)
from brorl.tables.store import RunRecord, RunStore, model_name

TABLES = ("table1", "table2", "table3", "table4", "table5", "ttest")
SCORE = "mean_at_k"

FAMILY_NAMES = {"math": "math", "code": "code", "reasoning_gym": "Reasoning Gym", "tiny": "tiny"}



def fmt_samples_k(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.3f}"


_WORDS = "zero one two three four five six seven eight nine ten eleven twelve".split()


def _count(n: int) -> str:
    """A count as the notes write it (six, ..., twelve; 13 and up in digits)."""
    return _WORDS[n] if 0 <= n < len(_WORDS) else str(n)


@dataclass
class Subject:
    """One of our rows: a model and how it was made."""
    kind: str                 # "prorl", "arm" or "extra"
    key: str                  # arm name or model name
    label: str
    models: list[str]         # evaluate model wildcard per seed
    seeds: list[str]


class Builder:
    def __init__(self, store: RunStore, plan: Plan):
        self.store, self.plan, self.ref = store, plan, load_reference()
        self.profile = plan.profile

    # ------------------------------------------------------------------ rows
    def subjects(self, trained_only: bool = False) -> list[Subject]:
        p = self.plan
        start = p.start_model
        label = ("ProRL stage (start checkpoint)" if p.train_prorl else "Baseline (ProRLv2 checkpoint, fetched)"
                 if start == "prorl" else f"Baseline (start model {start}, fetched)")
        out = [Subject("prorl", start, label, [start], ["-"])]
        base = p.base_arm
        for arm in p.arms:  # a batch arm: ProRL (the smallest N) or BroRL at its N; another kind: its own label
            out.append(Subject("arm", arm.name, arm.label(smallest=arm is base),
                               [model_name(arm.name, s) for s in p.seeds], list(p.seeds)))
        if not trained_only:
            for m in p.extra_models:
                label = "BroRL released checkpoint" if m == "brorl-released" else m
                out.append(Subject("extra", m, label, [m], ["-"]))
        if trained_only and not p.train_prorl:
            out = out[1:]
        return out

    def our_row(self, subject: Subject, cells: dict[str, Cell]) -> Row:
        cells = {"method": text(subject.label), **cells}
        return Row(source="ours", label=subject.label, cells=cells, profile=self.profile, key=subject.key)

    def paper_rows(self, table: str, columns: list[str], missing: str = "not in the paper") -> list[Row]:
        fmts = PAPER_FORMATS
        rows = []
        for r in self.ref[table]["rows"]:
            cells = {}
            for c in columns:
                if c not in r:
                    cells[c] = gap(missing)
                elif c in ("method", "steps"):
                    cells[c] = text(r[c])
                elif r[c] is None:
                    cells[c] = Cell()  # the paper's "–"
                else:
                    cells[c] = Cell(value=float(r[c]), fmt=fmts.get(c, fmt_fixed(2)),
                                    prefix="+" if c == "samples_k" else "")
            rows.append(Row(source="paper", label=r["row"], cells=cells, ref=r["source"]))
        return rows

    def tiny_avg_note(self) -> str:
        """What "tiny avg" averages: the plan's tiny benchmarks (none planned: every evaluated family's)."""
        names = self.plan.has(tiny_benchmarks()) or list(tiny_benchmarks())
        return f"over {names[0]}" if len(names) == 1 else f"over {', '.join(names[:-1])} and {names[-1]}"

    # ------------------------------------------------------------------ training cells
    def absent(self, family: str) -> str:
        if family == "code" and self.plan.data != "tasks":  # the tiny tasks have no code family
            return f"not evaluated: no code evaluation in the {self.profile} profile yet"
        return f"not in the {self.profile} profile"

    def train_runs(self, s: Subject) -> tuple[list[tuple[str, RunRecord]], list[str]]:
        """([(what, run)], gap reasons) of the training runs behind a subject."""
        if s.kind == "extra":
            return [], [f"not trained here: {s.key} is a fetched checkpoint"]
        if s.kind == "prorl":
            if not self.plan.train_prorl:
                return [], ["not trained here: the ProRLv2 checkpoint is fetched" if s.key == "prorl"
                            else f"not trained here: the start model {s.key} is fetched"]
            run = self.store.prorl()
            return ([("prorl_stage", run)], []) if run else ([], [self.store.prorl_missing()])
        runs, gaps = [], []
        for seed in s.seeds:
            run = self.store.arm(s.key, seed)
            if run is None:
                gaps.append(self.store.arm_missing(s.key, seed))
            else:
                runs.append((f"train_arm {s.key}/seed{seed}", run))
        if not s.seeds:
            gaps.append(f"missing: no seeds planned for arm {s.key}")
        return runs, gaps

    def train_metric(self, s: Subject, key: str, scale: float = 1.0, fmt=fmt_fixed(2), prefix: str = "") -> Cell:
        runs, gaps = self.train_runs(s)
        if gaps:
            return gap(join_gaps(gaps))
        values = []
        for what, run in runs:
            v = run.metric(key)
            if v is None:
                return gap(f"missing: metric {key} not logged by {what} run {run.run_id}")
            values.append(v * scale)
        return over_seeds(values, tuple((w, r.run_id) for w, r in runs), fmt=fmt, prefix=prefix)

    def train_param(self, s: Subject, name: str) -> Cell:
        """``stage<k>.<name>`` of every stage, joined with → (the schedule arm's N 16→64→...)."""
        runs, gaps = self.train_runs(s)
        if gaps:
            return gap(join_gaps(gaps))
        shown = []
        for what, run in runs:
            vals, k = [], 0
            while f"stage{k}.{name}" in run.params:
                vals.append(str(run.params[f"stage{k}.{name}"]))
                k += 1
            if not vals:
                return gap(f"missing: param stage0.{name} not logged by {what} run {run.run_id}")
            shown.append("→".join(vals))
        return text(" / ".join(dict.fromkeys(shown)), runs=tuple((w, r.run_id) for w, r in runs))

    def geometry_cells(self, s: Subject, hours: bool = True) -> dict[str, Cell]:
        prefix = "+" if s.kind == "arm" else ""
        cells = {"n_rollouts": self.train_param(s, "n_rollouts"),
                 "prompts_per_step": self.train_param(s, "prompts_per_step"),
                 "steps": self.train_metric(s, "final/steps", fmt=fmt_int, prefix=prefix)}
        if hours:
            cells["samples_k"] = self.train_metric(s, "final/generated_samples", 1e-3, fmt_samples_k, prefix)
            cells["hours"] = self.train_metric(s, "final/wall_time_s", 1 / 3600, fmt_hours)
        return cells

    # ------------------------------------------------------------------ score cells
    def score(self, model: str, benchmark: str, metric: str = SCORE) -> tuple[float | None, str, str]:
        """(value in %, what, run id) or (None, gap reason, "")."""
        run = self.store.evaluation(model, benchmark)
        if run is None:
            return None, self.store.eval_missing(model, benchmark), ""
        v = run.metric(metric)
        if v is None and metric.startswith("category/") and any(k.startswith("category/") for k in run.metrics):
            # the run scored other categories: its benchmark (the profile's Reasoning Gym tasks) has none of this one
            category = metric.split("/")[1]
            return None, f"not evaluated: no {category} task in the {self.profile} profile's {benchmark}", ""
        if v is None:
            return None, f"missing: metric {metric} not logged by evaluate run {run.run_id} ({model} / {benchmark})", ""
        return 100.0 * v, f"evaluate {model}/{benchmark}", run.run_id

    def average_cell(self, s: Subject, benchmarks, family: str, metric: str = SCORE) -> Cell:
        """Mean over ``benchmarks`` per seed, then mean ± sd over seeds; a gap if any evaluation is missing."""
        planned = self.plan.has(benchmarks)
        if not planned:
            return gap(self.absent(family))
        values, runs, gaps = [], [], []
        for model in s.models:
            per = []
            for b in planned:
                v, what, rid = self.score(model, b, metric)
                if v is None:
                    gaps.append(what)
                else:
                    per.append(v)
                    runs.append((what, rid))
            if len(per) == len(planned):
                values.append(sum(per) / len(per))
        if gaps:
            return gap(join_gaps(gaps))
        return over_seeds(values, tuple(runs))

    def benchmark_cell(self, s: Subject, benchmark: str, family: str, metric: str = SCORE) -> Cell:
        return self.average_cell(s, [benchmark], family, metric)

    # ------------------------------------------------------------------ tables
    def table1(self) -> Table:
        cols = [("method", "Method"), ("n_rollouts", "N"), ("prompts_per_step", "Prompts/step"),
                ("steps", "RL steps"), ("samples_k", "Samples (k)"), ("hours", "Time (h)"), ("math", "Math"),
                ("code", "Code"), ("reasoning_gym", "Reasoning Gym"), ("tiny_avg", "tiny avg")]
        keys = [c for c, _ in cols]
        rows = self.paper_rows("table1", keys)
        rel = self.ref["released_model"]
        rows.append(Row(source="paper", label=rel["row"], ref=rel["source"], cells={
            **{c: gap("not given by the source") for c in keys},
            "method": text(rel["row"] + " [secondary]"),
            **{c: Cell(value=float(rel[c])) for c in ("math", "code", "reasoning_gym")}}))
        for s in self.subjects():
            cells = self.geometry_cells(s)
            cells["math"] = self.average_cell(s, MATH, "math")
            cells["code"] = self.average_cell(s, CODE, "code")
            cells["reasoning_gym"] = self.average_cell(s, [REASONING_GYM], "reasoning_gym")
            cells["tiny_avg"] = self.average_cell(s, tiny_benchmarks(), "tiny")
            rows.append(self.our_row(s, cells))
        return Table("table1", f"Table 1 (BroRL Table 1 beside ours, {self.profile} profile): efficiency and "
                     "performance; samples before dynamic-sampling filtering, scores = mean@k pass@1 in %, "
                     "our arms continue from our ProRL stage (steps, samples and hours after it), "
                     "mean ± sd over seeds.", cols, rows,
                     notes=["Math / Code / Reasoning Gym: mean over the family's benchmarks of mean@k (Tables 3-5); "
                            f"tiny avg: mean {self.tiny_avg_note()}. Paper '–': not given in the paper. "
                            "The released-checkpoint row is a secondary source (blog synthesis)."])

    def table2(self) -> Table:
        cols = [("method", "Method (N)"), ("n_rollouts", "N"), ("pass_rate", "Dynamic-sampling pass rate (%)"),
                ("samples_per_s", "Generation throughput (samples/s)")]
        rows = []
        for r in self.ref["table2"]["rows"]:
            rows.append(Row(source="paper", label=r["row"], ref=r["source"], cells={
                "method": text(r["method"]), "n_rollouts": text(self.ref["table2"]["n_rollouts"][r["row"]]),
                "pass_rate": Cell(value=float(r["pass_rate"]), fmt=fmt_int),
                "samples_per_s": Cell(value=float(r["samples_per_s"]), fmt=fmt_fixed(1))}))
        for s in self.subjects(trained_only=True):
            rows.append(self.our_row(s, {
                "n_rollouts": self.train_param(s, "n_rollouts"),
                "pass_rate": self.train_metric(s, "final/dynamic_sampling_pass_rate", 100.0, fmt_fixed(1)),
                "samples_per_s": self.train_metric(s, "final/generation_samples_per_s", 1.0, fmt_fixed(1))}))
        return Table("table2", f"Table 2 (BroRL Table 2 beside ours, {self.profile} profile): dynamic-sampling "
                     "pass rate (share of generated prompt groups kept) and generation throughput per N, "
                     "mean ± sd over seeds.", cols, rows,
                     notes=["Throughput is generated samples per second of generation time on this machine; "
                            "the paper's is on 64 H100s, so only the ratio between N is comparable."])

    def _per_benchmark(self, name: str, benchmarks, family: str, title: str, extra_tiny: bool) -> Table:
        ref = self.ref[name]
        cols = [(c, h) for c, h in ref["columns"].items()]
        if extra_tiny:
            cols += [(b, b) for b in tiny_benchmarks()] + [("tiny_avg", "tiny avg")]
        keys = [c for c, _ in cols]
        rows = self.paper_rows(name, keys)
        for s in self.subjects():
            cells = self.geometry_cells(s, hours=False) if "n_rollouts" in keys else {
                "steps": self.geometry_cells(s, hours=False)["steps"]}
            for b in benchmarks:
                cells[b] = self.benchmark_cell(s, b, family)
            cells["avg"] = self.average_cell(s, benchmarks, family)
            if extra_tiny:
                for b in tiny_benchmarks():
                    cells[b] = self.benchmark_cell(s, b, "tiny")
                cells["tiny_avg"] = self.average_cell(s, tiny_benchmarks(), "tiny")
            rows.append(self.our_row(s, cells))
        return Table(name, title, cols, rows)

    def table3(self) -> Table:
        t = self._per_benchmark("table3", MATH, "math", f"Table 3 (BroRL Table 3 beside ours, {self.profile} "
                                "profile): math pass@1 (%) per benchmark (mean@k), mean ± sd over seeds; the tiny "
                                "profile's arithmetic benchmarks in their own columns.", extra_tiny=True)
        t.notes = [f"MATH = math500. Avg: mean over the {_count(len(MATH))} math benchmarks; "
                   f"tiny avg: {self.tiny_avg_note()}."]
        return t

    def table4(self) -> Table:
        planned = self.plan.has(CODE)
        t = self._per_benchmark("table4", CODE, "code", f"Table 4 (BroRL Table 4 beside ours, {self.profile} "
                                "profile): code pass@1 (%) per benchmark"
                                + ("." if planned else "; empty: code evaluation does not exist in this "
                                   "pipeline yet."), extra_tiny=False)
        if not planned:
            t.notes = ["Our rows are gaps until a code evaluation (apps, codecontests, codeforces, taco) is "
                       "added to the plan; the paper's rows are kept for reference."]
        return t

    def table5(self) -> Table:
        ref = self.ref["table5"]
        cols = list(ref["columns"].items())
        keys = [c for c, _ in cols]
        rows = self.paper_rows("table5", keys)
        for s in self.subjects():
            cells = {"steps": self.geometry_cells(s, hours=False)["steps"]}
            for c in RG_CATEGORIES:
                cells[c] = self.benchmark_cell(s, REASONING_GYM, "reasoning_gym", metric=f"category/{c}/{SCORE}")
            cells["avg"] = self.benchmark_cell(s, REASONING_GYM, "reasoning_gym")
            rows.append(self.our_row(s, cells))
        return Table("table5", f"Table 5 (BroRL Table 5 beside ours, {self.profile} profile): Reasoning Gym "
                     "pass@1 (%) by category (category/<name>/mean_at_k), mean ± sd over seeds.", cols, rows,
                     notes=["Our Avg is the benchmark's mean@k over all its instances; the paper's Avg is not "
                            "the plain mean of its 11 categories (" + ref["avg_note"] + ")."])

    # ------------------------------------------------------------------ paired t-test
    def instances(self, model: str) -> tuple[dict | None, list[tuple[str, str]], list[str]]:
        """{(benchmark, id): pass@1} over the plan's benchmarks, the runs read, gap reasons."""
        out, runs, gaps = {}, [], []
        for b in self.plan.benchmarks:
            run = self.store.evaluation(model, b)
            if run is None:
                gaps.append(self.store.eval_missing(model, b))
                continue
            samples, why = self.store.samples(run, b)
            if samples is None:
                gaps.append(why)
                continue
            runs.append((f"evaluate {model}/{b}", run.run_id))
            for smp in samples:
                c = [float(x) for x in smp["correct"]]
                out[(b, str(smp["id"]))] = sum(c) / len(c) if c else math.nan
        return (out if not gaps else None), runs, gaps

    def arm_instances(self, s: Subject):
        """Per-instance pass@1 averaged over the arm's seeds (instances every seed has)."""
        per, runs, gaps = [], [], []
        for m in s.models:
            inst, r, g = self.instances(m)
            runs += r
            gaps += g
            if inst is not None:
                per.append(inst)
        if gaps or not per:
            return None, runs, gaps or [f"missing: no seeds planned for arm {s.key}"]
        keys = set(per[0]).intersection(*per[1:])
        return {k: sum(p[k] for p in per) / len(per) for k in keys}, runs, []

    def paired(self) -> dict:
        from scipy import stats

        subs = {s.key: s for s in self.subjects(trained_only=True) if s.kind == "arm"}
        base_arm = self.plan.base_arm
        base = base_arm.name if base_arm is not None else None
        result = {"base": base, "comparisons": [], "best": None}
        if base is None:
            result["gap"] = "missing: no N arm in the plan"
            return result
        b_inst, b_runs, b_gaps = self.arm_instances(subs[base])
        for arm in (a.name for a in self.plan.arms if a.n is not None and a is not base_arm):
            a_inst, a_runs, a_gaps = self.arm_instances(subs[arm])
            comp = {"arm": arm, "base": base, "runs": tuple(a_runs + b_runs), "seeds": len(subs[arm].seeds)}
            if a_gaps or b_gaps:
                comp["gap"] = join_gaps(a_gaps + b_gaps)
            else:
                keys = sorted(set(a_inst) & set(b_inst))
                a = [a_inst[k] for k in keys]
                b = [b_inst[k] for k in keys]
                d = [x - y for x, y in zip(a, b)]
                comp.update(instances=len(keys), benchmarks=len({k[0] for k in keys}),
                            unpaired=len(set(a_inst) ^ set(b_inst)))
                if len(keys) < 2 or max(d) == min(d):
                    comp["gap"] = (f"not testable: {len(keys)} paired instances" if len(keys) < 2 else
                                   "not testable: every paired difference is the same")
                    comp["delta"] = sum(d) / len(d) if d else None
                else:
                    t = stats.ttest_rel(a, b, alternative="greater")
                    comp.update(delta=sum(d) / len(d), t=float(t.statistic), p_one_tailed=float(t.pvalue),
                                p_two_sided=float(stats.ttest_rel(a, b).pvalue))
            result["comparisons"].append(comp)
        testable = [c for c in result["comparisons"] if "gap" not in c]
        if testable:
            result["best"] = max(testable, key=lambda c: c["delta"])["arm"]
        return result

    def ttest(self) -> Table:
        ref = self.ref["ttest"]
        cols = [("comparison", "Comparison"), ("delta", "Δ pass@1"), ("t", "t"), ("p_one_tailed", "one-tailed p"),
                ("p_two_sided", "two-sided p"), ("instances", "instances"), ("seeds", "seeds per arm"),
                ("samples", "generated samples (arm / base)")]
        rows = [Row(source="paper", label="BroRL vs ProRL", ref=ref["source"], cells={
            "comparison": text(ref["comparison"]), "delta": Cell(value=ref["delta"], fmt=fmt_fixed(4)),
            "t": Cell(value=ref["t"], fmt=fmt_fixed(2)), "p_one_tailed": Cell(value=ref["p_one_tailed"], fmt=fmt_sci),
            "p_two_sided": Cell(), "instances": text(ref["instances"]), "seeds": Cell(), "samples": Cell()})]
        res = self.paired()
        self._paired = res
        subs = {s.key: s for s in self.subjects(trained_only=True) if s.kind == "arm"}
        for comp in res["comparisons"]:
            arm, base = comp["arm"], comp["base"]
            label = f"{arm} vs {base}"
            runs = comp["runs"]
            cells = {"comparison": text(f"{label}: per-instance pass@1 (seed mean), all benchmarks, at the arms' "
                                        "equal sample budget" + (" — best larger-N arm" if arm == res["best"] else ""))}
            if "gap" in comp:
                for c in ("delta", "t", "p_one_tailed", "p_two_sided", "instances"):
                    cells[c] = gap(comp["gap"])
            else:
                cells.update(delta=Cell(value=comp["delta"], fmt=fmt_fixed(4), runs=runs),
                             t=Cell(value=comp["t"], fmt=fmt_fixed(2), runs=runs),
                             p_one_tailed=Cell(value=comp["p_one_tailed"], fmt=fmt_sci, runs=runs),
                             p_two_sided=Cell(value=comp["p_two_sided"], fmt=fmt_sci, runs=runs),
                             instances=Cell(value=float(comp["instances"]), fmt=fmt_int, runs=runs))
            cells["seeds"] = text(str(comp["seeds"]))
            sa = self.train_metric(subs[arm], "final/generated_samples", fmt=fmt_int)
            sb = self.train_metric(subs[base], "final/generated_samples", fmt=fmt_int)
            cells["samples"] = (gap(join_gaps([x.gap for x in (sa, sb) if x.gap])) if sa.gap or sb.gap else
                                text(f"{sa.display()} / {sb.display()}", runs=sa.runs + sb.runs))
            rows.append(Row(source="ours", label=label, cells=cells, profile=self.profile, key=arm))
        if not res["comparisons"]:
            rows.append(Row(source="ours", label="no comparison", profile=self.profile, key="", cells={
                c: gap(res.get("gap", "missing: the plan has no larger-N arm beside " + str(res["base"])))
                for c, _ in cols}))
        return Table("ttest", f"Paired t-test (BroRL §4 beside ours, {self.profile} profile): per-instance pass@1 of "
                     "each larger-N arm against the N=16 arm (one-tailed: arm > base), paired over the instances "
                     "of every planned benchmark.", cols, rows,
                     notes=["Per-instance pass@1 = mean of the k sampled 0/1 scores in the evaluate run's "
                            "<benchmark>.json, averaged over seeds; Δ is a fraction (paper: 0.0033). The paper "
                            "compares at equal compute (~140 h); our arms share one generated-sample budget. "
                            "'Best' is picked after the fact, so its p is optimistic when several arms are tested."])

    def build(self, name: str) -> Table:
        if name not in TABLES:
            raise ValueError(f"unknown table {name!r}; one of {', '.join(TABLES)}")
        return getattr(self, name)()


def _metric_name(*parts: str) -> str:
    return "/".join("".join(c if c.isalnum() or c in "_-. " else "_" for c in p) for p in parts)


def headline(table: Table, builder: Builder | None = None) -> dict[str, float]:
    """Numbers of our rows for MLflow: ``<row key>/<column>`` (means; percent or the table's unit)."""
    out: dict[str, float] = {}
    for row in table.rows:
        if row.source != "ours":
            continue
        for c, cell in row.cells.items():
            if cell.value is not None and cell.gap is None:
                out[_metric_name(table.name, row.key or row.label, c)] = float(cell.value)
    out[_metric_name(table.name, "gaps")] = float(len(table.gaps()))
    out[_metric_name(table.name, "rows_ours")] = float(sum(r.source == "ours" for r in table.rows))
    if table.name == "ttest" and builder is not None and getattr(builder, "_paired", {}).get("best"):
        best = next(c for c in builder._paired["comparisons"] if c["arm"] == builder._paired["best"])
        for k in ("delta", "t", "p_one_tailed", "p_two_sided", "instances"):
            out[f"ttest/best/{k}"] = float(best[k])
    return out


def make_table(name: str, store: RunStore, plan: Plan | None = None, declared=None) -> tuple[Table, Builder]:
    """``plan`` None: :meth:`Plan.infer` from the declared profile (``declared``; None: ``BRORL_PROFILE``)."""
    plan = plan or Plan.infer(store, declared)
    builder = Builder(store, plan)
    return builder.build(name), builder


def build_table(name: str, *, tracking_uri: str, experiment: str, profile, out_csv, out_md,
                plan: Plan | dict | None = None, out_cells=None) -> dict:
    """Rebuild one table (``table1`` ... ``table5``, ``ttest``) from the MLflow store and write
    ``out_csv`` (display cells), ``out_md`` (caption + markdown table + run-id footnotes) and the
    cell -> run id CSV (``out_cells``, default ``<out_csv stem>_cells.csv``).

    ``profile``: the profile's name or its declared :class:`brorl.profile.Profile`. ``plan``: a :class:`Plan`, the
    pipeline config dict (:meth:`Plan.from_config`) or ``None`` (:meth:`Plan.infer`: the declared profile -- the
    ``Profile`` given, else ``BRORL_PROFILE`` -- and the runs in the store). Returns ``{"metrics": {name: float}, "run_ids": [...], "gaps": [...], "outputs": [...]}``
    (``"best_arm"`` too for the t-test)."""
    if isinstance(plan, dict):
        plan = Plan.from_config(plan)
    declared = None if isinstance(profile, str) else profile
    store = RunStore(tracking_uri, experiment, profile if declared is None else declared.name)
    try:
        table, builder = make_table(name, store, plan, declared)
        outputs = table.write(out_csv, out_md, out_cells)
        out = {"metrics": headline(table, builder), "run_ids": table.run_ids(), "gaps": table.gaps(),
               "outputs": outputs}
        if name == "ttest":
            out["best_arm"] = builder._paired.get("best")
        return out
    finally:
        store.close()


PAPER_FORMATS = {"n_rollouts": fmt_int, "prompts_per_step": fmt_int, "samples_k": fmt_int,
                 "hours": lambda v: f"{v:.1f}"}
