"""brorl.tables: the paper's tables and figures rebuilt from a hand-made MLflow store.

The tiny store is written through brorl.tracking.rule_run (the tags every rule run carries), with hand-chosen
training metrics and evaluate runs whose metrics come from hand-made per-sample data; the tests rebuild each
table and check it shows exactly those values and the run ids behind them, the explicit gap texts, that
KILLED and stale runs are ignored, and that the t-test is scipy's ttest_rel on the per-instance data.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from brorl.evaluation.metrics import sample_metrics  # noqa: E402
from brorl.tables import Plan, RunStore, build_figure, build_table, load_reference, make_table  # noqa: E402
from brorl.tables.plan import MATH, RG_CATEGORIES  # noqa: E402
from brorl.profile import Profile  # noqa: E402
from brorl.tasks.families import FAMILIES  # noqa: E402
from brorl.training.arms import BatchArm  # noqa: E402

TINY_BENCH = ["tiny_add", "tiny_multiple"]
TINY_ARMS = [BatchArm(f"n{n}", (n,)) for n in (16, 64, 512)]
TINY_PLAN = Plan(profile="tiny", arms=TINY_ARMS, seeds=[0, 1], benchmarks=TINY_BENCH)
# (arm, seed) -> hand-chosen final/ metrics of the train_arm run (n64 seed 1 is never trained: a gap)
TRAIN = {
    ("n16", "0"): dict(steps=48, samples=24576, wall=720.0, speed=812.5, rate=0.40, v0=0.30, v1=0.31),
    ("n16", "1"): dict(steps=48, samples=24576, wall=756.0, speed=790.0, rate=0.42, v0=0.30, v1=0.32),
    ("n64", "0"): dict(steps=48, samples=24640, wall=700.0, speed=900.0, rate=0.50, v0=0.30, v1=0.33),
    ("n512", "0"): dict(steps=46, samples=24064, wall=648.0, speed=1200.0, rate=0.625, v0=0.30, v1=0.36),
    ("n512", "1"): dict(steps=47, samples=24576, wall=684.0, speed=1150.0, rate=0.60, v0=0.30, v1=0.35),
}
PRORL = dict(steps=45, samples=23040, wall=540.0, speed=700.0, rate=0.35, v0=0.20, v1=0.30)
QUALITY = {"prorl": 0.30, "n16": 0.32, "n64": 0.35, "n512": 0.42}
N_PROBLEMS, K = 40, 8


def _rng(*key) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32("/".join(map(str, key)).encode()))


def per_sample(model: str, bench: str) -> list[dict]:
    """Hand-made per-sample data: instance difficulty shared by every model (so pairing matters)."""
    arm = model.split("-seed")[0]
    base = _rng("difficulty", bench).uniform(-0.25, 0.25, N_PROBLEMS)
    p = np.clip(QUALITY[arm] + base + _rng("noise", model, bench).normal(0, 0.03, N_PROBLEMS), 0.02, 0.98)
    correct = (_rng("draw", model, bench).random((N_PROBLEMS, K)) < p[:, None]).astype(int)
    return [{"id": f"{bench}-{i}", "category": bench.removeprefix("tiny_"), "correct": c.tolist()}
            for i, c in enumerate(correct)]


def _curve_rows(t: dict, n_stages: int = 1):
    rows, steps = [], t["steps"]
    for s in range(1, steps + 1):
        probe = t["v0"] + (t["v1"] - t["v0"]) * s / steps if (s % 5 == 0 or s == steps) else None
        rows.append({"arm_step": s, "arm_generated_samples": round(t["samples"] * s / steps),
                     "arm_wall_time_s": t["wall"] * s / steps, "probe_q_pos_mean": probe,
                     "probe_multi_q_pos_mean": None if probe is None else probe / 2,
                     "stage": (s - 1) * n_stages // steps, "stage_n_rollouts": 16})
    return rows


class Store:
    """Writes runs the way the pipeline does (brorl.tracking.rule_run) into a store under tmp."""

    def __init__(self, root: Path, experiment: str, profile: str):
        self.root, self.profile = root, profile
        self.uri = f"sqlite:///{root / 'mlflow.db'}"
        self.tracking = {"uri": self.uri, "experiment": experiment, "artifact_root": str(root / "mlartifacts")}
        self.experiment = experiment
        self.ids: dict = {}

    def run(self, rule, wildcards=None, metrics=None, params=None, files=None, curves=None, status=None):
        import mlflow
        from mlflow.entities import Metric

        from brorl.tracking import rule_run

        time.sleep(0.005)  # distinct start times (ms) for the latest-run rule
        with rule_run(rule, profile=self.profile, config={"test": True}, wildcards=wildcards,
                      tracking=self.tracking, params=params) as run:
            rid = run.info.run_id
            if metrics:
                mlflow.log_metrics(metrics)
            if curves:
                now = int(time.time() * 1000)
                mlflow.MlflowClient().log_batch(rid, metrics=[Metric(k, float(v), now, int(s))
                                                              for k, pts in curves.items() for s, v in pts])
            for name, content in (files or {}).items():
                path = self.root / "files" / rid / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(content)
                mlflow.log_artifact(str(path))
        if status:
            mlflow.MlflowClient().set_terminated(rid, status=status)
        return rid

    def train(self, rule, t, wildcards=None, n=16, b=32, with_csv=True, stage_restart=False):
        rows = _curve_rows(t, 2 if stage_restart else 1)
        files = {}
        if with_csv:
            cols = list(rows[0])
            lines = [",".join(cols)] + [",".join("" if r[c] is None else str(r[c]) for c in cols) for r in rows]
            files["metrics.csv"] = "\n".join(lines) + "\n"
        # wall_time_s restarts at each stage (the schedule arm); arm_wall_time_s in metrics.csv does not
        stage0_end = max(r["arm_wall_time_s"] for r in rows if r["stage"] == 0)
        wall = [(r["arm_step"], r["arm_wall_time_s"] - (stage0_end if stage_restart and r["stage"] == 1 else 0))
                for r in rows]
        curves = {"probe_q_pos_mean": [(r["arm_step"], r["probe_q_pos_mean"]) for r in rows
                                       if r["probe_q_pos_mean"] is not None],
                  "arm_generated_samples": [(r["arm_step"], r["arm_generated_samples"]) for r in rows],
                  "wall_time_s": wall}
        metrics = {"final/steps": t["steps"], "final/generated_samples": t["samples"],
                   "final/kept_samples": t["samples"] * t["rate"], "final/wall_time_s": t["wall"],
                   "final/generation_samples_per_s": t["speed"], "final/dynamic_sampling_pass_rate": t["rate"],
                   "final/validation_pass1_start": t["v0"], "final/validation_pass1_end": t["v1"],
                   "final/q_pos_tail_end": 0.05}
        return self.run(rule, wildcards, metrics, {"stage0.n_rollouts": n, "stage0.prompts_per_step": b},
                        files, curves)

    def evaluate(self, model, bench, samples=None, metrics=None, status=None):
        samples = per_sample(model, bench) if samples is None else samples
        m = sample_metrics([s["correct"] for s in samples]) if metrics is None else metrics
        rid = self.run("evaluate", {"model": model, "benchmark": bench}, m,
                       files={f"{bench}.json": json.dumps({"samples": samples})}, status=status)
        self.ids[(model, bench)] = rid
        return rid, m


def _restore_tracking(old: str | None) -> None:
    """Undo rule_run's global tracking URI (mlflow also exports it to the environment)."""
    import mlflow

    mlflow.set_tracking_uri(None)
    if old is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = old


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tables_tiny")
    old = os.environ.get("MLFLOW_TRACKING_URI")
    st = Store(root, "brorl-tiny", "tiny")
    os.environ["MLFLOW_TRACKING_URI"] = st.uri  # rule_run honours it: never the project's store
    try:
        st.train_ids = {}
        st.train_ids["prorl"] = st.train("prorl_stage", PRORL)
        # a stale FINISHED run (older) and a later KILLED run for n16 seed 0: both must be ignored
        st.stale_id = st.train("train_arm", dict(TRAIN[("n16", "0")], steps=111, wall=9999.0),
                               {"arm": "n16", "seed": "0"})
        for (arm, seed), t in TRAIN.items():
            n = int(arm[1:])
            st.train_ids[(arm, seed)] = st.train("train_arm", t, {"arm": arm, "seed": seed}, n=n, b=512 // n,
                                                 with_csv=(arm, seed) != ("n512", "1"),
                                                 stage_restart=(arm, seed) == ("n512", "1"))
        st.killed_id = st.run("train_arm", {"arm": "n16", "seed": "0"}, {"final/steps": 999}, status="KILLED")
        st.evals = {}
        for model in ["prorl", "n16-seed0", "n16-seed1", "n64-seed0", "n512-seed0", "n512-seed1"]:
            for b in TINY_BENCH:
                st.evals[(model, b)] = st.evaluate(model, b)[1]
        # n64-seed1: tiny_multiple only as a KILLED run, tiny_add not at all
        st.killed_eval = st.evaluate("n64-seed1", "tiny_multiple", status="KILLED")[0]
        yield st
    finally:
        _restore_tracking(old)


def build(st, name, tmp_path, plan=TINY_PLAN):
    out = build_table(name, tracking_uri=st.uri, experiment=st.experiment, profile=st.profile,
                      out_csv=tmp_path / f"{name}.csv", out_md=tmp_path / f"{name}.md", plan=plan)
    rows = list(csv.DictReader(open(tmp_path / f"{name}.csv")))
    cells = list(csv.DictReader(open(tmp_path / f"{name}_cells.csv")))
    md = (tmp_path / f"{name}.md").read_text()
    return out, rows, cells, md


def ours(rows, label):
    [row] = [r for r in rows if r["row"] == label and r["source"].startswith("ours")]
    return row


def cell(cells, label, column):
    [c] = [c for c in cells if c["row"] == label and c["column"] == column and c["source"].startswith("ours")]
    return c


def ms(values, fmt="{:.2f}"):
    v = np.array(values, float)
    return fmt.format(v.mean()) + (f" ± {fmt.format(v.std(ddof=1))}" if v.size > 1 else "")


# --------------------------------------------------------------------------------------- reference

def test_reference_spot_values_match_the_paper_text():
    ref = load_reference()
    row = {t: {r["row"]: r for r in ref[t]["rows"]} for t in ("table1", "table2", "table3", "table4", "table5")}
    # values as printed in the brief's section 4 tables
    assert row["table1"]["BroRL +191"]["hours"] == 173.8 and row["table1"]["BroRL +191"]["samples_k"] == 20039
    assert row["table1"]["ProRL +535"]["code"] == 52.74 and row["table1"]["Baseline (ProRLv2)"]["hours"] is None
    assert row["table2"]["BroRL (512)"]["samples_per_s"] == 72.4 and row["table2"]["ProRL (16)"]["pass_rate"] == 41
    assert row["table3"]["BroRL +191"]["aime24"] == 57.50 and row["table3"]["ProRL +535"]["math500"] == 92.15
    assert row["table4"]["Baseline"]["apps"] == 58.52 and row["table4"]["BroRL +191"]["avg"] == 54.20
    assert row["table5"]["BroRL +191"]["arc"] == 6.27 and row["table5"]["BroRL +107"]["cognition"] == 44.05
    assert (ref["ttest"]["delta"], ref["ttest"]["t"], ref["ttest"]["p_one_tailed"]) == (0.0033, 4.84, 6.5e-7)
    for t in row:
        assert len(row[t]) == (2 if t == "table2" else 6)
        for label, r in row[t].items():
            assert r["source"] == f"BroRL Table {t[-1]}, row {label}"


# --------------------------------------------------------------------------------------- Table 1

def test_table1_shows_the_stored_values_and_run_ids(tiny, tmp_path):
    out, rows, cells, md = build(tiny, "table1", tmp_path)
    # the paper's rows stay
    paper = [r for r in rows if r["source"] == "paper"]
    assert [r["row"] for r in paper][:6] == ["Baseline (ProRLv2)", "ProRL +225", "ProRL +535", "BroRL +107",
                                             "BroRL +134", "BroRL +191"]
    assert paper[5]["hours"] == "173.8" and paper[5]["math"] == "63.03" and paper[5]["samples_k"] == "+20,039"
    assert paper[0]["samples_k"] == "–" and paper[0]["tiny_avg"] == "— (not in the paper)"
    # ours: the ProRL stage
    p = ours(rows, "ProRL stage (start checkpoint)")
    assert p["source"] == "ours (tiny)" and p["profile"] == "tiny"
    assert (p["n_rollouts"], p["prompts_per_step"], p["steps"]) == ("16", "32", "45")
    assert p["samples_k"] == "23.040" and p["hours"] == "0.15"
    add, mult = (100 * tiny.evals[("prorl", b)]["mean_at_k"] for b in TINY_BENCH)
    assert p["tiny_avg"] == f"{(add + mult) / 2:.2f}"
    for col in ("math", "code", "reasoning_gym"):
        assert p[col] == "— (not in the tiny profile)"
    # ours: n512 over two seeds (mean ± sd)
    r = ours(rows, "BroRL n512")
    assert r["n_rollouts"] == "512" and r["prompts_per_step"] == "1"
    assert r["steps"] == "+46.5 ± 0.7"  # non-integer means get one decimal
    assert r["samples_k"] == "+" + ms([24.064, 24.576], "{:,.3f}")
    assert r["hours"] == "0.185 ± 0.007"  # 3 significant digits under 1 h; the sd to the same decimals
    per_seed = [np.mean([100 * tiny.evals[(f"n512-seed{s}", b)]["mean_at_k"] for b in TINY_BENCH]) for s in (0, 1)]
    assert r["tiny_avg"] == ms(per_seed)
    c = cell(cells, "BroRL n512", "tiny_avg")
    assert float(c["value"]) == pytest.approx(np.mean(per_seed), rel=1e-12) and c["n"] == "2"
    assert set(c["run_ids"].split(";")) == {tiny.ids[(f"n512-seed{s}", b)] for s in (0, 1) for b in TINY_BENCH}
    assert set(cell(cells, "BroRL n512", "steps")["run_ids"].split(";")) == {
        tiny.train_ids[("n512", "0")], tiny.train_ids[("n512", "1")]}
    # every run id behind our cells appears in the markdown footnotes, and is returned
    for rid in [*c["run_ids"].split(";"), tiny.train_ids["prorl"]]:
        assert f"`{rid}`" in md and rid in out["run_ids"]
    assert md.startswith("**Table 1") and "MLflow runs behind our cells:" in md
    assert out["metrics"]["table1/n512/tiny_avg"] == pytest.approx(np.mean(per_seed))
    assert all(not v == "" for r in rows for k, v in r.items() if k not in ("profile", "ref", "run_ids"))


def test_missing_evaluation_and_training_are_explicit_gaps(tiny, tmp_path):
    out, rows, cells, md = build(tiny, "table1", tmp_path)
    r = ours(rows, "BroRL n64")
    assert "missing: no FINISHED evaluate run for model n64-seed1 / tiny_add" in r["tiny_avg"]
    # the KILLED evaluate run is named, and not used
    assert r["tiny_avg"] == (f"— (missing: no FINISHED evaluate run for model n64-seed1 / tiny_add, "
                             f"model n64-seed1 / tiny_multiple (latest run {tiny.killed_eval} is KILLED))")
    assert r["tiny_avg"].startswith("— (")
    assert "missing: no FINISHED train_arm run for arm n64 seed 1" in r["steps"]
    assert cell(cells, "BroRL n64", "tiny_avg")["value"] == ""
    assert any("n64-seed1 / tiny_add" in g for g in out["gaps"])
    assert tiny.killed_eval not in out["run_ids"]


def test_killed_and_stale_runs_are_ignored(tiny, tmp_path):
    out, rows, cells, _ = build(tiny, "table1", tmp_path)
    r = ours(rows, "ProRL n16")
    assert r["steps"] == "+48 ± 0" and r["hours"] == "0.205 ± 0.007"
    ids = set(cell(cells, "ProRL n16", "steps")["run_ids"].split(";"))
    assert ids == {tiny.train_ids[("n16", "0")], tiny.train_ids[("n16", "1")]}
    assert tiny.killed_id not in out["run_ids"] and tiny.stale_id not in out["run_ids"]
    store = RunStore(tiny.uri, tiny.experiment, "tiny")
    assert store.arm("n16", 0).run_id == tiny.train_ids[("n16", "0")]
    assert store.other[("train_arm", (("arm", "n16"), ("seed", "0")))].status == "KILLED"
    store.close()


def test_table2_pass_rate_and_throughput(tiny, tmp_path):
    _, rows, cells, md = build(tiny, "table2", tmp_path)
    assert [r["row"] for r in rows if r["source"] == "paper"] == ["ProRL (16)", "BroRL (512)"]
    paper = {r["row"]: r for r in rows if r["source"] == "paper"}
    assert paper["BroRL (512)"]["pass_rate"] == "62" and paper["ProRL (16)"]["samples_per_s"] == "36.5"
    assert ours(rows, "ProRL stage (start checkpoint)")["pass_rate"] == "35.0"
    r = ours(rows, "BroRL n512")
    assert r["pass_rate"] == ms([62.5, 60.0], "{:.1f}") and r["samples_per_s"] == ms([1200, 1150], "{:,.1f}")
    assert ours(rows, "BroRL n64")["pass_rate"].startswith("— (missing: no FINISHED train_arm run for arm n64 seed 1")
    assert float(cell(cells, "ProRL n16", "samples_per_s")["value"]) == pytest.approx((812.5 + 790) / 2)


def test_table3_tiny_columns_and_table4_5_gaps_in_the_tiny_profile(tiny, tmp_path):
    _, rows, cells, md = build(tiny, "table3", tmp_path)
    r = ours(rows, "ProRL stage (start checkpoint)")
    assert r["tiny_add"] == f"{100 * tiny.evals[('prorl', 'tiny_add')]['mean_at_k']:.2f}"
    assert all(r[b] == "— (not in the tiny profile)" for b in (*MATH, "avg"))
    paper = [x for x in rows if x["source"] == "paper"]
    assert paper[-1]["aime24"] == "57.50" and paper[-1]["tiny_add"] == "— (not in the paper)"
    _, rows4, _, md4 = build(tiny, "table4", tmp_path)
    assert "empty" in md4.splitlines()[0]
    assert ours(rows4, "BroRL n512")["apps"] == "— (not in the tiny profile)"
    assert [x["apps"] for x in rows4 if x["source"] == "paper"][0] == "58.52"
    _, rows5, _, _ = build(tiny, "table5", tmp_path)
    assert ours(rows5, "BroRL n512")["arc"] == "— (not in the tiny profile)"
    assert [x["avg"] for x in rows5 if x["source"] == "paper"][-1] == "63.09"


# --------------------------------------------------------------------------------------- t-test

def _instances(st, model):
    out = {}
    for b in TINY_BENCH:
        for s in per_sample(model, b):
            out[(b, s["id"])] = float(np.mean(s["correct"]))
    return out


def test_paired_ttest_matches_scipy(tiny, tmp_path):
    from scipy import stats

    out, rows, cells, md = build(tiny, "ttest", tmp_path)
    arm = {k: np.mean([_instances(tiny, f"n512-seed{s}")[k] for s in (0, 1)]) for k in _instances(tiny, "n512-seed0")}
    base = {k: np.mean([_instances(tiny, f"n16-seed{s}")[k] for s in (0, 1)]) for k in arm}
    keys = sorted(arm)
    a, b = np.array([arm[k] for k in keys]), np.array([base[k] for k in keys])
    expect = stats.ttest_rel(a, b, alternative="greater")
    assert out["best_arm"] == "n512"
    c = {x["column"]: x for x in cells if x["row"] == "n512 vs n16"}
    assert float(c["delta"]["value"]) == pytest.approx((a - b).mean(), rel=1e-12)
    assert float(c["t"]["value"]) == pytest.approx(expect.statistic, rel=1e-12)
    assert float(c["p_one_tailed"]["value"]) == pytest.approx(expect.pvalue, rel=1e-12)
    assert float(c["p_two_sided"]["value"]) == pytest.approx(stats.ttest_rel(a, b).pvalue, rel=1e-12)
    assert c["instances"]["value"] == repr(float(2 * N_PROBLEMS))
    assert set(c["t"]["run_ids"].split(";")) == {tiny.ids[(f"{m}-seed{s}", bb)] for m in ("n512", "n16")
                                                   for s in (0, 1) for bb in TINY_BENCH}
    assert out["metrics"]["ttest/best/t"] == pytest.approx(expect.statistic)
    # n64 lacks seed 1's evaluations: its comparison is a gap, not a test on partial data
    n64 = ours(rows, "n64 vs n16")
    assert n64["t"].startswith("— (missing: no FINISHED evaluate run for model n64-seed1")
    paper = [r for r in rows if r["source"] == "paper"][0]
    assert (paper["delta"], paper["t"], paper["p_one_tailed"]) == ("0.0033", "4.84", "6.5e-07")


# --------------------------------------------------------------------------------------- figures

def test_figures_are_written(tiny, tmp_path):
    for name in ("figure1", "figure4", "passk"):
        out = build_figure(name, tracking_uri=tiny.uri, experiment=tiny.experiment, profile="tiny",
                           out_png=tmp_path / f"{name}.png", out_csv=tmp_path / f"{name}.csv", plan=TINY_PLAN)
        png = tmp_path / f"{name}.png"
        assert png.stat().st_size > 5000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        pts = list(csv.DictReader(open(tmp_path / f"{name}.csv")))
        assert pts and out["run_ids"]
    # figure 1: the paper's Table 1 points beside our probe curves (start value at 0 h)
    f1 = list(csv.DictReader(open(tmp_path / "figure1.csv")))
    assert {("paper", "BroRL", "173.8", "63.03")} <= {(p["panel"], p["series"], p["x"], p["y"]) for p in f1}
    n16 = [p for p in f1 if p["series"] == "n16/seed0" and p["panel"] == "ours_hours"]
    assert float(n16[0]["y"]) == pytest.approx(30.0) and float(n16[-1]["x"]) == pytest.approx(720 / 3600)
    # pass@k: up to the largest k sampled
    pk = list(csv.DictReader(open(tmp_path / "passk.csv")))
    assert max(int(p["x"]) for p in pk) == K
    p8 = [p for p in pk if p["panel"] == "tiny_add" and p["series"] == "prorl" and p["x"] == str(K)][0]
    assert float(p8["y"]) == pytest.approx(100 * tiny.evals[("prorl", "tiny_add")][f"pass_at_{K}"])
    f4 = build_figure("figure4", tracking_uri=tiny.uri, experiment=tiny.experiment, profile="tiny",
                      out_png=tmp_path / "f4.png", plan=TINY_PLAN)
    assert any("n64-seed1" in g for g in f4["gaps"])


def test_curve_without_metrics_csv_rebuilds_cumulative_hours(tiny):
    store = RunStore(tiny.uri, tiny.experiment, "tiny")
    run = store.arm("n512", 1)  # logged without metrics.csv; wall_time_s restarts at its second stage
    frame = store.curve(run)
    assert float(frame["hours"].iloc[-1]) == pytest.approx(684 / 3600)
    assert frame["hours"].is_monotonic_increasing
    store.close()


# --------------------------------------------------------------------------------------- paper profile

@pytest.fixture(scope="module")
def paper(tmp_path_factory):
    """A paper-profile store: the math benchmarks and Reasoning Gym (per category) for three models."""
    root = tmp_path_factory.mktemp("tables_paper")
    old = os.environ.get("MLFLOW_TRACKING_URI")
    st = Store(root, "brorl-paper", "paper")
    os.environ["MLFLOW_TRACKING_URI"] = st.uri
    try:
        st.values = {}
        for j, model in enumerate(["prorl", "n16-seed0", "n512-seed0"]):
            for i, b in enumerate([*MATH, "reasoning_gym"]):
                m = {"mean_at_k": round(0.4 + 0.05 * i + 0.01 * j, 4), "pass_at_1": 0.5, "n_problems": 10.0}
                if b == "reasoning_gym":
                    m.update({f"category/{c}/mean_at_k": round(0.1 + 0.05 * ci + 0.01 * j, 4)
                              for ci, c in enumerate(RG_CATEGORIES)})
                if (model, b) != ("n16-seed0", "aime25"):
                    st.evaluate(model, b, samples=[{"id": "x", "category": "c", "correct": [1, 0]}], metrics=m)
                st.values[(model, b)] = m
        st.train("train_arm", TRAIN[("n16", "0")], {"arm": "n16", "seed": "0"}, n=16, b=512)
        st.train("train_arm", TRAIN[("n512", "0")], {"arm": "n512", "seed": "0"}, n=512, b=128)
        yield st
    finally:
        _restore_tracking(old)


def test_paper_profile_tables_3_4_5(paper, tmp_path):
    plan = {"profile": {"name": "paper", "start": "fetched", "data": "paper"},
            "rl": {"arms": {"seeds": [0], "batches": [{"n_rollouts": 16}, {"n_rollouts": 512}]}},
            "checkpoints": {"fetch": {"prorl": {}}}}
    _, rows, cells, _ = build(paper, "table3", tmp_path, plan=plan)
    r = ours(rows, "BroRL n512")
    assert r["source"] == "ours (paper)" and (r["n_rollouts"], r["prompts_per_step"], r["steps"]) == ("512", "128", "+46")
    for b in MATH:
        assert r[b] == f"{100 * paper.values[('n512-seed0', b)]['mean_at_k']:.2f}"
    assert r["avg"] == f"{np.mean([100 * paper.values[('n512-seed0', b)]['mean_at_k'] for b in MATH]):.2f}"
    assert r["tiny_add"] == "— (not in the paper profile)"
    base = ours(rows, "Baseline (ProRLv2 checkpoint, fetched)")
    assert base["steps"] == "— (not trained here: the ProRLv2 checkpoint is fetched)"
    assert ours(rows, "ProRL n16")["aime25"] == "— (missing: no FINISHED evaluate run for model n16-seed0 / aime25)"
    assert ours(rows, "ProRL n16")["avg"].startswith("— (missing:")
    _, rows4, _, md4 = build(paper, "table4", tmp_path, plan=plan)
    assert ours(rows4, "BroRL n512")["taco"] == "— (not evaluated: no code evaluation in the paper profile yet)"
    _, rows5, cells5, _ = build(paper, "table5", tmp_path, plan=plan)
    r5 = ours(rows5, "BroRL n512")
    for c in RG_CATEGORIES:
        assert r5[c] == f"{100 * paper.values[('n512-seed0', 'reasoning_gym')][f'category/{c}/mean_at_k']:.2f}"
    assert r5["avg"] == f"{100 * paper.values[('n512-seed0', 'reasoning_gym')]['mean_at_k']:.2f}"
    assert cell(cells5, "BroRL n512", "arc")["run_ids"] == paper.ids[("n512-seed0", "reasoning_gym")]
    _, rows1, _, _ = build(paper, "table1", tmp_path, plan=plan)
    r1 = ours(rows1, "BroRL n512")
    assert r1["tiny_avg"] == "— (not in the paper profile)"
    assert r1["reasoning_gym"] == f"{100 * paper.values[('n512-seed0', 'reasoning_gym')]['mean_at_k']:.2f}"
    assert r1["code"].startswith("— (not evaluated")


def test_plan_from_config_and_inferred(tiny):
    import yaml

    cfg = yaml.safe_load(open(Path(__file__).parents[1] / "config" / "config.yaml"))
    plan = Plan.from_config(cfg)
    assert [a.name for a in plan.arms] == ["n16", "n64", "n256", "n512", "schedule"] and plan.seeds == ["0", "1"]
    assert [a.n for a in plan.arms] == [16, 64, 256, 512, None] and plan.arms[-1].n_rollouts == (16, 64, 256, 512)
    # the declared benchmarks: the tiny profile's trained families that are evaluated (add, multiple today)
    assert plan.benchmarks == cfg["evaluation"]["benchmarks"] and set(TINY_BENCH) <= set(plan.benchmarks)
    assert plan.benchmarks == [f"tiny_{f}" for f in cfg["tasks"]["tasks"] if FAMILIES[f].evaluated]
    assert plan.train_prorl and plan.base_arm.name == "n16"
    store = RunStore(tiny.uri, tiny.experiment, "tiny")
    inferred = Plan.infer(store, Profile.from_config(cfg))  # the declared profile, not guessed from the runs
    assert inferred.arms == TINY_ARMS and inferred.seeds == ["0", "1"]  # arms read back from the runs' stage N
    assert inferred.benchmarks == TINY_BENCH
    assert inferred.data == "tasks" and inferred.train_prorl
    table, _ = make_table("table1", store, inferred)
    assert math.isclose(table.cell("BroRL n512", "steps").value, 46.5)
    # without a config: the profile every brorl command gets (BRORL_PROFILE), and one that is not the store's fails
    old = os.environ.get("BRORL_PROFILE")
    try:
        os.environ["BRORL_PROFILE"] = Profile(name="tiny", start="fetched", data="paper").to_json()
        declared = Plan.infer(store)
        assert (declared.data, declared.train_prorl) == ("paper", False)
        assert declared.benchmarks == TINY_BENCH  # the runs seen; the profile's facts are the declared ones
        with pytest.raises(ValueError, match="'paper' is not the store's 'tiny'"):
            Plan.infer(store, Profile(name="paper", start="fetched", data="paper"))
    finally:
        if old is None:
            os.environ.pop("BRORL_PROFILE", None)
        else:
            os.environ["BRORL_PROFILE"] = old
    store.close()


def test_tiny_columns_and_probes_derive_from_the_family_registry(tiny, tmp_path):
    """A family registered in process gets a benchmark, an lm-eval task, table columns and a figure probe."""
    from brorl.evaluation import benchmarks, tiny as tiny_eval
    from brorl.tables import figures, plan as plan_mod
    from brorl.tasks.families import Family, Problem, evaluated_families

    base = plan_mod.TINY
    assert base == tuple(f"tiny_{f}" for f in evaluated_families()) and set(TINY_BENCH) <= set(base)
    assert figures.TINY_PROBES.get("tiny_multiple") == "probe_multi_q_pos_mean"
    assert "tiny_mul" not in benchmarks.benchmark_names()  # mul: trained only (evaluated=False)

    def sample_zz(rng, s):
        a, b = sorted(int(x) for x in rng.integers(0, 10, 2))[::-1]
        return Problem(f"{a}-{b}=", str(a - b), (str(a - b),), {"a": a, "b": b})

    FAMILIES["zz"] = Family("zz", sample_zz, lambda s: (0, 9))  # a throwaway single-answer family
    try:
        assert plan_mod.TINY == (*base, "tiny_zz")
        bench = benchmarks.get_benchmark("tiny_zz")
        assert bench.lm_eval_task == "brorl_tiny_zz" and bench.source == "tasks"
        out = tiny_eval.render_tasks(None, tmp_path / "tasks")
        assert sorted(p.name for p in out.iterdir()) == sorted(
            ["brorl_tiny.yaml", *(f"brorl_{b}.yaml" for b in base), "brorl_tiny_zz.yaml", "utils.py"])
        assert "- brorl_tiny_zz" in (out / "brorl_tiny.yaml").read_text()
        # another single-answer family drawn beside add: probe_q_pos_mean averages both, so neither gets it
        assert "tiny_add" not in figures.TINY_PROBES and "tiny_zz" not in figures.TINY_PROBES
        assert figures.tiny_probe("tiny_zz", ["tiny_zz", "tiny_multiple"]) == "probe_q_pos_mean"
        plan = Plan(profile="tiny", arms=TINY_ARMS, seeds=[0, 1], benchmarks=[*TINY_BENCH, "tiny_zz"])
        _, rows, _, md = build(tiny, "table3", tmp_path, plan=plan)
        assert ours(rows, "BroRL n512")["tiny_zz"].startswith("— (missing")  # planned, no run: an explicit gap
        assert "tiny avg: over tiny_add, tiny_multiple and tiny_zz" in md
        _, rows1, _, _ = build(tiny, "table1", tmp_path, plan=plan)
        assert ours(rows1, "BroRL n512")["tiny_avg"].startswith("— (missing")  # the average waits for tiny_zz
        _, rows, _, md = build(tiny, "table3", tmp_path)  # a plan without tiny_zz: its column says so
        assert ours(rows, "BroRL n512")["tiny_zz"] == "— (not in the tiny profile)"
        assert "tiny avg: over tiny_add and tiny_multiple" in md
    finally:
        del FAMILIES["zz"]
    assert "tiny_zz" not in benchmarks.benchmark_names() and plan_mod.TINY == base


# --------------------------------------------------------------------------------------- small profile

def test_small_profile_baseline_is_its_start_model_and_absent_categories_say_so(tmp_path):
    """The small profile's fetched start is rl.start_model (smollm2), not a ProRLv2 checkpoint: its evaluation fills
    the baseline row; Reasoning Gym categories its tasks do not cover are 'not evaluated', not 'missing'."""
    import yaml

    cfg = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "small.yaml").read_text())
    plan_cfg = {k: cfg.get(k) for k in ("profile", "rl", "evaluation", "checkpoints")}
    plan = Plan.from_config(plan_cfg)
    assert plan.start_model == "smollm2" and "smollm2" not in plan.extra_models and not plan.train_prorl
    old = os.environ.get("MLFLOW_TRACKING_URI")
    st = Store(tmp_path, "brorl-small", "small")
    os.environ["MLFLOW_TRACKING_URI"] = st.uri
    try:
        for j, model in enumerate(["smollm2", "n16-seed0", "n64-seed0"]):
            st.evaluate(model, "reasoning_gym", samples=[{"id": "x", "category": "arithmetic", "correct": [1, 0]}],
                        metrics={"mean_at_k": 0.15 + 0.01 * j, "category/arithmetic/mean_at_k": 0.15 + 0.01 * j})
        st.train("train_arm", TRAIN[("n16", "0")], {"arm": "n16", "seed": "0"}, n=16, b=8)
        st.train("train_arm", TRAIN[("n64", "0")], {"arm": "n64", "seed": "0"}, n=64, b=2)
        _, rows, _, _ = build(st, "table5", tmp_path, plan=plan_cfg)
        _, rows1, _, _ = build(st, "table1", tmp_path, plan=plan_cfg)
    finally:
        _restore_tracking(old)
    base = ours(rows, "Baseline (start model smollm2, fetched)")
    assert base["source"] == "ours (small)" and base["arithmetic"] == "15.00" and base["avg"] == "15.00"
    assert base["steps"] == "— (not trained here: the start model smollm2 is fetched)"
    assert ours(rows, "BroRL n64")["algebra"] == "— (not evaluated: no algebra task in the small profile's reasoning_gym)"
    assert not [r for r in rows if "ProRLv2" in r["row"] and r["source"].startswith("ours")]
    assert ours(rows1, "Baseline (start model smollm2, fetched)")["reasoning_gym"] == "15.00"
