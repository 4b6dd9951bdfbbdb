# Shared helpers: config validation (before any job), MLflow settings, JSON params for the CLI.
import json
import os
from pathlib import Path

from snakemake.exceptions import WorkflowError

from brorl.config import ConfigError, validate_workflow_config

# The files Snakemake merged (the default or the --configfile ones, in order) and --config: errors name file:line.
try:
    validate_workflow_config(config, workflow.configfiles, workflow.config_settings.config,
                             Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml")
except ConfigError as err:
    raise WorkflowError(str(err)) from None

PROFILE = config["profile"]
if "sandbox" in config:  # the code sandbox's switch reaches every job (and lm-eval, accelerate ranks) this way
    os.environ["BRORL_SANDBOX_ALLOW_UNCONFINED"] = "1" if config["sandbox"].get("allow_unconfined") else "0"
TRACKING = json.dumps(config["tracking"], sort_keys=True)


def as_json(section):
    """A config section as the JSON text a `brorl` command takes with --config."""
    return json.dumps(section, sort_keys=True)


onstart:
    shell("brorl init-tracking --tracking {TRACKING:q}")


def eval_data(wildcards):
    """The evaluate rule's data: a paper benchmark's JSONL, or the tiny tasks (BENCH_FILES: evaluation.smk)."""
    return [BENCH_FILES[wildcards.benchmark]] if wildcards.benchmark in BENCH_FILES else TASK_FILES


def eval_data_dir(wildcards):
    return str(Path(BENCH_FILES[wildcards.benchmark]).parent.parent) if wildcards.benchmark in BENCH_FILES else "results/data"


# The N-scaling study (study.smk): where an arm starts and which prompt pool it reads.
def study_start(wildcards):
    from brorl.study.plan import arm_spec

    return STUDY_STARTS[arm_spec(config["rl"], STUDY_CFG, wildcards.setting, int(wildcards.n))["start"]]


def study_pool(wildcards):
    from brorl.study.plan import arm_spec

    return STUDY_POOLS[arm_spec(config["rl"], STUDY_CFG, wildcards.setting, int(wildcards.n))["pool"]]


def study_pool_files(wildcards):
    return TRAIN_DATA_FILES if study_pool(wildcards) == STUDY_POOLS["fixed"] else STUDY_POOL_FILES
