# RL training. A profile that trains its start (profile.start: trained): the ProRL saturation stage from the SFT
# model at N=16 (until the plateau rule fires), then the arms n<N> and the chained `schedule` arm from it, on the
# tiny tasks. A fetched start (profile.start: fetched, rl.start_model): the arms start from a fetched checkpoint
# and train on the paper data (profile.data: paper; train_data rule, brorl.data.training), their processes
# started by `brorl launch` (accelerate, one node or SLURM) with the config of `rl.launch`. Every arm gets the
# same generated-sample budget, over the configured seeds. Stage work folders (resumable checkpoints) live in
# resources/work/ and survive a killed job: rerunning the same `snakemake` command resumes there.
from brorl.training.arms import plan, stage_config
from brorl.data.benchmarks import benchmark_data_root
from brorl.data.training import TrainDataSettings, hub_revisions
from brorl.training.launch import processes_per_node

TRAIN = "rl" in config
PRORL_STAGE = TRAIN and TRAINED  # the ProRL stage runs here (else: the arms start from rl.start_model, fetched)
PRORL_RESULTS = at("start", "results/train/prorl")  # the ProRL stage's results: the start group's (brorl.layout)
ARMS = list(plan(config["rl"])) if TRAIN else []
SEEDS = config["rl"]["arms"]["seeds"] if TRAIN else []
ARM_RESULTS = [at("arms", f"results/train/{arm}/seed{seed}") for arm in ARMS for seed in SEEDS]
ARM_CHECKPOINTS = [at("arms", f"resources/checkpoints/{arm}/seed{seed}") for arm in ARMS for seed in SEEDS]
TRAIN_SUMMARY = [at("arms", "results/train/summary.md"), at("arms", "results/train/summary.csv"), at("arms", "results/train/summary.png")] if TRAIN else []
DIFFICULTY_PRORL = [at("start", "results/data/difficulty_prorl.csv"), at("start", "results/data/difficulty_prorl.png")] if PRORL_STAGE else []
TRAIN_OUTPUTS = TRAIN_SUMMARY + DIFFICULTY_PRORL
ARM_RESULTS_FILES = [f"{folder}/{name}" for folder in ARM_RESULTS for name in ("metrics.csv", "summary.json")] + (
    [at("start", "results/train/prorl/metrics.csv"), at("start", "results/train/prorl/summary.json")] if PRORL_STAGE else [])
# The arms' start model (the folder the stage reads) and what Snakemake waits for (a fetched folder's manifest).
START_MODEL = PROFILE.start_model(config["rl"]) if TRAIN else None
START_INPUT = START_MODEL if PRORL_STAGE else f"{START_MODEL}.manifest.json"
TRAIN_DATA_DIR = PROFILE.data_dir  # the data source's folder under the start group's root
PAPER_TRAIN_DATA = (
    [at("start", f"results/data/rl/{source}/{split}.jsonl") for source in TrainDataSettings.from_dict(config["rl"]["data"]).sources
     for split in ("train", "validation")] + [at("start", "results/data/rl/train_data.json")]
    if TRAIN and SOURCE.kind == "paper" else []
)
TRAIN_DATA_FILES = TASK_FILES + PAPER_TRAIN_DATA  # the files of the profile's data source kind
# A fetched start: train_arm's processes through `brorl launch` (accelerate; srun per node under SLURM).
ACCELERATE_CONFIG = config["rl"].get("launch", {}).get("accelerate_config", "fsdp2") if TRAIN else None
# A trained start: the arms read the ProRL stage's folder (an input); a fetched one: they run under `brorl launch`
# from the fetched checkpoint (its manifest is the input, the folder beside it is --init).
ARM_LAUNCH = "" if PRORL_STAGE else f"brorl launch --accelerate-config {ACCELERATE_CONFIG} -- "
# A launched arm is that many processes (cpu: 2), each with its own model copies (SmolLM2: ~5 GB): Snakemake
# counts them as the job's threads, so two launched arms do not share 2 cores (or the memory) side by side.
ARM_THREADS = 1 if PRORL_STAGE or not TRAIN else min(workflow.cores, processes_per_node(None, ACCELERATE_CONFIG, os.environ))
ARM_INIT = "{input.model}" if PRORL_STAGE else START_MODEL
TRAIN_ARM_SHELL = (
    f"OMP_NUM_THREADS={{threads}} {GPU_SLOT}{ARM_LAUNCH}brorl train-arm --rule {{params.rule}}"
    " --config {params.cfg:q} --wildcard arm={wildcards.arm} --wildcard seed={wildcards.seed}"
    f" --arm {{wildcards.arm}} --seed {{wildcards.seed}} --init {ARM_INIT} --data {TRAIN_DATA_DIR}"
    f" --work {at('arms', 'resources/work')}/{{wildcards.arm}}/seed{{wildcards.seed}} --model-out {{output.model}}"
    f" --results {at('arms', 'results/train')}/{{wildcards.arm}}/seed{{wildcards.seed}} 2>&1 | tee {{log}}"
)
if PRORL_STAGE:
    MODEL_OUTPUTS.append(at("start", "resources/models/prorl"))
DATA_OUTPUTS += DIFFICULTY_PRORL + PAPER_TRAIN_DATA

if PAPER_TRAIN_DATA:

    rule train_data:
        # The paper training data (ProRL v1 blend: DeepScaleR math, Eurus-2 code, Reasoning Gym) through the
        # pinned fetch code (checkpoints.source: the hub or a local stand-in); raw snapshots in resources/data/rl.
        input:
            pinned_input(lambda wc: at("start", "results/data/rl/train_data.json"),
                         lambda wc: hub_revisions(TrainDataSettings.from_dict(config["rl"]["data"])),
                         lambda wc: "rl.data.revisions.<source>"),
            RG_PICKED,
            exclude=[f"{at('start', benchmark_data_root(b, bool(config.get('evaluation', {}).get('share_gated'))))}/{b}/test.jsonl"
                     for b in config["rl"]["data"].get("dedup_against", [])],  # evaluation problems kept out of training
        output:
            PAPER_TRAIN_DATA,
        params:
            cfg=as_json({"data": config["rl"]["data"], "source": config["checkpoints"]["source"], **ALLOW_UNPINNED}),
        log:
            at("start", "logs/data/train_data.log"),
        benchmark:
            at("start", "logs/benchmarks/train_data.tsv")
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "brorl train-data --rule {params.rule} --config {params.cfg:q}"
            f" --out {at('start', 'results/data/rl')} --cache {at('start', 'resources/data/rl')}{RG_PICKED_ARG}"
            " --exclude {input.exclude} 2>&1 | tee {log}"

if PRORL_STAGE:

    rule prorl_stage:
        input:
            model=at("start", "resources/models/sft"),
            data=TASK_FILES,
        output:
            model=directory(at("start", "resources/models/prorl")),
            metrics=at("start", "results/train/prorl/metrics.csv"),
            summary=at("start", "results/train/prorl/summary.json"),
        params:
            cfg=as_json(stage_config(config["rl"], "prorl")),
        log:
            at("start", "logs/train/prorl.log"),
        benchmark:
            at("start", "logs/benchmarks/prorl_stage.tsv")
        threads: workflow.cores  # on the critical path, alone (threads: workflow/rules/models.smk)
        priority: 100
        conda:
            "../envs/brorl.yaml"
        shell:
            f"{ALL_CORES}brorl train-arm --rule {{params.rule}} --config {{params.cfg:q}}"
            f" --arm prorl --init {{input.model}} --data {TASK_DIR} --work {at('start', 'resources/work/prorl')}"
            f" --model-out {{output.model}} --results {PRORL_RESULTS} 2>&1 | tee {{log}}"

if TRAIN:

    rule train_arm:
        input:
            model=START_INPUT,
            data=TRAIN_DATA_FILES,
        output:
            model=directory(at("arms", "resources/checkpoints/{arm}/seed{seed}")),
            metrics=at("arms", "results/train/{arm}/seed{seed}/metrics.csv"),
            summary=at("arms", "results/train/{arm}/seed{seed}/summary.json"),
            probe=at("arms", "results/train/{arm}/seed{seed}/probe.npz"),
        wildcard_constraints:
            arm="|".join(ARMS),
            seed=r"\d+",
        params:
            cfg=lambda wildcards: as_json(stage_config(config["rl"], wildcards.arm)),
            **GPU_SLOT_PARAM,  # this job's GPUs on one host (common.smk)
        log:
            at("arms", "logs/train/{arm}/seed{seed}.log"),
        benchmark:
            at("arms", "logs/benchmarks/train_arm/{arm}/seed{seed}.tsv")
        threads: ARM_THREADS
        priority: 4  # above theory (3) and evaluation (2): right after the ProRL stage (models.smk, issue 31)
        conda:
            "../envs/brorl.yaml"
        shell:
            TRAIN_ARM_SHELL

    rule train_summary:
        input:
            [f"{folder}/summary.json" for folder in ARM_RESULTS],
            [at("start", "results/train/prorl/summary.json")] if PRORL_STAGE else [],
        output:
            md=at("arms", "results/train/summary.md"),
            csv=at("arms", "results/train/summary.csv"),
            png=report(at("arms", "results/train/summary.png"), category="Training", caption="../report/train_summary.rst"),
        params:
            cfg=as_json(config["rl"]),
        log:
            at("arms", "logs/train/summary.log"),
        benchmark:
            at("arms", "logs/benchmarks/train_summary.tsv")
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "brorl train-summary --rule {params.rule} --config {params.cfg:q}"
            f" --results {at('arms', 'results/train')} --prorl {PRORL_RESULTS}"
            " --md {output.md} --csv {output.csv} --png {output.png} 2>&1 | tee {log}"
            if PRORL_STAGE else
            "brorl train-summary --rule {params.rule} --config {params.cfg:q}"
            f" --results {at('arms', 'results/train')}"
            " --md {output.md} --csv {output.csv} --png {output.png} 2>&1 | tee {log}"
