"""DVC verifies what it pulls (issue 30, item 3): the project's .dvc/config sets ``verify = true`` on its remote, so
an object corrupted on the remote is refused by `dvc pull` (non-zero exit, nothing checked out), never restored
silently. A real DVC repository with the project's config and a local-folder remote."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HANG_GUARD_S = 300


def _run(*cmd: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=HANG_GUARD_S)
    if check:
        assert done.returncode == 0, (cmd, done.stdout, done.stderr)
    return done


def _repo(tmp_path: Path) -> tuple[Path, Path]:
    repo, remote = tmp_path / "repo", tmp_path / "remote"
    repo.mkdir()
    _run("git", "init", "-q", cwd=repo)
    _run("dvc", "init", "-q", cwd=repo)
    shutil.copyfile(ROOT / ".dvc" / "config", repo / ".dvc" / "config")  # the project's config, verify included
    _run("dvc", "remote", "modify", "--local", "local", "url", str(remote), cwd=repo)
    (repo / "results").mkdir()
    (repo / "results" / "simulation.csv").write_text("step,q_pos\n0,0.61\n1,0.62\n")
    _run("dvc", "add", "-q", "results", cwd=repo)
    _run("dvc", "push", "-q", cwd=repo)
    return repo, remote


def _forget(repo: Path) -> None:
    """What a fresh clone lacks: the outputs and the cache."""
    shutil.rmtree(repo / "results")
    shutil.rmtree(repo / ".dvc" / "cache")


@pytest.mark.slow
def test_pull_refuses_a_corrupted_remote_object(tmp_path):
    repo, remote = _repo(tmp_path)
    good = (repo / "results" / "simulation.csv").read_bytes()
    md5 = hashlib.md5(good).hexdigest()
    obj = remote / "files" / "md5" / md5[:2] / md5[2:]
    assert obj.exists(), sorted(str(p) for p in remote.rglob("*"))
    obj.chmod(0o644)
    obj.write_text("step,q_pos\n0,0.99\n1,0.99\n")  # same size, other numbers
    _forget(repo)
    pulled = _run("dvc", "pull", cwd=repo, check=False)
    assert pulled.returncode != 0, pulled.stdout + pulled.stderr
    csv = repo / "results" / "simulation.csv"
    assert not csv.exists() or csv.read_bytes() == good, csv.read_text()
    status = _run("dvc", "status", cwd=repo, check=False)
    assert "up to date" not in status.stdout, status.stdout


@pytest.mark.slow
def test_pull_with_verify_restores_an_intact_remote(tmp_path):
    repo, _ = _repo(tmp_path)
    good = (repo / "results" / "simulation.csv").read_bytes()
    _forget(repo)
    _run("dvc", "pull", "-q", cwd=repo)
    assert (repo / "results" / "simulation.csv").read_bytes() == good


def test_project_remote_verifies():
    """The setting itself, read by DVC's own config parser."""
    from dvc.config import Config

    cfg = Config.load_file(str(ROOT / ".dvc" / "config"))
    remote = cfg["core"]["remote"]
    assert Config.validate({"core": cfg["core"], "remote": cfg["remote"]})["remote"][remote]["verify"] is True


def test_readme_first_block_shows_the_pull_that_works():
    """Issue 30, item 7: plain `dvc pull` leaves Snakemake planning the DAG again (fresh mtimes, no .snakemake
    metadata); the README's first command block names `make pull` and says why plain `dvc pull` is not enough."""
    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```bash", 1)[1].split("```", 1)[0]
    assert "make pull" in first_block
    after = readme.split("```bash", 1)[1].split("```", 1)[1].split("```", 1)[0]  # the prose right after it
    assert "plain `dvc pull`" in after and "snakemake -n" in after
