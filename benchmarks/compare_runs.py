"""Two runs' results compared, leaving out what a rerun always changes (issue 33's "same numbers" check).

    python benchmarks/compare_runs.py BEFORE/results/tiny AFTER/results/tiny [--show 20]

Every file under both roots is read as the same relative path:

- JSON: flattened to ``path -> value``; keys that hold timings, memory, dates, MLflow run ids or work-folder paths
  (:data:`VOLATILE`) are left out, everything else must be equal (floats exactly);
- CSV: the same, per column (a column named like :data:`VOLATILE` is left out);
- ``mlflow_run_id``, the throughput study's table (all speeds), ``*.dvc`` (hashes of the folders, which hold the files above) and figures (``.png``: drawn from
  the CSVs beside them, some against wall time) are listed as skipped;
- any other file (markdown) is compared line by line with MLflow run ids, "<n> s" durations and "<n>/s" rates
  blanked; in a table, cells under a header named like :data:`VOLATILE` are left out.

Prints a table of the files (identical bytes / equal apart from the left-out keys / differing) and, for each
differing file, its first differing values. Exit status 1 when a file differs in anything not left out.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
from pathlib import Path

VOLATILE = re.compile(r"(seconds|wall_time|_per_s|per_second|throughput|rss|date|time_s|hours|run_id|model_dir|"
                      r"timestamp|duration|load|^s$|tokens/s|samples/s|elapsed|started|finished|^runs$|time \(h\)|^wall s$)",
                      re.I)
"""Keys, CSV columns and markdown column headers that hold timings, memory, dates, MLflow run ids or paths."""
X_IS_HOURS = ("figure1.csv", "figure4.csv")
"""Figure tables whose ``x`` is training hours (BroRL Figures 1 and 4: score against hours)."""
SKIP_SUFFIXES = (".png", ".dvc")
SKIP_NAMES = ("mlflow_run_id", "throughput.md", "throughput.csv")
"""Run ids, and the throughput study's table (every number in it is a speed)."""


def flat(x, prefix=""):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from flat(v, f"{prefix}/{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from flat(v, f"{prefix}[{i}]")
    else:
        yield prefix, x


def volatile(key: str) -> bool:
    return any(VOLATILE.search(part) for part in re.split(r"[/\[\]]", key) if part and not part.isdigit())


def json_diff(a: bytes, b: bytes) -> list[str]:
    fa = {k: v for k, v in flat(json.loads(a)) if not volatile(k)}
    fb = {k: v for k, v in flat(json.loads(b)) if not volatile(k)}
    keys = sorted(set(fa) | set(fb))
    return [f"{k}: {fa.get(k, '<absent>')!r} != {fb.get(k, '<absent>')!r}" for k in keys if fa.get(k) != fb.get(k)]


def csv_diff(a: bytes, b: bytes, name: str = "") -> list[str]:
    ra = list(csv.DictReader(io.StringIO(a.decode())))
    rb = list(csv.DictReader(io.StringIO(b.decode())))
    if len(ra) != len(rb):
        return [f"rows: {len(ra)} != {len(rb)}"]
    hours = name.endswith(X_IS_HOURS)
    out = []
    for i, (x, y) in enumerate(zip(ra, rb)):
        if volatile(x.get("header") or "") and x.get("header") == y.get("header"):
            continue  # a table cell (tables/*_cells.csv) under a timing header
        for k in sorted(set(x) | set(y)):
            if hours and k == "x":
                continue
            if not volatile(k) and x.get(k) != y.get(k):
                out.append(f"row {i} {k}: {x.get(k)!r} != {y.get(k)!r}")
    return out


RUN_ID = re.compile(r"\b[0-9a-f]{32}\b")
SECONDS = re.compile(r"[\d,.]+ s\b")
RATE = re.compile(r"[\d,.]+/s\b")
RATIO = re.compile(r"= [\d.]+×")


def _norm(line: str) -> str:
    """A markdown line with MLflow run ids, "<number> s" durations and "<number>/s" rates (and, on a line of
    rates, their "= <ratio>×") blanked."""
    line = SECONDS.sub("<s>", RUN_ID.sub("<run>", line))
    return RATIO.sub("= <ratio>×", RATE.sub("<rate>", line)) if RATE.search(line) else line


def text_diff(a: bytes, b: bytes) -> list[str]:
    """Markdown line by line: run ids and durations blanked; in a table, the cells under a volatile header."""
    la, lb = a.decode(errors="replace").splitlines(), b.decode(errors="replace").splitlines()
    if len(la) != len(lb):
        return [f"lines: {len(la)} != {len(lb)}"]
    out, header = [], []
    for i, (x, y) in enumerate(zip(la, lb)):
        if i + 1 < len(la) and la[i + 1].startswith("|---"):
            header = [h.strip() for h in x.split("|")]
        if not x.startswith("|"):
            header = [] if not x.strip() else header
        if x == y or _norm(x) == _norm(y):
            continue
        cx, cy = x.split("|"), y.split("|")
        if header and len(cx) == len(cy) == len(header) and all(
                p == q or volatile(h) or _norm(p) == _norm(q) for p, q, h in zip(cx, cy, header)):
            continue
        out.append(f"line {i + 1}: {x[:160]!r} != {y[:160]!r}")
    return out


def compare(root_a: Path, root_b: Path) -> tuple[dict[str, list[str]], dict[str, str]]:
    """({file: differences}, {file: how it compared}) over the union of both roots' files."""
    names = sorted({p.relative_to(r).as_posix() for r in (root_a, root_b) for p in r.rglob("*") if p.is_file()})
    diffs, status = {}, {}
    for name in names:
        pa, pb = root_a / name, root_b / name
        if not pa.exists() or not pb.exists():
            status[name], diffs[name] = "missing", [f"only in {'after' if not pa.exists() else 'before'}"]
            continue
        a, b = pa.read_bytes(), pb.read_bytes()
        if a == b:
            status[name] = "identical"
            continue
        if name.endswith(SKIP_SUFFIXES) or Path(name).name in SKIP_NAMES:
            status[name] = "skipped"
            continue
        d = (json_diff(a, b) if name.endswith(".json") else csv_diff(a, b, name) if name.endswith(".csv")
             else text_diff(a, b))
        status[name] = "differs" if d else "equal apart from timings, run ids, paths"
        if d:
            diffs[name] = d
    return diffs, status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--show", type=int, default=5, help="differences printed per file")
    args = ap.parse_args(argv)
    diffs, status = compare(args.before, args.after)
    counts: dict[str, int] = {}
    for s in status.values():
        counts[s] = counts.get(s, 0) + 1
    print(f"# {args.before} vs {args.after}: {len(status)} files\n")
    print("| files | how they compared |\n|---|---|")
    for s, n in sorted(counts.items()):
        print(f"| {n} | {s} |")
    skipped = sorted(n for n, s in status.items() if s == "skipped")
    if skipped:
        print(f"\nskipped (figures, DVC hashes, run ids): {', '.join(skipped)}")
    for name, d in diffs.items():
        print(f"\n## {name}: {len(d)} difference(s)")
        for line in d[: args.show]:
            print(f"- {line}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
