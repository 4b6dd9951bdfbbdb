"""Config validation: shipped profiles are valid; bad input names the key and the rule, before any job."""

import copy
import subprocess
from pathlib import Path

import pytest
import yaml

from brorl.config import PROJECT_ROOT, ConfigError, load_config, validate_config

PROFILES = ["config/config.yaml", "config/strong.yaml", "config/paper.yaml", "tests/configs/ci.yaml"]


def tiny():
    return yaml.safe_load((PROJECT_ROOT / "config/config.yaml").read_text())


@pytest.mark.parametrize("path", PROFILES)
def test_shipped_profiles_are_valid(path):
    cfg = load_config(PROJECT_ROOT / path)
    assert cfg["theory"]["simulation"]["vocab_size"] >= cfg["theory"]["simulation"]["num_correct"]


def test_paper_profile_carries_the_paper_simulation_settings():
    sim = load_config(PROJECT_ROOT / "config/paper.yaml")["theory"]["simulation"]
    assert sim["vocab_size"] == 128_000 and sim["num_correct"] == 10_000
    assert sim["n_rollouts"] == [4, 8, 16, 512, 51_200]
    assert sim["lr"] == 1e-3 and sim["steps"] == 1000 and len(sim["seeds"]) >= 3
    assert (sim["correct_logit"], sim["anchor_logit"]) == (3.0, 5.0)


def mutate(edit):
    cfg = copy.deepcopy(tiny())
    edit(cfg)
    return cfg


CASES = [
    ("unknown key", lambda c: c["theory"]["simulation"].update(vocab=5),
     ["theory.simulation.vocab", "unknown key", "additionalProperties"]),
    ("unknown top-level key", lambda c: c.update(trian={}), ["trian", "unknown key"]),
    ("N <= 0", lambda c: c["theory"]["simulation"].update(n_rollouts=[4, 0]),
     ["theory.simulation.n_rollouts[1]", "minimum"]),
    ("negative N", lambda c: c["theory"]["simulation"].update(n_rollouts=[-3]),
     ["theory.simulation.n_rollouts[0]", "minimum"]),
    ("vocabulary smaller than |P|", lambda c: c["theory"]["simulation"].update(vocab_size=5000),
     ["theory.simulation.vocab_size", "theory.simulation.num_correct", "vocab_size >= 10001"]),
    ("wrong type", lambda c: c["theory"]["simulation"].update(lr="1e-3"),
     ["theory.simulation.lr", "is not of type 'number'", "type"]),
    ("wrong type int", lambda c: c["theory"]["simulation"].update(steps=10.5),
     ["theory.simulation.steps", "type"]),
    ("missing key", lambda c: c["theory"]["simulation"].pop("num_correct"),
     ["theory.simulation.num_correct", "required"]),
    ("bad profile", lambda c: c.update(profile="huge"), ["profile", "enum"]),
    ("summary step past the end", lambda c: c["theory"].update(summary_steps=[100, 5000]),
     ["theory.summary_steps[1]", "theory.simulation.steps"]),
    ("sweep bounds", lambda c: c["theory"]["extended_sweep"].update(n_min=64, n_max=8),
     ["theory.extended_sweep.n_min", "n_min <= n_max"]),
    ("unknown benchmark", lambda c: c["evaluation"].update(benchmarks=["tiny_add", "aime2024"]),
     ["evaluation.benchmarks[1]", "aime2024", "tiny_add"]),
    ("k = 0", lambda c: c["evaluation"].update(k=0), ["evaluation.k", "minimum"]),
    ("evaluated model not fetched", lambda c: c["evaluation"].update(models=["brorl-released"]),
     ["evaluation.models[0]", "checkpoints.fetch"]),
]


def _study(edit):
    """An edit of the N-scaling study's section (config/study.yaml adds only `study` to the tiny profile)."""
    def apply(cfg):
        cfg["study"] = yaml.safe_load((PROJECT_ROOT / "config/study.yaml").read_text())["study"]
        edit(cfg)
    return apply


STUDY_CASES = [
    ("N does not divide the step", lambda c: c["study"].update(ns=[16, 48, 100]),
     ["study: samples_per_step = 16384 is not a multiple of N = 48", "samples_per_step % N == 0"]),
    ("unknown axis", lambda c: c["study"]["ablations"].update(wide={"prompt_count": 3}),
     ["study.ablations.wide.prompt_count", "unknown key"]),
    ("bad pool", lambda c: c["study"]["ablations"].update(wide={"pool": "huge"}),
     ["study.ablations.wide.pool", "enum"]),
    ("prompts for an N that does not run", lambda c: c["study"]["ablations"].update(
        wide={"prompts_per_step": {"64": 8}}), ["study.ablations.wide.prompts_per_step.64", "not among"]),
    ("no larger N", lambda c: c["study"]["ablations"].update(small={"ns": [16]}),
     ["study.ablations.small.ns", "no N above the reference N = 16"]),
    ("impossible stage", lambda c: c["study"]["ablations"].update(clip={"settings": {"epsilon_low": 1.5}}),
     ["study.ablations.clip (N=16)", "epsilon_low", "RLSettings"]),
    ("N below 2", lambda c: c["study"].update(ns=[1, 16]), ["study.ns", "minimum"]),
    ("a setting named base", lambda c: c["study"]["ablations"].update(base={}), ["study.ablations", "base"]),
    ("no rl section", lambda c: c.pop("rl"), ["study: needs the `rl` section"]),
]
CASES += [(f"study: {name}", _study(edit), expected) for name, edit, expected in STUDY_CASES]


@pytest.mark.parametrize("name,edit,expected", CASES, ids=[c[0] for c in CASES])
def test_invalid_config_names_key_and_rule(name, edit, expected):
    with pytest.raises(ConfigError) as err:
        validate_config(mutate(edit))
    for fragment in expected:
        assert fragment in str(err.value)


def paper():
    return yaml.safe_load((PROJECT_ROOT / "config/paper.yaml").read_text())


PAPER_RL_CASES = [
    ("no start model", lambda c: c["rl"].pop("start_model"), ["rl.start_model", "required without rl.prorl"]),
    ("start model not fetched", lambda c: c["rl"].update(start_model="sft"),
     ["rl.start_model", "'sft' is not a fetched checkpoint"]),
    ("ProRL stage without the tiny model", lambda c: c["rl"].update(prorl={"n_rollouts": 16, "prompts_per_step": 8}),
     ["rl.start_model: the arms start from the ProRL stage", "checkpoints.fetch.prorl", "ProRL stage needs sft",
      "rl.data"]),
    ("no training data", lambda c: c["rl"].pop("data"), ["rl.data", "required without rl.prorl"]),
    ("unknown data source", lambda c: c["rl"]["data"].update(sources=["deepscaler", "scp116k"]),
     ["rl.data", "scp116k", "TrainDataSettings"]),
    ("unknown accelerate config", lambda c: c["rl"]["launch"].update(accelerate_config="megatron"),
     ["rl.launch.accelerate_config", "enum"]),
]


@pytest.mark.parametrize("name,edit,expected", PAPER_RL_CASES, ids=[c[0] for c in PAPER_RL_CASES])
def test_paper_rl_section_is_checked_with_its_keys(name, edit, expected):
    cfg = paper()
    edit(cfg)
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    for fragment in expected:
        assert fragment in str(err.value)


def test_paper_rl_section_carries_the_paper_arms():
    rl = load_config(PROJECT_ROOT / "config/paper.yaml")["rl"]
    from brorl.training.arms import plan
    from brorl.training.settings import RLSettings
    from brorl.training.trainer import learning_rate

    arms = {name: RLSettings.from_dict(stages[0]) for name, stages in plan(rl).items()}
    assert sorted(arms) == ["n16", "n512"] and rl["start_model"] == "prorl" and "prorl" not in rl
    assert (arms["n16"].prompts_per_step, arms["n512"].prompts_per_step) == (512, 128)  # BroRL Table 1
    assert arms["n512"].generation_engine == "vllm" and arms["n512"].vllm_importance_sampling
    assert (arms["n512"].epsilon_low, arms["n512"].epsilon_high) == (0.2, 0.28)
    assert arms["n512"].max_completion_length == 16384
    assert learning_rate(arms["n512"]) / learning_rate(arms["n16"]) == pytest.approx(8 ** 0.5)  # sqrt rule


def test_every_error_is_reported_at_once():
    def edit(c):
        c["theory"]["simulation"]["n_rollouts"] = [0]
        c["theory"]["simulation"]["lr"] = "fast"
    with pytest.raises(ConfigError) as err:
        validate_config(mutate(edit))
    assert "n_rollouts[0]" in str(err.value) and "theory.simulation.lr" in str(err.value)


def test_snakemake_rejects_a_bad_config_before_any_job(tmp_path):
    bad = mutate(lambda c: c["theory"]["simulation"].update(vocab_size=100))
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    out = tmp_path / "out"
    proc = subprocess.run(
        ["snakemake", "--cores", "1", "--configfile", str(path), "--directory", str(out),
         "--snakefile", str(PROJECT_ROOT / "Snakefile")],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=120)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "theory.simulation.vocab_size" in text and "vocab_size >= 10001" in text
    assert not (out / "results").exists()
    assert "Select jobs to execute" not in text


def test_cli_validate_config(tmp_path):
    bad = mutate(lambda c: c["theory"]["simulation"].update(n_rollouts=[0]))
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    proc = subprocess.run(["brorl", "validate-config", str(PROJECT_ROOT / "config/config.yaml"), str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "config.yaml: valid" in proc.stdout
    assert "n_rollouts[0]" in proc.stderr
    assert Path(path).exists()


def test_command_line_overrides_apply_to_the_default_profile():
    """`--config KEY=VALUE` without --configfile overrides the tiny defaults (and is validated too)."""
    proc = subprocess.run(
        ["snakemake", "-n", "--cores", "1", "--config", "profile=huge"],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=120)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "profile: 'huge' is not one of" in text
    assert "required key is missing" not in text  # the rest still comes from config/config.yaml


def test_paper_dag_fetches_benchmarks_and_evaluates_the_fetched_checkpoints(tmp_path):
    """`snakemake -n` on the paper profile plans the benchmark data (pinned fetch / generation), one evaluate
    job per (fetched checkpoint, benchmark) with the vllm backend, and every paper table."""
    proc = subprocess.run(
        ["snakemake", "-n", "--configfile", str(PROJECT_ROOT / "config/paper.yaml"), "--directory", str(tmp_path),
         "--snakefile", str(PROJECT_ROOT / "Snakefile")],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    counts = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    # models evaluated: the two fetched checkpoints and the two arms' final checkpoints (one seed)
    assert counts["benchmark_data"] == 13 and counts["evaluate"] == 4 * 13 and counts["fetch_checkpoint"] == 2
    assert all(counts[f"paper_{name}"] == 1 for name in ("table1", "table3", "table5", "ttest", "figure1"))
    assert "results/eval/brorl-released/reasoning_gym.json" in proc.stdout
    assert "results/eval/n512-seed0/aime24.json" in proc.stdout
    assert '"backend": "vllm"' in proc.stdout
    # training: the paper data, both arms from the fetched ProRLv2 checkpoint (no ProRL stage), through brorl launch
    assert counts["train_data"] == 1 and counts["train_arm"] == 2 and counts["train_summary"] == 1
    assert "prorl_stage" not in counts and "difficulty" not in counts and "sft" not in counts
    arms = [b for b in proc.stdout.split("\nrule ") if b.startswith("train_arm:")]
    assert len(arms) == 2
    for block in arms:
        assert "input: resources/models/prorl.manifest.json, results/data/rl/deepscaler/train.jsonl" in block
        assert "brorl launch --accelerate-config fsdp2 -- brorl train-arm" in block
        assert "--init resources/models/prorl --data results/data/rl" in block
        assert '"generation_engine": "vllm"' in block
    # the throughput study on the fetched checkpoint: vLLM's engine, prefix caching on and off
    assert counts["throughput_study"] == 1 and '"engines": ["vllm", "vllm_no_prefix_cache"]' in proc.stdout


@pytest.mark.parametrize("profile", ["profiles/slurm", "profiles/local-gpu"])
def test_cluster_profiles_plan_the_paper_dag_with_resources_from_the_profile(profile, tmp_path):
    """The paper DAG under the SLURM and local-GPU profiles: per-rule resources come from the profile (a GPU
    for every evaluate job), not from the rules."""
    proc = subprocess.run(
        ["snakemake", "-n", "--configfile", str(PROJECT_ROOT / "config/paper.yaml"), "--profile",
         str(PROJECT_ROOT / profile), "--directory", str(tmp_path), "--snakefile", str(PROJECT_ROOT / "Snakefile")],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    blocks = proc.stdout.split("\nrule ")
    evaluate = [b for b in blocks if b.startswith("evaluate:")]
    assert len(evaluate) == 52 and all("gpu=1" in b for b in evaluate)
    train = [b for b in blocks if b.startswith("train_arm:")]
    assert len(train) == 2
    assert "gpu=1" in next(b for b in blocks if b.startswith("throughput_study:"))
    if profile.endswith("slurm"):
        assert all("slurm_partition=gpu" in b for b in evaluate)
        assert "slurm_partition=cpu" in next(b for b in blocks if b.startswith("benchmark_data:"))
        # an arm: 8 nodes x 8 GPUs (BroRL's 64 H100s), one accelerate launcher per node via srun
        assert all("nodes=8" in b and "gres=gpu:8" in b and "slurm_partition=gpu" in b for b in train)
    else:  # the whole host (capped by --resources gpu=<GPUs>; this plan runs with the profile's gpu=1)
        assert all("gpu=1" in b for b in train)
    for rules in ("evaluation.smk", "training.smk"):
        text = (PROJECT_ROOT / "workflow/rules" / rules).read_text()
        assert "gpu: 1" not in text and "gres" not in text and "nodes=" not in text


def test_paper_study_runs_the_same_rules_on_the_cluster(tmp_path):
    """`--configfile config/paper.yaml config/paper_study.yaml` under the SLURM profile: the study's arms start from
    the fetched checkpoint on the paper data, through `brorl launch`, on train_arm's allocation, with held-out p
    sampled by vLLM; no tiny-only rule (ProRL stage, fresh pool) is planned."""
    proc = subprocess.run(
        ["snakemake", "-n", "--configfile", str(PROJECT_ROOT / "config/paper.yaml"),
         str(PROJECT_ROOT / "config/paper_study.yaml"), "--profile", str(PROJECT_ROOT / "profiles/slurm"),
         "--directory", str(tmp_path), "--snakefile", str(PROJECT_ROOT / "Snakefile"), "results/study/summary.md"],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    blocks = proc.stdout.split("\nrule ")
    arms = [b for b in blocks if b.startswith("study_arm:")]
    # base = BroRL's comparison (2 arms); 4 N at equal samples per step (N=512 reused from base); one new arm each
    # for fewer_prompts, lr_constant (N=16: base) and factorial_s (factorial_8s: base's and equal_samples_per_step's);
    # 2 each for no_kl, late_start, equal_time, base_x4, base_x16
    assert len(arms) == (2 + 3 + 1 + 1 + 1 + 2 * 5) * 3
    for block in arms + [b for b in blocks if b.startswith("study_start:")]:
        assert "brorl launch --accelerate-config fsdp2 -- brorl study-arm" in block
        assert "--data results/data/rl" in block and "nodes=8" in block and "gres=gpu:8" in block
    plateau = [b for b in arms if "--init resources/models/prorl.manifest.json" in b]
    late = [b for b in arms if "--init resources/study/prorl_late" in b]
    assert len(plateau) == 48 and len(late) == 6
    assert all('"mode": "sampled"' in b and '"engine": "vllm"' in b for b in arms)
    assert any('"n_rollouts": 512' in b and '"prompts_per_step": 128' in b for b in arms)
    # the base comparison is BroRL's: N=16 x 512 prompts against N=512 x 128 prompts (issue 17 item 5)
    base = [b for b in arms if "--wildcard setting=base " in b]
    assert len(base) == 6 and any('"n_rollouts": 16' in b and '"prompts_per_step": 512,' in b for b in base)
    for rule in ("prorl_stage", "study_pool", "sft"):
        assert not any(b.startswith(f"{rule}:") for b in blocks)
