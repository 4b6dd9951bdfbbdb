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


def init_store(tracking: dict | None = None) -> str:
    """Create the store (runs sqlite migrations) and the experiment; returns the experiment id.

    Called once from the Snakefile's ``onstart`` so that parallel jobs never race to create the database; a job
    that opens several runs (evaluate: one per benchmark) opens the store once.
    """
    import mlflow

    cfg = tracking_settings(tracking)
    mlflow.set_tracking_uri(cfg["uri"])
    key = (os.getcwd(), cfg["uri"], cfg["experiment"])  # a relative sqlite URI names another store elsewhere
    if key not in _EXPERIMENTS:
        _EXPERIMENTS[key] = _create_experiment(cfg)
    return _EXPERIMENTS[key]


def _create_experiment(cfg: dict) -> str:
    import mlflow

    client = mlflow.MlflowClient()
    for attempt in range(5):
        exp = client.get_experiment_by_name(cfg["experiment"])
        if exp is not None:
            return exp.experiment_id
        try:
            artifact_uri = Path(cfg["artifact_root"]).resolve().as_uri()
            return client.create_experiment(cfg["experiment"], artifact_location=artifact_uri)
        except Exception:  # another process created it first: look it up again
            time.sleep(0.5 * (attempt + 1))
    raise RuntimeError(f"could not create MLflow experiment {cfg['experiment']!r} in {cfg['uri']}")


def _close_killed_runs(experiment_id: str, rule: str, wildcards: str) -> None:
    """A job killed by SIGKILL cannot end its MLflow run, which stays RUNNING. Snakemake never runs one job
    twice at once, so when the job starts again, earlier RUNNING runs of the same rule and wildcards are dead:
    mark them KILLED (the rerun's own run is the one a table cell should cite)."""
    import mlflow

    client = mlflow.MlflowClient()
    for run in client.search_runs([experiment_id], filter_string=f"tags.rule = '{rule}' and "
                                  "attributes.status = 'RUNNING'"):
        if run.data.tags.get("wildcards") == wildcards:
            client.set_terminated(run.info.run_id, status="KILLED")


@contextmanager
def rule_run(rule: str, *, profile: str, config: dict, wildcards: dict | None = None,
             tracking: dict | None = None, params: dict | None = None) -> Iterator[Any]:
    """Open the MLflow run of one rule; yields the active :class:`mlflow.ActiveRun`.

    ``config`` is the config section the rule consumed: it is logged as params (flattened), as a
    ``config.json`` artifact, and hashed into the ``config_hash`` tag.
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
        **{f"wildcard.{k}": str(v) for k, v in wildcards.items()},
    }
    _close_killed_runs(experiment_id, rule, tags["wildcards"])
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


def pull(targets: list[str], configfile: list[str] | None = None) -> None:
    """`dvc pull`, then mark the restored outputs up to date for Snakemake.

    A fresh clone has no .snakemake metadata and `dvc pull` writes files with fresh mtimes in arbitrary
    order, so without `--touch` Snakemake would plan to rebuild outputs that were just restored.
    """
    subprocess.run(["dvc", "pull", *targets], check=True)
    cmd = ["snakemake", "--touch", "--cores", "1", "--quiet", "all"]
    if configfile:
        cmd += ["--configfile", *configfile]
    subprocess.run(cmd, check=True)
    print("[pull] outputs restored and marked up to date; `snakemake -n` should report nothing to do")
