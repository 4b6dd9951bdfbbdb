"""The kinds of problems (brorl.kinds): every catalog row names a kind module that has what its use needs, the
lookup names the known kinds, and the data source kinds are found in the packages' source modules. No network."""

from __future__ import annotations

import pytest

from brorl import kinds
from brorl.data import catalog
from brorl.data import training as paper_data
from brorl.kinds.base import Kind


def test_every_catalog_row_names_a_kind_module_with_what_its_use_needs():
    assert kinds.names() == ("code", "gpqa", "ifeval", "math", "reasoning_gym")
    for name in kinds.names():
        kind = kinds.kind(name)
        assert isinstance(kind, Kind) and kind.name == name and kind.description, name
        assert (kind.convert is None) != (kind.generate is None), name  # converted from a snapshot, or generated
        assert (kind.generate is None) == (kind.generation_request is None), name
    for spec in {**catalog.PAPER_BENCHMARKS, **catalog.CODE_BENCHMARKS}.values():
        kind = kinds.kind(spec.kind)
        assert (kind.generate is not None) == spec.generated, spec.name
    for spec in catalog.TRAIN_SOURCES.values():
        assert kinds.kind(spec.kind).rewards is not None, f"{spec.name}: a training source's kind needs a reward"
    assert set(paper_data.REWARD_KINDS) == {"math", "code", "reasoning_gym"}
    assert kinds.kind("reasoning_gym").category_field == "category"
    assert kinds.kind("reasoning_gym").training_renames == {"task": "rg_task"}


def test_an_unknown_kind_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown kind 'yesno'; known: code, gpqa, ifeval, math, reasoning_gym"):
        kinds.kind("yesno")
    with pytest.raises(ValueError, match="unknown kind"):
        kinds.kind("base")  # the shared module is no kind


def test_a_training_record_of_each_kind_is_rewarded_by_its_kind():
    records = [{"id": "m", "reward": "math", "answer": "4"},
               {"id": "c", "reward": "code", "tests": {"inputs": ["1 2\n"], "outputs": ["3\n"]}}]
    completions = ["\\boxed{4}", "```python\nprint(0)\n```"]
    assert paper_data.paper_rewards(records, completions) == [1.0, 0.0]
    with pytest.raises(ValueError, match="no paper reward kind"):
        paper_data.paper_rewards([{"id": "g", "reward": "gpqa", "answer": "A"}], ["\\boxed{A}"])


def test_data_source_kinds_are_found_in_the_packages_source_modules():
    from brorl.data.source import PaperSource
    from brorl.profile import Profile, sources
    from brorl.tasks.source import TaskSource

    found = sources()
    assert sorted(found) == ["paper", "tasks"]
    assert isinstance(found["paper"], PaperSource) and isinstance(found["tasks"], TaskSource)
    with pytest.raises(ValueError, match="profile.data: 'local' is not one of"):
        Profile(name="x", start="fetched", data="local")


@pytest.mark.slow
def test_same_numbers_as_before_the_kinds_move(tmp_path):
    """Issue 33 step 3: scripts/kinds_check.py's digest (converted stand-in fixtures, cache requests, scores of fixed
    completions, training rewards, lm-eval task names) equals the one written before the kinds moved
    (tests/data/kinds_digest.json, main df9ea32). Task hashes are left out: they change with any scorer code."""
    import json
    import runpy
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    script = runpy.run_path(str(root / "scripts" / "kinds_check.py"))
    script["main"](str(tmp_path / "digest.json"))
    now = json.loads((tmp_path / "digest.json").read_text())
    before = json.loads((root / "tests" / "data" / "kinds_digest.json").read_text())
    for section in ("benchmarks", "scores", "train"):
        assert now[section] == before[section], section
    assert {k: v["lm_eval_task"] for k, v in now["tasks"].items()} == before["tasks"]
