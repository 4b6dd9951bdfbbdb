# The paper's tables and figures (brorl.tables), each a named rule and its own MLflow run, rebuilt from the
# MLflow runs of the training and evaluation rules with the paper's values (src/brorl/tables/paper_reference.yaml)
# beside ours. A missing evaluation is an explicit gap in the table, never a zero.
PAPER_TABLES = {
    "table1": "BroRL Table 1: efficiency and performance (N, prompts/step, steps, samples, hours, scores)",
    "table2": "BroRL Table 2: dynamic-sampling pass rate and generation throughput per N",
    "table3": "BroRL Table 3: math pass@1 per benchmark",
    "table4": "BroRL Table 4: code pass@1 per benchmark",
    "table5": "BroRL Table 5: Reasoning Gym per category",
    "ttest": "BroRL §5: paired t-test on per-instance pass@1 at equal compute",
}
PAPER_FIGURES = {
    "figure1": "BroRL Figure 1: score against training hours and against samples",
    "figure4": "BroRL Figure 4: per-task pass@1 against training hours",
    "passk": "pass@k curves per arm (ProRL's reasoning-boundary view; BroRL does not report it)",
}
TABLES_ON = EVAL
TABLE_INPUTS = EVAL_OUTPUTS + ([f"{folder}/summary.json" for folder in ARM_RESULTS] if TRAIN else [])
# (the profile block without an overlay's roots: tables an overlay reuses keep the base's params; brorl.layout)
TABLE_PLAN = as_json({**{key: config.get(key) for key in ("rl", "evaluation", "checkpoints")},
                      "profile": {k: v for k, v in config["profile"].items() if k not in ("overlay", "reuses")}})
TABLE_OUTPUTS = (
    [at("arms", f"results/tables/{name}.{ext}") for name in PAPER_TABLES for ext in ("csv", "md")]
    + [at("arms", f"results/figures/{name}.png") for name in [*PAPER_FIGURES, "figure3"]]
    if TABLES_ON else []
)

if TABLES_ON:
    for _name, _title in PAPER_TABLES.items():

        rule:
            name:
                f"paper_{_name}"
            input:
                TABLE_INPUTS,
            output:
                csv=report(at("arms", f"results/tables/{_name}.csv"), category="Paper tables", caption="../report/paper_table.rst",
                           labels={"table": _name, "title": _title}),
                md=at("arms", f"results/tables/{_name}.md"),
                cells=at("arms", f"results/tables/{_name}_cells.csv"),
            params:
                name=_name,
                cfg=TABLE_PLAN,
            log:
                at("arms", f"logs/tables/{_name}.log"),
            benchmark:
                at("arms", f"logs/benchmarks/paper_{_name}.tsv")
            threads: 1
            conda:
                "../envs/brorl.yaml"
            shell:
                "brorl paper-table --rule {params.rule} --config {params.cfg:q}"
                " --name {params.name} --csv {output.csv} --md {output.md}"
                " --cells {output.cells} 2>&1 | tee {log}"

    for _name, _title in PAPER_FIGURES.items():

        rule:
            name:
                f"paper_{_name}"
            input:
                TABLE_INPUTS,
            output:
                png=report(at("arms", f"results/figures/{_name}.png"), category="Paper tables", caption="../report/paper_table.rst",
                           labels={"figure": _name, "title": _title}),
                csv=at("arms", f"results/figures/{_name}.csv"),
            params:
                name=_name,
                cfg=TABLE_PLAN,
            log:
                at("arms", f"logs/tables/{_name}.log"),
            benchmark:
                at("arms", f"logs/benchmarks/paper_{_name}.tsv")
            threads: 1
            conda:
                "../envs/brorl.yaml"
            shell:
                "brorl paper-table --rule {params.rule} --config {params.cfg:q}"
                " --name {params.name} --png {output.png} --csv {output.csv} 2>&1 | tee {log}"

    rule paper_figure3:
        input:
            at("theory", "results/theory/figure3.png"),
        output:
            report(at("arms", "results/figures/figure3.png"), category="Paper tables", caption="../report/paper_figure3.rst"),
        params:
            cfg=TABLE_PLAN,
        log:
            at("arms", "logs/tables/figure3.log"),
        benchmark:
            at("arms", "logs/benchmarks/paper_figure3.tsv")
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "brorl paper-table --rule {params.rule} --config {params.cfg:q}"
            " --name figure3 --source {input} --png {output} 2>&1 | tee {log}"

THROUGHPUT = "throughput" in config and TRAIN  # on the arms' start model (START_MODEL: training.smk)
THROUGHPUT_OUTPUTS = [at("start", "results/tables/throughput.csv"), at("start", "results/tables/throughput.md"),
                      at("start", "results/figures/throughput.png")] if THROUGHPUT else []
if THROUGHPUT:

    rule throughput_study:
        # The starting checkpoint: trained here or fetched (its manifest stands for the folder).
        input:
            START_INPUT,
        output:
            csv=at("start", "results/tables/throughput.csv"),
            md=at("start", "results/tables/throughput.md"),
            png=report(at("start", "results/figures/throughput.png"), category="Paper tables", caption="../report/throughput.rst"),
        params:
            cfg=as_json(config.get("throughput", {})),
            **GPU_SLOT_PARAM,  # its own GPU on one host (common.smk)
        log:
            at("start", "logs/tables/throughput.log"),
        benchmark:
            at("start", "logs/benchmarks/throughput_study.tsv")
        threads: workflow.cores  # alone, right after the ProRL stage (threads: workflow/rules/models.smk)
        priority: 50
        conda:
            "../envs/brorl.yaml"
        shell:
            f"{ALL_CORES}{GPU_SLOT}brorl throughput --rule {{params.rule}}"
            f" --config {{params.cfg:q}} --model {START_MODEL}"
            " --csv {output.csv} --md {output.md} --png {output.png} 2>&1 | tee {log}"
