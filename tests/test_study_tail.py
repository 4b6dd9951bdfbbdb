"""Issue 29 items 2-4: the study's refill key, the slope plateau stop and the premise run, the tail-dominated pool and
its decision rule (the end-to-end smoke run through Snakemake: test_study_tail_pipeline.py)."""

import json

import numpy as np
import pytest

from brorl.config import PROJECT_ROOT
from brorl.pipeline import load_config
from brorl.study import heldout as H
from brorl.study.plan import (BASE, REFILL, _axes, all_settings, arm_jobs, arm_spec, premise_stage, stage_for,
                              study_errors, study_plan)
from brorl.training.settings import RLSettings, slope_upper_bound

from test_study import _write_arm

COMBOS = {"study": ["config/config.yaml", "config/study.yaml"],
          "study_batch": ["config/config.yaml", "config/study.yaml", "config/study_batch.yaml"],
          "ci": ["tests/configs/ci.yaml"],
          "paper_study": ["config/paper.yaml", "config/paper_study.yaml"]}
TAIL = ["config/config.yaml", "config/study.yaml", "config/study_tail.yaml"]
TAIL_MORE = TAIL + ["config/study_tail_more.yaml"]  # + the refill variant (declared, not run)


def cfg_of(files):
    return load_config(*[PROJECT_ROOT / f for f in files])


# --- item 4: refill ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("combo", sorted(COMBOS))
def test_every_existing_setting_plans_the_same_stages_as_before_the_refill_key(combo):
    """tests/data/study_stages_before.json: every (setting, N) arm_spec of the existing study configs, written by the
    code before `study.refill` existed (branch i29-stats). Keys added later to rl.recipe by other changes are not
    compared, nor the micro-batch (memory only; the paper profile's changed); every other value must be equal."""
    before = json.loads((PROJECT_ROOT / "tests/data/study_stages_before.json").read_text())[combo]
    cfg = cfg_of(COMBOS[combo])
    rl, study = cfg["rl"], cfg["study"]
    assert sorted(all_settings(study)) == sorted(before)
    for setting, by_n in before.items():
        assert sorted(map(int, by_n)) == sorted(_axes(study, setting)["ns"])
        for n, old in by_n.items():
            new = arm_spec(rl, study, setting, int(n))
            assert (new["start"], new["pool"]) == (old["start"], old["pool"])
            memory_only = {"micro_batch_size"}  # config/paper.yaml's micro-batch 8 -> 4 (issue 27's memory plan)
            assert ({k: new["stage"].get(k) for k in old["stage"] if k not in memory_only}
                    == {k: v for k, v in old["stage"].items() if k not in memory_only}), (setting, n)
            assert (new["stage"]["max_rounds"], new["stage"]["round_prompts"]) == (1, 0)


def test_refill_is_a_study_key_and_a_setting_axis():
    cfg = cfg_of(COMBOS["study"])
    rl, study = cfg["rl"], cfg["study"]
    assert REFILL == {"max_rounds": 1, "round_prompts": 0}
    paper = {**study, "refill": {"max_rounds": 10, "round_prompts": 0}}  # the paper's kept-batch geometry
    for setting in all_settings(study):
        st = RLSettings.from_dict(stage_for(rl, paper, setting, 512, 0))
        assert (st.max_rounds, st.round_prompts, st.dynamic_sampling) == (10, 0, True)
        # the budget still counts generated samples: equal in total across N, so the comparison stays equal-samples
        assert st.sample_budget == RLSettings.from_dict(stage_for(rl, paper, setting, 16, 0)).sample_budget \
            or st.time_budget_s
    one = {**study, "ablations": {**study["ablations"], "fresh": {"pool": "fresh", "refill": {"max_rounds": 4}}}}
    assert stage_for(rl, one, "fresh", 512, 0)["max_rounds"] == 4
    assert stage_for(rl, one, BASE, 512, 0)["max_rounds"] == 1
    # a refilled arm is a different run from the unrefilled one: not reused
    assert study_plan(rl, one)["fresh"] == {16: "fresh", 512: "fresh"}


def test_refill_is_validated_by_the_schema():
    from brorl.pipeline import validate_config

    cfg = cfg_of(COMBOS["study"])
    cfg["study"]["refill"] = {"max_rounds": 0}
    with pytest.raises(Exception, match="max_rounds"):
        validate_config(cfg)


# --- item 2: the slope plateau and the premise run -----------------------------------------------------------------

def slope_rule(window=10, slope=0.002):
    return RLSettings(plateau_rule="slope", plateau_window=window, plateau_slope=slope, probe_every=1, steps=10)


def test_slope_upper_bound_is_the_ols_slope_plus_t_times_its_standard_error():
    from scipy import stats

    y = [0.3, 0.32, 0.31, 0.35, 0.34, 0.37, 0.36]
    fit = stats.linregress(range(len(y)), y)
    assert slope_upper_bound(y) == pytest.approx(fit.slope + stats.t.ppf(0.95, len(y) - 2) * fit.stderr)
    with pytest.raises(ValueError, match="at least 3"):
        slope_upper_bound([0.1, 0.2])


def test_a_rising_noisy_curve_does_not_stop_a_flat_noisy_one_does():
    rng = np.random.default_rng(0)
    s = slope_rule(window=10, slope=0.002)
    flat = list(0.5 + rng.normal(0, 0.001, 30))
    rising = list(0.3 + 0.01 * np.arange(30) + rng.normal(0, 0.005, 30))
    assert s.plateaued(flat) and not s.plateaued(rising)
    assert not s.plateaued(flat[:9])  # fewer probes than the window: never


def test_the_bound_not_the_point_estimate_decides():
    """Two windows with the same point slope (below the threshold): the noisy one has a wide bound and runs on."""
    x = np.arange(10)
    s = slope_rule(window=10, slope=0.002)
    wiggle = np.array([1, -1, 1, -1, 1, 1, -1, 1, -1, 1])  # symmetric about the middle: adds no slope
    quiet = list(0.5 + 0.001 * x + 0.0005 * wiggle)
    noisy = list(0.5 + 0.001 * x + 0.02 * wiggle)
    from scipy import stats

    assert stats.linregress(x, quiet).slope == pytest.approx(stats.linregress(x, noisy).slope, abs=1e-4)
    assert stats.linregress(x, noisy).slope < 0.002
    assert s.plateaued(quiet) and not s.plateaued(noisy)


def test_the_default_rule_is_still_best_of_window():
    s = RLSettings(plateau_window=2, plateau_delta=0.005, probe_every=1, steps=10)
    assert s.plateau_rule == "best"
    assert s.plateaued([0.5, 0.6, 0.601, 0.603]) and not s.plateaued([0.5, 0.6, 0.601, 0.61])
    # the tiny profile's ProRL stage (its numbers must not move): no plateau_rule key, so the best-of-window rule
    from brorl.training.arms import prorl_settings

    assert RLSettings.from_dict(prorl_settings(cfg_of(["config/config.yaml"])["rl"])).plateau_rule == "best"


@pytest.mark.parametrize("kwargs, key", [({"plateau_rule": "mean"}, "plateau_rule"),
                                         ({"plateau_rule": "slope", "plateau_window": 2, "plateau_slope": 0.1}, "plateau_window"),
                                         ({"plateau_rule": "slope", "plateau_window": 5}, "plateau_slope")])
def test_slope_rule_errors_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        RLSettings(probe_every=1, steps=10, **kwargs)


def test_premise_stage_is_continued_n16_with_the_slope_stop_and_its_budget():
    from brorl.profile import Profile

    cfg = cfg_of(TAIL)
    st = RLSettings.from_dict({**premise_stage(Profile.from_config(cfg), cfg["rl"], cfg["study"]), "seed": 0})
    prorl = cfg["rl"]["prorl"]
    assert (st.n_rollouts, st.prompts_per_step) == (16, prorl["prompts_per_step"])
    assert (st.plateau_rule, st.plateau_window, st.plateau_slope, st.probe_every) == ("slope", 20, 0.0005, 5)
    assert st.sample_budget == 786432 and st.max_steps == 786432 // st.samples_per_step


# --- item 3: the tail pool and the overlay -------------------------------------------------------------------------

def test_the_tail_overlay_runs_brorls_comparison_on_the_tail_pool_with_five_seeds():
    from brorl.study.plan import premise_seeds, settings_names

    run = cfg_of(TAIL)["study"]  # what was run: three settings (4 distinct arm jobs) and the premise run, 3 seeds
    assert premise_seeds(run) == [0, 1, 2]
    assert settings_names(run) == ["tail_comparison", "tail_comparison_const", "tail_equal_step"]
    assert len(arm_jobs(cfg_of(TAIL)["rl"], run)) == 4
    cfg = cfg_of(TAIL_MORE)
    rl, study = cfg["rl"], cfg["study"]
    assert premise_seeds(study) == [0, 1, 2]
    assert study["seeds"] == [0, 1, 2, 3, 4] and study["decision"] == {"setting": "tail_comparison", "margin": 0.01,
                                                                        "alpha": 0.05}
    assert study_errors(cfg) == []
    plan = study_plan(rl, study)
    assert plan == {"tail_comparison": {16: "tail_comparison", 512: "tail_comparison"},
                    "tail_comparison_const": {16: "tail_comparison", 512: "tail_comparison_const"},
                    "tail_equal_step": {16: "tail_equal_step", 512: "tail_comparison_const"},
                    "tail_comparison_refill": {16: "tail_comparison_refill", 512: "tail_comparison_refill"}}
    assert len(arm_jobs(rl, study)) == 6
    st = {(s, n): RLSettings.from_dict(stage_for(rl, study, s, n, 0)) for s in plan for n in (16, 512)}
    from brorl.training.trainer import learning_rate

    assert (st["tail_comparison", 16].prompts_per_step, st["tail_comparison", 512].prompts_per_step) == (128, 32)
    assert learning_rate(st["tail_comparison", 16]) == pytest.approx(3e-4)  # the stage lr at S
    assert learning_rate(st["tail_comparison", 512]) == pytest.approx(3e-4 * 8 ** 0.5)  # sqrt rule at 8S
    assert learning_rate(st["tail_comparison_const", 512]) == pytest.approx(3e-4)
    assert st["tail_equal_step", 16].samples_per_step == st["tail_equal_step", 512].samples_per_step == 16384
    assert st["tail_comparison_refill", 16].max_rounds == 10 and st["tail_comparison", 16].max_rounds == 1
    assert all(arm_spec(rl, study, s, 16)["pool"] == "tail" for s in plan)
    # the configured test split: >= ~150 test prompts in the band at the start's validation share (8.5%, issue 29)
    assert study["tail_pool"]["test_size"] * 0.085 >= 150


@pytest.mark.parametrize("change, message", [
    ({"tail_pool": None}, "study.ablations.tail_comparison.pool: `tail` needs study.tail_pool"),
    ({"premise": {"sample_budget": 1000}}, "study.premise.plateau_slope: required"),
    ({"decision": {"setting": "nope", "margin": 0.01, "alpha": 0.05}}, "study.decision.setting: 'nope'"),
])
def test_tail_and_premise_errors_name_the_key(change, message):
    cfg = cfg_of(TAIL)
    cfg["study"] = {**cfg["study"], **change}
    assert any(message in e for e in study_errors(cfg)), study_errors(cfg)


def test_select_keeps_only_the_band_and_not_the_fixed_pool():
    from brorl.study.tail import select

    recs = [{"task": "add", "prompt": f"{i}+1="} for i in range(6)]
    p = np.array([0.0, 1 / 400, 1 / 100, 1 / 17, 1 / 16, 0.5])
    kept, counts = select(recs, p, exclude={("add", "2+1=")})
    assert [r["prompt"] for r in kept] == ["1+1=", "3+1="]  # 1/512 < p < 1/16; 2+1= was trained on
    assert counts["add"] == {"candidates": 5, "seen_in_fixed_pool": 1, "zero": 1, "band": 2, "above": 2}
    assert kept[0]["start_pass_rate"] == pytest.approx(1 / 400)


@pytest.mark.parametrize("delta, p, outcome", [(0.02, 0.01, "supported"), (0.005, 0.001, "not supported (not resolved"),
                                               (0.02, 0.2, "not supported (not resolved"),
                                               (-0.02, 0.01, "not supported (N=16 is better on the band, by 0.0200)"),
                                               (-0.0002, 0.037, "not supported (N=16 is better on the band, by 0.0002: "
                                                                "smaller than the margin 0.01")])
def test_the_decision_rule(delta, p, outcome):
    from brorl.study.report import decide

    rule = {"setting": "tail_comparison", "margin": 0.01, "alpha": 0.05}
    assert decide(rule, {"testable": True, "delta": delta, "p_two_sided": p}).startswith(outcome)
    assert decide(rule, {"testable": False, "why": "2 seed(s) < 3"}).startswith("not testable")


def _premise_run(folder, seed, start, end, stopped, samples):
    _write_arm(folder, seed, start, end, 512, 4, 16)
    s = json.loads((folder / "summary.json").read_text())
    (folder / "summary.json").write_text(json.dumps({**s, "stopped": [stopped], "generated_samples": samples}))  # per stage


@pytest.mark.parametrize("stopped, first", [("plateau", "**Premise met at 20,480 samples**"),
                                            ("sample_budget", "**Premise: did not plateau within budget 786,432 samples**"),
                                            (None, "**Premise test not run** (`study.premise.run: false`)")])
def test_summary_opens_with_the_premise_then_the_tail_pool(tmp_path, stopped, first):
    """write_summary on hand-made arms of the tail overlay: N=512 gains on the band only."""
    from brorl.study.plan import all_settings
    from brorl.study.report import write_summary

    cfg = cfg_of(TAIL)
    rl, study = cfg["rl"], {**cfg["study"], "include": ["tail_comparison", "tail_comparison_const", "tail_equal_step"]}
    # run: false: no premise folder; the first line says so, with a cost estimate
    study["premise"] = {**study["premise"], "run": stopped is not None}
    rng = np.random.default_rng(3)
    start = np.concatenate([rng.uniform(0.003, 0.06, 40), rng.uniform(0.2, 0.9, 160)])  # 40 test prompts in the band
    band = np.arange(start.size) < 40
    for setting, n, band_gain, gain in (("tail_comparison", 16, 0.01, 0.05), ("tail_comparison", 512, 0.05, 0.03),
                                        ("tail_comparison_const", 512, 0.012, 0.05), ("tail_equal_step", 16, 0.0, 0.02)):
        st = RLSettings.from_dict(stage_for(rl, study, setting, n, 0))
        for seed in range(5):
            end = np.clip(start + np.where(band, band_gain, gain) + rng.normal(0, 0.003, start.size), 0, 1)
            _write_arm(tmp_path / setting / f"n{n}" / f"seed{seed}", seed, start, end, st.samples_per_step,
                       st.sample_budget // st.samples_per_step, n)
            held = tmp_path / setting / f"n{n}" / f"seed{seed}" / "heldout.json"
            h = json.loads(held.read_text())
            held.write_text(json.dumps({**h, "train_pool": {"prompts": 50, "q_pos_start": 0.02, "q_pos_end": 0.02 + band_gain,
                                                            "zero_share_end": 0.1}}))
    if stopped:
        _premise_run(tmp_path / "premise" / "seed0", 0, start, start + 0.01, stopped, 20480 if stopped == "plateau" else 786432)
    (tmp_path / "data_tail").mkdir()
    (tmp_path / "data_tail" / "tail_pool.json").write_text(json.dumps({
        "candidates": 1000, "kept": 90, "kept_share": 0.09, "test_prompts": 200, "test_in_band_single_answer": 40}))
    out = {k: tmp_path / k for k in ("summary.md", "summary.csv", "delta.png", "base.png")}
    as_json = json.loads(json.dumps(study, sort_keys=True))
    verdicts = write_summary(rl, as_json, tmp_path, *out.values(), order=all_settings(study))
    md = out["summary.md"].read_text()
    lines = md.splitlines()
    assert lines[0].startswith("# The N-scaling study") and lines[2].startswith(first)
    if stopped is None:  # 5 N=16 arms of 98,304 samples in 480 s each: 204.8 samples/s -> 786,432 in 64 min
        assert "at least 64 min per seed at the median rate of this study's 5 N=16 arm run(s) of 2,048 samples per step" \
            in lines[2]
        assert "## The premise test (measured plateau)" not in md
    else:
        assert md.index("## The premise test (measured plateau)") < md.index("## The tail-dominated pool")
    assert md.index("## The tail-dominated pool") < md.index("## BroRL's comparison")
    tail = md.split("## The tail-dominated pool")[1].split("\n## ")[0]
    assert "90 of 1,000 fresh candidate prompts (9.0%)" in tail and "200 prompts, 40 of them in the band" in tail
    assert "by > 0.01 at seed-level p < 0.05. **Outcome: supported.**" in tail
    row = next(r for r in tail.splitlines() if r.startswith("| tail_comparison |"))
    assert "| 40 | +0.04" in row and "**won**" in row  # band: N=512 +0.05 vs N=16 +0.01, 5 seeds
    # on the full test set N=512 gains less (0.03 vs 0.05 on 160 of 200 prompts): the band is where it wins
    assert verdicts["tail_comparison"]["delta"] < 0
    assert "| tail_comparison | 512 | 5 |" in tail and "0.0200 -> 0.0700" in tail  # the training pool's own tail
    verdict = md.split("## Verdict\n\n")[1].split("\n## ")[0]
    premise_row = "| the premise, measured (continued N=16 plateaus by the slope stop) | " + (
        "premise run, 1 seed(s), budget 786,432" if stopped else "not run (budget 786,432 samples; at least 64 min")
    assert premise_row in verdict
    if stopped:  # the held-out gain of the one seed written, with its seed-level test (not testable: 1 seed < 3)
        assert "(Δ: held-out mean@k, end - start) | +0.0100 | not testable" in verdict
    assert {"plateau": "**holds**", "sample_budget": "**does not hold within the budget**",
            None: "**not testable (not run)**"}[stopped] in verdict
    assert "| BroRL's mechanism on the tail pool (decision rule: Δ on the band > 0.01, p < 0.05) |" in verdict \
        and "40 test prompts in the band | +0.04" in verdict and "| **supports** |" in verdict
    # the equal-per-step partner (N=16 x 1,024 vs N=512 x 32 at 3e-4) has its own row: +0.03 on the full test set
    assert "| larger N beats N=16 at equal samples per step and equal steps (tail_equal_step) |" in verdict
    assert "## The premise: does" not in md  # tail-pool N=16 arms do not test the start's saturation
    # verdicts.csv holds every decision's per-seed values (issue 29: seeds are the unit, per-seed values in the CSVs)
    import csv

    rows = {(r["comparison"], r["kind"]): r for r in csv.DictReader(open(tmp_path / "verdicts.csv"))}
    band = rows[("tail_comparison", "band: best larger N - N=16")]
    assert band["verdict"] == "won" and len(band["per_seed"].split()) == 5 and band["prompts"] == "40"
    assert float(band["seed_p"]) < 0.05 and abs(float(band["delta"]) - 0.04) < 0.005
    pool = rows[("tail_comparison", "training pool: best larger N - N=16")]  # no per-prompt pool p written here
    assert pool["seed_test"] == "not testable (no per-prompt training-pool p in the arms' heldout.npz)"
    premise = rows.get(("premise run", "premise run: end - start"))
    if stopped is None:
        assert premise is None
    else:  # one seed written: its gain is listed, not testable
        assert premise["seed_test"].startswith("not testable") and abs(float(premise["per_seed"]) - 0.01) < 1e-6


def test_premise_declared_not_run_has_no_seeds_to_run():
    """``study.premise.run: false`` (issue 29: run it if the tail result leaves the question open): the rule's files
    leave the summary's inputs; absent premise: none either; the default runs its seeds."""
    from brorl.study.plan import premise_seeds, settings_names

    p = {"sample_budget": 1000, "plateau_slope": 0.001}
    assert premise_seeds({"premise": p}) == [0]
    assert premise_seeds({"premise": {**p, "seeds": [1, 2]}}) == [1, 2]
    assert premise_seeds({"premise": {**p, "run": False}}) == [] and premise_seeds({}) == []
