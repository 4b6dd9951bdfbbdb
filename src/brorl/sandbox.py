"""Sandboxed code rewards for BroRL's code tasks (APPS, CodeContests, Codeforces, TACO).

What
----
* :func:`code_reward` -- the paper's code reward (section 3, "Training data"): the **fraction of test cases
  passed**, and **0.0 on a compile (syntax) error or when the program exceeds the time limit** (5 s, for
  all test cases together, as in ProRL's grader: "executes every test case, 5 s total timeout").
* :func:`code_rewards` -- the same for a batch, run in parallel (one sandbox per distinct program).
* :func:`trl_code_reward` / :func:`make_trl_code_reward` -- TRL ``GRPOTrainer`` reward functions.
* :func:`run_program` -- the lower level: runs extracted code, returns a :class:`SandboxResult` with
  per-case statuses, timings and which isolation mechanisms were in force.
* :func:`extract_code` -- the program extraction rule; :func:`parse_tests` -- the test format (both below).

Program extraction rule, test cases, output comparison
------------------------------------------------------
:mod:`brorl.sandbox_cases` (:func:`extract_code`, :func:`parse_tests`, :func:`outputs_match`, re-exported here).

How a program is run (one sandbox process tree per program, all its test cases inside)
--------------------------------------------------------------------------------------
The parent starts ``python -I -S -B -c <bootstrap>`` (no site-packages: model code gets the standard
library only) with ``start_new_session=True`` and a minimal environment (``PATH``, ``HOME`` = ``TMPDIR`` =
the sandbox dir, ``LANG``) -- the parent's environment variables are never passed.  The bootstrap reads
the harness (:mod:`brorl.sandbox_harness`, trusted code, pre-compiled) and the test inputs from stdin.
The harness

1. enters new **user, network, mount and PID namespaces** (``unshare(2)`` via ctypes; no root needed
   where unprivileged user namespaces are allowed) and forks the PID namespace's init.  That init
   **pivots into a private root**: a fresh tmpfs holding, read-only, only the interpreter binary, its
   standard library (``sys.base_prefix/lib/pythonX.Y``, with ``site-packages`` / ``dist-packages`` under an
   empty tmpfs), the system's shared libraries (``/lib*``, ``/usr/lib*``: extension modules load them),
   ``/etc/ld.so.cache``, ``/etc/localtime``, ``/dev/{null,zero,full,random,urandom}``, a one-line
   ``/etc/passwd`` and ``/etc/group``, a fresh ``/proc`` (other processes, including the trainer and its
   ``environ``, are invisible) and the **sandbox directory, a tmpfs of its own** (64 MiB; writable only
   with ``allow_file_writes``).  The host's filesystem is detached: the project tree, the venv, the
   training data (expected outputs included), caches, ``/root``, ``/home``, ``/etc`` and ``/tmp`` cannot
   be read.  It then drops every capability (bounding, ambient, effective, permitted), sets
   ``PR_SET_NO_NEW_PRIVS`` and makes itself non-dumpable.  The network namespace has only a loopback
   device, and it is down.
2. runs **each test case in a fresh fork** of itself, with stdin/stdout/stderr on memfds and every other
   descriptor closed.  Before model code runs, each case process sets ``setrlimit`` (CPU = the remaining
   budget, address space = ``memory_mb``, file size = the case's output cap, open files, stack, no core
   files, ``RLIMIT_NPROC`` inside the user namespace).  It then installs a **seccomp filter**: no
   ``socket(2)``; no ``fork``, ``vfork`` or non-thread ``clone``; no ``execve``; no write-opens, file
   creation, rename, unlink or chmod; no ptrace, ``process_vm_*`` or ``pidfd_*``; no mount, unshare,
   setns, bpf, io_uring, keyctl or perf; ``kill`` only of itself; other-architecture and x32 syscalls
   refused.  Last comes a Python **audit hook** (the same policy, best effort: sockets, ctypes, process
   creation, write-opens, other processes' ``/proc`` entries) and a thread cap (``max_processes``).
3. enforces the per-program wall-clock budget: a case that runs past it is SIGKILLed and the program
   scores 0.  After each case it kills everything else left in the PID namespace.  It reports each
   case's stdout back to the parent, bounded: a case may print at most
   ``min(max_output_bytes, 4 * len(expected) + 4096)`` bytes, enforced by ``RLIMIT_FSIZE`` on the stdout
   memfd.  The parent does the comparison, so expected outputs never enter the sandbox and a program
   cannot read them from the harness's memory.

The parent never waits unboundedly.  It writes the payload and reads the (bounded) reply with a
``selectors`` loop against a hard deadline of ``timeout_s + grace_s``.  After the harness exits (or at the
deadline) it SIGKILLs the whole process group and reaps the leader.  Killing the group kills the
namespace's init, and the kernel then kills every process left in the PID namespace, including ones that
called ``setsid()``.  No ``preexec_fn`` is used (it is not safe in a multi-threaded trainer).  Instead the
harness applies every limit in the child before any model code runs, and ``RLIMIT_NPROC`` can only count
the sandbox's own processes *after* the harness has entered the user namespace.

Nothing is left behind by a killed trainer: with a private root the sandbox directory exists only in the
sandbox's mount namespace and vanishes with it.  Elsewhere (the fallback) the harness creates it on disk
as ``<tmp>/brorl-sbx-<pid>-<start time>/<n>``; the parent removes it after each run, and the first run in
any later process removes the folders of processes that no longer exist (a SIGKILLed trainer's).  When a
trainer dies, its harnesses stop at their own deadline (``timeout_s``; their reply pipe is then broken)
and take their PID namespaces with them (tested with a SIGKILLed trainer).

What is real where
------------------
``SandboxResult.isolation`` (and :func:`isolation_report`) says which layers were actually in force, and
``SandboxResult.not_hidden`` says in plain words what the run could *not* hide or prevent (empty with
full isolation).  On the project's development machine (Linux 6.18, x86-64, running as **root**,
unprivileged user namespaces allowed) all of these are in force: network namespace, PID namespace,
private ``/proc``, private root (``private_root``: reads confined), read-only filesystem outside the
sandbox directory, seccomp, dropped capabilities, rlimits and the audit hook.  The exception is the
kernel process limit:

* **``RLIMIT_NPROC`` is never enforced for uid 0**, not even inside a user namespace (the kernel exempts
  ``INIT_USER``).  So for a root trainer, process creation is refused outright (seccomp + audit hook),
  ``allow_fork=True`` is ignored (``isolation["process_limit"]`` / ``["fork_allowed"]`` are False), and
  threads are capped only by the audit-hook-level thread cap and ``RLIMIT_AS`` (best effort).  For a
  non-root trainer with user namespaces, ``RLIMIT_NPROC`` counts exactly this sandbox's processes and
  threads, and ``allow_fork=True`` works (tested by running the system Python as ``nobody``; the private
  root then also holds the interpreter under the name it was started with, so model code can exec it).

**The fallback is refused by default.**  Where user or mount namespaces are refused (Docker's default
seccomp profile, Ubuntu's AppArmor userns restriction, ...), or ``namespaces=False``, the sandbox cannot
confine reads: model code could read every file the trainer's user can read, e.g. the paper profile's
``results/data/rl/code/*.jsonl`` with every problem's expected outputs, and print the right one for its
stdin (a reward hack; tested).  So the harness then runs no model code and :func:`run_program`,
:func:`code_reward` and :func:`code_rewards` raise :class:`SandboxUnavailable`, unless
``SandboxConfig.allow_unconfined`` is set (its default is ``BRORL_SANDBOX_ALLOW_UNCONFINED=1`` in the
environment; the pipeline sets that from the config key ``sandbox.allow_unconfined``, false in
``config/paper.yaml``).  Allowed, the fallback is **seccomp + rlimits + audit hook** in the caller's
namespaces, and each result's ``not_hidden`` lists what it cannot hide:

* reads: **not confined** (the whole filesystem as the trainer's user sees it);
* network: still blocked (seccomp refuses ``socket(2)``), but there is no network namespace;
* writes outside the sandbox dir: still blocked by default (seccomp refuses every write-open, create,
  rename, unlink, ...; that also forbids writes *inside* the sandbox dir).  With
  ``allow_file_writes=True`` there is then **no write confinement** beyond file permissions;
* other processes are **visible** in ``/proc``.  A non-root program running as the same user as a
  non-root trainer can *read* the trainer's ``/proc/<pid>/environ``.  The audit hook refuses that from
  Python, but it is only best effort, since seccomp cannot filter by path.  Root trainers are
  protected by the kernel (the capability-subset check of ``ptrace_may_access`` once capabilities are
  dropped);
* processes: never allowed (no PID namespace to kill them all).

Without seccomp as well (other architectures than x86-64/aarch64, or filters forbidden), only the audit
hook and rlimits remain: Python-level blocking, which a determined program could bypass.  A program's
only output channel is the reward: its stdout is compared and discarded, and ``keep_output`` keeps it
for debugging only.

Throughput
----------
Measured on the development machine (2 cores shared with other jobs, full isolation), for a trivial
correct program with 10 stdin/stdout test cases (``benchmarks/bench_sandbox.py``): about 22 programs/s
sequentially and 28 programs/s with :func:`code_rewards` on 2 workers (before the private root).  That is
about 40 ms of CPU per program: ~20 ms of interpreter start-up and harness set-up, plus ~1.5-2 ms per test
case.  The private root adds about 2 ms of CPU per program (its mounts: 2.4 ms median in isolation):
measured A/B on 2026-12-04 at load average 10-13, 54 ms against 52 ms of CPU per program, and the same
throughput within the noise (5.6 against 6.1 programs/s sequentially, 9.4 against 8.9 on 2 workers;
medians of 5 interleaved runs of 40 programs).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import json
import logging
import marshal
import math
import os
import re
import selectors
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from brorl.rewards import _column
from brorl.sandbox_cases import TestSpec, _call_match, extract_code, outputs_match, parse_tests

__all__ = [
    "SandboxConfig",
    "SandboxResult",
    "SandboxUnavailable",
    "TestSpec",
    "code_reward",
    "code_rewards",
    "trl_code_reward",
    "make_trl_code_reward",
    "run_program",
    "extract_code",
    "parse_tests",
    "isolation_report",
    "outputs_match",
    "DEFAULT_TIMEOUT",
    "DEFAULT_MEMORY_MB",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "HARNESS_MARKER",
    "default_workers",
]

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 5.0
"""Wall-clock budget in seconds for all test cases of one program (the paper's 5 s)."""
DEFAULT_MEMORY_MB = 512
"""Address-space limit (``RLIMIT_AS``) of each test-case process, in MiB."""
DEFAULT_MAX_OUTPUT_BYTES = 1 << 20
"""Upper bound on the stdout one test case may produce (the effective cap is usually much smaller)."""
ALLOW_UNCONFINED_ENV = "BRORL_SANDBOX_ALLOW_UNCONFINED"
"""Set to ``1`` to let :class:`SandboxConfig` default to ``allow_unconfined=True`` (the pipeline sets it from
the config key ``sandbox.allow_unconfined``)."""
HARNESS_MARKER = "brorl-sandbox-harness"
"""An argument on the command line of every sandbox process (handy for finding strays with ``ps``)."""


# --------------------------------------------------------------------------------------------------
# Configuration and results
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SandboxConfig:
    """Limits and policy of one sandbox run (all test cases of one program).

    ``timeout_s`` is the total wall-clock budget for all test cases (running past it scores 0);
    ``grace_s`` is extra time the parent allows for interpreter start-up before it kills the harness.
    ``max_processes`` is ``RLIMIT_NPROC`` inside the sandbox's user namespace (threads count);
    ``allow_fork`` permits ``fork``/``execve`` (off: seccomp and the audit hook refuse process creation);
    process creation is only ever allowed inside a PID namespace (where the harness can kill every
    descendant) and for a non-root user (the kernel never applies ``RLIMIT_NPROC`` to uid 0) --
    elsewhere ``allow_fork`` is ignored (reported as ``isolation["fork_allowed"]``);
    ``allow_file_writes`` permits writes (only inside the sandbox directory when the read-only mount
    namespace is in force, see the module docstring).  ``namespaces`` / ``seccomp`` / ``audit_hook``
    switch those layers off (for testing the others).  ``allow_unconfined`` lets model code run where reads
    cannot be confined (no private root; default: ``BRORL_SANDBOX_ALLOW_UNCONFINED=1`` in the environment);
    off, such a run raises :class:`SandboxUnavailable` before any model code runs.  ``keep_output`` keeps stdout / stderr in the
    result (debugging only: a program's output may contain whatever it could read).
    """

    timeout_s: float = DEFAULT_TIMEOUT
    memory_mb: int = DEFAULT_MEMORY_MB
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    max_processes: int = 64
    max_open_files: int = 64
    allow_fork: bool = False
    allow_file_writes: bool = False
    namespaces: bool = True
    seccomp: bool = True
    audit_hook: bool = True
    python: str = sys.executable
    max_code_chars: int = 100_000
    max_input_bytes: int = 64 << 20
    grace_s: float = 2.0
    keep_output: bool = False
    allow_unconfined: bool = field(default_factory=lambda: os.environ.get(ALLOW_UNCONFINED_ENV, "") == "1")

    def __post_init__(self) -> None:
        for name in ("timeout_s", "grace_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"SandboxConfig.{name} must be a positive number, got {value!r}")
        for name in ("memory_mb", "max_output_bytes", "max_processes", "max_open_files", "max_code_chars",
                     "max_input_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"SandboxConfig.{name} must be a positive integer, got {value!r}")
        if self.max_open_files < 16:
            raise ValueError("SandboxConfig.max_open_files must be at least 16 (Python needs a few)")
        if not self.python:
            raise ValueError("SandboxConfig.python must name a Python 3 interpreter")


@dataclass(frozen=True)
class SandboxResult:
    """Outcome of running one program on its test cases.

    ``status`` is the program-level outcome: ``"ok"`` (all cases ran; ``score`` = passed / total),
    ``"compile_error"``, ``"timeout"`` (score 0 by the paper's rule), ``"no_code"``, ``"bad_tests"``,
    ``"sandbox_error"`` (the harness failed -- logged, score 0).  ``case_status`` has one entry per test
    case: ``"pass"``, ``"wrong_answer"``, ``"runtime_error"``, ``"output_limit"``, ``"timeout"``,
    ``"compile_error"``, ``"setup_error"`` or ``"not_run"``.  ``isolation`` maps each isolation layer to
    whether it was in force (keys: see the module docstring; ``process_limit`` means the kernel's
    ``RLIMIT_NPROC`` really bounds the sandbox, ``fork_allowed`` whether model code may create
    processes).  ``harness_pid`` is the process group / session id the run used.
    """

    score: float
    status: str
    passed: int = 0
    total: int = 0
    case_status: tuple[str, ...] = ()
    case_times: tuple[float, ...] = ()
    elapsed_s: float = 0.0
    isolation: Mapping[str, bool] = field(default_factory=dict)
    harness_pid: int | None = None
    sandbox_dir: str | None = None
    outputs: tuple[str, ...] | None = None
    stderr: str = ""
    detail: str = ""
    not_hidden: tuple[str, ...] = ()


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot confine what model code reads on this machine and ``allow_unconfined`` is off: no
    model code was run."""


# --------------------------------------------------------------------------------------------------
# The harness (trusted code that runs inside the sandbox; see the module docstring)
# --------------------------------------------------------------------------------------------------

_HARNESS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_harness.py")
"""The harness's source file (read once, compiled, and sent to each sandbox)."""


# --------------------------------------------------------------------------------------------------
# Parent side: launching and supervising the harness
# --------------------------------------------------------------------------------------------------


def _case_caps(spec: TestSpec, max_output_bytes: int) -> list[int]:
    caps = []
    for expected in spec.outputs:
        if spec.mode == "stdio":
            size = len(expected.encode("utf-8", errors="replace"))
        else:
            try:
                size = len(json.dumps(expected))
            except (TypeError, ValueError, RecursionError):
                size = 0
        caps.append(max(1, min(max_output_bytes, 4 * size + 4096)))
    return caps


def _encode_inputs(spec: TestSpec) -> list[bytes] | None:
    try:
        if spec.mode == "stdio":
            return [s.encode("utf-8", errors="replace") for s in spec.inputs]
        return [json.dumps(list(args)).encode("utf-8") for args in spec.inputs]
    except (TypeError, ValueError, RecursionError):
        return None


def _rmtree(path: str) -> None:
    def fix(func, p, _exc):
        try:
            os.chmod(os.path.dirname(p), stat.S_IRWXU)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, stat.S_IRWXU)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=fix)
    if os.path.lexists(path):
        shutil.rmtree(path, ignore_errors=True)


_DIR_PATTERN = re.compile(r"brorl-sbx-(\d+)-(\d+)")
_dir_state = {"pid": 0, "count": 0}
_dir_lock = threading.Lock()


def _start_time(pid: int) -> str | None:
    """A process's start time (clock ticks since boot), or ``None`` if there is no such process: with the
    pid, it tells a live process from a later one that reused the pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return data[data.rindex(b")") + 2:].split()[19].decode()
    except (OSError, ValueError, IndexError):
        return None


def _remove_own(pid: int, path: str) -> None:
    if os.getpid() == pid and os.path.lexists(path):  # not from a forked child
        _rmtree(path)


def _sandbox_dir() -> str:
    """A fresh path for one run's sandbox directory: ``<tmp>/brorl-sbx-<pid>-<start time>/<n>``. With a private
    root the directory is a tmpfs inside the sandbox's mount namespace (nothing on disk, nothing to leak);
    elsewhere the harness creates it on disk and the parent removes it. The first call in a process removes
    the directories of processes that no longer exist (a SIGKILLed trainer's)."""
    with _dir_lock:
        if _dir_state["pid"] != os.getpid():  # first call in this process (or a forked child)
            _dir_state.update(pid=os.getpid(), count=0)
            tmp = tempfile.gettempdir()
            _dir_state["parent"] = os.path.join(tmp, f"brorl-sbx-{os.getpid()}-{_start_time(os.getpid())}")
            try:
                names = os.listdir(tmp)
            except OSError:
                names = []
            for name in names:
                m = _DIR_PATTERN.fullmatch(name)
                if m and _start_time(int(m[1])) != m[2]:
                    _rmtree(os.path.join(tmp, name))
            atexit.register(_remove_own, os.getpid(), _dir_state["parent"])
        _dir_state["count"] += 1
        return os.path.join(_dir_state["parent"], str(_dir_state["count"]))


def _supervise(proc: subprocess.Popen, payload: bytes, deadline: float, out_limit: int) -> tuple[bytes, bytes, bool]:
    """Feed ``payload`` to the harness and collect its reply until EOF or ``deadline``.

    Returns ``(stdout, stderr_tail, timed_out)``; never reads more than ``out_limit`` bytes of stdout
    (more is a protocol violation: the harness is killed) nor keeps more than 16 KiB of stderr.
    """
    out = bytearray()
    err = bytearray()
    timed_out = False
    view = memoryview(payload)
    sel = selectors.DefaultSelector()
    try:
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            os.set_blocking(stream.fileno(), False)
        sel.register(proc.stdin, selectors.EVENT_WRITE)
        sel.register(proc.stdout, selectors.EVENT_READ)
        sel.register(proc.stderr, selectors.EVENT_READ)
        open_readers = 2
        while open_readers:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in sel.select(remaining):
                fd = key.fileobj.fileno()
                if key.fileobj is proc.stdin:
                    try:
                        written = os.write(fd, view[: 1 << 16])
                    except BlockingIOError:
                        continue
                    except OSError:  # the harness died or closed stdin
                        written = len(view)
                    view = view[written:]
                    if not view:
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_readers -= 1
                elif key.fileobj is proc.stdout:
                    out += chunk
                    if len(out) > out_limit:
                        raise _ProtocolError("harness reply exceeds its bound")
                else:
                    err += chunk
                    if len(err) > 1 << 15:
                        del err[: len(err) - (1 << 14)]
    finally:
        sel.close()
    return bytes(out), bytes(err[-(1 << 14):]), timed_out


class _ProtocolError(Exception):
    pass


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    except OSError:
        pass
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process stuck in the kernel
        logger.error("sandbox harness %d did not die after SIGKILL", proc.pid)


_RECORD = struct.Struct("!4sIBIId")
_STATUS_NAMES = {0: "ok", 1: "runtime_error", 2: "timeout", 3: "output_limit", 4: "compile_error",
                 5: "setup_error"}


def _parse_reply(data: bytes, total: int):
    """Decode the harness's framed reply: per-case records, then the final record (isolation flags).

    A reply cut short (the harness was killed) yields the complete records before the cut and
    ``isolation=None``; a malformed one raises :class:`_ProtocolError`.
    """
    cases: list[tuple[str, float, bytes, bytes]] = []
    isolation: dict | None = None
    pos = 0
    size = _RECORD.size
    while pos + size <= len(data):
        magic, index, code, n, e, elapsed = _RECORD.unpack_from(data, pos)
        if magic != b"BSR1":
            raise _ProtocolError("bad record header")
        pos += size
        if pos + n + e > len(data):
            break
        out, err = data[pos:pos + n], data[pos + n:pos + n + e]
        pos += n + e
        if code == 255:
            flags = out.decode("ascii", errors="replace").split(",") if out else []
            isolation = {name: name in flags for name in _ISOLATION_KEYS}
            isolation.update((name, True) for name in flags if name)
            break
        if index != len(cases) or code not in _STATUS_NAMES or len(cases) >= total:
            raise _ProtocolError("unexpected case record")
        cases.append((_STATUS_NAMES[code], float(elapsed), out, err))
    return cases, isolation


_ISOLATION_KEYS = ("user_namespace", "network_namespace", "mount_namespace", "pid_namespace", "private_proc",
                   "private_root", "readonly_fs", "seccomp", "capabilities_dropped", "audit_hook", "rlimits", "process_limit",
                   "fork_allowed")

# The harness is sent over stdin: a pre-compiled code object (marshal) when the sandbox runs this very
# interpreter, else its source.  This bootstrap, passed with -c, reads and runs it.
_BOOTSTRAP = (
    "import marshal,os,sys\n"
    "def _r(n):\n"
    " b=b''\n"
    " while len(b)<n:\n"
    "  c=os.read(0,n-len(b))\n"
    "  if not c: os._exit(3)\n"
    "  b+=c\n"
    " return b\n"
    "_n=int.from_bytes(_r(8),'big')\n"
    "_h=_r(_n)\n"
    "exec(marshal.loads(_h) if sys.argv[1]=='m' else compile(_h,'<brorl-sandbox-harness>','exec'))\n"
)
_harness_blobs: dict[str, tuple[str, bytes]] = {}
_harness_lock = threading.Lock()


def _harness_blob(python: str) -> tuple[str, bytes]:
    """``("m", marshalled code)`` for this interpreter, ``("s", source)`` for any other."""
    with _harness_lock:
        if python not in _harness_blobs:
            try:
                same = os.path.realpath(python) == os.path.realpath(sys.executable)
            except OSError:
                same = False
            with open(_HARNESS_PATH, "rb") as f:
                source = f.read()
            if same:
                _harness_blobs[python] = ("m", marshal.dumps(compile(source, "<brorl-sandbox-harness>", "exec")))
            else:
                _harness_blobs[python] = ("s", source)
        return _harness_blobs[python]


def run_program(code: Any, tests: Any, config: SandboxConfig | None = None, **overrides: Any) -> SandboxResult:
    """Run the program ``code`` on ``tests`` in the sandbox and score it.

    ``tests`` is anything :func:`parse_tests` accepts (or a :class:`TestSpec`).  ``overrides`` replace
    fields of ``config`` (default :class:`SandboxConfig()`).  Never raises for bad code or bad tests
    and never blocks past ``timeout_s + grace_s`` (plus the time to kill and reap); invalid *config*
    values raise ``ValueError``.
    """
    config = replace(config or SandboxConfig(), **overrides) if overrides else (config or SandboxConfig())
    t_start = time.monotonic()
    if not isinstance(code, str) or not code.strip() or len(code) > config.max_code_chars:
        return SandboxResult(0.0, "no_code")
    spec = tests if isinstance(tests, TestSpec) else _safe_parse(tests)
    if spec is None:
        return SandboxResult(0.0, "bad_tests", detail="unusable test-case specification")
    inputs = _encode_inputs(spec)
    if inputs is None or sum(map(len, inputs)) > config.max_input_bytes:
        return SandboxResult(0.0, "bad_tests", total=len(spec), detail="inputs unencodable or too large")
    caps = _case_caps(spec, config.max_output_bytes)
    sbx = _sandbox_dir()
    header = {"sandbox_dir": sbx,
        "code": code, "mode": spec.mode, "fn_name": spec.fn_name, "lengths": [len(b) for b in inputs],
        "caps": caps, "timeout": float(config.timeout_s), "memory_mb": int(config.memory_mb),
        "max_processes": int(config.max_processes), "max_open_files": int(config.max_open_files),
        "allow_fork": bool(config.allow_fork), "allow_file_writes": bool(config.allow_file_writes),
        "namespaces": bool(config.namespaces), "seccomp": bool(config.seccomp),
        "audit_hook": bool(config.audit_hook),
        "keep_output": bool(config.keep_output), "allow_unconfined": bool(config.allow_unconfined),
    }
    try:
        header_bytes = marshal.dumps(header, 4)
    except (TypeError, ValueError):
        return SandboxResult(0.0, "bad_tests", total=len(spec), detail="unencodable")
    kind, harness = _harness_blob(config.python)
    payload = b"".join([struct.pack("!Q", len(harness)), harness, struct.pack("!Q", len(header_bytes)),
                        header_bytes, *inputs])
    del inputs
    out_limit = sum(caps) + (2 + len(caps)) * 4096 + len(caps) * 8192 + (1 << 16)

    proc = None
    try:
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": sbx, "TMPDIR": sbx, "LANG": "C.UTF-8",
               "LC_ALL": "C.UTF-8"}
        argv = [config.python, "-I", "-S", "-B", "-c", _BOOTSTRAP, kind, HARNESS_MARKER, sbx]
        deadline = time.monotonic() + config.timeout_s + config.grace_s
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd="/", env=env, start_new_session=True, close_fds=True)
        try:
            out, err, timed_out = _supervise(proc, payload, deadline, out_limit)
        finally:
            _kill_group(proc)
        del payload
        cases, isolation = _parse_reply(out, len(spec))
        result = _score(spec, cases, isolation, timed_out, err, config)
    except Exception as exc:  # the sandbox itself failed: log, score 0, never raise
        logger.warning("code sandbox failed: %s: %s", type(exc).__name__, exc)
        result = SandboxResult(0.0, "sandbox_error", total=len(spec), detail=f"{type(exc).__name__}: {exc}")
    finally:
        if os.path.lexists(sbx):  # only where the sandbox had no private root (its tmpfs dies with it)
            _rmtree(sbx)
    if result.isolation.get("refused"):
        raise SandboxUnavailable(
            "the code sandbox cannot confine what model code reads on this machine (no private root: "
            f"{_unhidden_text(result.isolation)}), so it ran nothing. Allow it knowingly with "
            f"SandboxConfig(allow_unconfined=True), {ALLOW_UNCONFINED_ENV}=1 or, in the pipeline, the config key "
            "sandbox.allow_unconfined: true.")
    return replace(result, elapsed_s=time.monotonic() - t_start,
                   harness_pid=proc.pid if proc is not None else None, sandbox_dir=sbx)


def _safe_parse(tests: Any) -> TestSpec | None:
    try:
        return parse_tests(tests)
    except Exception:
        return None


def _score(spec: TestSpec, cases, isolation, timed_out: bool, err: bytes, config: SandboxConfig) -> SandboxResult:
    total = len(spec)
    statuses: list[str] = []
    times: list[float] = []
    outputs: list[str] = []
    stderr_text = ""
    passed = 0
    for i, (status, elapsed, out, case_err) in enumerate(cases):
        text = out.decode("utf-8", errors="replace")
        if status == "ok":
            ok = outputs_match(text, spec.outputs[i]) if spec.mode == "stdio" else _call_match(text, spec.outputs[i])
            status = "pass" if ok else "wrong_answer"
            passed += ok
        statuses.append(status)
        times.append(elapsed)
        if config.keep_output:
            outputs.append(text)
            if case_err and not stderr_text:
                stderr_text = case_err.decode("utf-8", errors="replace")
    statuses += ["not_run"] * (total - len(statuses))
    common = dict(total=total, case_status=tuple(statuses), case_times=tuple(times),
                  isolation=dict(isolation or {}), outputs=tuple(outputs) if config.keep_output else None,
                  stderr=stderr_text, not_hidden=_not_hidden(isolation or {}, config))
    if "compile_error" in statuses:
        return SandboxResult(0.0, "compile_error", **common)
    if "timeout" in statuses or (timed_out and isolation is None):
        return SandboxResult(0.0, "timeout", **common)
    if isolation is None:
        tail = err.decode("utf-8", errors="replace")[-2000:]
        logger.warning("code sandbox harness exited without a complete reply; stderr tail: %s", tail)
        return SandboxResult(0.0, "sandbox_error", detail=tail, **common)
    if "setup_error" in statuses:
        logger.warning("code sandbox: a test-case process failed to set itself up")
    if not common["isolation"].get("refused"):
        _warn_degraded(common["not_hidden"])
    return SandboxResult(passed / total if total else 0.0, "ok", passed=passed, **common)


_warned: set[tuple[str, ...]] = set()


def _not_hidden(isolation: Mapping[str, bool], config: SandboxConfig | None = None) -> tuple[str, ...]:
    """What a run's isolation could not hide or prevent, in plain words (empty with full isolation)."""
    if not isolation:
        return ()
    out = []
    if not isolation.get("private_root"):
        out.append("reads: model code could read every file the trainer's user can read (the project tree, "
                   "its training data with expected outputs, caches, /root, /etc)")
    if not isolation.get("readonly_fs") and (not isolation.get("seccomp") or (config and config.allow_file_writes)):
        out.append("writes: model code could write wherever the trainer's user can")
    if not isolation.get("private_proc"):
        out.append("processes: the host's processes were visible in /proc")
    if not isolation.get("network_namespace"):
        out.append("network: no network namespace (" + ("seccomp refused socket(2)" if isolation.get("seccomp")
                                                        else "only the audit hook refused sockets") + ")")
    return tuple(out)


def _unhidden_text(isolation: Mapping[str, bool]) -> str:
    return "; ".join(_not_hidden(isolation))


def _warn_degraded(not_hidden: tuple[str, ...]) -> None:
    if not_hidden and not_hidden not in _warned:
        _warned.add(not_hidden)
        logger.warning("code sandbox without full isolation: %s (see brorl.sandbox's docstring)", "; ".join(not_hidden))


# --------------------------------------------------------------------------------------------------
# Public reward functions
# --------------------------------------------------------------------------------------------------


def code_reward(completion: Any, tests: Any, *, timeout_s: float | None = None, memory_mb: int | None = None,
                max_output_bytes: int | None = None, config: SandboxConfig | None = None) -> float:
    """The paper's code reward for one completion: fraction of test cases passed, in [0, 1].

    0.0 when no program can be extracted (:func:`extract_code`), on a syntax error, when the program
    runs past ``timeout_s`` (default 5 s, all cases together), and when the sandbox fails.
    ``memory_mb`` (default 512) limits each test-case process's address space; ``max_output_bytes``
    (default 1 MiB) bounds what one case may print.  Arguments left as ``None`` come from ``config``
    (default :class:`SandboxConfig()`).  Never raises for bad completions or tests; returns within
    ``timeout_s`` plus start-up slack.
    """
    config = config or SandboxConfig()
    overrides = {k: v for k, v in (("timeout_s", timeout_s), ("memory_mb", memory_mb),
                                   ("max_output_bytes", max_output_bytes)) if v is not None}
    if overrides:
        config = replace(config, **overrides)
    return _reward_one(completion, tests, config)


def _reward_one(completion: Any, tests: Any, config: SandboxConfig) -> float:
    try:
        code = extract_code(completion, max_chars=config.max_code_chars)
        if code is None:
            return 0.0
        score = run_program(code, tests, config).score
        return score if math.isfinite(score) else 0.0
    except SandboxUnavailable:
        raise
    except Exception as exc:  # pragma: no cover - run_program already catches everything
        logger.warning("code_reward failed: %s", exc)
        return 0.0


def default_workers() -> int:
    """Sandboxes run in parallel by :func:`code_rewards`: ``BRORL_CODE_WORKERS`` or the CPU count."""
    try:
        value = int(os.environ.get("BRORL_CODE_WORKERS", "0"))
    except ValueError:
        value = 0
    return value if value > 0 else max(1, os.cpu_count() or 1)


def code_rewards(completions: Sequence[Any], tests: Sequence[Any], *, config: SandboxConfig | None = None,
                 max_workers: int | None = None) -> list[float]:
    """:func:`code_reward` for a batch: identical (program, tests) pairs run once, the rest in parallel
    (``max_workers`` sandboxes at a time, default :func:`default_workers`)."""
    completions, tests = list(completions), list(tests)
    if len(completions) != len(tests):
        raise ValueError(f"{len(completions)} completions but {len(tests)} test specifications")
    config = config or SandboxConfig()
    jobs: dict[tuple, list[int]] = {}
    keyed: dict[tuple, tuple[str, Any]] = {}
    scores = [0.0] * len(completions)
    for i, (completion, spec) in enumerate(zip(completions, tests)):
        code = extract_code(completion, max_chars=config.max_code_chars)
        if code is None:
            continue
        key = (code, spec if isinstance(spec, str) else id(spec))
        jobs.setdefault(key, []).append(i)
        keyed[key] = (code, spec)
    if not jobs:
        return scores
    workers = max(1, min(len(jobs), max_workers or default_workers()))

    def one(key: tuple) -> float:
        code, spec = keyed[key]
        try:
            return run_program(code, spec, config).score
        except SandboxUnavailable:
            raise
        except Exception as exc:  # pragma: no cover
            logger.warning("code sandbox failed: %s", exc)
            return 0.0

    if workers == 1:
        results = {key: one(key) for key in jobs}
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="brorl-sbx") as pool:
            results = dict(zip(jobs, pool.map(one, list(jobs))))
    for key, indices in jobs.items():
        for i in indices:
            scores[i] = results[key]
    return scores


_TESTS_KEYS = ("tests", "input_output", "test_cases", "ground_truth", "reward_model", "verification_info")


def trl_code_reward(prompts=None, completions=None, **kwargs) -> list[float]:
    """TRL ``GRPOTrainer`` reward function: the sandboxed code reward of each completion.

    The test cases come from the first of the dataset columns "tests", "input_output" (APPS's JSON
    string), "test_cases", "ground_truth", "reward_model" (PRIME / veRL: ``{"ground_truth": ...}``),
    "verification_info" that is present (``ValueError`` if none is -- training on all-zero rewards
    silently would be worse).  Each entry may be a dict or a JSON string.  Returns one float per
    completion; programs run in parallel (:func:`code_rewards`).  A module-level function, so it pickles.
    """
    completions = list(completions if completions is not None else [])
    tests = _column(kwargs, _TESTS_KEYS, len(completions), "trl_code_reward")
    return code_rewards(completions, tests)


def make_trl_code_reward(config: SandboxConfig | None = None, tests_key: str | None = None,
                         max_workers: int | None = None) -> Callable[..., list[float]]:
    """Like :func:`trl_code_reward`, but with a :class:`SandboxConfig`, a fixed tests column and/or a
    fixed number of parallel sandboxes."""
    keys = (tests_key,) if tests_key else _TESTS_KEYS

    def trl_code_reward(prompts=None, completions=None, **kwargs) -> list[float]:
        """TRL reward function: fraction of test cases each completion's program passes."""
        completions = list(completions if completions is not None else [])
        tests = _column(kwargs, keys, len(completions), "trl_code_reward")
        return code_rewards(completions, tests, config=config, max_workers=max_workers)

    return trl_code_reward


_isolation_cache: dict[tuple, Mapping[str, bool]] = {}
_isolation_lock = threading.Lock()


def isolation_report(config: SandboxConfig | None = None) -> Mapping[str, bool]:
    """Which isolation layers a sandbox run actually gets on this machine (runs one trivial program
    once per config and caches the answer)."""
    config = config or SandboxConfig()
    key = (config.namespaces, config.seccomp, config.audit_hook, config.allow_fork, config.allow_file_writes,
           config.python, config.allow_unconfined)
    with _isolation_lock:
        if key not in _isolation_cache:
            result = run_program("print(input())", {"inputs": ["1\n"], "outputs": ["1\n"]},
                                 replace(config, allow_unconfined=True))  # a trusted program: report, not refuse
            _isolation_cache[key] = dict(result.isolation)
        return dict(_isolation_cache[key])
