"""A toy model for tests and smoke checks: an addition-only task suite (2-digit operands) and a 21k-parameter
Llama trained on it for a few seconds. Not a stand-in for anything in the paper; it only has to run."""

from __future__ import annotations

from pathlib import Path

TOY_TASKS = {"tasks": ["add"], "train_size": 64, "validation_size": 8, "test_size": 8, "probe_train_size": 8,
             "probe_validation_size": 8, "probe_test_size": 8, "seed": 5, "add_max_digits": 2}
TOY_SFT = {"model": {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64},
           "batch_size": 64, "lr": 1e-2, "warmup_steps": 10, "select_target": 2.0, "max_seconds": 0,
           "checkpoint_every": 1000, "log_every": 1000}


def toy_model(data_dir: str | Path, model_dir: str | Path, max_steps: int = 30, eval_every: int | None = None,
              threads: int = 1) -> None:
    """Write the toy task splits to ``data_dir`` and train the toy model into ``model_dir`` (an HF folder)."""
    from brorl.models.sft import train_sft
    from brorl.tasks import write_splits

    write_splits(data_dir, TOY_TASKS)
    sft = {**TOY_SFT, "max_steps": max_steps, "eval_every": eval_every or max_steps, "threads": threads}
    train_sft(data_dir, model_dir, sft, TOY_TASKS, progress=False)
