# The N-scaling study (config/study.yaml; README "The N-scaling study"): from the ProRL checkpoint, arms at
# equal generated samples in total for N in study.ns and each setting's N, over study.seeds; held-out metrics per
# arm; results/study/summary.md over the settings of study.include (all when empty). An arm equal to one of an
# earlier setting runs once, under that setting's name. Each rule calls one `brorl` command.
import os

from brorl.pipeline import as_json
from brorl.study.plan import all_settings, fresh_pool_tasks, late_start_stage, premise_stage, stage_for

# From the arms' start (the ProRL stage, or the fetched checkpoint: Snakemake waits for its manifest, `--init` is
# the folder beside it), on the profile's data (a fetched start: under `brorl launch` like train_arm, held-out p
# sampled by study.heldout). STUDY_FOLDERS: the start folders (--init); STUDY_STARTS: what Snakemake waits for.
STUDY_CFG = PLAN.study_cfg
STUDY_DIR, STUDY_WORK = PLAN.study_dir, PLAN.study_work
STUDY_FOLDERS, STUDY_STARTS = PLAN.study_folders, PLAN.study_starts
STUDY_HELDOUT = PLAN.study_heldout  # the start model's held-out p, measured once for all arms
STUDY_TAIL = PLAN.study_tail  # issue 29: the tail pool, when configured (the tiny tasks)
STUDY_TAIL_FILES = PLAN.study_tail_files
TRAIN_DATA_DIR = PLAN.train_data_dir
ARM_LAUNCH = PLAN.arm_launch  # a fetched start: under `brorl launch`, like train_arm
GPU_SLOT = PLAN.gpu_slot_shell


if PLAN.study_pool:  # the fresh pool of generated tiny tasks (a trained start)

    rule study_pool:
        output:
            PLAN.study_pool_files,
        params:
            cfg=as_json(fresh_pool_tasks(config["tasks"], STUDY_CFG)),
            out=lambda w, output: os.path.dirname(output[-1]),  # results/<root>/study/data_fresh
        log:
            PLAN.at("study", "logs/study/pool.log"),
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
            data=PLAN.train_data_files,
        output:
            STUDY_TAIL_FILES,
        params:
            cfg=as_json({"tasks": config["tasks"], "tail_pool": STUDY_TAIL}),
            model=STUDY_FOLDERS.get("plateau"),
            out=PLAN.pool_dirs.get("tail"),
        log:
            PLAN.at("study", "logs/study/tail_pool.log"),
        benchmark:
            PLAN.at("study", "logs/benchmarks/study_tail_pool.tsv")
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "OMP_NUM_THREADS={threads} brorl study-tail-pool --rule {params.rule} --config {params.cfg:q}"
            f" --model {{params.model}} --exclude {TRAIN_DATA_DIR} --out {{params.out}} 2>&1 | tee {{log}}"

if PLAN.study_premise:  # declared: the rule exists (its files join the summary only when run: true)

    rule study_premise:
        input:
            model=STUDY_STARTS["plateau"],
            data=PLAN.train_data_files,
        output:
            model=directory(PLAN.at("study", "resources/study/premise/seed{seed}")),
            summary=PLAN.at("study", "results/study/premise/seed{seed}/summary.json"),
            heldout=PLAN.at("study", "results/study/premise/seed{seed}/heldout.json"),
        wildcard_constraints:
            seed=r"\d+",
        params:
            cfg=as_json({"stages": [premise_stage(PLAN.profile, config["rl"], STUDY_CFG)],
                         "heldout_k": STUDY_CFG.get("heldout_k"), **STUDY_HELDOUT}),
        log:
            PLAN.at("study", "logs/study/premise/seed{seed}.log"),
        benchmark:
            PLAN.at("study", "logs/benchmarks/study_premise/seed{seed}.tsv")
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            f"OMP_NUM_THREADS={{threads}} {ARM_LAUNCH}brorl study-arm --rule {{params.rule}}"
            " --config {params.cfg:q} --wildcard seed={wildcards.seed} --arm premise --seed {wildcards.seed}"
            f" --init {STUDY_FOLDERS['plateau']}"
            f" --data {TRAIN_DATA_DIR} --work {STUDY_WORK}/premise/seed{{wildcards.seed}}"
            f" --model-out {{output.model}} --results {STUDY_DIR}/premise/seed{{wildcards.seed}} 2>&1 | tee {{log}}"

if PLAN.study:

    rule study_start:
        input:
            model=STUDY_STARTS["plateau"],
            data=PLAN.train_data_files,
        output:
            model=directory(STUDY_STARTS["late"]),
            summary=PLAN.at("study", "results/study/prorl_late/summary.json"),
        params:
            cfg=as_json({"stages": [late_start_stage(PLAN.profile, config["rl"], STUDY_CFG)], "heldout": False}),
            **PLAN.gpu_slot_param,  # this job's GPUs on one host (common.smk)
        log:
            PLAN.at("study", "logs/study/prorl_late.log"),
        benchmark:
            PLAN.at("study", "logs/benchmarks/study_start.tsv")
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
            model=PLAN.study_start,
            data=PLAN.study_pool_input,
        output:
            model=directory(PLAN.at("study", "resources/study/{setting}/n{n}/seed{seed}")),
            summary=PLAN.at("study", "results/study/{setting}/n{n}/seed{seed}/summary.json"),
            heldout=PLAN.at("study", "results/study/{setting}/n{n}/seed{seed}/heldout.json"),
        wildcard_constraints:
            setting="|".join(sorted({s for s, _ in PLAN.study_jobs})) or "none",
            n=r"\d+",
            seed=r"\d+",
        params:
            cfg=lambda w: as_json({"stages": [stage_for(config["rl"], STUDY_CFG, w.setting, int(w.n), 0)],
                                   "heldout_k": STUDY_CFG.get("heldout_k"), **STUDY_HELDOUT,
                                   **({"train_pool": True} if PLAN.study_arm_spec(w)["pool"] == "tail" else {})}),
            data=PLAN.study_pool_dir,
            init=PLAN.study_init,
            **PLAN.gpu_slot_param,  # this job's GPUs on one host (common.smk)
        log:
            PLAN.at("study", "logs/study/{setting}/n{n}/seed{seed}.log"),
        benchmark:
            PLAN.at("study", "logs/benchmarks/study_arm/{setting}/n{n}/seed{seed}.tsv")
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
            PLAN.study_arm_files,
            PLAN.study_premise_files,
            STUDY_TAIL_FILES[-1:],  # tail_pool.json: the pool's counts
            PLAN.study_earlier,  # earlier studies' per-seed CSVs (committed docs)
        output:
            md=PLAN.at("study", "results/study/summary.md"),
            csv=PLAN.at("study", "results/study/summary.csv"),
            delta=report(PLAN.at("study", "results/study/delta.png"), category="Study", caption="../report/study_delta.rst"),
            base=report(PLAN.at("study", "results/study/base.png"), category="Study", caption="../report/study_base.rst"),
            budget=report(PLAN.at("study", "results/study/budget.png"), category="Study", caption="../report/study_budget.rst"),
            saturation=report(PLAN.at("study", "results/study/saturation.png"), category="Study",
                              caption="../report/study_saturation.rst"),  # these four written beside summary.md
            seeds=PLAN.at("study", "results/study/seeds.csv"),  # per-seed values of every arm (the unit of every test)
            verdicts=PLAN.at("study", "results/study/verdicts.csv"),  # every comparison: seed-level test (decides), prompt-level
        params:
            cfg=as_json({"rl": config["rl"], "study": STUDY_CFG, "order": all_settings(STUDY_CFG)}),  # JSON sorts keys
        log:
            PLAN.at("study", "logs/study/summary.log"),
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "brorl study-summary --rule {params.rule} --config {params.cfg:q}"
            f" --results {STUDY_DIR} --md {{output.md}} --csv {{output.csv}}"
            " --png-delta {output.delta} --png-base {output.base} 2>&1 | tee {log}"
