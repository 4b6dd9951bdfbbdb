"""``results/train/summary.md``: every arm over its seeds, and a plain reading of the paper's claims.

Validation pass@1 here is exact: the mean over the validation prompts of Q_pos, the teacher-forced probability
of the correct answer (for a direct-answer task this *is* the expected pass@1 of one sample), so it carries no
sampling noise; what remains is the spread over seeds and over prompts, which the comparisons report.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from brorl.stats import MIN_SEEDS, describe, fmt_p, one_sample, seed_level, verdict as seed_verdict, welch
from brorl.profile import report, sources
from brorl.training.arms import Arm, arm_from_stages, arm_plan
from brorl.atomic import frame_to_csv, save_figure, write_text

FIELDS = ("arm", "seed", "n_rollouts", "prompts_per_step", "steps", "generated_samples", "sample_budget",
          "kept_samples", "validation_pass1_start", "validation_pass1_end", "tail_prompts", "q_pos_tail_start",
          "q_pos_tail_end", "zero_fraction_end", "multi_frac_correct_improved", "multi_worst_correct_delta",
          "dynamic_sampling_pass_rate", "generation_samples_per_s", "wall_time_s", "peak_rss_mb", "run_id")
ALPHA = 0.05


def load_arms(results_dir: str | Path, rl: dict | None = None) -> dict[str, list[dict]]:
    """``{arm: [summary + per-prompt arrays per seed]}`` from ``<results_dir>/<arm>/seed<s>/``.

    ``rl`` (the config's ``rl`` section): the arms of :func:`brorl.training.arms.arm_plan` and the seeds of
    ``rl.arms.seeds``, batch arms by N then the others (:attr:`Arm.order`), each folder required; None: every ``<arm>/seed<s>`` folder found."""
    if rl is not None:
        seeds = (rl.get("arms") or {}).get("seeds")
        paths = []
        for arm in (a.name for a in sorted(arm_plan(rl).values(), key=lambda a: a.order)):
            found = ([Path(results_dir) / arm / f"seed{s}" / "summary.json" for s in seeds] if seeds is not None
                     else sorted(Path(results_dir).glob(f"{arm}/seed*/summary.json")))
            missing = [str(p) for p in found if not p.is_file()]
            if missing or not found:
                raise FileNotFoundError(f"arm {arm!r} of rl.arms has no summary: "
                                        f"{', '.join(missing) or f'{results_dir}/{arm}/seed<s>/summary.json'}")
            paths += found
    else:
        paths = sorted(Path(results_dir).glob("*/seed*/summary.json"))
    arms: dict[str, list[dict]] = {}
    for path in paths:
        arm = path.parent.parent.name
        summary = json.loads(path.read_text())
        z = np.load(path.parent / "probe.npz")
        summary["q_start"], summary["q_end"], summary["_dir"] = z["q_start"], z["q_end"], str(path.parent)
        run = path.parent / "mlflow_run_id"
        summary["run_id"] = run.read_text().strip() if run.exists() else ""
        arms.setdefault(arm, []).append(summary)
    if rl is not None:  # already in Arm.order
        return {a: sorted(v, key=lambda s: s["seed"]) for a, v in arms.items()}
    return {a: sorted(v, key=lambda s: s["seed"])
            for a, v in sorted(arms.items(), key=lambda kv: arm_from_stages(kv[0], kv[1][0]["n_rollouts"]).order)}


def _ms(values, fmt="{:.4f}") -> str:
    v = np.array([x for x in values if x is not None and not (isinstance(x, float) and math.isnan(x))], float)
    if v.size == 0:
        return "–"
    if v.size == 1:
        return fmt.format(v[0])
    return f"{fmt.format(v.mean())} ± {fmt.format(v.std(ddof=1))}"


def paired(a: np.ndarray, b: np.ndarray) -> dict:
    """Paired t-test over prompts of a - b: mean difference, t, one-tailed p (a > b) and two-tailed p."""
    from scipy import stats

    d = a - b
    if d.size < 2 or np.allclose(d, d[0]):
        return {"delta": float(d.mean()) if d.size else math.nan, "t": math.nan, "p_greater": math.nan,
                "p_two_sided": math.nan, "prompts": int(d.size)}
    t, p2 = stats.ttest_rel(a, b)
    p1 = stats.ttest_rel(a, b, alternative="greater").pvalue
    return {"delta": float(d.mean()), "t": float(t), "p_greater": float(p1), "p_two_sided": float(p2),
            "prompts": int(d.size)}


WORDS = ("yes", "no (the opposite)", "not resolved (within noise)", "not testable")


def _verdict(test: dict, steps: int | None = None) -> str:
    """From a seed-level test (:mod:`brorl.stats`; one-sided for "yes"): fewer than 3 seeds or arms of one step are
    "not testable", never "yes"."""
    if steps is not None and steps < 2:
        return "not testable"
    return seed_verdict(test, WORDS, one_sided=True)


def _min_steps(*groups) -> int:
    return int(min(r["steps"] for g in groups for r in g))


def _seed_deltas(arm: list[dict], base: list[dict]) -> list[float]:
    by_seed = {s["seed"]: s["validation_pass1_end"] for s in base}
    return [s["validation_pass1_end"] - by_seed[s["seed"]] for s in arm if s["seed"] in by_seed]


def _monotone(xs: list[float]) -> bool:
    return all(b > a for a, b in zip(xs, xs[1:]))


def _rising(means: list[float], largest: list[float], smallest: list[float], steps: int) -> str:
    """' — **yes** ...' only when the means rise strictly and the largest N beats the smallest at the seed level
    (Welch over per-seed values, one-sided); fewer than 3 seeds or one step: not testable."""
    seeds = min(len(largest), len(smallest))
    if seeds < MIN_SEEDS or steps < 2:
        return (f" — **not testable** ({seeds} seed(s), {steps} step(s): a reading needs >= {MIN_SEEDS} seeds and "
                ">= 2 steps).")
    test = welch(largest, smallest)
    if _monotone(means) and seed_verdict(test, WORDS, one_sided=True) == "yes":
        return f" — **yes**, strictly rising (largest vs smallest N: seed-level {describe(test)})."
    return (f" — **{'rising in the means, not resolved at the seed level' if _monotone(means) else 'not strictly rising'}**"
            f" (largest vs smallest N: seed-level {describe(test)}).")


def training_summary(results_dir, md_path, csv_path, png_path, prorl_dir=None, rl: dict | None = None,
                     source: str = "tasks") -> dict:
    """Write the summary markdown, the per-arm-and-seed CSV and the figure; return the computed readings.

    ``rl``: the config's ``rl`` section; given, the arms are :func:`brorl.training.arms.arm_plan`'s objects (names,
    kinds, N; folders of other arms are ignored); None: the arms are the result folders, each known by the N of
    its stages as its summary records them (:func:`brorl.training.arms.arm_from_stages`). ``source``: the declared
    data source kind (profile.data): whether the arms' validation pass@1 is exact."""
    import pandas as pd

    results_dir = Path(results_dir)
    arms = {a: v for a, v in load_arms(results_dir, rl).items() if a != "prorl"}
    plan: dict[str, Arm] = (arm_plan(rl) if rl is not None else
                            {a: arm_from_stages(a, runs[0]["n_rollouts"]) for a, runs in arms.items()})
    if not arms:
        raise FileNotFoundError(f"no arm summaries under {results_dir}/<arm>/seed<s>/summary.json")
    prorl = None
    if prorl_dir and (Path(prorl_dir) / "summary.json").exists():
        prorl = json.loads((Path(prorl_dir) / "summary.json").read_text())
    frame = pd.DataFrame([{k: (s.get(k) if not isinstance(s.get(k), list) else "→".join(map(str, s[k])))
                           for k in FIELDS} for v in arms.values() for s in v])
    Path(csv_path).parent.mkdir(parents=True, exist_ok=True)
    frame_to_csv(frame, csv_path, index=False)

    lines = ["# Training arms", ""]
    lines += ["Validation pass@1 is exact (mean teacher-forced Q_pos over the validation prompts of the "
              "single-answer family), so differences are not sampling noise; ± is the standard deviation over "
              "seeds. The hard tail: prompts with Q_pos in (1/512, 1/16) at the arm's start. Samples are "
              "generated samples before dynamic-sampling filtering (BroRL Table 1's count). '–': not measured "
              "(the exact validation and tail columns exist for the tiny tasks only).", ""]
    if prorl:
        lines += ["## ProRL stage (N=16 until validation stops improving)", ""]
        s = prorl["stage_summaries"][0]["settings"] if "stage_summaries" in prorl else prorl["settings"]
        rule = (f"stop once the best of the last {s['plateau_window']} probes (every {s['probe_every']} steps) "
                f"is not above the best before them by more than {s['plateau_delta']}") if s.get(
                    "plateau_window") else "no plateau rule"
        stopped = prorl["stopped"][0] if isinstance(prorl["stopped"], list) else prorl["stopped"]
        lines += [f"- Plateau rule: {rule}; stopped by: **{stopped}** after {prorl['steps']} steps "
                  f"({prorl['generated_samples']} samples, {prorl['wall_time_s']:.0f} s).",
                  f"- Validation pass@1 {prorl['validation_pass1_start']:.4f} → {prorl['validation_pass1_end']:.4f}; "
                  f"hard-tail Q_pos {prorl['q_pos_tail_start']:.4f} → {prorl['q_pos_tail_end']:.4f} "
                  f"({prorl['tail_prompts']} tail prompts); share at Q_pos ≤ 1/512 at the end "
                  f"{prorl['zero_fraction_end']:.3f}; dynamic-sampling pass rate {prorl['dynamic_sampling_pass_rate']:.3f}.",
                  ""]

    lines += ["## Arms from the ProRL checkpoint", "",
              "| arm | N × prompts/step | seeds | steps | samples | val pass@1 start | val pass@1 end | "
              "tail Q_pos end | at ≤1/512 | multi: correct ↑ | multi: worst Δ | DS pass rate | gen samples/s | "
              "wall s | peak RSS MiB |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm, runs in arms.items():
        geo = " → ".join(f"{n}×{p}" for n, p in zip(runs[0]["n_rollouts"], runs[0]["prompts_per_step"]))
        lines.append(
            f"| {arm} | {geo} | {len(runs)} | {_ms([r['steps'] for r in runs], '{:.0f}')} | "
            f"{_ms([r['generated_samples'] for r in runs], '{:.0f}')} | "
            f"{_ms([r['validation_pass1_start'] for r in runs])} | **{_ms([r['validation_pass1_end'] for r in runs])}** | "
            f"{_ms([r['q_pos_tail_end'] for r in runs])} | {_ms([r['zero_fraction_end'] for r in runs], '{:.3f}')} | "
            f"{_ms([r['multi_frac_correct_improved'] for r in runs], '{:.3f}')} | "
            f"{_ms([r['multi_worst_correct_delta'] for r in runs], '{:.3g}')} | "
            f"{_ms([r['dynamic_sampling_pass_rate'] for r in runs], '{:.3f}')} | "
            f"{_ms([r['generation_samples_per_s'] for r in runs], '{:.0f}')} | "
            f"{_ms([r['wall_time_s'] for r in runs], '{:.0f}')} | {_ms([r['peak_rss_mb'] for r in runs], '{:.0f}')} |")
    lines.append("")

    metrics: dict = {}
    readings: list[str] = []
    n_arms = [a for a in arms if plan[a].n is not None]
    base_name = n_arms[0] if n_arms else None  # the smallest N: the ProRL continuation (n16 in the paper)
    base = arms.get(base_name) if base_name else None
    exact = sources()[source].exact_heldout  # the tiny tasks' validation pass@1 is exact; the paper data has none
    if base and not exact:
        readings.append(
            "- **Held-out score during training**: not measured by this profile's arms (no exact validation pass@1 "
            "for its data source), so the stall and the equal-samples comparison are not read here; the arms' "
            "held-out scores are the evaluation's mean@k in the paper tables.")
    if base and exact:
        q0 = np.mean([r["q_start"] for r in base], axis=0)
        q16 = np.mean([r["q_end"] for r in base], axis=0)
        cont = paired(q16, q0)
        deltas = [r["validation_pass1_end"] - r["validation_pass1_start"] for r in base]
        seed_cont = one_sample(deltas)
        metrics["continuation_gain"] = cont["delta"]
        stall = _verdict(seed_cont, _min_steps(base))
        readings.append(
            f"- **ProRL stalls** (continued {base_name} from the plateau checkpoint does not improve): continuation gain "
            f"{cont['delta']:+.4f} (per seed: {', '.join(f'{x:+.4f}' for x in deltas)}; seed-level {describe(seed_cont)}; "
            f"prompt-level, secondary: paired t = {cont['t']:.2f} over {cont['prompts']} prompts, two-sided p = "
            f"{cont['p_two_sided']:.3g}). "
            + ("It still improved significantly, so the tiny ProRL stage was **not** saturated for this budget."
               if stall == "yes" else "It got significantly worse." if stall == "no (the opposite)"
               else f"Not testable (fewer than {MIN_SEEDS} seeds or one step)." if stall == "not testable"
               else "No significant change: consistent with a stall."))
        lines += [f"## Each arm against the ProRL continuation {base_name} (equal generated samples)", "",
                  f"| arm | Δ val pass@1 vs {base_name} | per-seed Δ | seed-level p (arm > {base_name}) | seed-level test | "
                  f"prompt-level p (two-sided, secondary) | BroRL better? |", "|---|---|---|---|---|---|---|"]
        best, best_arm = -math.inf, None
        for arm, runs in arms.items():
            if arm == base_name:
                continue
            qa = np.mean([r["q_end"] for r in runs], axis=0)
            test = paired(qa, q16)
            sd = _seed_deltas(runs, base)
            seed = seed_level({r["seed"]: r["validation_pass1_end"] for r in runs},
                              {r["seed"]: r["validation_pass1_end"] for r in base})
            verdict = _verdict(seed, _min_steps(runs, base))
            metrics[f"delta_vs_base/{arm}"] = test["delta"]
            metrics[f"p_greater_vs_base/{arm}"] = seed["p_greater"]  # seed-level
            metrics[f"prompt_p_greater_vs_base/{arm}"] = test["p_greater"]
            lines.append(f"| {arm} | {test['delta']:+.4f} | {', '.join(f'{x:+.4f}' for x in sd)} | "
                         f"{fmt_p(seed['p_greater'])} | {describe(seed)} | {test['p_two_sided']:.3g} | {verdict} |")
            if plan[arm].n is not None and test["delta"] > best:
                best, best_arm, best_test, best_verdict = test["delta"], arm, seed, verdict
        lines.append("")
        if best_arm:
            readings.append(
                f"- **BroRL keeps improving at equal samples** (best larger-N arm beats {base_name}): best arm {best_arm}, "
                f"Δ = {best:+.4f}, seed-level one-tailed p = {fmt_p(best_test['p_greater'])} ({describe(best_test)}): "
                f"**{best_verdict}**.")
    ns = [(plan[a].n, runs) for a, runs in arms.items() if plan[a].n is not None]
    if len(ns) >= 2:
        rates = [float(np.mean([r["dynamic_sampling_pass_rate"] for r in runs])) for _, runs in ns]
        speeds = [float(np.mean([r["generation_samples_per_s"] for r in runs])) for _, runs in ns]
        nn = [n for n, _ in ns]
        for n, rate, speed in zip(nn, rates, speeds):
            metrics[f"pass_rate/n{n}"], metrics[f"gen_samples_per_s/n{n}"] = rate, speed
        first, last = ns[0][1], ns[-1][1]
        readings.append(
            f"- **Dynamic-sampling pass rate rises with N** (paper: 41% at N=16, 62% at N=512): "
            + ", ".join(f"N={n}: {r:.3f}" for n, r in zip(nn, rates))
            + _rising(rates, [r["dynamic_sampling_pass_rate"] for r in last],
                      [r["dynamic_sampling_pass_rate"] for r in first], _min_steps(*[g for _, g in ns])))
        ratio = speeds[-1] / speeds[0] if speeds[0] else math.nan
        readings.append(
            f"- **Generation throughput rises with N** (paper: 1.98× from N=16 to N=512): "
            + ", ".join(f"N={n}: {s:,.1f}/s" for n, s in zip(nn, speeds))
            + f"; N={nn[-1]} / N={nn[0]} = {ratio:.2f}×"
            + _rising(speeds, [r["generation_samples_per_s"] for r in last],
                      [r["generation_samples_per_s"] for r in first], _min_steps(*[g for _, g in ns])))
        metrics["gen_speed_ratio_max_over_min_n"] = ratio
    seeds = sorted({r["seed"] for runs in arms.values() for r in runs})
    lines += ["## Reading: does this run show the paper's claims?", "", *readings, "",
              f"Confidence: {len(seeds)} seed(s) per arm"
              + (f"; the seed is the unit of every test (per-seed exact pass@1: paired by seed, or Welch when the seeds "
                 f"differ; α = {ALPHA}; fewer than {MIN_SEEDS} seeds or one step: not testable); the test over "
                 "validation prompts is shown as a secondary column only" if exact else
                 "; the rates above are single measurements of the arms' steps, with no test")
              + ". The model here is not the paper's 1.5B reasoning model: a 'no' says the mechanism is not "
              "sufficient at this scale and budget, not that the paper is wrong.", ""]
    _figure(arms, prorl_dir, png_path, plan)
    lines += [f"![training curves]({Path(png_path).name})", ""]
    write_text(md_path, report("\n".join(lines)))
    return {"metrics": metrics, "readings": readings}


def run_train_summary(results_dir, md_path, csv_path, png_path, prorl_dir=None, rl=None, source: str = "tasks") -> dict:
    """``brorl train-summary``: :func:`training_summary`; its metrics and files logged to the rule's MLflow run."""
    import mlflow

    from brorl.tracking import log_artifacts, numeric_metrics

    out = training_summary(results_dir, md_path, csv_path, png_path, prorl_dir=prorl_dir, rl=rl, source=source)
    mlflow.log_metrics(numeric_metrics(out["metrics"]))
    log_artifacts(md_path, csv_path, png_path)
    print(f"[train-summary] wrote {md_path}")
    return out


def _figure(arms, prorl_dir, png_path, plan) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax = axes[0]
    if prorl_dir and (Path(prorl_dir) / "metrics.csv").exists():
        m = pd.read_csv(Path(prorl_dir) / "metrics.csv").dropna(subset=["probe_q_pos_mean"])
        ax.plot(m["arm_generated_samples"], m["probe_q_pos_mean"], "k.-")
    ax.set(title="ProRL stage (N=16): validation pass@1", xlabel="generated samples", ylabel="exact pass@1")
    ax = axes[1]
    for arm, runs in arms.items():
        frames = [pd.read_csv(Path(r["_dir"]) / "metrics.csv").dropna(subset=["probe_q_pos_mean"]) for r in runs]
        for k, m in enumerate(frames):
            ax.plot(m["arm_generated_samples"], m["probe_q_pos_mean"], ".-", color=f"C{list(arms).index(arm)}",
                    alpha=0.8, label=arm if k == 0 else None)
    ax.set(title="Arms at equal samples: validation pass@1", xlabel="generated samples", ylabel="exact pass@1")
    ax.legend(fontsize=8)
    ax = axes[2]
    ns = [(plan[a].n, runs) for a, runs in arms.items() if plan[a].n is not None]
    if ns:
        nn = [n for n, _ in ns]
        ax.plot(nn, [np.mean([r["dynamic_sampling_pass_rate"] for r in runs]) for _, runs in ns], "o-", color="C0")
        ax.set_xscale("log", base=2)
        ax.set(xlabel="N (rollouts per prompt)", title="pass rate and throughput vs N")
        ax.set_ylabel("dynamic-sampling pass rate", color="C0")
        ax2 = ax.twinx()
        ax2.plot(nn, [np.mean([r["generation_samples_per_s"] for r in runs]) for _, runs in ns], "s--", color="C1")
        ax2.set_ylabel("generation samples/s", color="C1")
    fig.tight_layout()
    save_figure(fig, png_path, dpi=110)
    plt.close(fig)
