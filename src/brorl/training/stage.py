"""A resumable RL stage: ``train_stage(init_model_dir, data_dir, out_dir, settings) -> dict``.

Layout of ``out_dir``::

    settings.json         the stage's settings (a rerun with other settings is refused)
    metrics.csv           one row per step, columns METRIC_COLUMNS (probe columns empty between probes)
    probe_baseline.npz    exact probabilities of the probe prompts under the initial policy
    checkpoints/          the newest complete TRL checkpoint (model, optimizer, scheduler, RNG, data position)
    model/                the final policy: a standard HF folder (+ optimizer.pt for the next stage)
    summary.json          written last; its presence means the stage is done

A stage is the unit of the reference reset: pi_ref is ``init_model_dir`` (the policy at the stage start), and
the next stage starts from ``<out_dir>/model``. Killed at any point (SIGKILL included) and rerun with the same
arguments, the stage resumes from the newest complete checkpoint and ends with the same number of steps.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from brorl.training.fsdp import engage_fsdp_on_cpu, export_optimizer, load_checkpoint_model
from brorl.tasks.core import format_prompt, is_probe
from brorl.training.settings import RLSettings

TAIL_LO, TAIL_HI = 1.0 / 512, 1.0 / 16  # the "hard tail" band of per-prompt Q_pos (pilot.md §2)

METRIC_COLUMNS = (
    "step", "wall_time_s", "step_seconds", "learning_rate",
    # rollout (reward_mean over every generated sample, before filtering)
    "reward_mean", "reward_std", "kept_reward_mean", "dynamic_sampling_pass_rate", "generation_rounds",
    "generated_samples", "generated_samples_total", "kept_prompts", "kept_samples",
    "generation_seconds", "generation_samples_per_s",
    # update
    "train_seconds", "training_tokens_per_s", "loss", "grad_norm", "entropy", "kl",
    "clip_ratio_low", "clip_ratio_high", "clip_ratio_region", "response_length_mean", "kept_response_length",
    "truncated_fraction",
    # probes (every probe_every steps and at the last step; exact teacher-forced probabilities)
    "probe_q_pos_mean", "probe_q_pos_tail_mean", "probe_q_pos_zero_fraction",
    "probe_multi_q_pos_mean", "probe_frac_correct_improved", "probe_worst_correct_delta",
)
# CSV column <- key in TRL's averaged logs
_FROM_LOGS = {
    "learning_rate": "learning_rate", "reward_mean": "reward_mean", "reward_std": "reward_std",
    "kept_reward_mean": "kept_reward_mean", "dynamic_sampling_pass_rate": "dynamic_sampling_pass_rate",
    "generation_rounds": "generation_rounds", "generated_samples": "generated_samples",
    "kept_prompts": "kept_prompts", "kept_samples": "kept_samples", "generation_seconds": "generation_seconds",
    "generation_samples_per_s": "generation_samples_per_s", "loss": "loss", "grad_norm": "grad_norm",
    "entropy": "entropy", "kl": "kl", "clip_ratio_low": "clip_ratio/low_mean",
    "clip_ratio_high": "clip_ratio/high_mean", "clip_ratio_region": "clip_ratio/region_mean",
    "response_length_mean": "response_length_mean", "kept_response_length": "kept_response_length",
    "truncated_fraction": "truncated_fraction",
}


def _atomic_write(path: Path, text: str) -> None:
    from brorl.atomic import write_text

    write_text(path, text)


def latest_checkpoint(checkpoint_dir: Path) -> Path | None:
    """The newest checkpoint folder that was written completely (has the BroRL marker file)."""
    from brorl.training.trainer import CHECKPOINT_DONE

    done = [p for p in checkpoint_dir.glob("checkpoint-*") if (p / CHECKPOINT_DONE).exists()]
    return max(done, key=lambda p: int(p.name.split("-")[-1]), default=None)


# --------------------------------------------------------------------------------------- probes

class Probes:
    """Exact probes against the stage-start policy.

    - ``probe_q_pos_mean``: mean exact Q_pos over single-answer validation prompts; ``..._tail_mean`` over those
      whose Q_pos at the stage start lay in (1/512, 1/16); ``..._zero_fraction``: share at Q_pos <= 1/512.
    - multi-answer probe prompts: ``probe_frac_correct_improved`` = share of (prompt, correct answer) pairs whose
      P(answer + eos) rose since the stage start, ``probe_worst_correct_delta`` = the most negative change
      (BroRL §4.1 / Fig. 3 metrics on the real model)."""

    def __init__(self, tokenizer, records: list[dict], limit: int):
        """``records``: the validation records the data source probes exactly (``Source.probe_records``)."""
        by_task: dict[str, list[dict]] = {}
        for r in records:
            by_task.setdefault(r["task"], []).append(r)
        self.tok = tokenizer
        self.single = [r for t, rs in by_task.items() if not is_probe(t) for r in rs[:limit]]
        self.multi = [r for t, rs in by_task.items() if is_probe(t) for r in rs[:limit]]
        self.q0 = self.p0 = None

    def _measure(self, model) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        from brorl.models.scoring import answer_string_probabilities, exact_answer_probability

        was = model.training
        model.eval()
        q = exact_answer_probability(model, self.tok, self.single) if self.single else np.zeros(0)
        per = [answer_string_probabilities(model, self.tok, r, list(r["answers"])) for r in self.multi]
        model.train(was)
        p = np.concatenate(per) if per else np.zeros(0)
        q_multi = np.array([x.sum() for x in per])
        return q, p, q_multi

    def baseline(self, model, path: Path) -> dict:
        if path.exists():
            z = np.load(path)
            self.q0, self.p0, q_multi = z["q_pos"], z["answer_probs"], z["multi_q_pos"]
        else:
            self.q0, self.p0, q_multi = self._measure(model)
            tmp = path.with_name(path.name + f".tmp{os.getpid()}.npz")
            np.savez(tmp, q_pos=self.q0, answer_probs=self.p0, multi_q_pos=q_multi)
            os.replace(tmp, path)
        return self.summarize(self.q0, self.p0, q_multi)

    def per_prompt(self, model, path: Path) -> np.ndarray:
        """Exact per-prompt Q_pos of the single-answer probe prompts (saved to ``path`` with their ids)."""
        if path.exists():
            return np.load(path)["q_pos"]
        q, p, q_multi = self._measure(model)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}.npz")
        np.savez(tmp, q_pos=q, q_pos_start=self.q0, answer_probs=p, multi_q_pos=q_multi,
                 ids=np.array([str(r.get("id", i)) for i, r in enumerate(self.single)]))
        os.replace(tmp, path)
        return q

    def measure(self, model) -> dict:
        q, p, q_multi = self._measure(model)
        return self.summarize(q, p, q_multi)

    def summarize(self, q, p, q_multi) -> dict:
        tail = (self.q0 > TAIL_LO) & (self.q0 < TAIL_HI)
        delta = p - self.p0
        return {"probe_q_pos_mean": float(q.mean()) if q.size else math.nan,
                "probe_q_pos_tail_mean": float(q[tail].mean()) if tail.any() else math.nan,
                "probe_q_pos_zero_fraction": float((q <= TAIL_LO).mean()) if q.size else math.nan,
                "probe_multi_q_pos_mean": float(q_multi.mean()) if q_multi.size else math.nan,
                "probe_frac_correct_improved": float((delta > 0).mean()) if delta.size else math.nan,
                "probe_worst_correct_delta": float(delta.min()) if delta.size else math.nan,
                "probe_tail_prompts": int(tail.sum())}


# --------------------------------------------------------------------------------------- metrics + control

def _stage_callback(trainer, s: RLSettings, csv_path: Path, probes: Probes, t_session: float, log):
    from transformers import TrainerCallback

    m = s.mini_batches  # optimizer steps per RL step

    class StageCallback(TrainerCallback):
        """Per-step CSV row, probes, final-step checkpoint, budget stop, elapsed wall time."""

        def __init__(self):
            self.t_step, self.probe, self.last = None, None, {}

        def on_step_begin(self, args, state, control, **kw):
            if state.global_step % m == 0:
                self.t_step = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            if state.global_step % m:
                return
            rl_step = state.global_step // m
            self.last = {"step_seconds": time.perf_counter() - self.t_step}
            last_step = rl_step >= s.max_steps
            if s.sample_budget and trainer.stage_state.generated_samples >= s.sample_budget:
                last_step = True
                control.should_training_stop = True
            elapsed = trainer.stage_state.extra["elapsed_before"] + time.perf_counter() - t_session
            if s.time_budget_s and trainer.accelerator.num_processes > 1:  # the main process's clock decides
                elapsed = float(trainer.accelerator.gather(torch.tensor([elapsed], dtype=torch.float64,
                                                                        device=trainer.accelerator.device))[0])
            if s.time_budget_s and not last_step and elapsed >= s.time_budget_s:
                trainer.stage_state.extra["stopped"] = "time_budget"
                log(f"time budget reached at step {rl_step}: {elapsed:.0f}s >= {s.time_budget_s:.0f}s")
                last_step = True
                control.should_training_stop = True
            if last_step or (s.probe_every and rl_step % s.probe_every == 0):
                self.probe = probes.measure(trainer.model)
                extra = trainer.stage_state.extra
                extra.setdefault("probe_history", []).append(self.probe["probe_q_pos_mean"])
                if not last_step and s.plateaued(extra["probe_history"]):
                    extra["stopped"], extra["plateau_step"] = "plateau", rl_step
                    log(f"plateau at step {rl_step}: best validation pass@1 of the last {s.plateau_window} "
                        f"probes is not above the earlier best by more than {s.plateau_delta}")
                    last_step = True
                    control.should_training_stop = True
            if last_step:
                control.should_save = True  # the final step always has a checkpoint

        def on_log(self, args, state, control, logs=None, **kw):
            if not logs or "loss" not in logs or state.global_step % m:
                return
            trainer.stage_state.elapsed_s = trainer.stage_state.extra["elapsed_before"] + (
                time.perf_counter() - t_session)
            roll = trainer.last_rollout
            row = {k: logs.get(v) for k, v in _FROM_LOGS.items()}
            train_s = max(self.last.get("step_seconds", math.nan) - roll.get("rollout_seconds", 0.0), 1e-9)
            row.update(step=state.global_step // m, wall_time_s=trainer.stage_state.elapsed_s,
                       step_seconds=self.last.get("step_seconds"), train_seconds=train_s,
                       training_tokens_per_s=roll.get("train_tokens", 0) / train_s,
                       generated_samples_total=trainer.stage_state.generated_samples)
            if self.probe:
                row.update({k: v for k, v in self.probe.items() if k in METRIC_COLUMNS})
                self.probe = None
            if not state.is_world_process_zero:
                return  # one writer of metrics.csv and of the progress line
            new = not csv_path.exists()
            with open(csv_path, "a", newline="") as f:
                w = csv.DictWriter(f, fieldnames=METRIC_COLUMNS, extrasaction="ignore")
                if new:
                    w.writeheader()
                w.writerow({k: ("" if row.get(k) is None else row[k]) for k in METRIC_COLUMNS})
            probe = f" | Q_pos {row['probe_q_pos_mean']:.3f}" if row.get("probe_q_pos_mean") is not None else ""
            log(f"step {row['step']:4d} reward {row['reward_mean']:.3f} pass rate "
                f"{row['dynamic_sampling_pass_rate']:.2f} kept {row['kept_prompts']:.0f} of "
                f"{row['generated_samples'] / s.n_rollouts:.0f} prompts, {row['generation_samples_per_s']:.0f} "
                f"samples/s, kl {row['kl']:.3g}, {row['step_seconds']:.1f}s{probe}")

    return StageCallback()


def _truncate_csv(csv_path: Path, last_step: int) -> None:
    """Drop rows written after the checkpoint a run resumes from (they will be recomputed)."""
    if not csv_path.exists():
        return
    def kept(r):  # a SIGKILL can leave a half-written last line
        try:
            return None not in r.values() and int(r["step"]) <= last_step
        except (TypeError, ValueError):
            return False

    with open(csv_path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if kept(r)]
    tmp = csv_path.with_name(csv_path.name + f".tmp{os.getpid()}")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=METRIC_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, csv_path)


def _finished(s: RLSettings, state: dict | None) -> bool:
    """Whether a checkpoint's state is the stage's last step (a resumed trainer would run one step more)."""
    if state is None:
        return False
    if state.get("extra", {}).get("stopped"):
        return True
    return state["global_step"] >= s.max_steps * s.mini_batches or bool(
        s.sample_budget and state["generated_samples"] >= s.sample_budget)


def _peak_rss_mb() -> float:
    """Peak resident memory of this process in MiB (after a resume: of the resumed process)."""
    import resource
    import sys

    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 2**20 if sys.platform == "darwin" else kb / 2**10


def read_metrics(out_dir: str | Path) -> list[dict]:
    """metrics.csv rows as dicts of floats (None where empty)."""
    with open(Path(out_dir) / "metrics.csv", newline="") as f:
        return [{k: _number(v) for k, v in r.items()} for r in csv.DictReader(f)]


def _number(v):
    if v in ("", None):
        return None
    try:
        return float(v)
    except ValueError:
        return v  # a label column (the arm's name)


# --------------------------------------------------------------------------------------- the stage

def make_reward(records: list[dict], tokenizer, source: str = "tasks"):
    """The reward of the data source kind ``source`` (brorl.profile.sources(): the declared profile.data): the
    tiny tasks' exact check, or the paper data's per-kind reward. Every pipeline caller passes it (the stage
    runner, the study's held-out scoring); the default is the tiny tasks, never read from the records."""
    from brorl.profile import sources

    return sources()[source].reward(records, tokenizer)


def _settings_key(s: RLSettings) -> str:
    d = s.to_dict()
    for k in ("threads", "keep_checkpoints", "chunk_samples", "gradient_checkpointing") + (() if s.plateau_window else
                                                                 ("probe_every", "probe_prompts")):
        d.pop(k)  # settings that cannot change the trained policy
    for k, default in (("vllm_weight_sync", "trl"), ("vllm_engine_args", {}),  # added later (issues 28, 29): at
                       ("plateau_rule", "best"), ("plateau_slope", 0.0)):    # their defaults, earlier runs' key
        if d[k] == default:
            d.pop(k)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=list).encode()).hexdigest()[:16]


def grpo_config(s: RLSettings, output_dir: Path, max_completion_length: int, processes: int | None = None):
    """TRL's GRPOConfig for these settings (one RL step = ``mini_batches`` optimizer steps), its batch sizes
    computed once for the ``processes`` that run it (:meth:`RLSettings.batch_sizes`; None: the processes of this
    launch, accelerate's ``PartialState``)."""
    from accelerate import PartialState
    from trl import GRPOConfig

    from brorl.training.trainer import learning_rate

    processes = PartialState(cpu=not torch.cuda.is_available()).num_processes if processes is None else processes
    return GRPOConfig(
        output_dir=str(output_dir), num_generations=s.n_rollouts, max_completion_length=max_completion_length,
        **s.batch_sizes(processes), num_iterations=1,
        temperature=s.temperature, top_p=1.0, top_k=0,
        learning_rate=learning_rate(s), lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=s.weight_decay, adam_beta1=s.adam_betas[0], adam_beta2=s.adam_betas[1],
        max_grad_norm=s.max_grad_norm, beta=s.beta, epsilon=s.epsilon_low, epsilon_high=s.epsilon_high,
        loss_type="dapo", scale_rewards="none",  # advantages are computed in BroRLTrainer (REINFORCE++)
        max_steps=s.max_steps * s.mini_batches, logging_steps=s.mini_batches, save_strategy="steps",
        save_steps=s.checkpoint_every * s.mini_batches, save_total_limit=None, report_to="none",
        seed=s.seed, data_seed=s.seed, bf16=s.bf16, fp16=False, gradient_checkpointing=s.gradient_checkpointing,
        use_cpu=not torch.cuda.is_available(), dataloader_num_workers=0, disable_tqdm=True,
        use_vllm=s.generation_engine == "vllm", vllm_mode="colocate",
        vllm_gpu_memory_utilization=s.vllm_gpu_memory_utilization,
        vllm_max_model_length=s.vllm_max_model_length or None,
        vllm_importance_sampling_correction=s.vllm_importance_sampling,
        vllm_importance_sampling_mode=s.vllm_is_mode, vllm_importance_sampling_clip_min=s.vllm_is_min,
        vllm_importance_sampling_clip_max=s.vllm_is_max, log_completions=False, save_only_model=False)


def train_stage(init_model_dir: str | Path, data_dir: str | Path, out_dir: str | Path,
                settings: RLSettings | dict | None = None, progress: bool = True, source: str = "tasks") -> dict:
    """Run (or resume, or return the result of) one RL stage; returns the summary dict. ``source``: the data
    source kind of ``data_dir`` (brorl.profile.sources(): the declared profile.data; see :func:`make_reward`),
    which reads its splits, gives the completion length, the exact probes and the reward."""
    from brorl.profile import sources

    data = sources()[source]
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ.setdefault(k, "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    s = settings if isinstance(settings, RLSettings) else RLSettings.from_dict(settings)
    init_model_dir, data_dir, out = Path(init_model_dir), Path(data_dir), Path(out_dir)
    from accelerate import PartialState

    dist = PartialState(cpu=not torch.cuda.is_available())  # one process, or every process of `brorl launch`
    main = dist.is_main_process
    log = (lambda msg: print(f"[rl] {msg}", flush=True)) if progress and main else (lambda msg: None)
    out.mkdir(parents=True, exist_ok=True)
    key = _settings_key(s)
    settings_path, summary_path = out / "settings.json", out / "summary.json"
    if settings_path.exists():
        old = json.loads(settings_path.read_text())
        if old.get("key") != key or old.get("init_model_dir") != str(init_model_dir.resolve()):
            raise ValueError(f"{out} holds a stage run with other settings or another init model; "
                             "use a fresh out_dir")
    elif main:
        _atomic_write(settings_path, json.dumps({"key": key, "init_model_dir": str(init_model_dir.resolve()),
                                                 "data_dir": str(data_dir.resolve()), "settings": s.to_dict()},
                                                indent=1, default=list))
    dist.wait_for_everyone()
    if summary_path.exists() and (out / "model").exists():
        log(f"stage already done: {out}")
        return json.loads(summary_path.read_text())
    if s.threads:
        torch.set_num_threads(s.threads)

    from datasets import Dataset
    from transformers import AutoTokenizer, PrinterCallback

    from brorl.models.sft import save_model_folder
    from brorl.training.trainer import CHECKPOINT_DONE, BroRLTrainer, learning_rate

    tokenizer = AutoTokenizer.from_pretrained(str(init_model_dir), local_files_only=True)
    tasks = list(s.tasks) or None
    records = data.read_split(data_dir, "train", tasks)
    validation = data.read_split(data_dir, "validation", tasks)
    families = sorted({r["task"] for r in records})
    max_len = s.max_completion_length or data.generation_length(data_dir, families)
    dataset = Dataset.from_dict({"prompt": [format_prompt(tokenizer, r) for r in records],
                                 "record_index": list(range(len(records)))})

    ckpt_dir, csv_path = out / "checkpoints", out / "metrics.csv"
    resume = latest_checkpoint(ckpt_dir)
    state = json.loads((resume / CHECKPOINT_DONE).read_text()) if resume is not None else None
    probes = Probes(tokenizer, data.probe_records(validation), s.probe_prompts)
    if not _finished(s, state):
        args = grpo_config(s, ckpt_dir, max_len)
        engage_fsdp_on_cpu(log)  # an FSDP launch on the CPU shards (accelerate alone would fall back to DDP)
        trainer = BroRLTrainer(model=str(init_model_dir), reward_funcs=make_reward(records, tokenizer, source),
                               args=args, train_dataset=dataset,
                               processing_class=tokenizer, settings=s,
                               init_optimizer=init_model_dir / "optimizer.pt")
        start = probes.baseline(trainer.model, out / "probe_baseline.npz")  # the stage-start policy
        trainer.stage_state.extra["probe_history"] = [start["probe_q_pos_mean"]]
        if state is not None:
            trainer.stage_state.elapsed_s = state["elapsed_s"]
            trainer.stage_state.generated_samples = state["generated_samples"]
            trainer.stage_state.extra = dict(state.get("extra", {}))
            if main:
                _truncate_csv(csv_path, state["global_step"] // s.mini_batches)
            log(f"resuming from {resume} (step {state['global_step'] // s.mini_batches})")
        elif main:
            csv_path.unlink(missing_ok=True)
            shutil.rmtree(ckpt_dir, ignore_errors=True)  # only incomplete checkpoints can be there
        dist.wait_for_everyone()
        trainer.stage_state.extra["elapsed_before"] = trainer.stage_state.elapsed_s
        trainer.remove_callback(PrinterCallback)  # its raw log dicts; the stage callback prints one line a step
        trainer.add_callback(_stage_callback(trainer, s, csv_path, probes, time.perf_counter(), log))
        log(f"N={s.n_rollouts} x {s.prompts_per_step} prompts/step, lr {trainer.args.learning_rate:.3g}, "
            f"{s.max_steps} steps max, engine {s.generation_engine}, micro-batch {s.micro_batch}")
        trainer.train(resume_from_checkpoint=str(resume) if resume is not None else None)
        del trainer
        resume = latest_checkpoint(ckpt_dir)  # the last step always writes one
        state = json.loads((resume / CHECKPOINT_DONE).read_text())

    # final policy from the last checkpoint: HF folder written to a temporary sibling and renamed, plus
    # optimizer.pt for the next stage; summary.json last (until then a rerun redoes this from the checkpoint)
    model = load_checkpoint_model(resume, init_model_dir)  # full weights, or gathered from FSDP shards
    rows = read_metrics(out) if csv_path.exists() else []
    final_probe = next((r for r in reversed(rows) if r.get("probe_q_pos_mean") is not None), {})
    extra = state.get("extra", {})
    steps_done = state["global_step"] // s.mini_batches
    stopped = extra.get("stopped") or ("sample_budget" if s.sample_budget and state["generated_samples"]
                                       >= s.sample_budget and steps_done < s.max_steps else "max_steps")
    probe_start = probes.baseline(None, out / "probe_baseline.npz")
    q_end = probes.per_prompt(model, out / "probe_end.npz")
    summary = {
        "steps": steps_done, "stopped": stopped, "plateau_step": extra.get("plateau_step"),
        "settings": s.to_dict(), "validation_pass1_end": float(q_end.mean()) if q_end.size else math.nan,
        "learning_rate": learning_rate(s), "init_model_dir": str(init_model_dir), "model_dir": str(out / "model"),
        "generated_samples": state["generated_samples"], "wall_time_s": state["elapsed_s"],
        "dynamic_sampling_pass_rate": float(np.nanmean([r["dynamic_sampling_pass_rate"] for r in rows]))
        if rows else math.nan,
        "mean_step_seconds": float(np.nanmean([r["step_seconds"] for r in rows])) if rows else math.nan,
        "peak_rss_mb": _peak_rss_mb(), "peak_cuda_mb": (torch.cuda.max_memory_allocated() / 2**20
                                                         if torch.cuda.is_available() else None),
        "probe_start": probe_start,
        "probe_end": {k: v for k, v in final_probe.items() if k.startswith("probe_")},
    }
    dist.wait_for_everyone()  # every process has read the checkpoint
    if main:
        save_model_folder(model, tokenizer, out / "model", extra={"training_info.json": summary})
        export_optimizer(resume, out / "model" / "optimizer.pt")  # optimizer.pt, FSDP's optimizer.bin or shards
        _atomic_write(summary_path, json.dumps(summary, indent=1, default=float) + "\n")
        if not s.keep_checkpoints:
            shutil.rmtree(ckpt_dir, ignore_errors=True)
    dist.wait_for_everyone()
    log(f"done: {summary['steps']} steps, {summary['generated_samples']} samples generated, pass rate "
        f"{summary['dynamic_sampling_pass_rate']:.3f}, {summary['wall_time_s']:.0f}s -> {out / 'model'}")
    return summary
