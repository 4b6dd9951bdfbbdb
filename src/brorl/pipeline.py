"""The pipeline's checks of a config, gathered in one place (the entry point the CLI and ``common.smk`` call), and
the pipeline plan the rule files read (:class:`Plan`: every target list once, the declared stage switches).

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

import json
import os
import sys
from collections.abc import Callable, Mapping
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

    errors = families.config_errors(config) + stage_errors(config)
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
    return reuse_errors(base, config, profile.layout, prorl_stage=arms.stage_config)


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


# ------------------------------------------------------------------------------------------------------------------
# The pipeline plan the rule files read (issue 33)
# ------------------------------------------------------------------------------------------------------------------

STAGES = {"train": True, "evaluation": True, "throughput": False, "rg_difficulty": False, "study": False}
"""The stage switches (config ``stages:``) and their defaults (the schema states the same). A stage runs when its
switch is on, never because its config section is there; a switch that is on needs its section (:func:`stage_errors`).
``train``: the ProRL stage (a trained start), the arms and their summary (``rl``); ``evaluation``: lm-eval on the
start and the arms, and the paper tables and figures built from it (``evaluation``); ``throughput``: the throughput
study on the arms' start model (``throughput``); ``rg_difficulty``: the Reasoning Gym difficulty scan
(``rg_difficulty``); ``study``: the N-scaling study (``study``)."""
STAGE_SECTIONS = {"train": "rl", "evaluation": "evaluation", "throughput": "throughput",
                  "rg_difficulty": "rg_difficulty", "study": "study"}
"""The config section each stage reads."""
STAGE_NEEDS = {"throughput": ("train",), "study": ("train",)}
"""Stages that run on another's outputs (the arms' start model): on only with it."""

PAPER_TABLES = {
    "table1": "BroRL Table 1: efficiency and performance (N, prompts/step, steps, samples, hours, scores)",
    "table2": "BroRL Table 2: dynamic-sampling pass rate and generation throughput per N",
    "table3": "BroRL Table 3: math pass@1 per benchmark",
    "table4": "BroRL Table 4: code pass@1 per benchmark",
    "table5": "BroRL Table 5: Reasoning Gym per category",
    "ttest": "BroRL §5: paired t-test on per-instance pass@1 at equal compute",
}
PAPER_FIGURES = {
    "figure1": "BroRL Figure 1: score against training hours and against samples",
    "figure4": "BroRL Figure 4: per-task pass@1 against training hours",
    "passk": "pass@k curves per arm (ProRL's reasoning-boundary view; BroRL does not report it)",
}
"""The paper's tables and figures, each a rule of tables.smk (``paper_<name>``) and its title in the report."""
SPLITS = ("train", "validation", "test")
ALL_CORES = "OMP_NUM_THREADS={threads} OMP_WAIT_POLICY=PASSIVE "
"""The environment of an all-core job (workflow/rules/models.smk): torch's threads, and OpenMP threads that sleep
rather than spin while they wait (on a busy shared machine, spinning made 2-thread jobs 5-15x slower)."""


THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
"""What Snakemake sets to a job's ``threads`` in its shell (snakemake/shell.py): MKL's own threads among them."""


def torch_threads_env() -> str:
    """The environment of a job that Snakemake counts as one core but whose torch runs all cores' threads (the ProRL
    stage, issue 31): its numbers depend on torch's thread count on some CPUs (docs/speed.md, "Time"), so it stays
    at all cores, while it uses about one core's worth (301 CPU s in 256 s at 2 threads), so the one-thread theory
    jobs run beside it instead of after it. SFT uses it too, but takes all cores (it uses ~1.5 cores' worth, so it
    runs alone: workflow/rules/models.smk); its shell stays the same. Every variable of :data:`THREAD_VARS` is set, not
    only OMP_NUM_THREADS: Snakemake exports them all at the job's ``threads`` (1 here), and MKL_NUM_THREADS=1 under
    OMP_NUM_THREADS=2 changed the SFT checkpoint (a run of 2026-12-06: its first validation differed at 1e-11).
    A shell template: the rule declares ``resources: torch_threads=workflow.cores`` (a resource, so the rule's code
    does not change with ``--cores``, which would make Snakemake's code trigger rerun it)."""
    return " ".join(f"{v}={{resources.torch_threads}}" for v in THREAD_VARS) + " OMP_WAIT_POLICY=PASSIVE "


def stages(config: dict) -> dict[str, bool]:
    """The declared stage switches of a config: ``stages:`` over :data:`STAGES`."""
    return {**STAGES, **(config.get("stages") or {})}


def stage_errors(config: dict) -> list[str]:
    """A switch that is on needs its config section, and the stages it runs on."""
    on = stages(config)
    errors = [f"stages.{stage}: true, but the config has no `{STAGE_SECTIONS[stage]}` section to run it with: add the "
              f"section or set stages.{stage}: false [rule: declared stages]"
              for stage in STAGES if on[stage] and not isinstance(config.get(STAGE_SECTIONS[stage]), dict)]
    errors += [f"stages.{stage}: true needs stages.{need}: true (it runs on the arms' start model) "
               "[rule: declared stages]"
               for stage, needs in STAGE_NEEDS.items() for need in needs if on[stage] and not on[need]]
    return errors


def as_json(section) -> str:
    """A config section as the JSON text a `brorl` command takes with --config."""
    return json.dumps(section, sort_keys=True)


class Plan:
    """Every target list of one run, computed once from its config (after :func:`validate_workflow_config`), and the
    stages that are on. ``workflow/rules/common.smk`` builds it as ``PLAN``; each rule file reads ``PLAN`` and its own
    names only, and ``rule all`` asks :attr:`targets`.

    ``cores``: Snakemake's ``--cores`` (a launched arm's threads); ``gpu_total``: the GPUs a one-host run declares
    (``--resources gpu=N``: each GPU job then runs under `brorl gpu-slot`); ``dryrun``: whether this is a dry run,
    asked while the DAG is built (Snakemake sets it after the Snakefile is read): a dry run warns where a real run
    stops before any job (unpinned or gated hub sources)."""

    def __init__(self, config: dict, *, cores: int = 1, gpu_total: int | None = None,
                 dryrun: Callable[[], bool] = lambda: False, environ: Mapping[str, str] | None = None):
        from brorl.data.benchmarks import benchmark_data_root, is_gated
        from brorl.data.training import TrainDataSettings
        from brorl.evaluation.benchmarks import reads_tasks
        from brorl.layout import dvc_folders
        from brorl.study import plan as study

        self.config, self.dryrun, self.gpu_total = config, dryrun, gpu_total
        self.stages = stages(config)
        self.profile = Profile.from_config(config)  # the declared profile (brorl.profile): start, data
        self.source = self.profile.source  # its data source kind (brorl.profile.sources(): TaskSource, PaperSource)
        # Where the outputs go (brorl.layout, issue 32): results/<root>/, resources/<root>/, logs/<root>/; a group the
        # overlay reuses (profile.reuses) stays in the base's root.
        self.layout = self.profile.layout
        self.root = self.layout.root
        self.tracking = as_json(config["tracking"])
        self.sandbox_unconfined = bool((config.get("sandbox") or {}).get("allow_unconfined"))
        # GPU jobs on one host: the command's `brorl gpu-slot ... -- ` prefix and its params (none without gpu=N)
        self.gpu_slot_shell = "{params.gpu_slot}" if gpu_total else ""
        self.gpu_slot_param = {"gpu_slot": self.gpu_slot} if gpu_total else {}
        at = self.at
        rl = config.get("rl") or {}

        # theory.smk: BroRL Section 2 / 4.1
        self.theory_outputs = [at("theory", f"results/theory/{name}") for name in (
            "simulation.csv", "figure3.png", "summary.md", "summary.csv", "extended_sweep.csv", "extended_sweep.md",
            "extended_sweep.png")]

        # fetch.smk: hub checkpoints (their manifests), the paper data blend
        self.fetch = config["checkpoints"]["fetch"]
        # joins a job's config only when set, so other runs' params stay as they were
        self.allow_unpinned = {"allow_unpinned": True} if config["checkpoints"].get("allow_unpinned") else {}
        self.fetched = [at("start", f"resources/models/{name}") for name in self.fetch]
        self.fetch_manifests = [at("start", f"resources/models/{name}.manifest.json") for name in self.fetch]
        data_outputs = [at("start", "results/data/paper_data_blend.csv"), at("start", "results/data/paper_data_blend.md")]

        # rg_difficulty.smk: the Reasoning Gym scan; with rg_difficulty.pick its tasks table feeds the data rules
        self.rg_difficulty = ([at("start", "results/data/rg_difficulty.csv"), at("start", "results/data/rg_difficulty_tasks.csv")]
                              if self.stages["rg_difficulty"] else [])
        data_outputs += self.rg_difficulty
        self.rg_picked = self.rg_difficulty[1:] if self.rg_difficulty and config["rg_difficulty"].get("pick") else []
        self.rg_picked_arg = f" --picked-tasks {self.rg_picked[0]}" if self.rg_picked else ""

        # models.smk: the tiny tasks, SFT, difficulty profiles
        self.tasks = self.profile.data == "tasks"  # the tiny task suite is the arms' data (profile.data)
        self.task_dir = at("start", "results/data")
        self.trained = self.profile.trains_start  # SFT, then the ProRL stage, here (profile.start)
        self.task_files = ([at("start", f"results/data/{task}/{split}.jsonl") for task in config["tasks"]["tasks"]
                            for split in SPLITS] + [at("start", "results/data/tasks.json")] if self.tasks else [])
        self.model_outputs = [at("start", "resources/models/sft")] if self.trained else []
        data_outputs += self.task_files + ([at("start", "results/data/difficulty_sft.csv"),
                                            at("start", "results/data/difficulty_sft.png")] if self.trained else [])

        # training.smk: the ProRL stage (a trained start), the arms, their summary
        train = self.train = self.stages["train"]
        self.prorl_stage = train and self.trained  # else the arms start from rl.start_model, fetched
        self.prorl_results = at("start", "results/train/prorl")
        self.arms = list(arms.arm_plan(rl)) if train else []  # the arm objects' names (brorl.training.arms)
        self.seeds = rl["arms"]["seeds"] if train else []
        self.arm_results = [at("arms", f"results/train/{arm}/seed{seed}") for arm in self.arms for seed in self.seeds]
        self.arm_checkpoints = [at("arms", f"resources/checkpoints/{arm}/seed{seed}") for arm in self.arms
                                for seed in self.seeds]
        self.train_summary = ([at("arms", f"results/train/summary.{ext}") for ext in ("md", "csv", "png")]
                              if train else [])
        difficulty_prorl = ([at("start", "results/data/difficulty_prorl.csv"), at("start", "results/data/difficulty_prorl.png")]
                            if self.prorl_stage else [])
        self.train_outputs = self.train_summary + difficulty_prorl
        self.arm_results_files = [f"{folder}/{name}" for folder in self.arm_results
                                  for name in ("metrics.csv", "summary.json")] + (
            [at("start", "results/train/prorl/metrics.csv"), at("start", "results/train/prorl/summary.json")]
            if self.prorl_stage else [])
        # the arms' start model (the folder the stage reads) and what Snakemake waits for (a fetched one's manifest)
        self.start_model = self.profile.start_model(rl) if train else None
        self.start_input = self.start_model if self.prorl_stage else f"{self.start_model}.manifest.json"
        self.train_data_dir = self.profile.data_dir  # the data source's folder under the start group's root
        self.paper_train_data = (
            [at("start", f"results/data/rl/{source}/{split}.jsonl")
             for source in TrainDataSettings.from_dict(rl["data"]).sources for split in ("train", "validation")]
            + [at("start", "results/data/rl/train_data.json")]
            if train and self.source.kind == "paper" else [])
        self.train_data_files = self.task_files + self.paper_train_data  # the files of the profile's data source
        self.train_data_exclude = [  # evaluation problems kept out of training
            f"{at('start', benchmark_data_root(b, bool((config.get('evaluation') or {}).get('share_gated'))))}/{b}/test.jsonl"
            for b in (rl.get("data") or {}).get("dedup_against", [])]
        # a fetched start: train_arm's processes through `brorl launch` (accelerate; srun per node under SLURM)
        self.accelerate_config = rl.get("launch", {}).get("accelerate_config", "fsdp2") if train else None
        self.arm_launch = "" if self.prorl_stage else f"brorl launch --accelerate-config {self.accelerate_config} -- "
        # a launched arm is that many processes, each with its own model copies: its threads, for Snakemake
        self.arm_threads = (1 if self.prorl_stage or not train else
                            min(cores, launch.processes_per_node(None, self.accelerate_config,
                                                                 os.environ if environ is None else environ)))
        self.arm_init = "{input.model}" if self.prorl_stage else self.start_model
        if self.prorl_stage:
            self.model_outputs.append(at("start", "resources/models/prorl"))
        data_outputs += difficulty_prorl + self.paper_train_data

        # evaluation.smk: lm-eval on the start and every arm's checkpoint per seed
        evaluation = config.get("evaluation") or {}
        ev = self.eval = self.stages["evaluation"]
        self.eval_models = {}
        if ev:
            if self.prorl_stage:  # (a fetched start is listed in evaluation.models)
                self.eval_models["prorl"] = self.start_model
            if train:
                self.eval_models.update({f"{arm}-seed{seed}": at("arms", f"resources/checkpoints/{arm}/seed{seed}")
                                         for arm in self.arms for seed in self.seeds})
            self.eval_models.update({name: at("start", f"resources/models/{name}") for name in evaluation.get("models", [])})
        self.eval_model_input = {name: f"{path}.manifest.json" if path in self.fetched else path
                                 for name, path in self.eval_models.items()}
        self.eval_benchmarks = evaluation["benchmarks"] if ev else []
        self.eval_outputs = [at("arms", f"results/eval/{model}/{bench}.json") for model in self.eval_models
                             for bench in self.eval_benchmarks]
        self.paper_bench = [b for b in self.eval_benchmarks if not reads_tasks(b)]
        self.share_gated = ev and bool(evaluation.get("share_gated"))
        self.bench_files = {b: f"{at('start', benchmark_data_root(b, self.share_gated))}/{b}/test.jsonl"
                            for b in self.paper_bench}
        # a gated benchmark's full records stay local, under this run's resources/<root>/gated/ (not DVC-tracked)
        self.gated_records = ({"gated_root": at("arms", "resources/gated")}
                              if any(is_gated(b) for b in self.paper_bench) and not self.share_gated else {})
        data_outputs += [path for path in self.bench_files.values() if path.startswith("results/")]
        self.eval_per_model = ev and evaluation.get("backend", "hf") == "hf"  # one job per model on the CPU
        self.eval_job = "{model}" if self.eval_per_model else "{model}/{benchmark}"

        # tables.smk: the paper's tables and figures (with the evaluation stage)
        self.tables = ev
        self.table_inputs = self.eval_outputs + ([f"{folder}/summary.json" for folder in self.arm_results] if train else [])
        # (the profile block without an overlay's roots: tables an overlay reuses keep the base's params)
        self.table_plan = as_json({**{key: config.get(key) for key in ("rl", "evaluation", "checkpoints")},
                                   "profile": {k: v for k, v in config["profile"].items() if k not in ("overlay", "reuses")}})
        self.table_outputs = (
            [at("arms", f"results/tables/{name}.{ext}") for name in PAPER_TABLES for ext in ("csv", "md")]
            + [at("arms", f"results/figures/{name}.png") for name in [*PAPER_FIGURES, "figure3"]]
            if self.tables else [])
        self.throughput = self.stages["throughput"]
        self.throughput_outputs = ([at("start", "results/tables/throughput.csv"), at("start", "results/tables/throughput.md"),
                                    at("start", "results/figures/throughput.png")] if self.throughput else [])

        # study.smk: the N-scaling study
        on = self.study = self.stages["study"]
        cfg = self.study_cfg = config.get("study", {}) if on else {}
        self.study_dir, self.study_work = at("study", "results/study"), at("study", "resources/work/study")
        self.study_folders = study.starts(self.profile, rl) if on else {}  # --init
        self.study_starts = {**self.study_folders, "plateau": self.start_input} if on else {}  # what Snakemake waits for
        self.pool_dirs = study.pools(self.profile)
        self.study_pools = self.pool_dirs if on else {}
        self.study_heldout = ({"heldout_settings": cfg["heldout"],
                               "heldout_cache": at("study", "resources/work/study/heldout_start")}
                              if "heldout" in cfg else {})  # the start model's held-out p, measured once for all arms
        self.study_jobs = study.arm_jobs(rl, cfg) if on else []
        self.study_arms = [at("study", f"results/study/{setting}/n{n}/seed{seed}") for setting, n in self.study_jobs
                           for seed in cfg["seeds"]]
        self.study_arm_files = [f"{arm}/{name}" for arm in self.study_arms for name in ("summary.json", "heldout.json")]
        self.study_models = [arm.replace("results/", "resources/", 1) for arm in self.study_arms]
        self.study_summary = ([f"{self.study_dir}/{name}" for name in (
            "summary.md", "summary.csv", "delta.png", "base.png", "budget.png", "saturation.png", "seeds.csv",
            "verdicts.csv")] if on else [])
        self.study_pool = on and self.prorl_stage  # the fresh pool of generated tiny tasks
        self.study_pool_files = ([f"{self.pool_dirs['fresh']}/{task}/{split}.jsonl"
                                  for task in config.get("tasks", {}).get("tasks", []) for split in SPLITS]
                                 + [f"{self.pool_dirs['fresh']}/tasks.json"] if self.prorl_stage else [])
        self.study_premise = on and bool(cfg.get("premise"))  # declared: the rule exists (its files join when run)
        self.study_premise_files = [at("study", f"results/study/premise/seed{s}/{name}")
                                    for s in (study.premise_seeds(cfg) if on else [])
                                    for name in ("summary.json", "heldout.json")]
        self.study_tail = cfg.get("tail_pool") if on and self.tasks else None
        self.study_tail_files = ([f"{self.pool_dirs['tail']}/{task}/{split}.jsonl"
                                  for task in study.tail_families(config["tasks"], self.study_tail) for split in SPLITS]
                                 + [f"{self.pool_dirs['tail']}/tasks.json", f"{self.pool_dirs['tail']}/tail_pool.json"]
                                 if self.study_tail else [])
        self.study_pool_inputs = {"fixed": self.train_data_files, "fresh": self.study_pool_files,
                                  "tail": self.study_tail_files}
        self.study_outputs = self.study_summary + self.study_models
        self.study_earlier = list((cfg.get("earlier") or {}).values())  # earlier studies' per-seed CSVs (committed docs)

        self.data_outputs = data_outputs
        # tracking.smk: every output folder of this root as <folder>.dvc (brorl.layout.dvc_folders)
        self.dvc_tracked = dvc_folders(
            self.root, self.theory_outputs + data_outputs + self.arm_results_files + self.train_summary
            + self.arm_checkpoints + self.eval_outputs + self.table_outputs + self.throughput_outputs
            + self.study_summary + self.study_arm_files + self.study_models,
            fetched=self.fetched, models=self.model_outputs, manifests=self.fetch_manifests)
        self.dvc_files = [f"{folder}.dvc" for folder in self.dvc_tracked]

    @property
    def targets(self) -> list[str]:
        """What ``rule all`` asks for: every stage's final outputs."""
        return (self.theory_outputs + self.fetch_manifests + self.data_outputs + self.model_outputs
                + self.train_outputs + self.arm_checkpoints + self.eval_outputs + self.table_outputs
                + self.throughput_outputs + self.study_outputs + self.dvc_files)

    def at(self, group: str, path: str) -> str:
        """``results/...``, ``resources/...`` or ``logs/...`` under the root of a stage group (brorl.layout.GROUPS)."""
        return self.layout.path(group, path)

    # ---- GPU jobs on one host (profiles/local-gpu) ----
    def gpu_slot(self, wildcards, resources) -> str:
        """The `brorl gpu-slot ... -- ` prefix of a job holding resources.gpu GPUs (params.gpu_slot; empty without)."""
        from brorl.gpu_slots import shell_prefix

        return shell_prefix(int(getattr(resources, "gpu", 0) or 0), self.gpu_total)

    # ---- checks while the DAG is built (fetch.smk, training.smk, evaluation.smk) ----
    def stop_before_any_job(self, check) -> None:
        """Run ``check`` while the DAG is built: its FetchError stops a real run before any job; a dry run warns."""
        from brorl.data.hub import FetchError

        try:
            check()
        except FetchError as err:
            if not self.dryrun():
                raise
            print(f"WARNING (a real run stops here): {err}", file=sys.stderr)

    def pinned_input(self, output, sources, key):
        """An input function (no input) refusing, where the profile requires pins, hub sources not pinned to a commit
        unless checkpoints.allow_unpinned: ``sources(wildcards)`` -> {name: (revision, commit)}, ``key``: where the
        pin goes. Nothing to check once ``output(wildcards)`` exists. (The job's command checks again.)"""
        from brorl.data.hub import pin_hint, unpinned

        def check(wildcards):
            if self.profile.pins_required and not self.allow_unpinned and not Path(output(wildcards)).exists():
                self.stop_before_any_job(lambda: unpinned(sources(wildcards), allow=False, how=pin_hint(key(wildcards))))
            return []

        return check

    def gated_token_check(self, wildcards):
        """No input; stops the DAG (before any job) when a gated benchmark must come from the hub without a token."""
        from brorl.data.benchmarks import check_gated_access
        from brorl.data.catalog import benchmark_spec

        spec = benchmark_spec(wildcards.benchmark)
        if not Path(self.bench_files[spec.name]).exists():
            self.stop_before_any_job(lambda: check_gated_access(spec, self.config["checkpoints"].get("source"),
                                                                Path(self.bench_files[spec.name]).parent / "snapshot"))
        return []

    def benchmark_revision(self, wildcards):
        """{benchmark: (revision, None)} of a hub benchmark (none for a generated one), for the pin check."""
        from brorl.data.catalog import benchmark_spec

        spec = benchmark_spec(wildcards.benchmark)
        revisions = self.config["evaluation"].get("revisions") or {}
        return {} if spec.generated else {spec.name: (revisions.get(spec.name) or spec.revision, None)}

    # ---- the evaluate rule's inputs and arguments ----
    def eval_data(self, benchmark: str) -> list[str]:
        """A benchmark's data: a paper benchmark's JSONL, or the tiny tasks."""
        return [self.bench_files[benchmark]] if benchmark in self.bench_files else self.task_files

    def eval_data_dir(self, benchmark: str) -> str:
        return (str(Path(self.bench_files[benchmark]).parent.parent) if benchmark in self.bench_files
                else self.at("start", "results/data"))

    def eval_job_benchmarks(self, wildcards) -> list[str]:
        """The benchmarks of one evaluate job: all of them (one job per model) or its own."""
        return self.eval_benchmarks if self.eval_per_model else [wildcards.benchmark]

    def eval_args(self, wildcards) -> str:
        """`--benchmark NAME DATA OUT` for each benchmark of one evaluate job."""
        return " ".join(f"--benchmark {b} {self.eval_data_dir(b)} {self.at('arms', 'results/eval')}/{wildcards.model}/{b}.json"
                        for b in self.eval_job_benchmarks(wildcards))

    # ---- the study arm's start and prompt pool ----
    def study_arm_spec(self, wildcards) -> dict:
        """The study arm's spec (brorl.study.plan.arm_spec) for the rule's setting and N wildcards."""
        from brorl.study.plan import arm_spec

        return arm_spec(self.config["rl"], self.study_cfg, wildcards.setting, int(wildcards.n))

    def study_start(self, wildcards) -> str:
        return self.study_starts[self.study_arm_spec(wildcards)["start"]]

    def study_init(self, wildcards) -> str:
        """The folder an arm starts from (--init; its input may be a fetched folder's manifest)."""
        return self.study_folders[self.study_arm_spec(wildcards)["start"]]

    def study_pool_dir(self, wildcards) -> str:
        return self.study_pools[self.study_arm_spec(wildcards)["pool"]]

    def study_pool_input(self, wildcards) -> list[str]:
        return self.study_pool_inputs[self.study_arm_spec(wildcards)["pool"]]
