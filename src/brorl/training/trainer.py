"""The BroRL / ProRLv2 algorithm on TRL's ``GRPOTrainer`` (trl 1.16), in one module.

The recipe (BroRL §3.1 and the ProRLv2 post; ``shared/brief/paper.md`` §3 and §6), per RL step:

    rollout     N completions y_1..y_N ~ pi_old(.|x) for each prompt x                  (N = n_rollouts)
    filter      keep x iff its N rewards are not all equal: 0 < sum_i 1[y_i correct] < N (dynamic sampling)
                and generate further rounds until the batch holds P kept prompts (at most max_rounds)
    advantage   R~_i = R_i - mean_group(R),   A_i = (R~_i - mean_batch R~) / std_batch R~  (REINFORCE++-baseline,
                over the kept batch)
    loss        L = sum_t [ -min(r_t A, clip(r_t, 1 - eps_low, 1 + eps_high) A) + beta k2_t ] / (#tokens)
                r_t = pi_theta(y_t) / pi_old(y_t),  k2_t = 1/2 (log pi_theta(y_t) - log pi_ref(y_t))^2
                (token-level mean as DAPO / TRL ``loss_type="dapo"``; clip-higher: eps_high > eps_low)
    reference   pi_ref := the policy at the stage start; a new stage is the reference reset
    rate        eta = eta0 sqrt(B / B0), B = P N samples per step (or constant)

What TRL provides (used as is): the training loop (accelerate, AdamW, gradient accumulation, micro-batching,
checkpoint save / resume of model, optimizer, scheduler, RNG and data position), generation (``_generate``:
``model.generate`` or vLLM with its sampling log-probs), reward calls (``_calculate_rewards``), log-probs and
entropies through its fused LM head (``_get_per_token_logps_and_entropies``), the reference model, and the vLLM
truncated / masked importance-sampling options (passed through).

What is built here, and why not on TRL's hooks:

- **Dynamic sampling.** TRL generates, scores and normalises one fixed generation batch inside one method
  (``_generate_and_score_completions``) and only logs zero-variance groups (``frac_reward_zero_std``). Filtering
  must sit between scoring and normalisation and may take several generation rounds, so that method is
  replaced below by one assembled from TRL's parts (text prompts only: no tools, images or environments).
  The first round takes TRL's sampler batch; refill rounds draw prompts uniformly (seeded by seed, step and
  round, so a resumed run redraws them without extra state), by default only as many as the pass rate so far
  predicts are missing. The batch keeps TRL's fixed shape (prompts_per_step x N rows, split into micro-batches
  by TRL): if the round cap is hit first, filtered-out groups fill it with zero loss weight.
- **Advantages.** TRL's ``scale_rewards="batch"`` is ``(R - mean_group R) / std_batch(R)``: the std of the raw
  rewards (within- plus between-group spread), over the whole generation batch including zero-variance
  groups. REINFORCE++-baseline divides by the std of the group-centred rewards R~ over the kept batch. The two
  differ by a per-batch factor; ``tests/test_training.py`` runs TRL's own code to show it.
- **Loss.** TRL's KL is k3 (``exp(ref - logp) - (ref - logp) - 1``), hard-coded in ``_compute_loss``; ProRLv2
  uses k2, so ``_compute_loss`` is rewritten (clip-higher surrogate + k2, TRL's "dapo" normaliser; TRL's
  importance-weighted KL option ``use_bias_correction_kl`` is not applied).
- **Grouped generation** (``generation_engine`` ``prefix_tree`` or ``shared_prompt``): TRL's HF path runs
  ``model.generate`` on the N repeated rows of each prompt (N prefills, no shared cache).
  ``brorl.models.sample_token_ids`` prefills each prompt once and shares its KV cache over the N rows;
  ``sample_token_ids_tree`` also merges rows that are still identical (one row per distinct partial
  completion, the N draws split over next tokens by a multinomial: the same law as N iid samples), so its cost
  grows with the number of distinct completions, not with N (``benchmarks/bench_generation.py``).
- **Optimizer hand-over** between stages (kept or reset), crash-safe checkpoint marking.
- **Several processes** (``brorl launch``, accelerate): TRL sizes its generation batch per process and
  normalises per process; here one RL step is ``prompts_per_step`` prompts over all processes
  (:meth:`RLSettings.batch_sizes`), each process fills its share by dynamic sampling in lockstep with the others
  (refill draws keyed by the process index), and the REINFORCE++ batch statistics, the token normaliser, the
  pass rate and the sample count (which the budget stop reads) are sums over all processes. On one process
  every computation is the one above (``tests/test_multiprocess.py`` runs two CPU processes).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from trl import GRPOTrainer
from trl.trainer.utils import pad

from brorl.models.sampling import SAMPLERS
from brorl.training.fsdp import load_optimizer_state
from brorl.training.settings import RLSettings

CHECKPOINT_DONE = "brorl_checkpoint.json"  # written last: a checkpoint folder without it is incomplete


# --------------------------------------------------------------------------------------- the algorithm

def learning_rate(s: RLSettings) -> float:
    """eta = eta0 sqrt(B / B0) with B = prompts_per_step x N samples (BroRL §3.1), or eta0."""
    if s.lr_rule == "sqrt":
        return s.eta0 * math.sqrt(s.samples_per_step / s.b0)
    return s.eta0


def group_has_signal(rewards: torch.Tensor) -> torch.Tensor:
    """[G, N] rewards -> [G] bool: the N rewards are not all equal (0 < #correct < N for 0/1 rewards)."""
    return rewards.max(dim=1).values != rewards.min(dim=1).values


def reinforce_pp_advantages(rewards: torch.Tensor, n: int, eps: float = 1e-6) -> torch.Tensor:
    """REINFORCE++-baseline: R~ = R - mean_group(R), A = (R~ - mean_batch R~) / std_batch(R~).

    ``rewards`` is [G * N], groups contiguous; pass the batch *after* dynamic sampling. std is unbiased
    (Bessel), as torch / NeMo / TRL's ``nanstd``."""
    grouped = rewards.view(-1, n)
    centred = (grouped - grouped.mean(dim=1, keepdim=True)).flatten()  # R~
    return (centred - centred.mean()) / (centred.std() + eps)


def global_reinforce_pp_advantages(rewards: torch.Tensor, n: int, sum_across: Callable[[torch.Tensor], torch.Tensor],
                                   eps: float = 1e-6) -> torch.Tensor:
    """:func:`reinforce_pp_advantages` when the kept batch is spread over several processes: each holds whole
    groups, so R~ is local; the batch mean and unbiased std of R~ come from the sums (count, sum, sum of squares,
    float64) added over the processes by ``sum_across`` (every process must call it, with 0 rows too)."""
    grouped = rewards.view(-1, n).double()
    centred = (grouped - grouped.mean(dim=1, keepdim=True)).flatten() if grouped.numel() else grouped.flatten()
    stats = sum_across(torch.stack([torch.tensor(float(centred.numel()), dtype=torch.float64, device=centred.device),
                                    centred.sum(), (centred * centred).sum()]))
    count, total, squares = stats.tolist()
    if count < 2:
        return torch.zeros_like(rewards)
    mean = total / count
    std = math.sqrt(max(squares - count * mean * mean, 0.0) / (count - 1))
    return ((centred - mean) / (std + eps)).to(rewards.dtype)


def check_batch(args, s: RLSettings) -> None:
    """The batch arguments were sized for the processes that run them (:meth:`RLSettings.batch_sizes`, through
    ``stage.grpo_config``): one RL step is ``prompts_per_step`` prompts over all processes."""
    want = s.batch_sizes(args.world_size)
    got = {k: getattr(args, k) for k in want}
    if got != want or args.generation_batch_size != s.samples_per_step:
        raise ValueError(f"the trainer's batch arguments {got} (generation batch {args.generation_batch_size}) are "
                         f"not those of {args.world_size} process(es), {want}: build them with "
                         "brorl.training.stage.grpo_config(..., processes=P)")


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, eps_low: float,
                      eps_high: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token PPO-clip loss -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A) and the clipped-token masks."""
    ratio = torch.exp(logp - old_logp)  # r_t = pi_theta / pi_old
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    loss = -torch.min(ratio * adv, clipped * adv)
    low = (ratio < 1 - eps_low) & (adv < 0)  # the clip is active: no gradient from these tokens
    high = (ratio > 1 + eps_high) & (adv > 0)
    return loss, low, high


def k2_kl(logp: torch.Tensor, ref_logp: torch.Tensor, input_clamp: float = 20.0,
          output_clamp: float = 10.0) -> torch.Tensor:
    """k2 = 1/2 (log pi - log pi_ref)^2 per token (ProRLv2), clamped as NeMo (kl_input / output_clamp_value)."""
    d = torch.clamp(logp - ref_logp, -input_clamp, input_clamp)
    return torch.clamp(0.5 * d * d, max=output_clamp)


@dataclass
class DynamicSamplingResult:
    kept: list
    """Groups with signal, at most ``needed``, in generation order."""
    filler: list
    """Groups without signal that pad the batch to ``needed`` when the round cap is hit (trained with zero
    loss weight, so the batch keeps TRL's fixed shape)."""
    rounds: int
    generated_groups: int
    passing_groups: int

    @property
    def pass_rate(self) -> float:
        """dynamic_sampling_pass_rate = groups with signal / groups generated (BroRL Table 2)."""
        return self.passing_groups / max(self.generated_groups, 1)


def refill_prompts(missing: int, passing: int, generated: int, cap: int) -> int:
    """Prompts for the next round: as many as the pass rate so far predicts will fill the batch (1..cap)."""
    if passing == 0:
        return cap
    return max(1, min(cap, math.ceil(missing * generated / passing)))


def dynamic_sampling(generate_round: Callable[[int, int], tuple[torch.Tensor, list]], needed: int,
                     max_rounds: int, enabled: bool = True, round_prompts: int = 0,
                     sync: Callable[[int, int, int], tuple[int, int, int]] | None = None) -> DynamicSamplingResult:
    """DAPO dynamic sampling: call ``generate_round(r, prompts) -> (rewards [G, N], G groups)`` for r = 0, 1, ...
    until ``needed`` groups with signal are collected or ``max_rounds`` rounds have run; extra kept groups are
    discarded. Round 0 has ``needed`` prompts; refills ``round_prompts`` (DAPO: ``needed``) or, with 0, the
    :func:`refill_prompts` estimate, so that generated samples stay close to kept / pass rate (the ratio
    BroRL Tables 1-2 imply). Disabled: one round, every group kept (the pass rate is still counted).

    Several processes (``sync``): each collects ``needed`` (its share) and ``sync(missing, generated, passing)``
    returns (the largest missing count, generated and passing groups summed over the processes); every process
    then runs the same rounds with the same refill size (the generation and reward calls are collective) until
    no process misses a group; a process already full discards what it generates meanwhile."""
    kept, dropped, generated, passing, rounds = [], [], 0, 0, 0
    sync = sync or (lambda missing, gen, ok: (missing, gen, ok))
    missing, gen_all, pass_all = needed, 0, 0
    for rounds in range(1, (max_rounds if enabled else 1) + 1):
        size = needed if rounds == 1 else (round_prompts or refill_prompts(missing, pass_all, gen_all, needed))
        rewards, groups = generate_round(rounds - 1, size)
        signal = group_has_signal(rewards).tolist()
        generated += len(groups)
        passing += sum(signal)
        for group, ok in zip(groups, signal):
            (kept if ok or not enabled else dropped).append(group)
        missing, gen_all, pass_all = sync(max(needed - len(kept), 0), generated, passing)
        if missing <= 0:
            break
    kept = kept[:needed]
    return DynamicSamplingResult(kept, dropped[: needed - len(kept)], rounds, generated, passing)


# --------------------------------------------------------------------------------------- the trainer

@dataclass
class _Sample:
    prompt_ids: list[int]
    completion_ids: list[int]
    sampling_logps: list[float] | None
    reward: float


def merge_duplicate_rows(kept: list[list[_Sample]], n: int, batch: list[_Sample]):
    """One row per distinct completion of each kept group, weighted by how often it was drawn, then weight-0
    filler rows (a one-token copy of the first row) up to ``len(batch)`` rows (TRL's fixed batch shape).

    Returns (rows, weights, rows that carry weight, index of each merged row's first draw in the kept N-row
    batch). Identical draws of one group share prompt, completion and reward, hence advantage, ratio and KL: the
    weighted row gives the update of the N rows."""
    rows, weights, first = [], [], []
    for g, group in enumerate(kept):
        seen: dict[tuple, int] = {}
        for j, x in enumerate(group):
            key = tuple(x.completion_ids)
            if key in seen:
                weights[seen[key]] += 1.0
            else:
                seen[key] = len(rows)
                rows.append(x)
                weights.append(1.0)
                first.append(g * n + j)
    n_rows = len(rows)
    template = (rows or batch)[0]
    filler = _Sample(template.prompt_ids, template.completion_ids[:1], None if template.sampling_logps is None
                     else template.sampling_logps[:1], 0.0)
    rows += [filler] * (len(batch) - n_rows)
    weights += [0.0] * (len(batch) - n_rows)
    return rows, weights, n_rows, first


@dataclass
class StageState:
    """Stage bookkeeping saved with every checkpoint (``brorl_checkpoint.json``)."""

    elapsed_s: float = 0.0
    generated_samples: int = 0
    extra: dict = field(default_factory=dict)


class BroRLTrainer(GRPOTrainer):
    """``GRPOTrainer`` with dynamic sampling, REINFORCE++-baseline advantages, clip-higher + k2 loss.

    Extra arguments: ``settings`` (:class:`RLSettings`), ``init_optimizer`` (a path to a previous stage's
    ``optimizer.pt`` whose AdamW moments are loaded unless ``settings.reset_optimizer``)."""

    def __init__(self, *args, settings: RLSettings, init_optimizer: str | Path | None = None, **kwargs):
        self.settings = settings
        self.init_optimizer = init_optimizer
        self.stage_state = StageState()
        self.last_rollout: dict = {}
        self.vllm_weight_syncs = 0
        if kwargs.get("args") is not None:  # one RL step = prompts_per_step prompts over all processes
            check_batch(kwargs["args"], settings)
        with _extra_engine_args(settings.vllm_engine_args if settings.generation_engine == "vllm" else {}):
            super().__init__(*args, **kwargs)
        if self.is_fsdp_enabled and settings.generation_engine in SAMPLERS:
            # each process decodes until its own rows end; FSDP all-gathers weights in every forward, so the
            # processes must run the same number of forwards (TRL's HF path: generate(synced_gpus); vLLM)
            raise ValueError(f"generation_engine {settings.generation_engine!r} cannot run under FSDP (the "
                             "processes would decode different numbers of steps); use 'hf' or 'vllm'")
        if self.use_vllm and settings.vllm_weight_sync == "reload":
            self.vllm_generation.sync_weights = self._reload_engine_weights

    # ----- vLLM's CPU build: the policy's weights reach the engine through vLLM's layer-wise reload
    def _reload_engine_weights(self):
        """In place of TRL's colocated ``sync_weights`` (``vllm_weight_sync: reload``): the same tensors under the
        same names (TRL's iterator: FSDP gathering, PEFT merging), loaded by ``brorl.models.vllm_cpu.reload_weights``."""
        from brorl.models.vllm_cpu import reload_weights

        gen = self.vllm_generation
        reload_weights(gen.llm, gen._iter_named_params())
        self.vllm_weight_syncs += 1

    # ----- rollout: dynamic sampling over TRL's generation and reward calls
    def _round_rows(self, round_index: int, size: int, first: list[dict]) -> list[dict]:
        if round_index == 0:
            return first  # TRL's RepeatSampler batch: prompts_per_step prompts, each repeated N times
        s = self.settings
        rng = np.random.default_rng([s.seed, 7331, self.state.global_step, round_index, *self._rank_key()])
        picks = rng.choice(len(self.train_dataset), size=min(size, len(self.train_dataset)), replace=False)
        return [row for i in picks for row in [self.train_dataset[int(i)]] * self.num_generations]

    def _generate_and_score_completions(self, inputs):
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        s, n, device = self.settings, self.num_generations, self.accelerator.device
        t_start = time.perf_counter()
        timing = {"generation": 0.0}
        all_rewards, all_lengths, truncated = [], [], 0

        def generate_round(r, size):
            rows = self._round_rows(r, size, inputs)
            prompts = [x["prompt"] for x in rows]
            self._sampler_seed = int(np.random.default_rng([s.seed, 4241, self.state.global_step, r,
                                                            *self._rank_key()]).integers(2**31))
            # (the grouped sampler's seed for this round; TRL's HF path uses the restored torch RNG)
            t0 = time.perf_counter()
            prompt_ids, completion_ids, _, completions, logps, _, _, _ = self._generate(prompts)
            timing["generation"] += time.perf_counter() - t0
            nonlocal truncated
            all_lengths.extend(map(len, completion_ids))
            truncated += sum(1 for c in completion_ids if c[-1:] != [self.eos_token_ids[0]])
            per_func = self._calculate_rewards(rows, prompts, completions, completion_ids)
            rewards = (per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)
            if self.accelerator.num_processes > 1:  # TRL gathers every process's rewards: keep this one's rows
                rank = self.accelerator.process_index
                rewards = rewards[rank * len(rows):(rank + 1) * len(rows)]
            all_rewards.append(rewards)
            if time.perf_counter() - t0 >= 10 and self.accelerator.is_main_process:  # a progress line for long rounds
                print(f"[rl] step {self.state.global_step + 1} round {r + 1}: {len(rows) // n} prompts x N={n} on this "
                      f"process, reward mean {rewards.mean().item():.3f}, {time.perf_counter() - t0:.0f} s", flush=True)
            samples = [_Sample(p, c, None if logps is None else logps[i], float(rw))
                       for i, (p, c, rw) in enumerate(zip(prompt_ids, completion_ids, rewards.tolist()))]
            return rewards.view(-1, n), [samples[g * n:(g + 1) * n] for g in range(len(samples) // n)]

        procs = self.accelerator.num_processes
        sync = None
        if procs > 1:
            def sync(missing, generated, passing):
                got = self.accelerator.gather(torch.tensor([[missing, generated, passing]], device=device)).view(-1, 3)
                return int(got[:, 0].max()), int(got[:, 1].sum()), int(got[:, 2].sum())

        ds = dynamic_sampling(generate_round, s.prompts_per_step // procs, s.max_rounds, enabled=s.dynamic_sampling,
                              round_prompts=s.round_prompts, sync=sync)
        samples = [x for group in ds.kept + ds.filler for x in group]
        n_kept = len(ds.kept) * n  # rows after that are filler: zero loss weight
        weights = [1.0] * len(samples)
        if s.merge_duplicates:
            samples, weights, n_rows, first_index = merge_duplicate_rows(ds.kept, n, samples)
        else:
            n_rows = n_kept

        # tensors (prompts left-padded, completions right-padded), as TRL lays them out
        prompt_ids = pad([torch.tensor(x.prompt_ids) for x in samples], padding_value=self._tokenizer.pad_token_id,
                         padding_side="left").to(device)
        prompt_mask = pad([torch.ones(len(x.prompt_ids), dtype=torch.long) for x in samples], padding_value=0,
                          padding_side="left").to(device)
        completion_ids = pad([torch.tensor(x.completion_ids) for x in samples],
                             padding_value=self._tokenizer.pad_token_id, padding_side="right").to(device)
        completion_mask = pad([torch.ones(len(x.completion_ids), dtype=torch.long) for x in samples],
                              padding_value=0, padding_side="right").to(device)
        completion_mask[n_rows:] = 0
        advantages = torch.zeros(len(samples), device=device)
        kept_rewards = torch.tensor([x.reward for g in ds.kept for x in g], device=device)
        kept_adv = torch.zeros(n_kept, device=device)
        if procs > 1:  # batch statistics over every process's kept groups (BroRL's global batch)
            kept_adv = global_reinforce_pp_advantages(kept_rewards, n, self._sum_across)
        elif n_kept:
            kept_adv = reinforce_pp_advantages(kept_rewards, n)
        if s.merge_duplicates:  # advantages over the N rows of every kept group, then one per distinct row
            advantages[:n_rows] = kept_adv[torch.tensor(first_index, dtype=torch.long, device=device)]
        else:
            advantages[:n_kept] = kept_adv
        row_weights = torch.tensor(weights, dtype=torch.float32, device=device)
        # the token normaliser counts the step's tokens on every process (TRL's convention; _compute_loss divides
        # by the number of processes, and the gradient all-reduce averages); a merged row counts `weight` times
        num_items = (completion_mask.float() * row_weights.unsqueeze(1)).sum()
        if procs > 1:
            num_items = self.accelerator.gather(num_items.reshape(1)).sum()
        out = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
               "completion_mask": completion_mask, "advantages": advantages, "row_weights": row_weights,
               "num_items_in_batch": num_items}

        # old / reference / engine log-probs of the kept batch (TRL's rules for when each is needed)
        ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attn = torch.cat([prompt_mask, completion_mask], dim=1)
        keep, mb = completion_ids.size(1), self.args.per_device_train_batch_size
        with torch.no_grad():
            generate_every = self.args.steps_per_generation * self.num_iterations
            use_is = self.use_vllm and self.vllm_importance_sampling_correction
            if self.args.gradient_accumulation_steps % generate_every != 0 or use_is:
                out["old_per_token_logps"] = self._get_per_token_logps_and_entropies(
                    self.model, ids, attn, keep, batch_size=mb)[0]
            if self.beta != 0.0:
                real = n_rows if s.merge_duplicates else len(samples)  # merged: filler rows never reach the model
                ref = self._get_per_token_logps_and_entropies(
                    self.ref_model, ids[:real], attn[:real], keep, batch_size=mb)[0] if real else None
                out["ref_per_token_logps"] = torch.zeros(completion_ids.shape, device=device) if ref is None else (
                    torch.cat([ref, torch.zeros(len(samples) - real, ref.size(1), device=device)]) if real < len(samples)
                    else ref)
            if use_is:
                sampling = pad([torch.tensor([math.nan if v is None else v for v in x.sampling_logps])
                                for x in samples], padding_value=0.0, padding_side="right").to(device)
                out["importance_sampling_ratio"] = vllm_is_ratio(
                    out["old_per_token_logps"], sampling, completion_mask, self.vllm_importance_sampling_mode,
                    self.vllm_importance_sampling_clip_min, self.vllm_importance_sampling_clip_max)

        # per-step rollout metrics (TRL's `log` averages each list over the logging window = one step)
        rewards_all = torch.cat(all_rewards)
        generated = int(rewards_all.numel())
        lengths = completion_mask[:n_rows].sum(dim=1).float() * row_weights[:n_rows]  # tokens per kept draw
        self.last_rollout = {
            "reward_mean": rewards_all.mean().item(), "reward_std": rewards_all.std().item(),
            "dynamic_sampling_pass_rate": ds.pass_rate, "generation_rounds": ds.rounds,
            "generated_samples": generated, "kept_prompts": len(ds.kept), "kept_samples": n_kept,
            "kept_reward_mean": float(np.mean([x.reward for g in ds.kept for x in g])) if n_kept else math.nan,
            "response_length_mean": float(np.mean(all_lengths)), "truncated_fraction": truncated / generated,
            "kept_response_length": lengths.sum().item() / n_kept if n_kept else math.nan,
            "train_tokens": int(attn[:n_rows].sum()), "train_rows": n_rows,
            "generation_seconds": timing["generation"],
            "generation_samples_per_s": generated / max(timing["generation"], 1e-9),
            "rollout_seconds": time.perf_counter() - t_start}
        if procs > 1:  # the step's totals over every process (the sample budget stops all of them at once)
            self.last_rollout.update(self._global_rollout(rewards_all, ds, n_kept, lengths, all_lengths,
                                                          truncated, int(attn[:n_rows].sum()), n_rows))
            generated = int(self.last_rollout["generated_samples"])
        self.stage_state.generated_samples += generated
        for key, value in self.last_rollout.items():
            self._metrics["train"][key].append(value)
        return out

    # ----- several processes: per-process draws, sums across processes
    def _rank_key(self) -> list[int]:
        """Extra RNG key of this process's refill draws and sampler seeds ([] on one process: unchanged draws)."""
        return [self.accelerator.process_index] if self.accelerator.num_processes > 1 else []

    def _sum_across(self, x: torch.Tensor) -> torch.Tensor:
        """Element-wise sum of a float64 tensor over the processes."""
        return self.accelerator.gather(x.unsqueeze(0)).sum(dim=0)

    def _global_rollout(self, rewards_all, ds, n_kept, lengths, all_lengths, truncated, train_tokens,
                        train_rows):
        kept_r = [x.reward for g in ds.kept for x in g]
        r = rewards_all.double()
        sums = self._sum_across(torch.tensor(
            [r.numel(), r.sum().item(), (r * r).sum().item(), ds.generated_groups, ds.passing_groups, len(ds.kept),
             n_kept, sum(kept_r), float(lengths.sum()), float(sum(all_lengths)), truncated, train_tokens, train_rows],
            dtype=torch.float64, device=r.device)).tolist()
        (count, total, squares, gen_groups, pass_groups, kept_groups, kept_samples, kept_sum, kept_len, all_len,
         trunc, tokens, rows) = sums
        # generation time of the step: the slowest process (the others wait for it at the next collective)
        gen_s = float(self.accelerator.gather(torch.tensor([self.last_rollout["generation_seconds"]],
                                                           dtype=torch.float64, device=r.device)).max())
        mean = total / count
        return {"reward_mean": mean, "reward_std": math.sqrt(max(squares - count * mean * mean, 0.0) / max(count - 1, 1)),
                "dynamic_sampling_pass_rate": pass_groups / max(gen_groups, 1), "generated_samples": int(count),
                "kept_prompts": int(kept_groups), "kept_samples": int(kept_samples),
                "kept_reward_mean": kept_sum / kept_samples if kept_samples else math.nan,
                "response_length_mean": all_len / count, "truncated_fraction": trunc / count,
                "kept_response_length": kept_len / kept_samples if kept_samples else math.nan,
                "train_tokens": int(tokens), "train_rows": int(rows), "generation_seconds": gen_s,
                "generation_samples_per_s": count / max(gen_s, 1e-9)}

    def _prepare_inputs(self, generation_batch):
        if not (self.settings.merge_duplicates and self.model.training):
            return super()._prepare_inputs(generation_batch)
        # TRL's buffering without its row shuffle, so merged rows fill the first micro-batches and filler the last
        # (skipped in _compute_loss); with one optimizer step per RL step the order does not change the update
        from trl.trainer.utils import split_tensor_dict

        if self._step % self.args.steps_per_generation == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            self._buffered_inputs = split_tensor_dict(batch, self.args.steps_per_generation)
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    # ----- grouped generation (the N rows of a group share one prompt: prefix tree or shared KV cache)
    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        sampler = SAMPLERS.get(self.settings.generation_engine)
        if sampler is None or self.use_vllm or not self.model.training:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)
        n = num_generations
        heads = [list(prompt_ids[i]) for i in range(0, len(prompt_ids), n)]
        if any(list(prompt_ids[g * n + j]) != heads[g] for g in range(len(heads)) for j in range(n)):
            raise RuntimeError("grouped generation needs each prompt's N rows to be contiguous")
        eos, pad_id = self.eos_token_ids[0], self._tokenizer.pad_token_id
        model = self.accelerator.unwrap_model(self.model)
        blocks = sampler(model, heads, n, self.max_completion_length, eos, pad_id, temperature=self.temperature,
                         seed=getattr(self, "_sampler_seed", 0), chunk_samples=self.settings.chunk_samples,
                         draw=self.settings.token_draw, prompt_kv=self.settings.prompt_kv)
        completion_ids = []
        for block in blocks:
            for row in block.tolist():
                completion_ids.append(row[: row.index(eos) + 1] if eos in row else row)  # up to and with eos
        return completion_ids, None

    # ----- loss: token-level clip-higher PPO + beta k2
    def _compute_loss(self, model, inputs):
        s = self.settings
        if s.merge_duplicates and self.accelerator.num_processes == 1 and not inputs["completion_mask"].any():
            # a micro-batch of filler rows only (merged rows come first): nothing to learn, skip the forward pass
            self._add_token_sums(inputs["completion_mask"].float())  # no tokens: a step of filler only logs 0s
            return torch.zeros((), device=inputs["completion_mask"].device, requires_grad=True)
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        keep = inputs["completion_ids"].size(1)
        mask = inputs["completion_mask"].float()
        if "row_weights" in inputs:  # merged rows stand for `weight` identical rows
            mask = mask * inputs["row_weights"].unsqueeze(1)
        logp, entropy, _ = self._get_per_token_logps_and_entropies(model, ids, attn, keep, compute_entropy=True)
        old = inputs.get("old_per_token_logps")
        old = logp.detach() if old is None else old  # on-policy first mini-batch: r_t = 1, gradient A grad log pi
        adv = inputs["advantages"].unsqueeze(1)
        per_token, low, high = clipped_surrogate(logp, old, adv, s.epsilon_low, s.epsilon_high)
        if "importance_sampling_ratio" in inputs:  # vLLM engine mismatch correction (TRL's option)
            per_token = per_token * inputs["importance_sampling_ratio"]
        if self.beta != 0.0:
            kl = k2_kl(logp, inputs["ref_per_token_logps"])
            per_token = per_token + self.beta * kl
        # token-level mean over the mini-batch (TRL's "dapo" normaliser: the step's tokens / mini-batches)
        normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
        normalizer = normalizer * self.current_gradient_accumulation_steps / self.args.steps_per_generation
        loss = (per_token * mask).sum() / normalizer
        self._add_token_sums(mask, entropy=entropy, kl=kl if self.beta != 0.0 else None, low=low, high=high)
        return loss

    # ----- token-level metrics: means over the step's trained tokens, a merged row counting `weight` times
    _TOKEN_METRICS = {"entropy": "entropy", "kl": "kl", "low": "clip_ratio/low_mean", "high": "clip_ratio/high_mean",
                      "region": "clip_ratio/region_mean"}

    def _add_token_sums(self, mask: torch.Tensor, **values) -> None:
        """Add this micro-batch's weighted token sums and token count to the step's. The logged value is
        sum / count over the whole step (see :meth:`log`), not a mean of per-micro-batch means: the latter
        depends on how rows fall into micro-batches, so merged rows (fewer, weighted micro-batches) would log
        other numbers than the N rows they stand for."""
        if "low" in values and values["low"] is not None:
            values["region"] = values["low"] | values["high"]
        sums = getattr(self, "_token_sums", None)
        if sums is None:
            sums = self._token_sums = {key: [0.0, 0.0] for key in self._TOKEN_METRICS}
        count = mask.sum().item()
        for key in self._TOKEN_METRICS:
            x = values.get(key)
            if x is not None:
                sums[key][0] += (x.float() * mask).sum().item()
            sums[key][1] += count

    def log(self, logs: dict, start_time: float | None = None) -> None:
        sums = getattr(self, "_token_sums", None)
        if sums and self.model.training:
            totals = torch.tensor([v for key in self._TOKEN_METRICS for v in sums[key]], dtype=torch.float64,
                                  device=self.accelerator.device)
            if self.accelerator.num_processes > 1:  # every process logs at the same steps (TRL gathers the loss)
                totals = self._sum_across(totals)
            values = totals.view(-1, 2).tolist()
            for (key, name), (total, count) in zip(self._TOKEN_METRICS.items(), values):
                self._metrics["train"][name] = [total / max(count, 1.0)]
            self._token_sums = None
        super().log(logs, start_time)

    # ----- optimizer hand-over between stages, crash-safe checkpoints
    def create_scheduler(self, num_training_steps, optimizer=None):
        # runs once the optimizer exists and before a resumed checkpoint's optimizer state is loaded over it
        scheduler = super().create_scheduler(num_training_steps, optimizer)
        if self.init_optimizer and not self.settings.reset_optimizer and Path(self.init_optimizer).exists():
            # keep the previous stage's AdamW moments (ProRLv2); the learning rates stay this stage's
            load_optimizer_state(self.model, self.optimizer, self.init_optimizer)  # plain or FSDP-sharded
        return scheduler

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)  # model, optimizer, scheduler, RNG, trainer_state (data position)
        self.accelerator.wait_for_everyone()  # every process has written its part (sharded optimizer, RNG)
        if self.accelerator.is_main_process:  # one writer of the marker and of the clean-up
            folder = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
            state = {"global_step": self.state.global_step, "elapsed_s": self.stage_state.elapsed_s,
                     "generated_samples": self.stage_state.generated_samples, "extra": self.stage_state.extra}
            tmp = folder / (CHECKPOINT_DONE + ".tmp")
            tmp.write_text(json.dumps(state, indent=1))
            os.replace(tmp, folder / CHECKPOINT_DONE)
            for old in folder.parent.glob("checkpoint-*"):  # keep only the newest complete checkpoint
                if old != folder and old.is_dir():
                    shutil.rmtree(old, ignore_errors=True)
        self.accelerator.wait_for_everyone()


@contextlib.contextmanager
def _extra_engine_args(extra: dict):
    """TRL 1.16 builds its colocated ``vllm.LLM`` with a fixed argument list; add ``extra`` to it while the trainer
    is constructed (RLSettings.vllm_engine_args; nothing changes when it is empty)."""
    if not extra:
        yield
        return
    import trl.generation.vllm_generation as vg

    engine = vg.LLM
    vg.LLM = lambda *a, **kw: engine(*a, **{**kw, **extra})
    try:
        yield
    finally:
        vg.LLM = engine


def vllm_is_ratio(old_logps, sampling_logps, mask, mode: str, clip_min, clip_max) -> torch.Tensor:
    """TRL's vLLM importance-sampling ratio pi_trainer / pi_engine, truncated or masked (same rules as
    ``GRPOTrainer._generate_and_score_completions``)."""
    diff = torch.nan_to_num((old_logps - sampling_logps) * mask, nan=0.0)
    if mode.startswith("sequence"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode.endswith("truncate"):
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    lo = -math.inf if clip_min is None else clip_min
    hi = math.inf if clip_max is None else clip_max
    return ratio.masked_fill((ratio < lo) | (ratio > hi), 0.0)
