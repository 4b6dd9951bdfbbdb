"""The ``lookup`` family: prompt-specific answers, so training on one prompt says (almost) nothing about another
(weak transfer; issue 29).

Issue 29's tail-pool comparison found N=16 lifting its own hard tail 0.02 -> 0.42 because ``add`` transfers strongly
across prompts: an update on one sum teaches carrying for all of them. BroRL's argument is about prompts whose
answer must be found *on that prompt*. Here the answer of ``x<q>=`` (``q`` a ``lookup_digits``-digit string) is a
keyed hash of the prompt, reduced to one of ``lookup_answers`` integers::

    answer(q) = blake2b(key = lookup_key, data = prompt) mod lookup_answers

No rule links ``q`` to its answer, and answers are uniform and independent across prompts, so another prompt's
answer carries no information (the model can learn the format and the answer marginal, then only memorise). A
model that knows the format and the marginal puts p ~ 1 / lookup_answers on the right one: 1/100 by default, inside
BroRL's band (1/512, 1/16) [our choice: near the band's geometric centre, 1/90.5]. The reward is the suite's exact
check (:func:`brorl.tasks.core.verify`): 1 for exactly the answer then the end token, 0 otherwise. How little
training on one half of the prompts moves the other half is measured by :mod:`brorl.study.transfer`.
"""

from __future__ import annotations

import hashlib

import numpy as np

PREFIX = "x"
SUFFIX = "="


def lookup_width(s) -> int:
    return len(PREFIX) + s.lookup_digits + len(SUFFIX)


def lookup_answer(prompt: str, s) -> str:
    """The one correct answer of a ``lookup`` prompt (keyed hash of the prompt text; see the module)."""
    key = int(s.lookup_key).to_bytes(8, "big")
    h = hashlib.blake2b(prompt.encode(), key=key, digest_size=8).digest()
    return str(int.from_bytes(h, "big") % int(s.lookup_answers))


def draw_lookup(rng: np.random.Generator, s) -> tuple[str, str, int]:
    """One ``lookup`` prompt: (prompt, its answer, q). brorl.tasks.families wraps it into a Problem."""
    q = int(rng.integers(0, 10**s.lookup_digits))
    prompt = f"{PREFIX}{q:0{s.lookup_digits}d}{SUFFIX}"
    return prompt, lookup_answer(prompt, s), q


def lookup_universe(s) -> tuple[int, int]:
    return 0, int(s.lookup_answers) - 1


def settings_errors(s) -> list[str]:
    """The family's own settings (``TaskSettings.__post_init__``)."""
    errors = []
    if not 1 <= int(s.lookup_digits) <= 9:
        errors.append(f"tasks.lookup_digits: {s.lookup_digits} is not in 1..9")
    if not 2 <= int(s.lookup_answers) <= 10**6:
        errors.append(f"tasks.lookup_answers: {s.lookup_answers} is not in 2..1000000")
    if not 0 <= int(s.lookup_key) < 2**32:
        errors.append(f"tasks.lookup_key: {s.lookup_key} is not in 0..4294967295")
    return errors
