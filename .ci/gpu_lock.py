"""The GPU host's lock (requirements-gpu.lock): generate it with pip's resolver, check it, check it is fresh.

The paper profile's GPU host installs one file, ``requirements-gpu.lock``: every package pinned, for Linux
x86-64 and CPython 3.11 (the project's ``requires-python``). Its inputs are the CPU lock (``requirements.txt``)
and ``requirements-gpu.txt`` (the GPU extras, and the pins that must differ from the CPU lock because vLLM's
requirements forbid the CPU lock's version). The lock keeps every CPU-lock pin that ``requirements-gpu.txt``
does not name, so the GPU host runs what CI tests wherever the two can agree.

    python .ci/gpu_lock.py lock     # resolve the inputs, write requirements-gpu.lock   (make gpu-lock)
    python .ci/gpu_lock.py check    # the lock is fresh, and pip resolves it to itself  (make gpu-lock-check)
    python .ci/gpu_lock.py fresh    # only the offline part of check (the tests run it)

How pip is run, and why:

- ``pip install --dry-run --ignore-installed --report``: the resolver's answer, nothing installed.
- An isolated pip configuration (``PIP_CONFIG_FILE=/dev/null``, every other ``PIP_*`` setting dropped except the
  certificate bundle and timeout, ``--index-url https://pypi.org/simple``): a machine's pip.conf constraints or
  local wheel folders (this project's CPU machines cap torch and serve a CPU torch wheel from a local folder) would
  otherwise stand in for the CUDA torch that the GPU host gets from the package index.
- ``--use-feature=fast-deps``: a wheel's metadata is read with HTTP range requests when the index does not serve
  PEP 658 ``.metadata`` files (pip prefers those where the index offers them), and pip 26.3's dry run (the pinned
  pip, Makefile) then downloads no wheel at all: CUDA wheels (GBs) are never fetched.
- Run natively on Linux x86-64 with CPython 3.11, not with ``--platform``/``--python-version`` from another
  machine: those options require ``--only-binary=:all:``, and nine packages of the lock exist only as sdists
  (langdetect, antlr4-python3-runtime, cellpylib, connection_pool, pycosat, rouge_score, sqlitedict, word2number,
  zss), so pip must build their metadata, which a foreign-platform resolve refuses to do. Environment markers are
  then evaluated for the real target too. The script refuses to run on another platform.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CPU_LOCK = ROOT / "requirements.txt"
GPU_INPUT = ROOT / "requirements-gpu.txt"
GPU_LOCK = ROOT / "requirements-gpu.lock"
INDEX_URL = "https://pypi.org/simple"
TARGET = "Linux x86-64, CPython 3.11"
#: The documented GPU install (README, docs/profiles.md); the tests check the docs name this command.
INSTALL = "python3.11 -m pip install -r requirements-gpu.lock && python3.11 -m pip install --no-deps -e ."
#: Environment variables kept for pip (the rest of PIP_* is dropped: see the module docstring).
KEEP_PIP_ENV = ("PIP_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_DISABLE_PIP_VERSION_CHECK")

_REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(.*)$")


class LockError(Exception):
    """The lock is stale, does not resolve, or the inputs are malformed; the message says what to do."""


def canonical(name: str) -> str:
    """PEP 503 name: lower case, runs of -_. as one dash."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, requirement) of a requirements file, comments and blank lines dropped."""
    out = []
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if line:
            if line.startswith("-"):
                raise LockError(f"{path.name}:{n}: options ({line.split()[0]}) are not supported here")
            out.append((n, line))
    return out


def requirement_name(line: str, where: str) -> str:
    m = _REQ.match(line)
    if not m:
        raise LockError(f"{where}: cannot read a package name in {line!r}")
    return canonical(m.group(1))


def pins(path: Path) -> dict[str, str]:
    """{canonical name: version} of a file of ``name==version`` lines (a lock)."""
    out = {}
    for n, line in requirement_lines(path):
        name, sep, version = line.partition("==")
        if not sep or not version or " " in version.strip():
            raise LockError(f"{path.name}:{n}: expected name==version, got {line!r}")
        out[canonical(name)] = version.strip()
    return out


def resolver_input(cpu_lock: Path = CPU_LOCK, gpu_input: Path = GPU_INPUT) -> tuple[list[str], list[str]]:
    """What the resolver is asked for: every line of ``gpu_input``, and every CPU-lock pin whose package
    ``gpu_input`` does not name. Returns (requirements, names taken from gpu_input)."""
    gpu = [line for _, line in requirement_lines(gpu_input)]
    named = sorted({requirement_name(line, f"{gpu_input.name}") for line in gpu})
    cpu = [f"{name}=={version}" for name, version in pins(cpu_lock).items() if name not in named]
    return gpu + cpu, named


def input_digests(cpu_lock: Path = CPU_LOCK, gpu_input: Path = GPU_INPUT) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (cpu_lock, gpu_input)}


def check_platform() -> None:
    """The resolver must run on the GPU host's platform (module docstring: why not --platform)."""
    here = (platform.system(), platform.machine(), platform.python_implementation(), sys.version_info[:2])
    if here != ("Linux", "x86_64", "CPython", (3, 11)):
        raise LockError(f"the GPU lock is resolved for {TARGET}; this is {here[0]} {here[1]}, {here[2]} "
                        f"{here[3][0]}.{here[3][1]}. Run it with python3.11 on a Linux x86-64 machine.")


def isolated_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in KEEP_PIP_ENV}
    env["PIP_CONFIG_FILE"] = os.devnull  # no global / user / site pip.conf (constraints, find-links, indexes)
    return env


def resolve(requirements: list[str], *, pip: list[str] | None = None) -> tuple[dict[str, str], dict]:
    """Run pip's resolver (dry run, isolated config) on ``requirements``; ({name: version}, stats)."""
    check_platform()
    pip = pip or [sys.executable, "-m", "pip"]
    with tempfile.TemporaryDirectory(prefix="gpu-lock-") as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text("\n".join(requirements) + "\n")
        report, log = Path(tmp) / "report.json", Path(tmp) / "pip.log"
        cmd = [*pip, "install", "--dry-run", "--ignore-installed", "--quiet", "--use-feature=fast-deps",
               "--index-url", INDEX_URL, "--report", str(report), "--log", str(log), "-r", str(req)]
        start = time.monotonic()
        done = subprocess.run(cmd, env=isolated_env(), capture_output=True, text=True)
        seconds = time.monotonic() - start
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-25:])
            raise LockError(f"pip's resolver refused the GPU install ({TARGET}):\n{tail}")
        resolved = report_pins(json.loads(report.read_text()))
        stats = {"seconds": round(seconds, 1), **traffic(log.read_text(errors="replace"))}
    return resolved, stats


def report_pins(report: dict) -> dict[str, str]:
    """{canonical name: version} of what a ``pip install --report`` would install."""
    return {canonical(item["metadata"]["name"]): item["metadata"]["version"] for item in report["install"]}


_HTTP = re.compile(r'"(GET|HEAD) (\S+) HTTP/[\d.]+" (\d{3}) (\d+|None)')


def traffic(log: str) -> dict[str, int]:
    """Requests and bytes pip fetched (its debug log's urllib3 lines, Content-Length as sent)."""
    requests = downloaded = 0
    for m in _HTTP.finditer(log):
        requests += 1
        downloaded += int(m.group(4)) if m.group(4).isdigit() else 0
    return {"requests": requests, "bytes": downloaded}


def render(resolved: dict[str, str], digests: dict[str, str], named: list[str], cpu: dict[str, str],
           pip_version: str) -> str:
    differ = [f"{n} {cpu[n]} -> {resolved[n]}" for n in sorted(resolved) if n in cpu and cpu[n] != resolved[n]]
    head = [
        f"# GPU host lock (paper profile): every package, for {TARGET}. Generated by `make gpu-lock`",
        f"# (.ci/gpu_lock.py, pip {pip_version}'s resolver) from requirements.txt (the CPU lock) and "
        "requirements-gpu.txt; do not",
        "# edit by hand. `make gpu-lock-check` (CI) re-runs the resolver on this file.",
        f"# Install on the GPU host:  {INSTALL}",
        *(f"# input {name} sha256 {digest}" for name, digest in sorted(digests.items())),
        f"# taken from requirements-gpu.txt: {', '.join(named)}",
        f"# differs from the CPU lock: {'; '.join(differ) or 'nothing'}",
    ]
    return "\n".join(head + [f"{n}=={v}" for n, v in sorted(resolved.items())]) + "\n"


def header_digests(lock: Path = GPU_LOCK) -> dict[str, str]:
    out = {}
    for line in lock.read_text().splitlines():
        m = re.match(r"^# input (\S+) sha256 ([0-9a-f]{64})$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def check_fresh(lock: Path = GPU_LOCK, cpu_lock: Path = CPU_LOCK, gpu_input: Path = GPU_INPUT) -> None:
    """The lock was generated from the current inputs, and agrees with the CPU lock on every package that
    requirements-gpu.txt does not name (offline)."""
    if not lock.is_file():
        raise LockError(f"{lock.name} is missing: run `make gpu-lock`")
    if header_digests(lock) != input_digests(cpu_lock, gpu_input):
        raise LockError(f"{lock.name} is stale: {cpu_lock.name} or {gpu_input.name} changed since it was "
                        "generated. Run `make gpu-lock` and commit the new lock.")
    locked, cpu = pins(lock), pins(cpu_lock)
    _, named = resolver_input(cpu_lock, gpu_input)
    missing = sorted(n for n in cpu if n not in locked)
    changed = sorted(f"{n} ({cpu[n]} in {cpu_lock.name}, {locked[n]} in {lock.name})" for n in cpu
                     if n in locked and locked[n] != cpu[n] and n not in named)
    if missing or changed:
        raise LockError(f"{lock.name} disagrees with {cpu_lock.name} where {gpu_input.name} says nothing: "
                        f"missing {missing or 'none'}; other versions {changed or 'none'}. Run `make gpu-lock`.")


def pip_version(pip: list[str]) -> str:
    out = subprocess.run([*pip, "--version"], capture_output=True, text=True, check=True).stdout
    return out.split()[1]


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("lock", "check", "fresh"):
        print(__doc__.split("\n\n")[2], file=sys.stderr)
        return 2
    pip = [sys.executable, "-m", "pip"]
    try:
        if argv[0] == "lock":
            requirements, named = resolver_input()
            resolved, stats = resolve(requirements, pip=pip)
            GPU_LOCK.write_text(render(resolved, input_digests(), named, pins(CPU_LOCK), pip_version(pip)))
            print(f"[gpu-lock] wrote {GPU_LOCK.name}: {len(resolved)} packages; resolver {stats['seconds']} s, "
                  f"{stats['requests']} requests, {stats['bytes'] / 1e6:.1f} MB")
            return 0
        check_fresh()
        if argv[0] == "fresh":
            print(f"[gpu-lock] {GPU_LOCK.name} is fresh")
            return 0
        locked = pins(GPU_LOCK)
        resolved, stats = resolve([f"{n}=={v}" for n, v in locked.items()], pip=pip)
        extra = sorted(set(resolved) - set(locked))
        other = sorted(f"{n} {locked[n]} -> {resolved[n]}" for n in locked
                       if n in resolved and resolved[n] != locked[n])
        unused = sorted(set(locked) - set(resolved))
        if extra or other or unused:
            raise LockError(f"pip resolves {GPU_LOCK.name} to something else: extra {extra or 'none'}, other "
                            f"versions {other or 'none'}, not installed {unused or 'none'}. Run `make gpu-lock`.")
        print(f"[gpu-lock] pip {pip_version(pip)} resolves {GPU_LOCK.name} ({len(locked)} packages, {TARGET}) "
              f"to itself: {stats['seconds']} s, {stats['requests']} requests, {stats['bytes'] / 1e6:.1f} MB")
        return 0
    except LockError as err:
        print(f"[gpu-lock] {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
