# The pipeline plan (brorl.pipeline.Plan), built once after the config check: every target list, the stage switches
# (config `stages:`), the wildcard helpers. Each rule file reads PLAN and its own names only; `rule all` asks
# PLAN.targets (tests/test_rule_files.py checks that no rule file reads another's globals).
import os
from pathlib import Path

from snakemake.exceptions import WorkflowError

from brorl.config import ConfigError
from brorl.layout import old_layout_message, old_layout_paths
from brorl.pipeline import Plan, validate_workflow_config

# The files Snakemake merged (the default or the --configfile ones, in order) and --config: errors name file:line.
try:
    validate_workflow_config(config, workflow.configfiles, workflow.config_settings.config,
                             Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml")
except ConfigError as err:
    raise WorkflowError(str(err)) from None

# A checkout with outputs in the layout before the roots: refused before any job (brorl migrate-layout moves them).
if _old := old_layout_paths():
    raise WorkflowError(old_layout_message(_old, workflow.configfiles))

# GPU jobs on one host (profiles/local-gpu): Snakemake's `gpu` resource only counts, so when the run declares the
# host's GPUs (--resources gpu=N) each GPU job's command runs under `brorl gpu-slot`, which takes the job's GPUs
# out of the N and sets CUDA_VISIBLE_DEVICES (brorl.gpu_slots; under SLURM it leaves the scheduler's binding as
# is). A run without the declaration (the CPU profiles, SLURM) keeps its commands and params unchanged:
# PLAN.gpu_slot_shell goes before the command in the shell, **PLAN.gpu_slot_param into params.
_gpu_total = workflow.global_resources.get("gpu")
PLAN = Plan(config, cores=workflow.cores, gpu_total=getattr(_gpu_total, "value", _gpu_total),
            dryrun=lambda: workflow.dryrun)

# What every `brorl` command shares, set once: the profile, the MLflow store, and the code sandbox's switch (it
# reaches every job, lm-eval and accelerate ranks this way; set, not read: no `envvars:` directive). A rule's
# command names its own config section (--config), outputs and log; `--rule {params.rule}` tags its MLflow run.
os.environ.update(BRORL_PROFILE=PLAN.profile.to_json(), BRORL_TRACKING=PLAN.tracking,
                  BRORL_SANDBOX_ALLOW_UNCONFINED="1" if PLAN.sandbox_unconfined else "0")


onstart:
    shell("brorl init-tracking --tracking {PLAN.tracking:q}")
