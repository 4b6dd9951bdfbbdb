"""What the tiny and the paper task folders share: the ``!function`` YAML scalar, the YAML dump, the metric
list of a k-sample task, and writing a rendered folder (YAMLs + the hook module it names)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Mapping

import yaml

from brorl.atomic import write_text
from brorl.evaluation.metrics import metric_name, powers_of_two


class FunctionRef(str):
    """A ``!function module.name`` YAML scalar."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(FunctionRef, lambda d, v: d.represent_scalar("!function", str(v)))


def dump_yaml(cfg: Mapping) -> str:
    return yaml.dump(dict(cfg), Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=False,
                     width=120)


def metric_names(k: int) -> list[str]:
    """The metrics a task with k samples reports: ``mean_at_k`` and ``pass_at_<j>`` for j = 1, 2, 4, ... <= k."""
    return ["mean_at_k"] + [metric_name(j) for j in powers_of_two(int(k))]


def write_task_folder(out_dir: Path, files: Mapping[str, str], stale_glob: str, hooks: Path) -> Path:
    """Write ``files`` ({name: YAML text}) into ``out_dir``, remove earlier ``stale_glob`` YAMLs not among them
    (the folder never holds stale task versions) and copy the ``hooks`` module beside them."""
    for old in out_dir.glob(stale_glob):
        if old.name not in files:
            old.unlink()
    for name, text in files.items():
        write_text(out_dir / name, text)
    if (out_dir / hooks.name).resolve() != hooks:
        shutil.copyfile(hooks, out_dir / hooks.name)
    return out_dir
