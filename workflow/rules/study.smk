# The N-scaling study (config/study.yaml; README "The N-scaling study"): from the ProRL checkpoint, arms at
# equal generated samples in total for N in study.ns and each setting's N, over study.seeds; held-out metrics per
# arm; results/study/summary.md over the settings of study.include (all when empty). An arm equal to one of an
# earlier setting runs once, under that setting's name. Each rule calls one `brorl` command.
import os

from brorl.study.plan import (all_settings, arm_jobs, fresh_pool_tasks, late_start_stage, pools, premise_seeds,
                              premise_stage, stage_for, starts, tail_families)

STUDY = "study" in config
STUDY_CFG = config.get("study", {})
STUDY_DIR, STUDY_WORK = at("study", "results/study"), at("study", "resources/work/study")
# From the arms' start (the ProRL stage, or the fetched checkpoint: Snakemake waits for its manifest, `--init` is
# the folder beside it), on the profile's data (a fetched start: under `brorl launch` like train_arm, held-out p
# sampled by study.heldout). STUDY_FOLDERS: the start folders (--init); STUDY_STARTS: what Snakemake waits for.
STUDY_FOLDERS = starts(PROFILE, config["rl"]) if STUDY else {}
STUDY_STARTS = {**STUDY_FOLDERS, "plateau": START_INPUT} if STUDY else {}
STUDY_POOLS = pools(PROFILE) if STUDY else {}
STUDY_HELDOUT = ({"heldout_settings": STUDY_CFG["heldout"], "heldout_cache": at("study", "resources/work/study/heldout_start")}
                 if "heldout" in STUDY_CFG else {})  # the start model's held-out p, measured once for all arms
STUDY_JOBS = arm_jobs(config["rl"], STUDY_CFG) if STUDY else []
STUDY_ARMS = [at("study", f"results/study/{setting}/n{n}/seed{seed}") for setting, n in STUDY_JOBS
              for seed in STUDY_CFG["seeds"]]
STUDY_ARM_FILES = [f"{arm}/{name}" for arm in STUDY_ARMS for name in ("summary.json", "heldout.json")]
STUDY_MODELS = [arm.replace("results/", "resources/", 1) for arm in STUDY_ARMS]
STUDY_SUMMARY = [f"{STUDY_DIR}/{name}" for name in ("summary.md", "summary.csv", "delta.png", "base.png", "budget.png",
                                                     "saturation.png", "seeds.csv", "verdicts.csv")] if STUDY else []
POOL_DIRS = pools(PROFILE)  # the study's prompt pools under its root (brorl.study.plan.pools)
STUDY_POOL_FILES = [f"{POOL_DIRS['fresh']}/{task}/{split}.jsonl" for task in config.get("tasks", {}).get("tasks", [])
                    for split in ("train", "validation", "test")] + [f"{POOL_DIRS['fresh']}/tasks.json"] if PRORL_STAGE else []
# issue 29: the premise test (continued N=16 with the slope stop; reported first) and the tail pool, when configured
STUDY_PREMISE_FILES = [at("study", f"results/study/premise/seed{s}/{name}") for s in (premise_seeds(STUDY_CFG) if STUDY else [])
                       for name in ("summary.json", "heldout.json")]
STUDY_TAIL = STUDY_CFG.get("tail_pool") if STUDY and PROFILE.data == "tasks" else None
STUDY_TAIL_FILES = ([f"{POOL_DIRS['tail']}/{task}/{split}.jsonl" for task in tail_families(config["tasks"], STUDY_TAIL)
                     for split in ("train", "validation", "test")] + [f"{POOL_DIRS['tail']}/tasks.json", f"{POOL_DIRS['tail']}/tail_pool.json"]
                    if STUDY_TAIL else [])
STUDY_POOL_INPUTS = {"fixed": TRAIN_DATA_FILES, "fresh": STUDY_POOL_FILES, "tail": STUDY_TAIL_FILES}
STUDY_OUTPUTS = STUDY_SUMMARY + STUDY_MODELS


if STUDY and PRORL_STAGE:

    rule study_pool:
        output:
            STUDY_POOL_FILES,
        params:
            cfg=as_json(fresh_pool_tasks(config["tasks"], STUDY_CFG)),
            out=lambda w, output: os.path.dirname(output[-1]),  # results/<root>/study/data_fresh
        log:
            at("study", "logs/study/pool.log"),
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "OMP_NUM_THREADS={threads} brorl tasks-generate --rule {params.rule}"
            " --config {params.cfg:q} --out {params.out} 2>&1 | tee {log}"

if STUDY_TAIL:

    rule study_tail_pool:
        input:
            model=STUDY_STARTS["plateau"],
            data=TRAIN_DATA_FILES,
        output:
            STUDY_TAIL_FILES,
        params:
            cfg=as_json({"tasks": config["tasks"], "tail_pool": STUDY_TAIL}),
            model=STUDY_FOLDERS.get("plateau"),
            out=POOL_DIRS.get("tail"),
        log:
            at("study", "logs/study/tail_pool.log"),
        benchmark:
            at("study", "logs/benchmarks/study_tail_pool.tsv")
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "OMP_NUM_THREADS={threads} brorl study-tail-pool --rule {params.rule} --config {params.cfg:q}"
            f" --model {{params.model}} --exclude {TRAIN_DATA_DIR} --out {{params.out}} 2>&1 | tee {{log}}"

if STUDY and STUDY_CFG.get("premise"):  # declared: the rule exists (its files join the summary only when run: true)

    rule study_premise:
        input:
            model=STUDY_STARTS["plateau"],
            data=TRAIN_DATA_FILES,
        output:
            model=directory(at("study", "resources/study/premise/seed{seed}")),
            summary=at("study", "results/study/premise/seed{seed}/summary.json"),
            heldout=at("study", "results/study/premise/seed{seed}/heldout.json"),
        wildcard_constraints:
            seed=r"\d+",
        params:
            cfg=as_json({"stages": [premise_stage(PROFILE, config["rl"], STUDY_CFG)],
                         "heldout_k": STUDY_CFG.get("heldout_k"), **STUDY_HELDOUT}),
        log:
            at("study", "logs/study/premise/seed{seed}.log"),
        benchmark:
            at("study", "logs/benchmarks/study_premise/seed{seed}.tsv")
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            f"OMP_NUM_THREADS={{threads}} {ARM_LAUNCH}brorl study-arm --rule {{params.rule}}"
            " --config {params.cfg:q} --wildcard seed={wildcards.seed} --arm premise --seed {wildcards.seed}"
            f" --init {STUDY_FOLDERS['plateau']}"
            f" --data {TRAIN_DATA_DIR} --work {STUDY_WORK}/premise/seed{{wildcards.seed}}"
            f" --model-out {{output.model}} --results {STUDY_DIR}/premise/seed{{wildcards.seed}} 2>&1 | tee {{log}}"

if STUDY:

    rule study_start:
        input:
            model=STUDY_STARTS["plateau"],
            data=TRAIN_DATA_FILES,
        output:
            model=directory(STUDY_STARTS["late"]),
            summary=at("study", "results/study/prorl_late/summary.json"),
        params:
            cfg=as_json({"stages": [late_start_stage(PROFILE, config["rl"], STUDY_CFG)], "heldout": False}),
            **GPU_SLOT_PARAM,  # this job's GPUs on one host (common.smk)
        log:
            at("study", "logs/study/prorl_late.log"),
        benchmark:
            at("study", "logs/benchmarks/study_start.tsv")
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            f"OMP_NUM_THREADS={{threads}} {GPU_SLOT}{ARM_LAUNCH}brorl study-arm --rule {{params.rule}}"
            " --config {params.cfg:q} --arm prorl_late --seed 0"
            f" --init {STUDY_FOLDERS['plateau']}"
            f" --data {TRAIN_DATA_DIR} --work {STUDY_WORK}/prorl_late --model-out {{output.model}}"
            f" --results {STUDY_DIR}/prorl_late 2>&1 | tee {{log}}"

    rule study_arm:
        input:
            model=study_start,
            data=study_pool_files,
        output:
            model=directory(at("study", "resources/study/{setting}/n{n}/seed{seed}")),
            summary=at("study", "results/study/{setting}/n{n}/seed{seed}/summary.json"),
            heldout=at("study", "results/study/{setting}/n{n}/seed{seed}/heldout.json"),
        wildcard_constraints:
            setting="|".join(sorted({s for s, _ in STUDY_JOBS})) or "none",
            n=r"\d+",
            seed=r"\d+",
        params:
            cfg=lambda w: as_json({"stages": [stage_for(config["rl"], STUDY_CFG, w.setting, int(w.n), 0)],
                                   "heldout_k": STUDY_CFG.get("heldout_k"), **STUDY_HELDOUT,
                                   **({"train_pool": True} if study_arm_spec(w)["pool"] == "tail" else {})}),
            data=study_pool,
            init=study_init,
            **GPU_SLOT_PARAM,  # this job's GPUs on one host (common.smk)
        log:
            at("study", "logs/study/{setting}/n{n}/seed{seed}.log"),
        benchmark:
            at("study", "logs/benchmarks/study_arm/{setting}/n{n}/seed{seed}.tsv")
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            f"OMP_NUM_THREADS={{threads}} {GPU_SLOT}{ARM_LAUNCH}brorl study-arm --rule {{params.rule}}"
            " --config {params.cfg:q} --wildcard setting={wildcards.setting}"
            " --wildcard n={wildcards.n} --wildcard seed={wildcards.seed} --arm {wildcards.setting}-n{wildcards.n}"
            " --seed {wildcards.seed} --init {params.init} --data {params.data}"
            f" --work {STUDY_WORK}/{{wildcards.setting}}/n{{wildcards.n}}/seed{{wildcards.seed}}"
            f" --model-out {{output.model}} --results {STUDY_DIR}/{{wildcards.setting}}/n{{wildcards.n}}/seed{{wildcards.seed}}"
            " 2>&1 | tee {log}"

    rule study_summary:
        input:
            STUDY_ARM_FILES,
            STUDY_PREMISE_FILES,
            STUDY_TAIL_FILES[-1:],  # tail_pool.json: the pool's counts
            list((STUDY_CFG.get("earlier") or {}).values()),  # earlier studies' per-seed CSVs (committed docs)
        output:
            md=at("study", "results/study/summary.md"),
            csv=at("study", "results/study/summary.csv"),
            delta=report(at("study", "results/study/delta.png"), category="Study", caption="../report/study_delta.rst"),
            base=report(at("study", "results/study/base.png"), category="Study", caption="../report/study_base.rst"),
            budget=report(at("study", "results/study/budget.png"), category="Study", caption="../report/study_budget.rst"),
            saturation=report(at("study", "results/study/saturation.png"), category="Study",
                              caption="../report/study_saturation.rst"),  # these four written beside summary.md
            seeds=at("study", "results/study/seeds.csv"),  # per-seed values of every arm (the unit of every test)
            verdicts=at("study", "results/study/verdicts.csv"),  # every comparison: seed-level test (decides), prompt-level
        params:
            cfg=as_json({"rl": config["rl"], "study": STUDY_CFG, "order": all_settings(STUDY_CFG)}),  # JSON sorts keys
        log:
            at("study", "logs/study/summary.log"),
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "brorl study-summary --rule {params.rule} --config {params.cfg:q}"
            f" --results {STUDY_DIR} --md {{output.md}} --csv {{output.csv}}"
            " --png-delta {output.delta} --png-base {output.base} 2>&1 | tee {log}"
