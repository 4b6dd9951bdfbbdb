# The paper's tables and figures (brorl.tables), each a named rule and its own MLflow run, rebuilt from the
# MLflow runs of the training and evaluation rules with the paper's values (src/brorl/tables/paper_reference.yaml)
# beside ours. A missing evaluation is an explicit gap in the table, never a zero.
from brorl.pipeline import ALL_CORES, PAPER_FIGURES, PAPER_TABLES, as_json

TABLE_INPUTS = PLAN.table_inputs
TABLE_PLAN = PLAN.table_plan  # the profile block without an overlay's roots: a reused table keeps the base's params

if PLAN.tables:  # with the evaluation stage
    for _name, _title in PAPER_TABLES.items():

        rule:
            name:
                f"paper_{_name}"
            input:
                TABLE_INPUTS,
            output:
                csv=report(PLAN.at("arms", f"results/tables/{_name}.csv"), category="Paper tables", caption="../report/paper_table.rst",
                           labels={"table": _name, "title": _title}),
                md=PLAN.at("arms", f"results/tables/{_name}.md"),
                cells=PLAN.at("arms", f"results/tables/{_name}_cells.csv"),
            params:
                name=_name,
                cfg=TABLE_PLAN,
            log:
                PLAN.at("arms", f"logs/tables/{_name}.log"),
            benchmark:
                PLAN.at("arms", f"logs/benchmarks/paper_{_name}.tsv")
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
                png=report(PLAN.at("arms", f"results/figures/{_name}.png"), category="Paper tables", caption="../report/paper_table.rst",
                           labels={"figure": _name, "title": _title}),
                csv=PLAN.at("arms", f"results/figures/{_name}.csv"),
            params:
                name=_name,
                cfg=TABLE_PLAN,
            log:
                PLAN.at("arms", f"logs/tables/{_name}.log"),
            benchmark:
                PLAN.at("arms", f"logs/benchmarks/paper_{_name}.tsv")
            threads: 1
            conda:
                "../envs/brorl.yaml"
            shell:
                "brorl paper-table --rule {params.rule} --config {params.cfg:q}"
                " --name {params.name} --png {output.png} --csv {output.csv} 2>&1 | tee {log}"

    rule paper_figure3:
        input:
            PLAN.at("theory", "results/theory/figure3.png"),
        output:
            report(PLAN.at("arms", "results/figures/figure3.png"), category="Paper tables", caption="../report/paper_figure3.rst"),
        params:
            cfg=TABLE_PLAN,
        log:
            PLAN.at("arms", "logs/tables/figure3.log"),
        benchmark:
            PLAN.at("arms", "logs/benchmarks/paper_figure3.tsv")
        threads: 1
        conda:
            "../envs/brorl.yaml"
        shell:
            "brorl paper-table --rule {params.rule} --config {params.cfg:q}"
            " --name figure3 --source {input} --png {output} 2>&1 | tee {log}"

if PLAN.throughput:  # on the arms' start model

    rule throughput_study:
        # The starting checkpoint: trained here or fetched (its manifest stands for the folder).
        input:
            PLAN.start_input,
        output:
            csv=PLAN.at("start", "results/tables/throughput.csv"),
            md=PLAN.at("start", "results/tables/throughput.md"),
            png=report(PLAN.at("start", "results/figures/throughput.png"), category="Paper tables", caption="../report/throughput.rst"),
        params:
            cfg=as_json(config.get("throughput", {})),
            **PLAN.gpu_slot_param,  # its own GPU on one host (common.smk)
        log:
            PLAN.at("start", "logs/tables/throughput.log"),
        benchmark:
            PLAN.at("start", "logs/benchmarks/throughput_study.tsv")
        threads: workflow.cores  # alone, right after the ProRL stage (threads: workflow/rules/models.smk)
        priority: 50
        conda:
            "../envs/brorl.yaml"
        shell:
            f"{ALL_CORES}{PLAN.gpu_slot_shell}brorl throughput --rule {{params.rule}}"
            f" --config {{params.cfg:q}} --model {PLAN.start_model}"
            " --csv {output.csv} --md {output.md} --png {output.png} 2>&1 | tee {log}"
