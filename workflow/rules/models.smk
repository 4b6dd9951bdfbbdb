# Tiny profile: the task suite, the tiny model's supervised warm start, and its difficulty profile.
# (The paper profile starts from the fetched checkpoint instead: workflow/rules/fetch.smk.)
# Threads and priorities (issues 21, 31): a job that takes all cores (`threads: workflow.cores`; torch follows
# OMP_NUM_THREADS when the config's `threads` is 0) runs alone, and Snakemake starts the highest-priority jobs
# that fit the free cores (it never holds a core back). The critical path (tasks -> SFT -> ProRL stage: 100) comes
# first. SFT takes all cores and runs alone (it uses ~1.5 cores' worth: 71 s alone against 126 s beside the
# extended sweep on the AMD host of 2026-12-07, the same checkpoint). The ProRL stage counts as one core for
# Snakemake while its torch runs all cores' threads (`torch_threads_env`: its numbers depend on torch's thread
# count on some CPUs, docs/speed.md "Time", and it uses about one core's worth), so the one-thread jobs that need
# no checkpoint of it (the theory jobs, the extended sweep first, and the SFT's difficulty profile) run beside it
# instead of after it. Then the throughput study (all cores, 50) alone, then the one-thread jobs fill
# every core: the difficulty profiles (20), the extended sweep (5: the longest), the arms (4), then the short theory
# jobs (3) and evaluations (2). Any two one-thread priorities sum below an all-core job's, so none of them delays
# one (Snakemake's ILP sums priorities; tests/test_scheduling.py replays the plan on a measured run:
# `benchmarks/critical_path.py --replay`). ALL_CORES (brorl.pipeline): the environment of an all-core job.
from brorl.pipeline import ALL_CORES, as_json, torch_threads_env

TASKS = PLAN.tasks  # the tiny task suite is the arms' data (profile.data)
TASK_DIR = PLAN.task_dir  # the tiny tasks' folder
TASK_FILES = PLAN.task_files

if TASKS:

    rule tiny_tasks:
        output:
            TASK_FILES,
        params:
            cfg=as_json(config["tasks"]),
        log:
            PLAN.at("start", "logs/data/tiny_tasks.log"),
        benchmark:
            PLAN.at("start", "logs/benchmarks/tiny_tasks.tsv")
        threads: workflow.cores  # a few seconds; it keeps the theory jobs from taking a core the SFT waits for
        priority: 100
        conda:
            "../envs/brorl.yaml"
        shell:
            "OMP_NUM_THREADS={threads} brorl tasks-generate --rule {params.rule} --config {params.cfg:q}"
            f" --out {TASK_DIR} 2>&1 | tee {{log}}"

if PLAN.trained:  # the model is trained here: SFT, then the ProRL stage (profile.start)

    rule sft:
        input:
            TASK_FILES,
        output:
            directory(PLAN.at("start", "resources/models/sft")),
        params:
            cfg=as_json({"sft": config["sft"], "tasks": config["tasks"]}),
        log:
            PLAN.at("start", "logs/models/sft.log"),
        benchmark:
            PLAN.at("start", "logs/benchmarks/sft.tsv")
        threads: workflow.cores  # alone: it uses ~1.5 cores (the header); torch_threads_env keeps its shell as before
        resources:
            torch_threads=workflow.cores,
        priority: 100
        conda:
            "../envs/brorl.yaml"
        shell:
            f"{torch_threads_env()}brorl sft --rule {{params.rule}} --config {{params.cfg:q}}"
            f" --data {TASK_DIR} --out {{output}} 2>&1 | tee {{log}}"

    rule difficulty:
        input:
            model=PLAN.at("start", "resources/models/{model}"),
            data=TASK_FILES,
        output:
            csv=PLAN.at("start", "results/data/difficulty_{model}.csv"),
            png=report(
                PLAN.at("start", "results/data/difficulty_{model}.png"),
                category="Data",
                caption="../report/difficulty.rst",
            ),
        wildcard_constraints:
            model="sft|prorl",
        params:
            cfg=as_json({"difficulty": config["difficulty"], "tasks": config["tasks"]}),
            title=lambda wc: {"sft": "SFT warm start", "prorl": "ProRL stage (N=16 plateau)"}[wc.model],
        log:
            PLAN.at("start", "logs/data/difficulty_{model}.log"),
        benchmark:
            PLAN.at("start", "logs/benchmarks/difficulty_{model}.tsv")
        threads: 1  # 16 CPU s in 30 s at 2 threads: it cannot use a second core (issue 31)
        priority: 20  # after the throughput study (50), before the one-thread jobs below
        conda:
            "../envs/brorl.yaml"
        shell:
            f"{ALL_CORES}brorl difficulty --rule {{params.rule}} --config {{params.cfg:q}}"
            f" --wildcard model={{wildcards.model}} --model {{input.model}} --data {TASK_DIR}"
            " --title {params.title:q} --csv {output.csv} --png {output.png} 2>&1 | tee {log}"
