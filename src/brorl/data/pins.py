"""Pins: which commit a source is fetched at, and the pin checks the pipeline's rules run.

``commit=`` (or a 40-hex ``revision``) is the commit that is fetched; the branch beside it is a label
(:func:`brorl.data.hub.fetch_snapshot` warns when it moved on). :func:`unpinned` lists (and, unless allowed,
refuses) sources that are not pinned, naming where each commit goes and the hub page listing its commits; the
paper profile's DAG and jobs call it (``checkpoints.allow_unpinned``).
"""

from __future__ import annotations

import logging
import re
from typing import Any, Mapping

from brorl.data.manifest import FetchError

log = logging.getLogger(__name__)

_HEX40 = re.compile(r"^[0-9a-f]{40}$")


class PinError(FetchError):
    """A source is not pinned to a commit (and that is not allowed), or its pin is malformed."""


def pinned_commit(revision: str | None, commit: str | None = None) -> str | None:
    """The commit a source is pinned to: ``commit`` (40 hex), else ``revision`` when it is a 40-hex commit,
    else None (a branch or tag: whatever it points to at fetch time)."""
    if commit is not None:
        if not isinstance(commit, str) or not _HEX40.match(commit):
            raise PinError(f"pinned commit {commit!r} is not a full 40-hex commit id (a prefix, such as the one "
                           "public references give for the model's v1 branch, is not a pin)")
        if revision and _HEX40.match(revision) and revision != commit:
            raise PinError(f"revision {revision} and pinned commit {commit} disagree")
        return commit
    return revision if isinstance(revision, str) and _HEX40.match(revision) else None


def unpinned(sources: Mapping[str, tuple[str | None, str | None]], *, allow: bool, how: str) -> list[str]:
    """The names in ``sources`` (name -> (revision, pinned commit or None)) that are not pinned to a commit.
    Unless ``allow``, any such name raises :class:`PinError` listing them, each with the page of the catalog
    source's commits where it has one; ``how`` says how to pin them or allow it (the config keys)."""
    loose = sorted(name for name, (rev, commit) in sources.items() if pinned_commit(rev, commit) is None)
    if loose and not allow:
        names = ", ".join(_describe(n, sources[n][0] or "main") for n in loose)
        raise PinError(f"not pinned to a commit: {names}. {how}")
    if loose:
        log.warning("fetching unpinned sources (allowed): %s", ", ".join(loose))
    return loose


def commits_page(name: str, revision: str = "main") -> str | None:
    """The hub page listing the commits of catalog source ``name`` (a benchmark, training source or paper model)
    on ``revision``, where a user picks the commit to pin; None for a name the catalog does not know."""
    from brorl.data.catalog import CODE_BENCHMARKS, PAPER_BENCHMARKS, PAPER_MODELS, TRAIN_SOURCES

    spec = PAPER_BENCHMARKS.get(name) or CODE_BENCHMARKS.get(name) or TRAIN_SOURCES.get(name)
    if spec is not None and spec.repo_id:
        return f"https://huggingface.co/datasets/{spec.repo_id}/commits/{revision}"
    if name in PAPER_MODELS:
        return f"https://huggingface.co/{PAPER_MODELS[name]['repo_id']}/commits/{revision}"
    return None


def _describe(name: str, revision: str) -> str:
    page = commits_page(name, revision)
    return f"{name} ({revision}; its commits: {page})" if page else f"{name} ({revision})"


def config_override(key: str, value: str = "<40-hex commit>") -> str:
    """``key`` (dotted) set to ``value`` as one ``snakemake --config`` entry (Snakemake merges it into the config
    files' mappings recursively): ``evaluation.revisions.minerva`` -> ``evaluation={revisions: {minerva: ...}}``."""
    head, *rest = key.split(".")
    inner = value
    for part in reversed(rest):
        inner = f"{{{part}: {inner}}}"
    return f"{head}={inner}"


def pin_hint(key: str) -> str:
    """How to pin a source of the pipeline's config (``key``: where its commit goes) or allow it unpinned."""
    return (f"Set {key} to the 40-hex commit you checked on the hub, in the config file or for one run with "
            f"`snakemake ... --config '{config_override(key)}'`, or set checkpoints.allow_unpinned: true to fetch "
            "whatever the branch points to now (the run is then tagged unpinned_sources in MLflow).")


def require_pins(config: Mapping[str, Any], sources: Mapping[str, tuple[str | None, str | None]], key: str, *,
                 pins_required: bool) -> list[str]:
    """A rule's pin check, in its MLflow run: where the profile requires pins (``pins_required``), refuse sources
    not pinned to a commit unless ``allow_unpinned`` (the config switch checkpoints.allow_unpinned); what was
    allowed is tagged on the run (``unpinned_sources``). ``key``: the config key that pins them. (The DAG refuses
    them first: workflow/rules/fetch.smk.)"""
    import mlflow

    loose = unpinned(sources, allow=not pins_required or bool(config.get("allow_unpinned")), how=pin_hint(key))
    if loose:
        mlflow.set_tag("unpinned_sources", ",".join(loose))
    return loose


__all__ = ["PinError", "pinned_commit", "unpinned", "pin_hint", "require_pins", "commits_page",
           "config_override"]
