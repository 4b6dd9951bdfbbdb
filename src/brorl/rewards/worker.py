"""The worker process: load the graders' libraries, say "ready", then run tasks under a soft time limit.

Importable (without side effects) so the fork server can preload it with math-verify.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
from collections.abc import Sequence

from brorl.rewards.graders import _PREPARE, _TASKS, _load_domains

_PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL


class _SoftTimeout(BaseException):
    """Raised inside a worker by its interval timer; a BaseException so library ``except Exception``
    clauses (math-verify catches Exception broadly) cannot swallow it."""


def _soft_timeout_handler(signum, frame):  # pragma: no cover - runs in workers
    raise _SoftTimeout()


def _worker_main(conn, domains: Sequence[str], memory_limit_mb: int | None) -> None:  # pragma: no cover
    """Entry point of a worker process: load domains, say "ready", then serve tasks until EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    signal.signal(signal.SIGALRM, _soft_timeout_handler)
    if memory_limit_mb:
        try:  # head-room on top of what the worker already maps (inherited from the fork server)
            import resource

            with open("/proc/self/status") as f:
                vm_kb = next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))
            limit = vm_kb * 1024 + int(memory_limit_mb) * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except Exception:
            pass
    for name in ("math_verify", "latex2sympy2_extended", "reasoning_gym"):
        logging.getLogger(name).setLevel(logging.CRITICAL)  # they log the (possibly huge) input

    def reply(message) -> bool:
        try:
            conn.send_bytes(pickle.dumps(message, protocol=_PICKLE_PROTOCOL))
            return True
        except Exception:
            return False

    if not reply(("ready", os.getpid(), _load_domains(domains))):
        return
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return
        try:
            message = pickle.loads(data)
            op = message[0]
        except BaseException:
            reply(("result", None, 0.0))
            continue
        if op == "stop":
            return
        if op == "load":
            if not reply(("ready", os.getpid(), _load_domains(message[1]))):
                return
            continue
        if op != "task":
            reply(("result", None, 0.0))
            continue
        _, task_id, kind, args, soft_timeout = message
        status = "ok"
        if isinstance(kind, str) and kind in _PREPARE:
            try:
                _PREPARE[kind](*args)
            except BaseException:
                pass  # the task itself fails and scores 0.0
            if not reply(("started", task_id)):
                return
        try:
            task = kind if callable(kind) else _TASKS[kind]
            if soft_timeout and soft_timeout > 0:
                signal.setitimer(signal.ITIMER_REAL, soft_timeout)
            try:
                value = task(*args)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            value = float(value)
        except _SoftTimeout:
            value, status = 0.0, "timeout"  # not an answer: the parent retries or reports a timeout
        except BaseException:
            value = 0.0
        if not reply(("result", task_id, value, status)):
            return
