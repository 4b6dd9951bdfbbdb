"""Peak memory of reading Eurus-2's code rows: the old read-all path against the Arrow filter.

What: writes a parquet file shaped like ``PRIME-RL/Eurus-2-RL-Data`` ``train.parquet`` (verl layout: ``data_source``,
``prompt`` = a system and a user message, ``ability``, ``reward_model`` = ``{style, ground_truth}``, ``extra_info`` =
``{split, index}``; about 5.6% of the rows are code, whose ground truth is a JSON list of test cases, as 27k of the
real file's ~482k rows are) until it reaches ``--size`` bytes (default 1.7 GB, the real file's size), then reads the
code rows twice, each in a fresh process, and prints the peak resident memory (``ru_maxrss``) of each, and that
peak less the process's RSS after its imports ("of which reading"):

- ``old``: ``pyarrow.parquet.read_table(path).to_pylist()`` and a Python filter on ``ability`` (what
  ``brorl.data.benchmarks`` did before issue 17);
- ``new``: :func:`brorl.data.benchmarks.select_rows` (column projection, ``ability == "code"`` evaluated in
  Arrow one record batch at a time, only the kept rows become Python objects).

The old path holds the whole table and every row as Python objects at once, so at the full size it needs several
times the file's size in memory: it runs only while the file is at most ``--old-max-size`` (default 0.45 GB;
``--old-max-size 0`` = always) and is otherwise reported as not run; measure it at smaller ``--size`` values and
extrapolate (it grows linearly with the rows).

Run: ``nice -n 10 python benchmarks/bench_eurus_filter.py [--size 1.7e9] [--dir /tmp] [--keep]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CODE_FRACTION = 27_000 / 482_000
WORDS = ("the of and to in is that for it as with was on be by this are or an at from which we have not can but all "
         "integer sum print input output value number each case test array string given find prime return first "
         "second line query graph tree node edge minimum maximum modulo answer solution problem between").split()


def _pool(n_chars: int, seed: int = 0) -> str:
    """Text to slice row contents from: common words mixed with 20,000 made-up ones (LaTeX, identifiers, numbers),
    so that snappy compresses it about as much as the real file (1.7 GB for ~482k rows, ~3.5 kB a row)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz0123456789\\{}_^$"
    rare = ["".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(20_000)]
    words, size = [], 0
    while size < n_chars:
        w = rng.choice(WORDS) if rng.random() < 0.6 else rng.choice(rare)
        words.append(w)
        size += len(w) + 1
    return " ".join(words)


def _rows(rng: random.Random, pool: str, start: int, n: int) -> list[dict]:
    def text(lo: int, hi: int) -> str:
        k = rng.randint(lo, hi)
        at = rng.randrange(0, len(pool) - k)
        return pool[at:at + k]

    rows = []
    for i in range(start, start + n):
        code = rng.random() < CODE_FRACTION
        if code:
            cases = [{"input": text(20, 400), "output": text(5, 100)} for _ in range(rng.randint(3, 12))]
            truth = json.dumps({"inputs": [c["input"] for c in cases], "outputs": [c["output"] for c in cases]})
        else:
            truth = str(rng.randint(0, 10_000))
        rows.append({
            "data_source": rng.choice(["apps", "codecontests", "taco", "codeforces"]) if code
            else rng.choice(["numina_olympiads", "numina_cn_k12", "numina_synthetic_math", "numina_amc_aime"]),
            "prompt": [{"role": "system", "content": text(600, 900)},
                       {"role": "user", "content": text(3000, 6000) if code else text(3000, 5500)}],
            "ability": "code" if code else "math",
            "reward_model": {"style": "rule", "ground_truth": truth},
            "extra_info": {"split": "train", "index": i},
        })
    return rows


def generate(path: Path, size: int, row_group_rows: int, seed: int = 0) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    pool = _pool(64 << 20, seed)
    t0, n, writer = time.perf_counter(), 0, None
    try:
        while not path.exists() or path.stat().st_size < size:
            table = pa.Table.from_pylist(_rows(rng, pool, n, row_group_rows))
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema, compression="snappy")
            writer.write_table(table)
            n += table.num_rows
    finally:
        if writer is not None:
            writer.close()
    meta = pq.ParquetFile(path).metadata
    return {"rows": meta.num_rows, "row_groups": meta.num_row_groups, "file_bytes": path.stat().st_size,
            "arrow_bytes": sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)),
            "seconds": time.perf_counter() - t0}


def measure(mode: str, path: str) -> dict:
    """Run in a fresh process: read the code rows with ``mode`` and report the RSS high-water mark."""
    import pyarrow.parquet as pq

    from brorl.data import benchmarks
    from brorl.data.catalog import TRAIN_SOURCES

    spec = TRAIN_SOURCES["eurus2_code"]
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    if mode == "old":
        rows = pq.read_table(path).to_pylist()
        kept = [(i, r) for i, r in enumerate(rows) if benchmarks._selected(spec, r)]
    else:
        kept, _, _ = benchmarks.select_rows(spec, path)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"mode": mode, "kept": len(kept), "seconds": seconds, "peak_rss": peak, "baseline_rss": base}


def _gb(x: float) -> str:
    return f"{x / 1e9:.2f} GB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=float, default=1.7e9, help="file size in bytes (default 1.7e9, the real file's)")
    ap.add_argument("--row-group-rows", type=int, default=1000,
                    help="rows per row group (HF datasets' to_parquet writes 1,000-row groups)")
    ap.add_argument("--old-max-size", type=float, default=0.45e9,
                    help="run the old read-all path only up to this file size (0 = always)")
    ap.add_argument("--dir", default=None, help="where to write the file (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the generated file")
    ap.add_argument("--measure", choices=["old", "new"], help=argparse.SUPPRESS)
    ap.add_argument("--file", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, args.file)))
        return 0

    folder = Path(tempfile.mkdtemp(prefix="bench-eurus-", dir=args.dir))
    path = folder / "train.parquet"
    try:
        info = generate(path, int(args.size), args.row_group_rows)
        print(f"generated {path}: {info['rows']:,} rows in {info['row_groups']} row groups, "
              f"file {_gb(info['file_bytes'])}, {_gb(info['arrow_bytes'])} uncompressed in Arrow "
              f"({info['seconds']:.0f} s)", flush=True)
        results = {}
        for mode in ("old", "new"):
            if mode == "old" and args.old_max_size and info["file_bytes"] > args.old_max_size:
                results[mode] = None
                continue
            proc = subprocess.run([sys.executable, __file__, "--measure", mode, "--file", str(path)],
                                  capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
            if proc.returncode != 0:
                raise SystemExit(f"{mode} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
            results[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
        print("\n| path | code rows kept | peak RSS | of which reading | reading / file size | reading / Arrow size "
              "| seconds |")
        print("|---|---|---|---|---|---|---|")
        for mode, r in results.items():
            if r is None:
                print(f"| {mode} | not run (file > --old-max-size {_gb(args.old_max_size)}) | | | | | |")
                continue
            read = r["peak_rss"] - r["baseline_rss"]
            print(f"| {mode} | {r['kept']:,} | {_gb(r['peak_rss'])} | {_gb(read)} | {read / info['file_bytes']:.2f} | "
                  f"{read / info['arrow_bytes']:.2f} | {r['seconds']:.1f} |")
        if results.get("old") and results.get("new"):
            assert results["old"]["kept"] == results["new"]["kept"], "the two paths kept different rows"
        print(json.dumps({"file": info, "results": results}))
    finally:
        if not args.keep:
            path.unlink(missing_ok=True)
            folder.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
