"""brorl.data.catalog: one table of every external source, and the name lists derived from it (issue 18)."""

from __future__ import annotations

from brorl.data import catalog
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
        assert (r["repo_id"] is None) == (r["kind"] == "reasoning_gym"), r["id"]
        assert r["role"] == "model" or r["kind"] in ("math", "gpqa", "ifeval", "reasoning_gym", "code"), r["id"]
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
    assert plan.DEFAULT_BENCHMARKS["paper"] == list(catalog.BENCHMARK_NAMES)
    ref = load_reference()
    for table, names in (("table3", catalog.MATH_BENCHMARKS), ("table4", catalog.CODE_BENCHMARK_NAMES),
                         ("table5", catalog.RG_CATEGORIES)):
        assert tuple(c for c in ref[table]["columns"] if c not in METHOD_COLUMNS) == names, table
