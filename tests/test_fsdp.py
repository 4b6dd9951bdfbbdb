"""Sharded checkpoints (issue 27, defect 5): the end-of-stage copy of the optimizer state and the hand-over to the
next stage for the three layouts a checkpoint can hold (``optimizer.pt``, FSDP's gathered ``optimizer.bin``, FSDP's
sharded ``optimizer_0/``), and FSDP2 itself: an arm trained by ``brorl launch`` with the project's
``workflow/accelerate/fsdp2.yaml`` on 2 gloo processes of this CPU, killed after a mid-way checkpoint, resumed
from it, finished, and handed over to a second stage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from brorl.training.fsdp import (FSDP_FULL_OPTIMIZER, FSDP_SHARDED_MODEL, FSDP_SHARDED_OPTIMIZER, FULL_OPTIMIZER,
                                 export_optimizer, load_checkpoint_model, load_optimizer_state, optimizer_layout)
from brorl.training.stage import read_metrics

ROOT = Path(__file__).resolve().parents[1]


def _tiny_llama(tmp_path: Path, tie: bool = True) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=tie)
    folder = tmp_path / "init"
    LlamaForCausalLM(cfg).save_pretrained(folder)
    return folder


def _trained_optimizer(model, steps: int = 2) -> torch.optim.AdamW:
    decay = [p for n, p in model.named_parameters() if "norm" not in n]  # two groups, as the Trainer builds them
    rest = [p for n, p in model.named_parameters() if "norm" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=1e-3)
    ids = torch.randint(0, 32, (2, 6))
    for _ in range(steps):
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    return opt


def _by_name(model, opt) -> dict:
    """The optimizer's state keyed by parameter name (what FSDP writes)."""
    name_of = {id(p): n for n, p in model.named_parameters()}
    return {name_of[id(p)]: opt.state[p] for g in opt.param_groups for p in g["params"] if p in opt.state}


def test_export_optimizer_reads_every_checkpoint_layout(tmp_path):
    """optimizer.pt is copied byte for byte; optimizer.bin and the sharded DCP folder become one state dict keyed by
    parameter name; a checkpoint without any of them is a clear error naming the three."""
    import torch.distributed.checkpoint as dcp
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(_tiny_llama(tmp_path))
    opt = _trained_optimizer(model)
    named = {"state": _by_name(model, opt), "param_groups": []}
    plain, full, sharded = (tmp_path / k for k in ("plain", "full", "sharded"))
    for d in (plain, full, sharded):
        d.mkdir()
    torch.save(opt.state_dict(), plain / FULL_OPTIMIZER)
    torch.save(named, full / FSDP_FULL_OPTIMIZER)
    dcp.save({"optimizer": named}, checkpoint_id=str(sharded / FSDP_SHARDED_OPTIMIZER))  # accelerate's layout
    assert [optimizer_layout(d) for d in (plain, full, sharded)] == [FULL_OPTIMIZER, FSDP_FULL_OPTIMIZER,
                                                                     FSDP_SHARDED_OPTIMIZER]
    for d in (plain, full, sharded):
        export_optimizer(d, d / "handed_over.pt")
    assert (plain / "handed_over.pt").read_bytes() == (plain / FULL_OPTIMIZER).read_bytes()
    for d in (full, sharded):
        state = torch.load(d / "handed_over.pt", weights_only=True)["state"]
        assert set(state) == set(named["state"])
        for name, moments in named["state"].items():
            assert torch.equal(state[name]["exp_avg_sq"], moments["exp_avg_sq"])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="optimizer.pt, optimizer.bin and optimizer_0"):
        export_optimizer(empty, empty / "x.pt")


def test_hand_over_by_name_equals_hand_over_by_index(tmp_path):
    """A previous stage's moments keyed by name (FSDP) land on the same parameters as the same moments keyed by
    index (torch.optim); this stage's learning rates are kept; a name the model lacks is refused."""
    from transformers import AutoModelForCausalLM

    init = _tiny_llama(tmp_path)
    src = AutoModelForCausalLM.from_pretrained(init)
    old = _trained_optimizer(src)
    torch.save(old.state_dict(), tmp_path / "by_index.pt")
    torch.save({"state": _by_name(src, old), "param_groups": []}, tmp_path / "by_name.pt")
    loaded = {}
    for key in ("by_index", "by_name"):
        model = AutoModelForCausalLM.from_pretrained(init)
        opt = _trained_optimizer(model, steps=0)
        for g in opt.param_groups:
            g["lr"] = 5e-4  # this stage's rate
        load_optimizer_state(model, opt, tmp_path / f"{key}.pt")
        assert all(g["lr"] == 5e-4 for g in opt.param_groups)
        loaded[key] = _by_name(model, opt)
    assert set(loaded["by_index"]) == set(loaded["by_name"]) == set(_by_name(src, old))
    for name, moments in loaded["by_index"].items():
        for k in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(moments[k], loaded["by_name"][name][k]), (name, k)
    torch.save({"state": {"model.not_a_layer.weight": {}}, "param_groups": []}, tmp_path / "bad.pt")
    model = AutoModelForCausalLM.from_pretrained(init)
    with pytest.raises(ValueError, match="does not have: \\['model.not_a_layer.weight'\\]"):
        load_optimizer_state(model, _trained_optimizer(model, steps=0), tmp_path / "bad.pt")


def test_policy_from_sharded_model_folder(tmp_path):
    """A checkpoint with only FSDP's sharded model folder gives the trained weights (tied embedding re-tied); one
    with model.safetensors loads as before."""
    import torch.distributed.checkpoint as dcp
    from transformers import AutoModelForCausalLM

    init = _tiny_llama(tmp_path)
    trained = AutoModelForCausalLM.from_pretrained(init)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.5)
    ckpt = tmp_path / "checkpoint-3"
    weights = {k: v for k, v in trained.state_dict().items() if k != "lm_head.weight"}  # tied: FSDP saves one
    dcp.save({"model": weights}, checkpoint_id=str(ckpt / FSDP_SHARDED_MODEL))
    model = load_checkpoint_model(ckpt, init)
    for k, v in trained.state_dict().items():
        assert torch.equal(model.state_dict()[k], v), k
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    dcp.save({"model": {"model.norm.weight": weights["model.norm.weight"]}},
             checkpoint_id=str(tmp_path / "partial" / FSDP_SHARDED_MODEL))
    with pytest.raises(ValueError, match="do not match"):
        load_checkpoint_model(tmp_path / "partial", init)
    trained.save_pretrained(tmp_path / "plain")
    assert torch.equal(load_checkpoint_model(tmp_path / "plain", init).model.norm.weight, trained.model.norm.weight)


# ------------------------------------------------------------------------------- FSDP2 on 2 gloo processes

ARM_WORKER = r'''
import json, os, signal, sys
from brorl.training import trainer as trainer_module
from brorl.training.arms import run_arm, stages_arm

model, data, out, kill_at, engine = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
facts = {}
save = trainer_module.BroRLTrainer._save_checkpoint


def save_then_maybe_die(self, model_, trial):
    from torch.distributed.tensor import DTensor

    from torch.distributed.fsdp import FSDPModule

    layers = [(n, p) for n, p in self.model.named_parameters() if ".layers." in n]
    facts.setdefault("fsdp_root", isinstance(self.model, FSDPModule))
    facts.setdefault("distributed_type", str(self.accelerator.distributed_type))
    facts.setdefault("layers_not_sharded", [n for n, p in layers if not isinstance(p, DTensor)])
    facts.setdefault("layer_share", sum(p.to_local().numel() for _, p in layers if isinstance(p, DTensor))
                     / sum(p.numel() for _, p in layers))
    save(self, model_, trial)
    if self.state.global_step == kill_at:  # every process dies right after the mid-way checkpoint is complete
        os.kill(os.getpid(), signal.SIGKILL)


trainer_module.BroRLTrainer._save_checkpoint = save_then_maybe_die
st = {"prompts_per_step": 4, "probe_every": 1, "checkpoint_every": 1, "max_completion_length": 4,
      "micro_batch_size": 8, "eta0": 1e-2, "b0": 16, "max_rounds": 2, "threads": 1, "n_rollouts": 4,
      "generation_engine": engine}  # hf: TRL's generate (synced over the processes); grouped samplers are refused
stages = [{**st, "steps": 3}, {**st, "steps": 1}]  # stage 2 starts from stage 1's policy and optimizer
s = run_arm(stages_arm("schedule", stages), model, data, f"{out}/work", f"{out}/model", f"{out}/results", seed=0)
with open(f"{out}/rank{os.environ['RANK']}.json", "w") as f:
    json.dump({"steps": s["steps"], "generated_samples": s["generated_samples"], **facts}, f)
'''


def _fsdp2_cpu_config(tmp_path: Path, state_dict_type: str) -> Path:
    """workflow/accelerate/fsdp2.yaml as the paper profile ships it, for 2 CPU processes (no bf16 autocast)."""
    cfg = yaml.safe_load((ROOT / "workflow" / "accelerate" / "fsdp2.yaml").read_text())
    assert cfg["distributed_type"] == "FSDP" and cfg["fsdp_config"]["fsdp_version"] == 2
    cfg.update(use_cpu=True, mixed_precision="no", num_processes=2)
    cfg["fsdp_config"]["fsdp_state_dict_type"] = state_dict_type
    path = tmp_path / f"fsdp2-cpu-{state_dict_type}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("state_dict_type", ["SHARDED_STATE_DICT", "FULL_STATE_DICT"])
def test_fsdp2_arm_resumes_from_its_checkpoint_and_hands_over(tmp_path, state_dict_type):
    from brorl.models.toy import toy_model

    toy_model(tmp_path / "data", tmp_path / "sft", max_steps=120, eval_every=120)
    script = tmp_path / "arm_worker.py"
    script.write_text(ARM_WORKER)
    out = tmp_path / "out"
    config = _fsdp2_cpu_config(tmp_path, state_dict_type)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1", "TOKENIZERS_PARALLELISM": "false"}

    def launch(kill_at: int, engine: str = "hf", folder: Path = out) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "brorl.cli", "launch", "--accelerate-config", str(config),
                               "--processes-per-node", "2", "--", str(script), str(tmp_path / "sft"),
                               str(tmp_path / "data"), str(folder), str(kill_at), engine],
                              capture_output=True, text=True, timeout=600, env=env)

    first = launch(kill_at=2)
    assert first.returncode != 0 and not (out / "rank0.json").exists()  # killed after checkpoint 2 of 3
    stage0 = next((out / "work").glob("stage0-*"))
    ckpt = stage0 / "checkpoints" / "checkpoint-2"
    assert (ckpt / "brorl_checkpoint.json").exists(), first.stdout[-2000:] + first.stderr[-4000:]
    sharded = state_dict_type == "SHARDED_STATE_DICT"
    assert optimizer_layout(ckpt) == (FSDP_SHARDED_OPTIMIZER if sharded else FSDP_FULL_OPTIMIZER)
    assert not (ckpt / FULL_OPTIMIZER).exists()  # what the stage copied before the fix
    if sharded:
        assert len(list((ckpt / FSDP_SHARDED_OPTIMIZER).glob("*.distcp"))) == 2  # one shard per process
        assert not (ckpt / "model.safetensors").exists()

    second = launch(kill_at=-1)
    log = second.stdout + second.stderr
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-5000:]
    assert "FSDP on the CPU" in log and f"resuming from {ckpt}" in log
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r in ranks:  # FSDP2 sharded the model: each process holds about half of every layer
        assert r["fsdp_root"] and r["distributed_type"] == "DistributedType.FSDP", r
        assert not r["layers_not_sharded"] and 0.4 < r["layer_share"] < 0.6, r  # (accelerate keeps the tail group,
        # embedding + final norm, unsharded between forward and backward: reshard_after_forward=False)
    assert ranks[0]["steps"] == ranks[1]["steps"] == 4
    assert [r["step"] for r in read_metrics(stage0)] == [1, 2, 3]  # resumed: no step twice, none skipped

    # end of stage: the policy and one optimizer file keyed by parameter name, continuing into stage 2
    handed = torch.load(stage0 / "model" / FULL_OPTIMIZER, weights_only=True)
    assert all(isinstance(k, str) for k in handed["state"]) and handed["state"]
    assert {float(v["step"]) for v in handed["state"].values()} == {3.0}
    stage1 = next((out / "work").glob("stage1-*"))
    after = torch.load(stage1 / "model" / FULL_OPTIMIZER, weights_only=True)["state"]
    assert {float(v["step"]) for v in after.values()} == {4.0}  # stage 2 kept stage 1's moments (3 + 1 steps)
    assert set(after) == set(handed["state"])
    for path in (stage0 / "model", out / "model"):
        assert (path / "model.safetensors").exists()
    summary = json.loads((stage0 / "summary.json").read_text())
    assert summary["steps"] == 3
    if sharded:  # the grouped CPU sampler would desynchronise FSDP's all-gathers: refused before any step
        refused = launch(kill_at=-1, engine="prefix_tree", folder=tmp_path / "refused")
        assert refused.returncode != 0 and "cannot run under FSDP" in refused.stdout + refused.stderr
