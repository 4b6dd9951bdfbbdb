# The start model's pass rates on candidate Reasoning Gym tasks, and the tasks in BroRL's band (config section
# `rg_difficulty`, small profile; brorl.evaluation.rg_difficulty). The model is a fetched checkpoint (its manifest
# is the input). With rg_difficulty.pick the tasks it picks are the training tasks (train_data) and the evaluated
# ones (benchmark_data): both read its tasks table (`--picked-tasks`); without it the table is only reported.
RG_DIFFICULTY = [at("start", "results/data/rg_difficulty.csv"), at("start", "results/data/rg_difficulty_tasks.csv")] if "rg_difficulty" in config else []
DATA_OUTPUTS += RG_DIFFICULTY
RG_PICKED = RG_DIFFICULTY[1:] if RG_DIFFICULTY and config["rg_difficulty"].get("pick") else []  # [] or [tasks csv]
RG_PICKED_ARG = f" --picked-tasks {RG_PICKED[0]}" if RG_PICKED else ""

if RG_DIFFICULTY:

    rule rg_difficulty:
        input:
            model=at("start", f"resources/models/{config['rg_difficulty']['model']}.manifest.json"),
        output:
            csv=RG_DIFFICULTY[0],
            tasks=RG_DIFFICULTY[1],
        params:
            cfg=as_json({k: v for k, v in config["rg_difficulty"].items() if k != "model"}),
            model=lambda wildcards, input: input.model.removesuffix(".manifest.json"),  # the folder beside it
        log:
            at("start", "logs/data/rg_difficulty.log"),
        benchmark:
            at("start", "logs/benchmarks/rg_difficulty.tsv")
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "OMP_NUM_THREADS={threads} brorl rg-difficulty --rule {params.rule}"
            " --config {params.cfg:q} --model {params.model}"
            " --csv {output.csv} --tasks-csv {output.tasks} 2>&1 | tee {log}"
