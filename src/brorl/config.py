"""Loading and validating the pipeline configuration.

The schema is ``workflow/schemas/config.schema.yaml`` (JSON Schema, draft 2020-12). Validation runs when
the Snakefile is parsed, so a bad config stops the workflow before any job starts. Every error names the
config key (as a dotted path, e.g. ``theory.simulation.n_rollouts[0]``) and the rule it violates.

Constraints that JSON Schema cannot express (relations between keys) are checked in
:func:`cross_field_errors`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = PROJECT_ROOT / "workflow" / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """An invalid configuration; the message lists every violated rule with its key."""


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
    """Relations between keys that the JSON schema cannot state."""
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
    if isinstance(config.get("rl"), dict):
        from brorl.training.arms import plan_errors

        errors += plan_errors(config["rl"])
        errors += _rl_start_errors(config)
    if isinstance(config.get("study"), dict):
        from brorl.study.plan import study_errors

        errors += study_errors(config)
    evaluation = config.get("evaluation")
    if isinstance(evaluation, dict):
        from brorl.evaluation.benchmarks import benchmark_names

        known = benchmark_names()
        for i, name in enumerate(evaluation.get("benchmarks") or []):
            if name not in known:
                errors.append(f"evaluation.benchmarks[{i}]: unknown benchmark {name!r} (registered: "
                              f"{', '.join(known)}) [rule: brorl.evaluation.benchmarks]")
        tiny = [b for b in evaluation.get("benchmarks") or [] if str(b).startswith("tiny_")]
        if tiny and "sft" not in config:
            errors.append("evaluation.benchmarks: the tiny_* benchmarks read the tiny tasks' test splits, which "
                          "only the tiny profile makes (`sft` and `tasks`) [rule: tiny benchmarks need the tiny tasks]")
        for i, name in enumerate(evaluation.get("models") or []):
            if name not in (config.get("checkpoints", {}).get("fetch") or {}):
                errors.append(f"evaluation.models[{i}]: {name!r} is not a fetched checkpoint "
                              "(checkpoints.fetch) [rule: evaluated models exist]")
    return errors


def _rl_start_errors(config: dict) -> list[str]:
    """Where the arms start: the ProRL stage trained here (``rl.prorl``, tiny profile: from the SFT model on the
    tiny tasks) or a fetched checkpoint named by ``rl.start_model`` (paper profile: no ProRL stage, the paper
    training data of ``rl.data``). Exactly one of the two."""
    rl, errors = config["rl"], []
    fetch = config.get("checkpoints", {}).get("fetch") or {}
    start = rl.get("start_model")
    if "prorl" in rl:
        if start is not None:
            errors.append("rl.start_model: the arms start from the ProRL stage when rl.prorl is set; set one of "
                          "rl.prorl (train it here) and rl.start_model (a fetched checkpoint) [rule: one start model]")
        if "prorl" in fetch:
            errors.append("checkpoints.fetch.prorl: resources/models/prorl is the ProRL stage's output when "
                          "rl.prorl is set; fetch the hub checkpoint under another name [rule: one writer per folder]")
        if "sft" not in config:
            errors.append("rl.prorl: the ProRL stage trains from the SFT model on the tiny tasks (`sft`, `tasks`); "
                          "without them set rl.start_model to a fetched checkpoint instead [rule: ProRL stage needs sft]")
        if "data" in rl:
            errors.append("rl.data: the paper training data is for arms that start from a fetched checkpoint "
                          "(rl.start_model); the ProRL stage and its arms train on the tiny tasks [rule: rl.data with start_model]")
    else:
        if start is None:
            errors.append("rl.start_model: required without rl.prorl: name the fetched checkpoint "
                          "(checkpoints.fetch) the arms start from [rule: one start model]")
        elif start not in fetch:
            errors.append(f"rl.start_model: {start!r} is not a fetched checkpoint (checkpoints.fetch: "
                          f"{', '.join(fetch) or 'none'}) [rule: start model is fetched]")
        if "data" not in rl:
            errors.append("rl.data: required without rl.prorl: the arms train on the paper data "
                          "(brorl.training.paper_data) [rule: rl.data with start_model]")
        else:
            from brorl.training.paper_data import TrainDataSettings

            try:
                TrainDataSettings.from_dict(rl["data"])
            except (TypeError, ValueError) as err:
                errors.append(f"rl.data: {err} [rule: brorl.training.paper_data.TrainDataSettings]")
    return errors


def load_schema(path: str | Path = SCHEMA_PATH) -> dict:
    with open(path) as fh:
        return yaml.safe_load(fh)


def validate_config(config: dict, schema: str | Path | dict = SCHEMA_PATH) -> dict:
    """Raise :class:`ConfigError` naming every bad key; return the config unchanged when valid."""
    schema = schema if isinstance(schema, dict) else load_schema(schema)
    if not isinstance(config, dict):
        raise ConfigError(f"the config must be a mapping, got {type(config).__name__}")
    errors = schema_errors(config, schema)
    if not errors:
        errors = cross_field_errors(config)
    if errors:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))
    return config


def load_config(path: str | Path, schema: str | Path | dict = SCHEMA_PATH) -> dict[str, Any]:
    with open(path) as fh:
        config = yaml.safe_load(fh) or {}
    return validate_config(config, schema)
