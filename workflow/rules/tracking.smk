# DVC: every output folder of the pipeline becomes <folder>.dvc (committed to git) and is pushed to the
# default remote, so `dvc pull` on a fresh clone brings it back (README, "Artifacts").

DVC_TRACKED = {
    "results/theory": THEORY_OUTPUTS,
    "results/data": DATA_OUTPUTS,
    **{folder: [f"{folder}.manifest.json"] for folder in FETCHED},
    **{folder: [folder] for folder in MODEL_OUTPUTS},
    **{manifest: [manifest] for manifest in FETCH_MANIFESTS},
    **({"results/train": ARM_RESULTS_FILES + TRAIN_SUMMARY, "resources/checkpoints": ARM_CHECKPOINTS}
       if TRAIN else {}),
    **({"results/eval": EVAL_OUTPUTS} if EVAL_OUTPUTS else {}),
    **({"results/tables": [p for p in TABLE_OUTPUTS + THROUGHPUT_OUTPUTS if p.startswith("results/tables/")],
        "results/figures": [p for p in TABLE_OUTPUTS + THROUGHPUT_OUTPUTS if p.startswith("results/figures/")]}
       if TABLE_OUTPUTS or THROUGHPUT_OUTPUTS else {}),
    **({"results/study": STUDY_SUMMARY + STUDY_ARM_FILES, "resources/study": STUDY_MODELS} if STUDY else {}),
}
DVC_FILES = [f"{folder}.dvc" for folder in DVC_TRACKED]


rule dvc_track:
    input:
        [path for outputs in DVC_TRACKED.values() for path in outputs],
    output:
        DVC_FILES,
    params:
        folders=list(DVC_TRACKED),
        push="--push" if config["dvc"]["push"] else "",
    log:
        "logs/dvc_track.log",
    benchmark:
        "logs/benchmarks/dvc_track.tsv"
    conda:
        "../envs/brorl.yaml"
    shell:
        "brorl dvc-track {params.folders} {params.push} 2>&1 | tee {log}"
