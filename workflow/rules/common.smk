# Shared helpers: config validation (before any job), MLflow settings, JSON params for the CLI.
import json
import os
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

from brorl.config import ConfigError
from brorl.data.benchmarks import check_gated_access
from brorl.data.catalog import benchmark_spec
from brorl.data.hub import FetchError, pin_hint, unpinned
from brorl.pipeline import validate_workflow_config
from brorl.layout import old_layout_message, old_layout_paths
from brorl.profile import Profile

# The files Snakemake merged (the default or the --configfile ones, in order) and --config: errors name file:line.
try:
    validate_workflow_config(config, workflow.configfiles, workflow.config_settings.config,
                             Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml")
except ConfigError as err:
    raise WorkflowError(str(err)) from None

PROFILE = Profile.from_config(config)  # the declared profile (brorl.profile): what the run starts from, trains on
SOURCE = PROFILE.source  # its data source kind: where the arms' data is (brorl.profile.sources(): TaskSource, PaperSource)
# Where the outputs go (brorl.layout, issue 32): results/<root>/, resources/<root>/, logs/<root>/ with root = the
# profile's name (a base) or <name>-<overlay>; a group the overlay reuses (profile.reuses) stays in the base's root.
LAYOUT = PROFILE.layout
ROOT = LAYOUT.root


def at(group, path):
    """``results/...``, ``resources/...`` or ``logs/...`` under the root of a stage group (brorl.layout.GROUPS)."""
    return LAYOUT.path(group, path)


# A checkout with outputs in the layout before the roots: refused before any job (brorl migrate-layout moves them).
if _old := old_layout_paths():
    raise WorkflowError(old_layout_message(_old, workflow.configfiles))
if "sandbox" in config:  # the code sandbox's switch reaches every job (and lm-eval, accelerate ranks) this way
    # (set, not read: nothing a user must define, so no `envvars:` directive)
    os.environ.update(BRORL_SANDBOX_ALLOW_UNCONFINED="1" if config["sandbox"].get("allow_unconfined") else "0")
TRACKING = json.dumps(config["tracking"], sort_keys=True)
# What every `brorl` command shares, set once (as the sandbox switch): the profile and the MLflow store. A rule's
# command names its own config section (--config), outputs and log; `--rule {params.rule}` tags its MLflow run.
os.environ.update(BRORL_PROFILE=PROFILE.to_json(), BRORL_TRACKING=TRACKING)


# GPU jobs on one host (profiles/local-gpu): Snakemake's `gpu` resource only counts, so when the run declares the
# host's GPUs (--resources gpu=N) each GPU job's command runs under `brorl gpu-slot`, which takes the job's GPUs
# out of the N and sets CUDA_VISIBLE_DEVICES (brorl.gpu_slots; under SLURM it leaves the scheduler's binding as
# is). A run without the declaration (the CPU profiles, SLURM) keeps its commands and params unchanged:
# GPU_SLOT goes before the command in the shell, **GPU_SLOT_PARAM into params.
_GPU_TOTAL = workflow.global_resources.get("gpu")
GPU_TOTAL = getattr(_GPU_TOTAL, "value", _GPU_TOTAL)
GPU_SLOT = "{params.gpu_slot}" if GPU_TOTAL else ""


def gpu_slot(wildcards, resources):
    """The `brorl gpu-slot ... -- ` prefix of a job holding resources.gpu GPUs (params.gpu_slot; empty without)."""
    from brorl.gpu_slots import shell_prefix

    return shell_prefix(int(getattr(resources, "gpu", 0) or 0), GPU_TOTAL)


GPU_SLOT_PARAM = {"gpu_slot": gpu_slot} if GPU_TOTAL else {}


def as_json(section):
    """A config section as the JSON text a `brorl` command takes with --config."""
    return json.dumps(section, sort_keys=True)


onstart:
    shell("brorl init-tracking --tracking {TRACKING:q}")


# Checks while the DAG is built (fetch.smk, evaluation.smk): pinned hub sources, gated benchmarks.
def stop_before_any_job(check):
    """Run ``check`` while the DAG is built: its FetchError stops a real run before any job; a dry run warns."""
    try:
        check()
    except FetchError as err:
        if not workflow.dryrun:
            raise
        print(f"WARNING (a real run stops here): {err}", file=sys.stderr)


def pinned_input(output, sources, key):
    """An input function (no input) refusing, where the profile requires pins, hub sources not pinned to a commit unless
    checkpoints.allow_unpinned: ``sources(wildcards)`` -> {name: (revision, commit)}, ``key``: where the pin goes.
    Nothing to check once ``output(wildcards)`` exists. (The job's command checks again.)"""

    def check(wildcards):
        if PROFILE.pins_required and not ALLOW_UNPINNED and not Path(output(wildcards)).exists():
            stop_before_any_job(lambda: unpinned(sources(wildcards), allow=False, how=pin_hint(key(wildcards))))
        return []

    return check


def gated_token_check(wildcards):
    """No input; stops the DAG (before any job) when a gated benchmark must come from the hub without a token."""
    spec = benchmark_spec(wildcards.benchmark)
    if not Path(BENCH_FILES[spec.name]).exists():
        stop_before_any_job(lambda: check_gated_access(spec, config["checkpoints"].get("source"),
                                                       Path(BENCH_FILES[spec.name]).parent / "snapshot"))
    return []


def benchmark_revision(wildcards):
    """{benchmark: (revision, None)} of a hub benchmark (none for a generated one), for the pin check."""
    spec = benchmark_spec(wildcards.benchmark)
    revisions = config["evaluation"].get("revisions") or {}
    return {} if spec.generated else {spec.name: (revisions.get(spec.name) or spec.revision, None)}


def eval_data(benchmark):
    """A benchmark's data for the evaluate rule: a paper benchmark's JSONL, or the tiny tasks (BENCH_FILES:
    evaluation.smk)."""
    return [BENCH_FILES[benchmark]] if benchmark in BENCH_FILES else TASK_FILES


def eval_data_dir(benchmark):
    return str(Path(BENCH_FILES[benchmark]).parent.parent) if benchmark in BENCH_FILES else at("start", "results/data")


def eval_benchmarks(wildcards):
    """The benchmarks of one evaluate job: all of them (one job per model) or its own (EVAL_PER_MODEL)."""
    return EVAL_BENCHMARKS if EVAL_PER_MODEL else [wildcards.benchmark]


def eval_args(wildcards):
    """`--benchmark NAME DATA OUT` for each benchmark of one evaluate job."""
    return " ".join(f"--benchmark {b} {eval_data_dir(b)} {at('arms', 'results/eval')}/{wildcards.model}/{b}.json"
                    for b in eval_benchmarks(wildcards))


# The N-scaling study (study.smk): where an arm starts and which prompt pool it reads.
def study_arm_spec(wildcards):
    """The study arm's spec (brorl.study.plan.arm_spec) for the rule's setting and N wildcards."""
    from brorl.study.plan import arm_spec

    return arm_spec(config["rl"], STUDY_CFG, wildcards.setting, int(wildcards.n))


def study_start(wildcards):
    return STUDY_STARTS[study_arm_spec(wildcards)["start"]]


def study_init(wildcards):
    """The folder an arm starts from (--init; its input may be a fetched folder's manifest)."""
    return STUDY_FOLDERS[study_arm_spec(wildcards)["start"]]


def study_pool(wildcards):
    return STUDY_POOLS[study_arm_spec(wildcards)["pool"]]


def study_pool_files(wildcards):
    return STUDY_POOL_INPUTS[study_arm_spec(wildcards)["pool"]]
