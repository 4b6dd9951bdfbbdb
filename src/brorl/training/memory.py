"""GPU memory plan of an RL arm, from the config, before any job starts.

Per GPU (one training process with its colocated vLLM engine, TRL ``vllm_mode="colocate"``)::

    trainer peak                                              + vLLM share + reserve  <=  GPU memory
    = static (weights, gradients, AdamW, reference model, FSDP2 buffers)
    + max(activation phase, optimizer step)

- **Static.** FSDP2 full shard over the arm's ``G`` GPUs (``rl.memory_plan.gpus_per_arm``): fp32 master weights
  (accelerate upcasts trainable parameters under bf16 mixed precision), fp32 gradients, AdamW's two fp32 moments,
  each ``/ G``; the frozen reference model (``beta > 0``) in bf16 ``/ G``; the unsharded bf16 parameters and
  gradients of two decoder layers (the current one and the prefetched one) and the LM head that TRL's fused head
  gathers whole (``DTensor.full_tensor``). On one process (``G = 1``, the CPU check) nothing is sharded and there
  are no extra buffers. AdamW's step adds one temporary: all local parameters with ``foreach`` (CUDA), the
  largest parameter without (the CPU).
- **Activations** of one micro-batch of ``T = micro x sequence`` tokens (:func:`layer_activation_bytes`, counted
  from what autograd keeps in transformers' Llama / Qwen2 decoder layer: see its docstring). Without
  checkpointing every layer keeps them; with it (``rl.recipe.gradient_checkpointing``) a layer keeps only its
  input and one layer is recomputed in the backward pass. Plus the final norm, the 4-D boolean attention mask
  transformers builds for a padded batch (``micro x sequence^2`` bytes; GRPO batches are padded) and TRL 1.16's
  fused LM head, which never materialises the ``(T, vocab)`` logits: it scores tiles of 4,096 tokens x 32,768
  vocabulary entries and in its backward holds fp32 gradients of the hidden states (``T x hidden``) and of the
  whole head (``vocab x hidden``).
- **vLLM** takes ``vllm_gpu_memory_utilization`` of the GPU: its bf16 weights, ``rl.memory_plan.vllm_overhead_gib``
  (its profiling activations, CUDA graphs, sampler) and the KV cache, ``layers x 2 x kv_heads x head_dim x 2``
  bytes per token. A sequence of ``vllm_max_model_length`` tokens must fit (vLLM refuses to start otherwise); a
  group of N completions at full length that does not fit at once runs in waves (slower, not a failure).

The formulas are checked against measured peaks on the CPU (``benchmarks/memory_plan_check.py``,
``docs/results/memory_plan/``); the GPU terms (FSDP2 buffers, vLLM) are not measured here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from brorl.config import PROJECT_ROOT

GIB = 1024 ** 3
HEAD_TOKEN_TILE = 4096
"""Tokens per tile of TRL 1.16's fused LM head (``trl.kernels.chunked_logprob.TOKEN_CHUNK_SIZE``)."""
HEAD_VOCAB_TILE = 32768
"""Vocabulary entries per tile (``trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE``)."""
HEAD_FOLD_TEMPORARIES = 8.25
"""fp32 tiles alive at once in the torch fallback of the fused head's backward fold
(``trl.kernels.chunked_logprob._backward_tile``: y, z, log_p, p, grad and the three temporaries of the entropy
line, plus the boolean target mask at a quarter)."""
FSDP_LAYERS_UNSHARDED = 2
"""Decoder layers whose parameters FSDP2 holds unsharded at once (the current one and the prefetched one)."""


@dataclass(frozen=True)
class Architecture:
    """A Llama / Qwen2 decoder's sizes (transformers config keys)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    """Biases on q, k and v (Qwen2: true; Llama: the config's ``attention_bias``)."""
    head_dim: int = 0
    """0: hidden_size / num_attention_heads."""
    source: str = ""

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.hd

    @property
    def layer_params(self) -> int:
        h, kv, q = self.hidden_size, self.kv_dim, self.num_attention_heads * self.hd
        attn = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if self.attention_bias else 0)
        return attn + 3 * h * self.intermediate_size + 2 * h

    @property
    def largest_param(self) -> int:
        """Elements of the largest parameter tensor (the embedding, the LM head or an MLP matrix)."""
        return max(self.vocab_size * self.hidden_size, self.hidden_size * self.intermediate_size,
                   self.hidden_size * self.num_attention_heads * self.hd)

    @property
    def params(self) -> int:
        head = 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size
        return self.vocab_size * self.hidden_size + self.num_hidden_layers * self.layer_params + self.hidden_size + head

    @property
    def kv_bytes_per_token(self) -> int:
        """vLLM's bf16 KV cache per token: layers x 2 (K and V) x kv_heads x head_dim x 2 bytes."""
        return self.num_hidden_layers * 2 * self.num_key_value_heads * self.hd * 2

    @classmethod
    def from_mapping(cls, d: dict, source: str = "") -> "Architecture":
        missing = [k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                               "vocab_size") if k not in d]
        if missing:
            raise ValueError(f"{source or 'architecture'}: missing {', '.join(missing)}")
        qwen2 = d.get("model_type") == "qwen2"
        return cls(hidden_size=int(d["hidden_size"]), num_hidden_layers=int(d["num_hidden_layers"]),
                   num_attention_heads=int(d["num_attention_heads"]),
                   num_key_value_heads=int(d.get("num_key_value_heads") or d["num_attention_heads"]),
                   intermediate_size=int(d["intermediate_size"]), vocab_size=int(d["vocab_size"]),
                   tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
                   attention_bias=bool(d.get("attention_bias", qwen2)), head_dim=int(d.get("head_dim") or 0),
                   source=source)

    @classmethod
    def from_file(cls, path: str | Path) -> "Architecture":
        """A transformers ``config.json`` or a YAML of the same keys (``benchmarks/qwen2_1p5b.yaml``); a relative
        path is read from the project root."""
        p = Path(path)
        p = p if p.is_absolute() else PROJECT_ROOT / p
        if not p.is_file():
            raise ValueError(f"no such file {p}")
        text = p.read_text()
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
        if not isinstance(data, dict):
            raise ValueError(f"{p}: not a mapping of config keys")
        return cls.from_mapping(data, str(path))


def layer_activation_bytes(arch: Architecture, act_bytes: int) -> int:
    """Bytes per token that one decoder layer keeps for the backward pass (no checkpointing), counted from
    transformers 5.17's Llama / Qwen2 layer under eager autograd, ``act_bytes`` per element (2: bf16, 4: fp32):

    - each RMSNorm (2): its input in fp32 (the input itself in fp32, an upcast copy in bf16: 4 h), the normalised
      x in the model's dtype (kept by the weight product) and its output (kept by the next linear): 2 a h, and the
      fp32 inverse RMS (4 bytes);
    - attention: q after RoPE, K and V repeated to every query head (``repeat_kv``: with a padding mask
      transformers does not use sdpa's GQA), the sdpa output and its contiguous copy (o_proj's input): 5 a h
      (for a model with head_dim x heads = h), and sdpa's fp32 log-sum-exp per head;
    - the SwiGLU MLP: gate, up, silu(gate) and the product: 4 a i.
    """
    h, q = arch.hidden_size, arch.num_attention_heads * arch.hd
    a = act_bytes
    norms = 2 * (4 * h + 2 * a * h + 4)
    attention = a * (3 * q + 2 * q) + 4 * arch.num_attention_heads
    return norms + attention + 4 * a * arch.intermediate_size


def layer_grad_transient_bytes(arch: Architecture, act_bytes: int) -> int:
    """Bytes per token of the gradients alive at once inside one layer's backward pass: the MLP's three
    intermediate-sized gradients and two hidden-sized ones (the layer's output gradient and the one it builds)."""
    return act_bytes * (3 * arch.intermediate_size + 2 * arch.hidden_size)


@dataclass(frozen=True)
class TrainSetting:
    """One training process: its micro-batch, sequence length and precision."""

    micro_batch: int
    seq_len: int
    checkpointing: bool
    shards: int = 1
    """GPUs FSDP2 shards over (1: no sharding)."""
    bf16: bool = False
    """bf16 compute (activations at 2 bytes); False: fp32 throughout."""
    foreach: bool = False
    """AdamW's step runs torch's ``foreach`` implementation, torch's default on CUDA: one temporary the size of all
    (local) parameters; False (torch's default on the CPU): parameter by parameter, one temporary the size of the
    largest parameter."""
    master_bytes: int = 4
    """Bytes per parameter of the weights the optimizer updates, of their gradients and of each AdamW moment (4:
    fp32, FSDP2's mixed precision keeps fp32 masters; 2: a model cast to bf16 whole, as the GPU check's)."""
    reference_model: bool = False
    padded: bool = True
    """The batch has padding, so transformers builds a 4-D boolean mask (GRPO batches always do)."""
    float_mask: bool = False
    """Each layer's sdpa call converts the boolean mask into an additive one in the compute dtype and autograd keeps
    it (torch's ``convert_boolean_attn_mask``; whether CUDA's memory-efficient kernel does so depends on the torch
    version): ``micro x seq^2 x a`` bytes per layer without checkpointing, one copy with it. Not seen on the CPU
    (the measured peaks leave no room for it); assumed on the GPU, to be checked by the GPU check."""
    triton: bool = False
    """TRL's fused LM head folds each logits tile with a Triton kernel in place (CUDA); False: with torch ops
    (the CPU), which hold :data:`HEAD_FOLD_TEMPORARIES` fp32 tile-sized temporaries in the backward pass."""

    @property
    def tokens(self) -> int:
        return self.micro_batch * self.seq_len

    @property
    def act_bytes(self) -> int:
        return 2 if self.bf16 else 4


def training_terms(arch: Architecture, s: TrainSetting) -> dict[str, int]:
    """Bytes per process of every term of the training side; ``peak`` is the plan's peak."""
    P, G, a, T, L = arch.params, s.shards, s.act_bytes, s.tokens, arch.num_hidden_layers
    h, V = arch.hidden_size, arch.vocab_size
    m = s.master_bytes
    t = {"weights": math.ceil(P * m / G), "gradients": math.ceil(P * m / G), "optimizer": math.ceil(2 * P * m / G),
         # the frozen reference model stays in its load dtype (accelerate's FSDP2 upcasts trainable parameters only)
         "reference_model": math.ceil(P * a / G) if s.reference_model else 0}
    # FSDP2 (G > 1) gathers two layers' parameters and their gradients in the compute dtype, and the fused head
    # gathers the whole LM head
    t["fsdp_buffers"] = (FSDP_LAYERS_UNSHARDED * arch.layer_params * 2 * a + V * h * a) if G > 1 else 0
    per_layer = layer_activation_bytes(arch, a)
    float_mask = s.micro_batch * s.seq_len ** 2 * a if (s.padded and s.float_mask) else 0
    kept = L * T * a * h if s.checkpointing else L * (T * per_layer + float_mask)
    final = T * (4 * h + 3 * a * h)  # final norm (fp32 input, normalised x, output) + the head's gathered hidden states
    mask = s.micro_batch * s.seq_len ** 2 if s.padded else 0
    t["activations"] = kept + final + mask
    head = min(T, HEAD_TOKEN_TILE) * min(V, HEAD_VOCAB_TILE) * a
    fold = 0 if s.triton else HEAD_FOLD_TEMPORARIES * min(T, HEAD_TOKEN_TILE) * min(V, HEAD_VOCAB_TILE) * 4
    head_backward = T * h * 4 + V * h * 4 + head + math.ceil(fold)
    layer_backward = (T * per_layer + float_mask if s.checkpointing else 0) + T * layer_grad_transient_bytes(arch, a)
    t["backward_transient"] = max(head_backward, layer_backward)
    t["optimizer_step_transient"] = math.ceil(P * m / G) if s.foreach else arch.largest_param * m
    static = sum(t[k] for k in ("weights", "gradients", "optimizer", "reference_model", "fsdp_buffers"))
    t["peak"] = static + max(t["activations"] + t["backward_transient"], t["optimizer_step_transient"])
    return t


# ---------------------------------------------------------------------------------------------- the config's plan
@dataclass(frozen=True)
class MemoryPlanSettings:
    """``rl.memory_plan``: the hardware an arm runs on and the model's declared architecture."""

    gpu_memory_gib: float
    """Memory of one GPU (H100 80 GB: 79.1 GiB as torch reports it)."""
    gpus_per_arm: int
    """GPUs FSDP2 shards an arm over (the smallest allocation the profile runs an arm on)."""
    architecture: str
    """File with the model's transformers config keys (a config.json or a YAML such as benchmarks/qwen2_1p5b.yaml)."""
    prompt_tokens: int
    """Longest prompt (tokens); the trained sequence is prompt + max_completion_length."""
    reserve_gib: float = 2.0
    """CUDA context, NCCL buffers, allocator fragmentation."""
    vllm_overhead_gib: float = 2.0
    """vLLM's memory besides weights and KV cache (profiling activations, CUDA graphs, sampler)."""

    @classmethod
    def from_dict(cls, d: dict) -> "MemoryPlanSettings":
        from brorl.settings import settings_kwargs

        return cls(**settings_kwargs(cls, d, "rl.memory_plan"))


@dataclass
class ArmPlan:
    arm: str
    setting: TrainSetting
    terms: dict[str, int]
    rows: list[tuple[str, float, str]] = field(default_factory=list)
    total: float = 0.0
    limit: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return not self.problems


def arm_plans(config: dict) -> list[ArmPlan]:
    """The memory plan of every arm stage of ``rl.arms`` (one per distinct setting), from ``rl.memory_plan``."""
    from brorl.training.arms import arm_plan
    from brorl.training.settings import RLSettings

    rl = config["rl"]
    mp = MemoryPlanSettings.from_dict(rl["memory_plan"])
    arch = Architecture.from_file(mp.architecture)
    out = []
    for name, arm in arm_plan(rl).items():
        for k, stage in enumerate(arm.stages):
            s = RLSettings.from_dict(stage)
            out.append(plan_arm(f"{name}" + (f"[{k}]" if len(arm.stages) > 1 else ""), s, arch, mp))
    return out


def process_micro_batch(s, processes: int) -> int:
    """Completions per forward/backward on one process (RLSettings.batch_sizes's rule)."""
    local = s.samples_per_step // processes if processes > 1 and s.samples_per_step % processes == 0 \
        else s.samples_per_step
    mini = max(local // s.mini_batches, 1)
    return max(d for d in range(1, min(mini, s.micro_batch_size) + 1) if mini % d == 0)


def plan_arm(name: str, s, arch: Architecture, mp: MemoryPlanSettings) -> ArmPlan:
    """One arm stage (RLSettings ``s``) on the declared GPUs."""
    seq = mp.prompt_tokens + s.max_completion_length
    setting = TrainSetting(micro_batch=process_micro_batch(s, mp.gpus_per_arm), seq_len=seq,
                           checkpointing=s.gradient_checkpointing, shards=mp.gpus_per_arm, bf16=s.bf16,
                           reference_model=s.beta > 0, triton=True, foreach=True,  # CUDA: Triton fold, foreach AdamW
                           float_mask=True)  # a per-layer additive mask: assumed until the GPU check measures it
    t = training_terms(arch, setting)
    limit = mp.gpu_memory_gib * GIB
    vllm = s.vllm_gpu_memory_utilization * limit if s.generation_engine == "vllm" else 0.0
    p = ArmPlan(name, setting, t, limit=limit)
    g = lambda x: x / GIB  # noqa: E731
    ck = "on" if setting.checkpointing else "off"
    p.rows = [
        ("weights (fp32 master, sharded)", g(t["weights"]),
         f"{arch.params / 1e9:.3f}B params ({arch.source}) x 4 B / G = {mp.gpus_per_arm}"),
        ("gradients (fp32, sharded)", g(t["gradients"]), "params x 4 B / G"),
        ("AdamW moments (fp32, sharded)", g(t["optimizer"]), "params x 8 B / G"),
        ("reference model (bf16, sharded)", g(t["reference_model"]), f"beta = {s.beta}: params x 2 B / G"),
        ("FSDP2 unsharded layers + LM head", g(t["fsdp_buffers"]), f"{FSDP_LAYERS_UNSHARDED} layers + head, bf16"),
        ("activations", g(t["activations"]),
         f"micro {setting.micro_batch} x {seq} tokens, checkpointing {ck}, + 4-D mask"),
        ("backward transient", g(t["backward_transient"]), "fused LM head grads or one layer's recompute + grads"),
    ]
    trainer = t["peak"]
    p.rows.append(("trainer peak", g(trainer), ""))
    reserve = mp.reserve_gib * GIB
    if vllm:
        weights_v = arch.params * 2
        kv = vllm - weights_v - mp.vllm_overhead_gib * GIB
        model_len = s.vllm_max_model_length or seq
        per_seq = model_len * arch.kv_bytes_per_token
        concurrent = int(kv // per_seq) if kv > 0 else 0
        group = (mp.prompt_tokens + s.n_rollouts * s.max_completion_length) * arch.kv_bytes_per_token
        p.rows += [
            ("vLLM share", g(vllm), f"vllm_gpu_memory_utilization {s.vllm_gpu_memory_utilization}"),
            ("  of which weights (bf16)", g(weights_v), ""),
            ("  of which overhead", mp.vllm_overhead_gib, "rl.memory_plan.vllm_overhead_gib"),
            ("  of which KV cache", g(max(kv, 0)),
             f"{arch.kv_bytes_per_token} B/token: {concurrent} sequences of {model_len} tokens at once"),
            ("  KV for one group at full length", g(group),
             f"N = {s.n_rollouts} x {s.max_completion_length} + prompt (shared prefix)"
             + ("" if group <= max(kv, 0) else f": runs in {math.ceil(group / max(kv, 1))} waves")),
        ]
        if concurrent < 1:
            p.problems.append(
                f"vLLM's KV cache ({g(max(kv, 0)):.1f} GiB) cannot hold one sequence of {model_len} tokens "
                f"({g(per_seq):.2f} GiB): raise rl.recipe.vllm_gpu_memory_utilization or lower "
                "rl.recipe.vllm_max_model_length")
    if vllm and s.vllm_max_model_length and s.vllm_max_model_length < seq:
        p.problems.append(
            f"rl.memory_plan.prompt_tokens + rl.recipe.max_completion_length = {seq} tokens is more than "
            f"rl.recipe.vllm_max_model_length = {s.vllm_max_model_length}: vLLM would cut the completions")
    p.rows.append(("reserve", mp.reserve_gib, "rl.memory_plan.reserve_gib"))
    p.total = g(trainer + vllm + reserve)
    p.rows.append(("total per GPU", p.total, f"of {mp.gpu_memory_gib} GiB (rl.memory_plan.gpu_memory_gib)"))
    if trainer + vllm + reserve > limit:
        p.problems.append(
            f"needs {p.total:.1f} GiB per GPU, more than rl.memory_plan.gpu_memory_gib = {mp.gpu_memory_gib}: "
            f"lower rl.recipe.micro_batch_size (process micro-batch {setting.micro_batch}), set "
            f"rl.recipe.gradient_checkpointing: true (now {s.gradient_checkpointing}), lower "
            f"rl.recipe.vllm_gpu_memory_utilization ({s.vllm_gpu_memory_utilization}) or "
            f"rl.recipe.max_completion_length ({s.max_completion_length}), or raise rl.memory_plan.gpus_per_arm")
    return p


def format_table(plans: list[ArmPlan]) -> str:
    """Markdown tables, one per arm stage."""
    out = []
    for p in plans:
        out += [f"arm {p.arm}: {'fits' if p.fits else 'DOES NOT FIT'}", "",
                "| term | GiB | from |", "|---|---:|---|"]
        out += [f"| {name} | {value:.2f} | {how} |" for name, value, how in p.rows]
        out.append("")
    return "\n".join(out)


def checkpointing_errors(rl: dict) -> list[str]:
    """Activation checkpointing is declared once, as ``rl.recipe.gradient_checkpointing`` (passed to TRL's
    GRPOConfig): transformers' Trainer refuses it together with the accelerate config's
    ``fsdp_activation_checkpointing``, so that one must stay false."""
    name = (rl.get("launch") or {}).get("accelerate_config")
    if not name:
        return []
    from brorl.training.launch import accelerate_config_path

    path = accelerate_config_path(name)
    fsdp = (yaml.safe_load(path.read_text()) or {}).get("fsdp_config") or {}
    if fsdp.get("fsdp_activation_checkpointing"):
        shown = path.relative_to(PROJECT_ROOT) if path.is_relative_to(PROJECT_ROOT) else path
        return [f"rl.launch.accelerate_config: {shown} "
                "sets fsdp_activation_checkpointing: true; checkpointing is rl.recipe.gradient_checkpointing "
                "(transformers refuses both at once) [rule: checkpointing declared once]"]
    return []


def memory_plan_errors(config: dict) -> list[str]:
    """The config check's errors (brorl.pipeline.config_errors): every arm that cannot fit, with its table.
    Only for configs that declare GPUs (``rl.memory_plan``)."""
    rl = config.get("rl")
    if not isinstance(rl, dict):
        return []
    errors = checkpointing_errors(rl)
    if "memory_plan" not in rl:
        return errors
    try:
        plans = arm_plans(config)
    except (TypeError, ValueError) as err:
        return [f"rl.memory_plan: {err} [rule: brorl.training.memory]"]
    bad = [p for p in plans if not p.fits]
    return errors + [f"rl.memory_plan: arm {p.arm}: " + "; ".join(p.problems) + " [rule: the arm fits its GPUs]\n"
            + format_table([p]) for p in bad]
