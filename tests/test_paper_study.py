"""The N-scaling study's paper-profile path, run for real on the CPU as far as it goes.

`config/paper.yaml` + `config/paper_study.yaml` with toy sizes and the GPU-only parts swapped out: a local
folder stands in for the Hugging Face Hub (the start checkpoint is a toy model, the training data the stand-in
DeepScaleR / Eurus-2 snapshots plus generated Reasoning Gym), rollouts use the CPU sampler instead of vLLM,
`brorl launch` uses the CPU accelerate config (2 processes on gloo) instead of FSDP2, and held-out p is sampled
with the `hf` engine instead of vLLM. Everything else is the paper profile's: the fetch and train_data rules,
the study rules from the fetched checkpoint's manifest, the paper reward, the later start, the sampled held-out
metrics and the summary's half-split choice of the best arm.
"""

import json
import math

import pytest
import yaml

from brorl.config import PROJECT_ROOT, merge_configs
from test_pipeline import sh
from test_train_data import COMMIT, SETTINGS, hub

pytestmark = pytest.mark.slow

REPO_ID = "nvidia/Nemotron-Research-Reasoning-Qwen-1.5B"
GPU_ONLY = ("generation_engine", "vllm_importance_sampling", "vllm_is_mode", "vllm_is_min", "vllm_is_max", "bf16",
            "vllm_gpu_memory_utilization", "vllm_max_model_length")


def paper_ci_config(source) -> dict:
    cfg = yaml.safe_load((PROJECT_ROOT / "config/paper.yaml").read_text())
    study = yaml.safe_load((PROJECT_ROOT / "config/paper_study.yaml").read_text())
    cfg = merge_configs([cfg, study])  # as snakemake merges the overlay: its roots (paper-study), its stage switch
    cfg["checkpoints"]["source"] = str(source)
    # the stand-ins are not at the pinned commits: the start checkpoint's is pinned to the stand-in's, the data is
    # fetched unpinned (allowed, as a run would say in MLflow)
    cfg["checkpoints"]["fetch"]["prorl"]["commit"] = COMMIT
    cfg["checkpoints"]["allow_unpinned"] = True
    rl = cfg["rl"]
    rl["launch"] = {"accelerate_config": "cpu"}
    rl["data"] = {**rl["data"], **SETTINGS, "validation_per_source": 2, "revisions": {}}
    rl["recipe"] = {k: v for k, v in rl["recipe"].items() if k not in GPU_ONLY}
    rl["recipe"].update(max_completion_length=8, mini_batches=1, micro_batch_size=16, eta0=1e-3, b0=16,
                        checkpoint_every=1, threads=1)
    study = cfg["study"]
    for key in ("prompts_per_step", "factorial", "budgets"):  # the paper geometry's plan: test_study, test_config
        study.pop(key, None)
    study.update(seeds=[0], ns=[2, 4, 8], ablation_ns=[8], samples_per_step=16, steps=2, late_start_steps=1,
                 heldout_k=[1, 4, 8], ablations={"late_start": {"start": "late"}})
    study["heldout"] = {**study["heldout"], "samples": 8, "max_tokens": 8, "engine": "hf", "temperature": 1.0,
                        "top_p": 1.0, "vllm_args": {}}
    return cfg


@pytest.fixture(scope="module")
def paper_study(tmp_path_factory):
    from brorl.data.hub import write_local_snapshot
    from brorl.models.toy import toy_model

    root = tmp_path_factory.mktemp("paper-study")
    source = hub(root / "hub")  # the training data's stand-in snapshots
    toy_model(root / "toy_data", root / "toy_model", max_steps=30)
    files = {p.relative_to(root / "toy_model").as_posix(): p.read_bytes()
             for p in (root / "toy_model").rglob("*") if p.is_file()}
    write_local_snapshot(source, REPO_ID, "main", COMMIT, files)  # the start checkpoint's stand-in
    write_local_snapshot(source, REPO_ID, "brorl", "4" * 40, files)  # config/paper.yaml fetches both (not needed here)
    work = root / "work"
    work.mkdir()
    (work / "paper_ci.yaml").write_text(yaml.safe_dump(paper_ci_config(source)))
    # one job at a time: every study job is a 2-process `brorl launch` on the same port
    run = sh(["snakemake", "--cores", "1", "--configfile", str(work / "paper_ci.yaml"), "--snakefile",
              str(PROJECT_ROOT / "Snakefile"), "--directory", str(work), "--", "results/paper-study/study/summary.md"],
             PROJECT_ROOT, timeout=1800)
    return {"work": work, "log": run.stdout + run.stderr}


def test_paper_study_runs_from_the_fetched_checkpoint_on_the_paper_data(paper_study):
    work = paper_study["work"]
    assert json.loads((work / "resources/paper/models/prorl.manifest.json").read_text())["source"] == "local"
    assert (work / "results/paper/data/rl/train_data.json").exists()
    # every arm and the later start ran under `brorl launch` (2 CPU processes), from the manifest's folder
    logs = [work / "logs/paper-study/study/prorl_late.log"] + sorted((work / "logs/paper-study/study").glob("*/n*/seed0.log"))
    assert len(logs) == 5 and all("[launch]" in p.read_text() and "--num_processes 2" in p.read_text() for p in logs)
    late = json.loads((work / "results/paper-study/study/prorl_late/summary.json").read_text())
    assert late["steps"] == 1
    for setting, n in (("base", 2), ("base", 4), ("base", 8), ("late_start", 8)):
        folder = work / f"results/paper-study/study/{setting}/n{n}/seed0"
        s = json.loads((folder / "summary.json").read_text())
        assert s["generated_samples"] == 32 and s["prompts_per_step"][0] == 16 // n
        h = json.loads((folder / "heldout.json").read_text())
        assert h["estimate"] == "sampled (8 per prompt)" and h["all"]["prompts"] == 6
        assert set(h) >= {"deepscaler", "eurus2_code", "reasoning_gym"} and h["probes"]["pairs"] == 0
        assert math.isnan(h["all"]["pass@256"]) and not math.isnan(h["all"]["pass@8"])  # k > samples: no estimate
    # the start models' held-out p: measured once each (the fetched checkpoint, the later start)
    assert len(list((work / "resources/paper-study/work/study/heldout_start").glob("*.npz"))) == 2


def test_paper_study_summary_picks_on_one_half_and_judges_on_the_other(paper_study):
    md = (paper_study["work"] / "results/paper-study/study/summary.md").read_text()
    assert md.startswith("# The N-scaling study (paper profile)")
    assert "sampled (8 per prompt)" in md and "even-indexed held-out prompts" in md
    assert "| base |" in md and "| late_start | 8 |" in md
    rows = (paper_study["work"] / "results/paper-study/study/summary.csv").read_text().splitlines()
    assert len(rows) == 1 + 3 + 1  # base N = 2, 4, 8; late_start N = 8 (compared with the base N=2 arm)
