"""Config validation: shipped profiles are valid; bad input names the key and the rule, before any job."""

import copy
import json
import math
import subprocess
from pathlib import Path

import pytest
import yaml

from brorl.config import PROJECT_ROOT, SCHEMA_PATH, ConfigError, merge_configs, read_config_file
from brorl.pipeline import load_config, validate_config

# Each profile as Snakemake loads it: a base file and its overlays, in --configfile order.
PROFILES = ["config/config.yaml", "config/config.yaml config/strong.yaml", "config/paper.yaml",
            "config/paper.yaml config/paper_study.yaml", "tests/configs/ci.yaml",
            "config/config.yaml config/study.yaml", "config/config.yaml config/study.yaml config/study_batch.yaml"]
# The tiny overlays and the last commit where each was a full copy of config/config.yaml (plus its changes).
BASE_ARM_SETTINGS_SINCE = {"merge_duplicates": True}  # config/config.yaml rl.arms.settings after the full copies
BASE_THROUGHPUT_SINCE = {"total": 4096}  # config/config.yaml throughput after the full copies (issue 31, session 9)
FULL_COPIES = {"config/strong.yaml": "46a57f1",  # branch i21-speed: job-following threads
               "config/study.yaml": "c569fcb"}   # main before issue 18's overlays


def tiny():
    return yaml.safe_load((PROJECT_ROOT / "config/config.yaml").read_text())


@pytest.mark.parametrize("path", PROFILES)
def test_shipped_profiles_are_valid(path):
    cfg = load_config(*(PROJECT_ROOT / p for p in path.split()))
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
    ("bad profile", lambda c: c["profile"].update(name="huge"), ["profile.name", "enum"]),
    ("summary step past the end", lambda c: c["theory"].update(summary_steps=[100, 5000]),
     ["theory.summary_steps[1]", "theory.simulation.steps"]),
    ("sweep bounds", lambda c: c["theory"]["extended_sweep"].update(n_min=64, n_max=8),
     ["theory.extended_sweep.n_min", "n_min <= n_max"]),
    ("unknown benchmark", lambda c: c["evaluation"].update(benchmarks=["tiny_add", "aime2024"]),
     ["evaluation.benchmarks[1]", "aime2024", "tiny_add"]),
    ("k = 0", lambda c: c["evaluation"].update(k=0), ["evaluation.k", "minimum"]),
    ("unknown task family", lambda c: c["tasks"].update(tasks=["add", "no_such_family"]),
     ["tasks.tasks[1]", "unknown task family 'no_such_family'", "registered: add, mul", "brorl.tasks.FAMILIES"]),
    ("unknown selected task family", lambda c: c["sft"].update(select_tasks=["no_such_family"]),
     ["sft.select_tasks[0]", "unknown task family 'no_such_family'"]),
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
    ("ProRL stage without the tiny model", lambda c: (c["profile"].update(start="trained", data="tasks"),
                                                      c["rl"].update(prorl={"n_rollouts": 16, "prompts_per_step": 8})),
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
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=600)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "theory.simulation.vocab_size" in text and "vocab_size >= 10001" in text
    assert not (out / "results").exists()
    assert "Select jobs to execute" not in text


def test_cli_validate_config(tmp_path):
    bad = mutate(lambda c: c["theory"]["simulation"].update(n_rollouts=[0]))
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    proc = subprocess.run(["brorl", "validate-config", "--each", str(PROJECT_ROOT / "config/config.yaml"), str(path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1
    assert "config.yaml: valid" in proc.stdout
    assert "n_rollouts[0]" in proc.stderr
    assert Path(path).exists()


def test_command_line_overrides_apply_to_the_default_profile(tmp_path):
    """`--config KEY=VALUE` without --configfile overrides the tiny defaults (and is validated too)."""
    proc = subprocess.run(
        ["snakemake", "-n", "--cores", "1", "--config", "profile={name: huge}", "--directory", str(tmp_path),
         "--snakefile", str(PROJECT_ROOT / "Snakefile"), "--configfile", str(PROJECT_ROOT / "config/config.yaml")],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=600)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "--config: profile.name: 'huge' is not one of" in text  # named by where it came from
    assert "required key is missing" not in text  # the rest still comes from config/config.yaml


def paper_benchmarks() -> list[str]:
    """config/paper.yaml's benchmarks: every catalog benchmark, the default list then the code ones (13 today)."""
    from brorl.data import catalog

    declared = yaml.safe_load((PROJECT_ROOT / "config/paper.yaml").read_text())["evaluation"]["benchmarks"]
    assert declared == [*catalog.BENCHMARK_NAMES, *catalog.CODE_BENCHMARK_NAMES] and len(declared) >= 13
    return declared


def test_paper_dag_fetches_benchmarks_and_evaluates_the_fetched_checkpoints(tmp_path):
    """`snakemake -n` on the paper profile plans the benchmark data (pinned fetch / generation), one evaluate
    job per (fetched checkpoint, benchmark) with the vllm backend, and every paper table."""
    proc = subprocess.run(
        ["snakemake", "-n", "--configfile", str(PROJECT_ROOT / "config/paper.yaml"), "--directory", str(tmp_path),
         "--snakefile", str(PROJECT_ROOT / "Snakefile")],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    counts = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    # models evaluated: the two fetched checkpoints and the two arms' final checkpoints (one seed); benchmarks: every
    # catalog row (13 today), so a new catalog row needs no edit here
    n = len(paper_benchmarks())
    assert counts["benchmark_data"] == n and counts["evaluate"] == 4 * n and counts["fetch_checkpoint"] == 2
    assert all(counts[f"paper_{name}"] == 1 for name in ("table1", "table3", "table5", "ttest", "figure1"))
    assert "results/paper/eval/brorl-released/reasoning_gym.json" in proc.stdout
    assert "results/paper/eval/n512-seed0/aime24.json" in proc.stdout
    assert '"backend": "vllm"' in proc.stdout
    # training: the paper data, both arms from the fetched ProRLv2 checkpoint (no ProRL stage), through brorl launch
    assert counts["train_data"] == 1 and counts["train_arm"] == 2 and counts["train_summary"] == 1
    assert "prorl_stage" not in counts and "difficulty" not in counts and "sft" not in counts
    arms = [b for b in proc.stdout.split("\nrule ") if b.startswith("train_arm:")]
    assert len(arms) == 2
    for block in arms:
        assert "input: resources/paper/models/prorl.manifest.json, results/paper/data/rl/deepscaler/train.jsonl" in block
        assert "brorl launch --accelerate-config fsdp2 -- brorl train-arm" in block
        assert "--init resources/paper/models/prorl --data results/paper/data/rl" in block
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
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    blocks = proc.stdout.split("\nrule ")
    evaluate = [b for b in blocks if b.startswith("evaluate:")]
    assert len(evaluate) == 4 * len(paper_benchmarks()) and all("gpu=1" in b for b in evaluate)
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
         "--directory", str(tmp_path), "--snakefile", str(PROJECT_ROOT / "Snakefile"), "results/paper-study/study/summary.md"],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    blocks = proc.stdout.split("\nrule ")
    arms = [b for b in blocks if b.startswith("study_arm:")]
    # base = BroRL's comparison (2 arms); 4 N at equal samples per step (N=512 reused from base); one new arm each
    # for fewer_prompts, lr_constant (N=16: base) and factorial_s (factorial_8s: base's and equal_samples_per_step's);
    # 2 each for no_kl, late_start, equal_time, base_x4, base_x16
    assert len(arms) == (2 + 3 + 1 + 1 + 1 + 2 * 5) * 3
    for block in arms + [b for b in blocks if b.startswith("study_start:")]:
        assert "brorl launch --accelerate-config fsdp2 -- brorl study-arm" in block
        assert "--data results/paper/data/rl" in block and "nodes=8" in block and "gres=gpu:8" in block
    plateau = [b for b in arms if "--init resources/paper/models/prorl " in b]  # the folder beside the manifest
    late = [b for b in arms if "--init resources/paper-study/study/prorl_late" in b]
    assert len(plateau) == 48 and len(late) == 6
    assert all('"mode": "sampled"' in b and '"engine": "vllm"' in b for b in arms)
    assert any('"n_rollouts": 512' in b and '"prompts_per_step": 128' in b for b in arms)
    # the base comparison is BroRL's: N=16 x 512 prompts against N=512 x 128 prompts (issue 17 item 5)
    base = [b for b in arms if "--wildcard setting=base " in b]
    assert len(base) == 6 and any('"n_rollouts": 16' in b and '"prompts_per_step": 512,' in b for b in base)
    for rule in ("prorl_stage", "study_pool", "sft"):
        assert not any(b.startswith(f"{rule}:") for b in blocks)


# --- Values that cannot be right: non-finite numbers and counts beyond their stated bound (issue 20 item 5) ---

def _set(path, value):
    """An edit setting the dotted ``path`` (``a.b[1]``-style parts as a tuple) of the tiny config to ``value``."""
    def edit(cfg):
        node = cfg
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
    return edit


NONFINITE = [
    (("theory", "simulation", "lr"), math.inf, "theory.simulation.lr: inf"),
    (("theory", "simulation", "lr"), math.nan, "theory.simulation.lr: nan"),
    (("theory", "simulation", "reward_incorrect"), -math.inf, "theory.simulation.reward_incorrect: -inf"),
    (("sft", "select_band", 1), math.nan, "sft.select_band[1]: nan"),
    (("rl", "recipe", "eta0"), math.inf, "rl.recipe.eta0: inf"),          # a free-form RLSettings mapping
    (("rl", "arms", "settings", "beta"), math.nan, "rl.arms.settings.beta: nan"),
    (("sft", "max_seconds"), math.inf, "sft.max_seconds: inf"),
]


@pytest.mark.parametrize("path,value,expected", NONFINITE, ids=[e for _, _, e in NONFINITE])
def test_nonfinite_numbers_are_refused_naming_the_key(path, value, expected):
    with pytest.raises(ConfigError) as err:
        validate_config(mutate(_set(path, value)))
    assert f"{expected} is not a finite number [rule: finite]" in str(err.value)


BOUNDS = [  # (key, absurd value, bound in the message); the paper profile's values are far below each
    (("theory", "simulation", "n_rollouts", 1), 10**12, "theory.simulation.n_rollouts[1]", 1048576),
    (("theory", "simulation", "vocab_size"), 10**9, "theory.simulation.vocab_size", 10000000),
    (("theory", "simulation", "steps"), 10**7, "theory.simulation.steps", 1000000),
    (("rl", "arms", "sample_budget"), 10**30, "rl.arms.sample_budget", 1000000000),
    (("rl", "arms", "batches", 0, "n_rollouts"), 10**12, "rl.arms.batches[0].n_rollouts", 1048576),
    (("rl", "recipe", "max_completion_length"), 10**8, "rl.recipe.max_completion_length", 1048576),
    (("rl", "arms", "settings", "sample_budget"), 10**10, "rl.arms.settings.sample_budget", 1000000000),
    (("rl", "prorl", "prompts_per_step"), 10**10, "rl.prorl.prompts_per_step", 1000000000),
    (("sft", "model", "hidden_size"), 10**6, "sft.model.hidden_size", 65536),
    (("evaluation", "seed"), 2**32, "evaluation.seed", 4294967295),
    (("evaluation", "k"), 10**6, "evaluation.k", 100000),
    (("throughput", "threads"), 10**5, "throughput.threads", 1024),
    (("tasks", "train_size"), 10**12, "tasks.train_size", 1000000000),
]


@pytest.mark.parametrize("path,value,key,bound", BOUNDS, ids=[b[2] for b in BOUNDS])
def test_counts_beyond_their_bound_are_refused_naming_the_key(path, value, key, bound):
    with pytest.raises(ConfigError) as err:
        validate_config(mutate(_set(path, value)))
    assert f"{key}: {value} is greater than the maximum of {bound}" in str(err.value)


def test_more_seeds_than_the_bound_are_refused():
    with pytest.raises(ConfigError) as err:
        validate_config(mutate(_set(("rl", "arms", "seeds"), list(range(101)))))
    assert "rl.arms.seeds: " in str(err.value) and "maxItems=100" in str(err.value)


def test_a_study_count_beyond_its_bound_is_refused():
    with pytest.raises(ConfigError) as err:
        validate_config(mutate(_study(lambda c: c["study"].update(samples_per_step=10**12))))
    assert "study.samples_per_step: 1000000000000 is greater than the maximum of 1000000000" in str(err.value)


def _integer_schemas(node, where="schema"):
    if isinstance(node, dict):
        types = node.get("type")
        if types == "integer" or (isinstance(types, list) and "integer" in types):
            yield where, node
        for key, value in node.items():
            yield from _integer_schemas(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _integer_schemas(value, f"{where}[{i}]")


def test_every_integer_in_the_schema_has_an_upper_bound():
    """A count without a bound lets 1e30 through; each bound's reason is its description (in $defs) or comment."""
    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    unbounded = [where for where, node in _integer_schemas(schema) if "maximum" not in node]
    assert not unbounded
    for name, node in schema["$defs"].items():
        if node.get("type") == "integer":
            assert "At most" in node["description"], name


# --- Files: line numbers, malformed YAML, several files, overlays (issue 20 item 5; issue 18 item 6) ---

MALFORMED = [
    ("tab", "profile: tiny\ntheory:\n\tsimulation: {}\n", 3, "found character '\\t'"),
    ("bad indent", "profile: tiny\ntheory:\n    simulation: {}\n  summary_steps: [1]\n", 4, "expected <block end>"),
    ("python tag", "profile: tiny\ntracking: !!python/object:os.system {}\n", 2, "python/object:os.system"),
    ("python tuple tag", "profile: !!python/tuple [tiny]\n", 1, "python/tuple"),  # Snakemake's loader takes both
    ("python name tag", "profile: tiny\nrl: {recipe: !!python/name:os.system }\n", 2, "python/name:os.system"),
    ("repeated key", "profile: tiny\ndvc: {push: true}\nprofile: paper\n", 3, "repeats the key of line 1"),
    ("not a mapping", "- profile\n- tiny\n", 1, "a config file is a mapping of keys, got a list"),
    ("empty", "# nothing\n", 1, "got an empty file"),
]


@pytest.mark.parametrize("name,text,line,fragment", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_file_is_reported_with_file_and_line(name, text, line, fragment, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        read_config_file(path)
    assert f"{path}:{line}:" in str(err.value) and fragment in str(err.value)


def test_a_json_config_indented_with_tabs_is_read_as_snakemake_reads_it(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny(), indent="\t"))  # not YAML (a tab), but JSON, which Snakemake tries first
    assert load_config(path) == tiny()


def test_a_missing_file_is_reported_by_name(tmp_path):
    with pytest.raises(ConfigError, match=f"{tmp_path / 'nope.yaml'}: no such file"):
        load_config(tmp_path / "nope.yaml")


def test_errors_name_the_file_and_line_of_their_key(tmp_path):
    text = (PROJECT_ROOT / "config/config.yaml").read_text()
    text = text.replace("lr: 1.0e-3 ", "lr: .inf   ").replace("sample_budget: 24576", "sample_budget: 1.0e+30")
    path = tmp_path / "config.yaml"
    path.write_text(text)
    lines = text.splitlines()
    lr = next(i for i, s in enumerate(lines, 1) if "lr: .inf" in s)
    budget = next(i for i, s in enumerate(lines, 1) if "sample_budget: 1.0e+30" in s)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"{path}:{lr}: theory.simulation.lr: inf is not a finite number [rule: finite]" in err.value.errors
    # 1.0e+30 is an integer to JSON Schema (a float with no fraction): the bound refuses it
    assert any(e.startswith(f"{path}:{budget}: rl.arms.sample_budget: 1e+30 is greater than the maximum")
               for e in err.value.errors)


def test_merge_is_snakemakes(tmp_path):
    """merge_configs gives what `snakemake --configfile A B` gives (snakemake.utils.update_config), including
    its corners: lists are replaced, an empty mapping keeps the old value, a mapping replaces a scalar."""
    from snakemake.utils import update_config

    base = {"a": {"b": [1, 2], "c": 1, "d": 5}, "e": 1, "f": {"g": 1}}
    overlay = {"a": {"b": [3], "d": {}, "h": None}, "e": {"x": 1}, "f": 2}
    expected = copy.deepcopy(base)
    update_config(expected, copy.deepcopy(overlay))
    assert merge_configs([base, overlay]) == expected
    assert base["a"]["b"] == [1, 2]  # inputs unchanged
    for files in (["config/config.yaml", "config/strong.yaml"], ["config/paper.yaml", "config/paper_study.yaml"],
                  ["config/config.yaml", "config/study.yaml", "config/study_batch.yaml"]):
        expected = {}
        for f in files:
            update_config(expected, yaml.safe_load((PROJECT_ROOT / f).read_text()))
        assert load_config(*(PROJECT_ROOT / f for f in files)) == expected


@pytest.mark.parametrize("base,overlay", [("config/config.yaml", "config/strong.yaml"),
                                          ("config/config.yaml", "config/study.yaml"),
                                          ("config/paper.yaml", "config/paper_study.yaml")])
def test_an_overlay_states_only_what_differs_from_its_base(base, overlay):
    def leaves(node, path=()):
        if isinstance(node, dict) and node:
            for k, v in node.items():
                yield from leaves(v, (*path, k))
        else:
            yield path, node

    base_cfg = yaml.safe_load((PROJECT_ROOT / base).read_text())
    for path, value in leaves(yaml.safe_load((PROJECT_ROOT / overlay).read_text())):
        node = base_cfg
        for part in path:
            node = node.get(part, "<absent>") if isinstance(node, dict) else "<absent>"
        assert node != value, f"{overlay}: {'.'.join(path)} repeats the base's value"


def _full_copy(overlay):
    """The old full copy of ``overlay`` (git history), or skip where this checkout has no history."""
    commit = FULL_COPIES[overlay]
    old = subprocess.run(["git", "show", f"{commit}:{overlay}"], cwd=PROJECT_ROOT, capture_output=True, text=True)
    if old.returncode != 0:
        pytest.skip(f"no git history with {commit} here: {old.stderr.strip()}")
    assert "\nprofile: tiny\n" in old.stdout  # its `profile: tiny`, written as today's declared block (brorl.profile)
    # with the overlay's output roots (brorl.layout), which the old full copy could not declare
    roots = yaml.safe_load((PROJECT_ROOT / overlay).read_text())["profile"]
    # and its stage switches, declared (issue 33): on where it had the section (then the switch)
    from brorl.pipeline import STAGE_SECTIONS, STAGES

    sections = yaml.safe_load(old.stdout)
    switches = ", ".join(f"{stage}: true" for stage, section in STAGE_SECTIONS.items()
                         if section in sections and not STAGES[stage])
    full = yaml.safe_load(old.stdout.replace(
        "\nprofile: tiny\n", "\nprofile: {name: tiny, start: trained, data: tasks, "
        f"overlay: {roots['overlay']}, reuses: [{', '.join(roots['reuses'])}]}}\n"
        f"stages: {{{switches}}}\n"))
    # a later change of the base's arm settings reaches the overlay's arms by design (issue 31: merge_duplicates)
    full["rl"]["arms"]["settings"].update(BASE_ARM_SETTINGS_SINCE)
    full["throughput"].update(BASE_THROUGHPUT_SINCE)  # and so does its throughput study's cell size
    return yaml.safe_dump(full, sort_keys=False)


@pytest.mark.parametrize("overlay", FULL_COPIES)
def test_a_tiny_overlay_on_its_base_equals_its_old_full_copy(overlay):
    """config/strong.yaml and config/study.yaml were full copies of config/config.yaml (plus their changes); each
    overlay on its base must give exactly that config, so its jobs and config_hash tags are unchanged."""
    merged = load_config(PROJECT_ROOT / "config/config.yaml", PROJECT_ROOT / overlay)
    assert merged == yaml.safe_load(_full_copy(overlay))
    if overlay == "config/strong.yaml":
        assert merged["rl"]["arms"]["seeds"] == [0, 1, 2, 3, 4] and merged["rl"]["arms"]["sample_budget"] == 49152
    else:
        assert merged["study"]["ns"] == [16, 64, 256, 512] and "study" not in load_config(PROJECT_ROOT / "config/config.yaml")


def test_an_overlay_alone_says_it_needs_its_base():
    with pytest.raises(ConfigError) as err:
        load_config(PROJECT_ROOT / "config/strong.yaml")
    assert "config/strong.yaml:1: tracking: required key is missing" in str(err.value)
    assert "is this an overlay? Give its base first" in str(err.value)


def _validate_cli(*args):
    return subprocess.run(["brorl", "validate-config", *map(str, args)], capture_output=True, text=True, timeout=600)


def test_cli_checks_every_file_and_reports_each_without_a_traceback(tmp_path):
    good = PROJECT_ROOT / "config/config.yaml"
    tab, py, bounds = tmp_path / "tab.yaml", tmp_path / "py.yaml", tmp_path / "bounds.yaml"
    tab.write_text("profile: tiny\n\tdvc: {}\n")
    py.write_text("profile: tiny\ntheory: !!python/object/apply:os.system ['true']\n")
    bounds.write_text(yaml.safe_dump(mutate(_set(("rl", "arms", "sample_budget"), 10**30)), sort_keys=False))
    budget = bounds.read_text().splitlines().index("    sample_budget: 1000000000000000000000000000000") + 1
    proc = _validate_cli("--each", tab, good, tmp_path / "missing.yaml", py, bounds)
    assert proc.returncode == 1
    assert proc.stdout == f"{good}: valid\n"
    assert f"{tab}:2:1: malformed YAML" in proc.stderr
    assert f"{tmp_path / 'missing.yaml'}: no such file" in proc.stderr
    assert f"{py}:2:9: malformed YAML: could not determine a constructor for the tag" in proc.stderr
    assert f"{bounds}:{budget}: rl.arms.sample_budget: {10**30} is greater than the maximum" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_checks_an_overlay_on_its_base(tmp_path):
    assert _validate_cli(PROJECT_ROOT / "config/paper.yaml", PROJECT_ROOT / "config/paper_study.yaml").returncode == 0
    assert _validate_cli(PROJECT_ROOT / "config/config.yaml", PROJECT_ROOT / "config/strong.yaml").returncode == 0
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("# a study overlay with two slips\nstudy:\n  seeds: [0]\n  steps: .nan\n  ns: [16, 4096000]\n")
    proc = _validate_cli(PROJECT_ROOT / "config/paper.yaml", PROJECT_ROOT / "config/paper_study.yaml", overlay)
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"{overlay}:4: study.steps: nan is not a finite number" in proc.stderr
    assert f"{overlay}:5: study.ns[1]: 4096000 is greater than the maximum of 1048576" in proc.stderr
    alone = _validate_cli(PROJECT_ROOT / "config/paper_study.yaml")
    assert alone.returncode == 1 and "is this an overlay?" in alone.stderr


def _plan(tmp_path, *configfiles):
    return subprocess.run(
        ["snakemake", "-n", "--configfile", *map(str, configfiles), "--directory", str(tmp_path),
         "--snakefile", str(PROJECT_ROOT / "Snakefile")],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=600)


def test_snakemake_names_the_overlay_file_and_line_before_any_job(tmp_path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("rl:\n  arms:\n    sample_budget: 49152\n    seeds: !!python/tuple [0, 1]\n")
    proc = _plan(tmp_path / "out", PROJECT_ROOT / "config/config.yaml", overlay)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Select jobs to execute" not in text
    # Snakemake's own loader accepts the tag (it builds a tuple); the Snakefile's check reads the files as safe YAML
    assert f"{overlay}:4:12: malformed YAML: could not determine a constructor for the tag" in text
    overlay.write_text("theory:\n  simulation:\n    lr: .nan\n")
    proc = _plan(tmp_path / "out", PROJECT_ROOT / "config/config.yaml", overlay)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"{overlay}:3: theory.simulation.lr: nan is not a finite number" in text
    assert not (tmp_path / "out" / "results").exists()


@pytest.mark.parametrize("overlays,arm_jobs,value", [
    (["config/strong.yaml"], ("train_arm", 25), '"sample_budget": 49152'),  # 5 arms x 5 seeds
    (["config/study.yaml"], ("study_arm", 99), '"ns": [16, 64, 256, 512]'),  # every setting
    (["config/study.yaml", "config/study_batch.yaml"], ("study_arm", 30), '"include": ["paper_comparison", ')])
def test_overlay_command_plans_what_the_old_full_copy_planned(tmp_path, overlays, arm_jobs, value):
    """`snakemake --configfile config/config.yaml <overlays>` (the Snakefile's default config/config.yaml applies
    only without --configfile) plans the same jobs and commands as the old full file did."""
    (tmp_path / "old.yaml").write_text(_full_copy(overlays[0]))
    plans = [_plan(tmp_path / "overlay", PROJECT_ROOT / "config/config.yaml", *(PROJECT_ROOT / f for f in overlays)),
             _plan(tmp_path / "full", tmp_path / "old.yaml", *(PROJECT_ROOT / f for f in overlays[1:]))]
    for proc in plans:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    keep = ("rule ", "localrule ", "    output:", "Shell command:")  # not `reason:` (set order varies per run)
    commands = [sorted(line for line in p.stdout.splitlines() if line.startswith(keep)) for p in plans]
    assert commands[0] == commands[1]
    assert sum(line.startswith(f"rule {arm_jobs[0]}:") for line in commands[0]) == arm_jobs[1]
    assert value in plans[0].stdout