"""Verifiable rewards for BroRL: math (math-verify) and Reasoning Gym, hang-proof and crash-proof.

What
----
Binary / bounded rewards for RL with verifiable rewards (paper section 3 and section 5, "Graders"):

* :func:`math_reward` -- 1.0 if the completion's final answer (the last ``\\boxed{...}``, or failing
  that the text after "answer is" / the last number), read whole, is equivalent to the gold answer according
  to Hugging Face math-verify 0.9.0's comparison, else 0.0 (the decisions beyond math-verify: docs/evaluation.md,
  "Reward decisions").
* :func:`reasoning_gym_reward` -- the Reasoning Gym dataset's own scorer applied to the text inside the
  last ``<answer>...</answer>`` pair (the ProRL convention), clamped to ``[0, 1]``.
* :func:`trl_math_reward` / :func:`trl_reasoning_gym_reward` -- adapters with TRL 1.16's reward-function
  calling convention (``f(prompts=..., completions=..., completion_ids=..., **dataset_columns)`` returning
  one float per completion), for ``GRPOTrainer(reward_funcs=[...])``.

Why a process pool
------------------
A grader sits inside the training loop, so it must never hang and never raise.  math-verify (sympy,
latex2sympy/ANTLR) can spend unbounded time on adversarial answers -- ``\\boxed{9^{9^{9^{9}}}}`` makes
sympy compute a 370-million-digit integer inside C code where no Python signal can interrupt it -- and
its own timeouts use ``signal.alarm``, which only works on the main thread.  So every verification runs
in a small pool of worker processes managed here (:class:`RewardPool`, on the generic
:class:`brorl.rewards.deadline_pool.DeadlinePool`):

* each task has a *hard* deadline enforced by the parent (the worker is SIGKILLed and replaced) and a
  *soft* deadline inside the worker (an interval timer raises out of Python code, so the common slow
  case ends without a restart); a task that times out is retried once with a deadline twice as long, then
  scores 0.0 as a *timeout* (flagged per answer, counted, logged as ``rewards/<kind>_timeouts``);
* a worker that dies (segfault, OOM kill, ``os._exit``) is detected through its pipe / process sentinel
  and replaced; the pool keeps working;
* workers are started with ``forkserver`` (``spawn`` as fallback), never plain ``fork``: the training
  process has torch threads.  The fork server preloads math-verify, so a replacement worker is ready in
  a fraction of a second;
* each worker gets an address-space limit (``RLIMIT_AS``) so a runaway big-integer computation fails
  with ``MemoryError`` instead of swapping the machine;
* batch calls are spread over all workers in parallel; identical (answer, gold) pairs are verified once
  (in-batch de-duplication plus an LRU cache in the parent).

Cheap pre-filtering happens in the parent before anything is sent to a worker: only the tail of the
completion is scanned, the boxed answer is found with a linear-time brace scanner (no backtracking
regex), and over-long or absurdly nested answers score 0.0 without touching math-verify.  So a
100k-character completion costs about a millisecond of parent time.

Garbage in (non-strings, NUL bytes, lone surrogates, unbalanced LaTeX, missing metadata) gives 0.0.
Configuration *mistakes* (a TRL dataset with no gold-answer column) raise ``ValueError`` with a clear
message, because silently training on zero rewards would be worse.

Usage notes
-----------
* The module-level functions share one lazily created default pool (:func:`get_default_pool`); change
  its settings with :func:`configure` (or the environment variables ``BRORL_REWARD_WORKERS``,
  ``BRORL_REWARD_TIMEOUT``, read when the default pool is created) and shut it down with :func:`close`.
  All pools are also shut down at interpreter exit (workers are reaped; no zombies).
* Workers do not re-import the parent's ``__main__`` (unlike plain multiprocessing children), so a
  training script's heavy imports are not repeated per worker, and scripts need no ``__main__`` guard
  for the pool's sake.
* Pools are thread-safe and fork-aware: concurrent callers share all the workers (one of them at a time
  drives the scheduler for everyone's tasks), and a forked child that inherits a pool starts its own
  workers instead of talking to the parent's.
* A task that runs out of time (the soft limit in the worker or the hard one in the parent) is a
  *timeout*, not an answer: it is counted, retried once with a fresh deadline, and never cached as a
  reward (only remembered as a timeout for a while, see ``cache_timeouts``).
"""


from brorl.rewards.adapters import (  # _column: the code reward's TRL adapter (brorl.sandbox) reads columns too
    _column,  # noqa: F401
    close,
    configure,
    get_default_pool,
    make_trl_math_reward,
    make_trl_reasoning_gym_reward,
    math_reward,
    reasoning_gym_reward,
    trl_math_reward,
    trl_reasoning_gym_reward,
)
from brorl.rewards.extraction import (
    completion_text,
    extract_boxed,
    extract_math_answer,
    extract_reasoning_gym_answer,
    final_line_answer,
    last_answer_tag,
)
from brorl.rewards.graders import _TASKS  # noqa: F401 - the production task table (tests check its contents)
from brorl.rewards.graders import parse_reasoning_gym_entry
from brorl.rewards.pool import DEFAULT_NUM_WORKERS, DEFAULT_TIMEOUT, PoolStats, RewardPool

__all__ = [
    "RewardPool",
    "PoolStats",
    "math_reward",
    "reasoning_gym_reward",
    "trl_math_reward",
    "trl_reasoning_gym_reward",
    "make_trl_math_reward",
    "make_trl_reasoning_gym_reward",
    "extract_boxed",
    "extract_math_answer",
    "extract_reasoning_gym_answer",
    "final_line_answer",
    "last_answer_tag",
    "completion_text",
    "parse_reasoning_gym_entry",
    "get_default_pool",
    "configure",
    "close",
    "DEFAULT_TIMEOUT",
    "DEFAULT_NUM_WORKERS",
]
