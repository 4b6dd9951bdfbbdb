# DVC: every output folder of the pipeline becomes <folder>.dvc (committed to git) and is pushed to the
# default remote, so `dvc pull` on a fresh clone brings it back (README, "Artifacts").

# Each run tracks the folders of its own root only (results/<root>/theory.dvc beside results/<root>/theory, ...;
# brorl.layout): the groups an overlay reuses are its base's, tracked by the base's own run.


from brorl.layout import dvc_folders

DVC_TRACKED = dvc_folders(  # {folder: the outputs it stands for}, this root's only (brorl.layout.dvc_folders)
    ROOT, THEORY_OUTPUTS + DATA_OUTPUTS + ARM_RESULTS_FILES + TRAIN_SUMMARY + ARM_CHECKPOINTS + EVAL_OUTPUTS
    + TABLE_OUTPUTS + THROUGHPUT_OUTPUTS + STUDY_SUMMARY + STUDY_ARM_FILES + STUDY_MODELS,
    fetched=FETCHED, models=MODEL_OUTPUTS, manifests=FETCH_MANIFESTS)
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
        f"logs/{ROOT}/dvc_track.log",
    benchmark:
        f"logs/{ROOT}/benchmarks/dvc_track.tsv"
    conda:
        "../envs/brorl.yaml"
    shell:
        "brorl dvc-track {params.folders} {params.push} 2>&1 | tee {log}"
