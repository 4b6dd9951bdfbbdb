# Benchmark evaluation through lm-eval (brorl.evaluation): one job per (model, benchmark) writes
# results/eval/<model>/<benchmark>.json with per-sample records. Models: the starting checkpoint (`prorl`)
# and every arm's final checkpoint per seed (`<arm>-seed<s>`). Results are cached in resources/eval-cache by
# the checkpoint's content hash and the task config, so a changed model is never served stale scores.
EVAL = "evaluation" in config
EVAL_MODELS = {}
if EVAL:
    if PRORL_STAGE:  # (paper profile: the start checkpoint is a fetched one, listed in evaluation.models)
        EVAL_MODELS["prorl"] = "resources/models/prorl"
    if TRAIN:
        EVAL_MODELS.update({f"{arm}-seed{seed}": f"resources/checkpoints/{arm}/seed{seed}"
                            for arm in ARMS for seed in SEEDS})
    EVAL_MODELS.update({name: f"resources/models/{name}" for name in config["evaluation"].get("models", [])})
# What Snakemake waits for: a trained model's folder, or a fetched one's manifest (the folder beside it).
EVAL_MODEL_INPUT = {name: f"{path}.manifest.json" if path in FETCHED else path for name, path in EVAL_MODELS.items()}
EVAL_BENCHMARKS = config["evaluation"]["benchmarks"] if EVAL else []
EVAL_OUTPUTS = [f"results/eval/{model}/{bench}.json" for model in EVAL_MODELS for bench in EVAL_BENCHMARKS]
# Paper benchmarks (brorl.evaluation.paper_data): fetched at a pinned revision through brorl.fetch (or, for
# Reasoning Gym, generated) into results/data/benchmarks/<name>/test.jsonl; the tiny ones read the tiny tasks.
PAPER_BENCH = [b for b in EVAL_BENCHMARKS if not b.startswith("tiny_")]
BENCH_FILES = {b: f"results/data/benchmarks/{b}/test.jsonl" for b in PAPER_BENCH}
DATA_OUTPUTS += list(BENCH_FILES.values())



if PAPER_BENCH:

    rule benchmark_data:
        output:
            "results/data/benchmarks/{benchmark}/test.jsonl",
        wildcard_constraints:
            benchmark="|".join(PAPER_BENCH),
        params:
            rule_name="benchmark_data",
            cfg=lambda wildcards: as_json({"source": config["checkpoints"].get("source"),
                                           "revisions": {k: v for k, v in config["evaluation"].get("revisions", {}).items()
                                                         if k == wildcards.benchmark}}),
            tracking=TRACKING,
            profile=PROFILE,
        log:
            "logs/data/benchmarks/{benchmark}.log",
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "brorl prepare-benchmark --rule {params.rule_name} --profile {params.profile} --config {params.cfg:q}"
            " --tracking {params.tracking:q} --wildcard benchmark={wildcards.benchmark} --name {wildcards.benchmark}"
            " --dest {output} 2>&1 | tee {log}"

if EVAL:

    rule evaluate:
        input:
            model=lambda wildcards: EVAL_MODEL_INPUT[wildcards.model],
            data=eval_data,
        output:
            "results/eval/{model}/{benchmark}.json",
        wildcard_constraints:
            model="|".join(EVAL_MODELS) if EVAL_MODELS else "none",
            benchmark="|".join(EVAL_BENCHMARKS),
        params:
            rule_name="evaluate",
            cfg=as_json({k: v for k, v in config["evaluation"].items() if k not in ("benchmarks", "models", "revisions")}),
            data=eval_data_dir,
            model_dir=lambda wildcards: EVAL_MODELS[wildcards.model],
            tracking=TRACKING,
            profile=PROFILE,
        log:
            "logs/eval/{model}/{benchmark}.log",
        benchmark:
            "logs/benchmarks/evaluate/{model}/{benchmark}.tsv"
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "OMP_NUM_THREADS={threads} brorl evaluate --rule {params.rule_name} --profile {params.profile} --config {params.cfg:q}"
            " --tracking {params.tracking:q} --wildcard model={wildcards.model} --wildcard benchmark={wildcards.benchmark}"
            " --model {params.model_dir} --benchmark {wildcards.benchmark} --data {params.data} --out {output}"
            " --cache resources/eval-cache 2>&1 | tee {log}"
