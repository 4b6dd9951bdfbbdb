# Benchmark evaluation through lm-eval (brorl.evaluation): results/eval/<model>/<benchmark>.json with per-sample
# records and one MLflow run per (model, benchmark). On the CPU (hf backend) one job per model evaluates all its
# benchmarks in one process, so process start, imports and the MLflow store come once per model (issue 21); with
# vLLM on GPUs (paper profile) one job per (model, benchmark), so a cluster runs them side by side. Models: the starting checkpoint (`prorl`)
# and every arm's final checkpoint per seed (`<arm>-seed<s>`). Results are cached in resources/eval-cache by
# the checkpoint's content hash and the task config, so a changed model is never served stale scores.
# Paper benchmarks (brorl.data.benchmarks): fetched at a pinned revision through brorl.data.hub (or, for Reasoning Gym,
# generated) into results/data/benchmarks/<name>/test.jsonl; the tiny ones read the tiny tasks. A gated benchmark
# (GPQA) goes to resources/gated/benchmarks/ instead (never DVC-tracked or pushed) unless evaluation.share_gated;
# fetching it from the hub needs HF_TOKEN, checked while the DAG is built (PLAN.gated_token_check).
from brorl.data.catalog import benchmark_spec
from brorl.pipeline import as_json

PAPER_BENCH = PLAN.paper_bench
EVAL_BENCHMARKS = PLAN.eval_benchmarks
EVAL_MODELS = PLAN.eval_models  # name -> folder: the start (a trained one), <arm>-seed<s>, evaluation.models
EVAL_JOB = PLAN.eval_job  # {model} (hf: one job per model) or {model}/{benchmark} (vLLM)


if PAPER_BENCH:

    rule benchmark_data:
        input:
            PLAN.gated_token_check,
            PLAN.pinned_input(lambda wc: PLAN.bench_files[wc.benchmark], PLAN.benchmark_revision,
                              lambda wc: f"evaluation.revisions.{wc.benchmark}"),
            lambda wc: PLAN.rg_picked if benchmark_spec(wc.benchmark).generated else [],
        output:
            "{bench_root}/{benchmark}/test.jsonl",
        wildcard_constraints:
            benchmark="|".join(PAPER_BENCH),
            bench_root=f"{PLAN.at('start', 'results/data/benchmarks')}|{PLAN.at('start', 'resources/gated/benchmarks')}",
        params:
            cfg=lambda wildcards: as_json({"source": config["checkpoints"].get("source"), **PLAN.allow_unpinned,
                                           "reasoning_gym": config["evaluation"].get("reasoning_gym", {}),
                                           "revisions": {k: v for k, v in config["evaluation"].get("revisions", {}).items()
                                                         if k == wildcards.benchmark}}),
            picked=lambda wildcards: PLAN.rg_picked_arg if benchmark_spec(wildcards.benchmark).generated else "",
        log:
            PLAN.at("start", "logs/{bench_root}/{benchmark}.log"),  # logs/<root>/results/<root>/data/benchmarks/<name>.log
        benchmark:
            PLAN.at("start", "logs/benchmarks/benchmark_data/{bench_root}/{benchmark}.tsv")
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "brorl prepare-benchmark --rule {params.rule} --config {params.cfg:q}"
            " --wildcard benchmark={wildcards.benchmark} --name {wildcards.benchmark}"
            " --dest {output}{params.picked} 2>&1 | tee {log}"

if PLAN.eval:

    rule evaluate:
        input:
            model=lambda wildcards: PLAN.eval_model_input[wildcards.model],
            data=lambda wildcards: sorted({f for b in PLAN.eval_job_benchmarks(wildcards) for f in PLAN.eval_data(b)}),
        output:
            [PLAN.at("arms", f"results/eval/{{model}}/{b}.json") for b in EVAL_BENCHMARKS] if PLAN.eval_per_model
            else PLAN.at("arms", "results/eval/{model}/{benchmark}.json"),
        wildcard_constraints:
            model="|".join(EVAL_MODELS) if EVAL_MODELS else "none",
            benchmark="|".join(EVAL_BENCHMARKS),
        params:
            cfg=as_json({**{k: v for k, v in config["evaluation"].items() if k not in ("benchmarks", "models", "revisions")},
                         **PLAN.gated_records}),
            benchmarks=PLAN.eval_args,
            model_dir=lambda wildcards: EVAL_MODELS[wildcards.model],
            **PLAN.gpu_slot_param,  # its own GPU on one host: vLLM engines side by side, one per GPU (common.smk)
        log:
            PLAN.at("arms", f"logs/eval/{EVAL_JOB}.log"),
        benchmark:
            PLAN.at("arms", f"logs/benchmarks/evaluate/{EVAL_JOB}.tsv")
        threads: 1
        priority: 2
        conda:
            "../envs/brorl.yaml"
        shell:
            f"OMP_NUM_THREADS={{threads}} {PLAN.gpu_slot_shell}brorl evaluate --rule {{params.rule}} --config {{params.cfg:q}}"
            " --wildcard model={wildcards.model} --model {params.model_dir}"
            f" {{params.benchmarks}} --cache {PLAN.at('arms', 'resources/eval-cache')} 2>&1 | tee {{log}}"
