"""Command line of the pipeline: one sub-command per Snakemake rule (rules stay thin).

    brorl validate-config config/config.yaml config/strong.yaml
    brorl memory-plan --configfile config/paper.yaml
    brorl theory-simulate  --config '<json>' --csv results/theory/simulation.csv ...
    brorl theory-figure3   --config '<json>' --csv ... --figure ... --summary-md ... --summary-csv ...
    brorl theory-sweep     --config '<json>' --csv ... --md ... --png ...
    brorl dvc-track results/theory [--push]
    brorl pull [--configfile config/config.yaml config/strong.yaml]
    brorl migrate-layout --configfile config/config.yaml [--dry-run]

Rule sub-commands take the config section they consume as JSON (``--config``), the rule's name and wildcards
for the run's tags, and what every rule shares: the MLflow settings (``--tracking``) and the declared profile
(``--profile``: the config's ``profile`` block as JSON, or a bare name; brorl.profile), which default to
``BRORL_TRACKING`` and ``BRORL_PROFILE`` (set once by workflow/rules/common.smk).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Callable, NamedTuple

from brorl.profile import Profile


class Command(NamedTuple):
    """One sub-command: ``call(args, target)`` maps its CLI arguments to one call of ``target`` ("module:function",
    the step's function beside its domain code, imported only when the command runs: `brorl --help` loads no
    torch or mlflow). ``run``: ``"rule"``: the rule arguments (:func:`_rule_args`), and the call inside the rule's
    MLflow run (:func:`_run`); ``"own"``: the rule arguments, and ``call`` opens the run itself; ``None``: neither."""
    help: str
    target: str
    call: Callable
    flags: tuple = ()
    run: str | None = "rule"
    setup: Callable | None = None


def cmd(help: str, target: str, call: Callable, *flags: tuple[str, dict], run: str | None = "rule", setup=None):
    return Command(help, target, call, flags, run, setup)


def req(*names: str, help: str | None = None) -> list[tuple[str, dict]]:
    """Required flags."""
    return [(name, {"required": True, "help": help}) for name in names]


def opt(name: str, **kwargs) -> tuple[str, dict]:
    """A flag or positional argument, with add_argument's keywords."""
    return name, kwargs


def _rule_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="JSON of the config section this rule consumes")
    p.add_argument("--tracking", default=os.environ.get("BRORL_TRACKING", "{}"),
                   help="JSON of the tracking config (MLflow store); default: BRORL_TRACKING")
    p.add_argument("--profile", type=Profile.parse, default=None,
                   help="the profile block as JSON, or a bare name; default: BRORL_PROFILE")
    p.add_argument("--rule", required=True, help="Snakemake rule name (MLflow tag)")
    p.add_argument("--wildcard", action="append", default=[], metavar="KEY=VALUE",
                   help="one of the rule's wildcards (MLflow tags); repeat for several")


def _profile(args) -> Profile:
    """The declared profile of a rule command (``--profile``, else ``BRORL_PROFILE``)."""
    return args.profile or Profile.parse()


def _config(args) -> dict:
    return json.loads(args.config)


def _run(args, params: dict | None = None, **wildcards):
    """The rule's MLflow run (brorl.tracking.rule_run); ``wildcards``: tags beside ``--wildcard``'s."""
    from brorl.tracking import rule_run

    profile = _profile(args)
    try:  # the root the rule's outputs belong to (brorl.layout): the tables read each group's root only
        root = profile.layout.run_root(args.rule)
    except KeyError:
        root = profile.layout.root
    return rule_run(args.rule, profile=profile.name, config=json.loads(args.config),
                    wildcards={**dict(w.split("=", 1) for w in args.wildcard), **wildcards},
                    tracking=json.loads(args.tracking), params=params, root=root)


def _arm_flags(arm: str, data: str | None, results: str) -> list[tuple[str, dict]]:
    return [*req("--arm", help=arm), opt("--seed", type=int, default=0), *req("--init", help="starting HF model folder"),
            *req("--data", help=data), *req("--work", help="stage work folder (checkpoints; kept when a job dies)"),
            *req("--model-out"), *req("--results", help=results)]


def _arm(a, f):
    """study-arm: its run is opened by the main process only (brorl.training.arms.run_arm)."""
    f(_config(a), a.init, a.data, a.work, a.model_out, a.results, arm=a.arm, seed=a.seed, source=_profile(a).data,
      open_run=lambda params: _run(a, params=params))


def _train_arm(a, f):
    """train-arm: the Arm built once from the rule's config slice (the ProRL stage or an arm of rl.arms), then run."""
    from brorl.training.arms import arm_plan

    arms = arm_plan(_config(a), prorl=True)
    if a.arm not in arms:
        raise SystemExit(f"--arm {a.arm}: no such arm in --config (its arms: {', '.join(arms) or 'none'})")
    f(arms[a.arm], a.init, a.data, a.work, a.model_out, a.results, seed=a.seed, source=_profile(a).data,
      open_run=lambda params: _run(a, params=params))


def _evaluate(a, f):
    """One process (imports and the MLflow store once), one MLflow run per (model, benchmark)."""
    for benchmark, data, out_json in a.benchmark:
        with _run(a, params={"model_dir": a.model}, benchmark=benchmark):
            f(_config(a), a.model, benchmark, data, out_json, cache_dir=a.cache)


def _train_data(a, f):
    from brorl.data.training import with_picked_tasks

    config = with_picked_tasks(_config(a), a.picked_tasks)  # before the run, which logs --config as given
    with _run(a):
        f(config, a.out, a.cache, pins_required=_profile(a).pins_required, exclude=a.exclude)


COMMANDS = {  # in `brorl --help` order
    "validate-config": cmd(
        "validate config files (a base and its overlays) against the schema",
        "brorl.pipeline:check_config_files", lambda a, f: f(a.files, each=a.each),
        opt("files", nargs="+", help="merged in order, as `snakemake --configfile FILE...` merges them"),
        opt("--each", action="store_true", help="check every file on its own instead"), run=None),
    "memory-plan": cmd(
        "per-GPU memory plan of every RL arm (rl.memory_plan; the config check refuses an arm that cannot fit)",
        "brorl.pipeline:run_memory_plan", lambda a, f: f(a.configfile),
        opt("--configfile", nargs="+", required=True, help="a base and its overlays, merged as snakemake merges them"),
        run=None),
    "theory-simulate": cmd(
        "BroRL Fig. 3 simulation -> simulation.csv",
        "brorl.theory.report:run_theory_simulate", lambda a, f: f(_config(a), a.csv), *req("--csv")),
    "theory-figure3": cmd(
        "figure3.png and summary from simulation.csv", "brorl.theory.report:run_theory_figure3",
        lambda a, f: f(_config(a), a.csv, a.figure, a.summary_md, a.summary_csv),
        *req("--csv", "--figure", "--summary-md", "--summary-csv")),
    "theory-sweep": cmd(
        "extended N sweep with Lemma 2 predictions", "brorl.theory.report:run_theory_sweep",
        lambda a, f: f(_config(a), a.csv, a.md, a.png), *req("--csv", "--md", "--png")),
    "fetch-model": cmd(
        "fetch or verify a pinned checkpoint (hub or local stand-in)", "brorl.data.hub:run_fetch_model",
        lambda a, f: f(_config(a), a.dest, a.manifest, pins_required=_profile(a).pins_required),
        *req("--dest", "--manifest")),
    "data-blend": cmd(
        "the paper's data-blend manifest as a table", "brorl.data.blend:run_data_blend",
        lambda a, f: f(a.csv, a.md), *req("--csv", "--md")),
    "tasks-generate": cmd(
        "the tiny task suite's train/validation/test splits", "brorl.tasks.core:run_tasks_generate",
        lambda a, f: f(a.out, _config(a)), *req("--out")),
    "sft": cmd(
        "tokenizer + tiny model + supervised warm start", "brorl.models.sft:run_sft",
        lambda a, f: f(_config(a), a.data, a.out), *req("--data", "--out")),
    "difficulty": cmd(
        "per-prompt pass rates of a checkpoint (+ histogram)", "brorl.models.difficulty:run_difficulty",
        lambda a, f: f(_config(a), a.model, a.data, a.csv, a.png, title=a.title),
        *req("--model", "--data", "--csv", "--png"), opt("--title", default="checkpoint")),
    "rg-difficulty": cmd(
        "pass rates of a model on Reasoning Gym tasks; the tasks in the band",
        "brorl.evaluation.rg_difficulty:run_rg_difficulty", lambda a, f: f(_config(a), a.model, a.csv, a.tasks_csv),
        *req("--model"), *req("--csv", help="one row per problem"),
        *req("--tasks-csv", help="one row per task, with the pick")),
    "train-arm": cmd(
        "an RL arm (or the ProRL stage) from a checkpoint; resumable", "brorl.training.arms:run_arm", _train_arm,
        *_arm_flags("prorl, n<N> or schedule", None, "folder for metrics.csv, probe.npz, summary.json"), run="own"),
    "study-arm": cmd(
        "an N-scaling study arm: stages from --config, then held-out metrics", "brorl.study.heldout:run_study_arm",
        _arm, *_arm_flags("<setting>-n<N> (a label)", "task data folder (train pool, validation, test)",
                          "folder for metrics.csv, summary.json, heldout.json"), run="own"),
    "study-tail-pool": cmd(
        "the study's hard-tail training pool: fresh prompts scored at the start, those in (1/512, 1/16) kept",
        "brorl.study.tail:run_study_tail_pool", lambda a, f: f(_config(a), a.model, a.exclude, a.out),
        *req("--model", help="the start checkpoint"), *req("--exclude", help="the fixed pool (its prompts are not candidates)"),
        *req("--out", help="results/study/data_tail")),
    "study-summary": cmd(
        "results/study/summary.md over every setting, N and seed", "brorl.study.report:run_study_summary",
        lambda a, f: f(_config(a), a.results, a.md, a.csv, a.png_delta, a.png_base, profile=_profile(a).name),
        *req("--results", help="results/study"), *req("--md", "--csv", "--png-delta", "--png-base")),
    "train-data": cmd(
        "the paper profile's RL training data (pinned fetch / generation, splits)",
        "brorl.data.training:run_train_data", _train_data,
        *req("--out", help="results/data/rl: <source>/{train,validation}.jsonl + train_data.json"),
        opt("--cache", default="resources/data/rl", help="raw snapshots and converted records"),
        opt("--picked-tasks", default=None, help="rg_difficulty's tasks table: train on its picked tasks"),
        opt("--exclude", nargs="*", default=[], help="the evaluation files of rl.data.dedup_against, in its order"),
        run="own"),
    "launch": cmd(
        "run a command on every GPU: accelerate launch (one node) or srun per node",
        "brorl.training.launch:main", lambda a, f: f(a), run=None,
        setup=lambda p: importlib.import_module("brorl.training.launch").add_arguments(p)),
    "gpu-slot": cmd(
        "run a command on GPUs of its own on one host (CUDA_VISIBLE_DEVICES from lock files; as is under SLURM)",
        "brorl.gpu_slots:main", lambda a, f: f(a), run=None,
        setup=lambda p: importlib.import_module("brorl.gpu_slots").add_arguments(p)),
    "train-summary": cmd(
        "results/train/summary.md over every arm and seed", "brorl.training.report:run_train_summary",
        lambda a, f: f(a.results, a.md, a.csv, a.png, prorl_dir=a.prorl, rl=_config(a), source=_profile(a).data),
        *req("--results", help="results/train"),
        opt("--prorl", default=None, help="results folder of the ProRL stage"), *req("--md", "--csv", "--png")),
    "evaluate": cmd(
        "one model on its benchmarks through lm-eval (cached by content hash)",
        "brorl.evaluation.runner:run_evaluate", _evaluate, *req("--model", help="HF model folder"),
        opt("--benchmark", required=True, action="append", nargs=3, metavar=("NAME", "DATA", "OUT"),
            help="a registered benchmark (brorl.evaluation.benchmarks), its data folder and its result "
                 "JSON (results/eval/<model>/<benchmark>.json); repeat for several, one MLflow run each"),
        opt("--cache", default=None, help="result cache folder (keyed by model and task hashes)"), run="own"),
    "throughput": cmd(
        "rollout samples/s per N and engine (BroRL Table 2 and beyond)", "brorl.training.throughput:run_throughput",
        lambda a, f: f(_config(a), a.model, a.csv, a.md, a.png, profile=_profile(a).name),
        *req("--model", "--csv", "--md", "--png")),
    "prepare-benchmark": cmd(
        "a paper benchmark as JSONL (pinned fetch or generation)", "brorl.data.benchmarks:run_prepare_benchmark",
        lambda a, f: f(_config(a), a.name, a.dest, a.picked_tasks, pins_required=_profile(a).pins_required),
        *req("--name", help="aime24, ..., gpqa_diamond, ifeval, reasoning_gym, apps, ..., taco"),
        *req("--dest", help="results/data/benchmarks/<name>/test.jsonl"),
        opt("--picked-tasks", default=None, help="rg_difficulty's tasks table: evaluate its picked tasks")),
    "paper-table": cmd(
        "a paper table or figure rebuilt from the MLflow runs", "brorl.tables:run_paper_table",
        lambda a, f: f(_config(a), a.name, tracking=json.loads(a.tracking), profile=_profile(a).name, csv=a.csv,
                       md=a.md, cells=a.cells, png=a.png, source=a.source),
        *req("--name", help="table1..table5, ttest, figure1, figure4, passk"),
        opt("--csv", default=None), opt("--md", default=None),
        opt("--cells", default=None, help="per-cell CSV: value, spread, gap reason, MLflow run ids"),
        opt("--png", default=None),
        opt("--source", default=None, help="figure3: the theory stage's figure to file with the tables")),
    "init-tracking": cmd(
        "create the MLflow store and experiment", "brorl.tracking:init_store",
        lambda a, f: print(f"[tracking] experiment id {f(json.loads(a.tracking))}"),
        opt("--tracking", default="{}"), run=None),
    "dvc-track": cmd(
        "dvc add (and push) output folders", "brorl.tracking:dvc_track", lambda a, f: f(a.paths, push=a.push),
        opt("paths", nargs="+"), opt("--push", action="store_true"), run=None),
    "root": cmd(
        "print the output root of a config (brorl.layout): its own, or with --group the root a stage group writes under",
        "brorl.tracking:run_root", lambda a, f: f(a.configfile, a.group),
        opt("--configfile", nargs="+", required=True, help="a base and its overlays, as for snakemake"),
        opt("--group", default=None, help="theory, start, arms or study"), run=None),
    "migrate-layout": cmd(
        "move a checkout's old-layout outputs (results/theory, ... at the top) under the roots of the config that "
        "wrote them (issue 32)", "brorl.tracking:run_migrate_layout", lambda a, f: f(a.configfile, dry_run=a.dry_run),
        opt("--configfile", nargs="+", required=True,
            help="the config the old outputs were made with: a base and its overlays, as for snakemake"),
        opt("--dry-run", action="store_true", help="print the moves only"), run=None),
    "pull": cmd(
        "dvc pull + snakemake --touch (restore outputs on a fresh clone)", "brorl.tracking:pull",
        lambda a, f: f(a.targets, a.configfile), opt("targets", nargs="*", help="DVC targets (default: everything)"),
        opt("--configfile", nargs="+", default=None,
            help="the profile the outputs were made with: a base and its overlays, as for snakemake "
                 "(give DVC targets before it)"), run=None),
}


def target(name: str) -> Callable:
    """The function command ``name`` calls (imported now)."""
    module, function = COMMANDS[name].target.split(":")
    return getattr(importlib.import_module(module), function)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="brorl", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, c in COMMANDS.items():
        p = sub.add_parser(name, help=c.help)
        if c.run is not None:
            _rule_args(p)
        for flag, kwargs in c.flags:
            p.add_argument(flag, **kwargs)
        if c.setup is not None:
            c.setup(p)
    args = parser.parse_args(argv)
    c, function = COMMANDS[args.command], target(args.command)
    if c.run != "rule":
        status = c.call(args, function)  # an exit status (validate-config, launch) or what the step returns
        return status if isinstance(status, int) else 0
    with _run(args):
        c.call(args, function)
    return 0


if __name__ == "__main__":
    sys.exit(main())
