"""Two profiles in one checkout (issue 32): the CI profile, then an overlay with other params, then the CI profile
again. Each keeps its own root (brorl.layout): the first's outputs, .dvc files and MLflow runs are untouched by the
second, the third run has nothing to do, and a fresh clone restores each profile with `brorl pull` so that
`snakemake -n` of each plans nothing."""

import hashlib
from pathlib import Path

import pytest
import yaml

from test_pipeline import GIT, copy_project, sh

pytestmark = pytest.mark.slow

BASE = "tests/configs/ci_roots.yaml"  # ci.yaml without its study (the study's rules are tested elsewhere)
OVERLAY = "tests/configs/ci_roots_more.yaml"
MORE = {"profile": {"overlay": "more", "reuses": ["theory", "start"]},  # other arms' params, the same start
        "rl": {"arms": {"seeds": [1]}}}


def _digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _runs(work: Path) -> dict[str, set[str]]:
    """{root tag: run ids} of the brorl-ci experiment."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{work / 'mlflow.db'}")
    exp = client.get_experiment_by_name("brorl-ci")
    out: dict[str, set[str]] = {}
    for run in client.search_runs([exp.experiment_id], max_results=5000):
        out.setdefault(run.data.tags.get("root", ""), set()).add(run.info.run_id)
    return out


def _nothing_to_do(work, *configs):
    dry = sh(["snakemake", "-n", "--configfile", *configs], work)
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-3000:]


def test_a_second_profile_leaves_the_first_intact_and_each_pulls_on_its_own(tmp_path):
    work, remote = tmp_path / "work", tmp_path / "remote"
    copy_project(work)
    cfg = yaml.safe_load((work / "tests/configs/ci.yaml").read_text())
    del cfg["study"]
    cfg["stages"]["study"] = False  # (a switch that is on needs its section)
    (work / BASE).write_text(yaml.safe_dump(cfg))
    (work / OVERLAY).write_text(yaml.safe_dump(MORE))
    sh(["git", "init", "-q"], work)
    sh(GIT + ["add", "-A"], work)
    sh(GIT + ["commit", "-qm", "test copy"], work)
    sh(["dvc", "remote", "modify", "--local", "local", "url", str(remote)], work)

    sh(["snakemake", "--cores", "2", "--configfile", BASE], work, timeout=2400)
    first = {top: _digest(work / top / "ci") for top in ("results", "resources")}
    runs = _runs(work)
    assert set(runs) == {"ci"} and len(runs["ci"]) > 20

    second = sh(["snakemake", "--cores", "2", "--configfile", BASE, OVERLAY], work, timeout=2400)
    log = second.stdout + second.stderr
    for rule in ("theory_simulation", "sft", "prorl_stage", "tiny_tasks"):  # reused from the CI run: not rerun
        assert f"rule {rule}:" not in log and f"localrule {rule}:" not in log, rule
    more = work / "results/ci-more"
    for rel in ("train/n4/seed1/summary.json", "train/summary.csv", "eval/n16-seed1/tiny_add.json",
                "tables/table1.csv", "figures/figure3.png", "train.dvc", "tables.dvc"):
        assert (more / rel).stat().st_size > 0, rel
    assert not (more / "train/n4/seed0").exists() and not (more / "theory").exists()
    assert (work / "resources/ci-more/checkpoints/n16/seed1").is_dir()
    after = _runs(work)
    assert after["ci"] == runs["ci"]  # no run of the first profile was added
    assert after.keys() == {"ci", "ci-more"}
    # the overlay's tables cite its own runs and the reused ProRL stage's, never the CI run's arms
    import pandas as pd

    cited = {i for cell in pd.read_csv(more / "tables/table1_cells.csv")["run_ids"].dropna() for i in str(cell).split(";")}
    assert cited and cited <= after["ci-more"] | runs["ci"]
    assert not cited & {i for i in runs["ci"]} - _prorl_runs(work)

    sh(["snakemake", "--cores", "2", "--configfile", BASE], work)  # the first again: nothing to do
    assert {top: _digest(work / top / "ci") for top in ("results", "resources")} == first
    assert _runs(work)["ci"] == runs["ci"]
    _nothing_to_do(work, BASE)
    _nothing_to_do(work, BASE, OVERLAY)

    # a fresh clone with both profiles' .dvc files: each pulled on its own, each plans nothing
    tracked = [str(p.relative_to(work)) for top in ("results", "resources") for p in (work / top).rglob("*")
               if p.is_file() and (p.name.endswith(".dvc") or p.name == ".gitignore")]
    assert "results/ci/train.dvc" in tracked and "results/ci-more/train.dvc" in tracked
    sh(GIT + ["add", "-f", *tracked], work)
    sh(GIT + ["commit", "-qm", "track outputs"], work)
    clone = tmp_path / "clone"
    sh(["git", "clone", "-q", str(work), str(clone)], tmp_path)
    sh(["dvc", "remote", "modify", "--local", "local", "url", str(remote)], clone)
    sh(["brorl", "pull", "--configfile", BASE], clone)
    assert not (clone / "results/ci-more/train/summary.csv").exists()  # the other profile is not pulled with it
    sh(["brorl", "pull", "--configfile", BASE, OVERLAY], clone)
    for folder in ("results/ci/theory", "results/ci/train", "resources/ci/models/prorl", "results/ci-more/train",
                   "results/ci-more/tables", "resources/ci-more/checkpoints"):
        assert _digest(clone / folder) == _digest(work / folder), folder
    _nothing_to_do(clone, BASE)
    _nothing_to_do(clone, BASE, OVERLAY)


def _prorl_runs(work: Path) -> set[str]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{work / 'mlflow.db'}")
    exp = client.get_experiment_by_name("brorl-ci")
    return {r.info.run_id for r in client.search_runs([exp.experiment_id], "tags.rule = 'prorl_stage'")}
