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
from brorl.study.plan import BASE, arm_spec, is_tiny, reference_n, settings_names, study_plan
from brorl.training.report import paired

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
        run = seed_dir / "mlflow_run_id"
        s["run_id"] = run.read_text().strip() if run.exists() else ""
        out.append(s)
    return out


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
    elif test["p_two_sided"] < ALPHA and test["delta"] > 0 and all(x > 0 for x in seed_deltas):
        verdict = "won"
    elif test["p_two_sided"] < ALPHA and test["delta"] < 0 and all(x < 0 for x in seed_deltas):
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


def write_summary(rl: dict, study: dict, results_dir, md_path, csv_path, png_delta, png_base) -> dict:
    results = Path(results_dir)
    plan = study_plan(rl, study)
    arms = {(setting, n): load_arm(results / setting / f"n{n}")
            for setting in settings_names(study) for n in plan[setting] if plan[setting][n] == setting}
    missing = [f"{s}/n{n}" for (s, n), arm in arms.items() if not arm]
    if missing:
        raise FileNotFoundError(f"no finished seeds for study arms: {', '.join(missing)}")

    def arm_of(setting, n):
        return arms[(plan[setting][n], n)]

    ref_n = reference_n(study)
    rows, verdicts = [], {}
    for setting in settings_names(study):
        ns = sorted(plan[setting])
        ref_setting = setting if ref_n in plan[setting] else BASE
        ref = arm_of(ref_setting, ref_n)
        bigger = [n for n in ns if n > ref_n]
        best_n, judged = _select(bigger, lambda n: arm_of(setting, n))
        verdicts[setting] = {**compare(arm_of(setting, best_n), ref, judged), "best_n": best_n,
                             "judged": "all" if judged is None else "odd-indexed half",
                             "describe": _describe(setting, rl, study, best_n),
                             "describe_ref": _describe(ref_setting, rl, study, ref_n), "ref_n": ref_n,
                             "ref_setting": ref_setting}
        for n in ns:
            rows.append({**arm_row(setting, n, arm_of(setting, n)),
                         "reused_from": plan[setting][n] if plan[setting][n] != setting else ""})

    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS) + ["reused_from"])
        w.writeheader()
        w.writerows(rows)
    _figures(study, plan, arm_of, verdicts, png_delta, png_base)
    Path(md_path).write_text(_markdown(rl, study, plan, arm_of, rows, verdicts, png_delta, png_base))
    return verdicts


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


def _markdown(rl, study, plan, arm_of, rows, verdicts, png_delta, png_base) -> str:
    n_seeds = len(study["seeds"])
    ref_n = reference_n(study)
    start = arm_of(BASE, ref_n)[0]
    start_all = float(np.mean(start["p_start"]))
    counts = {v: sum(1 for x in verdicts.values() if x["verdict"] == v) for v in ("won", "lost", "tied")}
    ds_up = sum(1 for x in verdicts.values() if x["ds_best"] > x["ds_ref"])
    p256_up = sum(1 for x in verdicts.values() if x["delta_pass256"] > 0)
    zero_down = sum(1 for x in verdicts.values() if x["delta_zero_share"] < 0)
    probe_up = sum(1 for x in verdicts.values() if x["probe_best"] > x["probe_ref"])
    total = len(verdicts)
    estimate = start["heldout"].get("estimate", "exact")
    how = ("Held-out numbers are exact expectations from teacher-forced probabilities over the test split (all "
           "families), not samples (`brorl.study.heldout`)." if estimate == "exact" else
           f"Held-out p per prompt is estimated from completions scored by the training reward ({estimate}; "
           "pass@k: the unbiased estimator; `brorl.study.heldout`).")
    lines = [
        f"# The N-scaling study ({'tiny' if is_tiny(rl) else 'paper'} profile)", "",
        f"From the saturated ProRL checkpoint (held-out mean@k {start_all:.4f}), arms at equal generated samples "
        f"per step ({study['samples_per_step']:,}) and in total ({study['samples_per_step'] * study['steps']:,}, "
        f"{study['steps']} steps) unless a setting says otherwise; {n_seeds} seeds; one generation round per step "
        "(dynamic sampling filters, no refill). " + how, "",
        "## Verdict per setting", "",
        f"Best larger-N arm chosen on validation, compared with the N={ref_n} arm on held-out mean@k: Δ, a paired t-test "
        "over test prompts (per-prompt p averaged over seeds) and the seed-matched differences. "
        + ("" if all(v["judged"] == "all" for v in verdicts.values()) else
           "Without validation probes (paper profile) the best arm is chosen on the even-indexed held-out prompts "
           "and judged on the odd-indexed ones. ") +
        "won / lost: two-sided p < 0.05 and every seed agrees; otherwise tied.", "",
        "| setting | best N | Δ mean@k | t | p (two-sided) | per-seed Δ | verdict | Δ pass@256 | Δ zero share "
        f"| DS pass rate (best / N={ref_n}) | probes: correct answers up (best / N={ref_n}) | runs (best; N={ref_n}) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for setting, v in verdicts.items():
        sd = ", ".join(f"{x:+.4f}" for x in v["seed_deltas"])
        runs = (" ".join(s["run_id"][:8] for s in arm_of(setting, v["best_n"])) + "; "
                + " ".join(s["run_id"][:8] for s in arm_of(v["ref_setting"], ref_n)))
        lines.append(f"| {setting} | {v['best_n']} | {v['delta']:+.4f} | {v['t']:.2f} | {_p(v['p_two_sided'])} | "
                     f"{sd} | **{v['verdict']}** | {v['delta_pass256']:+.4f} | {v['delta_zero_share']:+.3f} | "
                     f"{v['ds_best']:.2f} / {v['ds_ref']:.2f} | {v['probe_best']:.2f} / {v['probe_ref']:.2f} | {runs} |")
    lines += ["", f"Settings (best larger-N arm; the N={ref_n} arm it is compared with):", ""]
    for setting, v in verdicts.items():
        lines.append(f"- **{setting}**: {v['describe']}; N={ref_n}: {v['describe_ref']}")
    lines += ["", "## What this says", "",
              f"Larger N **won in {counts['won']} of {total} settings, lost in {counts['lost']}, tied in "
              f"{counts['tied']}** (held-out mean@k, best larger-N arm vs N={ref_n}, at equal generated samples "
              "unless the setting says otherwise). " + _reading(verdicts, ref_n),
              "",
              f"Mechanisms the probes point to: the dynamic-sampling pass rate (share of prompts whose N samples "
              f"are not all equal, i.e. that carry a learning signal) is higher for the best larger-N arm in "
              f"{ds_up} of {total} settings; held-out pass@256 is higher in {p256_up} of {total}; the share of "
              f"test prompts at p <= 1/512 (the zero bin) is lower in {zero_down} of {total}; on the multi-answer "
              f"probes, the share of correct answers whose probability rose is higher in {probe_up} of {total}. "
              "Read together: " + _mechanism(ds_up, p256_up, zero_down, probe_up, total), "",
              f"![difference per setting]({Path(png_delta).name})", f"![base setting]({Path(png_base).name})", "",
              "## Every arm", "",
              "Means over seeds. val: exact validation pass@1 at the end; test: held-out mean@k, pass@k, share of "
              "test prompts in the zero bin; tail: exact Q_pos at the end on test prompts whose start p lay in "
              "(1/512, 1/16); probes: share of (prompt, correct answer) pairs of the multi-answer test prompts "
              "whose probability rose, and the worst drop. `reused`: the arm equals the base arm of that N.", "",
              "| setting | N | prompts/step | steps | samples | kept | wall s | DS pass | val | test mean@k | "
              "pass@16 | pass@256 | zero | tail | probes up | worst drop | runs |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        runs = f"reused ({r['reused_from']})" if r["reused_from"] else " ".join(x[:8] for x in r["runs"].split())
        lines.append(
            f"| {r['setting']} | {r['n']} | {r['prompts_per_step']} | {r['steps']:.1f} | {r['generated_samples']:,.0f} | "
            f"{r['kept_samples']:,.0f} | {r['wall_time_s']:.0f} | {r['dynamic_sampling_pass_rate']:.2f} | "
            f"{r['validation_pass1_end']:.4f} | {r['test_mean_at_k']:.4f} | {r['test_pass@16']:.4f} | "
            f"{r['test_pass@256']:.4f} | {r['test_zero_share']:.3f} | {r['tail_q_pos_end']:.4f} | "
            f"{r['probe_frac_correct_improved']:.2f} | {r['probe_worst_correct_delta']:+.4f} | {runs} |")
    lines += ["", "Run ids are MLflow run ids (first 8 characters; full ids in `summary.csv`), experiment of "
              "the profile's `tracking` section.", ""]
    return "\n".join(lines)


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
    fig.savefig(png_delta, dpi=120)
    plt.close(fig)

    ns = sorted(plan[BASE])
    ks = sorted(int(k[5:]) for k in arm_of(BASE, ns[0])[0]["heldout"]["all"] if k.startswith("pass@"))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    ref_n = reference_n(study)
    start = arm_of(BASE, ref_n)[0]["p_start"]
    for n in ns:
        arm = arm_of(BASE, n)
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
        arm = arm_of(BASE, n)
        a2.bar(x + (j + 1) * width, [np.mean([s["heldout"]["all"]["histogram"][b] for s in arm]) for b in labels],
               width, label=f"N={n}")
    a2.set_xticks(x + width * len(ns) / 2, labels, fontsize=7)
    a2.set_ylabel("share of test prompts")
    a2.set_title("per-prompt pass rate (exact)")
    a2.legend(fontsize=7)
    fig.suptitle("Base setting: equal generated samples per step and in total")
    fig.tight_layout()
    fig.savefig(png_base, dpi=120)
    plt.close(fig)
