"""Settings of one RL stage (ProRLv2 recipe, BroRL rollout scaling).

Values marked [paper] come from BroRL / ProRLv2 (see ``shared/brief/paper.md`` §3), [nemo] from NeMo-RL's
``examples/configs/prorlv2.yaml`` (paper.md §6), [pilot] from the plain-torch pilot of the tiny regime
(``shared/brief/pilot.md``); the rest are choices for the tiny CPU profile.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from brorl.settings import settings_kwargs

LR_RULES = ("sqrt", "constant")
GENERATION_ENGINES = ("prefix_tree", "shared_prompt", "hf", "vllm")
TOKEN_DRAWS = ("multinomial", "inverse_cdf")  # brorl.models.sampling.draw_tokens (a test holds the two equal)
PROMPT_KV = ("copied", "shared")  # brorl.models.kv_cache.PROMPT_KV (a test holds the two equal)
VLLM_IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
PLATEAU_RULES = ("best", "slope")
PLATEAU_CONFIDENCE = 0.95  # [our choice] the slope rule's one-sided upper confidence bound
VLLM_WEIGHT_SYNCS = ("trl", "reload")


@dataclass(frozen=True)
class RLSettings:
    """One RL stage: PPO-clip with clip-higher, REINFORCE++-baseline advantages, dynamic sampling, k2 KL."""

    n_rollouts: int = 16
    """N, completions per prompt (TRL ``num_generations``). ProRL: 16; BroRL: 512 [paper, Table 1]."""
    prompts_per_step: int = 64
    """Prompts in the post-filter training batch of one step. ProRL: 512 at N=16; BroRL: 128 at N=512
    [paper, Table 1; that it counts kept prompts is inferred from Table 2's pass rates]; pilot: 64."""
    steps: int = 100
    """RL steps in this stage (an upper bound when ``sample_budget`` is set; 0: from the budget alone)."""
    sample_budget: int = 0
    """Generated samples (before filtering, as BroRL Table 1 counts them) after which the stage stops;
    0: no budget. Must hold at least one step (prompts_per_step x n_rollouts)."""
    time_budget_s: float = 0.0
    """Wall-clock seconds of training (rollouts, updates, probes; summed over resumes) after which the stage
    stops at the end of a step; 0: no time budget. For comparisons at equal wall time rather than equal samples
    (the N-scaling study); the number of steps then depends on the machine and its load."""
    lr_rule: str = "sqrt"
    """``sqrt``: eta = eta0 * sqrt(B / B0) [paper, BroRL §3.1, after Krizhevsky 2014]; ``constant``: eta = eta0.
    B counts samples per step (prompts_per_step x n_rollouts); counting prompts would lower the BroRL rate."""
    eta0: float = 3e-4
    """Base learning rate eta0 at B0 samples per step ([pilot]: 3e-4 at 1,024; ProRL v1: 2e-6 for 1.5B)."""
    b0: int = 1024
    """Reference batch B0 in samples per step ([pilot]: 16 x 64; ProRL: 16 x 512 = 8,192)."""
    epsilon_low: float = 0.2
    """PPO clip: the ratio is clipped below at 1 - epsilon_low (ProRLv2: 0.2 [paper])."""
    epsilon_high: float = 0.28
    """Clip-higher: the ratio is clipped above at 1 + epsilon_high (ProRLv2: 0.28 [paper]; NeMo 0.27)."""
    beta: float = 1e-4
    """KL coefficient of the k2 penalty 1/2 (log pi - log pi_ref)^2 ([nemo] 1e-4, type k2); 0: no KL term
    and no reference model."""
    temperature: float = 1.0
    """Rollout temperature (ProRL v1: 1.2 [paper]; [pilot]: 1.0). The loss scores log-probs at it too."""
    dynamic_sampling: bool = True
    """Drop groups whose N rewards are all equal and refill until ``prompts_per_step`` groups are kept
    (DAPO; ProRLv2 [paper]). False: train on every group of one round (the pass rate is still logged)."""
    max_rounds: int = 10
    """Cap on generation rounds per step ([nemo] dynamic_sampling_max_gen_batches: 10). At the cap the step
    trains on the groups kept so far."""
    round_prompts: int = 0
    """Prompts per refill round; 0: as many as the pass rate so far predicts are missing (generated samples
    then stay near kept / pass rate, as BroRL Tables 1-2 imply); prompts_per_step: DAPO's full batches."""
    mini_batches: int = 1
    """PPO mini-batches (optimizer steps) per RL step; the rollouts are reused, so ratios leave 1 from the
    second one on (ProRL v1: 4 [paper]). BroRL keeps their number fixed as N grows [paper]."""
    merge_duplicates: bool = False
    """Train on one row per distinct (prompt, completion) of the kept groups, weighted by its count, instead of
    the N rows: identical rows have identical advantages, ratios and KL, so the update is the same (the token
    normaliser counts every original row, and the logged token means weigh a row by its count, so the logs are
    the N rows' up to float order); filtered-out rows are not fed through the model at all. Needs
    ``mini_batches: 1`` (the rows are not shuffled into PPO mini-batches). Its cost then grows with the number
    of distinct completions, not with N (the N-scaling study's large batches)."""
    micro_batch_size: int = 64
    """Completions per forward/backward pass (memory only; the largest divisor of the mini-batch not above
    this is used)."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of keeping them (TRL / transformers
    ``gradient_checkpointing``, non-reentrant): a layer then keeps only its input. Memory only, at about a third
    more compute; the paper profile needs it at 16k-token completions (brorl.training.memory plans it). Under
    FSDP2 it is this key, never also ``fsdp_activation_checkpointing`` (transformers refuses both at once)."""
    weight_decay: float = 0.0
    """AdamW weight decay ([pilot]: 0; NeMo's inherited default 0.01)."""
    adam_betas: tuple[float, float] = (0.9, 0.98)
    """AdamW betas ([pilot])."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip ([pilot])."""
    reset_optimizer: bool = False
    """At the stage start: False keeps the previous stage's AdamW moments when ``<init_model_dir>/optimizer.pt``
    exists (ProRLv2 reference reset [paper]); True starts AdamW fresh (ProRL v1 hard reset [paper])."""
    generation_engine: str = "prefix_tree"
    """``prefix_tree``: sample the N completions of a prompt as a prefix tree, one forward row per distinct
    partial completion with the N draws split over next tokens by a multinomial (same law as N iid samples;
    ``brorl.models.sampling.sample_token_ids_tree``); ``shared_prompt``: prefill each prompt once and share its
    KV cache over the N rows (``sample_token_ids``); ``hf``: TRL's ``model.generate`` on N repeated rows;
    ``vllm``: TRL's vLLM path (GPU only)."""
    token_draw: str = "multinomial"
    """How ``prefix_tree`` / ``shared_prompt`` draw a next token from its probabilities
    (``brorl.models.sampling.draw_tokens``): ``multinomial`` (torch.multinomial, the tiny profile's draw, so its
    runs replay) or ``inverse_cdf`` (the same law; ~0.3 s less per decode step at 256 rows of a 49k-token
    vocabulary on CPU, where torch.multinomial draws an exponential per vocabulary entry on one thread)."""
    prompt_kv: str = "copied"
    """Where ``prefix_tree`` / ``shared_prompt`` keep the prompt's keys and values while decoding
    (``brorl.models.kv_cache``): ``copied`` (a copy in every row, attention by the model's own kernel; the tiny
    profile's setting, so its runs replay) or ``shared`` (once per prompt, attention split into the shared prompt and
    each row's own tokens, merged by log-sum-exp: the same attention up to rounding; 1.25-1.6x the prefix tree's
    tokens/s at N = 256, 128 new tokens, on SmolLM2 and 2 CPU cores, issue 31)."""
    vllm_importance_sampling: bool = True
    """With vLLM rollouts, correct the engine/trainer mismatch by importance sampling (ProRLv2 [paper])."""
    vllm_is_mode: str = "token_mask"
    """TRL ``vllm_importance_sampling_mode``; ``token_mask`` is NeMo's ``icepop`` [nemo]."""
    vllm_is_min: float = 0.5
    """Lower bound on the engine ratio ([nemo] truncated_importance_sampling_ratio_min)."""
    vllm_is_max: float = 5.0
    """Upper bound on the engine ratio ([nemo] truncated_importance_sampling_ratio)."""
    vllm_gpu_memory_utilization: float = 0.3
    """Share of GPU memory vLLM's colocated engine takes for weights and KV cache (TRL's default 0.3); the rest
    is the trainer's."""
    vllm_max_model_length: int = 0
    """vLLM's context length (prompt + completion); 0: the model's own maximum."""
    vllm_weight_sync: str = "trl"
    """How the policy's weights reach the colocated engine before each step's rollouts: ``trl``, TRL's own sync
    (``model.load_weights`` per parameter; GPU hosts); ``reload``, vLLM's layer-wise ``reload_weights`` with the
    same tensors (vLLM's CPU build, whose repacked linear weights TRL's sync cannot load; issue 28)."""
    vllm_engine_args: dict = field(default_factory=dict)
    """Extra ``vllm.LLM`` arguments for the colocated engine beyond TRL's (e.g. the CPU build's
    ``enforce_eager``); empty on GPU hosts."""
    bf16: bool = False
    """Train in bfloat16 mixed precision (GPU; the paper profile). False: fp32, as the CPU profiles."""
    max_completion_length: int = 0
    """New tokens per completion (0: ``brorl.tasks.max_new_tokens`` of the trained families)."""
    tasks: tuple[str, ...] = ()
    """Task families trained on (empty: every family under ``data_dir``)."""
    probe_every: int = 10
    """Steps between exact probes (Q_pos on validation prompts, multi-answer mass); 0: only at the end."""
    probe_prompts: int = 200
    """Validation prompts per family used by the probes (the first ones of each file)."""
    plateau_window: int = 0
    """Plateau stop (the ProRL saturation stage): stop once the best validation pass@1 (exact: the mean Q_pos of
    the probe prompts) of the last ``plateau_window`` probes is not above the best of all earlier probes by more
    than ``plateau_delta``. 0: no plateau stop (``steps`` / ``sample_budget`` alone end the stage)."""
    plateau_delta: float = 0.0
    """Smallest gain in validation pass@1 that counts as improvement for the plateau stop."""
    plateau_rule: str = "best"
    """``best``: the best-of-window rule above; ``slope``: a measured plateau (issue 29): stop once the one-sided
    95% upper confidence bound of the OLS slope of validation pass@1 over the last ``plateau_window`` probes (per
    probe, i.e. per ``probe_every`` steps; t with window - 2 df) is below ``plateau_slope``. Noise widens the bound,
    so a noisy curve does not stop early; ``plateau_delta`` is not used."""
    plateau_slope: float = 0.0
    """The slope rule's threshold: gain in validation pass@1 per probe that still counts as improving."""
    checkpoint_every: int = 10
    """Steps between resumable checkpoints (the last step always gets one)."""
    keep_checkpoints: bool = False
    """Keep ``<out_dir>/checkpoints`` after the stage has finished (removed by default)."""
    chunk_samples: int = 1024
    """Completions per shared-prompt sampler call ([pilot]: 1-2k per call fastest on 2 cores)."""
    seed: int = 0
    """Prompt order, refill draws and sampling."""
    threads: int = 2
    """torch intra-op threads (0: leave torch's default)."""

    def __post_init__(self):
        def bad(key, msg):
            raise ValueError(f"{key}: {msg} (got {getattr(self, key)!r})")

        if self.n_rollouts < 2:
            bad("n_rollouts", "needs at least 2 rollouts per prompt (a group baseline needs two samples)")
        if self.prompts_per_step < 1:
            bad("prompts_per_step", "must be >= 1")
        if self.mini_batches < 1:
            bad("mini_batches", "must be >= 1")
        if self.prompts_per_step % self.mini_batches:
            bad("mini_batches", f"must divide prompts_per_step = {self.prompts_per_step} so that every PPO "
                                "mini-batch holds whole groups of n_rollouts samples")
        if self.merge_duplicates and self.mini_batches != 1:
            bad("merge_duplicates", "needs mini_batches = 1 (merged rows are not split into PPO mini-batches)")
        if self.steps < 0:
            bad("steps", "must be >= 0")
        if self.sample_budget < 0:
            bad("sample_budget", "must be >= 0")
        if self.time_budget_s < 0:
            bad("time_budget_s", "must be >= 0")
        if self.steps == 0 and self.sample_budget == 0:
            bad("steps", "set steps or sample_budget (a time budget alone could run unbounded)")
        if self.sample_budget and self.sample_budget < self.samples_per_step:
            bad("sample_budget", f"is smaller than one step (prompts_per_step x n_rollouts = "
                                 f"{self.samples_per_step} samples)")
        if self.lr_rule not in LR_RULES:
            bad("lr_rule", f"must be one of {LR_RULES}")
        if not self.eta0 > 0:
            bad("eta0", "must be > 0")
        if self.b0 < 1:
            bad("b0", "must be >= 1")
        if not 0 <= self.epsilon_low < 1:
            bad("epsilon_low", "must lie in [0, 1)")
        if self.epsilon_high < 0:
            bad("epsilon_high", "must be >= 0")
        if self.beta < 0:
            bad("beta", "must be >= 0")
        if not self.temperature > 0:
            bad("temperature", "must be > 0")
        if self.max_rounds < 1:
            bad("max_rounds", "must be >= 1")
        if self.round_prompts < 0:
            bad("round_prompts", "must be >= 0")
        if self.micro_batch_size < 1:
            bad("micro_batch_size", "must be >= 1")
        if self.generation_engine not in GENERATION_ENGINES:
            bad("generation_engine", f"must be one of {GENERATION_ENGINES}")
        if self.token_draw not in TOKEN_DRAWS:
            bad("token_draw", f"must be one of {TOKEN_DRAWS}")
        if self.prompt_kv not in PROMPT_KV:
            bad("prompt_kv", f"must be one of {PROMPT_KV}")
        if self.vllm_is_mode not in VLLM_IS_MODES:
            bad("vllm_is_mode", f"must be one of {VLLM_IS_MODES}")
        if not 0 <= self.vllm_is_min < self.vllm_is_max:
            bad("vllm_is_min", f"must lie in [0, vllm_is_max = {self.vllm_is_max})")
        if not 0 < self.vllm_gpu_memory_utilization < 1:
            bad("vllm_gpu_memory_utilization", "must lie in (0, 1)")
        if self.vllm_max_model_length < 0:
            bad("vllm_max_model_length", "must be >= 0")
        if self.vllm_weight_sync not in VLLM_WEIGHT_SYNCS:
            bad("vllm_weight_sync", f"must be one of {VLLM_WEIGHT_SYNCS}")
        if not isinstance(self.vllm_engine_args, dict):
            bad("vllm_engine_args", "must be a mapping of vllm.LLM arguments")
        if self.max_completion_length < 0:
            bad("max_completion_length", "must be >= 0")
        if self.probe_every < 0:
            bad("probe_every", "must be >= 0")
        if self.probe_prompts < 1:
            bad("probe_prompts", "must be >= 1")
        if self.plateau_window < 0:
            bad("plateau_window", "must be >= 0")
        if self.plateau_window and not self.probe_every:
            bad("probe_every", "must be >= 1 when plateau_window is set (the plateau rule reads the probes)")
        if self.plateau_delta < 0:
            bad("plateau_delta", "must be >= 0")
        if self.plateau_rule not in PLATEAU_RULES:
            bad("plateau_rule", f"must be one of {PLATEAU_RULES}")
        if self.plateau_rule == "slope" and self.plateau_window and self.plateau_window < 3:
            bad("plateau_window", "must be >= 3 for plateau_rule slope (a slope's confidence bound needs 1 df)")
        if self.plateau_rule == "slope" and not self.plateau_slope > 0:
            bad("plateau_slope", "must be > 0 for plateau_rule slope (the bound of a flat curve is above 0)")
        if self.checkpoint_every < 1:
            bad("checkpoint_every", "must be >= 1")
        if self.chunk_samples < 1:
            bad("chunk_samples", "must be >= 1")

    @classmethod
    def from_dict(cls, d: dict | None) -> "RLSettings":
        return cls(**settings_kwargs(cls, d, "RL"))

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def samples_per_step(self) -> int:
        """B: samples in the post-filter batch of one step (prompts_per_step x N)."""
        return self.prompts_per_step * self.n_rollouts

    def plateaued(self, history: list[float]) -> bool:
        """The plateau rule on the validation pass@1 of the probes so far (oldest first)."""
        w = self.plateau_window
        if self.plateau_rule == "slope":
            return bool(w and len(history) >= w and slope_upper_bound(history[-w:]) < self.plateau_slope)
        if not w or len(history) <= w:
            return False
        return max(history[-w:]) <= max(history[:-w]) + self.plateau_delta

    @property
    def max_steps(self) -> int:
        """Steps this stage runs at most (a budget stops it earlier: every step generates >= B samples)."""
        by_budget = self.sample_budget // self.samples_per_step if self.sample_budget else math.inf
        return int(min(self.steps or math.inf, by_budget))

    @property
    def micro_batch(self) -> int:
        """Completions per forward/backward on one process: the largest divisor of the mini-batch <=
        micro_batch_size."""
        return self.batch_sizes()["per_device_train_batch_size"]

    def batch_sizes(self, processes: int = 1) -> dict[str, int]:
        """TRL's per-process batch arguments, computed once for ``processes`` processes (``brorl launch``): one RL
        step is ``prompts_per_step`` prompts over *all* processes (BroRL's batch is global), each generating and
        keeping ``prompts_per_step / P`` groups; per process the step's B / P samples split into ``mini_batches``
        optimizer steps of micro-batches (the largest divisor of the mini-batch not above ``micro_batch_size``)."""
        if self.prompts_per_step % processes:
            raise ValueError(f"prompts_per_step = {self.prompts_per_step} must be divisible by the {processes} "
                             "processes (each process generates and keeps an equal share of the step's groups)")
        local = self.samples_per_step // processes
        if local % self.mini_batches:
            raise ValueError(f"{local} samples per process do not split into mini_batches = {self.mini_batches}")
        mini = local // self.mini_batches
        micro = max(d for d in range(1, min(mini, self.micro_batch_size) + 1) if mini % d == 0)
        return {"per_device_train_batch_size": micro, "gradient_accumulation_steps": mini // micro,
                "steps_per_generation": local // micro}


def slope_upper_bound(values: list[float], confidence: float = PLATEAU_CONFIDENCE) -> float:
    """One-sided upper confidence bound of the OLS slope of ``values`` against their index (0, 1, ...):
    b + t_{confidence, n-2} x se(b), se(b) = sqrt(SSE / (n - 2) / Sxx). Needs at least 3 values."""
    from scipy import stats

    n = len(values)
    if n < 3:
        raise ValueError(f"slope_upper_bound: needs at least 3 values (got {n})")
    x = [float(i) for i in range(n)]
    xm, ym = sum(x) / n, sum(values) / n
    sxx = sum((xi - xm) ** 2 for xi in x)
    b = sum((xi - xm) * (yi - ym) for xi, yi in zip(x, values)) / sxx
    sse = sum((yi - ym - b * (xi - xm)) ** 2 for xi, yi in zip(x, values))
    return float(b + stats.t.ppf(confidence, n - 2) * math.sqrt(sse / (n - 2) / sxx))
