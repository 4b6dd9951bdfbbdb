"""A character-level tokenizer for the tiny tasks, trained with ``tokenizers``.

A BPE model trained with its vocabulary capped at the base alphabet plus the special tokens, so it
learns no merges: every character is one token. That keeps each answer string's tokenization unique,
which is what makes teacher-forced answer probabilities exact (see :mod:`brorl.models.scoring`).
Wrapped in ``PreTrainedTokenizerFast`` with end-of-sequence, pad and unknown tokens and a chat template
that renders a user turn as its bare text (the task prompts carry their own format) and an assistant
turn as its text plus the end token.
"""

from __future__ import annotations

from typing import Iterable

from tokenizers import Tokenizer, decoders, models, trainers
from transformers import PreTrainedTokenizerFast

from brorl.tasks.core import EOS_TOKEN, PAD_TOKEN, UNK_TOKEN
from brorl.tasks.families import ALPHABET

SPECIAL_TOKENS = (PAD_TOKEN, EOS_TOKEN, UNK_TOKEN)

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}{{ message['content'] }}{{ eos_token }}"
    "{%- else -%}{{ message['content'] }}{%- endif -%}"
    "{%- endfor -%}"
)


def build_tokenizer(corpus: Iterable[str], alphabet: Iterable[str] = ALPHABET) -> PreTrainedTokenizerFast:
    """Train the character-level tokenizer on ``corpus`` (task texts) over ``alphabet``."""
    alphabet = sorted(set(alphabet))
    tok = Tokenizer(models.BPE(unk_token=UNK_TOKEN))
    tok.decoder = decoders.Fuse()
    trainer = trainers.BpeTrainer(vocab_size=len(SPECIAL_TOKENS) + len(alphabet),
                                  special_tokens=list(SPECIAL_TOKENS), initial_alphabet=alphabet,
                                  limit_alphabet=len(alphabet), show_progress=False)
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN,
                                   unk_token=UNK_TOKEN, padding_side="left", model_max_length=64)
    fast.chat_template = CHAT_TEMPLATE
    return fast
