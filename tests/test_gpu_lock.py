"""The GPU host's lock (requirements-gpu.lock, .ci/gpu_lock.py), offline: fresh, consistent with the CPU lock where
requirements-gpu.txt says nothing, and the resolver harness isolated from this machine's pip configuration.

The resolver itself needs the package index, so it runs where install-time steps run (`make gpu-lock-check`,
called by .ci/run before the tests), not here: these tests never touch the network (a fake pip stands in)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("gpu_lock", ROOT / ".ci" / "gpu_lock.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_lock"] = module
    spec.loader.exec_module(module)
    return module


gpu_lock = _load()


def test_the_lock_is_fresh_and_keeps_every_cpu_pin_it_can() -> None:
    """Issue 27, defect 1: the documented GPU install did not resolve (nltk, then fastapi). The lock exists, was
    generated from today's requirements.txt and requirements-gpu.txt, and differs from the CPU lock only where
    requirements-gpu.txt says so."""
    gpu_lock.check_fresh()
    locked, cpu = gpu_lock.pins(gpu_lock.GPU_LOCK), gpu_lock.pins(gpu_lock.CPU_LOCK)
    _, named = gpu_lock.resolver_input()
    differ = {n for n in cpu if locked[n] != cpu[n]}
    assert differ == {"fastapi", "numpy", "pandas", "snakemake-executor-plugin-slurm"}
    assert differ <= set(named)  # every difference is declared (and explained) in requirements-gpu.txt
    for name, version in {"torch": "2.13.0", "transformers": "5.17.0", "trl": "1.16.0", "vllm": "0.31.0",
                          "nltk": cpu["nltk"], "langdetect": "1.0.9", "immutabledict": "4.2.1"}.items():
        assert locked[name] == version, name
    assert locked["fastapi"].startswith("0.136.")  # vllm 0.31.0: fastapi[standard]>=0.133,<0.137
    header = gpu_lock.GPU_LOCK.read_text().splitlines()[:10]
    assert any(gpu_lock.INSTALL in line for line in header)


def test_a_stale_or_edited_lock_is_refused(tmp_path: Path) -> None:
    cpu, gpu, lock = (tmp_path / p.name for p in (gpu_lock.CPU_LOCK, gpu_lock.GPU_INPUT, gpu_lock.GPU_LOCK))
    for src, dst in ((gpu_lock.CPU_LOCK, cpu), (gpu_lock.GPU_INPUT, gpu), (gpu_lock.GPU_LOCK, lock)):
        dst.write_text(src.read_text())
    gpu_lock.check_fresh(lock, cpu, gpu)
    cpu.write_text(cpu.read_text().replace("absl-py==", "absl-py==0", 1))
    with pytest.raises(gpu_lock.LockError, match="requirements-gpu.lock is stale: requirements.txt or "):
        gpu_lock.check_fresh(lock, cpu, gpu)
    cpu.write_text(gpu_lock.CPU_LOCK.read_text())
    version = gpu_lock.pins(lock)["absl-py"]
    lock.write_text(lock.read_text().replace(f"absl-py=={version}", "absl-py==0.0.1"))  # a hand edit
    with pytest.raises(gpu_lock.LockError, match=r"other versions \['absl-py \(.* 0\.0\.1 in requirements-gpu"):
        gpu_lock.check_fresh(lock, cpu, gpu)
    lock.unlink()
    with pytest.raises(gpu_lock.LockError, match="missing: run `make gpu-lock`"):
        gpu_lock.check_fresh(lock, cpu, gpu)


def test_resolver_input_takes_the_named_packages_from_requirements_gpu(tmp_path: Path) -> None:
    cpu, gpu = tmp_path / "requirements.txt", tmp_path / "requirements-gpu.txt"
    cpu.write_text("# lock\nFastAPI==0.165.0\nnumpy==2.4.6\ntorch==2.13.0\n")
    gpu.write_text("vllm==0.31.0\ntrl[vllm]==1.16.0  # with its extra\nfastapi==0.136.3\n")
    requirements, named = gpu_lock.resolver_input(cpu, gpu)
    assert requirements == ["vllm==0.31.0", "trl[vllm]==1.16.0", "fastapi==0.136.3", "numpy==2.4.6",
                            "torch==2.13.0"]
    assert named == ["fastapi", "trl", "vllm"]
    gpu.write_text("vllm==0.31.0\n--extra-index-url https://example.org/simple\n")
    with pytest.raises(gpu_lock.LockError, match=r"requirements-gpu.txt:2: options \(--extra-index-url\)"):
        gpu_lock.resolver_input(cpu, gpu)


def test_the_resolver_runs_isolated_from_this_machines_pip_configuration(tmp_path: Path, monkeypatch) -> None:
    """What `make gpu-lock-check` runs, with a fake pip that records its command line and environment: a dry run
    with a report, the public index, fast-deps (no wheel downloads), no pip.conf, find-links or constraints."""
    monkeypatch.setattr(gpu_lock, "check_platform", lambda: None)
    for var, value in {"PIP_FIND_LINKS": "/opt/wheels", "PIP_CONSTRAINT": "/etc/xdg/pip/constraints.txt",
                       "PIP_EXTRA_INDEX_URL": "file:///opt/pypi/simple", "PIP_CERT": "/etc/ssl/x.crt"}.items():
        monkeypatch.setenv(var, value)
    seen = tmp_path / "seen.json"
    fake = tmp_path / "fake_pip.py"
    fake.write_text(
        "import json, os, sys\n"
        "args = sys.argv[1:]\n"
        "req = open(args[args.index('-r') + 1]).read().split()\n"
        f"json.dump({{'args': args, 'req': req, 'env': dict(os.environ)}}, open({str(seen)!r}, 'w'))\n"
        "items = [{'metadata': {'name': r.split('==')[0], 'version': r.split('==')[1]}} for r in req]\n"
        "json.dump({'install': items}, open(args[args.index('--report') + 1], 'w'))\n"
        "open(args[args.index('--log') + 1], 'w').write("
        "'https://pypi.org:443 \"GET /simple/vllm/ HTTP/1.1\" 200 1000\\n'"
        "'https://files.pythonhosted.org:443 \"GET /packages/v.whl HTTP/1.1\" 206 250\\n')\n")
    resolved, stats = gpu_lock.resolve(["vllm==0.31.0", "Jinja2==3.1.6"], pip=[sys.executable, str(fake)])
    assert resolved == {"vllm": "0.31.0", "jinja2": "3.1.6"}
    assert (stats["requests"], stats["bytes"]) == (2, 1250)
    call = json.loads(seen.read_text())
    args, env = call["args"], call["env"]
    assert args[:4] == ["install", "--dry-run", "--ignore-installed", "--quiet"]
    assert "--use-feature=fast-deps" in args and args[args.index("--index-url") + 1] == "https://pypi.org/simple"
    assert call["req"] == ["vllm==0.31.0", "Jinja2==3.1.6"]
    assert env["PIP_CONFIG_FILE"] == "/dev/null" and env["PIP_CERT"] == "/etc/ssl/x.crt"
    assert not {"PIP_FIND_LINKS", "PIP_CONSTRAINT", "PIP_EXTRA_INDEX_URL"} & set(env)
    fake.write_text("import sys\nprint('ResolutionImpossible: fastapi', file=sys.stderr)\nsys.exit(1)\n")
    with pytest.raises(gpu_lock.LockError,
                       match="(?s)pip.s resolver refused the GPU install.*ResolutionImpossible: fastapi"):
        gpu_lock.resolve(["vllm==0.31.0"], pip=[sys.executable, str(fake)])


def test_the_platform_guard_names_the_target(monkeypatch) -> None:
    monkeypatch.setattr(gpu_lock.platform, "machine", lambda: "aarch64")
    with pytest.raises(gpu_lock.LockError, match="resolved for Linux x86-64, CPython 3.11; this is .* aarch64"):
        gpu_lock.check_platform()


def test_the_docs_name_the_install_that_resolves() -> None:
    """The README and the paper-profile docs give the lock's install command, and none gives the one that failed."""
    for doc in ("README.md", "docs/profiles.md", "requirements-gpu.txt"):
        text = (ROOT / doc).read_text()
        assert gpu_lock.INSTALL in text, doc
        assert "-r requirements.txt -r requirements-gpu.txt" not in text, doc
