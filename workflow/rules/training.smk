# RL training. A profile that trains its start (profile.start: trained): the ProRL saturation stage from the SFT
# model at N=16 (until the plateau rule fires), then the arms n<N> and the chained `schedule` arm from it, on the
# tiny tasks. A fetched start (profile.start: fetched, rl.start_model): the arms start from a fetched checkpoint
# and train on the paper data (profile.data: paper; train_data rule, brorl.data.training), their processes
# started by `brorl launch` (accelerate, one node or SLURM) with the config of `rl.launch`. Every arm gets the
# same generated-sample budget, over the configured seeds. Stage work folders (resumable checkpoints) live in
# resources/work/ and survive a killed job: rerunning the same `snakemake` command resumes there.
from brorl.data.training import TrainDataSettings, hub_revisions
from brorl.pipeline import as_json, torch_threads_env
from brorl.training.arms import stage_config

PRORL_STAGE = PLAN.prorl_stage  # the ProRL stage runs here (else: the arms start from rl.start_model, fetched)
PRORL_RESULTS = PLAN.prorl_results  # the ProRL stage's results: the start group's (brorl.layout)
PAPER_TRAIN_DATA = PLAN.paper_train_data  # the paper data's files (profile.data: paper)
# A trained start: the arms read the ProRL stage's folder (an input); a fetched one: they run under `brorl launch`
# (accelerate; srun per node under SLURM) from the fetched checkpoint (its manifest is the input, the folder beside
# it is --init). A launched arm is that many processes (cpu: 2), each with its own model copies (SmolLM2: ~5 GB):
# Snakemake counts them as the job's threads (PLAN.arm_threads), so two launched arms do not share 2 cores side by side.
TRAIN_ARM_SHELL = (
    f"OMP_NUM_THREADS={{threads}} {PLAN.gpu_slot_shell}{PLAN.arm_launch}brorl train-arm --rule {{params.rule}}"
    " --config {params.cfg:q} --wildcard arm={wildcards.arm} --wildcard seed={wildcards.seed}"
    f" --arm {{wildcards.arm}} --seed {{wildcards.seed}} --init {PLAN.arm_init} --data {PLAN.train_data_dir}"
    f" --work {PLAN.at('arms', 'resources/work')}/{{wildcards.arm}}/seed{{wildcards.seed}} --model-out {{output.model}}"
    f" --results {PLAN.at('arms', 'results/train')}/{{wildcards.arm}}/seed{{wildcards.seed}} 2>&1 | tee {{log}}"
)

if PAPER_TRAIN_DATA:

    rule train_data:
        # The paper training data (ProRL v1 blend: DeepScaleR math, Eurus-2 code, Reasoning Gym) through the
        # pinned fetch code (checkpoints.source: the hub or a local stand-in); raw snapshots in resources/data/rl.
        input:
            PLAN.pinned_input(lambda wc: PLAN.at("start", "results/data/rl/train_data.json"),
                              lambda wc: hub_revisions(TrainDataSettings.from_dict(config["rl"]["data"])),
                              lambda wc: "rl.data.revisions.<source>"),
            PLAN.rg_picked,
            exclude=PLAN.train_data_exclude,  # evaluation problems kept out of training
        output:
            PAPER_TRAIN_DATA,
        params:
            cfg=as_json({"data": config["rl"]["data"], "source": config["checkpoints"]["source"], **PLAN.allow_unpinned}),
        log:
            PLAN.at("start", "logs/data/train_data.log"),
        benchmark:
            PLAN.at("start", "logs/benchmarks/train_data.tsv")
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "brorl train-data --rule {params.rule} --config {params.cfg:q}"
            f" --out {PLAN.at('start', 'results/data/rl')} --cache {PLAN.at('start', 'resources/data/rl')}{PLAN.rg_picked_arg}"
            " --exclude {input.exclude} 2>&1 | tee {log}"

if PRORL_STAGE:

    rule prorl_stage:
        input:
            model=PLAN.at("start", "resources/models/sft"),
            data=PLAN.task_files,
        output:
            model=directory(PLAN.at("start", "resources/models/prorl")),
            metrics=PLAN.at("start", "results/train/prorl/metrics.csv"),
            summary=PLAN.at("start", "results/train/prorl/summary.json"),
        params:
            cfg=as_json(stage_config(config["rl"], "prorl")),
        log:
            PLAN.at("start", "logs/train/prorl.log"),
        benchmark:
            PLAN.at("start", "logs/benchmarks/prorl_stage.tsv")
        threads: 1  # on the critical path: one core for Snakemake, all cores' threads for torch (models.smk)
        resources:
            torch_threads=workflow.cores,
        priority: 100
        conda:
            "../envs/brorl.yaml"
        shell:
            f"{torch_threads_env()}brorl train-arm --rule {{params.rule}} --config {{params.cfg:q}}"
            f" --arm prorl --init {{input.model}} --data {PLAN.task_dir} --work {PLAN.at('start', 'resources/work/prorl')}"
            f" --model-out {{output.model}} --results {PRORL_RESULTS} 2>&1 | tee {{log}}"

if PLAN.train:

    rule train_arm:
        input:
            model=PLAN.start_input,
            data=PLAN.train_data_files,
        output:
            model=directory(PLAN.at("arms", "resources/checkpoints/{arm}/seed{seed}")),
            metrics=PLAN.at("arms", "results/train/{arm}/seed{seed}/metrics.csv"),
            summary=PLAN.at("arms", "results/train/{arm}/seed{seed}/summary.json"),
            probe=PLAN.at("arms", "results/train/{arm}/seed{seed}/probe.npz"),
        wildcard_constraints:
            arm="|".join(PLAN.arms),
            seed=r"\d+",
        params:
            cfg=lambda wildcards: as_json(stage_config(config["rl"], wildcards.arm)),
            **PLAN.gpu_slot_param,  # this job's GPUs on one host (common.smk)
        log:
            PLAN.at("arms", "logs/train/{arm}/seed{seed}.log"),
        benchmark:
            PLAN.at("arms", "logs/benchmarks/train_arm/{arm}/seed{seed}.tsv")
        threads: PLAN.arm_threads
        priority: 4  # above theory (3) and evaluation (2): right after the ProRL stage (models.smk, issue 31)
        conda:
            "../envs/brorl.yaml"
        shell:
            TRAIN_ARM_SHELL

    rule train_summary:
        input:
            [f"{folder}/summary.json" for folder in PLAN.arm_results],
            [PLAN.at("start", "results/train/prorl/summary.json")] if PRORL_STAGE else [],
        output:
            md=PLAN.at("arms", "results/train/summary.md"),
            csv=PLAN.at("arms", "results/train/summary.csv"),
            png=report(PLAN.at("arms", "results/train/summary.png"), category="Training", caption="../report/train_summary.rst"),
        params:
            cfg=as_json(config["rl"]),
        log:
            PLAN.at("arms", "logs/train/summary.log"),
        benchmark:
            PLAN.at("arms", "logs/benchmarks/train_summary.tsv")
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "brorl train-summary --rule {params.rule} --config {params.cfg:q}"
            f" --results {PLAN.at('arms', 'results/train')} --prorl {PRORL_RESULTS}"
            " --md {output.md} --csv {output.csv} --png {output.png} 2>&1 | tee {log}"
            if PRORL_STAGE else
            "brorl train-summary --rule {params.rule} --config {params.cfg:q}"
            f" --results {PLAN.at('arms', 'results/train')}"
            " --md {output.md} --csv {output.csv} --png {output.png} 2>&1 | tee {log}"
