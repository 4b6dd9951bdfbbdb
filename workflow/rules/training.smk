# RL training (tiny profile): the ProRL saturation stage from the SFT model at N=16 (until the plateau rule
# fires), then the arms n<N> and the chained `schedule` arm from it, each at the same generated-sample budget,
# over the configured seeds. Stage work folders (resumable checkpoints) live in resources/work/ and survive a
# killed job: rerunning the same `snakemake` command resumes there (profiles/default: rerun-incomplete).
# The paper profile's training (fetched ProRL checkpoint, vLLM rollouts) comes with the cluster profiles.
from brorl.training.arms import plan, stage_config

TRAIN = "rl" in config
ARMS = list(plan(config["rl"])) if TRAIN else []
SEEDS = config["rl"]["arms"]["seeds"] if TRAIN else []
ARM_RESULTS = [f"results/train/{arm}/seed{seed}" for arm in ARMS for seed in SEEDS]
ARM_CHECKPOINTS = [f"resources/checkpoints/{arm}/seed{seed}" for arm in ARMS for seed in SEEDS]
TRAIN_SUMMARY = ["results/train/summary.md", "results/train/summary.csv", "results/train/summary.png"] if TRAIN else []
DIFFICULTY_PRORL = ["results/data/difficulty_prorl.csv", "results/data/difficulty_prorl.png"] if TRAIN else []
TRAIN_OUTPUTS = TRAIN_SUMMARY + DIFFICULTY_PRORL
ARM_RESULTS_FILES = [f"{folder}/{name}" for folder in ARM_RESULTS for name in ("metrics.csv", "summary.json")] + (
    ["results/train/prorl/metrics.csv", "results/train/prorl/summary.json"] if TRAIN else [])
if TRAIN:
    MODEL_OUTPUTS.append("resources/models/prorl")
    DATA_OUTPUTS += DIFFICULTY_PRORL

if TRAIN:

    rule prorl_stage:
        input:
            model="resources/models/sft",
            data=TASK_FILES,
        output:
            model=directory("resources/models/prorl"),
            metrics="results/train/prorl/metrics.csv",
            summary="results/train/prorl/summary.json",
        params:
            rule_name="prorl_stage",
            cfg=as_json(stage_config(config["rl"], "prorl")),
            tracking=TRACKING,
            profile=PROFILE,
        log:
            "logs/train/prorl.log",
        benchmark:
            "logs/benchmarks/prorl_stage.tsv"
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "OMP_NUM_THREADS={threads} brorl train-arm --rule {params.rule_name} --profile {params.profile} --config {params.cfg:q}"
            " --tracking {params.tracking:q} --arm prorl --init {input.model} --data results/data"
            " --work resources/work/prorl --model-out {output.model} --results results/train/prorl 2>&1 | tee {log}"

    rule train_arm:
        input:
            model="resources/models/prorl",
            data=TASK_FILES,
        output:
            model=directory("resources/checkpoints/{arm}/seed{seed}"),
            metrics="results/train/{arm}/seed{seed}/metrics.csv",
            summary="results/train/{arm}/seed{seed}/summary.json",
            probe="results/train/{arm}/seed{seed}/probe.npz",
        wildcard_constraints:
            arm="|".join(ARMS),
            seed=r"\d+",
        params:
            rule_name="train_arm",
            cfg=lambda wildcards: as_json(stage_config(config["rl"], wildcards.arm)),
            tracking=TRACKING,
            profile=PROFILE,
        log:
            "logs/train/{arm}/seed{seed}.log",
        benchmark:
            "logs/benchmarks/train_arm/{arm}/seed{seed}.tsv"
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "OMP_NUM_THREADS={threads} brorl train-arm --rule {params.rule_name} --profile {params.profile} --config {params.cfg:q}"
            " --tracking {params.tracking:q} --wildcard arm={wildcards.arm} --wildcard seed={wildcards.seed}"
            " --arm {wildcards.arm} --seed {wildcards.seed} --init {input.model} --data results/data"
            " --work resources/work/{wildcards.arm}/seed{wildcards.seed} --model-out {output.model}"
            " --results results/train/{wildcards.arm}/seed{wildcards.seed} 2>&1 | tee {log}"

    rule train_summary:
        input:
            [f"{folder}/summary.json" for folder in ARM_RESULTS],
            prorl="results/train/prorl/summary.json",
        output:
            md="results/train/summary.md",
            csv="results/train/summary.csv",
            png=report("results/train/summary.png", category="Training", caption="../report/train_summary.rst"),
        params:
            rule_name="train_summary",
            cfg=as_json(config["rl"]),
            tracking=TRACKING,
            profile=PROFILE,
        log:
            "logs/train/summary.log",
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "brorl train-summary --rule {params.rule_name} --profile {params.profile} --config {params.cfg:q}"
            " --tracking {params.tracking:q} --results results/train --prorl results/train/prorl"
            " --md {output.md} --csv {output.csv} --png {output.png} 2>&1 | tee {log}"
