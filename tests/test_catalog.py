"""brorl.data.catalog: one table of every external source, and the name lists derived from it (issue 18)."""

from __future__ import annotations

from brorl import kinds
from brorl.data import catalog
from brorl.profile import Profile
from brorl.tables import plan
from brorl.tables.reference import load_reference

METHOD_COLUMNS = {"method", "n_rollouts", "prompts_per_step", "steps", "avg"}


def test_rows_list_every_model_benchmark_and_training_source_once():
    rows = catalog.rows()
    ids = [(r["role"], r["id"]) for r in rows]
    assert len(ids) == len(set(ids))
    assert {i for role, i in ids if role == "model"} == set(catalog.PAPER_MODELS)
    assert {i for role, i in ids if role == "benchmark"} == set(catalog.ALL_BENCHMARK_NAMES)
    assert {i for role, i in ids if role == "train"} == set(catalog.TRAIN_SOURCES)
    for r in rows:
        assert r["role"] == "model" or r["kind"] in kinds.names(), r["id"]  # a module of brorl.kinds
        assert (r["repo_id"] is None) == (r["role"] != "model" and kinds.kind(r["kind"]).generate is not None), r["id"]
    gated = [r["id"] for r in rows if r["gated"]]
    assert gated == ["gpqa_diamond"] and catalog.is_gated("gpqa_diamond") and not catalog.is_gated("aime24")
    assert catalog.PAPER_MODELS["prorl"]["commit"] == "c62ac5e70bd578a9235aa9d8e11fff2f1f63d4a0"


def test_the_name_lists_are_the_catalog_and_the_paper_tables_columns():
    """Each list exists once: the tables and the registry read the catalog, and the paper's transcribed Table 3 /
    Table 4 / Table 5 columns are exactly the catalog's math, code benchmarks and Reasoning Gym categories."""
    assert {"aime24", "aime25", "amc", "math500", "minerva", "olympiadbench"} <= set(catalog.MATH_BENCHMARKS)
    assert catalog.BENCHMARK_NAMES == (*catalog.MATH_BENCHMARKS, "gpqa_diamond", "ifeval", "reasoning_gym")
    assert (plan.MATH, plan.CODE, plan.RG_CATEGORIES) == (
        catalog.MATH_BENCHMARKS, catalog.CODE_BENCHMARK_NAMES, catalog.RG_CATEGORIES)
    assert plan.default_benchmarks(Profile(name="paper", start="fetched", data="paper")) == list(catalog.BENCHMARK_NAMES)
    ref = load_reference()
    for table, names in (("table3", catalog.MATH_BENCHMARKS), ("table4", catalog.CODE_BENCHMARK_NAMES),
                         ("table5", catalog.RG_CATEGORIES)):
        assert tuple(c for c in ref[table]["columns"] if c not in METHOD_COLUMNS) == names, table


def test_every_hub_source_of_the_paper_profile_is_pinned_to_a_commit():
    """Issue 27, defect 2: Minerva, OlympiadBench, IFEval and DeepScaleR had no commit, so a real paper run stopped
    with a pin error before any job. Every hub benchmark, training source and checkpoint of config/paper.yaml now
    names a full commit (the evidence sits beside each value and in docs/profiles.md)."""
    import yaml

    from brorl.config import PROJECT_ROOT
    from brorl.data.pins import pinned_commit

    cfg = yaml.safe_load((PROJECT_ROOT / "config/paper.yaml").read_text())
    revisions = cfg["evaluation"]["revisions"]
    hub_benchmarks = [b for b in cfg["evaluation"]["benchmarks"] if not catalog.benchmark_spec(b).generated]
    assert {"minerva", "olympiadbench", "ifeval"} <= set(hub_benchmarks)
    assert {b: pinned_commit(revisions.get(b)) for b in hub_benchmarks} == {b: revisions[b] for b in hub_benchmarks}
    data = cfg["rl"]["data"]
    hub_sources = [s for s in data["sources"] if not catalog.TRAIN_SOURCES[s].generated]
    assert "deepscaler" in hub_sources
    assert all(pinned_commit(data["revisions"].get(s)) for s in hub_sources), data["revisions"]
    for name, spec in cfg["checkpoints"]["fetch"].items():
        assert pinned_commit(spec["revision"], spec.get("commit")), name
    assert cfg["checkpoints"]["allow_unpinned"] is False
    assert (revisions["minerva"], revisions["olympiadbench"], revisions["ifeval"], data["revisions"]["deepscaler"]) == (
        "ee46ddc498933b1977577953250ca5c66be64f96", "91184b52131e7fc9455fef848035173aea8cc01a",
        "966cd89545d6b6acfd7638bc708b98261ca58e84", "b6ae8c60f5c1f2b594e2140b91c49c9ad0949e29")
