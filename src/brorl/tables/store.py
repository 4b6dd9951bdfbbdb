"""Read the MLflow store the way the tables need it: one FINISHED run per rule and wildcards.

Runs are tagged by :func:`brorl.tracking.rule_run` (``rule``, ``wildcards`` as JSON, ``wildcard.<key>``,
``profile``, ``config_hash``, ``git_commit``). For a table cell the run that counts is the **latest FINISHED**
run (by start time) of the rule and wildcards; KILLED, FAILED and RUNNING runs are never read, but they are
remembered so that a gap can say why a cell is empty ("the latest run is KILLED").
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "1")

RULE_PRORL = "prorl_stage"
RULE_ARM = "train_arm"
RULE_EVAL = "evaluate"


def wildcard_key(wildcards: dict | None) -> tuple:
    """Canonical, order-free key of a wildcards dict (values compared as strings)."""
    return tuple(sorted((str(k), str(v)) for k, v in (wildcards or {}).items()))


@dataclass
class RunRecord:
    run_id: str
    rule: str
    wildcards: dict[str, str]
    profile: str
    status: str
    start_time: int
    metrics: dict[str, float] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    def metric(self, key: str) -> float | None:
        """The metric's (latest) value, ``None`` when not logged or NaN."""
        v = self.metrics.get(key)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return None
        return float(v)


def model_name(arm: str, seed: int | str) -> str:
    """The ``model`` wildcard of an arm's checkpoint in the evaluate rule (``n512-seed1``)."""
    return f"{arm}-seed{seed}"


def declared_layout(profile: str):
    """The output layout (brorl.layout) of the declared profile (``BRORL_PROFILE``, set by common.smk for every
    command) when it is ``profile``; ``None`` elsewhere (then runs are not selected by root)."""
    from brorl.profile import Profile

    text = os.environ.get("BRORL_PROFILE")
    if not text:
        return None
    declared = Profile.parse(text)
    return declared.layout if declared.name == profile else None


class RunStore:
    """The FINISHED runs of one experiment and profile, indexed by (rule, wildcards). With a ``layout``
    (brorl.layout; default: the declared profile's), only the runs of each rule's root count: an overlay's
    tables read its own arms and its base's reused stages, and a base's tables never an overlay's runs (a run
    without a ``root`` tag, from before issue 32, counts as the base's)."""

    def __init__(self, tracking_uri: str, experiment: str, profile: str, layout=None):
        from mlflow import MlflowClient

        self.tracking_uri, self.experiment, self.profile = tracking_uri, experiment, profile
        self.layout = layout if layout is not None else declared_layout(profile)
        self.client = MlflowClient(tracking_uri=tracking_uri)
        exp = self.client.get_experiment_by_name(experiment)
        self.experiment_id = exp.experiment_id if exp is not None else None
        self.finished: dict[tuple, RunRecord] = {}
        self.other: dict[tuple, RunRecord] = {}  # latest non-FINISHED run per key, for gap reasons
        self._tmp = None
        self._curves: dict[str, Any] = {}
        if self.experiment_id is not None:
            self._load()

    # ------------------------------------------------------------------ loading
    def _load(self) -> None:
        from mlflow.entities import ViewType

        token = None
        filt = f"tags.profile = '{self.profile}'"
        while True:
            page = self.client.search_runs([self.experiment_id], filter_string=filt,
                                           run_view_type=ViewType.ACTIVE_ONLY, max_results=1000,
                                           page_token=token)
            for run in page:
                self._add(run)
            token = page.token
            if not token:
                break

    def _add(self, run) -> None:
        tags = dict(run.data.tags)
        rule = tags.get("rule")
        if not rule:
            return
        try:
            wildcards = {str(k): str(v) for k, v in json.loads(tags.get("wildcards") or "{}").items()}
        except ValueError:
            wildcards = {k[len("wildcard."):]: v for k, v in tags.items() if k.startswith("wildcard.")}
        rec = RunRecord(run_id=run.info.run_id, rule=rule, wildcards=wildcards, profile=tags.get("profile", ""),
                        status=run.info.status, start_time=int(run.info.start_time or 0),
                        metrics=dict(run.data.metrics), params=dict(run.data.params), tags=tags)
        if self.layout is not None:
            try:
                expected = self.layout.run_root(rule)
            except KeyError:
                expected = None
            if expected is not None and tags.get("root", self.profile) != expected:
                return  # another root's run (an overlay's, or the base's where this run owns the group)
        key = (rule, wildcard_key(wildcards))
        table = self.finished if rec.status == "FINISHED" else self.other
        old = table.get(key)
        if old is None or (rec.start_time, rec.run_id) > (old.start_time, old.run_id):
            table[key] = rec

    # ------------------------------------------------------------------ lookup
    def get(self, rule: str, **wildcards) -> RunRecord | None:
        """The latest FINISHED run of ``rule`` with exactly these wildcards, or ``None``."""
        return self.finished.get((rule, wildcard_key(wildcards)))

    def missing_reason(self, rule: str, what: str, **wildcards) -> str:
        """The gap text for a run that :meth:`get` did not find."""
        reason = f"missing: no FINISHED {rule} run for {what}"
        other = self.other.get((rule, wildcard_key(wildcards)))
        if other is not None:
            reason += f" (latest run {other.run_id} is {other.status})"
        return reason

    def missing_hint(self, rules) -> str:
        """How to fix runs missing from this store (their outputs may exist: a DVC pull, a copy, another store)."""
        rules = sorted(set(rules))
        where = (f"experiment {self.experiment!r} of {self.tracking_uri}, profile {self.profile}"
                 + (f", root(s) {', '.join(sorted({self.layout.run_root(r) for r in rules}))}" if self.layout else ""))
        return (f"no FINISHED run of {', '.join(rules)} in {where}. Their outputs may exist without their runs "
                "(restored by `make pull`, copied, or made with another MLflow store or config): rerun them into "
                f"this store with `snakemake --forcerun {' '.join(rules)} --configfile <this run's files>`, or "
                "point tracking.uri / MLFLOW_TRACKING_URI at the store that has them")

    def runs(self, rule: str, status: str = "FINISHED") -> list[RunRecord]:
        table = self.finished if status == "FINISHED" else self.other
        return [r for (ru, _), r in table.items() if ru == rule]

    def prorl(self) -> RunRecord | None:
        return self.get(RULE_PRORL)

    def arm(self, arm: str, seed: int | str) -> RunRecord | None:
        return self.get(RULE_ARM, arm=arm, seed=seed)

    def evaluation(self, model: str, benchmark: str) -> RunRecord | None:
        return self.get(RULE_EVAL, model=model, benchmark=benchmark)

    def eval_missing(self, model: str, benchmark: str) -> str:
        return self.missing_reason(RULE_EVAL, f"model {model} / {benchmark}", model=model, benchmark=benchmark)

    def arm_missing(self, arm: str, seed: int | str) -> str:
        return self.missing_reason(RULE_ARM, f"arm {arm} seed {seed}", arm=arm, seed=seed)

    def prorl_missing(self) -> str:
        return self.missing_reason(RULE_PRORL, "the ProRL stage")

    # ------------------------------------------------------------------ artifacts
    @property
    def tmpdir(self) -> Path:
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="brorl-tables-")
        return Path(self._tmp.name)

    def find_artifact(self, run_id: str, filename: str, max_depth: int = 3) -> str | None:
        """The artifact path of the first file called ``filename`` (root first, then sub-folders)."""
        queue = [(None, 0)]
        while queue:
            path, depth = queue.pop(0)
            try:
                entries = self.client.list_artifacts(run_id, path)
            except Exception:
                return None
            for e in entries:
                if not e.is_dir and Path(e.path).name == filename:
                    return e.path
            queue += [(e.path, depth + 1) for e in entries if e.is_dir and depth + 1 < max_depth]
        return None

    def download(self, run_id: str, filename: str) -> Path | None:
        """Download the artifact ``filename`` of a run into a temporary folder; ``None`` when absent."""
        path = self.find_artifact(run_id, filename)
        if path is None:
            return None
        dst = self.tmpdir / run_id
        dst.mkdir(parents=True, exist_ok=True)
        old = os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
        os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"  # no progress bar per small file
        try:
            return Path(self.client.download_artifacts(run_id, path, str(dst)))
        finally:
            if old is None:
                os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", None)
            else:
                os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = old

    def samples(self, run: RunRecord, benchmark: str) -> tuple[list[dict] | None, str | None]:
        """The per-sample records of an evaluate run (``<benchmark>.json``), or ``(None, gap reason)``."""
        local = self.download(run.run_id, f"{benchmark}.json")
        if local is None:
            return None, f"missing: evaluate run {run.run_id} has no {benchmark}.json artifact"
        data = json.loads(local.read_text())
        samples = data.get("samples") if isinstance(data, dict) else data
        if not samples:
            return None, f"missing: {benchmark}.json of evaluate run {run.run_id} holds no samples"
        return samples, None

    def curve(self, run: RunRecord):
        """The run's training curve as a DataFrame with columns ``arm_step, samples, hours`` and the probe
        columns (``probe_q_pos_mean``, ``probe_multi_q_pos_mean`` when logged), one row per step.

        Read from the ``metrics.csv`` artifact (cumulative ``arm_wall_time_s``); without it, rebuilt from the
        metric histories, where ``wall_time_s`` restarts at each stage: a drop starts a new stage, whose times
        are added to the previous stage's last time."""
        import pandas as pd

        if run.run_id in self._curves:
            return self._curves[run.run_id]
        local = self.download(run.run_id, "metrics.csv")
        frame = None
        if local is not None:
            m = pd.read_csv(local)
            if {"arm_step", "arm_generated_samples", "arm_wall_time_s"} <= set(m.columns):
                frame = pd.DataFrame({"arm_step": m["arm_step"], "samples": m["arm_generated_samples"],
                                      "hours": m["arm_wall_time_s"] / 3600.0})
                for col in ("probe_q_pos_mean", "probe_multi_q_pos_mean"):
                    if col in m.columns:
                        frame[col] = pd.to_numeric(m[col], errors="coerce")
        if frame is None:
            frame = self._curve_from_history(run)
        self._curves[run.run_id] = frame
        return frame

    def _curve_from_history(self, run: RunRecord):
        import pandas as pd

        def hist(key):
            try:
                return {int(m.step): float(m.value) for m in self.client.get_metric_history(run.run_id, key)}
            except Exception:
                return {}

        samples, wall = hist("arm_generated_samples"), hist("wall_time_s")
        probes = {k: hist(k) for k in ("probe_q_pos_mean", "probe_multi_q_pos_mean")}
        steps = sorted(set(samples) | set(wall) | set().union(*[set(p) for p in probes.values()]))
        cum, offset, last = {}, 0.0, None
        for s in sorted(wall):
            if last is not None and wall[s] < last:
                offset += last
            last = wall[s]
            cum[s] = offset + wall[s]
        frame = pd.DataFrame({"arm_step": steps, "samples": [samples.get(s, math.nan) for s in steps],
                              "hours": [cum.get(s, math.nan) / 3600.0 for s in steps]})
        for k, p in probes.items():
            if p:
                frame[k] = [p.get(s, math.nan) for s in steps]
        return frame

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
