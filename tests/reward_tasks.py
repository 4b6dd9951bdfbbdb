"""Test-only reward tasks, run in brorl.rewards' worker processes.

Passed to ``RewardPool._run`` as module-level functions (pickled by reference, imported by the worker), so
none of them ships in the production task table.  Standard library only: a worker imports this module
inside a task's deadline.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any


def sleep(seconds: float) -> float:
    """An interruptible sleep (ended by the soft timeout), then a correct answer."""
    time.sleep(seconds)
    return 1.0


def hang() -> float:  # pragma: no cover - killed by the parent
    """Hang like C code does: ignore the soft-timeout signal and never return."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    while True:
        time.sleep(3600)


def exit_(code: int = 3) -> float:  # pragma: no cover - the process dies
    """The worker process dies abruptly (like a segfault or an OOM kill)."""
    os._exit(code)


def raise_() -> float:
    """The task raises."""
    raise RuntimeError("boom")


def value(v: Any) -> Any:
    """Return an arbitrary value (the parent must sanitise it)."""
    return v


def slow_while_busy(flag: str) -> float:
    """A correct answer that is slow while ``flag`` exists (a starved machine) and quick once it is gone."""
    while os.path.exists(flag):
        time.sleep(0.01)
    return 1.0


def slow_first_time(marker: str) -> float:
    """A correct answer that is slow on its first attempt only (it leaves ``marker`` behind)."""
    if not os.path.exists(marker):
        Path(marker).touch()
        time.sleep(3600)
    return 1.0


def rendezvous(folder: str, n: int, limit: float) -> float:
    """1.0 if ``n`` copies of this task run at the same time (each checks in, then waits up to ``limit``
    seconds for the others); 0.0 if they ran one after another."""
    Path(folder, str(os.getpid())).touch()
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if len(os.listdir(folder)) >= n:
            return 1.0
        time.sleep(0.01)
    return 0.0


def budget_above(marker: str, threshold: float) -> float:
    """Time out on the first attempt (it leaves ``marker`` behind); on the retry, 1.0 if the worker's soft deadline
    left for this attempt is above ``threshold`` seconds (the retry got a longer budget), else 0.0."""
    if not os.path.exists(marker):
        Path(marker).touch()
        time.sleep(3600)
    return 1.0 if signal.getitimer(signal.ITIMER_REAL)[0] > threshold else 0.0
