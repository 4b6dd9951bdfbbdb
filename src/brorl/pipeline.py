"""The pipeline's checks of a config, gathered in one place: the entry point the CLI and ``common.smk`` call.

:mod:`brorl.config` reads, merges and schema-checks config files and imports nothing of the package; each check
that needs a package's knowledge lives in that package, beside the code it guards, and :func:`config_errors`
calls them in order (a config the schema accepts):

=============================================  ==========================================================
``brorl.tasks.families.config_errors``         task family names (``tasks.tasks``, ``sft.select_tasks``)
``brorl.profile.Profile.config_errors``        the sections the declared profile needs
``brorl.training.arms.plan_errors``            every arm stage's settings (``rl``)
``brorl.training.arms.start_errors``           where the arms start (``rl.prorl`` / ``rl.start_model``)
``brorl.profile.Source.config_errors``         the arms' data (``rl.data`` for the paper data only)
``brorl.training.launch.config_errors``        prompts per step split across `brorl launch`'s processes
``brorl.training.memory.memory_plan_errors``   every arm fits its GPUs (``rl.memory_plan``)
``brorl.study.plan.study_errors``              the N-scaling study (``study``)
``brorl.evaluation.benchmarks.config_errors``  benchmarks and evaluated models (``evaluation``)
``brorl.evaluation.rg_difficulty.config_errors``  the Reasoning Gym scan (``rg_difficulty``)
=============================================  ==========================================================

The functions below are :mod:`brorl.config`'s with these checks: :func:`load_config`, :func:`validate_config`,
:func:`validate_workflow_config` (the Snakefile's, before any job), :func:`check_config_files` (`brorl
validate-config`) and :func:`run_memory_plan` (`brorl memory-plan`).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from brorl import config as _config
from brorl.config import SCHEMA_PATH, ConfigError, ConfigFile
from brorl.evaluation import benchmarks, rg_difficulty
from brorl.profile import Profile
from brorl.study.plan import study_errors
from brorl.tasks import families
from brorl.training import arms, launch, memory


def config_errors(config: dict, sources: list[ConfigFile] | None = None) -> list[str]:
    """Every package's check of a config the schema accepts (the table above), in order; with ``sources`` (the files
    merged), an overlay's reused stage groups against its base (brorl.layout, issue 32)."""
    from brorl.layout import layout_errors

    errors = families.config_errors(config)
    block = config["profile"]  # the schema has checked the block; the roots are checked here (brorl.layout)
    if roots := layout_errors(block.get("name"), block.get("overlay"), block.get("reuses") or ()):
        return errors + roots
    profile = Profile.from_config(config)
    errors += profile.config_errors(config)
    if isinstance(config.get("rl"), dict):
        errors += arms.plan_errors(config["rl"], profile.trains_start)
        errors += arms.start_errors(config, profile)
        errors += profile.source.config_errors(config["rl"])
        errors += launch.config_errors(config["rl"], profile)
        if not errors:  # the memory plan builds every arm's RLSettings: only on a plan that is otherwise valid
            errors += memory.memory_plan_errors(config)
    if isinstance(config.get("study"), dict):
        errors += study_errors(config)
    errors += benchmarks.config_errors(config, profile)
    errors += rg_difficulty.config_errors(config)
    if not errors and sources:
        errors = _reuse_errors(config, sources)
    return errors


def _reuse_errors(config: dict, sources: list[ConfigFile]) -> list[str]:
    """An overlay's reused stage groups against its base (the files before the first that declares
    ``profile.overlay``, with the same ``--config`` values): brorl.layout.reuse_errors."""
    from brorl.config import merge_configs
    from brorl.layout import base_files, reuse_errors

    profile = Profile.from_config(config)
    if not profile.reuses:
        return []
    base_sources = base_files(sources)
    if not base_sources or len(base_sources) == len(sources):
        return []
    base = merge_configs([f.data for f in base_sources] + [f.data for f in sources if f.name == "--config"])
    if "profile" not in base:
        return []
    return reuse_errors(base, config, profile.layout)


def validate_config(config: dict, schema: str | Path | dict = SCHEMA_PATH,
                    sources: list[ConfigFile] | None = None) -> dict:
    """:func:`brorl.config.validate_config` with every package's check."""
    return _config.validate_config(config, schema, sources, checks=config_errors)


def load_config(*paths: str | Path, schema: str | Path | dict = SCHEMA_PATH) -> dict:
    """Read, merge (as ``snakemake --configfile PATH...``) and validate config files; errors name file and line."""
    return _config.load_config(*paths, schema=schema, checks=config_errors)


def validate_workflow_config(config: dict, configfiles, overrides: Mapping | None = None,
                             schema: str | Path | dict = SCHEMA_PATH) -> dict:
    """The Snakefile's check (``common.smk``): :func:`brorl.config.validate_workflow_config` with every check."""
    return _config.validate_workflow_config(config, configfiles, overrides, schema, checks=config_errors)


def check_config_files(paths, each: bool = False) -> int:
    """``brorl validate-config``: :func:`brorl.config.check_config_files` with every check."""
    return _config.check_config_files(paths, each, checks=config_errors)


def run_memory_plan(paths) -> int:
    """``brorl memory-plan --configfile FILE...``: print every arm's table (:mod:`brorl.training.memory`); 1 if one
    does not fit (or the config is invalid for another reason, printed as ``brorl validate-config`` prints it)."""
    files, errors = _config.read_config_files(paths)
    config = _config.merge_configs(f.data for f in files) if not errors else None
    if config is not None:
        try:
            validate_config(config, sources=files)
        except ConfigError as err:  # the memory plan's own errors still get their tables below
            errors = [e for e in err.errors if "rl.memory_plan: arm " not in e]
    if errors:
        print("invalid config:\n  " + "\n  ".join(errors), file=sys.stderr)
        return 1
    if "memory_plan" not in config.get("rl", {}):
        print("rl.memory_plan: not declared (this profile declares no GPUs): nothing to plan", file=sys.stderr)
        return 1
    plans = memory.arm_plans(config)
    print(memory.format_table(plans))
    return 0 if all(p.fits for p in plans) else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_memory_plan(sys.argv[1:]))
