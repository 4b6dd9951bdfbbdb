"""The benchmark converters: a catalog row (:mod:`brorl.data.catalog`) -> a pinned hub snapshot -> a JSONL cache.

:data:`brorl.data.catalog.PAPER_BENCHMARKS` says, for every benchmark the paper profile evaluates, where its problems
come from (a Hugging Face dataset repository at a revision, fetched through :mod:`brorl.data.hub` -- the same
pinned, sha256-manifested code path as the checkpoints -- or, for a generated kind such as Reasoning Gym, made
locally), which files of the snapshot hold them, which columns are the problem text, the gold answer and the id,
and its ``kind``. :func:`prepare_benchmark` turns that into one JSONL file per benchmark, one record per problem::

    {"id": ..., "benchmark": ..., "prompt": <the user message>, "problem": <the raw problem text>,
     "answer": <gold>, "source": <repo@commit:file#row or generator settings>, ...kind-specific fields}

What a row becomes (the prompt, the kind-specific fields, which rows are unusable) is its kind's converter, in
``brorl.kinds.<kind>`` (math, gpqa, ifeval, code, reasoning_gym: :mod:`brorl.kinds`); this module does what every
kind shares: fetch, select rows (``where``), convert, check ids, cache and verify.

Revisions: every ``revision`` in the catalog is the placeholder ``"main"`` (``revision_pinned=False``): the papers
name no commits. ``config/paper.yaml`` pins the ones seen in public references (``evaluation.revisions``, passed as
``revision=``); the paper profile refuses the others unless ``checkpoints.allow_unpinned`` (``brorl.cli``). The
first :func:`prepare_benchmark` resolves the revision and the fetch manifest (and the JSONL's meta file) records
the commit; later runs verify that commit's files and never re-resolve ``main`` unless asked (``refresh=True``).

Gated data: GPQA (``gated``: its terms) needs ``HF_TOKEN`` (:func:`check_gated_access`, before any download) and
stays local by default: :func:`benchmark_data_root` puts its JSONL under ``resources/gated/`` and
:func:`keep_gated_local` keeps its completions there, sharing scores and hashes only.

Unusable rows: a row the kind's converter cannot use stops the benchmark (:class:`BenchmarkDataError` naming it);
a row it may drop (:class:`brorl.kinds.base.RowSkipped`) is counted: a code row without usable test cases always,
a maths row without a gold answer only in a training source (``skip_unusable_gold``).

Caching: the JSONL is written atomically, with ``<dest>.meta.json`` next to it (what was asked -- the catalog row,
the revision, the kind's prompt text and settings --, the commit or generator it came from, its sha256). A rerun
with the same request only checks: the JSONL's sha256 against the meta file and, when the snapshot folder is
there, the snapshot against its fetch manifest (:func:`brorl.data.hub.verify`). A damaged file raises
:class:`brorl.data.hub.ChecksumError` naming it and is never repaired silently: delete it and rerun.
"""

from __future__ import annotations

import csv
import datetime as _dt
import hashlib
import json
import logging
import os
from dataclasses import replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from brorl import kinds
from brorl.data import hub, jsonl
from brorl.data.catalog import BenchmarkSpec, benchmark_spec, is_gated
from brorl.data.hub import ChecksumError, FetchError, Problem
from brorl.kinds import PROMPT_SEPARATOR
from brorl.kinds.base import RowError, RowSkipped
from brorl.kinds.reasoning_gym import RG_SAMPLES_PER_TASK, RG_SEED

log = logging.getLogger(__name__)

FORMAT = "brorl.paper_benchmark/1"
CONVERTER_VERSION = 1
"""Bump when a converter's output changes: the cached JSONL files are then rebuilt (status ``replaced``)."""

DATA_EXTENSIONS = (".parquet", ".jsonl", ".json", ".csv")
PARQUET_BATCH_ROWS = 4096
"""Rows per Arrow record batch when a parquet file is filtered (``where``) before conversion."""


class BenchmarkDataError(FetchError):
    """The snapshot does not hold what the table says (no matching file, a missing column, duplicate ids)."""


def default_meta_path(dest: str | os.PathLike[str]) -> Path:
    dest = Path(dest)
    return dest.with_name(dest.name + ".meta.json")


def default_snapshot_dir(dest: str | os.PathLike[str]) -> Path:
    """``<data_dir>/<name>/test.jsonl`` -> ``<data_dir>/<name>/snapshot`` (its manifest beside it)."""
    return Path(dest).parent / "snapshot"


# ----------------------------------------------------------------------------------------------- snapshot data

def read_records(path: str | os.PathLike[str]) -> list[dict]:
    """The records of a JSON-lines file (what :func:`prepare_benchmark` writes): each a JSON object with a usable
    ``answer``; anything else is a :class:`brorl.data.jsonl.RecordError` naming the file and line."""
    return jsonl.read_records(path)


def read_table(path: str | os.PathLike[str]) -> list[dict]:
    """Rows of one data file: parquet, JSON lines, JSON (a list, or ``{"data": [...]}``) or CSV."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if suffix == ".jsonl":
        return jsonl.read_rows(path)  # a source's raw rows: objects, whatever their columns
    if suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise BenchmarkDataError(f"{path}: not JSON: {exc}") from None
        if isinstance(data, dict):
            for key in ("data", "rows", "test", "train"):
                if isinstance(data.get(key), list):
                    data = data[key]
                    break
            else:
                raise BenchmarkDataError(f"{path}: a JSON object without a list of rows")
        if not isinstance(data, list):
            raise BenchmarkDataError(f"{path}: neither a list of rows nor an object holding one")
        for i, row in enumerate(data):
            if not isinstance(row, dict):
                raise BenchmarkDataError(f"{path}: row {i} is a {type(row).__name__}, not an object ({str(row)[:60]})")
        return data
    if suffix == ".csv":
        with open(path, encoding="utf-8", newline="") as f:
            return list(csv.DictReader(f))
    raise BenchmarkDataError(f"{path}: unsupported data file type {suffix!r} (want one of {DATA_EXTENSIONS})")


def data_files_in(snapshot_dir: Path, patterns: Sequence[str], files: Iterable[str]) -> list[str]:
    """The snapshot's data files (relative paths, sorted) that match the spec's globs."""
    out = sorted(rel for rel in files if Path(rel).suffix.lower() in DATA_EXTENSIONS
                 and any(fnmatchcase(rel, p) for p in patterns))
    if not out:
        raise BenchmarkDataError(
            f"no data file in {snapshot_dir} matches {list(patterns)} (data files are {DATA_EXTENSIONS}); the "
            f"snapshot holds {sorted(files)[:20]}. Fix the benchmark's 'files' in brorl.data.catalog.")
    return out


def _source(repo_id: str, commit: str, rel: str, row: int) -> str:
    return f"{repo_id}@{commit}:{rel}#{row}"


def _norm_key(value) -> str:
    return "".join(ch for ch in str(value).lower() if ch.isalnum())


def _selected(spec: BenchmarkSpec, row: Mapping) -> bool:
    return all(_norm_key(row.get(col, "")) in {_norm_key(v) for v in values} for col, values in spec.where.items())


def select_rows(spec: BenchmarkSpec, path: str | os.PathLike[str],
                batch_rows: int = PARQUET_BATCH_ROWS) -> tuple[list[tuple[int, dict]], int, dict[str, list[str]]]:
    """The rows of one data file that ``spec.where`` keeps, as ``(row index in the file, row)``; the file's row
    count; and the distinct values of the ``where`` columns (up to 50 each, for a message when nothing matches).

    A parquet file with a ``where`` is filtered in Arrow, one record batch at a time, reading only the columns the
    spec names (Eurus-2's train.parquet: 1.7 GB, ~482k rows, ~27k of them code): the rows left out never become
    Python objects. Other files are read whole (:func:`read_table`)."""
    path = Path(path)
    seen: dict[str, set[str]] = {col: set() for col in spec.where}
    if not spec.where or path.suffix.lower() != ".parquet":
        rows = read_table(path)
        for row in rows:
            for col in seen:
                if len(seen[col]) < 50:
                    seen[col].add(str(row.get(col)))
        kept = [(i, row) for i, row in enumerate(rows) if _selected(spec, row)]
        return kept, len(rows), {c: sorted(v) for c, v in seen.items()}
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    # pre_buffer=False: the default pre-buffers every row group's column chunks, i.e. reads the whole file into memory
    pf = pq.ParquetFile(path, buffer_size=1 << 20, pre_buffer=False)
    wanted = {c for cands in spec.fields.values() for c in cands} | set(spec.where)
    columns = [c for c in pf.schema_arrow.names if c in wanted]
    allowed = {col: pa.array(sorted({_norm_key(v) for v in values})) for col, values in spec.where.items()}
    kept, n = [], 0
    for batch in pf.iter_batches(batch_size=batch_rows, columns=columns):
        mask = pa.array(np.ones(batch.num_rows, dtype=bool))
        for col, values in allowed.items():
            if col not in batch.schema.names:
                mask = pa.array(np.zeros(batch.num_rows, dtype=bool))
                seen[col].add("None")
                continue
            text = pc.cast(batch.column(col), pa.string())
            if len(seen[col]) < 50:
                seen[col].update(str(v) for v in pc.unique(text).to_pylist()[:50])
            key = pc.replace_substring_regex(pc.utf8_lower(pc.fill_null(text, "None")), r"[^\p{L}\p{N}]", "")
            mask = pc.and_(mask, pc.is_in(key, value_set=values))
        idx = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
        if len(idx):
            kept.extend(zip((n + idx).tolist(), batch.take(pa.array(idx)).to_pylist()))
        n += batch.num_rows
    return kept, n, {c: sorted(v)[:50] for c, v in seen.items()}


def convert_rows(spec: BenchmarkSpec, rows: Sequence[tuple[str, int, Mapping]],
                 commit: str) -> tuple[list[dict], dict[str, int]]:
    """Records of a hub-backed benchmark from ``(file, row index, row)`` triples already selected by
    ``spec.where``, each converted by its kind (``brorl.kinds.<kind>``), and what was skipped: ``no_tests`` (code
    rows without usable test cases, dropped with a warning) and ``no_gold`` (maths rows without a usable gold
    answer: skipped and counted when ``spec.skip_unusable_gold`` -- training sources --, else a
    :class:`BenchmarkDataError` naming the row)."""
    convert = kinds.kind(spec.kind).convert
    skipped = {"no_gold": 0, "no_tests": 0}
    records = []
    for rel, i, row in rows:
        try:
            records.append(convert(spec, rel, i, row, _source(spec.repo_id, commit, rel, i)))
        except RowSkipped as skip:
            if skip.reason == "no_gold" and not spec.skip_unusable_gold:
                raise BenchmarkDataError(str(skip)) from None
            skipped[skip.reason] += 1
        except RowError as err:
            raise BenchmarkDataError(str(err)) from None
    if skipped["no_tests"]:
        log.warning("%s: %d rows without usable test cases dropped", spec.name, skipped["no_tests"])
    if skipped["no_gold"]:
        log.warning("%s: %d rows without a usable gold answer skipped", spec.name, skipped["no_gold"])
    seen: dict[str, str] = {}
    for r in records:
        if r["id"] in seen:
            raise BenchmarkDataError(f"{spec.name}: duplicate id {r['id']!r} ({seen[r['id']]} and {r['source']}); "
                                     "fix the id column in the table")
        seen[r["id"]] = r["source"]
    return records, skipped


# --------------------------------------------------------------------------------------------------- prepare

def jsonl_bytes(records: Iterable[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=True) + "\n" for r in records).encode("utf-8")


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    from brorl.atomic import write_bytes

    write_bytes(path, data)


def _request(spec: BenchmarkSpec, revision: str | None, rg: Mapping | None) -> dict:
    kind = kinds.kind(spec.kind)
    req = {"format": FORMAT, "converter_version": CONVERTER_VERSION, "benchmark": spec.name,
           "spec": spec.to_dict(), "revision": revision,
           "prompt": {"separator": PROMPT_SEPARATOR, "instruction": kind.instruction, **kind.prompt_extra},
           **kind.request_extra}
    if rg is not None:
        req[spec.kind] = dict(rg)
    return req


def _damaged(dest: Path, actual: str, expected: str, meta_path: Path) -> ChecksumError:
    return ChecksumError([Problem(path=str(dest), kind="sha256", actual=actual, expected=expected,
                                  against=f"meta {meta_path}")],
                         hint=f"{dest} no longer matches {meta_path}. It is left as it is; delete it and re-run "
                              "prepare_benchmark to rebuild it.")


def check_gated_access(spec: BenchmarkSpec, source, snapshot_dir: str | os.PathLike[str] | None = None) -> None:
    """Refuse, before any download, to fetch a gated benchmark from the real hub without a token
    (:class:`brorl.data.hub.GatedRepoAccessError`, naming HF_TOKEN and the terms). Nothing to check for a local
    stand-in, an ungated benchmark or a snapshot already fetched (``snapshot_dir`` with its manifest)."""
    if not spec.gated or source is not None or hub.hf_token():
        return
    if snapshot_dir is not None and Path(snapshot_dir).is_dir() and hub.default_manifest_path(snapshot_dir).is_file():
        return
    raise hub.GatedRepoAccessError(hub.gated_message(spec.repo_id, "dataset", spec.gated))


GATED_LOCAL_ROOT = Path("resources/gated")
"""Where a gated benchmark's data (``benchmarks/<name>/``) and full evaluation records (``eval/<model>/<name>.json``)
live unless ``evaluation.share_gated``: outside ``results/``, so never DVC-tracked or pushed."""


def benchmark_data_root(name: str, share_gated: bool = False) -> str:
    """The folder holding ``<name>/test.jsonl``: ``results/data/benchmarks`` (DVC-tracked, pushed), or for a gated
    benchmark without ``share_gated`` the local-only ``resources/gated/benchmarks``."""
    return str(GATED_LOCAL_ROOT / "benchmarks") if is_gated(name) and not share_gated else "results/data/benchmarks"


def keep_gated_local(name: str, out_json: str | os.PathLike[str], *, share_gated: bool = False,
                     local_root: str | os.PathLike[str] = GATED_LOCAL_ROOT) -> Path | None:
    """For a gated benchmark (unless ``share_gated``): move the full evaluation result ``out_json`` (problems'
    completions) to ``<local_root>/eval/<model>/<name>.json`` and leave at ``out_json`` the same result with every
    sample's completions replaced by their sha256 (scores, ids, metrics kept), which is what gets pushed and
    logged. Returns the local copy's path, or None when nothing was done."""
    if not is_gated(name) or share_gated:
        return None
    out_json = Path(out_json)
    result = json.loads(out_json.read_text())
    local = Path(local_root) / "eval" / out_json.parent.name / out_json.name
    write_atomic(local, out_json.read_bytes())
    for sample in result.get("samples", []):
        texts = sample.pop("completions", [])
        sample["completions_sha256"] = [hashlib.sha256(str(t).encode()).hexdigest() for t in texts]
    result["completions_local"] = {"path": str(local), "sha256": _sha256_file(local),
                                   "why": f"{name} is gated; its terms: {benchmark_spec(name).gated}"}
    write_atomic(out_json, (json.dumps(result, indent=1, ensure_ascii=True) + "\n").encode())
    return local


def verify_benchmark(dest_jsonl: str | os.PathLike[str], *, meta: str | os.PathLike[str] | None = None,
                     snapshot_dir: str | os.PathLike[str] | None = None) -> dict:
    """Check a prepared benchmark without any client: the JSONL's sha256 against its meta file and, when
    the snapshot folder exists, the snapshot against its fetch manifest. Raises on any difference."""
    dest = Path(dest_jsonl)
    meta_path = Path(meta) if meta is not None else default_meta_path(dest)
    if not meta_path.is_file():
        raise FetchError(f"no meta file {meta_path}: {dest} was not made by prepare_benchmark")
    m = json.loads(meta_path.read_text())
    if not dest.is_file():
        raise FetchError(f"{dest} does not exist (meta {meta_path} records sha256 {m['sha256']})")
    actual = _sha256_file(dest)
    if actual != m["sha256"]:
        raise _damaged(dest, actual, m["sha256"], meta_path)
    snapshot_checked = False
    if m.get("snapshot"):
        snap = Path(snapshot_dir) if snapshot_dir is not None else Path(m["snapshot"]["dest"])
        if hub.default_manifest_path(snap).is_file() and snap.is_dir():
            got = hub.verify(snap)
            if got["commit"] != m["snapshot"]["commit"]:
                raise FetchError(f"{snap} holds commit {got['commit']} but {dest} was made from "
                                 f"{m['snapshot']['commit']}; delete both and re-run prepare_benchmark")
            snapshot_checked = True
    return {"status": "verified", "benchmark": m["benchmark"], "dest": str(dest), "meta": str(meta_path),
            "n_records": m["n_records"], "sha256": m["sha256"], "commit": (m.get("snapshot") or {}).get("commit"),
            "snapshot_checked": snapshot_checked, "report": m.get("report")}


def prepare_benchmark(name: str, source: str | os.PathLike[str] | hub.HubClient | None,
                      dest_jsonl: str | os.PathLike[str], *, revision: str | None = None,
                      snapshot_dir: str | os.PathLike[str] | None = None, spec: BenchmarkSpec | None = None,
                      refresh: bool = False, samples_per_task: int = RG_SAMPLES_PER_TASK, seed: int = RG_SEED,
                      tasks: Sequence[str] | None = None, task_configs: Mapping[str, Mapping] | None = None,
                      log_fn: Callable[[str], None] | None = None) -> dict:
    """Fetch (or generate) benchmark ``name`` and cache it as JSONL at ``dest_jsonl``; idempotent.

    ``source``: where the hub snapshot comes from, as for :func:`brorl.data.hub.fetch_dataset` (``None`` = the
    real Hugging Face Hub, refused offline; a folder = a local stand-in; ignored for ``reasoning_gym``).
    ``revision`` overrides the table's (placeholder) revision; ``snapshot_dir`` defaults to
    ``<dest folder>/snapshot`` (fetch manifest beside it); ``spec`` replaces the table entry (other copies or
    column names). A generated kind (Reasoning Gym) only: ``samples_per_task`` (100), ``seed``, ``tasks`` (a subset
    of task names; default all tasks of the 11 categories) and ``task_configs``
    (:func:`brorl.kinds.reasoning_gym.generate_reasoning_gym`).

    Returns ``{"status": "prepared" | "verified" | "replaced" | "restored", "benchmark", "dest", "meta",
    "n_records", "sha256", "commit", "snapshot_checked", "report", "fetch"}``. ``verified``: the cached file
    (and snapshot) matched and nothing was fetched or written; ``restored``: the JSONL was missing and was
    rebuilt with the recorded content; ``replaced``: the request changed (revision, table entry, converter,
    generation settings) or ``refresh=True``.
    """
    say = log_fn or log.info
    spec = spec or benchmark_spec(name)
    if spec.name != name:
        spec = replace(spec, name=name)
    if spec.kind not in kinds.names():
        raise ValueError(f"{name}: unknown kind {spec.kind!r}; known: {kinds.names()}")
    kind = kinds.kind(spec.kind)
    dest = Path(dest_jsonl)
    meta_path = default_meta_path(dest)
    rg = None
    if spec.generated:
        if kind.generate is None:
            raise ValueError(f"{name}: kind {spec.kind} is not generated; give a repo_id")
        rg = kind.generation_request(seed=seed, samples_per_task=samples_per_task, tasks=tasks,
                                     task_configs=task_configs)
        revision = None
    else:
        revision = revision or spec.revision or "main"
    request = _request(spec, revision, rg)
    snap = Path(snapshot_dir) if snapshot_dir is not None else default_snapshot_dir(dest)

    old = json.loads(meta_path.read_text()) if meta_path.is_file() else None
    same = old is not None and old.get("request") == request
    if dest.exists() and old is None:
        raise FetchError(f"{dest} exists but has no meta file {meta_path}; it was not made by prepare_benchmark. "
                         f"Move it away and re-run.")
    if dest.exists() and same and not refresh:
        out = verify_benchmark(dest, meta=meta_path, snapshot_dir=None if spec.generated else snap)
        say(f"{name}: verified {dest} ({out['n_records']} records, sha256 {out['sha256'][:12]})")
        return {**out, "fetch": None}

    fetched = None
    if spec.generated:
        records, report = kind.generate(rg, tasks=tasks, task_configs=task_configs)
        snapshot_meta = None
    else:
        lock = same and not refresh  # a missing JSONL is rebuilt from the recorded commit
        check_gated_access(spec, source, snap)
        # The fetch manifest pins the commit it resolved: a verified or restored snapshot never re-resolves.
        fetched = hub.fetch_dataset(spec.repo_id, revision, snap, source=source,
                                      allow_patterns=list(spec.files), refresh=refresh)
        if lock and fetched["commit"] != old["snapshot"]["commit"]:
            raise FetchError(f"{name}: {snap} holds commit {fetched['commit']}, the JSONL was made from "
                             f"{old['snapshot']['commit']}")
        manifest = json.loads(Path(fetched["manifest"]).read_text())
        rels = data_files_in(snap, spec.files, [e["path"] for e in manifest["files"]])
        rows, n_rows, seen = [], 0, {}
        for rel in rels:
            kept, n, values = select_rows(spec, snap / rel)
            rows += [(rel, i, row) for i, row in kept]
            n_rows += n
            seen.update({c: sorted({*seen.get(c, []), *v})[:50] for c, v in values.items()})
        if spec.where and n_rows and not rows:
            raise BenchmarkDataError(f"{name}: no row matches {dict(spec.where)}; the snapshot holds {seen}. "
                                     "Fix 'where' in the table")
        records, skipped = convert_rows(spec, rows, fetched["commit"])
        report = {"files": rels, "n_rows": n_rows}
        if spec.where:
            report["n_selected"] = len(rows)
        if any(skipped.values()):
            report["skipped"] = {k: v for k, v in skipped.items() if v}
        if spec.expected_size is not None and len(records) != spec.expected_size:
            report["size_differs"] = f"{len(records)} problems, the public set has {spec.expected_size}"
            log.warning("%s: %s", name, report["size_differs"])
        snapshot_meta = {"repo_id": spec.repo_id, "revision": revision, "commit": fetched["commit"],
                         "dest": str(snap), "manifest": fetched["manifest"], "source": fetched["source"]}
    if not records:
        raise BenchmarkDataError(f"{name}: no records")
    data = jsonl_bytes(records)
    sha = hashlib.sha256(data).hexdigest()
    if same and not refresh:
        if sha != old["sha256"]:
            raise ChecksumError(
                [Problem(path=str(dest), kind="sha256", actual=sha, expected=old["sha256"],
                         against=f"meta {meta_path}")],
                hint=f"Rebuilding the missing {dest} gave other content than {meta_path} records (the snapshot or "
                     "the generator no longer reproduces it); nothing was written. Delete the meta file to accept "
                     "the new content.")
        status = "restored"
    else:
        status = "replaced" if (dest.exists() or old is not None) else "prepared"
    meta = {"format": FORMAT, "benchmark": name, "request": request, "n_records": len(records), "sha256": sha,
            "snapshot": snapshot_meta, "report": report,
            "prepared_at": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()}
    write_atomic(dest, data)
    if status != "restored":  # a restore reproduces what the meta file records: it stays as it is
        write_atomic(meta_path, (json.dumps(meta, indent=1) + "\n").encode())
    say(f"{name}: {status} {dest} ({len(records)} records, sha256 {sha[:12]})")
    return {"status": status, "benchmark": name, "dest": str(dest), "meta": str(meta_path),
            "n_records": len(records), "sha256": sha, "commit": (snapshot_meta or {}).get("commit"),
            "snapshot_checked": snapshot_meta is not None, "report": report, "fetch": fetched}


def run_prepare_benchmark(config: Mapping, name: str, dest_jsonl: str | os.PathLike[str],
                          picked_tasks: str | os.PathLike[str] | None = None, *, pins_required: bool) -> dict:
    """``brorl prepare-benchmark``: a paper benchmark as JSONL, fetched at its pinned revision (``config``:
    ``revisions``, ``source``, ``allow_unpinned``; :func:`brorl.data.hub.require_pins`) or generated (Reasoning
    Gym: ``config["reasoning_gym"]``, its tasks replaced by rg_difficulty's picked ones when ``picked_tasks``);
    the status, pins and record count logged to the rule's MLflow run."""
    import mlflow

    revision = (config.get("revisions") or {}).get(name)
    spec = benchmark_spec(name)
    if not spec.generated:
        hub.require_pins(config, {name: (revision or spec.revision, None)}, f"evaluation.revisions.{name}",
                         pins_required=pins_required)
    rg = (config.get("reasoning_gym") or {}) if spec.generated else {}  # evaluation.reasoning_gym (small profile)
    if spec.generated and picked_tasks:  # rg_difficulty.pick: evaluate on the tasks the rule picked
        from brorl.kinds.reasoning_gym import apply_picked, picked_tasks as read_picked

        rg = apply_picked(rg, read_picked(picked_tasks), "tasks", "task_configs")
        print(f"[prepare-benchmark] tasks picked by {picked_tasks}: {', '.join(rg['tasks'])}", flush=True)
    info = prepare_benchmark(name, config.get("source"), dest_jsonl, revision=revision, **rg,
                             log_fn=lambda msg: print(f"[prepare-benchmark] {msg}", flush=True))
    mlflow.set_tags({"benchmark_status": info["status"], "commit": str(info.get("commit")),
                     "sha256": str(info.get("sha256"))})
    mlflow.log_metrics({"n_records": float(info["n_records"])})
    mlflow.log_artifact(info["meta"])
    print(f"[prepare-benchmark] {name}: {info['status']}, {info['n_records']} records -> {dest_jsonl}")
    return info


__all__ = [
    "BenchmarkDataError", "prepare_benchmark", "read_records", "check_gated_access", "benchmark_data_root",
    "keep_gated_local", "GATED_LOCAL_ROOT", "select_rows", "convert_rows", "verify_benchmark", "read_table",
    "default_meta_path", "default_snapshot_dir", "jsonl_bytes", "write_atomic",
]
