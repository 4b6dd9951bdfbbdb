"""The tiny task suite: deterministic disjoint splits, strict verification, probe candidates."""

from __future__ import annotations

import json

import pytest

from brorl.tasks import (SPLITS, TaskSettings, correct_mask, enumerate_candidates, generate_split, max_new_tokens,
                         read_jsonl, read_split, split_of, verify, write_splits)
from brorl.tasks.core import EOS_TOKEN, PAD_TOKEN

SMALL = {"tasks": ["add", "mul", "multiple"], "train_size": 300, "validation_size": 80, "test_size": 80,
         "probe_train_size": 60, "probe_validation_size": 30, "probe_test_size": 30, "seed": 5}


def _files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*.jsonl"))}


def test_write_splits_is_deterministic_and_seeded(tmp_path):
    m1 = write_splits(tmp_path / "a", SMALL)
    write_splits(tmp_path / "b", TaskSettings.from_dict(SMALL))
    write_splits(tmp_path / "c", {**SMALL, "seed": 6})
    fa, fb, fc = _files(tmp_path / "a"), _files(tmp_path / "b"), _files(tmp_path / "c")
    assert len(fa) == 9 and fa == fb
    assert set(fa) == set(fc) and all(fa[k] != fc[k] for k in fa)
    assert m1["add/train/n"] == 300 and m1["multiple/validation/n"] == 30
    assert json.loads((tmp_path / "a" / "tasks.json").read_text())["seed"] == 5


def test_splits_are_disjoint_unique_and_well_formed(tmp_path):
    s = TaskSettings.from_dict(SMALL)
    write_splits(tmp_path, s)
    for task in s.tasks:
        prompts = {}
        for split in SPLITS:
            recs = read_jsonl(tmp_path / task / f"{split}.jsonl")
            assert len(recs) == s.split_size(task, split)
            ps = [r["prompt"] for r in recs]
            assert len(set(ps)) == len(ps), f"duplicates in {task}/{split}"
            assert len({len(p) for p in ps}) == 1, "one prompt length per family"
            assert len({r["id"] for r in recs}) == len(recs)
            for r in recs:
                assert {"id", "task", "prompt", "answer", "answers", "universe"} <= set(r)
                assert r["task"] == task and r["split"] == split
                assert r["answer"] in r["answers"]
                assert split_of(task, r["prompt"], s.seed, s) == split
                assert len(r["answer"]) < max_new_tokens(s)
            prompts[split] = set(ps)
        assert not (prompts["train"] & prompts["validation"])
        assert not (prompts["train"] & prompts["test"])
        assert not (prompts["validation"] & prompts["test"])
    assert len(read_split(tmp_path, "validation")) == 80 + 80 + 30


def test_fresh_training_stream_stays_out_of_held_out_splits():
    s = TaskSettings.from_dict(SMALL)
    held = {r["prompt"] for sp in ("validation", "test") for r in generate_split("add", sp, 80, s.seed, settings=s)}
    fresh = generate_split("add", "train", 2000, seed=99, partition_seed=s.seed, settings=s, unique=False)
    assert not held & {r["prompt"] for r in fresh}
    assert fresh[0]["prompt"] != generate_split("add", "train", 1, s.seed, settings=s)[0]["prompt"]


def test_answers_are_correct():
    s = TaskSettings.from_dict(SMALL)
    for r in generate_split("add", "train", 200, 1, settings=s):
        a, b = map(int, r["prompt"].strip().rstrip("=").split("+"))
        assert r["answer"] == str(a + b) and (a, b) == (r["a"], r["b"])
        assert 1 <= r["max_digits"] <= s.add_max_digits
    for r in generate_split("mul", "train", 200, 1, settings=s):
        a, d = map(int, r["prompt"].strip().rstrip("=").split("*"))
        assert r["answer"] == str(a * d) and 2 <= d <= 9
    for r in generate_split("multiple", "train", 200, 1, settings=s):
        d, rng = r["prompt"].strip().rstrip("=").split("|x,")
        lo, hi = map(int, rng.split("-"))
        expected = [str(m) for m in range(lo, hi + 1) if m % int(d) == 0]
        assert r["answers"] == expected and len(expected) >= s.probe_min_answers == 5
        assert 1 <= lo <= hi <= s.probe_max


def test_add_prompt_formats():
    plain = generate_split("add", "train", 50, 4, settings=TaskSettings(add_align=False))
    aligned = generate_split("add", "train", 50, 4, settings=TaskSettings(add_align=True))
    for recs in (plain, aligned):
        assert {len(r["prompt"]) for r in recs} == {10}
        for r in recs:
            a, b = map(int, r["prompt"].rstrip("=").split("+"))
            assert r["answer"] == str(a + b)
    assert all(r["prompt"].index("+") == 4 for r in aligned)
    assert all(r["prompt"] == f"{r['a']}+{r['b']}=".rjust(10) for r in plain)


def test_verify_accepts_gold_and_rejects_wrong_and_garbage():
    rec = generate_split("add", "validation", 1, 3)[0]
    gold = rec["answer"]
    assert verify(rec, gold) == 1.0
    assert verify(rec, gold + EOS_TOKEN) == 1.0
    assert verify(rec, gold + EOS_TOKEN + PAD_TOKEN * 3 + "junk") == 1.0
    assert verify(rec, gold.encode()) == 1.0
    wrong = str(int(gold) + 1)
    for bad in (wrong, gold + "0", "0" + gold, " " + gold, gold + " ", "", EOS_TOKEN, "x" * 100_000,
                "\x00" * 1000, gold + "\x00", "\x00" + gold, "\ud800", None, 12, b"\xff\xfe", [gold]):
        assert verify(rec, bad) == 0.0, repr(bad)[:40]
    assert verify({}, gold) == 0.0
    for malformed in ({"answer": None}, {"answers": 5}, {"answers": [None]}, None, "rec"):
        assert verify(malformed, gold) in (0.0, 1.0)  # must not raise


def test_probe_candidates_cover_answers_and_match_verify():
    s = TaskSettings.from_dict(SMALL)
    for rec in generate_split("multiple", "validation", 30, 2, settings=s):
        cands = enumerate_candidates(rec)
        assert len(cands) == s.probe_max and len(set(cands)) == len(cands)
        assert set(rec["answers"]) <= set(cands)
        mask = correct_mask(rec, cands)
        assert mask.sum() == len(rec["answers"]) == rec["n_answers"]
        assert [verify(rec, c) == 1.0 for c in cands] == mask.tolist()
        assert verify(rec, str(rec["hi"] + rec["d"])) == 0.0


def test_single_answer_candidates_contain_the_answer():
    rec = generate_split("add", "test", 5, 0)[4]
    cands = enumerate_candidates(rec)
    assert rec["answer"] in cands and len(cands) == 19_999
    assert correct_mask(rec, cands).sum() == 1


def test_settings_from_dict_rejects_unknown_keys_and_bad_values():
    with pytest.raises(ValueError, match="unknown task settings"):
        TaskSettings.from_dict({"train_sise": 3})
    with pytest.raises(ValueError, match="unknown task families"):
        TaskSettings(tasks=("add", "division"))
    s = TaskSettings.from_dict({"tasks": ["add"], "probe_divisors": [3, 5]})
    assert s.tasks == ("add",) and s.probe_divisors == (3, 5)
    assert TaskSettings.from_dict(s.to_dict()) == s
    with pytest.raises(ValueError):
        generate_split("add", "dev", 3, 0)
