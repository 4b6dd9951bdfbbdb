"""BroRLTrainer on two processes (accelerate launch, CPU, gloo): one RL step is prompts_per_step prompts over
both processes, dynamic sampling fills each process's share in lockstep, and the advantages, the token
normaliser and the sample count use the statistics of the global batch. The single-process path is checked
against the same global formulas (the helpers reduce to the old computations on one process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from brorl.training.trainer import (dynamic_sampling, global_reinforce_pp_advantages,  # noqa: E402
                                    reinforce_pp_advantages)

WORKER = r'''
import json, os, sys
from pathlib import Path
import torch
from datasets import Dataset
from transformers import AutoTokenizer
from brorl.tasks.core import format_prompt, read_split
from brorl.training.settings import RLSettings
from brorl.training.stage import grpo_config, make_reward
from brorl.training.trainer import BroRLTrainer

root, out = Path(sys.argv[1]), Path(sys.argv[2])
torch.set_num_threads(1)
s = RLSettings(n_rollouts=4, prompts_per_step=4, steps=2, micro_batch_size=4, eta0=1e-3, b0=16, max_rounds=4,
               probe_every=0, checkpoint_every=5, threads=1, seed=3, generation_engine="prefix_tree")
tok = AutoTokenizer.from_pretrained(str(root / "sft"), local_files_only=True)
records = read_split(root / "data", "train", ["add"])
ds = Dataset.from_dict({"prompt": [format_prompt(tok, r) for r in records], "record_index": list(range(len(records)))})
trainer = BroRLTrainer(model=str(root / "sft"), reward_funcs=make_reward(records, tok),
                       args=grpo_config(s, out / f"ckpt", 4), train_dataset=ds, processing_class=tok, settings=s)
rank = trainer.accelerator.process_index
steps = []
inner = trainer._generate_and_score_completions

def spy(inputs):
    res = inner(inputs)
    if trainer.model.training:
        kept = int(trainer.last_rollout["kept_samples"]) if trainer.accelerator.num_processes == 1 else None
        mask = res["completion_mask"]
        local_kept = int((mask.sum(dim=1) > 0).sum())  # rows with loss weight (every kept row has >= 1 token)
        steps.append({"advantages": res["advantages"].tolist(), "num_items": float(res["num_items_in_batch"]),
                      "local_tokens": float(mask.sum()), "rows": int(mask.size(0)),
                      "rollout": {k: float(v) for k, v in trainer.last_rollout.items()},
                      "generated_total": trainer.stage_state.generated_samples,
                      "args": [trainer.args.per_device_train_batch_size, trainer.args.gradient_accumulation_steps,
                               trainer.args.steps_per_generation, trainer.args.generation_batch_size]})
    return res

trainer._generate_and_score_completions = spy
trainer.train()
params = sum(float(p.detach().double().sum()) for p in trainer.model.parameters())
(out / f"rank{rank}.json").write_text(json.dumps({"steps": steps, "params": params,
                                                  "world": trainer.accelerator.num_processes}))
'''


def test_global_advantages_equal_one_batch_split_over_processes():
    torch.manual_seed(0)
    rewards = (torch.rand(6 * 4) < 0.4).float()  # 6 groups of N=4
    whole = reinforce_pp_advantages(rewards, 4)
    halves = [rewards[:8], rewards[8:]]  # 2 + 4 groups: uneven shares (the round cap can leave them uneven)

    def stats(r):
        g = r.view(-1, 4).double()
        c = (g - g.mean(1, keepdim=True)).flatten()
        return torch.tensor([float(c.numel()), c.sum(), (c * c).sum()], dtype=torch.float64)

    total = stats(halves[0]) + stats(halves[1])
    parts = [global_reinforce_pp_advantages(h, 4, lambda x: total) for h in halves]
    assert torch.allclose(torch.cat(parts), whole, atol=1e-5)
    # one process: the sum over processes is the process's own sums
    assert torch.allclose(global_reinforce_pp_advantages(rewards, 4, lambda x: x), whole, atol=1e-5)
    empty = global_reinforce_pp_advantages(torch.zeros(0), 4, lambda x: total)  # a process with no kept group
    assert empty.numel() == 0


def test_dynamic_sampling_in_lockstep_over_two_processes():
    """Two simulated processes: the rounds continue until both hold their share; the refill size is the same on
    both (the largest missing count, the pooled pass rate)."""
    scripts = {0: [[1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]], 1: [[0, 0, 0, 0], [1, 1, 1, 1], [1, 0, 1, 1]]}
    calls = {0: [], 1: []}

    def make(rank):
        def generate_round(r, size):
            calls[rank].append((r, size))
            signal = scripts[rank][r][:size]
            rewards = torch.tensor([[1.0, 0.0] if x else [0.0, 0.0] for x in signal])
            return rewards, [f"p{rank}r{r}g{g}" for g in range(len(signal))]
        return generate_round

    # process 0 fills its share (2) in round 0; process 1 needs rounds 1 and 2; sync pools both
    state = {"r0": None}
    needed = 2
    per_round = {0: [(0, 2, 2), (0, 6, 2), (0, 8, 2)], 1: [(2, 4, 0), (0, 6, 2), (0, 8, 4)]}
    results = {}
    for rank in (0, 1):
        it = iter(range(3))

        def sync(missing, gen, ok, rank=rank, it=it):
            k = next(it)
            other = per_round[1 - rank][k]
            return max(missing, other[0]), gen + other[1], ok + other[2]
        results[rank] = dynamic_sampling(make(rank), needed, 5, sync=sync)
    assert [len(r.kept) for r in results.values()] == [2, 2]
    assert len(calls[0]) == len(calls[1])  # the same rounds on both processes
    assert [size for _, size in calls[0]] == [size for _, size in calls[1]]


@pytest.mark.slow
def test_two_process_accelerate_launch_uses_global_batch_statistics(tmp_path):
    """A real `brorl launch --accelerate-config cpu` with 2 processes (gloo) of a tiny BroRLTrainer run."""
    from brorl.models.toy import toy_model

    toy_model(tmp_path / "data", tmp_path / "sft", max_steps=120, eval_every=60)
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, "-m", "brorl.cli", "launch", "--accelerate-config", "cpu",
                           "--processes-per-node", "2", "--main-port", "29561", "--", str(script), str(tmp_path),
                           str(out)], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert all(r["world"] == 2 for r in ranks)
    assert ranks[0]["params"] == pytest.approx(ranks[1]["params"], rel=1e-9)  # the same update on both
    assert len(ranks[0]["steps"]) == len(ranks[1]["steps"]) == 2
    for a, b in zip(ranks[0]["steps"], ranks[1]["steps"]):
        # per process: 2 of the step's 4 prompts (8 of 16 samples), micro-batch 4, 2 accumulation steps
        assert a["args"] == b["args"] == [4, 2, 2, 16] and a["rows"] == b["rows"] == 8
        # the token normaliser and the sample count are global and identical on both processes
        assert a["num_items"] == b["num_items"] == a["local_tokens"] + b["local_tokens"]
        assert a["generated_total"] == b["generated_total"]
        local = ("rollout_seconds",)  # this process's time (generation time: the slowest process's)
        assert {k: v for k, v in a["rollout"].items() if k not in local} == {
            k: v for k, v in b["rollout"].items() if k not in local}
        assert a["rollout"]["generated_samples"] >= 16 and a["rollout"]["kept_samples"] <= 16
        assert a["rollout"]["kept_samples"] == 4 * a["rollout"]["kept_prompts"]
        # advantages: REINFORCE++ batch statistics over both processes' kept rows
        adv = torch.tensor(a["advantages"] + b["advantages"])
        kept = adv[adv != 0]
        if kept.numel() > 1:
            assert abs(kept.mean().item()) < 1e-4 and kept.std().item() == pytest.approx(1.0, abs=2e-3)


ARM_WORKER = r'''
import json, os, sys
from brorl.training.arms import run_arm, stages_arm
model, data, out = sys.argv[1:4]
stages = [{"n_rollouts": 4, "prompts_per_step": 4, "steps": 2, "probe_every": 1, "checkpoint_every": 1,
           "max_completion_length": 4, "micro_batch_size": 8, "eta0": 1e-3, "b0": 16, "max_rounds": 2, "threads": 1}]
s = run_arm(stages_arm("n4", stages), model, data, f"{out}/work", f"{out}/model", f"{out}/results", seed=0,
            progress=False)
with open(f"{out}/rank{os.environ['RANK']}.json", "w") as f:
    json.dump({k: s[k] for k in ("steps", "generated_samples")}, f)
'''


@pytest.mark.slow
def test_an_arm_runs_in_two_processes(tmp_path):
    """run_arm (the stage runner) under `brorl launch --accelerate-config cpu` with 2 processes: one metrics row
    per step, one final model, the same summary on both processes (the stage runner writes from the main process
    only)."""
    from brorl.models.toy import toy_model

    toy_model(tmp_path / "data", tmp_path / "sft", max_steps=30)
    script = tmp_path / "arm_worker.py"
    script.write_text(ARM_WORKER)
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, "-m", "brorl.cli", "launch", "--accelerate-config", "cpu",
                           "--processes-per-node", "2", "--main-port", "29562", "--", str(script),
                           str(tmp_path / "sft"), str(tmp_path / "data"), str(out)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0] == ranks[1] and ranks[0]["steps"] == 2 and ranks[0]["generated_samples"] >= 32
    lines = (out / "results" / "metrics.csv").read_text().strip().splitlines()
    assert len(lines) == 1 + 2  # header + one row per step (not one per process)
    assert (out / "model" / "model.safetensors").exists() and (out / "results" / "summary.json").exists()
