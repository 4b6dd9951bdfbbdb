"""Issue 29, the weak-transfer question: the ``lookup`` family and its reward, the transfer check, the study_weak overlay
(pool of one family, decision on the training pool) and the summary's order (premise, tail pool, earlier settings)."""

import csv
import json

import numpy as np
import pytest

from brorl.config import PROJECT_ROOT
from brorl.pipeline import load_config
from brorl.study import heldout as H
from brorl.study.plan import arm_jobs, settings_names, stage_for, study_errors
from brorl.tasks import ALPHABET, TaskSettings, enumerate_candidates, generate_split, verify
from brorl.tasks.lookup import lookup_answer
from brorl.training.settings import RLSettings

from test_study import _write_arm

TAIL = ["config/config.yaml", "config/study.yaml", "config/study_tail.yaml"]
WEAK = TAIL + ["config/study_weak.yaml"]
EOS = "<|endoftext|>"


def cfg_of(files):
    return load_config(*[PROJECT_ROOT / f for f in files])


# --- the family and its reward -------------------------------------------------------------------------------------

def test_lookup_answers_are_a_keyed_hash_uniform_over_the_universe():
    recs = generate_split("lookup", "train", 20000, 1234)
    s = TaskSettings()
    assert all(set(r["prompt"]) <= set(ALPHABET) and len(r["prompt"]) == 8 for r in recs)  # x<6 digits>=
    assert all(r["answers"] == [r["answer"]] and r["universe"] == [0, 99] for r in recs)
    assert all(r["answer"] == lookup_answer(r["prompt"], s) for r in recs[:200])  # a function of the prompt text
    counts = np.bincount([int(r["answer"]) for r in recs], minlength=100)
    assert counts.size == 100 and counts.min() > 0.6 * 200 and counts.max() < 1.4 * 200  # uniform: 200 expected each
    other = TaskSettings(lookup_key=30)  # another key: another table (agrees on ~1/100 of prompts by chance)
    same = np.mean([lookup_answer(r["prompt"], other) == r["answer"] for r in recs[:5000]])
    assert same < 0.03


def test_other_prompts_answers_do_not_predict_a_prompts_answer():
    """The nearest training prompt's answer (q +- 1 in the same 10^6 space), and the most frequent training answer,
    predict a held-out prompt's answer no better than chance (1/100)."""
    s = TaskSettings()
    test = generate_split("lookup", "test", 3000, 1234)
    neighbour = np.mean([lookup_answer(f"x{(r['q'] + 1) % 10**6:06d}=", s) == r["answer"] for r in test])
    train = generate_split("lookup", "train", 20000, 1234)
    majority = np.bincount([int(r["answer"]) for r in train]).argmax()
    assert neighbour < 0.03 and np.mean([int(r["answer"]) == majority for r in test]) < 0.03


def test_the_reward_pays_exactly_the_answer_and_never_a_wrong_one():
    """verify over the whole universe: one candidate paid per prompt, the hashed one; garbage is 0, never an error."""
    for r in generate_split("lookup", "validation", 50, 1234):
        paid = [c for c in enumerate_candidates(r) if verify(r, c + EOS) == 1.0]
        assert paid == [r["answer"]]
        for wrong in (r["answer"] + "0", "0" + r["answer"], r["answer"] + " ", " " + r["answer"], "", "-1", "100",
                      r["answer"] * 2 + EOS, "x" + r["answer"] + EOS):
            assert verify(r, wrong) == 0.0, wrong
        for garbage in (None, 7, 7.0, b"\xff\xfe", ["7"], {"a": 1}, "\x00" * 50):
            assert verify(r, garbage) == 0.0
    assert verify({"task": "lookup"}, "7" + EOS) == 0.0  # a broken record: no answer, no pay, no raise


def test_the_trl_reward_over_token_ids_never_pays_a_wrong_completion():
    from brorl.models.sft import tokenizer_corpus
    from brorl.models.tokenizer import build_tokenizer
    from brorl.tasks.source import TaskSource

    ts = TaskSettings(tasks=("add", "lookup"))
    tok = build_tokenizer(tokenizer_corpus(ts))
    recs = generate_split("lookup", "validation", 40, 1234, settings=ts)
    reward = TaskSource().reward(recs, tok)
    eos = tok.eos_token_id
    ids = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    right = [ids(r["answer"]) + [eos] for r in recs]
    wrong = [ids(str((int(r["answer"]) + 1) % 100)) + [eos] for r in recs]
    rng = np.random.default_rng(0)
    garbage = [rng.integers(0, len(tok), rng.integers(0, 6)).tolist() for _ in recs]
    index = list(range(len(recs)))
    assert reward(None, None, right, index) == [1.0] * len(recs)
    assert reward(None, None, wrong, index) == [0.0] * len(recs)
    paid = reward(None, None, garbage, index)
    assert all(p == 0.0 or tok.decode(g, skip_special_tokens=False).split(EOS)[0] == r["answer"]
               for p, g, r in zip(paid, garbage, recs))


@pytest.mark.parametrize("key, value", [("lookup_answers", 1), ("lookup_digits", 0), ("lookup_digits", 10)])
def test_bad_lookup_settings_name_the_key(key, value):
    with pytest.raises(ValueError, match=f"tasks.{key}"):
        TaskSettings(**{key: value})


# --- the transfer check --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def warm_lookup_model():
    """A small model taught lookup's format and answer marginal on prompts disjoint from the check's (another sampling
    seed in the train region), so the check measures transfer of answers, not of the format."""
    import torch

    from brorl.models.settings import ModelSettings
    from brorl.models.sft import build_model, tokenizer_corpus
    from brorl.models.tokenizer import build_tokenizer
    from brorl.study.transfer import TransferSettings, _pairs, _teacher_force

    torch.manual_seed(0)
    ts = TaskSettings(tasks=("add", "lookup"))
    tok = build_tokenizer(tokenizer_corpus(ts))
    model = build_model(ModelSettings(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128), tok, seed=0)
    check = generate_split("lookup", "train", 128, ts.seed, settings=ts)
    seen = {r["prompt"] for r in check}
    warm = [r for r in generate_split("lookup", "train", 2000, 99, partition_seed=ts.seed, settings=ts)
            if r["prompt"] not in seen]
    _teacher_force(model, _pairs(tok, warm), TransferSettings(steps=100, batch_size=64, lr=3e-3))
    return model, tok, check


CHECK = {"prompts": 128, "steps": 150, "batch_size": 64, "lr": 3e-3}


@pytest.mark.slow  # the two: 1.5-3.5 min of wall time at load average 5-9 on the 2-core machine (2026-12-06)
def test_training_on_half_the_lookup_prompts_does_not_lift_the_other_half(warm_lookup_model):
    import copy

    from brorl.study.transfer import TransferSettings, transfer_check

    model, tok, check = warm_lookup_model
    r = transfer_check(copy.deepcopy(model), tok, check, TransferSettings(**CHECK))
    assert r["prompts_a"] == r["prompts_b"] == 64 and r["families"] == ["lookup"]
    assert 0.005 < r["b_start"] < 0.02  # the warm model puts ~1/100 on every answer: the band
    assert r["gain_a"] > 0.05  # it memorises the trained half ...
    assert r["gain_b"] < 0.3 * r["gain_a"] and r["transfer"] < 0.3  # ... and the other half hardly moves


@pytest.mark.slow
def test_the_check_sees_transfer_where_answers_share_a_rule(warm_lookup_model):
    """The same prompts and model with one answer for all ("7"): training on half A lifts half B as much (transfer ~1)."""
    import copy

    from brorl.study.transfer import TransferSettings, transfer_check

    model, tok, check = warm_lookup_model
    shared = [{**r, "answer": "7", "answers": ["7"]} for r in check]
    r = transfer_check(copy.deepcopy(model), tok, shared, TransferSettings(**CHECK))
    assert r["gain_a"] > 0.05 and r["gain_b"] > 0.7 * r["gain_a"] and r["transfer"] > 0.7


def test_the_transfer_check_needs_two_halves():
    from brorl.study.transfer import split_halves, transfer_check

    a, b = split_halves(7, 0)
    assert len(a) == 4 and len(b) == 3 and not set(a) & set(b) and set(a) | set(b) == set(range(7))
    with pytest.raises(ValueError, match="at least 2"):
        transfer_check(None, None, generate_split("lookup", "train", 1, 1234))


# --- the study_weak overlay ------------------------------------------------------------------------------------------

def test_the_weak_overlay_runs_the_tail_comparison_on_lookup_alone_and_decides_on_the_training_pool():
    from brorl.study.tail import candidate_tasks

    cfg = cfg_of(WEAK)
    rl, study = cfg["rl"], cfg["study"]
    assert study_errors(cfg) == []
    assert cfg["profile"]["overlay"] == "study_weak" and cfg["profile"]["reuses"] == ["theory"]  # own start: its mix
    assert cfg["tasks"]["tasks"] == ["add", "multiple", "lookup"] and cfg["sft"]["select_tasks"] == ["add"]
    assert study["seeds"] == [0, 1, 2, 3, 4]
    assert study["decision"] == {"setting": "tail_comparison", "margin": 0.01, "alpha": 0.05, "prompts": "train_pool"}
    assert settings_names(study) == ["tail_comparison", "tail_comparison_const", "tail_equal_step"]
    assert len(arm_jobs(rl, study)) == 4  # as study_tail: N=16 x 128, N=512 sqrt, N=512 const, N=16 x 1,024
    assert candidate_tasks(cfg["tasks"], study["tail_pool"]).tasks == ("lookup",)
    st = RLSettings.from_dict(stage_for(rl, study, "tail_comparison", 512, 0))
    assert (st.n_rollouts, st.prompts_per_step) == (512, 32)
    # the pool holds the N=16 x 1,024 arm's batch: min_prompts; every lookup prompt sits near 1/100 at the start
    assert study["tail_pool"]["min_prompts"] >= 1024 and study["tail_pool"]["candidates"] >= 2 * 1024


@pytest.mark.parametrize("families, message", [(["nope"], "study.tail_pool.families[0]: 'nope' is not a family"),
                                               (["multiple"], "study.tail_pool.families[0]: 'multiple' is a multi-answer")])
def test_tail_pool_families_are_checked(families, message):
    cfg = cfg_of(WEAK)
    cfg["study"]["tail_pool"] = {**cfg["study"]["tail_pool"], "families": families}
    assert any(message in e for e in study_errors(cfg)), study_errors(cfg)


def test_deciding_on_the_training_pool_needs_a_tail_pool_setting():
    cfg = cfg_of(WEAK)
    cfg["study"]["ablations"]["tail_comparison"] = {**cfg["study"]["ablations"]["tail_comparison"], "pool": "fixed"}
    assert any(e.startswith("study.decision.prompts: train_pool needs the decision setting 'tail_comparison' on "
                            "`pool: tail`") for e in study_errors(cfg)), study_errors(cfg)
    assert study_errors(cfg_of(WEAK)) == []


def test_a_missing_earlier_csv_is_a_config_error_naming_the_key():
    cfg = cfg_of(TAIL)
    cfg["study"]["earlier"] = {"gone": "docs/results/study/nope/verdicts.csv"}
    assert any(e.startswith("study.earlier.gone: docs/results/study/nope/verdicts.csv is not a file")
               for e in study_errors(cfg))


# --- the summary: premise, tail pool (decided on the training pool), earlier settings ---------------------------------

def _old_summary(path):
    path.write_text(
        "## The 2x2 factorial: N x batch\n\n| effect | estimate | t | p (two-sided) | per-seed |\n|---|---|---|---|---|\n"
        "| N | -0.16 | -40 | 4.8e-36 | -0.1605, -0.1714, -0.1611 |\n\n"
        "## The premise: does continued N=16 still improve?\n\n| arm | gain | p | per-seed gain | significant gain |\n"
        "|---|---|---|---|---|\n| base | +0.04 | 1.1e-04 | +0.0431, +0.0396, +0.0413 | yes |\n\n"
        "## The compute budget\n\n| setting | Δ | p | per-seed Δ | verdict |\n|---|---|---|---|---|\n"
        "| base_pair | -0.02 | 5.7e-05 | -0.0306, -0.0130, -0.0305 | **lost** |\n\n"
        "## Verdict per setting\n\n| setting | best N | Δ mean@k | t | p (two-sided) | per-seed Δ | verdict |\n"
        "|---|---|---|---|---|---|---|\n| base_pair | 512 | -0.0247 | -4.1 | 5.7e-05 | -0.0306, -0.0130, -0.0305 | **lost** |\n"
        "| fewer | 512 | -0.098 | -8.5 | 1.4e-15 | -0.1173, -0.0602, -0.1162 | **lost** |\n")


def test_an_old_summary_becomes_a_per_seed_csv(tmp_path):
    from scipy import stats as st

    from brorl.study.report import VERDICT_COLUMNS, retest_csv

    _old_summary(tmp_path / "s.md")
    assert retest_csv(tmp_path / "s.md", tmp_path / "v.csv") == 4  # the budget row repeats a setting row: left out
    rows = list(csv.DictReader(open(tmp_path / "v.csv")))
    assert list(rows[0]) == list(VERDICT_COLUMNS)
    assert [(r["comparison"], r["kind"], r["verdict"]) for r in rows] == [
        ("factorial N", "effect", "negative"), ("base", "premise: end - start", "gain"),
        ("base_pair", "best larger N - N=16", "tied"), ("fewer", "best larger N - N=16", "lost")]
    assert float(rows[2]["seed_p"]) == pytest.approx(st.ttest_1samp([-0.0306, -0.0130, -0.0305], 0.0).pvalue)
    assert rows[2]["per_seed"] == "-0.0306 -0.013 -0.0305" and rows[2]["prompt_p"] == "5.7e-05"


@pytest.mark.parametrize("content, message", [("comparison,kind\nx,y\n", "has no column(s) per_seed, prompt_p"),
                                              ("comparison,kind,per_seed,prompt_p\nx,effect,0.1 zz,0.5\n", "line 2")])
def test_a_bad_earlier_csv_is_an_error_naming_the_key_and_line(tmp_path, content, message):
    from brorl.study.report import earlier_rows

    (tmp_path / "v.csv").write_text(content)
    with pytest.raises(ValueError, match="study.earlier.old") as err:
        earlier_rows(tmp_path / "v.csv", "study.earlier.old")
    assert message in str(err.value)
    with pytest.raises(FileNotFoundError, match="study.earlier.old"):
        earlier_rows(tmp_path / "none.csv", "study.earlier.old")


def test_summary_orders_premise_tail_pool_earlier_and_decides_on_the_training_pool(tmp_path):
    """write_summary on hand-made arms of the weak overlay: N=512 gains more on its training pool, nobody moves on the
    held-out band (no transfer); an earlier study's CSV is appended after the tail pool, re-tested by seed."""
    from brorl.study.plan import all_settings
    from brorl.study.report import retest_csv, write_summary

    cfg = cfg_of(WEAK)
    _old_summary(tmp_path / "old.md")
    retest_csv(tmp_path / "old.md", tmp_path / "old.csv")
    rl = cfg["rl"]
    study = {**cfg["study"], "earlier": {"batch_vs_n": str(tmp_path / "old.csv")}}
    res = tmp_path / "study"
    rng = np.random.default_rng(4)
    start = rng.uniform(0.004, 0.03, 120)  # lookup test prompts: all in the band, at ~1/100
    pool0 = rng.uniform(0.004, 0.03, 300)
    for setting, n, pool_gain in (("tail_comparison", 16, 0.01), ("tail_comparison", 512, 0.04),
                                  ("tail_comparison_const", 512, 0.02), ("tail_equal_step", 16, 0.015)):
        st = RLSettings.from_dict(stage_for(rl, study, setting, n, 0))
        for seed in range(5):
            folder = res / setting / f"n{n}" / f"seed{seed}"
            _write_arm(folder, seed, start, np.clip(start + rng.normal(0, 0.001, start.size), 0, 1), st.samples_per_step,
                       st.sample_budget // st.samples_per_step, n)
            z = dict(np.load(folder / "heldout.npz"))
            np.savez(folder / "heldout.npz", **z, p_train_start=pool0,
                     p_train_end=np.clip(pool0 + pool_gain + rng.normal(0, 0.002, pool0.size), 0, 1))
            h = json.loads((folder / "heldout.json").read_text())
            (folder / "heldout.json").write_text(json.dumps({**h, "train_pool": {
                "prompts": 300, "q_pos_start": float(pool0.mean()), "q_pos_end": float(pool0.mean() + pool_gain),
                "zero_share_end": 0.0}}))
    (res / "data_tail").mkdir()
    (res / "data_tail" / "tail_pool.json").write_text(json.dumps({
        "candidates": 310, "kept": 300, "kept_share": 0.97, "test_prompts": 120, "test_in_band_single_answer": 120}))
    out = {k: res / k for k in ("summary.md", "summary.csv", "delta.png", "base.png")}
    write_summary(rl, json.loads(json.dumps(study, sort_keys=True)), res, *out.values(), order=all_settings(study))
    md = out["summary.md"].read_text()
    assert md.splitlines()[2].startswith("**Premise test not run**")  # the premise first
    assert md.index("## The tail-dominated pool") < md.index("## The earlier settings, re-tested at the seed level") \
        < md.index("## BroRL's comparison") < md.index("## Verdict per setting")
    tail = md.split("## The tail-dominated pool")[1].split("\n## ")[0]
    assert "beats N=16 on the training pool by > 0.01 at seed-level p < 0.05. **Outcome: supported.**" in tail
    row = next(r for r in tail.splitlines() if r.startswith("| tail_comparison |"))
    assert "| 120 |" in row and "**tied**" in row  # held-out band: no transfer, no difference
    assert "| +0.0300 | p " in row and row.endswith("| won |")  # training pool: N=512 +0.04 vs N=16 +0.01
    verdict = md.split("## Verdict\n\n")[1].split("\n## ")[0]
    assert ("| BroRL's mechanism on the tail pool (decision rule: Δ on the training pool > 0.01, p < 0.05) | "
            "tail_comparison: N=512 x 32 prompts vs N=16 x 128, 98,304 samples each, the 300 training-pool prompts "
            "(all in the band at the start) | +0.0300") in verdict and "| **supports** |" in verdict
    assert "Earlier settings, re-tested at the seed level (their section below): batch_vs_n: larger N won 0, lost 1, " \
           "not resolved 1 of 2." in verdict
    earlier = md.split("## The earlier settings, re-tested at the seed level")[1].split("\n## ")[0]
    assert "| batch_vs_n | base_pair | best larger N - N=16 | -0.0247 | -0.0306, -0.0130, -0.0305 | p 0.052 " \
           "(paired by seed, df 2) | 5.7e-05 | **tied** |" in earlier
    assert "| batch_vs_n | factorial N | effect |" in earlier and "**negative**" in earlier
    assert "| batch_vs_n | base | premise: end - start |" in earlier and "**gain**" in earlier


def test_the_committed_earlier_csvs_hold_the_seed_level_tables():
    """docs/results/study/*/verdicts.csv (written by --retest-csv from the committed summaries) give the verdicts of
    their seed_level.md: equal samples 5 lost, 3 not resolved; batch vs N: base_pair tied, the rest lost."""
    from brorl.study.report import earlier_rows

    eq = earlier_rows(PROJECT_ROOT / "docs/results/study/equal_samples/verdicts.csv")
    assert sorted(r["verdict"] for r in eq) == ["lost"] * 5 + ["tied"] * 3
    assert {r["comparison"] for r in eq if r["verdict"] == "tied"} == {"base", "equal_time", "no_kl"}
    bn = {r["comparison"]: r for r in earlier_rows(PROJECT_ROOT / "docs/results/study/batch_vs_n/verdicts.csv")
          if r["kind"] == "best larger N - N=16"}
    assert bn["base_pair"]["verdict"] == "tied" and bn["paper_comparison"]["test"]["p_two_sided"] == pytest.approx(0.0033, abs=1e-4)
    assert sum(r["verdict"] == "lost" for r in bn.values()) == 6
