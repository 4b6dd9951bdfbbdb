"""Pins: which commit a source must resolve to, and the pin checks the pipeline's rules run.

``commit=`` (or a 40-hex ``revision``) is the commit the revision must resolve to; another one is refused
with :class:`PinError` naming both. :func:`unpinned` lists (and, unless allowed, refuses) sources that are not
pinned; the paper profile's jobs call it (``checkpoints.allow_unpinned``).
"""

from __future__ import annotations

import logging
import re
from typing import Any, Mapping

from brorl.data.manifest import FetchError

log = logging.getLogger(__name__)

_HEX40 = re.compile(r"^[0-9a-f]{40}$")


class PinError(FetchError):
    """A source is not pinned to a commit (and that is not allowed), or it resolved to another commit."""


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
    Unless ``allow``, any such name raises :class:`PinError` listing them; ``how`` says how to pin them or
    allow it (the config keys)."""
    loose = sorted(name for name, (rev, commit) in sources.items() if pinned_commit(rev, commit) is None)
    if loose and not allow:
        names = ", ".join(f"{n} ({sources[n][0] or 'main'})" for n in loose)
        raise PinError(f"not pinned to a commit: {names}. {how}")
    if loose:
        log.warning("fetching unpinned sources (allowed): %s", ", ".join(loose))
    return loose


def pin_hint(key: str) -> str:
    """How to pin a source of the pipeline's config (``key``: where its commit goes) or allow it unpinned."""
    return (f"Set {key} to a 40-hex commit, or set checkpoints.allow_unpinned: true to fetch whatever the branch "
            "points to now (the run is then tagged unpinned_sources in MLflow).")


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


__all__ = ["PinError", "pinned_commit", "unpinned", "pin_hint", "require_pins"]
