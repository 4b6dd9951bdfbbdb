# Benchmark evaluation through lm-eval (brorl.evaluation): one job per (model, benchmark) writes
# results/eval/<model>/<benchmark>.json with per-sample records. Models: the starting checkpoint (`prorl`)
# and every arm's final checkpoint per seed (`<arm>-seed<s>`). Results are cached in resources/eval-cache by
# the checkpoint's content hash and the task config, so a changed model is never served stale scores.
EVAL = "evaluation" in config
EVAL_MODELS = {}
if EVAL:
    if TRAIN:
        EVAL_MODELS["prorl"] = "resources/models/prorl"
        EVAL_MODELS.update({f"{arm}-seed{seed}": f"resources/checkpoints/{arm}/seed{seed}"
                            for arm in ARMS for seed in SEEDS})
    EVAL_MODELS.update({name: f"resources/models/{name}" for name in config["evaluation"].get("models", [])})
EVAL_BENCHMARKS = config["evaluation"]["benchmarks"] if EVAL else []
EVAL_OUTPUTS = [f"results/eval/{model}/{bench}.json" for model in EVAL_MODELS for bench in EVAL_BENCHMARKS]

if EVAL:

    rule evaluate:
        input:
            model=lambda wildcards: EVAL_MODELS[wildcards.model],
            data=TASK_FILES,
        output:
            "results/eval/{model}/{benchmark}.json",
        wildcard_constraints:
            model="|".join(EVAL_MODELS) if EVAL_MODELS else "none",
            benchmark="|".join(EVAL_BENCHMARKS),
        params:
            rule_name="evaluate",
            cfg=as_json(config["evaluation"]),
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
            " --model {input.model} --benchmark {wildcards.benchmark} --data results/data --out {output}"
            " --cache resources/eval-cache 2>&1 | tee {log}"
