"""Tokenizer + tiny causal LM + supervised warm start, written as a standard Hugging Face folder.

``train_sft(data_dir, out_dir, sft_settings, task_settings)``:

1. trains the character-level tokenizer on task texts (:mod:`brorl.models.tokenizer`);
2. builds a ``LlamaForCausalLM`` / ``Qwen3ForCausalLM`` from scratch;
3. trains it by teacher forcing on fresh examples from the ``train`` region of the task suite, loss on
   the answer and end tokens only, AdamW with linear warm-up then constant learning rate;
4. every ``eval_every`` steps (``fine_eval_every`` on the steep part) computes the exact validation
   pass@1 (mean teacher-forced Q_pos over ``<data_dir>/<task>/validation.jsonl``) and the tail share
   (prompts with 1/512 < Q_pos < 1/16); it stops once pass@1 leaves ``select_band`` upwards and keeps
   the in-band checkpoint with the largest tail (``select_rule="max_tail"``; see :class:`SFTSettings`);
5. writes the folder to a temporary sibling and renames it onto ``out_dir``, so a killed run never
   leaves a half-written model folder.

Resumable: every ``checkpoint_every`` steps the model, optimiser, torch RNG, step, evaluation history
and best checkpoint so far go to ``<out_dir>.state/state.pt`` (written to a temporary file, then
renamed). A rerun with the same settings resumes from it and takes the same steps (the training
examples of step s are drawn from a generator seeded by (seed, s)). The state folder is removed on
success unless ``keep_state``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from brorl.atomic import atomic_dir, atomic_path
from brorl.models.scoring import exact_answer_probability
from brorl.models.settings import ModelSettings, SFTSettings
from brorl.models.tokenizer import build_tokenizer
from brorl.tasks.core import TaskSettings, format_prompt, generate_split, is_probe, read_split, sample_problems

STATE_SUFFIX = ".state"
TAIL_LO, TAIL_HI = 1.0 / 512, 1.0 / 16


def build_model(model_settings: ModelSettings, tokenizer, seed: int = 0):
    """A freshly initialised tiny causal LM for ``tokenizer``."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    s = model_settings
    common = dict(vocab_size=len(tokenizer), hidden_size=s.hidden_size, intermediate_size=s.intermediate_size,
                  num_hidden_layers=s.num_layers, num_attention_heads=s.num_heads,
                  num_key_value_heads=s.num_heads, max_position_embeddings=s.max_position_embeddings,
                  tie_word_embeddings=s.tie_word_embeddings, pad_token_id=tokenizer.pad_token_id,
                  eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id,
                  attention_dropout=0.0, use_cache=True,
                  rope_parameters={"rope_type": "default", "rope_theta": s.rope_theta},
                  attn_implementation=s.attn_implementation)
    torch.manual_seed(seed)
    if s.arch == "llama":
        cfg = LlamaConfig(**common, attention_bias=False, mlp_bias=False)
        model = LlamaForCausalLM(cfg)
    elif s.arch == "qwen3":
        cfg = Qwen3Config(**common, head_dim=s.hidden_size // s.num_heads)
        model = Qwen3ForCausalLM(cfg)
    else:
        raise ValueError(f"unknown arch {s.arch!r} (llama or qwen3)")
    _clean_generation_config(model, tokenizer)
    return model


def _clean_generation_config(model, tokenizer) -> None:
    """Only token ids in generation_config.json: no max_new_tokens / max_length overriding lm-eval."""
    from transformers import GenerationConfig

    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id,
                                               bos_token_id=tokenizer.eos_token_id)


def tokenizer_corpus(task_settings: TaskSettings, n_per_task: int = 200, seed: int = 0) -> list[str]:
    """Task texts the tokenizer is trained on (prompt + answer)."""
    texts = []
    for task in task_settings.tasks:
        for r in generate_split(task, "train", n_per_task, seed, partition_seed=task_settings.seed,
                                settings=task_settings, unique=False):
            texts.append(r["prompt"] + r["answer"])
    return texts


class ExampleStream:
    """Training examples of step ``s``: drawn from a generator seeded by (seed, s) -- resumable."""

    def __init__(self, tokenizer, task_settings: TaskSettings, sft: SFTSettings):
        self.tok = tokenizer
        self.ts = task_settings
        self.sft = sft
        tasks = list(task_settings.tasks)
        probes = [t for t in tasks if is_probe(t)]
        singles = [t for t in tasks if not is_probe(t)]
        w = {}
        for t in singles:
            w[t] = (1.0 - (sft.probe_weight if probes else 0.0)) / len(singles)
        for t in probes:
            w[t] = (sft.probe_weight if singles else 1.0) / len(probes)
        self.tasks = tasks
        self.weights = np.array([w[t] for t in tasks], dtype=np.float64)
        self.weights /= self.weights.sum()
        self.eos = tokenizer.eos_token_id
        self.pad = tokenizer.pad_token_id
        self.vocab = tokenizer.get_vocab()
        # The chat template wraps the prompt verbatim: render it once around a sentinel, not per example.
        self.prefix, _, self.suffix = format_prompt(tokenizer, {"prompt": "\x00"}).partition("\x00")
        probe_text = "  12+34="
        if self.prefix + probe_text + self.suffix != format_prompt(tokenizer, {"prompt": probe_text}):
            raise ValueError("the chat template does not embed the prompt verbatim")

    def _encode(self, text: str) -> list[int]:
        return [self.vocab[c] for c in text]

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng([self.sft.seed, 7919, step])
        counts = rng.multinomial(self.sft.batch_size, self.weights)
        seqs, starts = [], []
        for task, c in zip(self.tasks, counts):
            if c == 0:
                continue
            for p in sample_problems(task, "train", int(c), rng, self.ts.seed, self.ts, unique=False):
                prompt = self.prefix + p.prompt + self.suffix
                answer = p.answers[int(rng.integers(len(p.answers)))] if len(p.answers) > 1 else p.answer
                ids = self._encode(prompt) + self._encode(answer) + [self.eos]
                seqs.append(ids)
                starts.append(len(prompt))
        max_len = max(len(s) for s in seqs)
        ids = [s + [self.pad] * (max_len - len(s)) for s in seqs]
        labels = [[-100] * st + s[st:] + [-100] * (max_len - len(s)) for s, st in zip(seqs, starts)]
        return torch.tensor(ids, dtype=torch.long), torch.tensor(labels, dtype=torch.long)


def _lr_at(step: int, sft: SFTSettings) -> float:
    if sft.warmup_steps > 0 and step < sft.warmup_steps:
        return sft.lr * (step + 1) / sft.warmup_steps
    return sft.lr


def _rank(value: float, tail: float, sft: SFTSettings) -> tuple:
    """Sort key of an evaluated checkpoint (smaller is better), see ``SFTSettings.select_rule``."""
    lo, hi = sft.select_band
    if not lo <= value <= hi:  # out of band: the nearest band edge wins
        return (1, min(abs(value - lo), abs(value - hi)), 0.0)
    if sft.select_rule == "max_tail":
        return (0, -tail, abs(value - sft.select_target))
    return (0, abs(value - sft.select_target), 0.0)


def _should_stop(value: float, sft: SFTSettings) -> bool:
    if sft.select_rule == "max_tail":
        return value > sft.select_band[1]
    return value >= sft.select_target


def evaluate_exact(model, tokenizer, records: list[dict]) -> dict:
    """Exact validation metrics: per-task mean Q_pos (= expected pass@1) and tail shares."""
    was = model.training
    model.eval()
    q = exact_answer_probability(model, tokenizer, records)
    model.train(was)
    tasks = np.array([r["task"] for r in records])
    out = {}
    for t in dict.fromkeys(tasks.tolist()):
        qt = q[tasks == t]
        out[f"{t}/pass1"] = float(qt.mean())
        out[f"{t}/tail"] = float(((qt > TAIL_LO) & (qt < TAIL_HI)).mean())
        out[f"{t}/below_1_512"] = float((qt <= TAIL_LO).mean())
    return out


def _settings_key(sft: SFTSettings, ts: TaskSettings) -> str:
    d = sft.to_dict()
    for k in ("threads", "log_every", "keep_state", "max_seconds"):
        d.pop(k)
    blob = json.dumps({"sft": d, "tasks": ts.to_dict()}, sort_keys=True, default=list)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _atomic_torch_save(obj, path: Path) -> None:
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def save_model_folder(model, tokenizer, out_dir: str | Path, extra: dict | None = None) -> None:
    """Write the HF folder to a temporary sibling, then rename it onto ``out_dir`` (brorl.atomic.atomic_dir)."""
    _clean_generation_config(model, tokenizer)
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        gen_cfg = tmp / "generation_config.json"
        if gen_cfg.exists():  # belt and braces: never ship a generation length (lm-eval would obey it)
            cfg = json.loads(gen_cfg.read_text())
            for k in ("max_new_tokens", "max_length"):
                cfg.pop(k, None)
            gen_cfg.write_text(json.dumps(cfg, indent=2) + "\n")
        for name, obj in (extra or {}).items():
            (tmp / name).write_text(json.dumps(obj, indent=1, default=float) + "\n")


def train_sft(data_dir: str | Path, out_dir: str | Path, sft_settings: SFTSettings | dict | None = None,
              task_settings: TaskSettings | dict | None = None, progress: bool = True) -> dict:
    """Tokenizer + tiny model + supervised warm start into the HF folder ``out_dir``; returns metrics."""
    sft = sft_settings if isinstance(sft_settings, SFTSettings) else SFTSettings.from_dict(sft_settings)
    ts = task_settings if isinstance(task_settings, TaskSettings) else TaskSettings.from_dict(task_settings)
    if sft.threads:
        torch.set_num_threads(sft.threads)
    t_start = time.perf_counter()
    out_dir = Path(out_dir)
    state_dir = out_dir.with_name(out_dir.name + STATE_SUFFIX)
    state_path = state_dir / "state.pt"
    log = (lambda msg: print(f"[sft] {msg}", flush=True)) if progress else (lambda msg: None)

    tokenizer = build_tokenizer(tokenizer_corpus(ts))
    model = build_model(sft.model, tokenizer, seed=sft.seed)
    n_params = sum(p.numel() for p in model.parameters())
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": sft.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=sft.lr, betas=sft.betas)
    val = read_split(data_dir, "validation", ts.tasks)
    select_tasks = sft.select_tasks or tuple(t for t in ts.tasks if not is_probe(t)) or tuple(ts.tasks)
    stream = ExampleStream(tokenizer, ts, sft)
    key = _settings_key(sft, ts)

    step, history, best, train_seconds = 0, [], None, 0.0
    if state_path.exists():
        try:
            st = torch.load(state_path, weights_only=False)
            if st.get("key") == key:
                model.load_state_dict(st["model"])
                opt.load_state_dict(st["optimizer"])
                torch.set_rng_state(st["torch_rng"])
                step, history, best, train_seconds = st["step"], st["history"], st["best"], st["train_seconds"]
                log(f"resumed from {state_path} at step {step}")
            else:
                log(f"ignoring {state_path}: written with other settings")
        except Exception as exc:  # noqa: BLE001 -- a corrupt state must not block a fresh run
            log(f"ignoring unreadable state {state_path}: {exc}")

    def selection_value(metrics: dict) -> float:
        return float(np.mean([metrics[f"{t}/pass1"] for t in select_tasks]))

    def tail_value(metrics: dict) -> float:
        return float(np.mean([metrics[f"{t}/tail"] for t in select_tasks]))

    def record_eval(at_step: int, loss: float | None) -> float:
        nonlocal best
        m = evaluate_exact(model, tokenizer, val)
        value, tail = selection_value(m), tail_value(m)
        row = {"step": at_step, "train_loss": loss, "select_pass1": value, "select_tail": tail, **m,
               "seconds": train_seconds}
        history.append(row)
        if best is None or _rank(value, tail, sft) < _rank(best["value"], best["tail"], sft):
            best = {"step": at_step, "value": value, "tail": tail, "metrics": m,
                    "model": copy.deepcopy(model.state_dict())}
        per_task = " ".join(f"{t} {m[f'{t}/pass1']:.3f}" for t in dict.fromkeys(r["task"] for r in val))
        tail = " ".join(f"{t} {m[f'{t}/tail']:.2f}" for t in select_tasks)
        log(f"step {at_step:5d} loss {loss if loss is not None else float('nan'):.4f} | val pass@1 (exact) "
            f"{per_task} | tail(1/512,1/16) {tail} | {train_seconds:.0f}s")
        return value

    if not history:
        record_eval(0, None)
    stop = _should_stop(history[-1]["select_pass1"], sft)
    loss_acc, loss_n = 0.0, 0
    last_loss = None
    while not stop and step < sft.max_steps:
        t0 = time.perf_counter()
        ids, labels = stream.batch(step)
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, sft)
        logits = model(input_ids=ids).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                                                 ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if sft.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), sft.grad_clip)
        opt.step()
        step += 1
        loss_acc += float(loss.detach())
        loss_n += 1
        train_seconds += time.perf_counter() - t0
        every = sft.eval_every
        if sft.fine_eval_every and history[-1]["select_pass1"] >= sft.fine_eval_from:
            every = sft.fine_eval_every
        evaluate_now = step % every == 0 or step == sft.max_steps
        if step % sft.log_every == 0 and not evaluate_now:
            log(f"step {step:5d} loss {loss_acc / loss_n:.4f} lr {_lr_at(step - 1, sft):.2e} | {train_seconds:.0f}s")
        if evaluate_now:
            last_loss = loss_acc / max(loss_n, 1)
            loss_acc, loss_n = 0.0, 0
            t_eval = time.perf_counter()
            value = record_eval(step, last_loss)
            train_seconds += time.perf_counter() - t_eval
            if _should_stop(value, sft):
                stop = True
        if sft.max_seconds and train_seconds >= sft.max_seconds and not stop:
            log(f"time cap {sft.max_seconds:.0f}s reached at step {step}")
            if history[-1]["step"] != step:
                record_eval(step, loss_acc / max(loss_n, 1) if loss_n else last_loss)
            break
        if sft.checkpoint_every and step % sft.checkpoint_every == 0 and not stop:
            state_dir.mkdir(parents=True, exist_ok=True)
            _atomic_torch_save({"key": key, "model": model.state_dict(), "optimizer": opt.state_dict(),
                                "torch_rng": torch.get_rng_state(), "step": step, "history": history,
                                "best": best, "train_seconds": train_seconds}, state_path)

    model.load_state_dict(best["model"])
    lo, hi = sft.select_band
    metrics = {"steps": step, "selected_step": best["step"], "val_pass1": best["value"], "val_tail": best["tail"],
               "in_band": bool(lo <= best["value"] <= hi), "n_params": n_params,
               "train_seconds": train_seconds, "examples_seen": best["step"] * sft.batch_size}
    metrics.update({f"val/{k}": v for k, v in best["metrics"].items()})
    info = {"metrics": metrics, "sft_settings": sft.to_dict(), "task_settings": ts.to_dict(),
            "history": history}
    save_model_folder(model, tokenizer, out_dir, extra={"training_info.json": info})
    if state_dir.exists() and not sft.keep_state:
        shutil.rmtree(state_dir)
    metrics["seconds"] = time.perf_counter() - t_start
    log(f"done: kept step {best['step']} (val pass@1 {best['value']:.3f}, tail {best['tail']:.3f}, "
        f"in band {metrics['in_band']}), "
        f"{step} steps, {n_params:,} params, {metrics['seconds']:.0f}s -> {out_dir}")
    return metrics


def run_sft(config: dict, data_dir: str | Path, out_dir: str | Path) -> dict:
    """``brorl sft``: :func:`train_sft` with the config's ``sft`` and ``tasks`` sections; its numeric metrics and
    the model folder's small files logged to the rule's MLflow run."""
    import mlflow

    metrics = train_sft(data_dir, out_dir, config["sft"], config["tasks"])
    mlflow.log_metrics({k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))})
    for name in ("config.json", "tokenizer.json", "chat_template.jinja", "training_info.json"):
        if (Path(out_dir) / name).exists():
            mlflow.log_artifact(str(Path(out_dir) / name), artifact_path="model")
    print(f"[sft] wrote {out_dir}: " + ", ".join(f"{k}={v}" for k, v in metrics.items() if isinstance(v, (int, float))))
    return metrics


def load_model(model_dir: str | Path, threads: int = 0, attn_implementation: str | None = "eager"):
    """(model, tokenizer) from an HF folder, offline, in eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if threads:
        torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True, **kwargs)
    model.eval()
    return model, tok


__all__ = ["build_model", "train_sft", "run_sft", "load_model", "save_model_folder", "evaluate_exact", "ExampleStream"]
