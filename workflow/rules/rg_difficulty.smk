# The start model's pass rates on candidate Reasoning Gym tasks, and the tasks in BroRL's band (config section
# `rg_difficulty`, small profile; brorl.evaluation.rg_difficulty). The model is a fetched checkpoint (its manifest
# is the input). With rg_difficulty.pick the tasks it picks are the training tasks (train_data) and the evaluated
# ones (benchmark_data): both read its tasks table (`--picked-tasks`); without it the table is only reported.
from brorl.pipeline import as_json

RG_DIFFICULTY = PLAN.rg_difficulty  # [scan csv, tasks csv] when stages.rg_difficulty

if RG_DIFFICULTY:

    rule rg_difficulty:
        input:
            model=PLAN.at("start", f"resources/models/{config['rg_difficulty']['model']}.manifest.json"),
        output:
            csv=RG_DIFFICULTY[0],
            tasks=RG_DIFFICULTY[1],
        params:
            cfg=as_json({k: v for k, v in config["rg_difficulty"].items() if k != "model"}),
            model=lambda wildcards, input: input.model.removesuffix(".manifest.json"),  # the folder beside it
        log:
            PLAN.at("start", "logs/data/rg_difficulty.log"),
        benchmark:
            PLAN.at("start", "logs/benchmarks/rg_difficulty.tsv")
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "OMP_NUM_THREADS={threads} brorl rg-difficulty --rule {params.rule}"
            " --config {params.cfg:q} --model {params.model}"
            " --csv {output.csv} --tasks-csv {output.tasks} 2>&1 | tee {log}"
