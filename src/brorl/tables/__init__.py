"""The paper's tables and figures rebuilt from MLflow runs, with the paper's numbers beside ours.

    from brorl.tables import build_table, build_figure, build_all, Plan

    build_table("table1", tracking_uri="sqlite:///mlflow.db", experiment="brorl-tiny", profile="tiny",
                out_csv="results/tables/table1.csv", out_md="results/tables/table1.md", plan=config)

Tables: ``table1`` ... ``table5`` (BroRL Tables 1-5) and ``ttest`` (the paired t-test); figures: ``figure1``,
``figure4`` and ``passk``. The paper's numbers live in ``paper_reference.yaml`` (:func:`load_reference`).
"""

from brorl.tables.build import TABLES, build_table, make_table
from brorl.tables.figures import FIGURES, build_figure, file_theory_figure
from brorl.tables.plan import Plan
from brorl.tables.reference import load_reference, paper_row
from brorl.tables.store import RunStore


def build_all(*, tracking_uri: str, experiment: str, profile: str, tables_dir="results/tables",
              figures_dir="results/figures", plan=None) -> dict:
    """Every table (``<tables_dir>/<name>.csv|.md|_cells.csv``) and figure (``<figures_dir>/<name>.png|.csv``);
    returns ``{name: result of build_table / build_figure}``."""
    from pathlib import Path

    out = {}
    for name in TABLES:
        out[name] = build_table(name, tracking_uri=tracking_uri, experiment=experiment, profile=profile,
                                out_csv=Path(tables_dir) / f"{name}.csv", out_md=Path(tables_dir) / f"{name}.md",
                                plan=plan)
    for name in FIGURES:
        out[name] = build_figure(name, tracking_uri=tracking_uri, experiment=experiment, profile=profile,
                                 out_png=Path(figures_dir) / f"{name}.png", out_csv=Path(figures_dir) / f"{name}.csv",
                                 plan=plan)
    return out


def run_paper_table(config: dict, name: str, *, tracking: dict, profile: str, csv=None, md=None, cells=None,
                    png=None, source=None) -> dict:
    """``brorl paper-table``: one table (csv, md, cells) or figure (png, csv) from the runs in the store of
    ``tracking`` (brorl.tracking.tracking_settings), for ``profile``; ``figure3`` files the theory stage's figure
    (``source``). ``config``: the tables' plan. Its headline numbers, source runs and files go to the rule's
    MLflow run; the gaps are printed."""
    import re

    import mlflow

    from brorl.tracking import log_artifacts, numeric_metrics, tracking_settings

    store = tracking_settings(tracking)
    common = dict(tracking_uri=store["uri"], experiment=store["experiment"], profile=profile)
    if name == "figure3":  # the theory stage's figure, filed with the paper's tables
        out = file_theory_figure(source, png, **common)
    elif name in FIGURES:
        out = build_figure(name, out_png=png, out_csv=csv, plan=config, **common)
    else:
        out = build_table(name, out_csv=csv, out_md=md, out_cells=cells, plan=config, **common)
    mlflow.log_metrics(numeric_metrics(out.get("metrics", {})))
    mlflow.set_tag("source_runs", ",".join(sorted(set(out.get("run_ids", []))))[:5000])
    log_artifacts(csv, md, cells, png, existing=True)
    gaps = out.get("gaps", [])
    print(f"[paper-table] {name}: {len(set(out.get('run_ids', [])))} source runs, {len(gaps)} gap(s)"
          + "".join(f"\n  gap: {g}" for g in gaps[:10]))
    missing = sorted({m.group(1) for g in gaps if (m := re.match(r"missing: no FINISHED (\S+) run", g))})
    if missing:
        store_ = RunStore(store["uri"], store["experiment"], profile)
        try:
            print(f"[paper-table] {name}: {store_.missing_hint(missing)}")
        finally:
            store_.close()
    return out


__all__ = ["TABLES", "FIGURES", "Plan", "RunStore", "build_all", "build_figure", "build_table", "file_theory_figure",
           "load_reference", "make_table", "paper_row", "run_paper_table"]
