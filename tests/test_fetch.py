"""brorl.data.hub: pinned snapshots with a verified manifest, tested offline against a local stand-in hub."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from brorl.data import catalog
from brorl.data import hub as data_hub
from brorl.data.blend import BLEND_ENTRY_FIELDS, fetch_blend_entry, load_data_blend
from brorl.data.hub import (
    ChecksumError,
    FetchError,
    HfHubClient,
    OfflineError,
    PinError,
    VerificationError,
    fetch_dataset,
    fetch_model,
    fetch_paper_model,
    write_local_snapshot,
)

REPO = "nvidia/Nemotron-Research-Reasoning-Qwen-1.5B"
COMMIT_MAIN = "a" * 40
COMMIT_BRORL = "b" * 40
COMMIT_NEW = "c" * 40


def model_files(seed: int = 0) -> dict[str, bytes]:
    config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 8, "seed": seed}
    return {
        "config.json": json.dumps(config).encode(),
        "generation_config.json": b'{"do_sample": true}',
        "model.safetensors": bytes(range(256)) * 16 + bytes([seed]),
        "tokenizer.json": b'{"version": "1.0"}',
        "subdir/extra.txt": b"nested file\n",
    }


@pytest.fixture
def hub(tmp_path: Path) -> Path:
    """A stand-in hub: revision `main` and `brorl` of the paper repository."""
    root = tmp_path / "hub"
    write_local_snapshot(root, REPO, "main", COMMIT_MAIN, model_files(0))
    write_local_snapshot(root, REPO, "brorl", COMMIT_BRORL, model_files(1))
    return root


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    return tmp_path / "resources" / "models" / "prorl"


def snapshot_state(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    return {p.relative_to(folder).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_no_leftovers(parent: Path, *names: str) -> None:
    assert sorted(os.listdir(parent)) == sorted(names), "temporary folders or files were left behind"


# ------------------------------------------------------------------------------------------ models --


def test_fetch_writes_clean_folder_and_manifest(hub: Path, dest: Path) -> None:
    result = fetch_model(REPO, "main", dest, source=hub)

    files = model_files(0)
    assert result["status"] == "downloaded"
    assert result["commit"] == COMMIT_MAIN
    assert result["params"] == {"repo_id": REPO, "repo_type": "model", "revision": "main",
                                "commit": COMMIT_MAIN, "source": "local"}
    assert result["metrics"] == {"n_files": len(files), "total_bytes": sum(map(len, files.values()))}

    # dest is a plain copy of the repository files: no stand-in metadata, no manifest inside
    on_disk = {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert on_disk == files
    assert json.loads((dest / "config.json").read_text())["model_type"] == "qwen2"

    manifest_path = dest.parent / "prorl.manifest.json"
    assert result["manifest"] == str(manifest_path)
    m = json.loads(manifest_path.read_text())
    assert m["format"] == "brorl.fetch.manifest/1"
    assert (m["repo_id"], m["repo_type"], m["revision"], m["commit"]) == (REPO, "model", "main", COMMIT_MAIN)
    assert m["source"] == "local" and m["source_path"] == str(hub)
    assert {e["path"]: (e["size"], e["sha256"]) for e in m["files"]} == {
        rel: (len(data), hashlib.sha256(data).hexdigest()) for rel, data in files.items()
    }
    assert all(e["checked_against"] == "sha256" for e in m["files"])
    assert (m["n_files"], m["total_bytes"]) == (result["n_files"], result["total_bytes"])
    assert_no_leftovers(dest.parent, "prorl", "prorl.manifest.json")


def test_second_fetch_verifies_without_copying(hub: Path, dest: Path, monkeypatch) -> None:
    fetch_model(REPO, "main", dest, source=hub)
    before = snapshot_state(dest)
    manifest_before = (dest.parent / "prorl.manifest.json").read_bytes()

    again = fetch_model(REPO, "main", dest, source=hub)
    assert again["status"] == "verified"
    assert again["commit"] == COMMIT_MAIN and again["n_files"] == len(model_files())

    # Verification needs no source at all: offline, with the hub unreachable, it still passes.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert fetch_model(REPO, "main", dest)["status"] == "verified"
    assert data_hub.verify(dest)["status"] == "verified"

    assert snapshot_state(dest) == before  # same bytes, same mtimes, same inodes: nothing copied
    assert (dest.parent / "prorl.manifest.json").read_bytes() == manifest_before


def test_truncated_file_in_dest_raises_naming_it(hub: Path, dest: Path) -> None:
    fetch_model(REPO, "main", dest, source=hub)
    weights = dest / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])

    with pytest.raises(ChecksumError) as err:
        fetch_model(REPO, "main", dest, source=hub)
    msg = str(err.value)
    assert msg.startswith(f"{weights}: sha256 ")
    assert hashlib.sha256(model_files()["model.safetensors"]).hexdigest() in msg
    assert "size 100" in msg
    assert [p.path for p in err.value.problems] == [str(weights)]
    assert len(weights.read_bytes()) == 100  # never repaired silently


def test_missing_or_extra_file_in_dest_raises(hub: Path, dest: Path) -> None:
    fetch_model(REPO, "main", dest, source=hub)
    (dest / "tokenizer.json").unlink()
    (dest / "notes.txt").write_text("added by hand")
    with pytest.raises(VerificationError) as err:
        fetch_model(REPO, "main", dest, source=hub)
    assert not isinstance(err.value, ChecksumError)
    assert {(p.path, p.kind) for p in err.value.problems} == {
        (str(dest / "tokenizer.json"), "missing"),
        (str(dest / "notes.txt"), "unexpected"),
    }


@pytest.mark.parametrize("how", ["new_revision", "refresh"])
def test_corrupted_download_keeps_good_copy(hub: Path, dest: Path, how: str) -> None:
    fetch_model(REPO, "main", dest, source=hub)
    good = snapshot_state(dest)
    manifest_path = dest.parent / "prorl.manifest.json"
    good_manifest = manifest_path.read_bytes()

    if how == "new_revision":
        # the source's copy of the brorl weights is damaged; its .sha256 list still has the true value
        rev_dir = hub / REPO / "brorl"
        revision, refresh = "brorl", False
    else:
        # `main` moved to a new commit whose weights arrive damaged
        rev_dir = write_local_snapshot(hub, REPO, "main", COMMIT_NEW, model_files(2))
        revision, refresh = "main", True
    weights = rev_dir / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10] + b"corrupted!")

    with pytest.raises(ChecksumError) as err:
        fetch_model(REPO, revision, dest, source=hub, refresh=refresh)
    assert [(p.kind, p.path.rsplit(":", 1)[-1]) for p in err.value.problems] == [("sha256", "model.safetensors")]
    assert "model.safetensors: sha256" in str(err.value) and "reported by local" in str(err.value)

    assert snapshot_state(dest) == good  # previous good copy untouched
    assert manifest_path.read_bytes() == good_manifest
    assert_no_leftovers(dest.parent, "prorl", "prorl.manifest.json")
    assert fetch_model(REPO, "main", dest, source=hub)["status"] == "verified"


def test_failed_move_puts_the_old_copy_back(hub: Path, dest: Path, monkeypatch) -> None:
    fetch_model(REPO, "main", dest, source=hub)
    good = {k: v[0] for k, v in snapshot_state(dest).items()}
    manifest_path = dest.parent / "prorl.manifest.json"
    good_manifest = manifest_path.read_bytes()
    real_rename = os.rename

    def rename(src, dst):  # moving the old copy aside works; moving the new one in fails
        if Path(src).name.startswith(".prorl.tmp-"):
            raise OSError("disk trouble")
        return real_rename(src, dst)

    monkeypatch.setattr(data_hub.os, "rename", rename)
    with pytest.raises(OSError, match="disk trouble"):
        fetch_model(REPO, "brorl", dest, source=hub)
    assert {k: v[0] for k, v in snapshot_state(dest).items()} == good
    assert manifest_path.read_bytes() == good_manifest
    assert_no_leftovers(dest.parent, "prorl", "prorl.manifest.json")


def test_file_listed_by_source_but_not_delivered(hub: Path, dest: Path) -> None:
    (hub / REPO / "main" / "tokenizer.json").unlink()  # still in the .sha256 list
    with pytest.raises(VerificationError, match=r"tokenizer\.json: missing"):
        fetch_model(REPO, "main", dest, source=hub)
    assert not dest.exists()
    assert_no_leftovers(dest.parent)


def test_new_revision_replaces_folder_and_manifest(hub: Path, dest: Path) -> None:
    fetch_model(REPO, "main", dest, source=hub)
    result = fetch_model(REPO, "brorl", dest, source=hub)
    assert result["status"] == "replaced" and result["commit"] == COMMIT_BRORL
    assert (dest / "model.safetensors").read_bytes() == model_files(1)["model.safetensors"]
    assert json.loads((dest.parent / "prorl.manifest.json").read_text())["revision"] == "brorl"
    assert_no_leftovers(dest.parent, "prorl", "prorl.manifest.json")


def test_manifest_is_a_lock_restore_pinned_commit(hub: Path, dest: Path) -> None:
    fetch_model(REPO, "main", dest, source=hub)
    manifest_path = dest.parent / "prorl.manifest.json"
    locked = manifest_path.read_bytes()
    # `main` moves on; the old commit stays available under its commit id
    (hub / REPO / "main").rename(hub / REPO / COMMIT_MAIN)
    write_local_snapshot(hub, REPO, "main", COMMIT_NEW, model_files(2))
    shutil.rmtree(dest)
    result = fetch_model(REPO, "main", dest, source=hub)
    assert result["status"] == "restored" and result["commit"] == COMMIT_MAIN
    assert (dest / "model.safetensors").read_bytes() == model_files(0)["model.safetensors"]
    assert manifest_path.read_bytes() == locked

    # refresh=True follows the revision to the new commit
    refreshed = fetch_model(REPO, "main", dest, source=hub, refresh=True)
    assert refreshed["status"] == "replaced" and refreshed["commit"] == COMMIT_NEW
    assert_no_leftovers(dest.parent, "prorl", "prorl.manifest.json")


def test_unmanaged_dest_is_refused(hub: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    (dest / "mine.bin").write_bytes(b"precious")
    with pytest.raises(FetchError, match="has no manifest"):
        fetch_model(REPO, "main", dest, source=hub)
    assert (dest / "mine.bin").read_bytes() == b"precious"


def test_offline_mode_refuses_the_real_hub(dest: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OfflineError, match="source="):
        fetch_model(REPO, "main", dest)
    with pytest.raises(OfflineError):
        data_hub.hub_client(None)
    assert not dest.exists()


def test_a_folder_named_hub_is_a_folder(hub: Path, dest: Path, monkeypatch) -> None:
    monkeypatch.chdir(hub.parent)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # would raise if "hub" were taken to mean the real hub
    assert isinstance(data_hub.hub_client("hub"), data_hub.LocalFolderClient)
    assert fetch_model(REPO, "main", dest, source="hub")["source"] == "local"


def test_bad_stand_in_layout(tmp_path: Path, dest: Path) -> None:
    root = tmp_path / "hub"
    rev = write_local_snapshot(root, REPO, "main", COMMIT_MAIN, model_files())
    with pytest.raises(FetchError, match="no revision 'v9'"):
        fetch_model(REPO, "v9", dest, source=root)
    (rev / ".commit").write_text("not-a-commit\n")
    with pytest.raises(FetchError, match="40-hex"):
        fetch_model(REPO, "main", dest, source=root)
    with pytest.raises(FetchError, match="not a folder"):
        fetch_model(REPO, "main", dest, source=tmp_path / "nowhere")


def test_paper_models(tmp_path: Path) -> None:
    """The paper's checkpoints are pinned: the stand-in must hold the pinned commits; v1 (only a prefix of its commit
    is known) is refused unless unpinned fetches are allowed; a moved branch still fetches the pinned commit."""
    models = catalog.PAPER_MODELS
    assert (models["prorl"]["revision"], models["prorl"]["commit"]) == (
        "main", "c62ac5e70bd578a9235aa9d8e11fff2f1f63d4a0")
    assert (models["brorl-released"]["revision"], models["brorl-released"]["commit"]) == (
        "brorl", "3441fcdf8c6e81a2959e6352ff50122e3c677d72")
    hub = tmp_path / "hub"
    write_local_snapshot(hub, REPO, "main", models["prorl"]["commit"], model_files(0))
    write_local_snapshot(hub, REPO, "brorl", models["brorl-released"]["commit"], model_files(1))
    write_local_snapshot(hub, REPO, "v1", "b8904889" + "0" * 32, model_files(2))
    root = tmp_path / "project"
    a = fetch_paper_model("prorl", root=root, source=hub)
    b = fetch_paper_model("brorl-released", root=root, source=hub)
    assert (a["commit"], b["commit"]) == (models["prorl"]["commit"], models["brorl-released"]["commit"])
    v1_page = f"https://huggingface.co/{REPO}/commits/v1"
    with pytest.raises(PinError, match=rf"not pinned to a commit: prorl-v1 \(v1; its commits: {v1_page}\)"):
        fetch_paper_model("prorl-v1", root=root, source=hub)
    assert fetch_paper_model("prorl-v1", root=root, source=hub, allow_unpinned=True)["commit"].startswith("b8904889")
    folder = root / "resources" / "models"
    assert_no_leftovers(folder, "prorl", "prorl.manifest.json", "brorl-released", "brorl-released.manifest.json",
                        "prorl-v1", "prorl-v1.manifest.json")
    assert a["branch"] == {"revision": "main", "commit": models["prorl"]["commit"], "moved": False}


def test_a_moved_branch_still_fetches_the_pinned_commit(tmp_path: Path, caplog) -> None:
    """Issue 27: NVIDIA moves `main` (v2 -> v3); the pinned commit is still on the hub, so the fetch downloads it
    (revision=commit), warns that the branch moved, and records the pinned commit. Before, this was refused."""
    pinned = catalog.PAPER_MODELS["prorl"]["commit"]
    hub = tmp_path / "hub"
    write_local_snapshot(hub, REPO, pinned, pinned, model_files(0))  # the old commit, still downloadable
    write_local_snapshot(hub, REPO, "main", COMMIT_NEW, model_files(3))  # where main points now
    root = tmp_path / "project"
    with caplog.at_level("WARNING", logger="brorl.data.hub"):
        got = fetch_paper_model("prorl", root=root, source=hub)
    assert got["status"] == "downloaded" and got["commit"] == pinned and got["revision"] == "main"
    assert got["branch"] == {"revision": "main", "commit": COMMIT_NEW, "moved": True}
    assert f"now points to commit {COMMIT_NEW}, not to the pinned {pinned}" in caplog.text
    folder = root / "resources" / "models" / "prorl"
    assert snapshot_state(folder).keys() == model_files(0).keys()
    assert (folder / "model.safetensors").read_bytes() == model_files(0)["model.safetensors"]  # v2's, not v3's
    manifest = json.loads((folder.parent / "prorl.manifest.json").read_text())
    assert (manifest["revision"], manifest["commit"]) == ("main", pinned)
    # a branch that is gone is only a warning too
    shutil.rmtree(hub / REPO / "main")
    shutil.rmtree(folder)
    caplog.clear()
    with caplog.at_level("WARNING", logger="brorl.data.hub"):
        again = fetch_paper_model("prorl", root=root, source=hub)
    assert again["status"] == "restored" and again["commit"] == pinned
    assert again["branch"] == {"revision": "main", "commit": None, "moved": True}
    assert "could not read branch 'main'" in caplog.text


def test_pinned_commit_rules(hub: Path, dest: Path) -> None:
    assert data_hub.pinned_commit("main") is None and data_hub.pinned_commit(COMMIT_MAIN) == COMMIT_MAIN
    assert data_hub.pinned_commit("main", COMMIT_MAIN) == COMMIT_MAIN
    with pytest.raises(PinError, match="not a full 40-hex"):
        data_hub.pinned_commit("v1", "b8904889")
    with pytest.raises(PinError, match="disagree"):
        data_hub.pinned_commit(COMMIT_MAIN, COMMIT_BRORL)
    sources = {"aime24": ("main", None), "aime25": (COMMIT_MAIN, None), "prorl": ("main", COMMIT_MAIN)}
    page = "https://huggingface.co/datasets/HuggingFaceH4/aime_2024/commits/main"
    with pytest.raises(PinError, match=rf"not pinned to a commit: aime24 \(main; its commits: {page}\)\. Set it"):
        data_hub.unpinned(sources, allow=False, how="Set it")
    assert data_hub.unpinned(sources, allow=True, how="") == ["aime24"]
    hint = data_hub.pin_hint("evaluation.revisions.minerva")
    assert "--config 'evaluation={revisions: {minerva: <40-hex commit>}}'" in hint and "allow_unpinned" in hint
    # a manifest of another commit is not accepted for a pinned request: the pinned commit itself is fetched
    fetch_model(REPO, "main", dest, source=hub)
    got = fetch_model(REPO, "main", dest, source=hub, commit=COMMIT_BRORL)
    assert (got["status"], got["commit"], got["branch"]["moved"]) == ("replaced", COMMIT_BRORL, True)
    assert (dest / "model.safetensors").read_bytes() == model_files(1)["model.safetensors"]
    got = fetch_model(REPO, "main", dest, source=hub, commit=COMMIT_MAIN)
    assert (got["status"], got["commit"], got["branch"]["moved"]) == ("replaced", COMMIT_MAIN, False)
    assert fetch_model(REPO, "main", dest, source=hub, commit=COMMIT_MAIN)["status"] == "verified"
    with pytest.raises(FetchError, match=f"no revision '{COMMIT_NEW}'"):  # a pin the source does not hold
        fetch_model(REPO, "main", dest.parent / "other", source=hub, commit=COMMIT_NEW)


# ------------------------------------------------------------------ leftovers and strict verification --


def test_rerun_after_a_killed_fetch_removes_its_leftovers(hub: Path, dest: Path) -> None:
    fetch_model(REPO, "main", dest, source=hub)
    parent = dest.parent
    # what a SIGKILL leaves: a full download, the previous copy set aside, a half-written manifest
    (parent / ".prorl.tmp-k1ll3d").mkdir()
    (parent / ".prorl.tmp-k1ll3d" / "model.safetensors").write_bytes(b"x" * 1000)
    (parent / ".prorl.old-0ld0ld" / "prorl").mkdir(parents=True)
    (parent / ".prorl.old-0ld0ld" / "prorl" / "config.json").write_text("{}")
    (parent / ".prorl.manifest.json.tmp-half").write_text('{"format"')
    (parent / ".other.tmp-keep").mkdir()  # another folder's: not ours to remove
    assert fetch_model(REPO, "main", dest, source=hub)["status"] == "verified"
    assert_no_leftovers(parent, "prorl", "prorl.manifest.json", ".other.tmp-keep")
    # also before a download (the folder itself was lost with the kill)
    shutil.rmtree(dest)
    (parent / ".prorl.tmp-again").mkdir()
    assert fetch_model(REPO, "main", dest, source=hub)["status"] == "restored"
    assert_no_leftovers(parent, "prorl", "prorl.manifest.json", ".other.tmp-keep")


@pytest.mark.parametrize("damage", ["empty_dir", "symlink_to_identical_copy", "symlinked_dir"])
def test_verification_refuses_links_and_unexpected_entries(hub: Path, dest: Path, tmp_path: Path,
                                                           damage: str) -> None:
    fetch_model(REPO, "main", dest, source=hub)
    if damage == "empty_dir":
        (dest / "subdir" / "empty").mkdir()
        shown, kind = dest / "subdir" / "empty", "unexpected"
    elif damage == "symlink_to_identical_copy":
        copy = tmp_path / "elsewhere" / "model.safetensors"
        copy.parent.mkdir()
        shutil.copyfile(dest / "model.safetensors", copy)  # same bytes, same sha256
        (dest / "model.safetensors").unlink()
        (dest / "model.safetensors").symlink_to(copy)
        shown, kind = dest / "model.safetensors", "symlink"
    else:
        outside = tmp_path / "outside"
        shutil.copytree(dest / "subdir", outside)
        shutil.rmtree(dest / "subdir")
        (dest / "subdir").symlink_to(outside, target_is_directory=True)
        shown, kind = dest / "subdir", "symlink"
    for check in (lambda: fetch_model(REPO, "main", dest, source=hub), lambda: data_hub.verify(dest)):
        with pytest.raises(VerificationError) as err:
            check()
        assert [(p.path, p.kind) for p in err.value.problems] == [(str(shown), kind)], err.value
    assert str(shown) in str(err.value) and ("symbolic link" in str(err.value)) == (kind == "symlink")


def test_a_download_with_a_link_or_an_extra_directory_is_discarded(hub: Path, dest: Path) -> None:
    class LinkingClient(data_hub.LocalFolderClient):
        def download(self, snapshot, local_dir, **kwargs):
            super().download(snapshot, local_dir, **kwargs)
            (Path(local_dir) / "tokenizer.json").unlink()
            (Path(local_dir) / "tokenizer.json").symlink_to(self.revision_dir(REPO, "main", "model") / "tokenizer.json")
            (Path(local_dir) / "stray").mkdir()

    with pytest.raises(VerificationError) as err:
        fetch_model(REPO, "main", dest, source=LinkingClient(hub))
    assert {(p.path.split(":")[-1], p.kind) for p in err.value.problems} == {("stray", "unexpected"),
                                                                             ("tokenizer.json", "symlink")}
    assert not dest.exists()
    assert_no_leftovers(dest.parent)


# -------------------------------------------------------------- the real-hub client, faked offline --


def _git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class FakeHub:
    """Answers like HfApi.repo_info(files_metadata=True) and snapshot_download(local_dir=...)."""

    def __init__(self, files: dict[str, bytes], lfs: set[str], deliver: dict[str, bytes] | None = None):
        self.files, self.lfs, self.deliver = files, lfs, deliver or files
        self.calls: list[dict] = []

    def repo_info(self, repo_id, *, revision, repo_type, files_metadata):
        from huggingface_hub.hf_api import ModelInfo

        assert files_metadata is True and repo_type == "model"
        siblings = []
        for rel, data in self.files.items():
            s = {"rfilename": rel, "size": len(data), "blobId": _git_sha1(data)}
            if rel in self.lfs:
                s["blobId"] = "f" * 40  # LFS pointer's blob id: not the content's
                s["lfs"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "pointerSize": 134}
            siblings.append(s)
        return ModelInfo(id=repo_id, sha=COMMIT_MAIN, siblings=siblings)

    def snapshot_download(self, *, repo_id, repo_type, revision, local_dir, **kwargs):
        self.calls.append({"revision": revision, "local_dir": local_dir, **kwargs})
        for rel, data in self.deliver.items():
            (Path(local_dir) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(local_dir) / rel).write_bytes(data)
        meta = Path(local_dir) / ".cache" / "huggingface" / "download" / "config.json.metadata"
        meta.parent.mkdir(parents=True)
        meta.write_text("bookkeeping")
        return local_dir


def test_hf_hub_client_path(dest: Path) -> None:
    files = model_files()
    fake = FakeHub(files, lfs={"model.safetensors"})
    client = HfHubClient(api=fake, snapshot_download=fake.snapshot_download)
    result = fetch_model(REPO, "main", dest, source=client)

    assert result["status"] == "downloaded" and result["source"] == "hub"
    assert fake.calls[0]["revision"] == COMMIT_MAIN  # downloads the resolved commit, not the branch
    assert Path(fake.calls[0]["local_dir"]).parent == dest.parent  # temp folder next to dest
    assert not (dest / ".cache").exists()
    m = json.loads((dest.parent / "prorl.manifest.json").read_text())
    checked = {e["path"]: e["checked_against"] for e in m["files"]}
    assert checked.pop("model.safetensors") == "sha256"
    assert set(checked.values()) == {"git-sha1"}
    assert_no_leftovers(dest.parent, "prorl", "prorl.manifest.json")


def test_hf_hub_client_detects_bad_non_lfs_file(dest: Path) -> None:
    files = model_files()
    fake = FakeHub(files, lfs={"model.safetensors"}, deliver={**files, "config.json": b"{}"})
    client = HfHubClient(api=fake, snapshot_download=fake.snapshot_download)
    with pytest.raises(ChecksumError, match=r"config\.json: git-sha1"):
        fetch_model(REPO, "main", dest, source=client)
    assert not dest.exists()
    assert_no_leftovers(dest.parent)


# ---------------------------------------------------------------------------------------- datasets --


def test_dataset_fetch_same_path(tmp_path: Path) -> None:
    root = tmp_path / "hub"
    data = {"deepscaler.json": b'[{"problem": "1+1", "answer": "2"}]', "README.md": b"# DeepScaleR\n"}
    rev = write_local_snapshot(root, "agentica-org/DeepScaleR-Preview-Dataset", "main", COMMIT_MAIN, data,
                               repo_type="dataset")
    assert rev == root / "datasets" / "agentica-org" / "DeepScaleR-Preview-Dataset" / "main"
    data_root = tmp_path / "resources" / "data"

    result = fetch_dataset("agentica-org/DeepScaleR-Preview-Dataset", None, data_root / "ds", source=root)
    assert result["status"] == "downloaded" and result["repo_type"] == "dataset"
    assert result["revision"] == "main" and result["commit"] == COMMIT_MAIN
    assert (data_root / "ds" / "deepscaler.json").read_bytes() == data["deepscaler.json"]
    assert fetch_dataset("agentica-org/DeepScaleR-Preview-Dataset", "main", data_root / "ds",
                         source=root)["status"] == "verified"

    # the blend entry goes through the same path, at its pinned commit (a stand-in revision holding that commit)
    pinned = load_data_blend()["entries"]
    pinned = next(e["revision"] for e in pinned if e["name"] == "deepscaler")
    write_local_snapshot(root, "agentica-org/DeepScaleR-Preview-Dataset", "pinned", pinned, data, repo_type="dataset")
    entry = fetch_blend_entry("deepscaler", data_root, source=root)
    assert entry["commit"] == pinned
    assert entry["status"] == "downloaded" and entry["dest"] == str(data_root / "deepscaler")
    assert json.loads((data_root / "deepscaler.manifest.json").read_text())["repo_type"] == "dataset"

    # a dataset is not found where a model of the same id would be
    with pytest.raises(FetchError, match="no revision"):
        fetch_model("agentica-org/DeepScaleR-Preview-Dataset", "main", tmp_path / "m", source=root)


def test_blend_entry_allow_patterns(tmp_path: Path) -> None:
    root = tmp_path / "hub"
    write_local_snapshot(root, "nvidia/Llama-Nemotron-Post-Training-Dataset", "main", COMMIT_MAIN, {
        "README.md": b"card",
        "RL/instruction_following/if.jsonl": b'{"prompt": "answer in 3 words"}\n',
        "SFT/math/math.jsonl": b'{"big": true}\n',
    }, repo_type="dataset")
    result = fetch_blend_entry("llama_nemotron_if", tmp_path / "data", source=root)
    folder = tmp_path / "data" / "llama_nemotron_if"
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == [
        "README.md", "RL/instruction_following/if.jsonl"]
    assert result["n_files"] == 2
    m = json.loads((tmp_path / "data" / "llama_nemotron_if.manifest.json").read_text())
    assert m["allow_patterns"] == ["RL/instruction_following/*", "README.md"]
    with pytest.raises(FetchError, match="python_package"):
        fetch_blend_entry("reasoning_gym", tmp_path / "data", source=root)


def test_blend_pins_equal_the_paper_profile_pins() -> None:
    """Every hub source config/paper.yaml pins (checkpoint data, benchmarks, training sources) has the same commit in
    paper_data_blend.yaml where the blend lists that repository (issue 28: four were still null there)."""
    import yaml

    paper = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "paper.yaml").read_text())
    from brorl.data.catalog import CODE_BENCHMARKS, PAPER_BENCHMARKS, TRAIN_SOURCES

    specs = {**PAPER_BENCHMARKS, **CODE_BENCHMARKS, **TRAIN_SOURCES}
    pins = {**paper["evaluation"]["revisions"], **paper["rl"]["data"]["revisions"]}
    by_repo = {specs[name].repo_id: commit for name, commit in pins.items()}
    blend = {e["repo_id"]: e["revision"] for e in load_data_blend()["entries"] if e["source_kind"] == "hf_dataset"}
    shared = set(by_repo) & set(blend)
    assert {"agentica-org/DeepScaleR-Preview-Dataset", "math-ai/minervamath", "Hothan/OlympiadBench",
            "google/IFEval", "HuggingFaceH4/MATH-500"} <= shared
    assert {r: blend[r] for r in shared} == {r: by_repo[r] for r in shared}


def test_blend_manifest_loads_with_required_fields(tmp_path: Path) -> None:
    blend = load_data_blend()
    entries = blend["entries"]
    assert blend["caveat"] and "continu" in blend["caveat"]
    for e in entries:
        assert set(BLEND_ENTRY_FIELDS) <= set(e), e["name"]
        assert e["brorl_unstated"], e["name"]
        assert e["revision"] is None or isinstance(e["revision"], str)
        if e["source_kind"] == "hf_dataset":
            assert e["repo_type"] == "dataset" and e["repo_id"].count("/") == 1
    train = {e["name"]: e["size_paper"] for e in entries if e["role"] == "train"}
    assert train == {"deepscaler": 40000, "eurus2_rl_code": 24000, "scp116k": 25000,
                     "reasoning_gym": 37000, "llama_nemotron_if": 10000}
    assert sum(train.values()) == blend["total_train_size_paper"] == 136000
    assert {"aime24", "aime25", "amc", "math500", "minerva", "olympiadbench"} <= {
        e["name"] for e in entries if e["role"] == "eval"}

    broken = tmp_path / "blend.yaml"
    broken.write_text("format: brorl.data_blend/1\nentries:\n  - name: x\n    role: train\n")
    with pytest.raises(ValueError, match="missing"):
        load_data_blend(broken)


# ------------------------------------------------------------------- pins and gated data in the pipeline --


def _brorl(args: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", **(env or {})}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)


def test_paper_profile_refuses_unpinned_sources_unless_allowed_and_says_so_in_mlflow(hub: Path, tmp_path: Path):
    import mlflow

    tracking = {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "pins",
                "artifact_root": str(tmp_path / "art")}

    def fetch_cli(cfg: dict, profile: str = '{"name": "paper", "start": "fetched", "data": "paper", "pins": "required"}'):
        return _brorl(["brorl", "fetch-model", "--rule", "fetch_checkpoint", "--profile", profile,
                       "--config", json.dumps({"repo_id": REPO, "source": str(hub), **cfg}),
                       "--tracking", json.dumps(tracking), "--wildcard", "name=prorl",
                       "--dest", str(tmp_path / "models/prorl"),
                       "--manifest", str(tmp_path / "models/prorl.manifest.json")], tmp_path)

    refused = fetch_cli({"revision": "main"})
    assert refused.returncode != 0 and not (tmp_path / "models/prorl").exists()
    page = f"https://huggingface.co/{REPO}/commits/main"
    assert f"not pinned to a commit: prorl (main; its commits: {page})" in refused.stderr
    assert "checkpoints.fetch.prorl.commit" in refused.stderr and "checkpoints.allow_unpinned" in refused.stderr
    # the branch moved on (main is at COMMIT_MAIN, the pin is COMMIT_BRORL): the pinned commit is fetched, with a
    # warning naming both commits and the run tagged branch_moved
    moved = fetch_cli({"revision": "main", "commit": COMMIT_BRORL})
    assert moved.returncode == 0, moved.stderr[-2000:]
    said = moved.stdout + moved.stderr
    assert f"branch main of {REPO} now points to {COMMIT_MAIN}, not to the pinned {COMMIT_BRORL}" in said
    assert json.loads((tmp_path / "models/prorl.manifest.json").read_text())["commit"] == COMMIT_BRORL
    (tmp_path / "models/prorl.manifest.json").unlink()
    shutil.rmtree(tmp_path / "models/prorl")
    assert fetch_cli({"revision": "main"}, profile="ci").returncode == 0  # only the paper profile insists
    (tmp_path / "models/prorl.manifest.json").unlink()
    shutil.rmtree(tmp_path / "models/prorl")
    pinned = fetch_cli({"revision": "main", "commit": COMMIT_MAIN})
    assert pinned.returncode == 0, pinned.stderr[-2000:]
    allowed = fetch_cli({"revision": "main", "allow_unpinned": True})
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    runs = mlflow.MlflowClient(tracking["uri"]).search_runs(
        [mlflow.MlflowClient(tracking["uri"]).get_experiment_by_name("pins").experiment_id],
        order_by=["attributes.start_time ASC"])
    finished = [r for r in runs if r.info.status == "FINISHED"]
    assert [r.data.tags.get("unpinned_sources") for r in finished] == [
        None, "prorl", None, "prorl"]  # moved, the ci run, the pinned one, the allowed one (param allow_unpinned)
    assert finished[0].data.tags["branch_moved"] == f"main -> {COMMIT_MAIN}; fetched the pinned {COMMIT_BRORL}"
    assert "branch_moved" not in finished[2].data.tags
    assert runs[-1].data.params["allow_unpinned"] == "True"


class GatedHub:
    """Answers like the hub does for a gated repository without an accepted request: GatedRepoError."""

    def __init__(self):
        self.downloads = 0

    def repo_info(self, repo_id, *, revision, repo_type, files_metadata):
        import httpx
        from huggingface_hub.errors import GatedRepoError

        url = f"https://huggingface.co/api/{repo_type}s/{repo_id}/revision/{revision}"
        raise GatedRepoError(f"403 Client Error. Cannot access gated repo for url {url}.",
                             response=httpx.Response(403, request=httpx.Request("GET", url)))

    def snapshot_download(self, **kwargs):
        self.downloads += 1


def _no_token(monkeypatch, tmp_path: Path) -> None:
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "no-token"))
    assert data_hub.hf_token() is None


def test_gpqa_without_a_token_stops_naming_hf_token_and_the_terms(tmp_path: Path, monkeypatch) -> None:
    from brorl.data import benchmarks
    from brorl.data.catalog import benchmark_spec

    _no_token(monkeypatch, tmp_path)
    dest = tmp_path / "resources/gated/benchmarks/gpqa_diamond/test.jsonl"
    # the hub refuses (a client built on a stand-in that answers like a gated repository)
    gated = GatedHub()
    client = HfHubClient(api=gated, snapshot_download=gated.snapshot_download)
    with pytest.raises(data_hub.GatedRepoAccessError) as err:
        benchmarks.prepare_benchmark("gpqa_diamond", client, dest)
    assert "HF_TOKEN" in str(err.value) and "https://huggingface.co/datasets/Idavidrein/gpqa" in str(err.value)
    assert "Cannot access gated repo" in str(err.value) and gated.downloads == 0
    # the real hub without a token: refused before any client exists (no network, no download)
    monkeypatch.setattr(data_hub, "HfHubClient", lambda *a, **k: pytest.fail("the hub was contacted"))
    with pytest.raises(data_hub.GatedRepoAccessError, match="HF_TOKEN") as err:
        benchmarks.prepare_benchmark("gpqa_diamond", None, dest)
    assert "do not reveal examples from the dataset in plain text" in str(err.value)
    assert not dest.parent.exists()
    # an ungated benchmark is not held up by the token check
    benchmarks.check_gated_access(benchmark_spec("aime24"), None)


def _snakemake(args: list[str], workdir: Path, env: dict) -> subprocess.CompletedProcess:
    from brorl.config import PROJECT_ROOT

    return _brorl(["snakemake", "--snakefile", str(PROJECT_ROOT / "Snakefile"), "--directory", str(workdir), *args],
                  PROJECT_ROOT, env)


def test_gated_benchmark_stops_the_dag_before_any_job_and_stays_out_of_dvc(tmp_path: Path, monkeypatch) -> None:
    """`snakemake` on the paper profile without HF_TOKEN: GPQA is refused while the DAG is built (nothing runs);
    a dry run says so. GPQA's data lies outside every DVC-tracked folder unless evaluation.share_gated."""
    import yaml

    from brorl.config import PROJECT_ROOT

    _no_token(monkeypatch, tmp_path)
    env = {"HF_TOKEN_PATH": str(tmp_path / "no-token")}
    paper = str(PROJECT_ROOT / "config/paper.yaml")
    work = tmp_path / "work"
    target = "resources/paper/gated/benchmarks/gpqa_diamond/test.jsonl"
    run = _snakemake(["--cores", "1", "--configfile", paper, "--", target], work, env)
    out = run.stdout + run.stderr
    assert run.returncode != 0 and "HF_TOKEN" in out and "do not reveal examples" in out
    assert "Finished job" not in out and not (work / "logs").exists() and not (work / "resources").exists()
    # an unpinned source (here: an overlay that puts minerva back on its branch) is refused the same way (before any
    # job), naming the key that pins it, the page listing its commits and the one-run override
    (tmp_path / "unpinned.yaml").write_text("evaluation:\n  revisions:\n    minerva: main\n")
    run = _snakemake(["--cores", "1", "--configfile", paper, str(tmp_path / "unpinned.yaml"), "--",
                      "results/paper/data/benchmarks/minerva/test.jsonl"], work, env)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-3000:]
    assert ("not pinned to a commit: minerva (main; its commits: "
            "https://huggingface.co/datasets/math-ai/minervamath/commits/main)") in out
    assert "evaluation.revisions.minerva" in out and "checkpoints.allow_unpinned" in out
    assert "--config 'evaluation={revisions: {minerva: <40-hex commit>}}'" in out
    assert "Finished job" not in out and not (work / "logs").exists() and not (work / "results").exists()

    plan = _snakemake(["-n", "--configfile", paper], work, env)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert "WARNING (a real run stops here)" in plan.stderr and "HF_TOKEN" in plan.stderr
    assert "not pinned to a commit" not in plan.stderr  # issue 27: every hub source of the paper profile is pinned
    dvc = next(line for line in plan.stdout.splitlines() if "brorl dvc-track" in line)
    tracked = dvc.split("brorl dvc-track ")[1].split(" --push")[0].split()
    assert "results/paper/data" in tracked and "results/paper/eval" in tracked
    assert f"output: {target}" in plan.stdout and "results/paper/data/benchmarks/gpqa_diamond" not in plan.stdout
    assert not any(target.startswith(folder + "/") for folder in tracked)
    assert "--benchmark gpqa_diamond resources/paper/gated/benchmarks " in plan.stdout  # the evaluate job reads it from there

    shared = yaml.safe_load(Path(paper).read_text())
    shared["evaluation"]["share_gated"] = True
    (tmp_path / "shared.yaml").write_text(yaml.safe_dump(shared))
    plan = _snakemake(["-n", "--configfile", str(tmp_path / "shared.yaml")], work, env)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert "output: results/paper/data/benchmarks/gpqa_diamond/test.jsonl" in plan.stdout
    assert "resources/paper/gated" not in plan.stdout


def test_gated_evaluation_keeps_completions_local_and_shares_scores_and_hashes(tmp_path: Path) -> None:
    from brorl.data.benchmarks import keep_gated_local

    secret = "A question from the GPQA set, never to be posted"
    result = {"benchmark": "gpqa_diamond", "metrics": {"mean_at_k": 0.5}, "samples": [
        {"doc_id": 0, "id": "recA", "category": "Physics", "correct": [1, 0], "completions": [secret, "\\boxed{B}"]}]}
    out = tmp_path / "results/eval/prorl/gpqa_diamond.json"
    out.parent.mkdir(parents=True)
    out.write_text(json.dumps(result))
    local = keep_gated_local("gpqa_diamond", out, local_root=tmp_path / "resources/gated")
    assert local == tmp_path / "resources/gated/eval/prorl/gpqa_diamond.json"
    assert json.loads(local.read_text()) == result  # the full records stay here, outside results/
    shared = json.loads(out.read_text())
    assert secret not in out.read_text() and "completions" not in shared["samples"][0]
    assert shared["samples"][0]["correct"] == [1, 0] and shared["metrics"] == result["metrics"]
    assert shared["samples"][0]["completions_sha256"][0] == hashlib.sha256(secret.encode()).hexdigest()
    assert shared["completions_local"]["path"] == str(local)
    # not gated, or shared on purpose: left as it is
    other = tmp_path / "results/eval/prorl/aime24.json"
    other.write_text(json.dumps(result))
    assert keep_gated_local("aime24", other) is None and json.loads(other.read_text()) == result
    out.write_text(json.dumps(result))
    assert keep_gated_local("gpqa_diamond", out, share_gated=True) is None and secret in out.read_text()


def test_evaluate_logs_and_writes_only_hashes_of_gpqa_completions(tmp_path: Path, monkeypatch) -> None:
    """`brorl evaluate` on GPQA: the result it writes (pushed by DVC) and logs to MLflow holds no completion text;
    the full records are in resources/gated/. lm-eval itself is stood in for (it needs a model run): the stand-in
    writes the result the runner writes."""
    import mlflow

    from brorl import cli
    from brorl.evaluation import runner

    secret = "The reasoning restates a GPQA question, which must not be posted"
    result = {"benchmark": "gpqa_diamond", "k": 2, "metrics": {"mean_at_k": 0.5, "pass_at_1": 0.5, "n_problems": 1.0},
              "categories": {}, "samples": [{"doc_id": 0, "id": "recA", "category": "gpqa_diamond", "correct": [1, 0],
                                             "completions": [secret, "\\boxed{C}"]}],
              "model_hash": "m" * 64, "task_hash": "t" * 64, "seconds": 1.0, "cached": False}

    def fake_evaluate(model_dir, benchmark, data_dir, out_json, **kwargs):
        runner.atomic_write_json(out_json, result)
        return result

    monkeypatch.setattr(runner, "evaluate", fake_evaluate)
    monkeypatch.chdir(tmp_path)
    tracking = {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "gated",
                "artifact_root": str(tmp_path / "art")}
    out = "results/eval/prorl/gpqa_diamond.json"
    for share in (False, True):
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        assert cli.main(["evaluate", "--rule", "evaluate", "--profile", "paper", "--config",
                         json.dumps({"k": 2, "share_gated": share}), "--tracking", json.dumps(tracking),
                         "--model", "resources/models/prorl", "--benchmark", "gpqa_diamond",
                         "resources/gated/benchmarks", out]) == 0
        assert (secret in Path(out).read_text()) == share
    client = mlflow.MlflowClient(tracking["uri"])
    runs = client.search_runs([client.get_experiment_by_name("gated").experiment_id],
                              order_by=["attributes.start_time ASC"])
    kept, shared = runs
    assert kept.data.tags["gated_records_local"] == "resources/gated/eval/prorl/gpqa_diamond.json"
    assert "gated_records_local" not in shared.data.tags
    logged = Path(client.download_artifacts(kept.info.run_id, "gpqa_diamond.json", str(tmp_path / "dl")))
    assert secret not in logged.read_text() and json.loads(logged.read_text())["metrics"]["mean_at_k"] == 0.5
    assert secret in (tmp_path / "resources/gated/eval/prorl/gpqa_diamond.json").read_text()
