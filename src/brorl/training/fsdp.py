"""FSDP around the stage runner: the checkpoint layouts of an optimizer, and FSDP2 on the CPU.

**Optimizer state in a checkpoint** (what ``Trainer._save_checkpoint`` writes, transformers 5.17 / accelerate
1.16), three layouts:

- ``optimizer.pt``: one process or plain data parallel; ``torch.optim`` state, keyed by parameter index.
- ``optimizer.bin``: FSDP with ``fsdp_state_dict_type: FULL_STATE_DICT``; the gathered state, keyed by parameter
  name (``get_optimizer_state_dict``), written by process 0.
- ``optimizer_0/``: FSDP with ``SHARDED_STATE_DICT``; a ``torch.distributed.checkpoint`` folder (one ``.distcp``
  file per process), keyed by parameter name; the model sits beside it in ``pytorch_model_fsdp_0/``, and no
  ``model.safetensors`` is written.

:func:`export_optimizer` turns any of them into one file for the next stage (``model/optimizer.pt``); the
next stage's :func:`load_optimizer_state` reads it into its optimizer, sharded or not.

**FSDP2 on the CPU.** accelerate 1.16 enables FSDP only for GPU-like distributed types: with ``use_cpu`` (or on a
machine without a GPU) an accelerate config that says ``distributed_type: FSDP`` silently runs plain data
parallel (``MULTI_CPU``, DDP over gloo). torch 2.13's ``fully_shard`` itself shards on the CPU over gloo, so
:func:`engage_fsdp_on_cpu` lets accelerate take its FSDP branch there (the rehearsal of the paper profile's
FSDP2 on this CPU; on a GPU it does nothing).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

FULL_OPTIMIZER = "optimizer.pt"       # torch.optim state dict (one process / DDP), keys: parameter indices
FSDP_FULL_OPTIMIZER = "optimizer.bin"  # FSDP FULL_STATE_DICT (accelerate's OPTIMIZER_NAME + .bin), keys: names
FSDP_SHARDED_OPTIMIZER = "optimizer_0"  # FSDP SHARDED_STATE_DICT: a DCP folder, keys: names
FSDP_SHARDED_MODEL = "pytorch_model_fsdp_0"


def fsdp_requested() -> bool:
    """The launch asked for FSDP (accelerate launch sets this from the config's ``distributed_type: FSDP``)."""
    return os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"


def engage_fsdp_on_cpu(log=print) -> bool:
    """After ``TrainingArguments`` set up a CPU process group: if the launch asked for FSDP, make accelerate's
    ``AcceleratorState`` take its FSDP branch instead of the silent DDP fall-back (see the module doc). Returns
    whether it did. Call it between building the ``TrainingArguments`` and the trainer."""
    from accelerate import PartialState
    from accelerate.utils import DistributedType

    if not fsdp_requested() or torch.cuda.is_available():
        return False
    state = PartialState()
    if state.distributed_type != DistributedType.MULTI_CPU:
        return False
    # AcceleratorState reads the shared PartialState's type; the device stays cpu and the backend gloo
    PartialState._shared_state["distributed_type"] = DistributedType.MULTI_GPU
    if state.is_main_process:
        log("FSDP on the CPU: accelerate 1.16 would run DDP here (MULTI_CPU); its FSDP branch is used over gloo")
    return True


def optimizer_layout(checkpoint: str | Path) -> str | None:
    """Which optimizer file or folder a checkpoint holds (one of the names above), or None."""
    checkpoint = Path(checkpoint)
    for name in (FULL_OPTIMIZER, FSDP_FULL_OPTIMIZER):
        if (checkpoint / name).is_file():
            return name
    if (checkpoint / FSDP_SHARDED_OPTIMIZER).is_dir():
        return FSDP_SHARDED_OPTIMIZER
    return None


def read_dcp(folder: str | Path) -> dict:
    """A ``torch.distributed.checkpoint`` folder as one state dict in memory (no process group needed)."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    sd: dict = {}
    _load_state_dict(sd, storage_reader=FileSystemReader(str(folder)), planner=_EmptyStateDictLoadPlanner(),
                     no_dist=True)
    return sd


def export_optimizer(checkpoint: str | Path, dest: str | Path) -> str:
    """Write the checkpoint's optimizer state as one file ``dest`` (atomically) for the next stage; returns the
    layout it found. ``optimizer.pt`` is copied byte for byte; an FSDP checkpoint's gathered (``optimizer.bin``)
    or sharded (``optimizer_0/``) state becomes one full state dict keyed by parameter name."""
    checkpoint, dest = Path(checkpoint), Path(dest)
    layout = optimizer_layout(checkpoint)
    if layout is None:
        raise FileNotFoundError(f"{checkpoint}: no optimizer state (looked for {FULL_OPTIMIZER}, "
                                f"{FSDP_FULL_OPTIMIZER} and {FSDP_SHARDED_OPTIMIZER}/)")
    tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
    if layout == FSDP_SHARDED_OPTIMIZER:
        state = read_dcp(checkpoint / layout)
        torch.save(state["optimizer"] if "optimizer" in state else state, tmp)
    else:
        shutil.copyfile(checkpoint / layout, tmp)
    os.replace(tmp, dest)
    return layout


def load_checkpoint_model(checkpoint: str | Path, init_model_dir: str | Path):
    """The policy of a checkpoint as an HF model on the CPU: from its ``model.safetensors`` (one process, DDP, FSDP
    with a full state dict), or from its sharded ``pytorch_model_fsdp_0/`` into the architecture of
    ``init_model_dir`` (every weight must be in the checkpoint; tied weights are re-tied)."""
    from transformers import AutoModelForCausalLM

    checkpoint = Path(checkpoint)
    sharded = checkpoint / FSDP_SHARDED_MODEL
    if not sharded.is_dir():
        return AutoModelForCausalLM.from_pretrained(str(checkpoint), local_files_only=True)
    weights = read_dcp(sharded)
    weights = weights.get("model", weights)
    model = AutoModelForCausalLM.from_pretrained(str(init_model_dir), local_files_only=True)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    model.tie_weights()
    loaded = {p.data_ptr() for k, p in model.state_dict().items() if k in weights}
    untied = [k for k in missing if model.state_dict()[k].data_ptr() not in loaded]
    if unexpected or untied:
        raise ValueError(f"{sharded}: the sharded weights do not match {init_model_dir}'s model "
                         f"(missing {untied[:5]}, unexpected {unexpected[:5]})")
    return model


def _is_sharded(model) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def load_optimizer_state(model, optimizer, path: str | Path) -> None:
    """Load the moments of a previous stage's optimizer (``path``: what :func:`export_optimizer` wrote) into this
    stage's ``optimizer`` over ``model``, keeping this stage's parameter groups (learning rates). Keys by
    parameter index (torch.optim) or by name (FSDP); the model sharded by FSDP2 or not."""
    saved = torch.load(path, map_location="cpu", weights_only=True)["state"]
    opt = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps the torch one
    by_index = all(isinstance(k, int) for k in saved)
    if by_index and not _is_sharded(model):  # the same optimizer layout: torch's own loader
        sd = opt.state_dict()
        sd["state"] = saved
        opt.load_state_dict(sd)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    name_of = {id(p): name for name, p in model.named_parameters()}  # the names FSDP2 state dicts use
    groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [name_of[id(p)] for p in g["params"]]}
              for g in opt.param_groups]  # this stage's groups (learning rates, weight decay)
    names = [name for g in groups for name in g["params"]]
    if by_index:  # torch.optim numbers the parameters in the order of the groups
        if max(saved, default=-1) >= len(names):
            raise ValueError(f"{path}: optimizer state for {max(saved) + 1} parameters, the model has {len(names)}")
        saved = {names[k]: v for k, v in saved.items()}
    unknown = sorted(set(saved) - set(names))
    if unknown:
        raise ValueError(f"{path}: optimizer state for parameters the model does not have: {unknown[:5]}")
    # every process holds the full state; set_optimizer_state_dict keeps each process's shard of it
    set_optimizer_state_dict(model, opt, {"state": saved, "param_groups": groups},
                             options=StateDictOptions(full_state_dict=True))
