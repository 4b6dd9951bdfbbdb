# BroRL Section 2 / 4.1: the token-level simulation behind Figure 3, and an extended sweep of N. One thread each:
# they fill the second core beside the training jobs (the sweep first, beside the first arms; the short ones after
# the arms: threads and priorities in models.smk).

from brorl.pipeline import as_json


rule theory_simulation:
    output:
        csv=PLAN.at("theory", "results/theory/simulation.csv"),
    params:
        cfg=as_json(config["theory"]["simulation"]),
    log:
        PLAN.at("theory", "logs/theory/simulation.log"),
    benchmark:
        PLAN.at("theory", "logs/benchmarks/theory_simulation.tsv")
    threads: 1
    priority: 3
    conda:
        "../envs/brorl.yaml"
    shell:
        "OMP_NUM_THREADS={threads} brorl theory-simulate --rule {params.rule} --config {params.cfg:q}"
        " --csv {output.csv} 2>&1 | tee {log}"


rule theory_figure3:
    input:
        csv=PLAN.at("theory", "results/theory/simulation.csv"),
    output:
        figure=report(
            PLAN.at("theory", "results/theory/figure3.png"),
            category="Theory",
            caption="../report/figure3.rst",
        ),
        summary_md=PLAN.at("theory", "results/theory/summary.md"),
        summary_csv=report(
            PLAN.at("theory", "results/theory/summary.csv"),
            category="Theory",
            caption="../report/summary.rst",
        ),
    params:
        cfg=as_json(
            {
                "simulation": config["theory"]["simulation"],
                "summary_steps": config["theory"]["summary_steps"],
            }
        ),
    log:
        PLAN.at("theory", "logs/theory/figure3.log"),
    benchmark:
        PLAN.at("theory", "logs/benchmarks/theory_figure3.tsv")
    threads: 1
    priority: 3
    conda:
        "../envs/brorl.yaml"
    shell:
        "OMP_NUM_THREADS={threads} brorl theory-figure3 --rule {params.rule} --config {params.cfg:q}"
        " --csv {input.csv} --figure {output.figure}"
        " --summary-md {output.summary_md} --summary-csv {output.summary_csv} 2>&1 | tee {log}"


rule theory_extended_sweep:
    output:
        csv=report(
            PLAN.at("theory", "results/theory/extended_sweep.csv"),
            category="Theory",
            caption="../report/extended_sweep_table.rst",
        ),
        md=PLAN.at("theory", "results/theory/extended_sweep.md"),
        png=report(
            PLAN.at("theory", "results/theory/extended_sweep.png"),
            category="Theory",
            caption="../report/extended_sweep.rst",
        ),
    params:
        cfg=as_json(
            {
                "simulation": config["theory"]["simulation"],
                "extended_sweep": config["theory"]["extended_sweep"],
            }
        ),
    log:
        PLAN.at("theory", "logs/theory/extended_sweep.log"),
    benchmark:
        PLAN.at("theory", "logs/benchmarks/theory_extended_sweep.tsv")
    threads: 1
    priority: 5  # the longest one-thread job (~100 s): first of them, beside the first arm (issue 31)
    conda:
        "../envs/brorl.yaml"
    shell:
        "OMP_NUM_THREADS={threads} brorl theory-sweep --rule {params.rule} --config {params.cfg:q}"
        " --csv {output.csv} --md {output.md} --png {output.png}"
        " 2>&1 | tee {log}"
