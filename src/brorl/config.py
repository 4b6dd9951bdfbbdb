"""Loading and validating the pipeline configuration.

The schema is ``workflow/schemas/config.schema.yaml`` (JSON Schema, draft 2020-12). Validation runs when
the Snakefile is parsed, so a bad config stops the workflow before any job starts. Every error names the
config key (as a dotted path, e.g. ``theory.simulation.n_rollouts[0]``) and the rule it violates.

Constraints that JSON Schema cannot express (relations between keys) are checked in
:func:`cross_field_errors`, and non-finite numbers (``.inf``, ``.nan``) anywhere in :func:`nonfinite_errors`.
This module is the ground floor of the package (it imports none of it; it also says where the project is,
:data:`PROJECT_ROOT`, for the modules that read files beside the code): the checks that
need other packages (arms, launch, task families, data settings, the study plan) live in those packages and reach
:func:`validate_config` as ``checks``, gathered by :func:`brorl.pipeline.config_errors`; the pipeline's entry
points (:mod:`brorl.pipeline`: ``load_config``, ``validate_workflow_config``, ``check_config_files``) pass them.

Config files are read by :func:`read_config_file`, which keeps the line of every key, and merged in order by
:func:`merge_configs` exactly as Snakemake merges ``--configfile A B`` (later files update earlier ones,
recursively for mappings), so an error names the file and line it comes from: ``config/strong.yaml:12:
rl.arms.sample_budget: ...``. A file that cannot be read (missing, malformed YAML, a tab, a ``!!python`` tag,
a repeated key) is reported with its file, line and column, never as a traceback.
"""

from __future__ import annotations

import copy
import json
import math
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PROJECT_ROOT = Path(__file__).resolve().parents[2]
"""Where the project is: the folders the package reads beside its code (the schema, the accelerate configs)."""
SCHEMA_PATH = PROJECT_ROOT / "workflow" / "schemas" / "config.schema.yaml"


Checks = Callable[[dict, list], list]
"""More checks of a config the schema accepts: ``checks(config, sources)`` -> error messages, each starting with its
key (``sources``: the files it was merged from, or None)."""


class ConfigError(ValueError):
    """An invalid configuration; the message lists every violated rule (``errors``) with its key."""

    def __init__(self, errors: str | list[str]):
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("invalid config:\n  " + "\n  ".join(self.errors))


def _key(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


def _join(parent: str, child: str) -> str:
    return child if parent == "<root>" else f"{parent}.{child}"


def schema_errors(config: dict, schema: dict) -> list[str]:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    messages = []
    for err in sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path))):
        key = _key(err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            allowed = set(err.schema.get("properties", {}))
            for extra in sorted(set(err.instance) - allowed):
                messages.append(f"{_join(key, extra)}: unknown key (allowed here: {', '.join(sorted(allowed))})"
                                f" [rule: additionalProperties]")
            continue
        if err.validator == "required":
            missing = err.message.split("'")[1] if "'" in err.message else err.message
            messages.append(f"{_join(key, missing)}: required key is missing [rule: required]")
            continue
        messages.append(f"{key}: {err.message} [rule: {err.validator}={err.validator_value!r}]")
    return messages


def cross_field_errors(config: dict) -> list[str]:
    """Relations between keys of one section that the JSON schema cannot state (the theory stage's). The checks
    of the other packages' sections live beside their code and are gathered by :func:`brorl.pipeline.config_errors`."""
    errors = []
    sim = config.get("theory", {}).get("simulation", {})
    if isinstance(sim.get("vocab_size"), int) and isinstance(sim.get("num_correct"), int):
        needed = sim["num_correct"] + (0 if sim.get("anchor_in_correct", False) else 1)
        if sim["vocab_size"] < needed:
            errors.append(
                f"theory.simulation.vocab_size: {sim['vocab_size']} is smaller than |P| = "
                f"theory.simulation.num_correct = {sim['num_correct']}"
                + ("" if sim.get("anchor_in_correct", False) else " plus the anchor token (not in P)")
                + f" [rule: vocab_size >= {needed}]")
    rc, rw = sim.get("reward_correct"), sim.get("reward_incorrect")
    if isinstance(rc, (int, float)) and isinstance(rw, (int, float)) and not rc > rw:
        errors.append(f"theory.simulation.reward_correct: {rc} must be larger than "
                      f"theory.simulation.reward_incorrect = {rw} [rule: reward_correct > reward_incorrect]")
    sweep = config.get("theory", {}).get("extended_sweep", {})
    lo, hi = sweep.get("n_min"), sweep.get("n_max")
    if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
        errors.append(f"theory.extended_sweep.n_min: {lo} is larger than theory.extended_sweep.n_max = {hi}"
                      f" [rule: n_min <= n_max]")
    steps = sim.get("steps")
    for i, s in enumerate(config.get("theory", {}).get("summary_steps", []) or []):
        if isinstance(steps, int) and isinstance(s, int) and s > steps:
            errors.append(f"theory.summary_steps[{i}]: {s} is beyond theory.simulation.steps = {steps}"
                          f" [rule: summary step <= steps]")
    return errors


def nonfinite_errors(value, path=()) -> list[str]:
    """Every ``.inf``, ``-.inf`` or ``.nan`` in the config, by key: no setting is meaningful at infinity, and
    JSON Schema's bounds let them through (``nan`` fails no comparison, ``inf`` passes every ``minimum``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{_key(path)}: {value} is not a finite number [rule: finite]"]
    if isinstance(value, Mapping):
        return [e for k, v in value.items() for e in nonfinite_errors(v, (*path, str(k)))]
    if isinstance(value, (list, tuple)):
        return [e for i, v in enumerate(value) for e in nonfinite_errors(v, (*path, i))]
    return []


@dataclass
class ConfigFile:
    """One config source: its name (a path, or ``--config`` for command-line values), its data and the line of
    every key path (``("rl", "arms", "seeds", 0)`` -> 108; ``None`` where there is no line)."""

    name: str
    data: dict
    lines: dict[tuple, int | None] = field(default_factory=dict)


def _node_lines(node, path: tuple, lines: dict, duplicates: list[str]) -> None:
    """The line of every key path under a composed YAML node, and the keys a mapping repeats."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue
            key, line = key_node.value, key_node.start_mark.line + 1
            if key in seen:
                duplicates.append(f"{line}: {_key((*path, key))}: repeats the key of line {seen[key]} "
                                  "(YAML would keep only the last) [rule: unique keys]")
            seen[key] = line
            lines[(*path, key)] = line
            _node_lines(value_node, (*path, key), lines, duplicates)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[(*path, i)] = item.start_mark.line + 1
            _node_lines(item, (*path, i), lines, duplicates)


def read_config_file(path: str | Path) -> ConfigFile:
    """Parse one YAML config file (safe YAML: no ``!!python`` tags) keeping the line of every key.

    Raises :class:`ConfigError` naming the file (and line and column) when the file is missing, unreadable,
    malformed, empty, not a mapping or repeats a key.
    """
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{name}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{name}: cannot read it: {err}") from None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        lines, duplicates = {(): 1}, []
        _node_lines(node, (), lines, duplicates)
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as err:
        if isinstance(data := _json(text), dict):  # Snakemake reads JSON first; JSON may indent with tabs
            return ConfigFile(name, data, {(): 1})
        mark = err.problem_mark or err.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        context = err.context and err.context + (f" from line {err.context_mark.line + 1}" if err.context_mark else "")
        what = ": ".join(x for x in (context, err.problem, err.note) if x)
        if "\t" in text and "'\\t'" in what:
            what += " (YAML indents with spaces, never tabs)"
        raise ConfigError(f"{where}: malformed YAML: {what}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{name}: malformed YAML: {err}") from None
    finally:
        loader.dispose()
    if duplicates:
        raise ConfigError([f"{name}:{d}" for d in duplicates])
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"{name}:1: a config file is a mapping of keys, got {got}")
    return ConfigFile(name, data, lines)


def _json(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


def merge_configs(configs) -> dict:
    """Merge config mappings in order as Snakemake's ``--configfile A B`` does (``snakemake.utils.update_config``):
    a later mapping updates an earlier one key by key, recursively where the new value is a mapping; any other
    value (a list included) replaces the old one. The inputs are left unchanged."""
    def update(base, overlay):
        for key, value in overlay.items():
            if not isinstance(base, Mapping):
                base = {}
            base[key] = update(base.get(key, {}), value) if isinstance(value, Mapping) else value
        return base

    merged: dict = {}
    for config in configs:
        update(merged, copy.deepcopy(config))
    return merged


_KEY = re.compile(r"[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+|\[\d+\])*")


def _origin(message: str, sources: list[ConfigFile]) -> str | None:
    """``file:line`` of the key an error message starts with: the last source that sets the key (or, for a
    missing key, its nearest parent)."""
    match = _KEY.match(message)
    if not match:
        return None
    path = tuple(int(i) if i else k for k, i in re.findall(r"([^.\[\]]+)|\[(\d+)\]", match.group()))
    for end in range(len(path), -1, -1):
        for source in reversed(sources):
            if path[:end] in source.lines:
                line = source.lines[path[:end]]
                return source.name if line is None else f"{source.name}:{line}"
    return None


def load_schema(path: str | Path = SCHEMA_PATH) -> dict:
    with open(path) as fh:
        return yaml.safe_load(fh)


def drop_removed_fetches(config: dict) -> dict:
    """Remove, in place, the ``checkpoints.fetch`` entries an overlay set to null: merging can only add or replace
    keys, so ``fetch: {prorl: null}`` is how an overlay drops its base's checkpoint (config/rehearsal.yaml drops
    the paper profile's two hub models). The Snakefile's config is the one validated, so its rules never see them."""
    fetch = (config.get("checkpoints") or {}).get("fetch") if isinstance(config.get("checkpoints"), dict) else None
    if isinstance(fetch, dict):
        for name in [name for name, entry in fetch.items() if entry is None]:
            del fetch[name]
    return config


def validate_config(config: dict, schema: str | Path | dict = SCHEMA_PATH,
                    sources: list[ConfigFile] | None = None, checks: Checks | None = None) -> dict:
    """Raise :class:`ConfigError` naming every bad key; return the config unchanged when valid.

    With ``sources`` (the files the config was merged from), each error starts with the file and line of its key.
    ``checks``: the other packages' checks of a config the schema accepts (the pipeline's:
    :func:`brorl.pipeline.config_errors`; this module imports none of them).
    """
    schema = schema if isinstance(schema, dict) else load_schema(schema)
    if not isinstance(config, dict):
        raise ConfigError(f"the config must be a mapping, got {type(config).__name__}")
    drop_removed_fetches(config)
    errors = nonfinite_errors(config) + schema_errors(config, schema)
    if any(re.match(r"\w+: required key is missing", e) for e in errors):
        errors.append("(top-level keys are missing: is this an overlay? Give its base first, as in "
                      "`--configfile config/config.yaml config/strong.yaml`)")
    if not errors:
        errors = cross_field_errors(config) + (checks(config, sources) if checks else [])
    if errors:
        if sources:
            errors = [f"{where}: {e}" if (where := _origin(e, sources)) else e for e in errors]
        raise ConfigError(errors)
    return config


def read_config_files(paths) -> tuple[list[ConfigFile], list[str]]:
    """Read every file (none is skipped because an earlier one is bad): the files read and the errors."""
    files, errors = [], []
    for path in paths:
        try:
            files.append(read_config_file(path))
        except ConfigError as err:
            errors += err.errors
    return files, errors


def load_config(*paths: str | Path, schema: str | Path | dict = SCHEMA_PATH, checks: Checks | None = None) -> dict[str, Any]:
    """Read, merge (as ``snakemake --configfile PATH...``) and validate config files; errors name file and line."""
    files, errors = read_config_files(paths)
    if errors:
        raise ConfigError(errors)
    return validate_config(merge_configs(f.data for f in files), schema, files, checks)


def check_config_files(paths, each: bool = False, checks: Checks | None = None) -> int:
    """``brorl validate-config``: check config files, by default together, merged in order as `snakemake
    --configfile FILE...` merges them (a base and its overlays); with ``each``, every file on its own. Every file
    is read even when an earlier one is bad; errors name the file and line; returns 1 if anything is bad."""
    groups = [[path] for path in paths] if each else [list(paths)]
    status = 0
    for group in groups:
        label = " + ".join(group)
        files, errors = read_config_files(group)
        if not errors:
            try:
                validate_config(merge_configs(f.data for f in files), sources=files, checks=checks)
            except ConfigError as err:
                errors += err.errors
        if errors:
            print(f"{label}: invalid\n  " + "\n  ".join(errors), file=sys.stderr)
            status = 1
        else:
            print(f"{label}: valid")
    return status


def validate_workflow_config(config: dict, configfiles, overrides: Mapping | None = None,
                             schema: str | Path | dict = SCHEMA_PATH, checks: Checks | None = None) -> dict:
    """The Snakefile's check of the config Snakemake built from ``configfiles`` (in order) and ``--config``
    ``overrides``: the files are read again with their lines, so each error names its file and line (or
    ``--config``), and as safe YAML: Snakemake's loader (PyYAML's FullLoader) accepts ``!!python/tuple`` and
    ``!!python/name`` (a Python object such as ``os.system``), this check refuses every ``!!python`` tag."""
    here = Path.cwd()
    files, errors = read_config_files(p.relative_to(here) if p.is_relative_to(here) else p
                                      for p in map(Path.absolute, map(Path, configfiles)))
    if errors:
        raise ConfigError(errors)
    cli = ConfigFile("--config", dict(overrides or {}))
    cli.lines = {path: None for path in _paths(cli.data)}
    return validate_config(config, schema, [*files, cli], checks)


def _paths(value, path=()):
    """Every key path of a mapping (the ``--config`` overrides have no lines)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield (*path, str(k))
            yield from _paths(v, (*path, str(k)))
