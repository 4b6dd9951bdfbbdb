"""A small, self-healing pool of worker processes with a hard per-task deadline (the machinery under
:class:`brorl.rewards.pool.RewardPool`).

Concurrent callers share the workers: each queues its tasks, and one of them at a time drives the scheduler
for everyone's. A task gets a hard deadline per attempt, counted from when an idle worker receives it; a task
that runs out of time is a timeout (counted, retried ``timeout_retries`` times, then reported as failed); hung
workers are killed and replaced, dead ones detected and replaced. Workers are
:func:`brorl.rewards.worker._worker_main` processes (started by forkserver or spawn, never fork; they do not
re-import the parent's ``__main__``); what they can run, and which libraries each task's *domain* needs, is
named by a subclass (:attr:`DeadlinePool.task_domain`, :attr:`~DeadlinePool.domain_modules`,
:attr:`~DeadlinePool.prepare`, :attr:`~DeadlinePool.worker_main`). Pools are fork-aware and are all closed
at interpreter exit.
"""

from __future__ import annotations

import atexit
import collections
import logging
import math
import multiprocessing
import multiprocessing.connection
import multiprocessing.process
import multiprocessing.util
import os
import pickle
import signal
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from brorl.rewards.worker import _PICKLE_PROTOCOL

logger = logging.getLogger("brorl.rewards")

DEFAULT_TIMEOUT = 3.0
"""Hard per-task limit in seconds (verification of one answer), enforced by the parent."""
DEFAULT_NUM_WORKERS = 2
"""Worker processes per pool (the project's machines have 2 cores)."""

_MAX_MESSAGE_BYTES = 1 << 20  # replies from workers are tiny; anything larger is corruption


_STARTING, _READY, _BUSY = "starting", "ready", "busy"


@dataclass(eq=False)
class _Job:
    """One task of one caller: what to run, and (once ``done``) its reward."""

    kind: Any  # a name in _TASKS, or a module-level function (tests run their own tasks this way)
    args: tuple
    timeout: float  # hard limit per attempt, counted from dispatch
    soft: float  # the worker's own limit per attempt (0: none)
    value: float = 0.0
    attempts: int = 0
    failed: bool = False  # timed out on every attempt, killed its worker, or could not be sent
    timed_out: bool = False
    done: bool = False


@dataclass(eq=False)
class _Worker:
    process: Any
    conn: Any
    state: str
    deadline: float  # start-up deadline while starting, hard task deadline while busy
    domains: frozenset
    job: _Job | None = None
    task_id: int = -1
    tasks_done: int = 0
    dead: bool = False


@dataclass
class PoolStats:
    """Counters for monitoring (e.g. TRL's ``log_metric``) and tests."""

    tasks: int = 0  # task attempts sent to workers
    cache_hits: int = 0
    prefiltered: int = 0  # scored 0.0 in the parent without a worker
    timeouts: int = 0  # attempts that ran out of time (soft or hard)
    hard_timeouts: int = 0  # ... of which the worker had to be killed
    retries: int = 0  # timed-out tasks sent again with a fresh, longer deadline
    timed_out_tasks: int = 0  # tasks that ran out of time on every attempt: scored 0.0 and reported as timeouts
    remembered_timeouts: int = 0  # scored 0.0 because the same task timed out recently (cache_timeouts)
    worker_deaths: int = 0  # workers that died on their own
    workers_started: int = 0


def _kill_worker(worker: _Worker) -> None:
    """SIGKILL a worker and reap it (join), closing our end of its pipe."""
    try:
        worker.conn.close()
    except Exception:
        pass
    try:
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join(5)
    except Exception:
        pass
    worker.dead = True


def _shutdown_workers(workers: list, owner_pid: int, fds: Sequence[int] = (), grace: float = 0.5) -> None:
    """Stop workers politely (``stop`` message / EOF), then kill what is left; always reap.  ``fds``
    (the pool's wake-up pipe) are closed: only at the pool's finalisation."""
    if os.getpid() != owner_pid:  # a forked child must not touch the parent's workers
        workers.clear()
        return
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    for worker in workers:
        try:
            worker.conn.send_bytes(pickle.dumps(("stop",), protocol=_PICKLE_PROTOCOL))
        except Exception:
            pass
        try:
            worker.conn.close()
        except Exception:
            pass
    deadline = time.monotonic() + grace
    for worker in workers:
        try:
            worker.process.join(max(0.0, deadline - time.monotonic()))
        except Exception:
            pass
        _kill_worker(worker)
    workers.clear()


_ALL_POOLS: "weakref.WeakSet[DeadlinePool]" = weakref.WeakSet()
_OWN_FORKSERVER = False


def _stop_forkserver() -> None:
    """Stop and reap the multiprocessing fork server this module started (at interpreter exit).

    The stdlib leaves the server to exit on its own once the parent is gone, which leaves a zombie in
    containers whose init does not reap orphans.  Closing its "alive" pipe makes it exit; we wait for it.
    """
    try:
        from multiprocessing import forkserver

        server = forkserver._forkserver
        pid, alive_fd = server._forkserver_pid, server._forkserver_alive_fd
        if pid is None:
            return
        server._forkserver_pid = server._forkserver_alive_fd = server._forkserver_address = None
        if alive_fd is not None:
            os.close(alive_fd)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except Exception:
        pass


_spawn_flags = threading.local()


def _install_skip_main_hook() -> None:
    """Stop our workers from re-importing the parent's ``__main__`` module.

    With spawn/forkserver, multiprocessing re-runs the main script (or ``-m`` module) in every child so
    that objects defined there can be unpickled.  Our workers need nothing from it, and a training
    script's imports (torch, transformers, trl) would cost seconds and hundreds of MB per worker and per
    replacement -- or re-run the training if the script lacks an ``if __name__ == "__main__":`` guard.
    This wraps ``multiprocessing.spawn.get_preparation_data`` so that, only while *this thread* is
    starting one of our workers, the "import main" entries are dropped.  Everyone else is unaffected.
    """
    from multiprocessing import spawn

    if getattr(spawn.get_preparation_data, "_brorl_skip_main", False):
        return
    original = spawn.get_preparation_data

    def get_preparation_data(name):
        data = original(name)
        if getattr(_spawn_flags, "skip_main", False):
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
        return data

    get_preparation_data._brorl_skip_main = True
    get_preparation_data.__wrapped__ = original
    spawn.get_preparation_data = get_preparation_data


def _reset_inherited_forkserver() -> None:
    """In a forked child, forget the parent's fork server (the stdlib would fail with ChildProcessError
    when it checks on a server that is not its child); a fresh one starts on demand."""
    global _OWN_FORKSERVER
    try:
        from multiprocessing import forkserver

        server = forkserver._forkserver
        if server._forkserver_pid is None:
            return
        try:
            os.waitpid(server._forkserver_pid, os.WNOHANG)
            return  # our own child after all
        except ChildProcessError:
            pass
        alive_fd = server._forkserver_alive_fd
        server._forkserver_pid = server._forkserver_alive_fd = server._forkserver_address = None
        _OWN_FORKSERVER = False
        if alive_fd is not None:
            os.close(alive_fd)  # our inherited copy only; the parent keeps its server
    except Exception:
        logger.debug("could not reset the inherited fork server", exc_info=True)


def _env_number(name: str, default, cast):
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        return cast(value)
    except ValueError:
        logger.warning("ignoring %s=%r (not a number)", name, value)
        return default


class DeadlinePool:
    """Worker processes with a hard per-task deadline; :meth:`_run` runs ``(kind, args)`` tasks on them.

    Parameters: ``num_workers``, ``timeout`` (the hard limit per attempt; a soft limit of
    ``soft_timeout_fraction * timeout`` inside the worker usually ends slow Python-level work first, without a
    restart), ``timeout_retries`` (each retry's deadline ``retry_timeout_factor`` times the last), ``start_method``,
    ``memory_limit_mb``, ``startup_timeout``, ``max_tasks_per_worker`` and ``preload`` (domains the workers and the fork server import up front), as
    described for :class:`brorl.rewards.pool.RewardPool`.

    A subclass names what its workers run: ``worker_main`` (the worker process's entry point),
    ``task_domain`` (task name -> its domain), ``domain_modules`` (domain -> the modules it imports) and
    ``prepare`` (task name -> its set-up step, run in the worker before the task's clock starts).
    """

    worker_main: ClassVar[Callable[..., None]]
    task_domain: ClassVar[Mapping[str, str]] = {}
    domain_modules: ClassVar[Mapping[str, Sequence[str]]] = {}
    prepare: ClassVar[Mapping[str, Callable[..., Any]]] = {}

    def __init__(
        self,
        num_workers: int | None = None,
        timeout: float | None = None,
        *,
        start_method: str | None = None,
        timeout_retries: int = 1,
        memory_limit_mb: int | None = 2048,
        startup_timeout: float = 60.0,
        max_tasks_per_worker: int | None = None,
        soft_timeout_fraction: float = 0.8,
        preload: Sequence[str] = (),
        retry_timeout_factor: float = 2.0,
    ) -> None:
        self.num_workers = max(1, int(num_workers if num_workers is not None else DEFAULT_NUM_WORKERS))
        self.timeout = float(timeout if timeout is not None else DEFAULT_TIMEOUT)
        if not self.timeout > 0 or not math.isfinite(self.timeout):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.timeout_retries = max(0, int(timeout_retries))
        self.retry_timeout_factor = float(retry_timeout_factor)
        if not self.retry_timeout_factor >= 1.0 or not math.isfinite(self.retry_timeout_factor):
            raise ValueError(f"retry_timeout_factor must be a number >= 1, got {retry_timeout_factor!r}")
        self.memory_limit_mb = memory_limit_mb
        self.startup_timeout = float(startup_timeout)
        self.max_tasks_per_worker = max_tasks_per_worker
        self.soft_timeout_fraction = float(soft_timeout_fraction)
        unknown = set(preload) - set(self.domain_modules)
        if unknown:
            raise ValueError(f"unknown preload domains {sorted(unknown)}; known: {sorted(self.domain_modules)}")
        self._domains: set[str] = set(preload)

        methods = multiprocessing.get_all_start_methods()
        if start_method is None:
            start_method = "forkserver" if "forkserver" in methods else "spawn"
        if start_method == "fork":
            raise ValueError(
                "start_method='fork' is unsafe here (torch threads in the parent); use forkserver or spawn"
            )
        self.start_method = start_method
        self._ctx = multiprocessing.get_context(start_method)

        self.stats = PoolStats()
        self._workers: list[_Worker] = []
        self._next_task_id = 0
        self._reported: set[str] = set()
        self._reset_threading()
        _ALL_POOLS.add(self)

    def _reset_threading(self) -> None:
        """(Re)create the per-process scheduling state: on creation, and in a forked child.

        Callers share the workers: each queues its jobs in ``_pending``, and one of them at a time (the
        *driver*, ``_driving``) runs the scheduler loop for everyone's jobs until its own are done, then
        hands over to a waiting caller.  ``_cond`` guards the queue, the job states, the cache and the
        hand-over; a byte on the wake-up pipe interrupts the driver's wait, so new jobs reach idle
        workers at once.
        """
        self._owner_pid = os.getpid()
        self._cond = threading.Condition(threading.Lock())
        self._pending: collections.deque[_Job] = collections.deque()
        self._driving = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._finalizer = weakref.finalize(self, _shutdown_workers, self._workers, self._owner_pid,
                                           (self._wake_r, self._wake_w))

    # -- lifecycle ---------------------------------------------------------------------------------

    def __enter__(self) -> "DeadlinePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop and reap all workers.  The pool may be used again afterwards (workers restart lazily).

        Jobs of other threads that were running are queued again (the next driver restarts workers)."""
        self._check_fork()
        self._become_driver(())
        try:
            for worker in self._workers:
                if worker.state == _BUSY and worker.job is not None:
                    self._requeue(worker.job)
            _shutdown_workers(self._workers, self._owner_pid)
        finally:
            self._stop_driving()

    @property
    def worker_pids(self) -> list[int]:
        """PIDs of the current worker processes (for monitoring and tests)."""
        return [w.process.pid for w in self._workers if not w.dead]

    def _check_fork(self) -> None:
        """Called (before taking the lock, which a forked child may have inherited in a held state) at
        every entry point."""
        if os.getpid() != self._owner_pid:
            # Inherited through fork: the workers belong to the parent.  Forget them and start afresh.
            if self.start_method == "forkserver":
                _reset_inherited_forkserver()
            for worker in self._workers:
                try:  # or multiprocessing's exit hook would try to join the parent's workers and fail
                    multiprocessing.process._children.discard(worker.process)
                except Exception:
                    pass
            self._workers.clear()
            self._finalizer.detach()
            for fd in (self._wake_r, self._wake_w):  # our inherited copies only
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._reset_threading()

    def _configure_forkserver(self) -> None:
        """Before the fork server starts: preload math-verify (and this module) into it, so replacement
        workers start in milliseconds, and arrange for the server to be reaped at exit (we started it)."""
        if self.start_method != "forkserver":
            return
        global _OWN_FORKSERVER
        try:
            from multiprocessing import forkserver

            server = forkserver._forkserver
            if server._forkserver_pid is not None:
                return  # already running: its preload list is fixed
            if not _OWN_FORKSERVER:
                _OWN_FORKSERVER = True
                # Runs after multiprocessing has joined/terminated its children at exit.
                multiprocessing.util.Finalize(None, _stop_forkserver, exitpriority=-100)
            modules = list(server._preload_modules)
            wanted = [self.worker_main.__module__] + [m for d in sorted(self._domains) for m in self.domain_modules[d]]
            for module in wanted:
                if module not in modules:
                    modules.append(module)
            self._ctx.set_forkserver_preload(modules)
        except Exception:  # private API moved: workers just import at start-up instead
            logger.debug("could not set forkserver preload", exc_info=True)

    def _spawn_worker(self) -> _Worker | None:
        self._configure_forkserver()
        _install_skip_main_hook()
        parent_conn = child_conn = None
        try:
            parent_conn, child_conn = self._ctx.Pipe(duplex=True)
            domains = frozenset(self._domains)
            process = self._ctx.Process(
                target=self.worker_main,
                args=(child_conn, sorted(domains), self.memory_limit_mb),
                name="brorl-reward-worker",
                daemon=True,
            )
            _spawn_flags.skip_main = True
            try:
                process.start()
            finally:
                _spawn_flags.skip_main = False
        except Exception:
            logger.exception("could not start a reward worker")
            for c in (parent_conn, child_conn):
                try:
                    if c is not None:
                        c.close()
                except Exception:
                    pass
            return None
        child_conn.close()
        self.stats.workers_started += 1
        worker = _Worker(process, parent_conn, _STARTING, time.monotonic() + self.startup_timeout, domains)
        self._workers.append(worker)
        return worker

    def _retire(self, worker: _Worker) -> None:
        _kill_worker(worker)
        if worker in self._workers:
            self._workers.remove(worker)

    # -- the scheduler -----------------------------------------------------------------------------

    def _send(self, worker: _Worker, message) -> bool:
        try:
            worker.conn.send_bytes(pickle.dumps(message, protocol=_PICKLE_PROTOCOL))
            return True
        except (OSError, EOFError, ValueError):
            return False

    def _run(
        self, tasks: Sequence[tuple[Any, tuple]], timeout: float | None = None, failed: list | None = None,
        timed_out: list | None = None,
    ) -> list[float]:
        """Run ``(kind, args)`` tasks on the workers in parallel; one float per task, 0.0 on any failure.

        ``kind`` is a name in the production task table or a module-level function (pickled by reference,
        run in the worker: how tests run their own tasks).  Each attempt gets ``timeout`` seconds (default:
        the pool's) from the moment an idle worker receives it; a timed-out task is retried
        ``timeout_retries`` times with a fresh deadline.  Several threads may call this at once: their
        tasks share the workers.  Workers that time out, die, or fail to start are replaced (replacements
        start in the background; the call does not wait for them unless it still has tasks to run).
        Never raises on task failure; an exception in the parent itself (e.g. KeyboardInterrupt) kills
        the workers running this call's tasks and propagates.  If ``failed`` (a list of ``len(tasks)``
        booleans) is given, it is set True for tasks that timed out on every attempt, killed their
        worker or could not be sent; ``timed_out`` likewise for the tasks that ran out of time on every attempt.
        """
        jobs = self._submit(tasks, timeout)
        self._wait(jobs)
        if failed is not None:
            failed[:] = [job.failed for job in jobs]
        if timed_out is not None:
            timed_out[:] = [job.timed_out for job in jobs]
        return [job.value for job in jobs]

    def _submit(self, tasks: Sequence[tuple[Any, tuple]], timeout: float | None) -> list[_Job]:
        timeout = self.timeout if timeout is None else float(timeout)
        soft = timeout * self.soft_timeout_fraction if self.soft_timeout_fraction > 0 else 0.0
        jobs = [_Job(kind, tuple(args), timeout, soft) for kind, args in tasks]
        self._check_fork()
        domains = {self.task_domain.get(job.kind) for job in jobs if isinstance(job.kind, str)} - {None}
        with self._cond:
            if not domains <= self._domains:  # a new set, never one the driver may be iterating over
                self._domains = self._domains | domains
            self._pending.extend(jobs)
        self._wake()
        return jobs

    def _wake(self) -> None:
        """Interrupt the driver's wait (new jobs to dispatch)."""
        try:
            os.write(self._wake_w, b"\0")
        except OSError:  # pipe full: a wake-up is already pending
            pass

    def _become_driver(self, jobs: Sequence[_Job]) -> bool:
        """Block until this thread may drive the scheduler (True) or, if ``jobs`` are given, until
        another driver has finished them (False)."""
        with self._cond:
            while not (jobs and all(job.done for job in jobs)):
                if not self._driving:
                    self._driving = True
                    return True
                self._cond.wait()
            return False

    def _stop_driving(self) -> None:
        with self._cond:
            self._driving = False
            self._cond.notify_all()

    def _wait(self, jobs: list[_Job]) -> None:
        """Return when ``jobs`` are done, driving the scheduler while no other thread does."""
        if not jobs or not self._become_driver(jobs):
            return
        try:
            self._drive(jobs)
        except BaseException:
            mine = {id(job) for job in jobs}
            with self._cond:
                self._pending = collections.deque(j for j in self._pending if id(j) not in mine)
            for worker in list(self._workers):
                if worker.state == _BUSY and id(worker.job) in mine:
                    self._retire(worker)
            raise
        finally:
            self._stop_driving()

    def _finish(self, job: _Job, value: float = 0.0, failed: bool = False) -> None:
        with self._cond:
            job.value, job.failed, job.done = value, failed, True
            self._cond.notify_all()

    def _requeue(self, job: _Job) -> None:
        """Put back a job whose attempt never really ran (its worker was stopped under it)."""
        job.attempts -= 1
        with self._cond:
            self._pending.appendleft(job)

    def _timeout(self, job: _Job, hard: bool) -> None:
        """An attempt ran out of time: count it, then retry with a fresh deadline ``retry_timeout_factor`` times
        longer (a right answer that was slow on a busy machine gets its chance) or report a timeout."""
        self.stats.timeouts += 1
        self.stats.hard_timeouts += hard
        if job.attempts <= self.timeout_retries:
            self.stats.retries += 1
            job.timeout *= self.retry_timeout_factor
            job.soft *= self.retry_timeout_factor
            with self._cond:
                self._pending.appendleft(job)
        else:
            job.timed_out = True
            self.stats.timed_out_tasks += 1
            self._finish(job, failed=True)

    def _drive(self, jobs: list[_Job]) -> None:
        """The scheduler loop: dispatch everyone's pending jobs, collect results, enforce deadlines,
        replace lost workers -- until this caller's ``jobs`` are done."""
        failures = 0  # workers that could not start, or died / stalled while starting
        max_failures = 3 * self.num_workers + 3
        while not all(job.done for job in jobs):
            self._workers[:] = [w for w in self._workers if not w.dead]
            if failures > max_failures:
                logger.error("reward workers keep failing to start; scoring the queued tasks as 0.0")
                with self._cond:
                    lost, self._pending = list(self._pending), collections.deque()
                for worker in list(self._workers):
                    if worker.state == _BUSY:
                        lost.append(worker.job)
                        self._retire(worker)
                for job in lost:
                    self._finish(job, failed=True)
                return
            while len(self._workers) < self.num_workers:
                if self._spawn_worker() is None:
                    failures += 1
                    break
            if not self._workers:
                continue
            self._dispatch()
            waiting = [w for w in self._workers if not w.dead and w.state in (_BUSY, _STARTING)]
            if not waiting:
                continue
            wait_for = max(0.0, min(w.deadline for w in waiting) - time.monotonic())
            handles: dict[Any, _Worker | None] = {self._wake_r: None}
            for w in waiting:
                handles[w.conn] = w
                handles[w.process.sentinel] = w
            woken = multiprocessing.connection.wait(list(handles), timeout=wait_for)
            if self._wake_r in woken:
                try:
                    while os.read(self._wake_r, 4096):
                        pass
                except OSError:  # drained
                    pass
            for worker in {id(handles[h]): handles[h] for h in woken if handles[h] is not None}.values():
                if not worker.dead and self._receive(worker):
                    failures += 1
            now = time.monotonic()
            for worker in list(self._workers):
                if worker.dead or worker.state == _READY or now < worker.deadline:
                    continue
                if worker.state == _BUSY:
                    job = worker.job
                    logger.warning("reward task %r timed out after %.1f s; worker %s killed and replaced",
                                   getattr(job.kind, "__name__", job.kind), job.timeout, worker.process.pid)
                    self._retire(worker)
                    self._timeout(job, hard=True)
                else:
                    failures += 1
                    logger.warning("reward worker %s not ready after %.0f s; replaced",
                                   worker.process.pid, self.startup_timeout)
                    self._retire(worker)

    def _dispatch(self) -> None:
        """Hand pending jobs to idle workers (loading a job's domain first where a worker lacks it)."""
        now = time.monotonic()
        for worker in list(self._workers):
            if worker.dead or worker.state != _READY:
                continue
            with self._cond:
                if not self._pending:
                    return
                job = self._pending[0]
            domain = self.task_domain.get(job.kind) if isinstance(job.kind, str) else None
            if domain and domain not in worker.domains:
                # Import the domain's libraries outside the task's deadline, then come back.
                if self._send(worker, ("load", sorted(self._domains))):
                    worker.state = _STARTING
                    worker.deadline = now + self.startup_timeout
                    worker.domains = frozenset(self._domains)
                else:
                    self.stats.worker_deaths += 1
                    self._retire(worker)
                continue
            with self._cond:
                self._pending.popleft()
            try:
                payload = pickle.dumps(("task", self._next_task_id, job.kind, job.args, job.soft),
                                       protocol=_PICKLE_PROTOCOL)
            except Exception:
                self._finish(job, failed=True)  # unpicklable task: it scores 0.0
                continue
            try:
                worker.conn.send_bytes(payload)
            except (OSError, EOFError, ValueError):
                # The worker died while idle; the task never ran, so it goes back for another worker.
                with self._cond:
                    self._pending.appendleft(job)
                self.stats.worker_deaths += 1
                self._retire(worker)
                continue
            self.stats.tasks += 1
            job.attempts += 1
            worker.state = _BUSY
            worker.job = job
            worker.task_id = self._next_task_id
            worker.deadline = now + job.timeout
            if isinstance(job.kind, str) and job.kind in self.prepare:  # until the worker says "started"
                worker.deadline += self.startup_timeout
            self._next_task_id += 1

    def _receive(self, worker: _Worker) -> bool:
        """Read one message (or EOF) from a worker that woke ``connection.wait``.

        Returns True if the worker was lost while starting (counts towards giving up on start-up).
        """
        message = None
        try:
            if worker.conn.poll():
                message = pickle.loads(worker.conn.recv_bytes(_MAX_MESSAGE_BYTES))
        except BaseException:
            message = None
        if message is None:
            try:
                if worker.process.is_alive() and not worker.conn.poll():
                    return False  # spurious wake-up
            except Exception:
                pass
            # The worker died (or sent garbage): a job it was running scores 0.0.
            was_starting = worker.state == _STARTING
            job = worker.job if worker.state == _BUSY else None
            self.stats.worker_deaths += 1
            self._retire(worker)
            if job is not None:
                self._finish(job, failed=True)
            logger.warning("reward worker %s died (exit code %s); replaced", worker.process.pid,
                           worker.process.exitcode)
            return was_starting
        op = message[0] if isinstance(message, tuple) and message else None
        if op == "ready":
            if worker.state == _STARTING:
                worker.state = _READY
            problem = message[2] if len(message) > 2 else ""
            if problem and problem not in self._reported:
                self._reported.add(problem)
                logger.error("reward worker %s is degraded (its tasks will score 0.0): %s", message[1], problem)
        elif op == "started" and worker.state == _BUSY and message[1] == worker.task_id:
            worker.deadline = time.monotonic() + worker.job.timeout  # set-up done: the task's clock starts
        elif op == "result" and worker.state == _BUSY:
            job = worker.job
            worker.state = _READY
            worker.job = None
            worker.tasks_done += 1
            if self.max_tasks_per_worker and worker.tasks_done >= self.max_tasks_per_worker:
                self._retire(worker)
            if message[1] != worker.task_id:
                self._finish(job, failed=True)
            elif len(message) > 3 and message[3] == "timeout":
                self._timeout(job, hard=False)
            else:
                self._finish(job, _as_reward(message[2]))
        return False


def _as_reward(value: Any) -> float:
    """Coerce a scorer's output to a float in [0, 1]; NaN, None and non-numbers become 0.0."""
    try:
        value = float(value)
    except Exception:
        return 0.0
    if not math.isfinite(value):
        return 0.0
    return min(1.0, max(0.0, value))


@atexit.register
def _close_all_pools() -> None:
    """At interpreter exit, stop every pool's workers before multiprocessing's own clean-up runs."""
    for pool in list(_ALL_POOLS):
        try:
            pool.close()
        except Exception:
            pass
