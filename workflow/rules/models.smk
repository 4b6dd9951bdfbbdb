# Tiny profile: the task suite, the tiny model's supervised warm start, and its difficulty profile.
# (The paper profile starts from the fetched checkpoint instead: workflow/rules/fetch.smk.)
TINY = "sft" in config
TASK_FILES = (
    [f"results/data/{task}/{split}.jsonl" for task in config["tasks"]["tasks"]
     for split in ("train", "validation", "test")] + ["results/data/tasks.json"]
    if TINY else []
)
MODEL_OUTPUTS = ["resources/models/sft"] if TINY else []
DATA_OUTPUTS += TASK_FILES + (["results/data/difficulty_sft.csv", "results/data/difficulty_sft.png"]
                              if TINY else [])

if TINY:

    rule tiny_tasks:
        output:
            TASK_FILES,
        params:
            rule_name="tiny_tasks",
            cfg=as_json(config["tasks"]),
            tracking=TRACKING,
            profile=PROFILE,
        log:
            "logs/data/tiny_tasks.log",
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "OMP_NUM_THREADS={threads} brorl tasks-generate --rule {params.rule_name} --profile {params.profile} --config {params.cfg:q}"
            " --tracking {params.tracking:q} --out results/data 2>&1 | tee {log}"

    rule sft:
        input:
            TASK_FILES,
        output:
            directory("resources/models/sft"),
        params:
            rule_name="sft",
            cfg=as_json({"sft": config["sft"], "tasks": config["tasks"]}),
            tracking=TRACKING,
            profile=PROFILE,
        log:
            "logs/models/sft.log",
        benchmark:
            "logs/benchmarks/sft.tsv"
        threads: 2
        conda:
            "../envs/brorl.yaml"
        shell:
            "OMP_NUM_THREADS={threads} brorl sft --rule {params.rule_name} --profile {params.profile} --config {params.cfg:q}"
            " --tracking {params.tracking:q} --data results/data --out {output} 2>&1 | tee {log}"

    rule difficulty:
        input:
            model="resources/models/{model}",
            data=TASK_FILES,
        output:
            csv="results/data/difficulty_{model}.csv",
            png=report(
                "results/data/difficulty_{model}.png",
                category="Data",
                caption="../report/difficulty.rst",
            ),
        wildcard_constraints:
            model="sft|prorl",
        params:
            rule_name="difficulty",
            cfg=as_json({"difficulty": config["difficulty"], "tasks": config["tasks"]}),
            tracking=TRACKING,
            profile=PROFILE,
            title=lambda wc: {"sft": "SFT warm start", "prorl": "ProRL stage (N=16 plateau)"}[wc.model],
        log:
            "logs/data/difficulty_{model}.log",
        benchmark:
            "logs/benchmarks/difficulty_{model}.tsv"
        threads: 2
        conda:
            "../envs/brorl.yaml"
        shell:
            "OMP_NUM_THREADS={threads} brorl difficulty --rule {params.rule_name} --profile {params.profile} --config {params.cfg:q}"
            " --tracking {params.tracking:q} --wildcard model={wildcards.model} --model {input.model} --data results/data"
            " --title {params.title:q} --csv {output.csv} --png {output.png} 2>&1 | tee {log}"
