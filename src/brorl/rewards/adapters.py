"""The plain reward functions on a shared default pool, and the TRL ``GRPOTrainer`` adapters."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from brorl.rewards.pool import DEFAULT_NUM_WORKERS, DEFAULT_TIMEOUT, RewardPool, _env_number

logger = logging.getLogger("brorl.rewards")

_default_pool: RewardPool | None = None
_default_kwargs: dict[str, Any] = {}
_default_lock = threading.Lock()


def get_default_pool() -> RewardPool:
    """The shared pool behind the module-level functions, created on first use.

    Its settings come from the last :func:`configure` call, else from ``BRORL_REWARD_WORKERS`` /
    ``BRORL_REWARD_TIMEOUT``, else the defaults (2 workers, 3 s).
    """
    global _default_pool
    with _default_lock:
        if _default_pool is None:
            kwargs = dict(_default_kwargs)
            kwargs.setdefault("num_workers", _env_number("BRORL_REWARD_WORKERS", DEFAULT_NUM_WORKERS, int))
            kwargs.setdefault("timeout", _env_number("BRORL_REWARD_TIMEOUT", DEFAULT_TIMEOUT, float))
            _default_pool = RewardPool(**kwargs)
        return _default_pool


def configure(**kwargs: Any) -> None:
    """Set the default pool's :class:`RewardPool` arguments (e.g. ``num_workers=4, timeout=5``).

    Closes the current default pool if there is one; the next call creates a new one lazily.
    """
    global _default_pool, _default_kwargs
    with _default_lock:
        old, _default_pool = _default_pool, None
        _default_kwargs = dict(kwargs)
    if old is not None:
        old.close()


def close() -> None:
    """Shut down the default pool (reaping its workers).  Safe to call repeatedly."""
    global _default_pool
    with _default_lock:
        old, _default_pool = _default_pool, None
    if old is not None:
        old.close()


def math_reward(completion: Any, gold: Any, *, pool: RewardPool | None = None) -> float:
    """1.0 if the completion's final answer equals ``gold`` under math-verify, else 0.0.

    The answer is the content of the last complete ``\\boxed{...}``; without one, the text after the last
    "answer is" / "answer:", else the last number.  It is compared with ``verify(gold, answer)`` (gold
    first -- math-verify is asymmetric).  ``completion`` may be a string or a list of chat messages (only
    the assistant's turns count); ``gold`` is the bare answer as in DeepScaleR ("\\frac{1}{2}", "0.5",
    "2\\sqrt{3}"), with or without ``$...$`` / ``\\boxed{}``.  Only the text after the last ``</think>`` is
    searched.  Decisions beyond math-verify (docs/evaluation.md, "Reward decisions"; ``tests/test_rewards.py``,
    ``tests/test_reward_probe.py``): the answer is read whole, so a list of values (``12 \\vee 13``, ``12 \\\\ 13``,
    ``12 13``) pays only against the same list; a hedged answer ("or", "maybe", "?"), a false numeric equation
    chain (``143 = 142``, also with arrows) and an answer with hidden characters (NUL, zero-width, bidi) score
    0.0; decimals are exact (``0.5000001`` is not 1/2); a percent sign is dropped (``50\\%`` is ``50``), Unicode
    digits are read as ASCII (``１２`` is 12), thousands groups joined (``1\\,000``).  Never raises, never hangs:
    garbage gives 0.0, and so does a timeout, reported as one (see :class:`RewardPool`).
    """
    return (pool or get_default_pool()).math_reward(completion, gold)


def reasoning_gym_reward(completion: Any, entry: Any, *, pool: RewardPool | None = None) -> float:
    """The Reasoning Gym scorer's reward in [0, 1] for the answer in the completion's ``<answer>`` tags.

    ``entry`` is the Reasoning Gym item (``{"question", "answer", "metadata": {"source_dataset", ...}}``,
    or its JSON string); the scorer is ``reasoning_gym.get_score_answer_fn(source_dataset)`` (the
    dataset's ``score_answer`` under its default config), run in the worker pool with the pool's
    timeout.  See :func:`extract_reasoning_gym_answer` for the tag fallbacks.  Never raises, never hangs.
    """
    return (pool or get_default_pool()).reasoning_gym_reward(completion, entry)


_GOLD_KEYS = ("answer", "solution", "gold", "ground_truth")


def _column(kwargs: dict, keys: Sequence[str], n: int, what: str) -> list:
    for key in keys:
        values = kwargs.get(key)
        if values is not None:
            values = list(values)
            if len(values) != n:
                raise ValueError(f"column {key!r} has {len(values)} values for {n} completions")
            return values
    raise ValueError(
        f"{what}: no {' / '.join(repr(k) for k in keys)} column among the reward kwargs "
        f"{sorted(k for k in kwargs if k not in ('trainer_state', 'log_extra', 'log_metric'))}"
    )


def report_timeouts(flags: Sequence[bool], what: str, log_metric: Any = None) -> None:
    """Say how many of a batch's rewards are 0.0 because verification ran out of time: the metric
    ``rewards/<what>_timeouts`` through TRL's ``log_metric`` (when the trainer passes one) and a warning when any
    did. A timeout is not a wrong answer, so it is never left silent."""
    n = int(sum(bool(f) for f in flags))
    if callable(log_metric):
        log_metric(f"rewards/{what}_timeouts", float(n))
    if n:
        logger.warning("%d of %d %s answers ran out of verification time: scored 0.0 and counted as timeouts "
                       "(rewards/%s_timeouts)", n, len(flags), what, what)


def _trl_math(pool: RewardPool | None, keys: Sequence[str], completions, kwargs: dict) -> list[float]:
    completions = list(completions if completions is not None else [])
    golds = _column(kwargs, keys, len(completions), "trl_math_reward")
    timeouts: list[bool] = []
    out = (pool or get_default_pool()).math_rewards(completions, golds, timeouts=timeouts)
    report_timeouts(timeouts, "math", kwargs.get("log_metric"))
    return out


def trl_math_reward(prompts=None, completions=None, **kwargs) -> list[float]:
    """TRL ``GRPOTrainer`` reward function: math-verify correctness (0.0/1.0) of each completion.

    Called by TRL as ``f(prompts=..., completions=..., completion_ids=..., trainer_state=...,
    log_extra=..., log_metric=..., **dataset_columns)``; the gold answers come from the first of the
    columns "answer", "solution", "gold", "ground_truth" that is present (``ValueError`` if none is).
    ``completions`` are strings or lists of chat messages.  Returns one float per completion, computed
    in parallel by the default pool.  A module-level function, so it pickles.
    """
    return _trl_math(None, _GOLD_KEYS, completions, kwargs)


def make_trl_math_reward(pool: RewardPool | None = None, answer_key: str | None = None) -> Callable[..., list[float]]:
    """Like :func:`trl_math_reward`, but bound to ``pool`` and/or reading the gold column ``answer_key``."""
    keys = (answer_key,) if answer_key else _GOLD_KEYS

    def trl_math_reward(prompts=None, completions=None, **kwargs) -> list[float]:
        """TRL reward function: math-verify correctness (0.0/1.0) of each completion's final answer."""
        return _trl_math(pool, keys, completions, kwargs)

    return trl_math_reward


def _rg_entries(kwargs: dict, n: int) -> list:
    if kwargs.get("entry") is not None:
        return _column(kwargs, ("entry",), n, "trl_reasoning_gym_reward")
    answers = _column(kwargs, ("answer",), n, "trl_reasoning_gym_reward")
    metadata = _column(kwargs, ("metadata",), n, "trl_reasoning_gym_reward")
    questions = kwargs.get("question")
    questions = list(questions) if questions is not None and len(questions) == n else [None] * n
    return [{"question": q, "answer": a, "metadata": m} for q, a, m in zip(questions, answers, metadata)]


def _trl_rg(pool: RewardPool | None, completions, kwargs: dict) -> list[float]:
    completions = list(completions if completions is not None else [])
    entries = _rg_entries(kwargs, len(completions))
    timeouts: list[bool] = []
    out = (pool or get_default_pool()).reasoning_gym_rewards(completions, entries, timeouts=timeouts)
    report_timeouts(timeouts, "reasoning_gym", kwargs.get("log_metric"))
    return out


def trl_reasoning_gym_reward(prompts=None, completions=None, **kwargs) -> list[float]:
    """TRL ``GRPOTrainer`` reward function: the Reasoning Gym scorer's reward in [0, 1] per completion.

    The dataset must carry either an ``entry`` column (the whole Reasoning Gym item, dict or JSON string)
    or ``answer`` + ``metadata`` columns (``metadata`` as a dict or, better, a JSON string: Arrow would
    otherwise merge the metadata structs of different tasks and fill missing keys with None); an optional
    ``question`` column is passed through.  ``ValueError`` if the columns are missing.
    """
    return _trl_rg(None, completions, kwargs)


def make_trl_reasoning_gym_reward(pool: RewardPool | None = None) -> Callable[..., list[float]]:
    """Like :func:`trl_reasoning_gym_reward`, but bound to ``pool``."""

    def trl_reasoning_gym_reward(prompts=None, completions=None, **kwargs) -> list[float]:
        """TRL reward function: the Reasoning Gym scorer's reward in [0, 1] for each completion."""
        return _trl_rg(pool, completions, kwargs)

    return trl_reasoning_gym_reward
