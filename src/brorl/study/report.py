"""``results/study/summary.md``: for each setting, the best larger-N arm against the N=16 arm (the reference N:
the smallest N of the base setting).

The best larger-N arm of a setting is chosen on the *validation* split (highest mean exact validation pass@1
over seeds), then compared on the held-out *test* split, so the choice does not peek at the numbers it is
judged by. The paper profile has no validation probes: there the best arm is chosen on the even-indexed
held-out prompts and judged on the odd-indexed ones (:func:`_select`). The comparison is the held-out mean@k (exact: mean p over test prompts; see
:mod:`brorl.study.heldout`) with

- a paired t-test over test prompts (per-prompt p averaged over seeds, best arm minus N=16);
- the spread over seeds (seed-matched differences: mean, sd, how many are positive).

Verdict: **won** if the difference is positive with two-sided p < 0.05 and every seed agrees; **lost** if
negative under the same rule; **tied** otherwise.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from brorl.study.heldout import BINS
from brorl.study.plan import BASE, all_settings, budget_settings, arm_spec, family, reference_n, study_plan
from brorl.training.report import paired
from brorl.atomic import atomic_open, save_figure, write_text

ALPHA = 0.05
COLUMNS = ("setting", "n", "prompts_per_step", "seeds", "steps", "generated_samples", "kept_samples",
           "wall_time_s", "dynamic_sampling_pass_rate", "validation_pass1_end", "test_mean_at_k", "test_pass@16",
           "test_pass@256", "test_zero_share", "tail_q_pos_end", "probe_frac_correct_improved",
           "probe_worst_correct_delta", "runs")


def load_arm(folder: Path) -> list[dict]:
    """Every seed of one (setting, N) arm: summary, held-out metrics and per-prompt arrays."""
    out = []
    for seed_dir in sorted(folder.glob("seed*"), key=lambda p: int(p.name[4:])):
        if not (seed_dir / "heldout.json").exists():
            continue
        s = json.loads((seed_dir / "summary.json").read_text())
        s["heldout"] = json.loads((seed_dir / "heldout.json").read_text())
        z = np.load(seed_dir / "heldout.npz")
        s["p_end"], s["p_start"] = z["p_end"], z["p_start"]
        start = [(0.0, s["validation_pass1_start"])] if "validation_pass1_start" in s else []
        s["probe_curve"] = start + _probe_curve(seed_dir / "metrics.csv")
        run = seed_dir / "mlflow_run_id"
        s["run_id"] = run.read_text().strip() if run.exists() else ""
        out.append(s)
    return out


def _probe_curve(path: Path) -> list[tuple[float, float]]:
    """(generated samples so far, exact validation pass@1) at every probe of an arm (metrics.csv)."""
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return [(float(r["arm_generated_samples"]), float(r["probe_q_pos_mean"])) for r in csv.DictReader(f)
                if r.get("probe_q_pos_mean") not in (None, "")]


def _mean(arm, get):
    v = [get(s) for s in arm]
    v = [x for x in v if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return float(np.mean(v)) if v else math.nan


def arm_row(setting: str, n: int, arm: list[dict]) -> dict:
    h = lambda key: (lambda s: s["heldout"]["all"].get(key))  # noqa: E731
    return {"setting": setting, "n": n, "prompts_per_step": arm[0]["prompts_per_step"][0], "seeds": len(arm),
            "steps": _mean(arm, lambda s: s["steps"]), "generated_samples": _mean(arm, lambda s: s["generated_samples"]),
            "kept_samples": _mean(arm, lambda s: s["kept_samples"]), "wall_time_s": _mean(arm, lambda s: s["wall_time_s"]),
            "dynamic_sampling_pass_rate": _mean(arm, lambda s: s["dynamic_sampling_pass_rate"]),
            "validation_pass1_end": _mean(arm, lambda s: s["validation_pass1_end"]),
            "test_mean_at_k": _mean(arm, h("mean_at_k")), "test_pass@16": _mean(arm, h("pass@16")),
            "test_pass@256": _mean(arm, h("pass@256")),
            "test_zero_share": _mean(arm, lambda s: s["heldout"]["all"]["histogram"]["zero"]),
            "tail_q_pos_end": _mean(arm, lambda s: s["heldout"]["tail"]["q_pos_end"]),
            "probe_frac_correct_improved": _mean(arm, lambda s: s["heldout"]["probes"]["frac_correct_improved"]),
            "probe_worst_correct_delta": _mean(arm, lambda s: s["heldout"]["probes"]["worst_correct_delta"]),
            "runs": " ".join(s["run_id"] for s in arm)}


def compare(best: list[dict], ref: list[dict], judged: np.ndarray | None = None) -> dict:
    """Best larger-N arm vs N=16 on held-out mean@k: paired over prompts, spread over seeds. ``judged``: the
    held-out prompts the comparison uses (None: all)."""
    a = np.mean([s["p_end"] for s in best], axis=0)
    b = np.mean([s["p_end"] for s in ref], axis=0)
    mask = np.ones(a.size, bool) if judged is None else judged
    test = paired(a[mask], b[mask])
    ref_by_seed = {s["seed"]: s for s in ref}
    seed_deltas = [float(np.mean(s["p_end"][mask]) - np.mean(ref_by_seed[s["seed"]]["p_end"][mask]))
                   for s in best if s["seed"] in ref_by_seed]
    p256 = lambda arm: np.mean([s["heldout"]["all"]["pass@256"] for s in arm])  # noqa: E731
    zero = lambda arm: np.mean([s["heldout"]["all"]["histogram"]["zero"] for s in arm])  # noqa: E731
    if math.isnan(test["p_two_sided"]):
        verdict = "tied"
    elif test["p_two_sided"] < ALPHA and test["delta"] > 0 and seed_deltas and all(x > 0 for x in seed_deltas):
        verdict = "won"
    elif test["p_two_sided"] < ALPHA and test["delta"] < 0 and seed_deltas and all(x < 0 for x in seed_deltas):
        verdict = "lost"
    else:
        verdict = "tied"
    return {**test, "seed_deltas": seed_deltas, "verdict": verdict,
            "delta_pass256": float(p256(best) - p256(ref)), "delta_zero_share": float(zero(best) - zero(ref)),
            "ds_best": _mean(best, lambda s: s["dynamic_sampling_pass_rate"]),
            "ds_ref": _mean(ref, lambda s: s["dynamic_sampling_pass_rate"]),
            "probe_best": _mean(best, lambda s: s["heldout"]["probes"]["frac_correct_improved"]),
            "probe_ref": _mean(ref, lambda s: s["heldout"]["probes"]["frac_correct_improved"])}


def _describe(setting: str, rl: dict, study: dict, n: int) -> str:
    from brorl.training.settings import RLSettings
    from brorl.training.trainer import learning_rate

    spec = arm_spec(rl, study, setting, n)
    st = RLSettings.from_dict(spec["stage"])
    budget = f"{st.time_budget_s:.0f} s each" if st.time_budget_s else f"{st.sample_budget:,} samples each"
    return (f"{st.prompts_per_step} prompts x N={n}, lr {learning_rate(st):.2g} ({st.lr_rule}), KL beta {st.beta:g}, "
            f"start {spec['start']}, pool {spec['pool']}, {budget}")


def write_summary(rl: dict, study: dict, results_dir, md_path, csv_path, png_delta, png_base,
                  order: list[str] | None = None, profile: str | None = None) -> dict:
    """Every included setting's verdict, the factorial, the premise test and the budget trend; figures beside
    ``md_path``: ``budget.png`` (Δ against total samples) and ``saturation.png`` (continued N=16). ``order``: the
    settings in config order (which setting's arm is reused depends on it; JSON on the command line sorts keys).
    ``profile``: the profile's name, for the title."""
    if order:
        study = {**study, "ablations": {k: study["ablations"][k] for k in order if k in study.get("ablations", {})}}
    results = Path(results_dir)
    plan = study_plan(rl, study)
    owners = {(owner, n) for by_n in plan.values() for n, owner in by_n.items()}
    arms = {(owner, n): load_arm(results / owner / f"n{n}") for owner, n in owners}
    missing = [f"{s}/n{n}" for (s, n), arm in arms.items() if not arm]
    if missing:
        raise FileNotFoundError(f"no finished seeds for study arms: {', '.join(missing)}")

    def arm_of(setting, n):
        return arms[(plan[setting][n], n)]

    ref_n = reference_n(study)
    rows, verdicts = [], {}
    for setting in plan:
        ns = sorted(plan[setting])
        ref_setting = setting if ref_n in plan[setting] else BASE
        ref = arm_of(ref_setting, ref_n)
        bigger = [n for n in ns if n > ref_n]
        best_n, judged = _select(bigger, lambda n: arm_of(setting, n))
        best = arm_of(setting, best_n)
        verdicts[setting] = {**compare(best, ref, judged), "best_n": best_n,
                             "judged": "all" if judged is None else "odd-indexed half",
                             "describe": _describe(setting, rl, study, best_n),
                             "describe_ref": _describe(ref_setting, rl, study, ref_n), "ref_n": ref_n,
                             "ref_setting": ref_setting, "samples": _mean(ref, lambda s: s["generated_samples"]),
                             "wall_s": sum(_mean(arm_of(setting, n), lambda s: s["wall_time_s"]) * len(arm_of(setting, n))
                                           for n in ns),
                             "end_best": float(np.mean([s["p_end"].mean() for s in best])),
                             "end_ref": float(np.mean([s["p_end"].mean() for s in ref])),
                             "start": float(np.mean(ref[0]["p_start"])), "unequal": _per_step(best) != _per_step(ref)}
        for n in ns:
            rows.append({**arm_row(setting, n, arm_of(setting, n)),
                         "reused_from": plan[setting][n] if plan[setting][n] != setting else ""})

    with atomic_open(csv_path, newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS) + ["reused_from"])
        w.writeheader()
        w.writerows(rows)
    factorial = factorial_of(study, plan, arm_of)
    premise = premise_tests(rl, study, plan, arm_of)
    out = Path(md_path).parent
    _figures(study, plan, arm_of, verdicts, png_delta, png_base)
    _budget_figure(study, verdicts, out / "budget.png")
    _saturation_figure(premise, out / "saturation.png")
    write_text(md_path, _markdown(rl, study, plan, arm_of, rows, verdicts, png_delta, png_base, factorial, premise,
                                  profile))
    return verdicts


def run_study_summary(config: dict, results_dir, md_path, csv_path, png_delta, png_base, *,
                      profile: str | None = None) -> dict:
    """``brorl study-summary``: :func:`write_summary` from the config's ``rl``, ``study`` and ``order``; each
    setting's Δ and every file written (the figures beside ``md_path`` too) logged to the rule's MLflow run."""
    import mlflow

    from brorl.tracking import log_artifacts

    verdicts = write_summary(config["rl"], config["study"], results_dir, md_path, csv_path, png_delta, png_base,
                             order=config.get("order"), profile=profile)
    mlflow.log_metrics({f"delta/{k}": v["delta"] for k, v in verdicts.items()})
    beside = [str(Path(md_path).parent / name) for name in ("budget.png", "saturation.png")]
    log_artifacts(md_path, csv_path, png_delta, png_base, *beside)
    return verdicts


def effect(plus: list[list[dict]], minus: list[list[dict]], scale: float = 1.0) -> dict:
    """A contrast of arms on held-out p: scale x (sum of ``plus`` arms - sum of ``minus`` arms), per prompt
    (p averaged over seeds) with a one-sample t-test over prompts, and per seed (seeds present in every arm)."""
    def per_prompt(group):
        return sum(np.mean([s["p_end"] for s in arm], axis=0) for arm in group) * scale

    test = paired(per_prompt(plus), per_prompt(minus))
    seeds = sorted(set.intersection(*({s["seed"] for s in arm} for arm in plus + minus)))

    def at(group, seed):
        return sum(next(s for s in arm if s["seed"] == seed)["p_end"].mean() for arm in group) * scale

    return {**test, "seed_deltas": [float(at(plus, seed) - at(minus, seed)) for seed in seeds]}


def factorial_effects(cells: dict[tuple[int, int], list[dict]]) -> dict[str, dict]:
    """The 2x2 N x batch factorial from its cells ``{(N index, batch index): arm}`` (0: N=16 / batch S, 1: the
    larger N / 8S): the main effects of N and of batch (each averaged over the other factor) and the interaction
    (the N effect at 8S minus the N effect at S)."""
    c = cells
    return {"N": effect([c[1, 0], c[1, 1]], [c[0, 0], c[0, 1]], 0.5),
            "batch": effect([c[0, 1], c[1, 1]], [c[0, 0], c[1, 0]], 0.5),
            "interaction": effect([c[1, 1], c[0, 0]], [c[0, 1], c[1, 0]])}


def factorial_of(study: dict, plan: dict, arm_of) -> dict | None:
    names = study.get("factorial") or []
    if len(names) != 2 or not all(name in plan for name in names):
        return None
    ns = sorted(plan[names[0]])
    cells = {(i, j): arm_of(names[j], n) for i, n in enumerate(ns) for j in range(2)}
    return {"settings": names, "ns": ns, "cells": {k: float(np.mean([s["p_end"].mean() for s in v]))
                                                   for k, v in cells.items()},
            "runs": {k: [s["run_id"] for s in v] for k, v in cells.items()},
            "effects": factorial_effects(cells)}


def premise_tests(rl: dict, study: dict, plan: dict, arm_of) -> list[dict]:
    """BroRL's premise: continued N=16 no longer improves. For every distinct N=16 arm from the plateau start:
    held-out p at the end against the start, paired over prompts (averaged over seeds), with the per-seed gains;
    and its validation pass@1 curve against generated samples (the saturation curve)."""
    ref_n, out, seen = reference_n(study), [], set()
    for setting, by_n in plan.items():
        owner = by_n.get(ref_n)
        if owner is None or owner in seen or arm_spec(rl, study, setting, ref_n)["start"] != "plateau":
            continue
        seen.add(owner)
        arm = arm_of(setting, ref_n)
        test = paired(np.mean([s["p_end"] for s in arm], axis=0), np.mean([s["p_start"] for s in arm], axis=0))
        gains = [float(s["p_end"].mean() - s["p_start"].mean()) for s in arm]
        out.append({**test, "arm": owner, "seed_deltas": gains, "samples": _mean(arm, lambda s: s["generated_samples"]),
                    "start": float(np.mean(arm[0]["p_start"])), "end": float(np.mean([s["p_end"].mean() for s in arm])),
                    "significant_gain": test["delta"] > 0 and test["p_two_sided"] < ALPHA and all(g > 0 for g in gains),
                    "curves": [s["probe_curve"] for s in arm], "wall_s": _mean(arm, lambda s: s["wall_time_s"]),
                    "runs": [s["run_id"] for s in arm]})
    return sorted(out, key=lambda r: (r["samples"], max(map(len, r["curves"]), default=0)))  # last: longest curve


def _select(bigger: list[int], arm_of) -> tuple[int, np.ndarray | None]:
    """The best larger N and the held-out prompts it is judged on. By exact validation pass@1 (the training
    probes, tiny profile) on all held-out prompts; without validation numbers (the paper profile has no probes)
    and several candidates, by held-out mean@k on the even-indexed prompts, judged on the odd-indexed ones."""
    val = {n: _mean(arm_of(n), lambda s: s["validation_pass1_end"]) for n in bigger}
    if len(bigger) == 1:
        return bigger[0], None
    if not all(math.isnan(v) for v in val.values()):
        return max(bigger, key=lambda n: -math.inf if math.isnan(val[n]) else val[n]), None
    size = arm_of(bigger[0])[0]["p_end"].size
    even = np.arange(size) % 2 == 0
    best = max(bigger, key=lambda n: float(np.mean([s["p_end"][even].mean() for s in arm_of(n)])))
    return best, ~even


def _p(x: float) -> str:
    return "–" if x is None or math.isnan(x) else (f"{x:.1e}" if x < 1e-3 else f"{x:.3f}")


def _runs(arm_or_ids) -> str:
    ids = [s["run_id"] if isinstance(s, dict) else s for s in arm_or_ids]
    return " ".join(i[:8] for i in ids)


def _seeds(deltas) -> str:
    return ", ".join(f"{x:+.4f}" for x in deltas)


def _test_cells(v) -> str:
    return f"{v['delta']:+.4f} | {v['t']:.2f} | {_p(v['p_two_sided'])} | {_seeds(v['seed_deltas'])}"


def _markdown(rl, study, plan, arm_of, rows, verdicts, png_delta, png_base, factorial, premise, profile) -> str:
    n_seeds = len(study["seeds"])
    ref_n = reference_n(study)
    first = next(iter(plan))
    start = arm_of(first, min(plan[first]))[0]
    start_all = float(np.mean(start["p_start"]))
    estimate = start["heldout"].get("estimate", "exact")
    how = ("Held-out numbers are exact expectations from teacher-forced probabilities over the test split (all "
           "families), not samples (`brorl.study.heldout`)." if estimate == "exact" else
           f"Held-out p per prompt is estimated from completions scored by the training reward ({estimate}; "
           "pass@k: the unbiased estimator; `brorl.study.heldout`).")
    lines = [
        "# The N-scaling study" + (f" ({profile} profile)" if profile else ""), "",
        f"From the ProRL checkpoint (held-out mean@k {start_all:.4f}), N={ref_n} against larger N at equal generated "
        f"samples in total; {n_seeds} seeds configured; one generation round per step (dynamic sampling filters, no refill). "
        "Each setting's samples per step, steps and learning rate are listed under \"Verdict per setting\". " + how, "",
        _coverage(study, plan, verdicts) + _short_arms(study, plan, arm_of), "",
        "## Verdict", "", _claims(verdicts, factorial, premise, study, ref_n), ""]
    unequal = {s: v for s, v in verdicts.items() if v["unequal"]}
    if unequal:
        lines += ["## BroRL's comparison: larger N at a larger batch", "",
                  f"Settings whose larger-N arm has more samples per step than the N={ref_n} arm (BroRL Table 1: "
                  "N=512 x 128 prompts, 8x the samples per step, sqrt lr, against N=16 x 512 prompts, equal totals). "
                  "Δ: held-out mean@k, larger N minus N=16; t and p: paired over test prompts (p averaged over "
                  "seeds); per-seed Δ: seed-matched.", "",
                  f"| setting | N={ref_n} arm | larger-N arm | samples per arm | N={ref_n} end | larger N end | Δ | t | p | "
                  "per-seed Δ | verdict | wall s (all arms) | runs (larger N; N=16) |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for setting, v in unequal.items():
            lines.append(f"| {setting} | {v['describe_ref']} | {v['describe']} | {v['samples']:,.0f} | {v['end_ref']:.4f} | "
                         f"{v['end_best']:.4f} | {_test_cells(v)} | **{v['verdict']}** | {v['wall_s']:.0f} | "
                         f"{_runs(arm_of(setting, v['best_n']))}; {_runs(arm_of(v['ref_setting'], ref_n))} |")
        lines.append("")
    if factorial:
        lines += _factorial_md(factorial, ref_n)
    lines += _budget_md(study, verdicts, ref_n) + _premise_md(premise, ref_n)
    counts = {v: sum(1 for x in verdicts.values() if x["verdict"] == v) for v in ("won", "lost", "tied")}
    ds_up = sum(1 for x in verdicts.values() if x["ds_best"] > x["ds_ref"])
    p256_up = sum(1 for x in verdicts.values() if x["delta_pass256"] > 0)
    zero_down = sum(1 for x in verdicts.values() if x["delta_zero_share"] < 0)
    probe_up = sum(1 for x in verdicts.values() if x["probe_best"] > x["probe_ref"])
    total = len(verdicts)
    lines += [
        "## Verdict per setting", "",
        f"Best larger-N arm chosen on validation, compared with the N={ref_n} arm on held-out mean@k: Δ, a paired t-test "
        "over test prompts (per-prompt p averaged over seeds) and the seed-matched differences. "
        + ("" if all(v["judged"] == "all" for v in verdicts.values()) else
           "Without validation probes (paper profile) the best arm is chosen on the even-indexed held-out prompts "
           "and judged on the odd-indexed ones. ") +
        "won / lost: two-sided p < 0.05 and every seed agrees; otherwise tied. Wall s: training seconds of all "
        "the setting's arms and seeds (reused arms included).", "",
        "| setting | best N | Δ mean@k | t | p (two-sided) | per-seed Δ | verdict | Δ pass@256 | Δ zero share "
        f"| DS pass rate (best / N={ref_n}) | probes: correct answers up (best / N={ref_n}) | wall s | runs (best; N={ref_n}) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for setting, v in verdicts.items():
        lines.append(f"| {setting} | {v['best_n']} | {_test_cells(v)} | **{v['verdict']}** | {v['delta_pass256']:+.4f} | "
                     f"{v['delta_zero_share']:+.3f} | {v['ds_best']:.2f} / {v['ds_ref']:.2f} | "
                     f"{v['probe_best']:.2f} / {v['probe_ref']:.2f} | {v['wall_s']:.0f} | "
                     f"{_runs(arm_of(setting, v['best_n']))}; {_runs(arm_of(v['ref_setting'], ref_n))} |")
    lines += ["", f"Settings (best larger-N arm; the N={ref_n} arm it is compared with):", ""]
    for setting, v in verdicts.items():
        lines.append(f"- **{setting}**: {v['describe']}; N={ref_n}: {v['describe_ref']}")
    lines += ["", "## What this says", "",
              f"Larger N **won in {counts['won']} of {total} settings, lost in {counts['lost']}, tied in "
              f"{counts['tied']}** (held-out mean@k, best larger-N arm vs N={ref_n}, at equal generated samples "
              "in total). " + _reading(verdicts, ref_n),
              "",
              f"Mechanisms the probes point to: the dynamic-sampling pass rate (share of prompts whose N samples "
              f"are not all equal, i.e. that carry a learning signal) is higher for the best larger-N arm in "
              f"{ds_up} of {total} settings; held-out pass@256 is higher in {p256_up} of {total}; the share of "
              f"test prompts at p <= 1/512 (the zero bin) is lower in {zero_down} of {total}; on the multi-answer "
              f"probes, the share of correct answers whose probability rose is higher in {probe_up} of {total}. "
              "Read together: " + _mechanism(ds_up, p256_up, zero_down, probe_up, total), "",
              f"![difference per setting]({Path(png_delta).name})", f"![arms of {first}]({Path(png_base).name})", "",
              "## Every arm", "",
              "Means over seeds. val: exact validation pass@1 at the end; test: held-out mean@k, pass@k, share of "
              "test prompts in the zero bin; tail: exact Q_pos at the end on test prompts whose start p lay in "
              "(1/512, 1/16); probes: share of (prompt, correct answer) pairs of the multi-answer test prompts "
              "whose probability rose, and the worst drop. `reused (s)`: the arm is setting s's (same stage with "
              "the same resolved learning rate, start and pool), run once.", "",
              "| setting | N | prompts/step | steps | samples | kept | wall s | DS pass | val | test mean@k | "
              "pass@16 | pass@256 | zero | tail | probes up | worst drop | runs |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        runs = f"reused ({r['reused_from']})" if r["reused_from"] else _runs(r["runs"].split())
        lines.append(
            f"| {r['setting']} | {r['n']} | {r['prompts_per_step']} | {r['steps']:.1f} | {r['generated_samples']:,.0f} | "
            f"{r['kept_samples']:,.0f} | {r['wall_time_s']:.0f} | {r['dynamic_sampling_pass_rate']:.2f} | "
            f"{r['validation_pass1_end']:.4f} | {r['test_mean_at_k']:.4f} | {r['test_pass@16']:.4f} | "
            f"{r['test_pass@256']:.4f} | {r['test_zero_share']:.3f} | {r['tail_q_pos_end']:.4f} | "
            f"{r['probe_frac_correct_improved']:.2f} | {r['probe_worst_correct_delta']:+.4f} | {runs} |")
    lines += ["", "Run ids are MLflow run ids (first 8 characters; full ids in `summary.csv`), experiment of "
              "the profile's `tracking` section.", ""]
    return "\n".join(lines)


def _per_step(arm: list[dict]) -> int:
    s = arm[0]
    return s["prompts_per_step"][0] * s["n_rollouts"][0]


def _coverage(study, plan, verdicts) -> str:
    """Which settings this summary covers, and what the configured ones it does not cover would cost."""
    ran = list(plan)
    out = f"Settings in this summary: {', '.join(ran)}."
    rest = [s for s in all_settings(study) if s not in plan]
    if not rest:
        return out
    costs = []
    for s in rest:
        parent, m = budget_settings(study).get(s, (s, 1))
        if parent in verdicts and m > 1:
            costs.append(f"{s} (~{verdicts[parent]['wall_s'] * m / 60:.0f} arm-minutes of training: {m} x "
                         f"{parent}'s measured time over all its arms and seeds, about half that on 2 cores)")
        else:
            costs.append(s)
    return out + " Configured but not run here (`study.include`): " + "; ".join(costs) + "."


def _short_arms(study, plan, arm_of) -> str:
    """Arms with fewer finished seeds than configured (the summary reads the seeds that finished)."""
    want = len(study["seeds"])
    short = sorted({f"{owner}/n{n} ({len(arm_of(s, n))} of {want})" for s, by_n in plan.items()
                    for n, owner in by_n.items() if len(arm_of(s, n)) < want})
    return (" **Arms with fewer seeds than configured** (not finished in the time available; every test and "
            "per-seed list below uses the seeds that finished): " + ", ".join(short) + ".") if short else ""


def _factorial_md(f, ref_n) -> list[str]:
    small, large = f["settings"]
    n0, n1 = f["ns"]
    e = f["effects"]
    c = f["cells"]
    lines = ["## The 2x2 factorial: N x batch (learning rate by the sqrt rule)", "",
             f"Cells (held-out mean@k at the end, mean over seeds): rows N, columns batch ({small}: small, "
             f"{large}: 8x). Equal total samples in every cell.", "",
             f"| N | {small} | {large} |", "|---|---|---|",
             f"| {n0} | {c[0, 0]:.4f} ({_runs(f['runs'][0, 0])}) | {c[0, 1]:.4f} ({_runs(f['runs'][0, 1])}) |",
             f"| {n1} | {c[1, 0]:.4f} ({_runs(f['runs'][1, 0])}) | {c[1, 1]:.4f} ({_runs(f['runs'][1, 1])}) |", "",
             "Effects: N = mean over batch of (N=" + f"{n1} - N={n0}); batch = mean over N of (8x - 1x); interaction = "
             "(N effect at 8x) - (N effect at 1x). t and p: one-sample t-test over test prompts of the per-prompt "
             "contrast (p averaged over seeds); per-seed: the contrast on each seed's arms.", "",
             "| effect | estimate | t | p (two-sided) | per-seed |", "|---|---|---|---|---|"]
    lines += [f"| {k} | {_test_cells(v)} |" for k, v in e.items()]
    lines += ["", f"The larger-N-at-8x minus N={n0}-at-1x difference (BroRL's comparison) is exactly the sum of the "
              f"two main effects: {e['N']['delta']:+.4f} (N) {e['batch']['delta']:+.4f} (batch) = "
              f"{e['N']['delta'] + e['batch']['delta']:+.4f}.", ""]
    return lines


def _families(study, verdicts) -> dict[str, list[tuple[int, str]]]:
    """``{1x setting: [(multiple, setting), ...]}`` over the summarised settings."""
    fams: dict[str, list[tuple[int, str]]] = {}
    for s in verdicts:
        parent, m = family(study, s)
        fams.setdefault(parent, []).append((m, s))
    return {k: sorted(v) for k, v in fams.items()}


def _budget_points(study, verdicts) -> dict[str, list[tuple[int, str]]]:
    """The families with more than one budget."""
    return {k: v for k, v in _families(study, verdicts).items() if len(v) > 1}


def _budget_md(study, verdicts, ref_n) -> list[str]:
    fams = _budget_points(study, verdicts)
    if not fams:
        return []
    lines = ["## The compute budget", "",
             f"The same setting at m times its steps (equal totals within a budget). Δ: held-out mean@k, larger N "
             f"minus N={ref_n}.", "", "| setting | budget | samples per arm | Δ | t | p | per-seed Δ | verdict | wall s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for fam, pts in fams.items():
        for m, s in pts:
            v = verdicts[s]
            lines.append(f"| {fam} | {m}x | {v['samples']:,.0f} | {_test_cells(v)} | **{v['verdict']}** | {v['wall_s']:.0f} |")
    return lines + ["", "![Δ against total samples](budget.png)", ""]


def _premise_md(premise, ref_n) -> list[str]:
    if not premise:
        return []
    lines = ["## The premise: does continued N=16 still improve?", "",
             f"BroRL starts where continued N={ref_n} no longer improves. Every N={ref_n} arm from the ProRL "
             "checkpoint, end against start on held-out p (paired over test prompts, p averaged over seeds; "
             "per-seed gains).", "",
             "| arm | samples | start mean@k | end mean@k | gain | t | p | per-seed gain | significant gain | runs |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in premise:
        lines.append(f"| {r['arm']} | {r['samples']:,.0f} | {r['start']:.4f} | {r['end']:.4f} | {_test_cells(r)} | "
                     f"{'yes' if r['significant_gain'] else 'no'} | {_runs(r['runs'])} |")
    longest = premise[-1]
    lines += ["", "![continued N=16: validation pass@1 against samples](saturation.png)", "",
              _premise_sentence(premise, ref_n), ""]
    return lines


def late_gain(curves) -> float:
    """Validation pass@1 gained over the second half of the samples (mean over seeds): ~0 once saturated."""
    gains = []
    for c in filter(None, curves):
        x, y = np.array(c).T
        gains.append(float(y[-1] - y[np.argmin(np.abs(x - x[-1] / 2))]))
    return float(np.mean(gains)) if gains else math.nan


def _premise_sentence(premise, ref_n) -> str:
    longest = premise[-1]
    late = late_gain(longest["curves"])
    if any(r["significant_gain"] for r in premise):
        return (f"**Premise not met**: continued N={ref_n} still gains significantly from this start (up to "
                f"{longest['samples']:,.0f} samples per arm: {longest['start']:.4f} -> {longest['end']:.4f}, every seed). "
                "The comparisons above are therefore from a start that is still improving, not BroRL's saturated "
                f"start. Over the second half of {longest['arm']}'s samples its exact validation pass@1 moved by "
                f"{late:+.4f} (mean over seeds): " + ("the curve is still rising" if late > 0.005 else
                                                     "the curve is flattening") +
                f". That arm took {longest['wall_s'] / 60:.0f} min of training per seed here; the budget settings "
                "(`study.budgets`) extend it, at the cost stated at the top.")
    return (f"**Premise met**: no N={ref_n} arm gains significantly on every seed within {longest['samples']:,.0f} "
            "samples per arm.")


def _claims(verdicts, factorial, premise, study, ref_n) -> str:
    """The verdict paragraph: which of BroRL's claims the numbers support, contradict or cannot test."""
    supports, contradicts, untested = [], [], []
    if premise:
        if any(r["significant_gain"] for r in premise):
            untested.append(f"its premise does not hold here (continued N={ref_n} keeps improving: "
                            f"{premise[-1]['start']:.3f} -> {premise[-1]['end']:.3f} at {premise[-1]['samples']:,.0f} "
                            "samples), so the comparisons test BroRL's recipe on a model that has not saturated")
        else:
            supports.append(f"the premise (continued N={ref_n} has saturated) holds within the budgets run")
    for s, v in verdicts.items():
        if v["unequal"]:
            what = (f"{s} ({v['describe']} vs N={ref_n}: {v['describe_ref']}): Δ {v['delta']:+.4f}, p {_p(v['p_two_sided'])}, "
                    f"per-seed {_seeds(v['seed_deltas'])}")
            (supports if v["verdict"] == "won" else contradicts if v["verdict"] == "lost" else untested).append(
                ("larger N at a larger batch beats continued N=16 at equal samples: " if v["verdict"] != "tied"
                 else "the headline comparison is not resolved: ") + what)
    if factorial:
        e = factorial["effects"]
        n_eff = e["N"]
        sig = n_eff["p_two_sided"] < ALPHA and all(np.sign(x) == np.sign(n_eff["delta"]) for x in n_eff["seed_deltas"])
        text = (f"the gain is due to N (the factorial's N main effect {n_eff['delta']:+.4f}, p {_p(n_eff['p_two_sided'])}; "
                f"batch/lr main effect {e['batch']['delta']:+.4f}, p {_p(e['batch']['p_two_sided'])}; interaction "
                f"{e['interaction']['delta']:+.4f}, p {_p(e['interaction']['p_two_sided'])})")
        (supports if sig and n_eff["delta"] > 0 else contradicts if sig else untested).append(text)
    for fam, pts in _budget_points(study, verdicts).items():
        ds = [verdicts[s]["delta"] for _, s in pts]
        trend = "grows" if ds[-1] > ds[0] else "shrinks or stays"
        text = (f"larger N's advantage grows with the budget ({fam}: Δ {', '.join(f'{d:+.4f}' for d in ds)} at "
                f"{', '.join(f'{m}x' for m, _ in pts)}; last verdict {verdicts[pts[-1][1]]['verdict']})")
        (supports if trend == "grows" and verdicts[pts[-1][1]]["verdict"] == "won" else
         contradicts if trend != "grows" and verdicts[pts[-1][1]]["verdict"] == "lost" else untested).append(text)
    diverged = [s for s, v in verdicts.items() if v["unequal"] and "(sqrt)" in v["describe"] and v["end_best"] < v["start"]]
    if diverged:
        contradicts.append("the sqrt learning-rate rule carries over to the larger batch: the larger-N arm ended "
                           "below the start under " + ", ".join(diverged))
    untested.append("the paper's absolute numbers (a 1.5B model on math, code and reasoning benchmarks) and its "
                    "GPU throughput (Table 2): not at this scale")
    fmt = lambda xs: "; ".join(xs) if xs else "none"  # noqa: E731
    return (f"What was compared: N={ref_n} against larger N at equal total generated samples, at the settings' own "
            f"samples per step and learning rates (tables below). The tiny model **supports**: {fmt(supports)}. "
            f"It **contradicts**: {fmt(contradicts)}. It **cannot test / does not resolve**: {fmt(untested)}.")


def _reading(verdicts, ref_n) -> str:
    won = [s for s, v in verdicts.items() if v["verdict"] == "won"]
    lost = [s for s, v in verdicts.items() if v["verdict"] == "lost"]
    tied = [s for s, v in verdicts.items() if v["verdict"] == "tied"]
    parts = []
    if won:
        parts.append("It won under: " + ", ".join(won) + ".")
    if lost:
        parts.append("It lost under: " + ", ".join(lost) + ".")
    if tied:
        parts.append("No resolved difference under: " + ", ".join(tied) + ".")
    if not won:
        parts.append(f"BroRL's headline (larger N beats continued N={ref_n} from a saturated checkpoint) is **not** "
                     "reproduced by any setting at this scale.")
    return " ".join(parts)


def _mechanism(ds_up, p256_up, zero_down, probe_up, total) -> str:
    if ds_up == total and p256_up < total / 2:
        return ("larger N keeps more prompts in the update (the mechanism BroRL names), but that did not turn "
                "into broader coverage here: at equal samples it sees fewer distinct prompts, and pass@256 / the "
                "zero bin say its policy covers fewer test prompts, not more.")
    if ds_up == total and p256_up >= total / 2:
        return ("larger N keeps more prompts in the update and covers more test prompts (pass@256, zero bin), "
                "the signature BroRL's mass-balance argument predicts, even where mean@k does not follow.")
    return "the mechanism signals are mixed across settings; see the table."


def _figures(study, plan, arm_of, verdicts, png_delta, png_base) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(verdicts)
    fig, ax = plt.subplots(figsize=(1.2 * len(names) + 3, 3.8))
    colours = {"won": "tab:green", "lost": "tab:red", "tied": "tab:gray"}
    for i, s in enumerate(names):
        v = verdicts[s]
        ax.bar(i, v["delta"], color=colours[v["verdict"]], alpha=0.6)
        ax.scatter([i] * len(v["seed_deltas"]), v["seed_deltas"], color="k", s=12, zorder=3)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(range(len(names)), [f"{s}\n(N={verdicts[s]['best_n']})" for s in names], fontsize=8)
    ref_n = reference_n(study)
    ax.set_ylabel(f"Δ held-out mean@k vs N={ref_n}")
    ax.set_title(f"Best larger-N arm minus N={ref_n} (bars: seed mean; dots: seeds)")
    fig.tight_layout()
    save_figure(fig, png_delta, dpi=120)
    plt.close(fig)

    first = BASE if BASE in plan else next(iter(plan))
    ns = sorted(plan[first])
    ks = sorted(int(k[5:]) for k in arm_of(first, ns[0])[0]["heldout"]["all"] if k.startswith("pass@"))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    ref_n = reference_n(study)
    start = arm_of(first, ns[0])[0]["p_start"]
    for n in ns:
        arm = arm_of(first, n)
        a1.plot(ks, [np.mean([s["heldout"]["all"][f"pass@{k}"] for s in arm]) for k in ks], marker="o", label=f"N={n}")
    a1.plot(ks, [float(np.mean(1 - (1 - start) ** k)) for k in ks], "k--", label="start")
    a1.set_xscale("log", base=2)
    a1.set_xlabel("k")
    a1.set_ylabel("held-out pass@k (exact)")
    a1.legend(fontsize=8)
    width = 0.8 / (len(ns) + 1)
    labels = [b[0] for b in BINS]
    x = np.arange(len(labels))
    from brorl.study.heldout import histogram

    a2.bar(x, [histogram(start)[b] for b in labels], width, color="k", alpha=0.5, label="start")
    for j, n in enumerate(ns):
        arm = arm_of(first, n)
        a2.bar(x + (j + 1) * width, [np.mean([s["heldout"]["all"]["histogram"][b] for s in arm]) for b in labels],
               width, label=f"N={n}")
    a2.set_xticks(x + width * len(ns) / 2, labels, fontsize=7)
    a2.set_ylabel("share of test prompts")
    a2.set_title("per-prompt pass rate (exact)")
    a2.legend(fontsize=7)
    fig.suptitle(f"Setting {first}: its arms at the end")
    fig.tight_layout()
    save_figure(fig, png_base, dpi=120)
    plt.close(fig)


def _budget_figure(study, verdicts, path) -> None:
    """Held-out mean@k difference (larger N minus N=16) against total samples per arm, one line per setting
    (its budget multiples), band: the seeds' range."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for fam, pts in _families(study, verdicts).items():
        v = [verdicts[s] for _, s in pts]
        x = [r["samples"] for r in v]
        line, = ax.plot(x, [r["delta"] for r in v], marker="o", label=fam)
        ax.fill_between(x, [min(r["seed_deltas"] or [r["delta"]]) for r in v], [max(r["seed_deltas"] or [r["delta"]]) for r in v],
                        color=line.get_color(), alpha=0.15)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("generated samples per arm")
    ax.set_ylabel(f"Δ held-out mean@k (larger N - N={reference_n(study)})")
    ax.set_title("Larger N minus N=16 against the budget (band: seeds' range)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)


def _saturation_figure(premise, path) -> None:
    """Continued N=16 from the ProRL checkpoint: exact validation pass@1 against generated samples, each arm's
    seeds (thin) and, as points, held-out mean@k at the start and end."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.5, 4))
    for r in premise:
        colour = None
        for curve in r["curves"]:
            if curve:
                line, = ax.plot(*zip(*curve), lw=0.8, alpha=0.7, color=colour,
                                label=None if colour else f"{r['arm']} (validation pass@1)")
                colour = line.get_color()
        ax.scatter([r["samples"]], [r["end"]], marker="s", color=colour, zorder=3,
                   label=f"{r['arm']} (held-out mean@k at the end)")
    if premise:
        ax.axhline(premise[0]["start"], color="k", ls="--", lw=0.8, label="held-out start")
    ax.set_xlabel("generated samples (continued N=16)")
    ax.set_ylabel("pass@1 (exact)")
    ax.set_title("Does continued N=16 saturate?")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the curves, not over them
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)


MARKERS = ("<!-- study-verdict:start -->", "<!-- study-verdict:end -->")


def splice_verdict(summary_md, readme) -> None:
    """Copy the summary's generated verdict paragraph into ``readme`` between :data:`MARKERS` (make study-docs)."""
    text = Path(summary_md).read_text()
    verdict = text.split("## Verdict\n\n", 1)[1].split("\n\n", 1)[0]
    doc = Path(readme).read_text()
    if not all(m in doc for m in MARKERS):
        raise ValueError(f"{readme}: no {MARKERS[0]} ... {MARKERS[1]} block to write the verdict into")
    head, rest = doc.split(MARKERS[0], 1)
    write_text(readme, f"{head}{MARKERS[0]}\n{verdict}\n{MARKERS[1]}{rest.split(MARKERS[1], 1)[1]}")


if __name__ == "__main__":  # python -m brorl.study.report SUMMARY_MD README_MD
    import sys

    splice_verdict(*sys.argv[1:3])
