"""Settings of the tiny model, its supervised warm start and the difficulty estimate."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


from brorl.settings import settings_kwargs


@dataclass(frozen=True)
class ModelSettings:
    """The tiny causal LM (a Hugging Face ``LlamaForCausalLM`` or ``Qwen3ForCausalLM``)."""

    arch: str = "llama"
    """``llama`` (LlamaForCausalLM) or ``qwen3`` (Qwen3ForCausalLM; adds q/k RMS norms). Not qwen2:
    transformers 5 swaps in its own tokenizer class for qwen2 models."""
    hidden_size: int = 128
    """Width d (the pilot's GPT: 128)."""
    num_layers: int = 3
    """Decoder layers (the pilot: 3)."""
    num_heads: int = 4
    """Attention heads (the pilot: 4); key/value heads are the same number (no GQA)."""
    intermediate_size: int = 384
    """SwiGLU width: 3 x 128 x 384 = 147k weights per layer, close to the pilot's 4x GELU MLP (131k)."""
    max_position_embeddings: int = 64
    """Context length reported to lm-eval and generate (prompts are about 10-13 tokens)."""
    rope_theta: float = 10_000.0
    """RoPE base."""
    tie_word_embeddings: bool = True
    """Share input and output embeddings (the pilot did)."""
    attn_implementation: str = "eager"
    """Attention kernel used while training. ``eager`` was a little faster than ``sdpa`` on 2 CPU cores at
    this size (0.32 vs 0.35 s per SFT step; sampling 0.39 vs 0.40 s). transformers does not store it in
    config.json, so other loaders get ``sdpa`` unless they pass ``attn_implementation``."""

    @classmethod
    def from_dict(cls, d: dict | None) -> "ModelSettings":
        return cls(**settings_kwargs(cls, d, "model"))


@dataclass(frozen=True)
class SFTSettings:
    """Supervised warm start: teacher forcing with the loss on answer (+ end) tokens only.

    Training examples are drawn fresh every step from the ``train`` region of the task suite's prompt
    space (disjoint from validation and test by construction; see :mod:`brorl.tasks.core`), as in the
    pilot. The checkpoint is chosen by validation pass@1, computed exactly (mean teacher-forced Q_pos
    at temperature 1, which equals the expected sampled pass@1), not by a fixed step: the pilot saw a
    sharp phase transition in carry learning, so a fixed step lands at a random point on it.
    """

    model: ModelSettings = field(default_factory=ModelSettings)
    """Architecture (see :class:`ModelSettings`)."""
    max_steps: int = 1500
    """Upper bound on optimiser steps (training normally stops at the band, see ``select_target``)."""
    batch_size: int = 256
    """Examples per step (the pilot: 256)."""
    lr: float = 2e-3
    """AdamW peak learning rate (the pilot: 2e-3), constant after warm-up."""
    warmup_steps: int = 100
    """Linear warm-up steps (the pilot: 100)."""
    weight_decay: float = 0.01
    """AdamW weight decay (the pilot: 0.01)."""
    betas: tuple[float, float] = (0.9, 0.98)
    """AdamW betas (the pilot: 0.9, 0.98)."""
    grad_clip: float = 1.0
    """Gradient-norm clip (the pilot: 1.0)."""
    probe_weight: float = 0.15
    """Share of each batch drawn from the probe families (the rest is split evenly over the
    single-answer families). Probe examples use one correct answer drawn uniformly."""
    eval_every: int = 20
    """Steps between exact validation evaluations (each costs about 0.3 s). The transition is sharp
    (validation pass@1 0.17 -> 0.29 -> 0.52 at steps 250 / 300 / 350 in a trial)."""
    fine_eval_every: int = 5
    """Steps between evaluations once validation pass@1 reaches ``fine_eval_from`` (0: never switch)."""
    fine_eval_from: float = 0.15
    """Validation pass@1 from which evaluations become ``fine_eval_every`` apart, to land near the target
    on the steep part of the transition."""
    select_tasks: tuple[str, ...] = ()
    """Families whose validation pass@1 drives the selection (empty: every single-answer family)."""
    select_band: tuple[float, float] = (0.25, 0.40)
    """Acceptable validation pass@1 band for the warm start (the pilot's 0.25-0.40)."""
    select_rule: str = "max_tail"
    """How the kept checkpoint is chosen among the evaluated ones.
    ``max_tail``: train until validation pass@1 exceeds the band's upper edge, then keep the in-band
    checkpoint with the largest exact tail share (prompts with 1/512 < Q_pos < 1/16; ties: closest to
    ``select_target``). ``target``: stop at the first evaluation with pass@1 >= ``select_target`` and keep
    the evaluated checkpoint closest to it. Either way, with no evaluation in the band the closest one
    is kept and ``in_band`` is reported false."""
    select_target: float = 0.30
    """Target validation pass@1 (see ``select_rule``). Above 1 with ``target``: train ``max_steps``."""
    max_seconds: float = 300.0
    """Wall-clock cap on the training loop (0: none); the closest checkpoint so far is kept."""
    checkpoint_every: int = 100
    """Steps between resumable states (model, optimiser, RNG, step) in ``<out_dir>.state/``."""
    keep_state: bool = False
    """Keep ``<out_dir>.state/`` after a successful run (it is removed by default)."""
    seed: int = 0
    """Model initialisation and the training-example stream."""
    threads: int = 2
    """torch intra-op threads (0: leave torch's default)."""
    log_every: int = 50
    """Steps between progress lines."""

    def __post_init__(self):
        if self.select_rule not in ("max_tail", "target"):
            raise ValueError(f"select_rule must be 'max_tail' or 'target', got {self.select_rule!r}")

    @classmethod
    def from_dict(cls, d: dict | None) -> "SFTSettings":
        d = settings_kwargs(cls, d, "SFT")
        if "model" in d and not isinstance(d["model"], ModelSettings):
            d["model"] = ModelSettings.from_dict(d["model"])
        return cls(**d)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class DifficultySettings:
    """Per-prompt pass rates from sampled completions (the difficulty histogram)."""

    samples: int = 512
    """Completions per prompt (the pilot: 512)."""
    temperature: float = 1.0
    """Sampling temperature (pure softmax sampling: no top-k / top-p)."""
    seed: int = 0
    """Sampling seed."""
    chunk_samples: int = 1024
    """Completions per sampler call (the pilot found ~1-2k per call fastest on 2 cores)."""
    threads: int = 2
    """torch intra-op threads (0: leave torch's default)."""

    @classmethod
    def from_dict(cls, d: dict | None) -> "DifficultySettings":
        return cls(**settings_kwargs(cls, d, "difficulty"))
