"""Smoke run of issue 29's study rules through Snakemake at toy size: the premise run (slope stop), the tail pool
scored at the start, tail-pool arms with and without refill, and the summary that opens with the premise."""

import json

import pytest
import yaml

from test_pipeline import GIT, copy_project, sh

pytestmark = pytest.mark.slow

CONFIG = "tests/configs/ci_tail.yaml"
OVERLAY = {"study": {
    "seeds": [0],
    "premise": {"seeds": [0], "sample_budget": 640, "plateau_window": 3, "plateau_slope": 0.5, "probe_every": 1},
    "tail_pool": {"candidates": 2048, "test_size": 64},
    "decision": {"setting": "tail_comparison", "margin": 0.01, "alpha": 0.05},
    "ablations": {
        "tail_comparison": {"ns": [4, 16], "pool": "tail", "samples_per_step": 32, "steps": 4,
                            "prompts_per_step": {16: 8}, "settings": {"lr_rule": "sqrt", "b0": 32}},
        "tail_comparison_refill": {"ns": [4, 16], "pool": "tail", "samples_per_step": 32, "steps": 4,
                                   "prompts_per_step": {16: 8}, "settings": {"lr_rule": "sqrt", "b0": 32},
                                   "refill": {"max_rounds": 3, "round_prompts": 0}}},
    "include": ["tail_comparison", "tail_comparison_refill"]}}


def test_premise_and_tail_pool_rules_run_end_to_end(tmp_path):
    work = tmp_path / "work"
    copy_project(work)
    (work / CONFIG).write_text(yaml.safe_dump(OVERLAY))
    sh(["git", "init", "-q"], work)
    sh(GIT + ["add", "-A"], work)
    sh(GIT + ["commit", "-qm", "test copy"], work)
    files = ["--configfile", "tests/configs/ci.yaml", CONFIG]
    plan = sh(["snakemake", "-n", "--quiet", "rules", *files, "--", "results/ci/study/summary.md"], work).stdout
    counts = {line.split()[0]: int(line.split()[1]) for line in plan.splitlines()
              if len(line.split()) == 2 and line.split()[1].isdigit()}
    assert counts["study_premise"] == 1 and counts["study_tail_pool"] == 1 and counts["study_arm"] == 4
    assert "study_pool" not in counts and "study_start" not in counts  # no fresh pool, no late start: not needed
    sh(["snakemake", "--cores", "2", *files, "--", "results/ci/study/summary.md"], work, timeout=1200)

    pool = json.loads((work / "results/ci/study/data_tail/tail_pool.json").read_text())
    assert pool["kept"] >= 1 and pool["candidates"] > pool["kept"]
    train = [json.loads(line) for f in (work / "results/ci/study/data_tail").glob("*/train.jsonl") for line in open(f)]
    assert len(train) == pool["kept"] and all(1 / 512 < r["start_pass_rate"] < 1 / 16 for r in train)
    fixed = {json.loads(line)["prompt"] for f in (work / "results/ci/data").glob("*/train.jsonl") for line in open(f)}
    assert not fixed & {r["prompt"] for r in train}  # fresh: none of the start's own training prompts
    assert sum(1 for _ in open(work / "results/ci/study/data_tail/add/test.jsonl")) == 64

    def stage(path):  # an arm's summary.json: its one stage's summary (settings, why it stopped)
        return json.loads((work / "results/ci/study" / path / "summary.json").read_text())["stage_summaries"][0]

    premise = stage("premise/seed0")
    assert premise["settings"]["plateau_rule"] == "slope" and premise["stopped"] in ("plateau", "sample_budget")
    assert stage("tail_comparison_refill/n4/seed0")["settings"]["max_rounds"] == 3
    plain = stage("tail_comparison/n4/seed0")
    assert plain["settings"]["max_rounds"] == 1 and plain["generated_samples"] == 4 * 32  # one round: exactly S x steps
    held = json.loads((work / "results/ci/study/tail_comparison/n16/seed0/heldout.json").read_text())
    assert held["train_pool"]["prompts"] == pool["kept"]
    assert held["train_pool"]["q_pos_start"] == pytest.approx(sum(r["start_pass_rate"] for r in train) / len(train),
                                                              rel=1e-4)

    md = (work / "results/ci/study/summary.md").read_text().splitlines()
    assert md[2].startswith("**Premise met at" if premise["stopped"] == "plateau" else
                            "**Premise: did not plateau within budget 640 samples**")
    text = "\n".join(md)
    assert text.index("## The premise test") < text.index("## The tail-dominated pool")
    assert f"{pool['kept']:,} of {pool['candidates']:,} fresh candidate prompts" in text
    # 1 seed: not testable whatever the numbers (or no test prompt in the band at toy size: said so)
    band = pool["families"]["add"]["test_in_band"]
    assert ("**Outcome: not testable (1 seed(s) < 3).**" if band >= 2 else
            f"**Outcome: not testable ({band} test prompt(s) in the band).**") in text
