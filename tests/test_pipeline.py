"""End to end: the real Snakemake DAG (CI profile), its MLflow runs, the report, and DVC on a fresh clone.

The project tree is copied into a temporary git repository, so the test never writes into the checkout
and uses its own DVC remote and MLflow store.
"""

import contextlib
import hashlib
import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
import yaml

from brorl.config import PROJECT_ROOT
from brorl.tracking import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG

pytestmark = pytest.mark.slow

CI_CONFIG = "tests/configs/ci_run.yaml"  # written by the fixture: ci.yaml + a stand-in hub
REPO_ID = "nvidia/Nemotron-Research-Reasoning-Qwen-1.5B"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
RULE_RUNS = ("theory_simulation", "theory_figure3", "theory_extended_sweep", "fetch_checkpoint",
             "paper_data_blend", "tiny_tasks", "sft", "difficulty", "prorl_stage", "train_arm", "train_summary",
             "evaluate", "throughput_study", "study_pool", "study_start", "study_arm", "study_summary",
             *(f"paper_{name}" for name in ("table1", "table2", "table3", "table4", "table5", "ttest",
                                                        "figure1", "figure3", "figure4", "passk")))
# sft + prorl; arms n4, n16, schedule x 1 seed; (prorl + 3 arms) x (tiny_add, tiny_multiple)
# study: base n4, n16 + four ablations at n16 + paper_comparison n4, n16 + the factorial's other two cells +
# paper_comparison_x2 n4, n16 (tests/configs/ci.yaml)
RUNS_PER_RULE = {"difficulty": 2, "train_arm": 3, "evaluate": 8, "study_arm": 12}
GIT = ["git", "-c", "user.name=brorl-test", "-c", "user.email=test@example.invalid"]


def sh(cmd, cwd, timeout=600, check=True):
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "MLFLOW_DISABLE_TELEMETRY": "true"}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def copy_project(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=PROJECT_ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = PROJECT_ROOT / rel
        if rel.startswith(("results/", "resources/")) or not src.is_file():
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(src.read_bytes())


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipeline")
    work, remote = root / "work", root / "remote"
    copy_project(work)
    # A local folder stands in for the Hugging Face Hub snapshot of the paper's starting checkpoint.
    from brorl.data.hub import write_local_snapshot

    hub = root / "hub"
    files = {"config.json": b'{"model_type": "qwen2"}', "model.safetensors": bytes(range(256)) * 64,
             "tokenizer/tokenizer.json": b"{}"}
    write_local_snapshot(hub, REPO_ID, "main", COMMIT, files)
    cfg = yaml.safe_load((work / "tests/configs/ci.yaml").read_text())
    cfg["checkpoints"] = {"source": str(hub), "fetch": {"prorl_hub": {"kind": "hub", "repo_id": REPO_ID, "revision": "main"}}}
    (work / CI_CONFIG).write_text(yaml.safe_dump(cfg))
    sh(["git", "init", "-q"], work)
    sh(GIT + ["add", "-A"], work)
    sh(GIT + ["commit", "-qm", "test copy"], work)
    sh(["dvc", "remote", "modify", "--local", "local", "url", str(remote)], work)
    run = sh(["snakemake", "--cores", "2", "--configfile", CI_CONFIG], work, timeout=2400)  # the whole toy DAG
    return {"root": root, "work": work, "remote": remote, "hub": hub, "files": files,
            "log": run.stdout + run.stderr}


def test_outputs_and_csv_contract(project):
    theory = project["work"] / "results/ci/theory"
    for name in ("simulation.csv", "figure3.png", "summary.md", "summary.csv",
                 "extended_sweep.csv", "extended_sweep.md", "extended_sweep.png"):
        assert (theory / name).stat().st_size > 0, name
    frame = pd.read_csv(theory / "simulation.csv")
    assert list(frame.columns) == ["n_rollouts", "seed", "step", "q_pos", "frac_correct_improved",
                                   "worst_correct_delta"]
    assert sorted(frame["n_rollouts"].unique()) == [4, 64, 4096]
    assert len(frame) == 3 * 2 * 61
    assert frame["frac_correct_improved"].between(0, 1).all()
    summary = (theory / "summary.md").read_text()
    for n in ("| 4 |", "| 64 |", "| 4,096 |"):
        assert n in summary
    assert "smallest N" in (theory / "extended_sweep.md").read_text()


def test_mlflow_has_one_tagged_run_per_rule(project):
    import mlflow

    work = project["work"]
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{work / 'mlflow.db'}")
    exp = client.get_experiment_by_name("brorl-ci")
    runs = client.search_runs([exp.experiment_id])
    by_rule = {r.data.tags["rule"]: r for r in runs}
    assert set(by_rule) == set(RULE_RUNS)
    assert len(runs) == sum(RUNS_PER_RULE.get(rule, 1) for rule in RULE_RUNS)
    fetch = by_rule["fetch_checkpoint"]
    assert fetch.data.tags["commit"] == COMMIT and json.loads(fetch.data.tags["wildcards"]) == {"name": "prorl_hub"}
    assert fetch.data.params["resolved.commit"] == COMMIT and fetch.data.metrics["n_files"] == 3
    head = sh(["git", "rev-parse", "HEAD"], work).stdout.strip()
    for run in runs:
        tags = run.data.tags
        assert tags["profile"] == "ci"
        assert tags["git_commit"].startswith(head)
        assert len(tags["config_hash"]) == 16
        assert run.info.status == "FINISHED"
    sim = by_rule["theory_simulation"]
    history = client.get_metric_history(sim.info.run_id, "q_pos/n4096")
    assert [m.step for m in history] == list(range(61))
    assert sim.data.params["vocab_size"] == "4000"
    fig = by_rule["theory_figure3"]
    artifacts = {a.path for a in client.list_artifacts(fig.info.run_id)}
    assert {"figure3.png", "summary.md", "summary.csv", "config.json"} <= artifacts
    frame = pd.read_csv(work / "results/ci/theory/summary.csv").set_index("n_rollouts")
    assert fig.data.metrics["q_pos_at_60/n64"] == pytest.approx(frame.loc[64, "q_pos@60"])


def test_rerun_has_nothing_to_do_and_lint_is_clean(project):
    dry = sh(["snakemake", "-n", "--configfile", CI_CONFIG], project["work"])
    assert "Nothing to be done" in dry.stdout + dry.stderr
    lint = sh(["snakemake", "--lint", "--configfile", CI_CONFIG], project["work"], check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "Lints for" not in lint.stdout + lint.stderr


def test_report_has_theory_category(project):
    sh(["snakemake", "--report", "report.html", "--configfile", CI_CONFIG], project["work"])
    html = (project["work"] / "report.html").read_text(errors="replace")
    assert "Theory" in html and "Data" in html
    assert "figure3.png" in html and "BroRL Figure 3" in html


def _digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_fetched_checkpoint_has_manifest_and_is_verified_on_rerun(project):
    work = project["work"]
    model = work / "resources/ci/models/prorl_hub"
    manifest = json.loads((work / "resources/ci/models/prorl_hub.manifest.json").read_text())
    assert manifest["commit"] == COMMIT and manifest["repo_id"] == REPO_ID
    assert {f["path"]: f["sha256"] for f in manifest["files"]} == {
        rel: hashlib.sha256(data).hexdigest() for rel, data in project["files"].items()}
    assert sorted(_digest(model)) == sorted(project["files"])
    cfg = json.dumps({"repo_id": REPO_ID, "revision": "main", "source": str(project["hub"])})
    cmd = ["brorl", "fetch-model", "--rule", "fetch_checkpoint", "--profile", "ci", "--config", cfg,
           "--tracking", json.dumps({"experiment": "brorl-ci-refetch"}), "--dest", str(model),
           "--manifest", str(work / "resources/ci/models/prorl_hub.manifest.json")]
    assert "verified" in sh(cmd, work).stdout
    # A damaged file stops the fetch, names the file, and the folder is left as it is (never repaired).
    target = model / "model.safetensors"
    good = target.read_bytes()
    target.write_bytes(good[:100])
    try:
        proc = sh(cmd, work, check=False)
        assert proc.returncode != 0
        assert "model.safetensors" in proc.stdout + proc.stderr and "sha256" in proc.stdout + proc.stderr
        assert target.read_bytes() == good[:100]
    finally:
        target.write_bytes(good)


def test_tiny_data_model_and_difficulty(project):
    work = project["work"]
    for task in ("add", "multiple"):
        for split in ("train", "validation", "test"):
            assert (work / f"results/ci/data/{task}/{split}.jsonl").stat().st_size > 0
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(work / "resources/ci/models/sft")
    tokenizer = AutoTokenizer.from_pretrained(work / "resources/ci/models/sft")
    assert model.config.model_type == "llama" and tokenizer.eos_token
    frame = pd.read_csv(work / "results/ci/data/difficulty_sft.csv")
    assert {"id", "task", "pass_rate", "q_pos_exact"} <= set(frame.columns)
    assert len(frame) == 24 + 8  # every validation prompt of the CI profile
    assert frame["pass_rate"].between(0, 1).all()
    assert (work / "results/ci/data/difficulty_sft.png").stat().st_size > 10_000


def test_data_blend_manifest(project):
    frame = pd.read_csv(project["work"] / "results/ci/data/paper_data_blend.csv")
    train = frame[frame.role == "train"]
    assert train["size_paper"].sum() == 136_000  # ProRL v1's blend [paper]
    assert "DeepScaleR" in " ".join(train["repo_id"].dropna())


def test_dvc_pull_on_a_fresh_clone_restores_outputs(project):
    work, root = project["work"], project["root"]
    assert (work / "results/ci/theory.dvc").exists()
    assert any(project["remote"].rglob("*")), "nothing was pushed to the DVC remote"
    dvc_files = [str(p.relative_to(work)) for p in work.rglob("*.dvc") if p.is_file()]
    assert {"results/ci/theory.dvc", "results/ci/data.dvc", "resources/ci/models/prorl_hub.dvc",
            "resources/ci/models/sft.dvc", "resources/ci/models/prorl.dvc", "results/ci/train.dvc",
            "resources/ci/checkpoints.dvc", "results/ci/eval.dvc", "results/ci/tables.dvc", "results/ci/figures.dvc",
            "results/ci/study.dvc", "resources/ci/study.dvc"} <= set(dvc_files)
    sh(GIT + ["add", *dvc_files, "results/ci/.gitignore", "resources/ci/models/.gitignore"], work)
    sh(GIT + ["commit", "-qm", "track outputs"], work)
    clone = root / "clone"
    sh(["git", "clone", "-q", str(work), str(clone)], root)
    assert not (clone / "results/ci/theory/simulation.csv").exists()
    sh(["dvc", "remote", "modify", "--local", "local", "url", str(project["remote"])], clone)
    sh(["brorl", "pull", "--configfile", CI_CONFIG], clone)
    for folder in ("results/ci/theory", "results/ci/data", "resources/ci/models/prorl_hub", "resources/ci/models/sft",
                   "resources/ci/models/prorl", "results/ci/train", "resources/ci/checkpoints/n4/seed0", "results/ci/study",
                   "resources/ci/study"):
        assert _digest(clone / folder) == _digest(work / folder), folder
    dry = sh(["snakemake", "-n", "--configfile", CI_CONFIG], clone)
    assert "Nothing to be done" in dry.stdout + dry.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def mlflow_ui(work: Path):
    """`mlflow ui` on the project's store (as `make mlflow-ui` starts it); yields (port, the brorl-ci experiment)."""
    port = _free_port()
    proc = subprocess.Popen(["mlflow", "ui", "--backend-store-uri", "sqlite:///mlflow.db", "--host",
                             "127.0.0.1", "--port", str(port)], cwd=work,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/get-by-name?experiment_name=brorl-ci"
        deadline = time.time() + 300  # a hang guard: the server starts in seconds on a quiet machine
        body = None
        while time.time() < deadline:
            try:
                body = json.loads(urllib.request.urlopen(url, timeout=5).read())
                break
            except OSError:
                time.sleep(1)
        assert body is not None, "mlflow ui did not answer within 300 s"
        yield port, body["experiment"]
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=120)  # its workers linger ~15 s on a quiet machine


def test_mlflow_ui_serves_the_runs(project):
    with mlflow_ui(project["work"]) as (port, experiment):
        assert {"key": EXPERIMENT_KIND_TAG, "value": EXPERIMENT_KIND} in experiment["tags"]  # a training experiment
        req = urllib.request.Request(f"http://127.0.0.1:{port}/api/2.0/mlflow/runs/search",
                                     data=json.dumps({"experiment_ids": [experiment["experiment_id"]]}).encode(),
                                     headers={"Content-Type": "application/json"})
        runs = json.loads(urllib.request.urlopen(req, timeout=120).read())["runs"]  # a hang guard, not a speed limit
        assert len(runs) == sum(RUNS_PER_RULE.get(rule, 1) for rule in RULE_RUNS)


def browse_the_runs(work: Path, shots: Path) -> list[Path]:
    """Issue 30, item 6, in a real headless Chromium: the link `make mlflow-ui` prints opens the runs table with
    every rule's runs; an arm's run shows its curves; a paper table cell's run id opens its run. Returns the
    screenshots (PNG) written under ``shots``."""
    from browser import Chromium

    from brorl.tracking import ui_links

    saved = []
    with mlflow_ui(work) as (port, experiment), Chromium(shots / "chromium-profile") as browser:
        base = f"http://127.0.0.1:{port}"
        links = ui_links(f"sqlite:///{work / 'mlflow.db'}", base)
        assert "brorl-ci" in links, links  # (an earlier test adds brorl-ci-refetch to the same store)
        text = browser.open(links["brorl-ci"], until=list(RULE_RUNS))  # the runs table: every rule's runs
        assert "Traces\n0" not in text and "No data available" not in text  # not the GenAI overview
        saved.append(browser.screenshot(shots / "1_runs_table.png"))

        exp_id = experiment["experiment_id"]
        arm_run = (work / "results/ci/train/n4/seed0/mlflow_run_id").read_text().strip()
        import mlflow

        client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{work / 'mlflow.db'}")
        curves = sorted(k for k in client.get_run(arm_run).data.metrics
                        if len(client.get_metric_history(arm_run, k)) > 1)
        assert curves, "the arm's run has no per-step curves"
        browser.viewport(1600, 8000)  # every chart section drawn (they render as they scroll into view)
        text = browser.open(f"{base}/#/experiments/{exp_id}/runs/{arm_run}/model-metrics?workflowType=machine_learning",
                            until=["train_arm/arm=n4/seed=0", "Step", *curves[:3]])
        shown = [c for c in curves if c in text]
        assert len(shown) >= max(3, len(curves) // 2), (shown, curves)
        saved.append(browser.screenshot(shots / "2_arm_curves.png"))
        browser.viewport(1600, 2000)

        cells = pd.read_csv(work / "results/ci/tables/table3_cells.csv")
        run_id = next(r for ids in cells["run_ids"].dropna() for r in str(ids).replace(";", " ").split() if r)
        name = client.get_run(run_id).info.run_name
        text = browser.open(f"{base}/#/experiments/{exp_id}/runs/{run_id}?workflowType=machine_learning",
                            until=[run_id, name, "Metrics"])
        saved.append(browser.screenshot(shots / "3_table_cell_run.png"))
    return saved


def test_mlflow_ui_in_a_real_browser_opens_on_the_runs(project):
    from browser import find_chromium

    if find_chromium() is None:
        pytest.skip("chromium is not installed here (apt-get install -y chromium); .ci/run installs it, so CI runs this")
    shots = project["root"] / "screenshots"
    saved = browse_the_runs(project["work"], shots)
    for png in saved:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000, png
    print(f"screenshots of the MLflow UI: {shots}")


def test_training_stage_arms_and_summary(project):
    import pandas as pd

    work = project["work"]
    prorl = json.loads((work / "results/ci/train/prorl/summary.json").read_text())
    assert prorl["stopped"] in (["plateau"], ["max_steps"]) and 1 <= prorl["steps"] <= 3
    assert (work / "resources/ci/models/prorl/config.json").exists()
    for arm in ("n4", "n16", "schedule"):
        folder = work / f"results/ci/train/{arm}/seed0"
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["generated_samples"] >= 32  # at least one step ...
        assert summary["sample_budget"] <= 256      # ... within the equal budget
        rows = pd.read_csv(folder / "metrics.csv")
        assert rows["arm_generated_samples"].is_monotonic_increasing
        assert (work / f"resources/ci/checkpoints/{arm}/seed0/model.safetensors").exists()
    sched = pd.read_csv(work / "results/ci/train/schedule/seed0/metrics.csv")
    assert sorted(sched["stage_n_rollouts"].unique()) == [4, 16]
    md = (work / "results/ci/train/summary.md").read_text()
    assert "ProRL stalls" in md and "pass rate rises with N" in md and "| n16 |" in md
    assert (work / "results/ci/data/difficulty_prorl.csv").exists()


def test_evaluation_and_paper_tables_trace_to_their_runs(project):
    """Every (model, benchmark) has its lm-eval JSON; a table cell shows exactly the evaluate run's value and
    names that run; the report has the "Paper tables" category."""
    import mlflow

    work = project["work"]
    models = ["prorl", "n4-seed0", "n16-seed0", "schedule-seed0"]
    for model in models:
        for bench, size in (("tiny_add", 16), ("tiny_multiple", 8)):
            record = json.loads((work / f"results/ci/eval/{model}/{bench}.json").read_text())
            assert record["k"] == 4 and len(record["samples"]) == size
            assert all(len(x["correct"]) == 4 for x in record["samples"])
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{work / 'mlflow.db'}")
    exp = client.get_experiment_by_name("brorl-ci")
    run = client.search_runs([exp.experiment_id], filter_string="tags.rule = 'evaluate' and "
                             "tags.`wildcard.model` = 'n16-seed0' and tags.`wildcard.benchmark` = 'tiny_add'")[0]
    record = json.loads((work / "results/ci/eval/n16-seed0/tiny_add.json").read_text())
    assert run.data.metrics["mean_at_k"] == pytest.approx(record["metrics"]["mean_at_k"])
    cells = pd.read_csv(work / "results/ci/tables/table3_cells.csv")
    cell = cells[(cells.source != "paper") & (cells.column == "tiny_add") & cells.row.str.contains("n16")].iloc[0]
    assert cell["value"] == pytest.approx(100 * record["metrics"]["mean_at_k"])
    assert run.info.run_id in cell["run_ids"]
    for name in ("table1", "table2", "table3", "table4", "table5", "ttest"):
        md = (work / f"results/ci/tables/{name}.md").read_text()
        assert "| paper |" in md and "ours (ci)" in md, name
    assert "not in the ci profile" in (work / "results/ci/tables/table5.md").read_text()
    for name in ("figure1", "figure3", "figure4", "passk"):
        assert (work / f"results/ci/figures/{name}.png").stat().st_size > 10_000
    frame = pd.read_csv(work / "results/ci/tables/throughput.csv")
    assert sorted(zip(frame.n_rollouts, frame.engine)) == sorted((n, e) for n in (4, 16) for e in ("prefix_tree", "hf"))
    assert (frame.samples == 64).all() and (frame.samples_per_s > 0).all()
    assert "1.98x" in (work / "results/ci/tables/throughput.md").read_text()
    sh(["snakemake", "--report", "report-tables.html", "--configfile", CI_CONFIG], work)
    assert "Paper tables" in (work / "report-tables.html").read_text(errors="replace")


def test_study_summary_names_its_runs_and_every_axis_ran(project):
    """The N-scaling study's toy run: every setting has a verdict row whose run ids are study_arm runs of that
    setting; the equal-time arm stopped on its clock, the fresh pool is larger than the fixed one, the later
    start continued the ProRL checkpoint, and the report has the "Study" category."""
    import mlflow

    work = project["work"]
    frame = pd.read_csv(work / "results/ci/study/summary.csv", keep_default_na=False)  # reused_from: "" or a setting
    assert sorted(set(frame.setting)) == ["base", "equal_time", "factorial_8s", "factorial_s", "fewer_prompts", "fresh",
                                          "late_start", "paper_comparison", "paper_comparison_x2"]
    md = (work / "results/ci/study/summary.md").read_text()
    for setting in set(frame.setting):
        assert f"| {setting} | 16 |" in md
    # issue 16: the paper comparison's arms are the factorial's (4, S) and (16, 8S) cells, run once under the name
    # of whichever comes first in the config (the fixture's yaml.safe_dump sorts the ablations: the factorial's)
    owner = {(r.setting, r.n): r.reused_from or r.setting for r in frame.itertuples()}
    assert owner[("paper_comparison", 4)] == owner[("factorial_s", 4)] == "factorial_s"
    assert owner[("paper_comparison", 16)] == owner[("factorial_8s", 16)] == "factorial_8s"
    pc16 = json.loads((work / "results/ci/study/factorial_8s/n16/seed0/summary.json").read_text())
    assert pc16["prompts_per_step"] == [16] and pc16["steps"] == 1 and pc16["generated_samples"] == 256
    for section in ("## BroRL's comparison", "## The 2x2 factorial", "| interaction |", "## The compute budget",
                    "| paper_comparison | 2x | 512 |", "## The premise", "Not resolved or not testable:",
                    "| claim | what was compared | Δ | seed-level p | prompt-level p | reading |"):
        assert section in md, section
    assert (work / "results/ci/study/budget.png").exists() and (work / "results/ci/study/saturation.png").exists()
    assert any(f"**{v}**" in md for v in ("won", "lost", "tied", "not testable")) and "settings, lost in" in md
    seeds = pd.read_csv(work / "results/ci/study/seeds.csv")  # per-seed values, the unit of every test
    assert len(seeds) == sum(len(r.runs.split()) for r in frame.itertuples())
    verdicts = pd.read_csv(work / "results/ci/study/verdicts.csv")
    assert set(frame.setting) <= set(verdicts.comparison)
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{work / 'mlflow.db'}")
    for row in frame.itertuples():
        for run_id in row.runs.split():
            run = client.get_run(run_id)
            assert run.data.tags["rule"] == "study_arm"
            assert json.loads(run.data.tags["wildcards"])["setting"] == (row.reused_from or row.setting)
            assert "heldout/all/mean_at_k" in run.data.metrics
    timed = json.loads((work / "results/ci/study/equal_time/n16/seed0/summary.json").read_text())
    assert timed["stopped"] == ["time_budget"] and timed["sample_budget"] == 0
    assert timed["steps"] == 1  # stopped on its clock at the first step's end, far below its step cap
    fewer = json.loads((work / "results/ci/study/fewer_prompts/n16/seed0/summary.json").read_text())
    assert fewer["prompts_per_step"] == [2] and fewer["generated_samples"] == 128 and fewer["steps"] == 4
    fixed = sum(1 for _ in open(work / "results/ci/data/add/train.jsonl"))
    fresh = sum(1 for _ in open(work / "results/ci/study/data_fresh/add/train.jsonl"))
    assert (fixed, fresh) == (64, 256)
    assert (work / "results/ci/study/data_fresh/add/test.jsonl").read_text() == (
        work / "results/ci/data/add/test.jsonl").read_text()
    late = json.loads((work / "results/ci/study/prorl_late/summary.json").read_text())
    assert late["steps"] == 2 and late["stage_summaries"][0]["init_model_dir"].endswith("resources/ci/models/prorl")
    held = json.loads((work / "results/ci/study/base/n16/seed0/heldout.json").read_text())
    assert held["all"]["prompts"] == 16 + 8 and 0 <= held["all"]["pass@1"] <= held["all"]["pass@256"] <= 1
    sh(["snakemake", "--report", "report-study.html", "--configfile", CI_CONFIG], work)
    assert "Study" in (work / "report-study.html").read_text(errors="replace")


def _pids_running(*words: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if proc.name.isdigit() and "python" in cmd[0] and all(w in cmd for w in words):
            pids.append(int(proc.name))
    return pids


def test_sigkilled_training_job_resumes_on_the_same_snakemake_command(project):
    """SIGKILL the n4 arm's training process mid-stage: Snakemake fails the job; the same command again resumes
    from the stage's last checkpoint (resources/work survives) and ends with the steps, and the rollouts, of
    the uninterrupted run. Runs last: it retrains one arm in the shared project."""
    import mlflow

    work = project["work"]
    results = work / "results/ci/train/n4/seed0"
    reference = pd.read_csv(results / "metrics.csv")
    assert len(reference) >= 4
    for path in (results, work / "resources/ci/checkpoints/n4/seed0", work / "resources/ci/work/n4/seed0"):
        subprocess.run(["rm", "-rf", str(path)], check=True)
    cmd = ["snakemake", "resources/ci/checkpoints/n4/seed0", "--cores", "1", "--configfile", CI_CONFIG]
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "MLFLOW_DISABLE_TELEMETRY": "true"}
    env.pop("MLFLOW_TRACKING_URI", None)
    snake = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed = []
    deadline = time.time() + 1200  # a hang guard, not a speed limit
    while time.time() < deadline and snake.poll() is None and not killed:
        done = [int(p.name.split("-")[-1]) for p in (work / "resources/ci/work/n4/seed0").glob("stage0-n4-*/checkpoints/"
                "checkpoint-*") if (p / "brorl_checkpoint.json").exists()]
        if done and max(done) >= 2:
            for pid in _pids_running("train-arm", "--arm", "n4"):
                os.kill(pid, 9)
                killed.append(pid)
        time.sleep(0.02)
    out = snake.communicate(timeout=120)[0]
    assert killed, f"the training process was not caught mid-stage:\n{out[-3000:]}"
    assert snake.returncode != 0, out[-3000:]
    assert not (results / "summary.json").exists()

    rerun = sh(cmd, work)
    log = rerun.stdout + rerun.stderr
    assert "resuming from" in (work / "logs/ci/train/n4/seed0.log").read_text(), log[-3000:]
    resumed = pd.read_csv(results / "metrics.csv")
    assert list(resumed["arm_step"]) == list(reference["arm_step"])
    for col in ("reward_mean", "kept_prompts", "generated_samples"):
        assert resumed[col].tolist() == pytest.approx(reference[col].tolist()), col
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{work / 'mlflow.db'}")
    exp = client.get_experiment_by_name("brorl-ci")
    runs = [r for r in client.search_runs([exp.experiment_id], filter_string="tags.rule = 'train_arm'")
            if json.loads(r.data.tags["wildcards"]) == {"arm": "n4", "seed": "0"}]
    assert sorted(r.info.status for r in runs) == ["FINISHED", "FINISHED", "KILLED"]
