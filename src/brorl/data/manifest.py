"""The verified folder every fetch shares: a folder of files and, beside it, a JSON manifest of their
sha256 -- written after a checked download (:mod:`brorl.data.hub`: a hub snapshot; :mod:`brorl.data.wheel`: a
package-index wheel), checked on every rerun, moved into place atomically. The errors a fetch raises start here
(:class:`FetchError`; the files a check refused are :class:`Problem` rows of a :class:`VerificationError` /
:class:`ChecksumError`).

Manifest
--------
``<dest>.manifest.json`` by default, e.g. ``resources/models/prorl.manifest.json`` for
``resources/models/prorl/``::

    {"format": "brorl.fetch.manifest/1", "repo_id": ..., "repo_type": "model", "revision": "main",
     "commit": "<40 hex>", "allow_patterns": null, "ignore_patterns": null,
     "source": "hub" | "local", "source_path": null | "<folder>", "fetched_at": "<UTC ISO-8601>",
     "huggingface_hub": "<version or null>", "n_files": 12, "total_bytes": 3554214752,
     "files": [{"path": "config.json", "size": 718, "sha256": "<64 hex>",
                "checked_against": "git-sha1" | "sha256" | "size" | "none"}, ...]}

``checked_against`` says what the source reported for the file at download time: the LFS sha256,
the git blob id (non-LFS files on the hub), only a size, or nothing.

A check (:func:`verify`, and every rerun of a fetch) hashes every file and compares it with the manifest.
A changed, truncated, missing or extra file raises :class:`ChecksumError` / :class:`VerificationError` naming
the file, and so does anything that is not a regular file: a symbolic link (even to an identical copy), a
directory no manifest file lies in, a fifo. :func:`_install` moves a checked folder into place with two renames
on the same file system, keeping the previous copy until the new one is in place.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

MANIFEST_FORMAT = "brorl.fetch.manifest/1"
_CHUNK = 8 * 1024 * 1024


# --------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------


class FetchError(RuntimeError):
    """A fetch could not be carried out (bad request, bad source layout, unmanaged folder...)."""


@dataclass(frozen=True)
class Problem:
    """One entry that failed a check. ``kind``: sha256, size, git-sha1, missing, unexpected (a file, a
    directory no expected file lies in, or anything that is not a regular file) or symlink."""

    path: str  # as shown to the user: ``<dest>/<rel>`` or ``<repo_id>@<commit>:<rel>``
    kind: str
    actual: str | None = None
    expected: str | None = None
    against: str = ""  # what the expectation came from ("manifest ...", "reported by hub", ...)

    def __str__(self) -> str:
        if self.kind == "missing":
            return f"{self.path}: missing (expected by {self.against})"
        if self.kind == "unexpected":
            return f"{self.path}: unexpected {self.actual or 'file'} (not in {self.against})"
        if self.kind == "symlink":
            return (f"{self.path}: a symbolic link (to {self.actual}); only regular files are accepted "
                    f"({self.against})")
        return f"{self.path}: {self.kind} {self.actual} != expected {self.expected} ({self.against})"


class VerificationError(FetchError):
    """Files are missing or unexpected. ``problems`` lists them; the message names each file."""

    def __init__(self, problems: list[Problem], hint: str = ""):
        self.problems = list(problems)
        lines = [str(p) for p in self.problems]
        if hint:
            lines.append(hint)
        super().__init__("\n".join(lines))


class ChecksumError(VerificationError):
    """At least one file's content (sha256, size or git blob id) differs from what was expected."""


def _raise_problems(problems: list[Problem], hint: str = "") -> None:
    if not problems:
        return
    content = any(p.kind in ("sha256", "size", "git-sha1") for p in problems)
    raise (ChecksumError if content else VerificationError)(problems, hint)


# --------------------------------------------------------------------------------------------------
# The manifest and the folder it describes
# --------------------------------------------------------------------------------------------------


def default_manifest_path(dest: str | os.PathLike[str]) -> Path:
    """``resources/models/prorl`` -> ``resources/models/prorl.manifest.json`` (outside the folder)."""
    dest = Path(dest)
    return dest.parent / f"{dest.name}.manifest.json"


def verify(dest: str | os.PathLike[str], manifest: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Check ``dest`` against its manifest without any client; raises like a re-run of a fetch."""
    dest = Path(dest)
    manifest_path = Path(manifest) if manifest is not None else default_manifest_path(dest)
    if not manifest_path.is_file():
        raise FetchError(f"no manifest {manifest_path}")
    old = _parse_manifest(manifest_path, manifest_path.read_text())
    if not dest.is_dir():
        raise FetchError(f"{dest} does not exist (manifest {manifest_path} pins commit {old['commit']})")
    _verify_tree(dest, old, manifest_path)
    return _result("verified", old, dest, manifest_path)


def _walk_files(root: Path) -> list[str]:
    """Every file under a stand-in source's revision folder (links followed: a copy of a Hugging Face cache
    snapshot is a folder of links to its blobs)."""
    out = []
    for dirpath, _dirs, names in os.walk(root, followlinks=True):
        for n in names:
            out.append((Path(dirpath) / n).relative_to(root).as_posix())
    return sorted(out)


def _scan_strict(root: Path, expected: Iterable[str], show: Callable[[str], str],
                 against: str) -> tuple[set[str], list[Problem]]:
    """The regular files under a fetched folder (links not followed) and a problem for every other entry: a
    symbolic link (even to an identical copy), a directory that holds no expected file, a fifo or socket."""
    needed_dirs = {d.as_posix() for rel in expected for d in Path(rel).parents if d != Path(".")}
    files: set[str] = set()
    problems: list[Problem] = []
    for dirpath, dirs, names in os.walk(root):
        for n in sorted(dirs + names):
            path = Path(dirpath) / n
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                problems.append(Problem(show(rel), "symlink", os.readlink(path), against=against))
                if n in dirs:
                    dirs.remove(n)
            elif n in dirs:
                if rel not in needed_dirs:
                    problems.append(Problem(show(rel), "unexpected", "directory", against=against))
            elif path.is_file():
                files.add(rel)
            else:
                problems.append(Problem(show(rel), "unexpected", "special file", against=against))
    return files, problems


def _hash_file(path: Path, git: bool = False) -> tuple[int, str, str | None]:
    """Size, sha256 and (if ``git``) the git blob sha1 of a file, in one pass."""
    size = path.stat().st_size
    sha = hashlib.sha256()
    gsha = hashlib.sha1(f"blob {size}\0".encode()) if git else None
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            sha.update(chunk)
            if gsha is not None:
                gsha.update(chunk)
    return size, sha.hexdigest(), gsha.hexdigest() if gsha is not None else None


def _covered(shown: str, problems: list[Problem]) -> bool:
    return any(shown == p.path or shown.startswith(p.path + "/") for p in problems)


def _verify_entries(root: Path, files: list[Mapping[str, Any]], *, show: Callable[[str], str],
                    against: str, hint: str = "") -> None:
    """Compare every file under ``root`` with manifest entries (sha256 and size); no extras allowed."""
    expected = {e["path"]: e for e in files}
    on_disk, problems = _scan_strict(root, expected, show, against) if root.is_dir() else (set(), [])
    for rel in sorted(expected):
        shown = show(rel)
        if rel not in on_disk:
            if not _covered(shown, problems):  # (a link in its place is reported as such)
                problems.append(Problem(shown, "missing", against=against))
            continue
        size, sha256, _ = _hash_file(root / rel)
        e = expected[rel]
        if sha256 != e["sha256"]:
            problems.append(Problem(shown, "sha256", sha256, e["sha256"],
                                    f"{against}; size {size}, expected {e['size']}"))
        elif size != e["size"]:
            problems.append(Problem(shown, "size", str(size), str(e["size"]), against))
    for rel in sorted(on_disk - set(expected)):
        problems.append(Problem(show(rel), "unexpected", against=against))
    problems.sort(key=lambda p: p.path)
    _raise_problems(problems, hint)


def _verify_tree(dest: Path, manifest: Mapping[str, Any], manifest_path: Path) -> None:
    _verify_entries(
        dest, manifest["files"], show=lambda rel: str(dest / rel), against=f"manifest {manifest_path}",
        hint=(f"{dest} no longer matches {manifest_path}. It is left as it is; delete {dest} and re-run "
              f"to download commit {manifest['commit']} again."),
    )


def _install(tmp: Path, dest: Path, manifest_path: Path, new_manifest: Mapping[str, Any] | None,
             old_text: str | None) -> None:
    """Move the checked ``tmp`` to ``dest`` (and write the manifest); keep the old copy until done.

    Order: old dest aside, manifest, new dest in. A crash in between leaves a manifest without its
    folder, which the next run restores from the pinned commit.
    """
    holder: Path | None = None
    aside: Path | None = None
    if dest.exists():
        holder = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
        aside = holder / dest.name
        os.rename(dest, aside)
    try:
        if new_manifest is not None:
            _write_text_atomic(manifest_path, json.dumps(new_manifest, indent=2) + "\n")
        os.rename(tmp, dest)
    except BaseException:
        if aside is not None and not dest.exists():
            os.rename(aside, dest)
            if new_manifest is not None:
                if old_text is not None:
                    _write_text_atomic(manifest_path, old_text)
                else:
                    manifest_path.unlink(missing_ok=True)
        if holder is not None and not aside.exists():
            shutil.rmtree(holder, ignore_errors=True)
        raise
    if holder is not None:
        shutil.rmtree(holder)


def _write_text_atomic(path: Path, text: str) -> None:
    from brorl.atomic import write_text

    write_text(path, text)


def _parse_manifest(path: Path, text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise FetchError(f"{path}: not valid JSON ({err}); delete it (and its folder) to fetch again") from None
    missing = [k for k in ("format", "repo_id", "repo_type", "revision", "commit", "files") if k not in data]
    if missing or data.get("format") != MANIFEST_FORMAT:
        raise FetchError(f"{path}: not a {MANIFEST_FORMAT} manifest (missing {missing or 'nothing'}, "
                         f"format {data.get('format')!r})")
    data.setdefault("n_files", len(data["files"]))
    data.setdefault("total_bytes", sum(int(e["size"]) for e in data["files"]))
    return data


def _result(status: str, m: Mapping[str, Any], dest: Path, manifest_path: Path) -> dict[str, Any]:
    source = m.get("source") or "unknown"
    return {
        "status": status,
        "repo_id": m["repo_id"],
        "repo_type": m["repo_type"],
        "revision": m["revision"],
        "commit": m["commit"],
        "dest": str(dest),
        "manifest": str(manifest_path),
        "source": source,
        "n_files": int(m["n_files"]),
        "total_bytes": int(m["total_bytes"]),
        "params": {"repo_id": m["repo_id"], "repo_type": m["repo_type"], "revision": m["revision"],
                   "commit": m["commit"], "source": source},
        "metrics": {"n_files": int(m["n_files"]), "total_bytes": int(m["total_bytes"])},
    }


__all__ = [
    "MANIFEST_FORMAT", "FetchError", "Problem", "VerificationError", "ChecksumError", "default_manifest_path", "verify",
]
