"""Tests for brorl.sandbox: the paper's code reward (fraction of tests passed, 0 on a syntax error or a
timeout) and the sandbox around it -- time, memory, process, output, network, filesystem and
environment containment, clean-up, and robustness to garbage.

Hostile snippets are run with short time limits (``FAST``) so the file stays well under a minute.
Containment tests observe the effect from *outside* the sandbox (a listener that must not be
connected to, a file that must not appear, a process that must survive, ``/proc`` scans for strays),
so each of them fails if the corresponding layer is missing.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from brorl import sandbox as S
from brorl.sandbox import SandboxConfig

FAST = SandboxConfig(timeout_s=1.0, grace_s=1.5)  # for programs the sandbox must cut: a short test
# Limits for programs that must pass: far above their run time (milliseconds) however busy the machine is.
PASS = {"timeout_s": 30.0, "grace_s": 30.0}

ADD_TESTS = {"inputs": [f"{i} {i + 1}\n" for i in range(4)], "outputs": [f"{2 * i + 1}\n" for i in range(4)]}
ADD_OK = "a, b = map(int, input().split())\nprint(a + b)\n"
ONE_CASE = {"inputs": ["\n"], "outputs": ["ok\n"]}


def fenced(code: str, think: bool = True) -> str:
    body = f"```python\n{textwrap.dedent(code)}```\n"
    return ("<think>Let me write it.</think>\nHere is my solution:\n" if think else "") + body


def run(code: str, tests=ONE_CASE, config: SandboxConfig = FAST, **kw) -> S.SandboxResult:
    return S.run_program(textwrap.dedent(code), tests, config, **kw)


def _cut_bound(config: SandboxConfig) -> float:
    """The longest a program the sandbox must cut may take: the parent's hard deadline (timeout_s + grace_s)
    plus the time to kill and reap, counted as two trivial sandboxed runs measured now, so that the bound
    scales with the machine's load instead of failing on a busy one."""
    t = time.monotonic()
    run("print('ok')\n")
    return config.timeout_s + config.grace_s + 2 * (time.monotonic() - t)


# ------------------------------------------------------------------------------------------------
# process-table helpers (observing containment from outside)
# ------------------------------------------------------------------------------------------------


def _stat_fields(pid: str) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(")") + 2:].split()  # state ppid pgrp session ...


_CHILDREN_BEFORE: set[int] = set()


def _my_children() -> set[int]:
    out = set()
    for pid in os.listdir("/proc"):
        fields = _stat_fields(pid) if pid.isdigit() else None
        if fields is not None and int(fields[1]) == os.getpid():
            out.add(int(pid))
    return out


@pytest.fixture(autouse=True)
def _children_before_the_test():
    """Children this process had before the test (e.g. another test module's reward-pool workers) are not
    the sandbox's."""
    _CHILDREN_BEFORE.clear()
    _CHILDREN_BEFORE.update(_my_children())
    yield


def leftovers(result: S.SandboxResult, token: str | None = None) -> list[int]:
    """Processes that belong to a finished sandbox run: in its process group or session, with its
    directory as cwd or on the command line, or carrying ``token``; plus any child of this process that
    was not there before the test."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        fields = _stat_fields(pid)
        if fields is None:
            continue
        ppid, pgrp, sid = int(fields[1]), int(fields[2]), int(fields[3])
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            cmd = b""
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        mine = (ppid == os.getpid() and int(pid) not in _CHILDREN_BEFORE) or result.harness_pid in (pgrp, sid)
        if result.sandbox_dir and (result.sandbox_dir.encode() in cmd or cwd.startswith(result.sandbox_dir)):
            mine = True
        if token and token.encode() in cmd:
            mine = True
        if mine:
            found.append(int(pid))
    return found


def assert_no_leftovers(result: S.SandboxResult, token: str | None = None) -> None:
    deadline = time.monotonic() + 2.0  # SIGKILLed processes take a moment to leave the table
    while True:
        left = leftovers(result, token)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert left == [], f"stray sandbox processes: {left}"
    assert result.sandbox_dir and not os.path.exists(result.sandbox_dir), "sandbox directory not removed"


@pytest.fixture(scope="module")
def iso():
    return S.isolation_report(FAST)


def _userns_possible() -> bool:
    try:
        return subprocess.run(["unshare", "--user", "--map-root-user", "--net", "true"],
                              capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# ------------------------------------------------------------------------------------------------
# the reward rule
# ------------------------------------------------------------------------------------------------


def test_correct_program_scores_one():
    assert S.code_reward(fenced(ADD_OK), ADD_TESTS) == 1.0
    result = run(ADD_OK, ADD_TESTS)
    assert (result.status, result.passed, result.total) == ("ok", 4, 4)
    assert result.case_status == ("pass",) * 4


def test_partly_correct_program_scores_fraction():
    code = "a, b = map(int, input().split())\nprint(a + b if a % 2 == 0 else -1)\n"
    assert S.code_reward(fenced(code), ADD_TESTS) == 0.5
    three_quarters = "a, b = map(int, input().split())\nprint(0 if a == 3 else a + b)\n"
    assert S.code_reward(fenced(three_quarters), ADD_TESTS) == 0.75


def test_runtime_error_on_some_cases_is_partial_credit():
    code = "a, b = map(int, input().split())\nassert a != 1\nprint(a + b)\n"
    result = run(code, ADD_TESTS)
    assert result.score == 0.75
    assert result.case_status[1] == "runtime_error"


def test_syntax_error_scores_zero():
    result = run("def f(:\n    return 1\nprint(1)\n", ADD_TESTS)
    assert (result.score, result.status) == (0.0, "compile_error")
    assert S.code_reward(fenced("print('unterminated)\n"), ADD_TESTS) == 0.0
    assert run("print(1)\x00\n", ADD_TESTS).status == "compile_error"


def test_infinite_loop_scores_zero_within_timeout():
    t0 = time.monotonic()
    result = run("while True:\n    pass\n", ADD_TESTS)
    elapsed = time.monotonic() - t0
    assert (result.score, result.status) == (0.0, "timeout")
    assert elapsed < _cut_bound(FAST)
    assert_no_leftovers(result)


def test_timeout_is_for_all_cases_together_and_voids_partial_credit():
    # each case takes 0.4 s: three fit in 1 s on their own, four together do not
    code = "import time\na, b = map(int, input().split())\ntime.sleep(0.4)\nprint(a + b)\n"
    t0 = time.monotonic()
    result = run(code, ADD_TESTS)
    assert (result.score, result.status) == (0.0, "timeout")
    assert "pass" in result.case_status and "timeout" in result.case_status
    assert time.monotonic() - t0 < _cut_bound(FAST)
    assert run(code, ADD_TESTS, **PASS).score == 1.0


def test_correct_output_then_hang_is_timeout():
    result = run("import sys\nprint('ok')\nsys.stdout.flush()\nwhile True:\n    pass\n")
    assert (result.score, result.status) == (0.0, "timeout")


def test_output_comparison_rules():
    assert S.outputs_match("1 2\n3\n", "1 2\n3")
    assert S.outputs_match("1 2   \r\n3\n\n", "1 2\n3\n")
    assert S.outputs_match("1  2\n3", "1 2 3")
    assert S.outputs_match("0.3333333", "0.33333333333")
    assert S.outputs_match("2.0", "2")
    assert not S.outputs_match("1000000", "1000001")  # integers are never compared approximately
    assert not S.outputs_match("YES", "yes")
    assert not S.outputs_match("1 2", "1 2 3")
    assert not S.outputs_match("nan", "0.0")


def test_call_based_tests_function_and_solution_class():
    tests = {"fn_name": "add", "inputs": [[1, 2], [3, 4], [5, 6]], "outputs": [[3], [7], [10]]}
    fn = "def add(a, b):\n    print('noise on stdout is ignored')\n    return a + b\n"
    assert run(fn, tests, **PASS).score == pytest.approx(2 / 3)
    cls = "class Solution:\n    def add(self, a, b):\n        return (a + b,)\n"  # tuple -> list via JSON
    tests_list = {"fn_name": "add", "inputs": [[1, 2]], "outputs": [[3]]}
    assert run(cls, tests_list, **PASS).score == 1.0
    assert run("def other():\n    pass\n", tests_list).score == 0.0
    assert S.code_reward(fenced(fn), json.dumps(tests)) == pytest.approx(2 / 3)


def test_common_competitive_programming_idioms():
    code = """
    import sys, threading
    from functools import lru_cache
    sys.setrecursionlimit(1 << 16)
    threading.stack_size(1 << 26)
    def main():
        data = sys.stdin.buffer.read().split()
        a, b = int(data[0]), int(data[1])
        @lru_cache(maxsize=None)
        def depth(n):
            return 0 if n == 0 else 1 + depth(n - 1)
        out = open(1, "w")
        out.write(str(a + b + depth(3000) - 3000) + "\\n")
        out.flush()
    threading.Thread(target=main).start()
    """
    result = run(code, ADD_TESTS, keep_output=True, **PASS)
    assert result.score == 1.0, (result.case_status, result.stderr)


def test_expected_outputs_never_enter_the_sandbox():
    token = "TOKEN-" + "7f3a91c2"
    code = """
    import gc
    want = "TOKEN" + "-7f3a91c2"
    seen = False
    for o in gc.get_objects():
        items = o.values() if isinstance(o, dict) else (o if isinstance(o, (list, tuple)) else ())
        for x in items:
            if isinstance(x, str) and want in x and x is not want:
                seen = True
    print(want if seen else "not found")
    """
    tests = {"inputs": ["\n"], "outputs": [token + "\n"]}
    result = run(code, tests, keep_output=True)
    assert result.outputs == ("not found\n",)
    assert result.score == 0.0
    # the same scan does find a string that is held in the sandbox, so the probe can fail
    probe = "kept = [input()]\n" + textwrap.dedent(code).replace('"TOKEN" + "-7f3a91c2"', '"INPUT" + "-55aa"')
    assert run(probe, {"inputs": ["INPUT-55aa\n"], "outputs": ["INPUT-55aa\n"]}, **PASS).score == 1.0


# ------------------------------------------------------------------------------------------------
# containment: processes, memory, output
# ------------------------------------------------------------------------------------------------


def test_fork_bomb_is_refused_and_leaves_nothing():
    t0 = time.monotonic()
    result = run("import os\nwhile True:\n    os.fork()\nprint('ok')\n")
    assert result.score == 0.0
    assert result.case_status == ("runtime_error",)
    assert time.monotonic() - t0 < _cut_bound(FAST)
    assert_no_leftovers(result)


def test_subprocess_spawning_is_refused_and_leaves_nothing():
    token = f"brorl-test-sleeper-{os.getpid()}-1"
    code = f"""
    import subprocess, sys
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)  # {token}"], start_new_session=True)
    print("ok")
    """
    result = run(code)
    assert result.score == 0.0
    assert_no_leftovers(result, token)
    with_os = run(f"import os\nos.system('sleep 60 # {token}')\nprint('ok')\n")
    assert with_os.score == 0.0
    assert_no_leftovers(with_os, token)


def _unprivileged_python(tmp_path) -> str:
    """An interpreter command that runs as a non-root user (the kernel never enforces RLIMIT_NPROC for
    root, so the sandbox only allows forking for non-root users).  As root: the system Python run as
    nobody through ``setpriv``."""
    if os.geteuid() != 0:
        return sys.executable
    system_python = "/usr/bin/python3"
    if not (shutil.which("setpriv") and os.access(system_python, os.X_OK)):
        pytest.skip("running as root without setpriv + /usr/bin/python3 to drop privileges")
    check = subprocess.run([system_python, "-c", "import sys; print(sys.version_info >= (3, 9))"],
                           capture_output=True, text=True)
    if check.stdout.strip() != "True":
        pytest.skip("the system Python is older than 3.9")
    wrapper = tmp_path / "python-as-nobody"
    wrapper.write_text(f'#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups {system_python} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def test_allow_fork_is_refused_where_process_count_is_not_enforced(iso):
    config = SandboxConfig(timeout_s=1.0, grace_s=1.5, allow_fork=True, max_processes=16)
    result = run("import os\nwhile True:\n    os.fork()\n", config=config)
    assert result.score == 0.0
    if os.geteuid() == 0 or not iso.get("pid_namespace"):
        assert not result.isolation["fork_allowed"]
        assert result.case_status == ("runtime_error",)
    assert_no_leftovers(result)


def test_forking_as_non_root_is_bounded_and_cleaned_up(tmp_path):
    python = _unprivileged_python(tmp_path)
    config = SandboxConfig(timeout_s=1.0, grace_s=1.5, allow_fork=True, max_processes=16, python=python)
    probe = run("print('ok')", config=config, **PASS)
    if not probe.isolation.get("pid_namespace"):
        pytest.skip("no PID namespace for an unprivileged user here: forking is never allowed")
    assert probe.score == 1.0 and probe.isolation["fork_allowed"] and probe.isolation["process_limit"]
    token = f"brorl-test-sleeper-{os.getpid()}-2"
    # detached descendants that outlive the program must die with the PID namespace
    spawn = f"""
    import os, subprocess, sys
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)  # {token}"], start_new_session=True)
    if os.fork() == 0:
        os.setsid()
        import time
        time.sleep(60)
    print("ok")
    """
    result = run(spawn, config=config, **PASS)
    assert result.score == 1.0, result.case_status
    assert_no_leftovers(result, token)
    # a fork bomb that swallows errors: RLIMIT_NPROC caps it, the timeout ends it, nothing survives
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    t0 = time.monotonic()
    result = run(bomb, config=config)
    assert (result.score, result.status) == (0.0, "timeout")
    assert time.monotonic() - t0 < _cut_bound(config)
    assert_no_leftovers(result)
    counted = "import os\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            import time\n" \
              "            time.sleep(30)\n        n += 1\nexcept OSError:\n    print(n)\n"
    capped = run(counted, {"inputs": ["\n"], "outputs": ["x\n"]}, config, keep_output=True)
    assert capped.outputs and 0 < int(capped.outputs[0]) < 16, capped.outputs
    assert_no_leftovers(capped)


def test_thread_bombs_are_capped():
    code = """
    import threading, time
    threading.stack_size(32768)
    n = 0
    try:
        while True:
            threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
            n += 1
    except RuntimeError:
        print(n)
    """
    result = run(code, {"inputs": ["\n"], "outputs": ["x\n"]}, keep_output=True)
    assert result.outputs and 0 < int(result.outputs[0]) <= FAST.max_processes, result.outputs
    assert_no_leftovers(result)


def test_huge_allocations_fail_inside_and_leave_the_parent_alone():
    before = resource.getrlimit(resource.RLIMIT_AS)
    # zero-filling 512 MiB in 10 MB chunks took 0.93 s at load 6 on 2 cores: a 1 s budget is load-dependent
    roomy = SandboxConfig(timeout_s=10.0, grace_s=1.5)
    for code in ("x = bytearray(10**10)\nprint('ok')\n",
                 "x = [0] * (10**9)\nprint('ok')\n",
                 "chunks = []\nwhile True:\n    chunks.append(bytearray(10**7))\n"):
        t0 = time.monotonic()
        result = run(code, config=roomy, keep_output=True)
        assert result.score == 0.0
        assert result.case_status == ("runtime_error",), (code, result.case_status)
        assert "MemoryError" in result.stderr
        assert time.monotonic() - t0 < _cut_bound(roomy)
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    block = bytearray(600 << 20)  # more than the sandbox's 512 MiB: this process is not limited
    assert len(block) == 600 << 20
    del block


def test_memory_limit_is_configurable():
    code = "x = bytearray(300 * 2**20)\nprint('ok')\n"
    assert run(code, memory_mb=512, **PASS).score == 1.0
    assert run(code, memory_mb=256).score == 0.0


def test_huge_output_is_bounded():
    t0 = time.monotonic()
    result = run("while True:\n    print('x' * 1000)\n", keep_output=True)
    assert result.score == 0.0
    assert result.case_status == ("output_limit",)
    assert time.monotonic() - t0 < _cut_bound(FAST)
    assert result.outputs == ("",)
    # the cap follows the expected output's size and max_output_bytes, and output just under it is fine
    big = {"inputs": ["\n"], "outputs": ["y" * 50_000 + "\n"]}
    assert run("print('y' * 50_000)", big, **PASS).score == 1.0
    assert run("print('y' * 50_000)", big, max_output_bytes=10_000).case_status == ("output_limit",)
    assert run("import os\nos.write(1, b'z' * (1 << 22))\n", big).case_status == ("output_limit",)


# ------------------------------------------------------------------------------------------------
# containment: network, filesystem, environment, other processes
# ------------------------------------------------------------------------------------------------

UNCONFINED = {"namespaces": False, "allow_unconfined": True}  # the fallback: reads not confined, knowingly allowed
MODES = {
    "full": {},
    "no-namespaces": UNCONFINED,
    "seccomp-only": {**UNCONFINED, "audit_hook": False},
    "hook-only": {**UNCONFINED, "seccomp": False},
}


def _listener():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.3)
    return server, server.getsockname()[1]


def _accepted(server) -> bool:
    try:
        conn, _ = server.accept()
    except (socket.timeout, OSError):
        return False
    conn.close()
    return True


@pytest.mark.parametrize("mode", sorted(MODES))
def test_network_connection_is_blocked(mode):
    server, port = _listener()
    try:
        python_socket = (f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                         "print('ok')\n")
        raw_socket = f"import _socket\ns = _socket.socket(2, 1)\ns.connect(('127.0.0.1', {port}))\nprint('ok')\n"
        ctypes_socket = f"""
        import ctypes, struct
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.socket(2, 1, 0)
        addr = struct.pack("=H", 2) + struct.pack("!H", {port}) + bytes([127, 0, 0, 1]) + bytes(8)
        rc = libc.connect(fd, addr, 16) if fd >= 0 else -1
        print("ok" if rc == 0 else "blocked")
        """
        for code in (python_socket, raw_socket, ctypes_socket):
            result = run(code, **MODES[mode])
            assert result.score == 0.0, (mode, code, result.case_status)
            assert not _accepted(server), f"{mode}: the sandbox reached the test's listener"
        if mode == "full":
            assert result.isolation["network_namespace"] or not _userns_possible()
    finally:
        server.close()


def test_seccomp_refuses_raw_syscalls_without_the_audit_hook(iso):
    if not iso.get("seccomp"):
        pytest.skip("seccomp is not available on this machine")
    probe = f"/tmp/brorl-seccomp-probe-{os.getpid()}"
    code = f"""
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    results = [libc.socket(2, 1, 0), libc.fork(), libc.open({probe!r}.encode(), os.O_WRONLY | os.O_CREAT, 0o600),
               libc.unlink(b"/tmp"), libc.ptrace(16, 1, 0, 0)]
    print("ok" if all(r < 0 for r in results) else "escaped %r" % results)
    """
    for mode in ("full", "no-namespaces"):
        result = run(code, keep_output=True, **{**MODES[mode], "audit_hook": False})
        assert result.outputs == ("ok\n",), (mode, result.outputs, result.stderr)
        assert result.isolation["seccomp"] and not result.isolation["audit_hook"]
    assert not os.path.exists(probe)
    # and the probe itself can fail: with seccomp off too, the same calls go through
    loose = run(code.replace("libc.fork(), ", ""), keep_output=True, **UNCONFINED, seccomp=False,
                audit_hook=False)
    assert loose.outputs and loose.outputs[0].startswith("escaped")
    os.unlink(probe)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_writes_outside_the_sandbox_are_blocked(mode, tmp_path):
    keep = tmp_path / "keep.txt"
    keep.write_text("precious")
    target = tmp_path / "pwned.txt"
    snippets = [
        f"open({str(target)!r}, 'w').write('x')\nprint('ok')\n",
        f"import os\nos.remove({str(keep)!r})\nprint('ok')\n",
        f"import os\nfd = os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT)\nos.write(fd, b'x')\nprint('ok')\n",
        f"import shutil\nshutil.rmtree({str(tmp_path)!r})\nprint('ok')\n",
    ]
    for code in snippets:
        result = run(code, **MODES[mode])
        assert result.score == 0.0, (mode, code)
    assert not target.exists()
    assert keep.read_text() == "precious"


PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# prints one line per path: "R <path>" if model code could read (or list) it, "- <path>" if not
READ_PROBE = """
import os, sys
for path in sys.stdin.read().split("\\n"):
    if not path:
        continue
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, "rb").read(1)
        print("R", path)
    except OSError:
        print("-", path)
"""


def _planted_answers(tmp_path) -> tuple[str, dict]:
    """A training file like results/data/rl/code/*.jsonl outside the sandbox: a problem whose expected output
    is a secret no program could compute."""
    secret = f"secret-{os.getpid()}-{time.monotonic_ns()}"
    tests = {"inputs": ["17 25\n"], "outputs": [secret + "\n"]}
    folder = tmp_path / "results" / "data" / "rl" / "code"
    folder.mkdir(parents=True)
    (folder / "train.jsonl").write_text(json.dumps({"id": "p1", "tests": json.dumps(tests)}) + "\n")
    return str(folder / "train.jsonl"), tests


def test_reads_outside_the_sandbox_fail(tmp_path, iso):
    if not iso.get("private_root"):
        pytest.skip("no private root here (no user/mount namespaces): reads are not confined, and each result "
                    "says so (test_fallback_results_say_what_they_cannot_hide)")
    answers, _ = _planted_answers(tmp_path)
    import pytest as pytest_module  # a file of the trainer's environment (site-packages)

    secrets = [answers, str(tmp_path), PROJECT, os.path.join(PROJECT, "README.md"), S.__file__, sys.prefix,
               pytest_module.__file__, os.path.expanduser("~/.cache"), "/root/.bashrc", "/etc/shadow",
               "/etc/hostname", "/etc/hosts", "/work", "/home"]
    secrets = [p for p in secrets if os.path.exists(p)]
    stdlib = os.path.dirname(os.__file__)
    needed = [stdlib, os.path.join(stdlib, "json", "__init__.py"), "/dev/null", "/etc/passwd"]
    result = run(READ_PROBE, {"inputs": ["\n".join(secrets + needed) + "\n"], "outputs": [""]}, keep_output=True)
    lines = dict(line.split(" ", 1)[::-1] for line in result.outputs[0].splitlines())
    assert [p for p in secrets if lines.get(p) != "-"] == [], result.outputs[0]
    assert [p for p in needed if lines.get(p) != "R"] == [], result.outputs[0]
    assert result.isolation["private_root"] and result.not_hidden == ()
    # /etc/passwd holds the sandbox's own user only, /root only the way to the interpreter (if it lives there)
    listing = run("import os\nprint(open('/etc/passwd').read())\nprint(sorted(os.listdir('/root')) "
                  "if os.path.isdir('/root') else [])\nprint(sorted(os.listdir('/')))\n", keep_output=True)
    passwd, root_entries, top = listing.outputs[0].split("\n\n")[0], *listing.outputs[0].split("\n")[-3:-1]
    assert passwd.count("\n") == 0 and passwd.startswith("sandbox:x:"), passwd
    assert all(("/root/" + name) in (sys.base_prefix + "/") for name in json.loads(root_entries.replace("'", '"'))), \
        root_entries
    assert "work" not in top and "home" not in top, top
    # installed packages of the interpreter stay hidden even with sys.path extended by model code
    import site

    ver = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    dirs = site.getsitepackages() + [os.path.join(sys.base_prefix, "lib", ver, "site-packages")]
    imported = run(f"import sys\nsys.path[:0] = {dirs!r}\nimport pytest\nprint('imported')\n", keep_output=True)
    assert imported.case_status == ("runtime_error",) and "ModuleNotFoundError" in imported.stderr


# walks the filesystem for training files with expected outputs and prints the one for its stdin (issue 20);
# /usr is skipped only to keep the walk well inside the time limit on a loaded machine
REWARD_HACK = """
import json, os, sys
wanted = sys.stdin.read()
def answers(path):
    with open(path) as f:
        for line in f:
            tests = json.loads(json.loads(line)["tests"])
            for given, expected in zip(tests["inputs"], tests["outputs"]):
                if given == wanted:
                    return expected
for top in [HINT, "/tmp", "/work", "/root", "/home", "/"]:
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if os.path.join(folder, d) not in ("/proc", "/sys", "/dev", "/usr")]
        for name in files:
            if name.endswith(".jsonl"):
                try:
                    found = answers(os.path.join(folder, name))
                except Exception:
                    continue
                if found is not None:
                    print(found, end="")
                    sys.exit(0)
print("not found")
"""


def test_reward_hack_reading_the_training_file_scores_zero(tmp_path, iso):
    answers, tests = _planted_answers(tmp_path)
    hack = REWARD_HACK.replace("HINT", repr(os.path.dirname(answers)))
    honest = "a, b = map(int, input().split())\nprint(a + b)\n"
    roomy = SandboxConfig(timeout_s=10.0, grace_s=2.0)
    # the hack is real: where reads are not confined (knowingly allowed), it finds the answers and scores 1
    assert run(hack, tests, roomy, **UNCONFINED).score == 1.0
    if not iso.get("private_root"):
        pytest.skip("no private root here: this reward hack would work (the fallback is refused by default)")
    result = run(hack, tests, roomy, keep_output=True)
    assert result.score == 0.0 and result.outputs == ("not found\n",), (result.outputs, result.stderr)
    assert S.code_reward(fenced(hack), tests, config=roomy) == 0.0
    assert S.code_reward(fenced(honest), {"inputs": ["17 25\n"], "outputs": ["42\n"]}) == 1.0


def test_fallback_is_refused_unless_allowed(tmp_path, monkeypatch):
    target = tmp_path / "ran.txt"
    wild = {"namespaces": False, "seccomp": False, "audit_hook": False}  # nothing stops this program's write
    code = f"open({str(target)!r}, 'w').write('x')\nprint('ok')\n"
    monkeypatch.delenv(S.ALLOW_UNCONFINED_ENV, raising=False)
    with pytest.raises(S.SandboxUnavailable, match="allow_unconfined"):
        run(code, **wild)
    with pytest.raises(S.SandboxUnavailable):  # not swallowed into a 0.0 reward
        S.code_rewards([fenced(code)] * 2, [ONE_CASE] * 2, config=SandboxConfig(**wild))
    assert not target.exists(), "model code ran although the sandbox refused"
    monkeypatch.setenv(S.ALLOW_UNCONFINED_ENV, "1")
    assert SandboxConfig().allow_unconfined  # the default follows the environment (the pipeline's switch)
    assert run(code, config=SandboxConfig(**PASS), **wild).score == 1.0 and target.exists()


def test_paper_profile_refuses_the_fallback_in_training_and_evaluation(monkeypatch):
    """The paper profile's switch is off, and the code reward's two callers (training reward, lm-eval scorer)
    stop with the refusal instead of scoring zeros, on a machine without namespaces (simulated: the default
    config with namespaces off)."""
    import functools

    import yaml

    from brorl.evaluation.lm_eval_tasks import kind_utils
    from brorl.data import training as paper_data

    with open(os.path.join(PROJECT, "config", "paper.yaml")) as f:
        assert yaml.safe_load(f)["sandbox"] == {"allow_unconfined": False}
    monkeypatch.delenv(S.ALLOW_UNCONFINED_ENV, raising=False)
    monkeypatch.setattr(S, "SandboxConfig", functools.partial(SandboxConfig, namespaces=False))
    doc = {"tests": json.dumps(ADD_TESTS)}
    with pytest.raises(S.SandboxUnavailable):
        kind_utils.process_code(doc, [[fenced(ADD_OK)]])
    with pytest.raises(S.SandboxUnavailable):
        paper_data.paper_rewards([{"reward": "code", "tests": ADD_TESTS, "id": "p"}], [fenced(ADD_OK)])
    monkeypatch.setenv(S.ALLOW_UNCONFINED_ENV, "1")  # the switch on: it runs, unconfined
    assert kind_utils.process_code(doc, [[fenced(ADD_OK)]])["mean_test_fraction"] == 1.0


def test_fallback_results_say_what_they_cannot_hide(iso):
    result = run("print('ok')", ONE_CASE, **UNCONFINED, **PASS)
    assert result.score == 1.0
    assert any(line.startswith("reads: ") and "training data" in line for line in result.not_hidden), \
        result.not_hidden
    assert any(line.startswith("processes: ") for line in result.not_hidden)
    if iso.get("private_root"):
        assert run("print('ok')", ONE_CASE).not_hidden == ()


def _sandbox_processes(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("mode", ["full", "no-namespaces"])
def test_sigkilled_trainer_leaves_nothing_behind(mode, iso):
    if mode == "full" and not iso.get("private_root"):
        pytest.skip("no private root here")
    options = {} if mode == "full" else UNCONFINED
    script = textwrap.dedent(f"""
        import os, sys
        from brorl import sandbox as S
        cfg = S.SandboxConfig(timeout_s=1.0, grace_s=1.0, **{options!r})
        print(os.path.dirname(S._sandbox_dir()), flush=True)
        while True:
            S.run_program("import time\\nwhile True: time.sleep(0.01)\\n", {{"inputs": ["\\n"], "outputs": ["x\\n"]}}, cfg)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    trainer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    parent = trainer.stdout.readline().strip()
    assert parent.startswith(tempfile.gettempdir()), parent
    deadline = time.monotonic() + 30
    while not _sandbox_processes(parent) or (mode != "full" and not os.path.isdir(parent)):
        assert time.monotonic() < deadline and trainer.poll() is None, "no sandbox started"
        time.sleep(0.02)
    trainer.kill()  # SIGKILL: no atexit, no finally
    trainer.wait()
    trainer.stdout.close()
    deadline = time.monotonic() + 60  # the harness stops at its own deadline (timeout_s, 1 s), then exits; a guard
    while _sandbox_processes(parent) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sandbox_processes(parent) == [], "sandbox processes outlived the trainer"
    if mode == "full":
        assert not os.path.exists(parent), "a private-root sandbox left a directory on disk"
        return
    # the fallback's directories are on disk: the next process that starts a sandbox removes them, and only
    # those of processes that are gone (this live process's folder stays)
    live = os.path.dirname(S._sandbox_dir())
    os.makedirs(live, exist_ok=True)
    subprocess.run([sys.executable, "-c", "from brorl import sandbox; sandbox._sandbox_dir()"], env=env, check=True)
    assert not os.path.exists(parent), "a dead trainer's sandbox directory was not swept"
    assert os.path.isdir(live), "a live process's sandbox directory was swept"


def test_file_writes_when_allowed_stay_inside_the_sandbox(tmp_path, iso):
    config = SandboxConfig(allow_file_writes=True, **PASS)
    inside = """
    import os
    os.makedirs("sub/deeper")
    with open("sub/deeper/f.txt", "w") as f:
        f.write("hello")
    with open(os.path.join(os.environ["TMPDIR"], "t.txt"), "w") as f:
        f.write("tmp")
    os.chmod("sub", 0o500)  # a read-only directory must not stop the clean-up
    print(open("sub/deeper/f.txt").read())
    """
    result = run(inside, {"inputs": ["\n"], "outputs": ["hello\n"]}, config)
    assert result.score == 1.0, result.case_status
    assert_no_leftovers(result)
    target = tmp_path / "outside.txt"
    outside = run(f"open({str(target)!r}, 'w').write('x')\nprint('ok')\n", config=config)
    if not outside.isolation.get("readonly_fs"):
        pytest.skip("no read-only mount namespace here: with allow_file_writes=True writes are NOT confined "
                    "(documented in brorl.sandbox)")
    assert outside.score == 0.0
    assert not target.exists()


@pytest.mark.parametrize("mode", ["full", "no-namespaces"])
def test_environment_secrets_are_not_visible(mode, monkeypatch):
    secret = "s3cr3t-" + "9d2e" * 4
    monkeypatch.setenv("BRORL_SECRET", secret)
    # a process of ours whose *initial* environment holds the secret, as the trainer's would
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                              env={**os.environ, "BRORL_SECRET": secret})
    try:
        code = f"""
        import os
        print(dict(os.environ))
        print(open("/proc/self/environ", "rb").read())
        for pid in ({holder.pid}, {os.getpid()}, os.getppid(), 1):
            try:
                print(pid, open("/proc/%d/environ" % pid, "rb").read())
            except Exception as e:
                print(pid, type(e).__name__)
        """
        result = run(code, keep_output=True, **MODES[mode])
        assert result.case_status == ("wrong_answer",), (result.case_status, result.stderr)
        text = result.outputs[0]
        assert "PATH" in text  # the probe did run and print an environment
        assert secret not in text and "BRORL_SECRET" not in text
        assert secret not in result.stderr
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("mode", ["full", "no-namespaces"])
def test_other_processes_cannot_be_signalled(mode):
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        code = f"""
        import os, signal
        for sig in (signal.SIGKILL, signal.SIGTERM):
            for pid in ({victim.pid}, {os.getpid()}, -1):
                try:
                    os.kill(pid, sig)
                except Exception:
                    pass
        print("ok")
        """
        run(code, **MODES[mode])
        run(code, audit_hook=False, **MODES[mode])
        time.sleep(0.1)
        assert victim.poll() is None, "a sandboxed program killed a process outside the sandbox"
    finally:
        victim.kill()
        victim.wait()


def test_isolation_report_matches_what_this_machine_allows(iso):
    assert set(S._ISOLATION_KEYS) <= set(iso)
    assert iso["rlimits"] and iso["audit_hook"] and iso["capabilities_dropped"]
    if _userns_possible():
        for layer in ("user_namespace", "network_namespace", "pid_namespace", "private_proc", "readonly_fs"):
            assert iso[layer], layer
    if os.uname().machine in ("x86_64", "aarch64"):
        assert iso["seccomp"]


# ------------------------------------------------------------------------------------------------
# garbage in, program extraction, adapters, clean-up
# ------------------------------------------------------------------------------------------------


def test_garbage_completions_score_zero_without_raising():
    huge = "x" * (10 * 1024 * 1024)
    garbage = [None, b"\xff\xfe\x00garbage", huge, huge + "```python\nprint(1)\n", "no code block here",
               12345, 3.5, {"role": "assistant"}, [{"content": None}], object(), "```python\n```",
               "<think>never closed ```python\nprint('ok')\n```", "\ud800```python\nprint(1)\n```",
               [{"role": "assistant", "content": [{"type": "text", "text": None}]}]]
    t0 = time.monotonic()
    for completion in garbage:
        assert S.code_reward(completion, ONE_CASE) == 0.0
    assert time.monotonic() - t0 < 10
    assert S.code_rewards(garbage, [ONE_CASE] * len(garbage)) == [0.0] * len(garbage)


def test_garbage_tests_score_zero_without_raising():
    for tests in (None, "not json", "[1, 2]", {"inputs": ["1"]}, {"inputs": ["1"], "outputs": []},
                  {"inputs": [], "outputs": []}, {"inputs": [{"a": 1}], "outputs": ["1"]}, 42,
                  {"fn_name": "1bad", "inputs": [[1]], "outputs": [1]}, b"\x80\x81"):
        result = S.run_program(ADD_OK, tests, FAST)
        assert (result.score, result.status) == (0.0, "bad_tests"), tests
        assert S.code_reward(fenced(ADD_OK), tests) == 0.0


def test_extract_code_rule():
    both = "```python\nprint(1)\n```\ntext\n```python\nprint(2)\n```\n```\nprint(3)\n```"
    assert S.extract_code(both) == "print(2)\n"  # last python block wins over a later untagged one
    assert S.extract_code("```\nprint(3)\n```") == "print(3)\n"
    assert S.extract_code("<think>```python\nprint(0)\n```</think>\n```py\nprint(4)\n```") == "print(4)\n"
    assert S.extract_code("<think>draft ```python\nprint(0)\n```</think>\nprint(5)\n") == "print(5)"
    assert S.extract_code("<think>still thinking ```python\nprint(0)\n```") is None
    assert S.extract_code("```python\nprint(6)\n```\n```python\nprint('trunc") == "print(6)\n"
    assert S.extract_code("just prose, no fence") is None
    assert S.extract_code([{"role": "user", "content": "q"},
                           {"role": "assistant", "content": "```python\nprint(7)\n```"}]) == "print(7)\n"
    assert S.extract_code("```python\n" + "x = 1\n" * 50_000 + "```") is None  # over max_chars


def test_trl_adapter_reads_apps_style_columns():
    apps_row = json.dumps(ADD_TESTS)
    completions = [[{"role": "assistant", "content": fenced(ADD_OK)}], fenced("print(0)"), None]
    scores = S.trl_code_reward(prompts=["p"] * 3, completions=completions, input_output=[apps_row] * 3)
    assert scores == [1.0, 0.0, 0.0]
    prime = [{"ground_truth": apps_row, "style": "rule"}] * 3
    assert S.trl_code_reward(completions=completions, reward_model=prime, trainer_state=None) == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="no 'tests'"):
        S.trl_code_reward(completions=completions, answer=["x"] * 3)
    bound = S.make_trl_code_reward(config=SandboxConfig(**PASS), tests_key="my_tests", max_workers=1)
    assert bound(completions=completions[:1], my_tests=[ADD_TESTS]) == [1.0]


def test_batch_runs_in_parallel_and_deduplicates():
    codes = [ADD_OK, "print(0)", ADD_OK, "a, b = map(int, input().split())\nprint(a + b if a else 0)\n"]
    completions = [fenced(c) for c in codes]
    tests = [json.dumps(ADD_TESTS)] * len(codes)
    assert S.code_rewards(completions, tests, max_workers=2) == [1.0, 0.0, 1.0, 0.75]
    with pytest.raises(ValueError):
        S.code_rewards(completions, tests[:1])


def test_reward_function_is_thread_safe():
    results, errors = [], []

    def worker():
        try:
            results.append(S.code_reward(fenced(ADD_OK), ADD_TESTS, timeout_s=PASS["timeout_s"]))
        except Exception as exc:  # pragma: no cover - the assertion below reports it
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and results == [1.0] * 4


def test_temporary_directories_are_removed():
    tmp = tempfile.gettempdir()
    before = {d for d in os.listdir(tmp) if d.startswith("brorl-sbx-")}
    results = [run(ADD_OK, ADD_TESTS), run("while True: pass"), run("def f(:"), run("import os\nos.fork()")]
    for result in results:
        assert result.sandbox_dir is not None and not os.path.exists(result.sandbox_dir)
    after = {d for d in os.listdir(tmp) if d.startswith("brorl-sbx-")}
    assert after <= before


def test_config_mistakes_raise():
    for bad in ({"timeout_s": 0}, {"timeout_s": float("nan")}, {"memory_mb": -1}, {"max_open_files": 4},
                {"max_output_bytes": 1.5}):
        with pytest.raises(ValueError):
            SandboxConfig(**bad)
    with pytest.raises(ValueError):
        S.code_reward("x", ONE_CASE, timeout_s=-1)


def test_harness_failure_is_a_zero_not_an_exception(tmp_path):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    result = S.run_program(ADD_OK, ADD_TESTS, FAST, python=str(broken))
    assert (result.score, result.status) == (0.0, "sandbox_error")
    missing = S.run_program(ADD_OK, ADD_TESTS, FAST, python=str(tmp_path / "nope"))
    assert (missing.score, missing.status) == (0.0, "sandbox_error")


def test_harness_from_source_for_another_interpreter(monkeypatch):
    # a sandbox interpreter other than this one gets the harness as source, not as marshalled code
    monkeypatch.setitem(S._harness_blobs, sys.executable, ("s", Path(S._HARNESS_PATH).read_bytes()))
    assert run(ADD_OK, ADD_TESTS, **PASS).score == 1.0


def test_signals_to_this_process_are_not_disturbed():
    # the reward function must not change the caller's signal dispositions
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGINT)}
    run(ADD_OK, ADD_TESTS)
    assert {sig: signal.getsignal(sig) for sig in before} == before
