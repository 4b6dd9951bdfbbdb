"""The paper's data blend (training and evaluation sources) as a table: ``results/data/paper_data_blend.{csv,md}``."""

from __future__ import annotations

from pathlib import Path

COLUMNS = ("name", "role", "domain", "source_kind", "repo_id", "revision", "size_paper", "id_confidence",
           "brorl_unstated", "note")


def write_data_blend(csv_path, md_path) -> dict[str, float]:
    """Write the manifest (brorl.fetch.load_data_blend) as CSV and Markdown; returns the run's metrics."""
    import pandas as pd

    from brorl.fetch import load_data_blend

    blend = load_data_blend()
    cols = list(COLUMNS)
    frame = pd.DataFrame([{c: e.get(c) for c in cols} for e in blend["entries"]])
    frame["revision"] = frame["revision"].fillna("(not pinned: main at fetch time)")
    frame["brorl_unstated"] = frame["brorl_unstated"].map(lambda v: "; ".join(v) if isinstance(v, list) else (v or ""))
    Path(csv_path).parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(csv_path, index=False)
    lines = ["# The paper's data blend (manifest)", "", blend["caveat"], "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join("" if pd.isna(row[c]) else str(row[c]).replace("|", "/") for c in cols) + " |")
    Path(md_path).write_text("\n".join(lines) + "\n")
    train = frame[frame["role"] == "train"]
    return {"entries": float(len(frame)), "train_entries": len(train),
            "train_size_paper": float(train["size_paper"].sum()), "eval_entries": int((frame["role"] == "eval").sum())}
