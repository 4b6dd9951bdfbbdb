# Benchmark evaluation through lm-eval (brorl.evaluation): results/eval/<model>/<benchmark>.json with per-sample
# records and one MLflow run per (model, benchmark). On the CPU (hf backend) one job per model evaluates all its
# benchmarks in one process, so process start, imports and the MLflow store come once per model (issue 21); with
# vLLM on GPUs (paper profile) one job per (model, benchmark), so a cluster runs them side by side. Models: the starting checkpoint (`prorl`)
# and every arm's final checkpoint per seed (`<arm>-seed<s>`). Results are cached in resources/eval-cache by
# the checkpoint's content hash and the task config, so a changed model is never served stale scores.
from brorl.evaluation.benchmarks import reads_tasks
from brorl.data.benchmarks import benchmark_data_root, is_gated

EVAL = "evaluation" in config
EVAL_MODELS = {}
if EVAL:
    if PRORL_STAGE:  # (paper profile: the start checkpoint is a fetched one, listed in evaluation.models)
        EVAL_MODELS["prorl"] = START_MODEL
    if TRAIN:
        EVAL_MODELS.update({f"{arm}-seed{seed}": at("arms", f"resources/checkpoints/{arm}/seed{seed}")
                            for arm in ARMS for seed in SEEDS})
    EVAL_MODELS.update({name: at("start", f"resources/models/{name}") for name in config["evaluation"].get("models", [])})
# What Snakemake waits for: a trained model's folder, or a fetched one's manifest (the folder beside it).
EVAL_MODEL_INPUT = {name: f"{path}.manifest.json" if path in FETCHED else path for name, path in EVAL_MODELS.items()}
EVAL_BENCHMARKS = config["evaluation"]["benchmarks"] if EVAL else []
EVAL_OUTPUTS = [at("arms", f"results/eval/{model}/{bench}.json") for model in EVAL_MODELS for bench in EVAL_BENCHMARKS]
# Paper benchmarks (brorl.data.benchmarks): fetched at a pinned revision through brorl.data.hub (or, for
# Reasoning Gym, generated) into results/data/benchmarks/<name>/test.jsonl; the tiny ones read the tiny tasks.
# A gated benchmark (GPQA) goes to resources/gated/benchmarks/ instead (never DVC-tracked or pushed) unless
# evaluation.share_gated; fetching it from the hub needs HF_TOKEN, checked while the DAG is built.
PAPER_BENCH = [b for b in EVAL_BENCHMARKS if not reads_tasks(b)]
SHARE_GATED = EVAL and bool(config["evaluation"].get("share_gated"))
BENCH_FILES = {b: f"{at('start', benchmark_data_root(b, SHARE_GATED))}/{b}/test.jsonl" for b in PAPER_BENCH}
# A gated benchmark's full evaluation records stay local, under this run's own resources/<root>/gated/ (not DVC-tracked)
GATED_RECORDS = ({"gated_root": at("arms", "resources/gated")}
                 if any(is_gated(b) for b in PAPER_BENCH) and not SHARE_GATED else {})
DATA_OUTPUTS += [path for path in BENCH_FILES.values() if path.startswith("results/")]  # not the gated ones


if PAPER_BENCH:

    rule benchmark_data:
        input:
            gated_token_check,
            pinned_input(lambda wc: BENCH_FILES[wc.benchmark], benchmark_revision,
                         lambda wc: f"evaluation.revisions.{wc.benchmark}"),
            lambda wc: RG_PICKED if benchmark_spec(wc.benchmark).generated else [],
        output:
            "{bench_root}/{benchmark}/test.jsonl",
        wildcard_constraints:
            benchmark="|".join(PAPER_BENCH),
            bench_root=f"{at('start', 'results/data/benchmarks')}|{at('start', 'resources/gated/benchmarks')}",
        params:
            cfg=lambda wildcards: as_json({"source": config["checkpoints"].get("source"), **ALLOW_UNPINNED,
                                           "reasoning_gym": config["evaluation"].get("reasoning_gym", {}),
                                           "revisions": {k: v for k, v in config["evaluation"].get("revisions", {}).items()
                                                         if k == wildcards.benchmark}}),
            picked=lambda wildcards: RG_PICKED_ARG if benchmark_spec(wildcards.benchmark).generated else "",
        log:
            at("start", "logs/{bench_root}/{benchmark}.log"),  # logs/<root>/results/<root>/data/benchmarks/<name>.log
        benchmark:
            at("start", "logs/benchmarks/benchmark_data/{bench_root}/{benchmark}.tsv")
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "brorl prepare-benchmark --rule {params.rule} --config {params.cfg:q}"
            " --wildcard benchmark={wildcards.benchmark} --name {wildcards.benchmark}"
            " --dest {output}{params.picked} 2>&1 | tee {log}"

EVAL_PER_MODEL = EVAL and config["evaluation"].get("backend", "hf") == "hf"
EVAL_JOB = "{model}" if EVAL_PER_MODEL else "{model}/{benchmark}"


if EVAL:

    rule evaluate:
        input:
            model=lambda wildcards: EVAL_MODEL_INPUT[wildcards.model],
            data=lambda wildcards: sorted({f for b in eval_benchmarks(wildcards) for f in eval_data(b)}),
        output:
            [at("arms", f"results/eval/{{model}}/{b}.json") for b in EVAL_BENCHMARKS] if EVAL_PER_MODEL
            else at("arms", "results/eval/{model}/{benchmark}.json"),
        wildcard_constraints:
            model="|".join(EVAL_MODELS) if EVAL_MODELS else "none",
            benchmark="|".join(EVAL_BENCHMARKS),
        params:
            cfg=as_json({**{k: v for k, v in config["evaluation"].items() if k not in ("benchmarks", "models", "revisions")},
                         **GATED_RECORDS}),
            benchmarks=eval_args,
            model_dir=lambda wildcards: EVAL_MODELS[wildcards.model],
            **GPU_SLOT_PARAM,  # its own GPU on one host: vLLM engines side by side, one per GPU (common.smk)
        log:
            at("arms", f"logs/eval/{EVAL_JOB}.log"),
        benchmark:
            at("arms", f"logs/benchmarks/evaluate/{EVAL_JOB}.tsv")
        threads: 1
        priority: 2
        conda:
            "../envs/brorl.yaml"
        shell:
            f"OMP_NUM_THREADS={{threads}} {GPU_SLOT}brorl evaluate --rule {{params.rule}} --config {{params.cfg:q}}"
            " --wildcard model={wildcards.model} --model {params.model_dir}"
            f" {{params.benchmarks}} --cache {at('arms', 'resources/eval-cache')} 2>&1 | tee {{log}}"
