# DVC: every output folder of the pipeline becomes <folder>.dvc (committed to git) and is pushed to the
# default remote, so `dvc pull` on a fresh clone brings it back (README, "Artifacts").

# Each run tracks the folders of its own root only (results/<root>/theory.dvc beside results/<root>/theory, ...;
# brorl.layout): the groups an overlay reuses are its base's, tracked by the base's own run.


DVC_TRACKED = PLAN.dvc_tracked  # {folder: the outputs it stands for}, this root's only (brorl.layout.dvc_folders)


rule dvc_track:
    input:
        [path for outputs in DVC_TRACKED.values() for path in outputs],
    output:
        PLAN.dvc_files,
    params:
        folders=list(DVC_TRACKED),
        push="--push" if config["dvc"]["push"] else "",
    log:
        f"logs/{PLAN.root}/dvc_track.log",
    benchmark:
        f"logs/{PLAN.root}/benchmarks/dvc_track.tsv"
    conda:
        "../envs/brorl.yaml"
    shell:
        "brorl dvc-track {params.folders} {params.push} 2>&1 | tee {log}"
