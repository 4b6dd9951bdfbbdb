"""RewardPool: the reward scoring of a :class:`brorl.rewards.deadline_pool.DeadlinePool` (grader processes with
a hard per-task deadline): the math and Reasoning Gym pre-filters in the parent and a reward cache.

Concurrent callers share the workers; a task that runs out of time is a timeout (counted, retried once,
never cached as a reward); hung workers are killed and replaced, dead ones detected and replaced.  See the
package docstring for why a process pool.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from brorl.rewards.deadline_pool import (  # noqa: F401 -- re-exported (adapters, the package)
    DEFAULT_NUM_WORKERS,
    DEFAULT_TIMEOUT,
    DeadlinePool,
    PoolStats,
    _env_number,
)
from brorl.rewards.extraction import (
    _HEDGE,
    _clean,
    _has_hidden_characters,
    _nesting_depth,
    _normalize_answer,
    completion_text,
    extract_math_answer,
    extract_reasoning_gym_answer,
    juxtaposed_numbers,
)
from brorl.rewards.graders import _DOMAIN_MODULES, _PREPARE, _TASK_DOMAIN, parse_reasoning_gym_entry
from brorl.rewards.worker import _worker_main

logger = logging.getLogger("brorl.rewards")


class RewardPool(DeadlinePool):
    """A small, self-healing pool of grader processes with a hard per-task timeout.

    Parameters (all keyword-friendly; the defaults suit the 2-core project machines):

    num_workers
        Worker processes (default 2, or ``BRORL_REWARD_WORKERS`` for the default pool).
    timeout
        Hard limit in seconds for verifying one answer, counted from when the task reaches an idle
        worker (default 3.0, or ``BRORL_REWARD_TIMEOUT``).  On expiry the worker is killed and replaced.
        A soft limit of ``soft_timeout_fraction * timeout`` inside the worker usually ends slow
        Python-level work first, without a restart.  Either way the attempt counts as a timeout
        (``stats.timeouts``), never as an answer: it is retried ``timeout_retries`` times with a fresh, longer
        deadline; a task that runs out of time on every attempt scores 0.0 *as a timeout*: counted in
        ``stats.timed_out_tasks`` and flagged in the ``timeouts`` list the scoring methods fill in (the TRL
        adapters log it as the metric ``rewards/timeouts``), never silently.
    timeout_retries
        Fresh attempts for a task that timed out (default 1), so a correct answer that was slow once on a
        busy machine is not scored 0.0 for it.
    retry_timeout_factor
        Each retry's deadline is this many times the last one's (default 2: 3 s, then 6 s), so a right answer that
        needs a few seconds of sympy (an integral, the Basel sum) on a loaded machine still scores.
    start_method
        ``"forkserver"`` (default where available) or ``"spawn"``.  ``"fork"`` is refused: the parent may
        have torch threads.
    max_answer_chars
        Extracted math answers (and gold answers) longer than this score 0.0 in the parent.
    max_nesting
        Answers nested deeper than this in ``{([`` score 0.0 in the parent (ANTLR/sympy recurse).
    max_rg_answer_chars
        Reasoning Gym answers longer than this score 0.0 in the parent (some scorers are quadratic).
    scan_chars
        Only the last ``scan_chars`` characters of a completion are scanned for ``\\boxed{}``.
    cache_size
        LRU cache of (answer, gold) -> reward in the parent; 0 disables it.
    cache_timeouts
        Remember tasks that timed out on every attempt (or killed their worker) for ``timeout_ttl``
        seconds and score them 0.0 at once meanwhile, so a policy that keeps emitting the same
        pathological answer costs its timeouts once per ``timeout_ttl``, not once per step (default
        True).  A timeout is never cached as the answer's reward: after ``timeout_ttl`` it is verified
        again, so a slow answer is not scored 0.0 for the life of the pool.
    timeout_ttl
        Seconds a timeout is remembered (default 600).
    memory_limit_mb
        Address space (``RLIMIT_AS``) each worker may add on top of what it maps at start-up (default
        2048 MiB), so a runaway big-number computation fails fast with ``MemoryError``; ``None`` or 0
        disables the limit.
    startup_timeout
        Seconds a new worker may take to import its libraries and report ready.
    max_tasks_per_worker
        Recycle a worker after this many tasks (bounds slow leaks in sympy caches); ``None``: never.
    preload
        Domains the workers (and the fork server) import up front: ``("math",)`` by default; add
        ``"reasoning_gym"`` to avoid a lazy ~3 s import the first time a Reasoning Gym reward is used.

    Use as a context manager or call :meth:`close`; pools are also closed at interpreter exit.
    """

    worker_main = staticmethod(_worker_main)
    task_domain = _TASK_DOMAIN
    domain_modules = _DOMAIN_MODULES
    prepare = _PREPARE

    def __init__(
        self,
        num_workers: int | None = None,
        timeout: float | None = None,
        *,
        start_method: str | None = None,
        max_answer_chars: int = 1000,
        max_nesting: int = 16,
        max_rg_answer_chars: int = 16_384,
        scan_chars: int = 50_000,
        cache_size: int = 65_536,
        cache_timeouts: bool = True,
        timeout_ttl: float = 600.0,
        timeout_retries: int = 1,
        memory_limit_mb: int | None = 2048,
        startup_timeout: float = 60.0,
        max_tasks_per_worker: int | None = None,
        soft_timeout_fraction: float = 0.8,
        preload: Sequence[str] = ("math",),
        retry_timeout_factor: float = 2.0,
    ) -> None:
        super().__init__(num_workers, timeout, start_method=start_method, timeout_retries=timeout_retries,
                         memory_limit_mb=memory_limit_mb, startup_timeout=startup_timeout,
                         max_tasks_per_worker=max_tasks_per_worker, soft_timeout_fraction=soft_timeout_fraction,
                         preload=preload, retry_timeout_factor=retry_timeout_factor)
        self.max_answer_chars = int(max_answer_chars)
        self.max_nesting = int(max_nesting)
        self.max_rg_answer_chars = int(max_rg_answer_chars)
        self.scan_chars = int(scan_chars)
        self.cache_size = max(0, int(cache_size))
        self.cache_timeouts = bool(cache_timeouts)
        self.timeout_ttl = float(timeout_ttl)
        self._cache: collections.OrderedDict = collections.OrderedDict()  # key -> reward
        self._timed_out: dict[tuple, float] = {}  # key -> until when its timeout is remembered

    # -- caching -----------------------------------------------------------------------------------

    def _run_cached(self, keys: list[tuple | None], tasks_for: Callable[[tuple], tuple[Any, tuple]],
                    timeouts: list | None = None, timeout: float | None = None) -> list[float]:
        """Score ``keys`` (None -> 0.0), de-duplicating within the batch and through the LRU cache.

        Rewards are cached; a task that timed out on every attempt (or killed its worker) is not: with
        ``cache_timeouts`` it is remembered as a timeout for ``timeout_ttl`` seconds, then tried again.
        ``timeouts`` (a list) is filled with one flag per key: True where the 0.0 is a timeout (now or remembered).
        ``timeout`` (seconds per attempt, default the pool's) is for a call that can wait: remembered timeouts are
        then verified again.
        """
        self._check_fork()
        out = [0.0] * len(keys)
        flags = [False] * len(keys)
        todo: dict[tuple, list[int]] = {}
        now = time.monotonic()
        for i, key in enumerate(keys):
            if key is None:
                self.stats.prefiltered += 1
                continue
            with self._cond:
                hit = self._cache.get(key) if self.cache_size else None
                if hit is not None:
                    self._cache.move_to_end(key)
                    self.stats.cache_hits += 1
                elif timeout is None and self._timed_out.get(key, 0.0) > now:
                    hit = 0.0
                    flags[i] = True
                    self.stats.remembered_timeouts += 1
            if hit is not None:
                out[i] = hit
                continue
            todo.setdefault(key, []).append(i)
        if todo:
            unique = list(todo)
            failed = [False] * len(unique)
            timed_out = [False] * len(unique)
            values = self._run([tasks_for(k) for k in unique], timeout, failed=failed, timed_out=timed_out)
            now = time.monotonic()
            with self._cond:
                for key, value, bad, late in zip(unique, values, failed, timed_out):
                    for i in todo[key]:
                        out[i] = value
                        flags[i] = late
                    if bad:
                        if self.cache_timeouts:
                            self._timed_out[key] = now + self.timeout_ttl
                    elif self.cache_size:
                        self._timed_out.pop(key, None)
                        self._cache[key] = value
                        while len(self._cache) > self.cache_size:
                            self._cache.popitem(last=False)
                if len(self._timed_out) > self.cache_size:  # drop expired entries
                    self._timed_out = {k: t for k, t in self._timed_out.items() if t > now}
        if timeouts is not None:
            timeouts[:] = flags
        return out

    # -- public scoring API ------------------------------------------------------------------------

    def _math_key(self, completion: Any, gold: Any) -> tuple | None:
        try:
            if isinstance(gold, (int, float)) and not isinstance(gold, bool):
                gold = str(gold)
            gold_text = completion_text(gold)
            if not gold_text:
                return None
            gold_text = _clean(gold_text.strip())
            if not gold_text or len(gold_text) > self.max_answer_chars:
                return None
            found = extract_math_answer(completion, scan_chars=self.scan_chars)
            if found is None:
                return None
            kind, answer = found
            answer = answer.strip()
            if not answer or len(answer) > self.max_answer_chars or _has_hidden_characters(answer):
                return None
            if _HEDGE.search(answer) and not _HEDGE.search(gold_text):
                return None
            answer, gold_text = _normalize_answer(answer), _normalize_answer(gold_text)
            if _nesting_depth(answer) > self.max_nesting or _nesting_depth(gold_text) > self.max_nesting:
                return None
            if juxtaposed_numbers(answer) and not juxtaposed_numbers(gold_text):  # a list of numbers (12 13)
                return None
            return ("math", kind, answer, gold_text)
        except Exception:
            logger.debug("math pre-filter failed", exc_info=True)
            return None

    def math_rewards(self, completions: Sequence[Any], golds: Sequence[Any], *,
                     timeouts: list | None = None, timeout: float | None = None) -> list[float]:
        """Score a batch of math completions against gold answers in parallel; each reward is 0.0 or 1.0.
        ``timeouts``, if a list, is filled with one flag per completion: True where its 0.0 is a timeout.
        ``timeout``: seconds per attempt for this call (default the pool's), for a caller off the training's
        critical path (evaluation retries its timeouts with a long one)."""
        if len(completions) != len(golds):
            raise ValueError(f"{len(completions)} completions but {len(golds)} gold answers")
        keys = [self._math_key(c, g) for c, g in zip(completions, golds)]
        return self._run_cached(keys, lambda k: ("math", k[1:]), timeouts, timeout)

    def math_reward(self, completion: Any, gold: Any) -> float:
        """Score one math completion (see :func:`math_reward`)."""
        return self.math_rewards([completion], [gold])[0]

    def _rg_task(self, completion: Any, entry: Any) -> tuple[str, tuple] | None:
        try:
            entry = parse_reasoning_gym_entry(entry)
            if entry is None:
                return None
            answer = extract_reasoning_gym_answer(completion)
            if answer is None or len(answer) > self.max_rg_answer_chars:
                return None
            return ("reasoning_gym", (_clean(answer), entry))
        except Exception:
            logger.debug("reasoning gym pre-filter failed", exc_info=True)
            return None

    def reasoning_gym_rewards(self, completions: Sequence[Any], entries: Sequence[Any], *,
                              timeouts: list | None = None, timeout: float | None = None) -> list[float]:
        """Score a batch of Reasoning Gym completions with their datasets' scorers, in parallel. ``timeouts``, if a
        list, is filled with one flag per completion: True where its 0.0 is a timeout; ``timeout`` as for
        :meth:`math_rewards`."""
        if len(completions) != len(entries):
            raise ValueError(f"{len(completions)} completions but {len(entries)} entries")
        out = [0.0] * len(completions)
        tasks, where = [], []
        for i, (completion, entry) in enumerate(zip(completions, entries)):
            task = self._rg_task(completion, entry)
            if task is None:
                self.stats.prefiltered += 1
            else:
                tasks.append(task)
                where.append(i)
        late = [False] * len(tasks)
        flags = [False] * len(completions)
        for i, value, t in zip(where, self._run(tasks, timeout, timed_out=late), late):
            out[i], flags[i] = value, t
        if timeouts is not None:
            timeouts[:] = flags
        return out

    def reasoning_gym_reward(self, completion: Any, entry: Any) -> float:
        """Score one Reasoning Gym completion (see :func:`reasoning_gym_reward`)."""
        return self.reasoning_gym_rewards([completion], [entry])[0]
