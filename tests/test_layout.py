"""Output roots (brorl.layout, issue 32): each profile and each overlay under its own root, reused groups in the
base's root, the reuse check, the old-layout refusal and `brorl migrate-layout`."""

import json
import subprocess
import sys

import pytest

from brorl.config import PROJECT_ROOT, ConfigError
from brorl.pipeline import load_config
from brorl.layout import GROUPS, Layout, migrate, migration_moves, old_layout_paths, rule_group
from brorl.profile import Profile
from brorl.study.plan import pools, starts


def test_a_base_writes_under_its_name_and_an_overlay_under_name_dash_overlay():
    base = Layout("tiny")
    assert base.root == "tiny" and all(base.root_of(g) == "tiny" for g in GROUPS)
    assert base.path("theory", "results/theory/figure3.png") == "results/tiny/theory/figure3.png"
    assert base.path("arms", "logs/train/n16/seed0.log") == "logs/tiny/train/n16/seed0.log"
    strong = Layout("tiny", "strong", ("theory", "start"))
    assert strong.root == "tiny-strong"
    assert strong.results("start", "train", "prorl") == "results/tiny/train/prorl"  # reused: the base's
    assert strong.resources("arms", "checkpoints") == "resources/tiny-strong/checkpoints"  # its own
    assert strong.run_root("prorl_stage") == "tiny" and strong.run_root("train_arm") == "tiny-strong"
    assert strong.run_root("paper_table1") == "tiny-strong" and strong.run_root("theory_figure3") == "tiny"
    with pytest.raises(ValueError, match="not under results/"):
        base.path("theory", "docs/x.md")


def test_every_rule_of_the_workflow_has_a_group(tmp_path):
    rules = subprocess.run(["snakemake", "--list-rules", "--configfile", str(PROJECT_ROOT / "tests/configs/ci.yaml"),
                            "--snakefile", str(PROJECT_ROOT / "Snakefile"), "--directory", str(tmp_path)],
                           cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    names = [line.strip() for line in rules.stdout.splitlines() if line.strip() and " " not in line.strip()]
    assert "train_arm" in names and "study_arm" in names, rules.stdout + rules.stderr
    for name in names:
        if name not in ("all", "dvc_track"):
            assert rule_group(name) in GROUPS, name


@pytest.mark.parametrize("block,error", [
    ({"name": "tiny", "reuses": ["start"]}, "only an overlay"),
    ({"name": "tiny", "overlay": "x", "reuses": ["arms"]}, "reuse start too"),
    ({"name": "tiny", "overlay": "x", "reuses": ["nothing"]}, "is not one of"),
    ({"name": "theory"}, "old layout"),
    ({"name": "tiny", "overlay": "Big-One"}, "not a root name"),
])
def test_bad_roots_are_refused(block, error):
    with pytest.raises(ValueError, match=error):
        Profile(**block)


def test_profile_paths_follow_the_start_group_root():
    tiny = Profile("tiny", overlay="study", reuses=("theory", "start", "arms"))
    assert tiny.data_dir == "results/tiny/data"
    assert tiny.start_model({}) == "resources/tiny/models/prorl"
    assert pools(tiny) == {"fixed": "results/tiny/data", "fresh": "results/tiny-study/study/data_fresh",
                           "tail": "results/tiny-study/study/data_tail"}
    assert starts(tiny, {}) == {"plateau": "resources/tiny/models/prorl", "late": "resources/tiny-study/study/prorl_late"}
    paper = Profile("paper", start="fetched", data="paper", pins="required")
    assert paper.data_dir == "results/paper/data/rl"
    assert paper.start_model({"start_model": "prorl"}) == "resources/paper/models/prorl"


@pytest.mark.parametrize("overlay,root", [("config/strong.yaml", "tiny-strong"), ("config/study.yaml", "tiny-study")])
def test_shipped_overlays_declare_their_root_and_pass_the_reuse_check(overlay, root):
    cfg = load_config(PROJECT_ROOT / "config/config.yaml", PROJECT_ROOT / overlay)
    assert Profile.from_config(cfg).layout.root == root
    assert Profile.from_config(load_config(PROJECT_ROOT / "config/config.yaml")).layout.root == "tiny"


def test_an_overlay_that_changes_a_reused_stage_is_refused_naming_file_line_and_key(tmp_path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("profile: {overlay: more, reuses: [theory, start]}\nrl:\n  prorl:\n    steps: 7\n")
    with pytest.raises(ConfigError) as err:
        load_config(PROJECT_ROOT / "config/config.yaml", overlay)
    text = str(err.value)
    assert f"{overlay}:1: profile.reuses: start: the overlay changes rl.prorl.steps" in text
    assert "results/tiny/" in text and "results/tiny-more/" in text
    overlay.write_text("profile: {overlay: more, reuses: [theory]}\nrl:\n  prorl:\n    steps: 7\n")
    assert Profile.from_config(load_config(PROJECT_ROOT / "config/config.yaml", overlay)).layout.root_of("start") == \
        "tiny-more"  # not reused: the changed ProRL stage runs under the overlay's own root


def _old_checkout(root):
    for rel in ("results/theory/figure3.png", "results/train/prorl/summary.json", "results/train/n16/seed0/summary.json",
                "results/train/summary.csv", "results/eval/prorl/tiny_add.json", "results/tables/table1.csv",
                "results/study/base/n16/seed0/summary.json", "resources/models/sft/config.json",
                "resources/checkpoints/n16/seed0/config.json", "resources/work/prorl/state.json",
                "resources/work/n16/seed0/state.json", "resources/work/study/base/state.json",
                "logs/theory/simulation.log", "logs/benchmarks/study_arm/base.tsv", "logs/benchmarks/sft.tsv"):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rel)
    (root / "results/theory.dvc").write_text("outs:\n- md5: abc.dir\n  path: theory\n")


def test_migration_moves_each_group_under_its_root_with_its_dvc_file(tmp_path):
    _old_checkout(tmp_path)
    assert "results/theory" in old_layout_paths(tmp_path) and "results/theory.dvc" in old_layout_paths(tmp_path)
    layout = Layout("tiny", "study", ("theory", "start", "arms"))
    dry = migrate(layout, tmp_path, dry_run=True)
    assert (tmp_path / "results/theory/figure3.png").exists()  # a dry run moves nothing
    moved = dict(migrate(layout, tmp_path))
    assert moved == dict(dry)
    assert old_layout_paths(tmp_path) == []
    for rel, now in {"results/theory/figure3.png": "results/tiny/theory/figure3.png",
                     "results/train/prorl/summary.json": "results/tiny/train/prorl/summary.json",
                     "results/train/n16/seed0/summary.json": "results/tiny/train/n16/seed0/summary.json",
                     "results/study/base/n16/seed0/summary.json": "results/tiny-study/study/base/n16/seed0/summary.json",
                     "resources/models/sft/config.json": "resources/tiny/models/sft/config.json",
                     "resources/work/prorl/state.json": "resources/tiny/work/prorl/state.json",
                     "resources/work/study/base/state.json": "resources/tiny-study/work/study/base/state.json",
                     "logs/theory/simulation.log": "logs/tiny/theory/simulation.log",
                     "logs/benchmarks/study_arm/base.tsv": "logs/tiny-study/benchmarks/study_arm/base.tsv",
                     "logs/benchmarks/sft.tsv": "logs/tiny/benchmarks/sft.tsv"}.items():
        assert (tmp_path / now).read_text() == rel, now  # the same file, moved
    # a .dvc file's path is relative to it: beside its folder it still names the folder
    assert "path: theory" in (tmp_path / "results/tiny/theory.dvc").read_text()


def test_migration_splits_the_prorl_stage_from_an_overlays_own_arms(tmp_path):
    _old_checkout(tmp_path)
    moves = dict(migration_moves(Layout("tiny", "strong", ("theory", "start")), tmp_path))
    assert moves["results/train/prorl"] == "results/tiny/train/prorl"
    assert moves["results/train/n16"] == "results/tiny-strong/train/n16"
    assert moves["resources/checkpoints"] == "resources/tiny-strong/checkpoints"
    assert moves["resources/models"] == "resources/tiny/models"


def test_migration_refuses_to_replace_anything(tmp_path):
    _old_checkout(tmp_path)
    (tmp_path / "results/tiny/theory").mkdir(parents=True)
    with pytest.raises(SystemExit, match="already exist"):
        migrate(Layout("tiny"), tmp_path)
    assert (tmp_path / "results/theory/figure3.png").exists()


def test_snakemake_refuses_the_old_layout_before_any_job(tmp_path):
    _old_checkout(tmp_path)
    proc = subprocess.run(["snakemake", "-n", "--configfile", str(PROJECT_ROOT / "tests/configs/ci.yaml"),
                           "--snakefile", str(PROJECT_ROOT / "Snakefile"), "--directory", str(tmp_path)],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "old layout" in text and "brorl migrate-layout --configfile" in text
    assert "Select jobs to execute" not in text and not (tmp_path / "results/ci").exists()


@pytest.fixture
def no_tracking_env(monkeypatch):
    """mlflow.set_tracking_uri exports MLFLOW_TRACKING_URI, which brorl.tracking prefers to a config's uri: each
    test starts without it (and monkeypatch removes what the test set)."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def test_migrate_layout_command_tags_the_old_runs_with_their_root(tmp_path, no_tracking_env):
    """`brorl migrate-layout` moves the files and gives the profile's untagged MLflow runs their group's root."""
    from brorl.tracking import rule_run

    _old_checkout(tmp_path)
    (tmp_path / "config").mkdir()
    (tmp_path / "config/config.yaml").write_text((PROJECT_ROOT / "config/config.yaml").read_text())
    (tmp_path / "config/strong.yaml").write_text((PROJECT_ROOT / "config/strong.yaml").read_text())
    tracking = {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "brorl-tiny", "artifact_root": str(tmp_path / "art")}
    ids = {}
    for rule in ("prorl_stage", "train_arm"):
        with rule_run(rule, profile="tiny", config={}, tracking=tracking) as run:
            ids[rule] = run.info.run_id
    # the file's tracking uri is relative (sqlite:///mlflow.db): run the command in the checkout
    proc = subprocess.run([sys.executable, "-m", "brorl.cli", "migrate-layout", "--configfile", "config/config.yaml",
                           "config/strong.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["root"] == "tiny-strong"
    assert (tmp_path / "results/tiny-strong/train/n16/seed0/summary.json").exists()
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert client.get_run(ids["prorl_stage"]).data.tags["root"] == "tiny"
    assert client.get_run(ids["train_arm"]).data.tags["root"] == "tiny-strong"


def test_the_tables_read_only_the_runs_of_each_rules_root(tmp_path, no_tracking_env):
    from brorl.tables.store import RunStore
    from brorl.tracking import rule_run

    tracking = {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "e", "artifact_root": str(tmp_path / "a")}
    ids = {}
    for root in ("tiny", "tiny-strong", None):
        with rule_run("train_arm", profile="tiny", config={}, wildcards={"arm": "n16", "seed": 0}, tracking=tracking,
                      root=root) as run:
            ids[root] = run.info.run_id
    with rule_run("prorl_stage", profile="tiny", config={}, tracking=tracking, root="tiny") as run:
        ids["prorl"] = run.info.run_id

    def arm(layout):
        store = RunStore(tracking["uri"], "e", "tiny", layout=layout)
        try:
            return store.arm("n16", 0).run_id, store.prorl().run_id
        finally:
            store.close()

    assert arm(Layout("tiny", "strong", ("theory", "start"))) == (ids["tiny-strong"], ids["prorl"])
    # the base: its own tagged run or an untagged one from before the roots (the latest), never the overlay's
    assert arm(Layout("tiny")) == (ids[None], ids["prorl"])


def test_figure3_without_its_run_says_which_run_and_how_to_fix_it(tmp_path, no_tracking_env):
    from brorl.tables.figures import file_theory_figure
    from brorl.tracking import init_store

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    init_store({"uri": uri, "experiment": "brorl-small", "artifact_root": str(tmp_path / "a")})
    png = tmp_path / "figure3.png"
    png.write_bytes(b"png")
    with pytest.raises(SystemExit) as err:
        file_theory_figure(png, tmp_path / "out.png", tracking_uri=uri, experiment="brorl-small", profile="small")
    text = str(err.value)
    assert "no FINISHED run of theory_figure3 in experiment 'brorl-small'" in text
    assert "snakemake --forcerun theory_figure3" in text and str(png) in text


def test_dvc_folders_track_this_roots_outputs_only():
    """rule dvc_track's folders (brorl.layout.dvc_folders): each output under results/<root>/<folder>, a fetched
    model by its manifest, a trained model and a manifest on their own; a reused base's outputs are left out."""
    from brorl.layout import dvc_folders

    got = dvc_folders("tiny-study", ["results/tiny-study/study/summary.md", "results/tiny/theory/summary.md",
                                     "results/tiny-study/study/a/seed0/summary.json"],
                      fetched=["resources/tiny-study/models/hub"], models=["resources/tiny-study/models/sft",
                                                                             "resources/tiny/models/prorl"],
                      manifests=["resources/tiny-study/models/hub.manifest.json"])
    assert got == {"results/tiny-study/study": ["results/tiny-study/study/summary.md",
                                                "results/tiny-study/study/a/seed0/summary.json"],
                   "resources/tiny-study/models/hub": ["resources/tiny-study/models/hub.manifest.json"],
                   "resources/tiny-study/models/sft": ["resources/tiny-study/models/sft"],
                   "resources/tiny-study/models/hub.manifest.json": ["resources/tiny-study/models/hub.manifest.json"]}
