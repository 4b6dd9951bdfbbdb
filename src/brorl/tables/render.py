"""Cells, rows and tables, and how they are written: a display CSV, a cell -> run id CSV and markdown.

Every cell is a value (mean, with ± sd over seeds when there are several), a literal text (the paper's own
entries, labels) or an explicit gap with its reason, rendered ``— (reason)``: never 0, never blank.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from brorl.atomic import atomic_open, write_text
from brorl.profile import report

GAP_MARK = "—"
PAPER_DASH = "–"  # the paper's own "–" (a value it does not give)


def fmt_fixed(decimals: int) -> Callable[[float], str]:
    return lambda v: f"{v:,.{decimals}f}"


def fmt_hours(v: float) -> str:
    """One decimal from 10 h up (the paper's style), two from 1 h; three significant digits below, so tiny
    runs of seconds or minutes do not read 0.0."""
    return f"{v:,.1f}" if abs(v) >= 10 else f"{v:.2f}" if abs(v) >= 1 else f"{v:.3g}"


def fmt_int(v: float) -> str:
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.1f}"


def fmt_sci(v: float) -> str:
    return f"{v:.2g}" if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e4) else f"{v:.4f}"


@dataclass
class Cell:
    value: float | None = None
    sd: float | None = None
    n: int = 0                       # values behind the mean (seeds)
    text: str | None = None          # literal text instead of a number
    gap: str | None = None           # the reason there is no value
    runs: tuple = ()                 # ((what, run_id), ...) behind the cell
    fmt: Callable[[float], str] = field(default=fmt_fixed(2))
    prefix: str = ""

    @property
    def run_ids(self) -> list[str]:
        return list(dict.fromkeys(r for _, r in self.runs))

    def display(self) -> str:
        if self.gap is not None:
            return f"{GAP_MARK} ({self.gap})"
        if self.text is not None:
            return self.text
        if self.value is None:
            return PAPER_DASH
        mean = self.fmt(self.value)
        out = self.prefix + mean
        if self.n > 1 and self.sd is not None:
            if "e" in mean or "inf" in mean or "nan" in mean:
                sd = self.fmt(self.sd)
            else:  # the sd to the mean's decimals
                sd = f"{self.sd:,.{len(mean.split('.')[1]) if '.' in mean else 0}f}"
            out += f" ± {sd}"
        return out


def gap(reason: str) -> Cell:
    return Cell(gap=reason)


_MISSING = re.compile(r"(missing: no FINISHED \S+ run for) (.*)")


def join_gaps(reasons: list[str]) -> str:
    """Several gap reasons as one text: "missing: no FINISHED <rule> run for" is written once per rule
    ("missing: no FINISHED evaluate run for model a / x, model b / x"); other reasons follow, "; "-joined."""
    groups: dict[str, list[str]] = {}
    for r in dict.fromkeys(reasons):
        m = _MISSING.fullmatch(r)
        key, rest = (m.group(1), m.group(2)) if m else (r, None)
        groups.setdefault(key, [])
        if rest is not None:
            groups[key].append(rest)
    return "; ".join(f"{k} {', '.join(v)}" if v else k for k, v in groups.items())


def text(value, runs: tuple = ()) -> Cell:
    return Cell(text=str(value), runs=tuple(runs))


def over_seeds(values: list[float], runs: tuple, fmt=fmt_fixed(2), prefix: str = "") -> Cell:
    """Mean (± sample sd when there are several seeds) of per-seed values."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else None
    return Cell(value=mean, sd=sd, n=n, runs=tuple(runs), fmt=fmt, prefix=prefix)


@dataclass
class Row:
    source: str                      # "paper" or "ours"
    label: str                       # the row's name (method / arm)
    cells: dict[str, Cell]
    profile: str | None = None       # ours: the profile that produced it
    ref: str = ""                    # paper: its citation; ours: the footnote id (filled by Table)
    key: str = ""                    # ours: the arm or model behind the row


@dataclass
class Table:
    name: str
    caption: str                     # one line
    columns: list[tuple[str, str]]   # (key, header)
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def _refs(self) -> None:
        k = 0
        for row in self.rows:
            if row.source == "ours":
                k += 1
                row.ref = f"r{k}"

    @staticmethod
    def source_label(row: Row) -> str:
        return "paper" if row.source == "paper" else f"ours ({row.profile})"

    def gaps(self) -> list[str]:
        return [f"{row.label} / {h}: {row.cells[c].gap}" for row in self.rows if row.source == "ours"
                for c, h in self.columns if c in row.cells and row.cells[c].gap is not None]

    def run_ids(self) -> list[str]:
        return list(dict.fromkeys(r for row in self.rows for c in row.cells.values() for r in c.run_ids))

    def cell(self, label: str, column: str, source: str = "ours") -> Cell:
        for row in self.rows:
            if row.label == label and row.source == source:
                return row.cells[column]
        raise KeyError(f"no {source} row {label!r} in {self.name}")

    def display_rows(self) -> list[dict[str, str]]:
        self._refs()
        out = []
        for row in self.rows:
            d = {"source": self.source_label(row), "profile": row.profile or "", "row": row.label}
            for c, _ in self.columns:
                d[c] = row.cells[c].display() if c in row.cells else f"{GAP_MARK} (not applicable)"
            d["ref"] = row.ref
            d["run_ids"] = ";".join(dict.fromkeys(r for cell in row.cells.values() for r in cell.run_ids))
            out.append(d)
        return out

    def cell_records(self) -> list[dict]:
        self._refs()
        out = []
        for row in self.rows:
            for c, h in self.columns:
                cell = row.cells.get(c)
                if cell is None:
                    continue
                out.append({"table": self.name, "source": self.source_label(row), "profile": row.profile or "",
                            "row": row.label, "ref": row.ref, "column": c, "header": h, "display": cell.display(),
                            "value": "" if cell.value is None else repr(float(cell.value)),
                            "sd": "" if cell.sd is None else repr(float(cell.sd)), "n": cell.n,
                            "gap": cell.gap or "", "run_ids": ";".join(cell.run_ids),
                            "runs": "; ".join(f"{w}={r}" for w, r in cell.runs)})
        return out

    def markdown(self) -> str:
        rows = self.display_rows()
        headers = ["source", *[h for _, h in self.columns], "ref"]
        lines = [f"**{self.caption}**", "", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        for d, row in zip(rows, self.rows):
            seen: dict[str, str] = {}  # a long gap repeated along the row is written out once
            shown = []
            for c, h in self.columns:
                g = row.cells[c].gap if c in row.cells else None
                if g is not None and len(g) > 40 and g in seen:
                    shown.append(f"{GAP_MARK} (same gap as {seen[g]})")
                else:
                    shown.append(d[c])
                    if g is not None:
                        seen.setdefault(g, h)
            cells = [d["source"], *shown, d["ref"]]
            lines.append("| " + " | ".join(_md(x) for x in cells) + " |")
        lines.append("")
        ours = [r for r in self.rows if r.source == "ours"]
        if ours:
            lines += ["MLflow runs behind our cells:", ""]
            for row in ours:
                groups: dict[tuple, list[str]] = {}
                for c, h in self.columns:
                    cell = row.cells.get(c)
                    if cell is not None and cell.runs:
                        groups.setdefault(tuple(cell.runs), []).append(h)
                parts = [", ".join(hs) + " ← " + ", ".join(f"{w} `{r}`" for w, r in runs)
                         for runs, hs in groups.items()]
                lines.append(f"- {row.ref} ({row.label}, {row.profile} profile): "
                             + ("; ".join(parts) if parts else "no run (every cell is a gap)"))
            lines.append("")
        lines += [*self.notes, ""] if self.notes else []
        return "\n".join(lines)

    def write(self, out_csv, out_md, out_cells=None) -> list[str]:
        """Write ``out_csv`` (display cells), ``out_md`` and the cell -> run id CSV (default
        ``<out_csv stem>_cells.csv``); returns the paths written."""
        out_csv, out_md = Path(out_csv), Path(out_md)
        out_cells = Path(out_cells) if out_cells else out_csv.with_name(out_csv.stem + "_cells.csv")
        for p in (out_csv, out_md, out_cells):
            p.parent.mkdir(parents=True, exist_ok=True)
        rows = self.display_rows()
        fields = ["source", "profile", "row", *[c for c, _ in self.columns], "ref", "run_ids"]
        with atomic_open(out_csv, newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)
        recs = self.cell_records()
        with atomic_open(out_cells, newline="") as f:
            w = csv.DictWriter(f, fieldnames=["table", "source", "profile", "row", "ref", "column", "header",
                                              "display", "value", "sd", "n", "gap", "run_ids", "runs"])
            w.writeheader()
            w.writerows(recs)
        write_text(out_md, report(self.markdown()))
        return [str(out_csv), str(out_md), str(out_cells)]


def _md(x: str) -> str:
    return str(x).replace("|", "/").replace("\n", " ")
