"""One MLflow run per Snakemake rule.

Every rule that produces results calls :func:`rule_run`, which opens a run in the project's store and tags
it with the rule name, its wildcards, the git commit, the profile and a hash of the config the rule
consumed, so that every table cell and figure can be traced back to the run (and the code) that made it.

The default store is a sqlite file inside the project (``sqlite:///mlflow.db``) with artifacts under
``mlartifacts/``: no server is needed, and ``mlflow ui --backend-store-uri sqlite:///mlflow.db`` shows the
runs. ``MLFLOW_TRACKING_URI`` in the environment overrides the configured store.

The DVC side of the artifacts (``brorl dvc-track``, ``brorl pull``) is here too: :func:`dvc_track`, :func:`pull`.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "1")

DEFAULT_TRACKING = {"uri": "sqlite:///mlflow.db", "experiment": "brorl", "artifact_root": "mlartifacts"}


def config_hash(section: Any) -> str:
    """sha256 (first 16 hex digits) of the canonical JSON of a config section."""
    blob = json.dumps(section, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def git_commit(cwd: str | Path = ".") -> str:
    """HEAD's commit, with a ``-dirty`` suffix when tracked files differ from it; ``unknown`` outside git.
    Read once per folder and process (a job that opens several runs asks git once)."""
    return _git_commit(os.path.abspath(cwd))


@lru_cache(maxsize=None)
def _git_commit(cwd: str) -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                                check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists become their JSON text."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        elif isinstance(value, (list, tuple)):
            out[name] = json.dumps(list(value))
        else:
            out[name] = value
    return out


def tracking_settings(tracking: dict | None) -> dict:
    """The MLflow settings: the defaults, the config's ``tracking`` section, then MLFLOW_TRACKING_URI."""
    merged = dict(DEFAULT_TRACKING)
    merged.update(tracking or {})
    if os.environ.get("MLFLOW_TRACKING_URI"):
        merged["uri"] = os.environ["MLFLOW_TRACKING_URI"]
    return merged


_EXPERIMENTS: dict[tuple[str, str, str], str] = {}
"""(working folder, store URI, experiment name) -> experiment id, looked up once per process."""

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
"""MLflow 3's experiment kind (the UI's ExperimentKind enum, mlflow 3.17.2 server/js): with
``custom_model_development`` the experiment opens on its runs table, not on the GenAI traces overview."""
EXPERIMENT_KIND = "custom_model_development"


class StoreError(RuntimeError):
    """The MLflow store cannot be used as it is (a broken or half-migrated sqlite file that holds runs)."""


def sqlite_path(uri: str) -> Path | None:
    """The file of a ``sqlite:///`` store URI (relative to the working folder, or ``sqlite:////abs``);
    ``None`` for any other store (a server, another database), which MLflow itself creates."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///"):].split("?", 1)[0]
    if not path or path == ":memory:":
        return None
    return Path(path)


@contextmanager
def _store_lock(db: Path) -> Iterator[None]:
    """An exclusive lock on ``<db>.lock`` (flock: released by the kernel when its holder dies, even by SIGKILL)."""
    import fcntl

    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.with_name(db.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def store_problem(db: Path) -> str | None:
    """What is wrong with the sqlite store ``db`` (``None``: a complete store at this MLflow's schema head).

    Checks what a half-created store lacks: a readable sqlite file, every table of MLflow's schema, and an
    alembic revision equal to the head of the installed MLflow's migrations."""
    import sqlite3

    from mlflow.store.db.base_sql_model import Base

    if db.stat().st_size == 0:
        return "the file is empty"
    try:
        con = sqlite3.connect(db, timeout=60)
        try:
            check = con.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                return f"sqlite quick_check: {check}"
            tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "alembic_version" not in tables:
                return "no alembic_version table (its schema migrations never ran or never finished)"
            revisions = [row[0] for row in con.execute("SELECT version_num FROM alembic_version")]
        finally:
            con.close()
    except sqlite3.DatabaseError as err:
        return f"not a readable sqlite database ({err})"
    head = _schema_head()
    if revisions != [head]:
        return f"schema revision {revisions or 'none'}, not the head {head} of the installed MLflow (half-migrated or older)"
    missing = sorted(set(Base.metadata.tables) - tables)
    if missing:
        return f"{len(missing)} of MLflow's tables missing ({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''})"
    return None


@lru_cache(maxsize=None)
def _schema_head() -> str:
    """The head revision of the installed MLflow's migrations (read once per process)."""
    from mlflow.store.db.utils import _get_latest_schema_revision

    return _get_latest_schema_revision()


def _count_runs(db: Path) -> int | None:
    """Runs in ``db`` (0 without a runs table); ``None`` when the file cannot be read as sqlite."""
    import sqlite3

    try:
        con = sqlite3.connect(db, timeout=60)
        try:
            if not con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'").fetchone():
                return 0
            return int(con.execute("SELECT count(*) FROM runs").fetchone()[0])
        finally:
            con.close()
    except sqlite3.DatabaseError:
        return None


def _create_sqlite_store(db: Path, artifact_root: str) -> None:
    """Create and fully migrate a store in a temporary sibling of ``db``, then rename it into place: a kill at
    any moment leaves either no ``db`` or a complete one (never a half-migrated file)."""
    import logging

    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    from brorl.atomic import atomic_path

    with atomic_path(db) as tmp:
        level = logging.getLogger("mlflow.store.db.utils").level
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)  # its two INFO lines per creation
        try:
            store = SqlAlchemyStore(f"sqlite:///{tmp.resolve()}", Path(artifact_root).resolve().as_uri())
            store.engine.dispose()
        finally:
            logging.getLogger("mlflow.store.db.utils").setLevel(level)
        problem = store_problem(tmp)
        if problem:
            raise StoreError(f"a freshly created MLflow store failed its check: {problem}")
    print(f"[tracking] created the MLflow store {db} (schema complete)")


def ensure_store(uri: str, artifact_root: str = DEFAULT_TRACKING["artifact_root"]) -> None:
    """Make sure the sqlite store at ``uri`` exists and is complete; under a lock, so that concurrent openers
    create it once. A missing store is created atomically (:func:`_create_sqlite_store`); a broken one
    (:func:`store_problem`) that holds no runs is moved aside to ``<db>.broken-<time>`` and rebuilt; one that
    holds runs is refused with a :class:`StoreError` saying what to do. Other store URIs are left to MLflow."""
    db = sqlite_path(uri)
    if db is None:
        return
    if db.exists() and store_problem(db) is None:  # a complete store only ever appears whole: no lock needed
        return
    with _store_lock(db):
        if db.exists():
            problem = store_problem(db)
            if problem is None:
                return
            runs = _count_runs(db)
            if runs != 0:
                held = "runs that cannot be read" if runs is None else f"{runs} runs"
                raise StoreError(
                    f"the MLflow store {db} ({uri}) is broken: {problem}. It holds {held}, so it is not rebuilt "
                    f"automatically: back it up, then run `mlflow db upgrade {uri}` if it is an older store, or "
                    f"move it aside (`mv {db} {db}.broken`) to start a new one.")
            aside = db.with_name(f"{db.name}.broken-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
            os.replace(db, aside)
            print(f"[tracking] the MLflow store {db} was half-created ({problem}; no runs): moved aside to "
                  f"{aside.name} and rebuilt")
        _create_sqlite_store(db, artifact_root)


def init_store(tracking: dict | None = None) -> str:
    """Create the store (atomically, :func:`ensure_store`) and the experiment; returns the experiment id.

    Called once from the Snakefile's ``onstart``; every job calls it again, which costs one check of the store
    per process (a job that opens several runs, evaluate: one per benchmark, opens the store once). Safe
    against concurrent callers and against a kill at any moment.
    """
    import mlflow

    cfg = tracking_settings(tracking)
    key = (os.getcwd(), cfg["uri"], cfg["experiment"])  # a relative sqlite URI names another store elsewhere
    if key not in _EXPERIMENTS:
        ensure_store(cfg["uri"], cfg["artifact_root"])
        mlflow.set_tracking_uri(cfg["uri"])
        db = sqlite_path(cfg["uri"])
        exp = mlflow.MlflowClient().get_experiment_by_name(cfg["experiment"])
        if exp is not None and exp.tags.get(EXPERIMENT_KIND_TAG) == EXPERIMENT_KIND:
            _EXPERIMENTS[key] = exp.experiment_id
        else:  # created (or tagged) once, under the store's lock
            with _store_lock(db) if db is not None else _no_lock():
                _EXPERIMENTS[key] = _create_experiment(cfg)
    mlflow.set_tracking_uri(cfg["uri"])
    return _EXPERIMENTS[key]


@contextmanager
def _no_lock() -> Iterator[None]:
    yield


def _create_experiment(cfg: dict) -> str:
    """Get or create the experiment, declared a model-training experiment (:data:`EXPERIMENT_KIND`)."""
    import mlflow

    client = mlflow.MlflowClient()
    for attempt in range(5):
        exp = client.get_experiment_by_name(cfg["experiment"])
        if exp is not None:
            if exp.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
                client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
            return exp.experiment_id
        try:
            artifact_uri = Path(cfg["artifact_root"]).resolve().as_uri()
            return client.create_experiment(cfg["experiment"], artifact_location=artifact_uri,
                                            tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
        except Exception:  # another process (not under our lock: a server's client) created it first
            time.sleep(0.5 * (attempt + 1))
    raise RuntimeError(f"could not create MLflow experiment {cfg['experiment']!r} in {cfg['uri']}")


def _close_killed_runs(experiment_id: str, rule: str, wildcards: str, root: str | None = None) -> None:
    """A job killed by SIGKILL cannot end its MLflow run, which stays RUNNING. Snakemake never runs one job
    twice at once, so when the job starts again, earlier RUNNING runs of the same rule, wildcards and output root
    are dead: mark them KILLED (the rerun's own run is the one a table cell should cite). Another root's run is
    another job (an overlay's, which may run beside the base's: brorl.layout)."""
    import mlflow

    client = mlflow.MlflowClient()
    for run in client.search_runs([experiment_id], filter_string=f"tags.rule = '{rule}' and "
                                  "attributes.status = 'RUNNING'"):
        if run.data.tags.get("wildcards") == wildcards and run.data.tags.get("root") == root:
            client.set_terminated(run.info.run_id, status="KILLED")


@contextmanager
def rule_run(rule: str, *, profile: str, config: dict, wildcards: dict | None = None,
             tracking: dict | None = None, params: dict | None = None, root: str | None = None) -> Iterator[Any]:
    """Open the MLflow run of one rule; yields the active :class:`mlflow.ActiveRun`.

    ``config`` is the config section the rule consumed: it is logged as params (flattened), as a
    ``config.json`` artifact, and hashed into the ``config_hash`` tag. ``root``: the output root the rule writes
    under (brorl.layout; the ``root`` tag the tables select runs by).
    """
    import mlflow

    cfg = tracking_settings(tracking)
    experiment_id = init_store(cfg)
    wildcards = dict(wildcards or {})
    run_name = rule + "".join(f"/{k}={v}" for k, v in sorted(wildcards.items()))
    tags = {
        "rule": rule,
        "wildcards": json.dumps(wildcards, sort_keys=True),
        "git_commit": git_commit(),
        "profile": profile,
        "config_hash": config_hash(config),
        **({"root": root} if root else {}),
        **{f"wildcard.{k}": str(v) for k, v in wildcards.items()},
    }
    _close_killed_runs(experiment_id, rule, tags["wildcards"], root)
    with mlflow.start_run(experiment_id=experiment_id, run_name=run_name, tags=tags) as run:
        flat = flatten({**config, **(params or {})})
        items = list(flat.items())
        for i in range(0, len(items), 100):
            mlflow.log_params(dict(items[i:i + 100]))
        mlflow.log_dict(config, "config.json")
        yield run


def log_curves(curves: dict[str, list[float]], step_offset: int = 0) -> None:
    """Log whole per-step curves ({metric name: values}) in batches of 1,000 points."""
    import mlflow
    from mlflow.entities import Metric

    client = mlflow.MlflowClient()
    run_id = mlflow.active_run().info.run_id
    now = int(time.time() * 1000)
    batch: list[Metric] = []
    for name, values in curves.items():
        for step, value in enumerate(values):
            batch.append(Metric(name, float(value), now, step + step_offset))
            if len(batch) == 1000:
                client.log_batch(run_id, metrics=batch)
                batch = []
    if batch:
        client.log_batch(run_id, metrics=batch)


def numeric_metrics(d: dict, prefix: str = "") -> dict[str, float]:
    """Flatten a nested dict of numbers into MLflow metric names (keys sanitised; non-numbers left out)."""
    out = {}
    for key, value in d.items():
        name = prefix + "".join(c if c.isalnum() or c in "_-./ " else "_" for c in str(key))
        if isinstance(value, dict):
            out.update(numeric_metrics(value, name + "/"))
        elif isinstance(value, (int, float)):
            out[name] = float(value)
    return out


def log_artifacts(*paths: str | Path | None, artifact_path: str | None = None, existing: bool = False) -> None:
    """Log files to the active run (``None`` or empty skipped; with ``existing``, so are files that are not there)."""
    import mlflow

    for path in paths:
        if path and (not existing or Path(path).exists()):
            mlflow.log_artifact(str(path), artifact_path=artifact_path)


def dvc_track(paths: list[str], push: bool = False) -> None:
    """`dvc add` the given output folders (writing <folder>.dvc) and optionally push them."""
    subprocess.run(["dvc", "add", "--quiet", *paths], check=True)
    if push:
        subprocess.run(["dvc", "push", "--quiet", *[f"{p}.dvc" for p in paths]], check=True)
    print(f"[dvc-track] tracked {', '.join(paths)}" + (" and pushed" if push else ""))


def pull_targets(configfile: list[str] | None = None, project: str | Path = ".") -> list[str]:
    """The ``.dvc`` files of one config's roots (brorl.layout): its own and, for the groups an overlay reuses, its
    base's; a checkout holding several profiles' outputs restores each profile on its own."""
    from brorl.config import load_config
    from brorl.layout import GROUPS
    from brorl.profile import Profile

    layout = Profile.from_config(load_config(*(configfile or ["config/config.yaml"]))).layout
    roots = sorted({layout.root_of(group) for group in GROUPS})
    return sorted(str(p.relative_to(project)) if Path(project) != Path(".") else str(p)
                  for root in roots for top in ("results", "resources")
                  for p in (Path(project) / top / root).rglob("*.dvc"))


def pull(targets: list[str], configfile: list[str] | None = None) -> None:
    """`dvc pull` of one profile's outputs (``targets``, default: the .dvc files of its roots), then mark them up
    to date for Snakemake.

    A fresh clone has no .snakemake metadata and `dvc pull` writes files with fresh mtimes in arbitrary
    order, so without `--touch` Snakemake would plan to rebuild outputs that were just restored.
    """
    targets = targets or pull_targets(configfile)
    if not targets:
        raise SystemExit("pull: no .dvc files under this config's roots (results/<root>/, resources/<root>/): "
                         "nothing of this profile was tracked here; run the pipeline, or check --configfile")
    subprocess.run(["dvc", "pull", *targets], check=True)
    cmd = ["snakemake", "--touch", "--cores", "1", "--quiet", "all"]
    if configfile:
        cmd += ["--configfile", *configfile]
    subprocess.run(cmd, check=True)
    print(f"[pull] {len(targets)} .dvc target(s) restored and marked up to date; `snakemake -n` with the same "
          "--configfile should report nothing to do")


UI_VIEW = "workflowType=machine_learning"
"""MLflow 3.17.2's UI picks its view from a browser-wide setting (default: GenAI, which opens an experiment on
"Traces 0"), not from the experiment kind tag; a link that names the Model-training view opens the runs table."""


def ui_links(uri: str = DEFAULT_TRACKING["uri"], base: str = "http://127.0.0.1:5000") -> dict[str, str]:
    """{experiment name: the link that opens its runs table in `mlflow ui` at ``base``} for a sqlite store."""
    import sqlite3

    db = sqlite_path(uri)
    if db is None or not db.exists():
        return {}
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT experiment_id, name FROM experiments WHERE lifecycle_stage = 'active' AND "
                           "name != 'Default' ORDER BY experiment_id").fetchall()
    finally:
        con.close()
    return {name: f"{base}/#/experiments/{exp_id}/runs?{UI_VIEW}" for exp_id, name in rows}


if __name__ == "__main__":  # python -m brorl.tracking [STORE_URI [UI_BASE]]: the links `make mlflow-ui` prints
    import sys

    links = ui_links(*sys.argv[1:3])
    for name, link in links.items():
        print(f"experiment {name}: {link}")
    if not links:
        print("no experiments in the store yet: run the pipeline first")


# brorl root / brorl migrate-layout (issue 32): the roots of brorl.layout for scripts and make targets, and the
# move of an old checkout, whose MLflow runs get their root tag here
def tag_untagged_runs(layout, tracking: dict, profile: str) -> int:
    """Set the ``root`` tag of the profile's runs that have none (runs from before issue 32)."""
    cfg = tracking_settings(tracking)
    db = sqlite_path(cfg["uri"])
    if db is not None and not db.exists():
        return 0
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=cfg["uri"])
    exp = client.get_experiment_by_name(cfg["experiment"])
    if exp is None:
        return 0
    n, token = 0, None
    while True:
        page = client.search_runs([exp.experiment_id], filter_string=f"tags.profile = '{profile}'",
                                  max_results=1000, page_token=token)
        for run in page:
            rule = run.data.tags.get("rule")
            if rule and "root" not in run.data.tags:
                try:
                    root = layout.run_root(rule)
                except KeyError:
                    continue
                client.set_tag(run.info.run_id, "root", root)
                n += 1
        token = page.token
        if not token:
            return n


def run_root(configfile: list[str], group: str | None = None) -> None:
    """``brorl root --configfile FILE... [--group G]``: the root, for scripts and make targets."""
    from brorl.config import load_config
    from brorl.profile import Profile

    layout = Profile.from_config(load_config(*configfile)).layout
    print(layout.root_of(group) if group else layout.root)


def run_migrate_layout(configfile: list[str], dry_run: bool = False) -> None:
    """``brorl migrate-layout --configfile FILE... [--dry-run]``."""
    from brorl.config import load_config
    from brorl.layout import migrate
    from brorl.profile import Profile

    config = load_config(*configfile)
    profile = Profile.from_config(config)
    moves = migrate(profile.layout, ".", dry_run=dry_run)
    if config.get("tracking") is not None and not dry_run:
        tagged = tag_untagged_runs(profile.layout, config["tracking"], profile.name)
        print(f"tagged {tagged} MLflow run(s) of profile {profile.name} with their root")
    if not moves:
        print("migrate-layout: no old-layout outputs here; nothing to do")
    elif not dry_run:
        print(f"migrate-layout: moved {len(moves)} path(s) under results/{profile.layout.root}/ (and the base's "
              f"root for reused groups); `snakemake -n --configfile {' '.join(configfile)}` should plan nothing new")
    print(json.dumps({"root": profile.layout.root, "moves": len(moves), "dry_run": dry_run}))
