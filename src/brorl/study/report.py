"""``results/study/summary.md``: for each setting, the best larger-N arm against the N=16 arm (the reference N:
the smallest N of the base setting).

The best larger-N arm of a setting is chosen on the *validation* split (highest mean exact validation pass@1
over seeds), then compared on the held-out *test* split, so the choice does not peek at the numbers it is
judged by. The paper profile has no validation probes: there the best arm is chosen on the even-indexed
held-out prompts and judged on the odd-indexed ones (:func:`_select`). The comparison is the held-out mean@k (exact: mean p over test prompts; see
:mod:`brorl.study.heldout`) with

- a **seed-level** test, which decides (:mod:`brorl.stats`): the seed-matched differences of per-seed held-out
  means, t-tested against 0 (paired by seed, df = seeds - 1; Welch's test over per-seed means if the seeds differ);
- a paired t-test over test prompts (per-prompt p averaged over seeds), kept as a secondary column only: prompts of
  one run share its noise, so its p overstates certainty.

Verdict: **won** / **lost** if the seed-level two-sided p < 0.05 (by the sign of the difference), **tied**
otherwise, **not testable** with fewer than 3 seeds. Per-seed values: ``seeds.csv`` beside the summary; every
comparison with its tests: ``verdicts.csv``.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from brorl.study.heldout import BINS
from brorl.study.plan import BASE, all_settings, budget_settings, arm_spec, family, reference_n, study_plan
from brorl.stats import ALPHA, describe, fmt_p, one_sample, seed_level, verdict as seed_verdict
from brorl.training.report import paired
from brorl.atomic import atomic_open, save_figure, write_text
from brorl.profile import report

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
        s["task"] = z["task"] if "task" in z.files else np.full(s["p_end"].size, "")  # older files: no families
        if "p_train_end" in z.files:  # the tail pool's arms: the training prompts' own p (heldout.log_heldout)
            s["p_train_start"], s["p_train_end"] = z["p_train_start"], z["p_train_end"]
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
    """Best larger-N arm vs N=16 on held-out mean@k: the seed-level test (it decides the verdict) and, secondary,
    the paired test over prompts (``prompt``). ``judged``: the held-out prompts the comparison uses (None: all)."""
    a = np.mean([s["p_end"] for s in best], axis=0)
    b = np.mean([s["p_end"] for s in ref], axis=0)
    mask = np.ones(a.size, bool) if judged is None else judged
    prompt = paired(a[mask], b[mask])
    per_seed = lambda arm: {s["seed"]: float(np.mean(s["p_end"][mask])) for s in arm}  # noqa: E731
    seed = seed_level(per_seed(best), per_seed(ref))
    ref_by_seed = per_seed(ref)
    seed_deltas = [v - ref_by_seed[k] for k, v in per_seed(best).items() if k in ref_by_seed]
    p256 = lambda arm: np.mean([s["heldout"]["all"]["pass@256"] for s in arm])  # noqa: E731
    zero = lambda arm: np.mean([s["heldout"]["all"]["histogram"]["zero"] for s in arm])  # noqa: E731
    return {**seed, "delta": prompt["delta"] if seed["per_seed"] else seed["delta"], "prompt": prompt,
            "seed_deltas": seed_deltas, "verdict": seed_verdict(seed),
            "per_seed_best": per_seed(best), "per_seed_ref": ref_by_seed,
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
                             "start": float(np.mean(ref[0]["p_start"])), "unequal": _per_step(best) != _per_step(ref),
                             "short": f"N={best_n} x {best[0]['prompts_per_step'][0]} prompts vs N={ref_n} x "
                                      f"{ref[0]['prompts_per_step'][0]}, "
                                      f"{_mean(ref, lambda s: s['generated_samples']):,.0f} samples each"}
        for n in ns:
            rows.append({**arm_row(setting, n, arm_of(setting, n)),
                         "reused_from": plan[setting][n] if plan[setting][n] != setting else ""})

    with atomic_open(csv_path, newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS) + ["reused_from"])
        w.writeheader()
        w.writerows(rows)
    factorial = factorial_of(study, plan, arm_of)
    premise = premise_tests(rl, study, plan, arm_of)
    measured = premise_run(study, results)
    tail = tail_section(study, plan, arm_of, verdicts, results)
    earlier = earlier_section(study)
    out = Path(md_path).parent
    _seed_csv(plan, arm_of, out / "seeds.csv")
    _verdict_csv(verdicts, factorial, premise, out / "verdicts.csv", measured, tail)
    _figures(study, plan, arm_of, verdicts, png_delta, png_base)
    _budget_figure(study, verdicts, out / "budget.png")
    runs = measured["runs"] if measured else []
    _saturation_figure(premise + ([{"arm": "premise run (slope stop)", "curves": [r["probe_curve"] for r in runs],
                                    "samples": _mean(runs, lambda r: r["generated_samples"]),
                                    "end": _mean(runs, lambda r: float(r["p_end"].mean())),
                                    "start": float(runs[0]["p_start"].mean())}] if runs else []),
                       out / "saturation.png")
    md = _markdown(rl, study, plan, arm_of, rows, verdicts, png_delta, png_base, factorial, premise, profile,
                   measured=measured, tail=tail, earlier=earlier)
    write_text(md_path, report(f"{md}\n{run_stamp()}\n"))
    return verdicts


SEED_COLUMNS = ("setting", "n", "seed", "reused_from", "steps", "generated_samples", "kept_samples", "wall_time_s",
                "dynamic_sampling_pass_rate", "validation_pass1_end", "test_mean_at_k", "test_pass@16", "test_pass@256",
                "test_zero_share", "tail_q_pos_end", "run_id")


def _seed_csv(plan, arm_of, path) -> None:
    """One row per (setting, N, seed): the per-seed values every seed-level test uses (``seeds.csv``)."""
    rows = []
    for setting, by_n in plan.items():
        for n in sorted(by_n):
            for s in arm_of(setting, n):
                h = s["heldout"]["all"]
                rows.append({"setting": setting, "n": n, "seed": s["seed"],
                             "reused_from": by_n[n] if by_n[n] != setting else "", "steps": s.get("steps"),
                             "generated_samples": s.get("generated_samples"), "kept_samples": s.get("kept_samples"),
                             "wall_time_s": s.get("wall_time_s"),
                             "dynamic_sampling_pass_rate": s.get("dynamic_sampling_pass_rate"),
                             "validation_pass1_end": s.get("validation_pass1_end"),
                             "test_mean_at_k": float(np.mean(s["p_end"])), "test_pass@16": h.get("pass@16"),
                             "test_pass@256": h.get("pass@256"), "test_zero_share": h["histogram"]["zero"],
                             "tail_q_pos_end": s["heldout"].get("tail", {}).get("q_pos_end"), "run_id": s["run_id"]})
    with atomic_open(path, newline="") as f:
        w = csv.DictWriter(f, fieldnames=SEED_COLUMNS)
        w.writeheader()
        w.writerows(rows)


VERDICT_COLUMNS = ("comparison", "kind", "delta", "per_seed", "seeds", "seed_test", "seed_t", "seed_df", "seed_p",
                   "prompt_t", "prompt_p", "prompts", "verdict")


def _verdict_csv(verdicts, factorial, premise, path, measured=None, tail=None) -> None:
    """Every comparison with its seed-level test (it decides) and the prompt-level one (``verdicts.csv``): the
    measured premise run (``premise run: end - start``), the N=16 arms' premise tests, each setting on the full test
    set, on the tail pool's band and on its training pool, the factorial's effects."""
    def row(name, kind, t, verdict):
        prompt = t.get("prompt") or {}
        return {"comparison": name, "kind": kind, "delta": t["delta"], "per_seed": " ".join(f"{x:.6g}" for x in t["seed_deltas"]),
                "seeds": t["seeds"], "seed_test": t["test"] if t.get("testable") else f"not testable ({t['why']})",
                "seed_t": t.get("t", math.nan), "seed_df": t.get("df", math.nan), "seed_p": t["p_two_sided"],
                "prompt_t": prompt.get("t", math.nan), "prompt_p": prompt.get("p_two_sided", math.nan),
                "prompts": prompt.get("prompts", ""), "verdict": verdict}

    rows = []
    if measured and measured.get("runs"):
        g = measured["gain"]
        rows.append(row("premise run", "premise run: end - start", g, "gain" if seed_verdict(g) == "won" else seed_verdict(g)))
    rows += [row(r["arm"], "premise: end - start", r, "gain" if r["significant_gain"] else seed_verdict(r)) for r in premise]
    rows += [row(s, "best larger N - N=16", v, v["verdict"]) for s, v in verdicts.items()]
    for s, t in ((tail or {}).get("settings") or {}).items():
        rows += [row(s, "band: best larger N - N=16", t["band"], t["band"]["verdict"]),
                 row(s, "training pool: best larger N - N=16", t["train_pool"], t["train_pool"]["verdict"])]
    if factorial:
        rows += [row(f"factorial {name}", "effect", e, seed_verdict(e)) for name, e in factorial["effects"].items()]
    with atomic_open(path, newline="") as f:
        w = csv.DictWriter(f, fieldnames=VERDICT_COLUMNS)
        w.writeheader()
        w.writerows(rows)


def run_study_summary(config: dict, results_dir, md_path, csv_path, png_delta, png_base, *,
                      profile: str | None = None) -> dict:
    """``brorl study-summary``: :func:`write_summary` from the config's ``rl``, ``study`` and ``order``; each
    setting's Δ and every file written (the figures beside ``md_path`` too) logged to the rule's MLflow run."""
    import mlflow

    from brorl.tracking import log_artifacts

    verdicts = write_summary(config["rl"], config["study"], results_dir, md_path, csv_path, png_delta, png_base,
                             order=config.get("order"), profile=profile)
    mlflow.log_metrics({f"delta/{k}": v["delta"] for k, v in verdicts.items()})
    beside = [str(Path(md_path).parent / name) for name in ("budget.png", "saturation.png", "seeds.csv", "verdicts.csv")]
    log_artifacts(md_path, csv_path, png_delta, png_base, *beside)
    return verdicts


def effect(plus: list[list[dict]], minus: list[list[dict]], scale: float = 1.0) -> dict:
    """A contrast of arms on held-out p: scale x (sum of ``plus`` arms - sum of ``minus`` arms), per seed (seeds
    present in every arm) with a one-sample t-test over seeds (it decides), and per prompt (p averaged over seeds,
    one-sample t over prompts: ``prompt``, secondary)."""
    def per_prompt(group):
        return sum(np.mean([s["p_end"] for s in arm], axis=0) for arm in group) * scale

    prompt = paired(per_prompt(plus), per_prompt(minus))
    seeds = sorted(set.intersection(*({s["seed"] for s in arm} for arm in plus + minus)))

    def at(group, seed):
        return sum(next(s for s in arm if s["seed"] == seed)["p_end"].mean() for arm in group) * scale

    deltas = [float(at(plus, seed) - at(minus, seed)) for seed in seeds]
    return {**one_sample(deltas), "prompt": prompt, "seed_deltas": deltas}


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
        spec = arm_spec(rl, study, setting, ref_n)
        if owner is None or owner in seen or spec["start"] != "plateau" or spec["pool"] == "tail":
            continue  # the tail pool trains on other prompts: its N=16 gain says nothing of the start's saturation
        seen.add(owner)
        arm = arm_of(setting, ref_n)
        prompt = paired(np.mean([s["p_end"] for s in arm], axis=0), np.mean([s["p_start"] for s in arm], axis=0))
        gains = [float(s["p_end"].mean() - s["p_start"].mean()) for s in arm]
        test = one_sample(gains)
        out.append({**test, "prompt": prompt, "arm": owner, "seed_deltas": gains,
                    "samples": _mean(arm, lambda s: s["generated_samples"]),
                    "start": float(np.mean(arm[0]["p_start"])), "end": float(np.mean([s["p_end"].mean() for s in arm])),
                    "significant_gain": seed_verdict(test) == "won",
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


_p = fmt_p
TEST_HEAD = "Δ | per-seed Δ | seed-level p | prompt-level p (secondary)"
TEST_RULE = "|---|---|---|---|"


def _runs(arm_or_ids) -> str:
    ids = [s["run_id"] if isinstance(s, dict) else s for s in arm_or_ids]
    return " ".join(i[:8] for i in ids)


def _seeds(deltas) -> str:
    return ", ".join(f"{x:+.4f}" for x in deltas)


def _test_cells(v) -> str:
    """Δ, the per-seed values, the seed-level test (it decides) and the prompt-level p (secondary)."""
    return f"{v['delta']:+.4f} | {_seeds(v['seed_deltas'])} | {describe(v)} | {_p(v['prompt']['p_two_sided'])}"


def _markdown(rl, study, plan, arm_of, rows, verdicts, png_delta, png_base, factorial, premise, profile,
              measured=None, tail=None, earlier=None) -> str:
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
        *([measured["first_line"], ""] if measured else []),  # the premise test's result opens the summary
        f"From the ProRL checkpoint (held-out mean@k {start_all:.4f}), N={ref_n} against larger N at equal generated "
        f"samples in total; {n_seeds} seeds configured; {_refill_note(study)}. "
        "Each setting's samples per step, steps and learning rate are listed under \"Verdict per setting\". " + how, "",
        _coverage(study, plan, verdicts) + _short_arms(study, plan, arm_of), "",
        "## Verdict", "", _claims(verdicts, factorial, premise, study, ref_n, measured, tail, earlier), ""]
    # issue 29's order: the premise first (every comparison below depends on it), then the tail-dominated pool, then
    # the earlier settings re-tested at the seed level (study.earlier), then this run's details
    lines += _premise_run_md(measured) if measured and not measured.get("not_run") else []
    lines += _premise_md(premise, ref_n)
    lines += _tail_md(tail) if tail else []
    lines += _earlier_md(earlier) if earlier else []
    unequal = {s: v for s, v in verdicts.items() if v["unequal"]}
    if unequal:
        lines += ["## BroRL's comparison: larger N at a larger batch", "",
                  f"Settings whose larger-N arm has more samples per step than the N={ref_n} arm (BroRL Table 1: "
                  "N=512 x 128 prompts, 8x the samples per step, sqrt lr, against N=16 x 512 prompts, equal totals). "
                  "Δ: held-out mean@k, larger N minus N=16; per-seed Δ: seed-matched; seed-level p: the per-seed Δ t-tested "
                  "against 0 (it decides the verdict); prompt-level p: paired over test prompts (p averaged over "
                  "seeds), secondary.", "",
                  f"| setting | N={ref_n} arm | larger-N arm | samples per arm | N={ref_n} end | larger N end | {TEST_HEAD} | "
                  "verdict | wall s (all arms) | runs (larger N; N=16) |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for setting, v in unequal.items():
            lines.append(f"| {setting} | {v['describe_ref']} | {v['describe']} | {v['samples']:,.0f} | {v['end_ref']:.4f} | "
                         f"{v['end_best']:.4f} | {_test_cells(v)} | **{v['verdict']}** | {v['wall_s']:.0f} | "
                         f"{_runs(arm_of(setting, v['best_n']))}; {_runs(arm_of(v['ref_setting'], ref_n))} |")
        lines.append("")
    if factorial:
        lines += _factorial_md(factorial, ref_n)
    lines += _budget_md(study, verdicts, ref_n)
    counts = {v: sum(1 for x in verdicts.values() if x["verdict"] == v) for v in ("won", "lost", "tied", "not testable")}
    ds_up = sum(1 for x in verdicts.values() if x["ds_best"] > x["ds_ref"])
    p256_up = sum(1 for x in verdicts.values() if x["delta_pass256"] > 0)
    zero_down = sum(1 for x in verdicts.values() if x["delta_zero_share"] < 0)
    probe_up = sum(1 for x in verdicts.values() if x["probe_best"] > x["probe_ref"])
    total = len(verdicts)
    lines += [
        "## Verdict per setting", "",
        f"Best larger-N arm chosen on validation, compared with the N={ref_n} arm on held-out mean@k: Δ, the seed-matched "
        "differences, their t-test against 0 (seed-level p; it decides) and a paired t-test over test prompts "
        "(prompt-level p, secondary). "
        + ("" if all(v["judged"] == "all" for v in verdicts.values()) else
           "Without validation probes (paper profile) the best arm is chosen on the even-indexed held-out prompts "
           "and judged on the odd-indexed ones. ") +
        "won / lost: seed-level two-sided p < 0.05; otherwise tied; fewer than 3 seeds: not testable. Wall s: training seconds of all "
        "the setting's arms and seeds (reused arms included).", "",
        f"| setting | best N | {TEST_HEAD} | verdict | Δ pass@256 | Δ zero share "
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
              f"{counts['tied']}**" + (f", not testable in {counts['not testable']}" if counts["not testable"] else "")
              + f" (seed-level tests; held-out mean@k, best larger-N arm vs N={ref_n}, at equal generated samples "
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
             "(N effect at 8x) - (N effect at 1x). per-seed: the contrast on each seed's arms; seed-level p: those "
             "t-tested against 0 (it decides); prompt-level p: one-sample t over test prompts of the per-prompt contrast "
             "(p averaged over seeds), secondary. At equal samples a larger N also means fewer distinct prompts "
             "(32x fewer at N=512 vs 16), so the N effect is N together with prompt diversity, not N alone.", "",
             f"| effect | {TEST_HEAD} |", "|---" + TEST_RULE]
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
             f"minus N={ref_n}.", "", f"| setting | budget | samples per arm | {TEST_HEAD} | verdict | wall s |",
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
             "checkpoint, end against start on held-out p: per-seed gains t-tested against 0 (seed-level p; it decides) "
             "and paired over test prompts (prompt-level p, secondary).", "",
             f"| arm | samples | start mean@k | end mean@k | {TEST_HEAD.replace('Δ', 'gain')} | significant gain | runs |",
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
                "The comparisons below are therefore from a start that is still improving, not BroRL's saturated "
                f"start. Over the second half of {longest['arm']}'s samples its exact validation pass@1 moved by "
                f"{late:+.4f} (mean over seeds): " + ("the curve is still rising" if late > 0.005 else
                                                     "the curve is flattening") +
                f". That arm took {longest['wall_s'] / 60:.0f} min of training per seed here; the budget settings "
                "(`study.budgets`) extend it, at the cost stated at the top.")
    return (f"**Premise met**: no N={ref_n} arm gains significantly on every seed within {longest['samples']:,.0f} "
            "samples per arm.")


def _claims(verdicts, factorial, premise, study, ref_n, measured=None, tail=None, earlier=None) -> str:
    """The verdict: a short table (claim, what was compared, Δ, seed-level p, prompt-level p, reading) and two or
    three plain sentences. Seed-level tests decide; fewer than 3 seeds read "not testable"."""
    rows = []  # (claim, what was compared, test dict or None, reading)
    if measured and measured.get("not_run"):
        rows.append((f"the premise, measured (continued N={ref_n} plateaus by the slope stop)",
                     f"not run (budget {measured['budget']:,} samples; {measured['cost']})", None, "not testable (not run)"))
    elif measured:
        n = len(measured["runs"])
        reading = ("holds" if measured["fired"] == n else "does not hold within the budget" if not measured["fired"]
                   else f"not resolved (plateau in {measured['fired']} of {n} seeds)")
        rows.append((f"the premise, measured (continued N={ref_n} plateaus by the slope stop)",
                     f"premise run, {n} seed(s), budget {measured['budget']:,} samples (Δ: held-out mean@k, end - start)",
                     measured["gain"], reading))
    if tail and tail.get("outcome"):
        d = tail["decision"]
        r = tail["settings"][d["setting"]]
        o = tail["outcome"]
        reading = ("supports" if o == "supported" else "contradicts" if "N=16 is better" in o else
                   "not testable" if o.startswith("not testable") else "not resolved")
        on = decision_on(d)
        where = (f"{r['band_prompts']} test prompts in the band" if on == "band" else
                 f"the {r['pool_prompts']:,} training-pool prompts (all in the band at the start)")
        rows.append((f"BroRL's mechanism on the tail pool (decision rule: Δ {DECISION_ON[on]} > {d['margin']:g}, "
                     f"p < {d['alpha']:g})", f"{d['setting']}: {r['short']}, {where}", r[on], reading))
    if premise:
        r = premise[-1]
        reading = ("not testable" if not r.get("testable") else
                   "does not hold (still gains)" if r["significant_gain"] else "holds (no significant gain)")
        rows.append((f"the premise (continued N={ref_n} has saturated)", f"{r['arm']}: end vs start, "
                     f"{r['samples']:,.0f} samples per arm", r, reading))
    for s, v in verdicts.items():
        reading = {"won": "supports", "lost": "contradicts", "tied": "not resolved"}.get(v["verdict"], v["verdict"])
        if v["unequal"]:
            rows.append((f"larger N at a larger batch beats continued N={ref_n} ({s})",
                         v["short"], v, reading))
        elif tail and s in tail["settings"]:  # the tail pool's equal-per-step partner: same steps, same samples per step
            rows.append((f"larger N beats N={ref_n} at equal samples per step and equal steps ({s})",
                         v["short"], v, reading))
    if factorial:
        e = factorial["effects"]
        for name, claim in (("N", f"N main effect (N with {factorial['ns'][1] // factorial['ns'][0]}x fewer distinct "
                                  "prompts at equal samples)"),
                            ("batch", "batch / lr main effect (8x samples per step, sqrt lr)"),
                            ("interaction", "N x batch interaction")):
            rows.append((claim, f"factorial {' / '.join(factorial['settings'])}", e[name],
                         {"won": "positive", "lost": "negative", "tied": "not resolved"}.get(
                             seed_verdict(e[name]), seed_verdict(e[name]))))
    for fam, pts in _budget_points(study, verdicts).items():
        ds = [verdicts[s]["delta"] for _, s in pts]
        last = verdicts[pts[-1][1]]
        grows = ds[-1] > ds[0]
        reading = ("supports" if grows and last["verdict"] == "won" else
                   "contradicts" if not grows and last["verdict"] == "lost" else "not resolved")
        rows.append((f"larger N's advantage grows with the budget ({fam})",
                     "Δ at " + ", ".join(f"{m}x: {d:+.4f}" for (m, _), d in zip(pts, ds)), last, reading))
    diverged = [s for s, v in verdicts.items() if v["unequal"] and "(sqrt)" in v["describe"] and v["end_best"] < v["start"]]
    if diverged:
        rows.append(("the sqrt learning-rate rule carries over to the larger batch", "larger-N arm's end vs the start",
                     None, "contradicts: ended below the start under " + ", ".join(diverged)))
    table = ["| claim | what was compared | Δ | seed-level p | prompt-level p | reading |", "|---|---|---|---|---|---|"]
    for claim, what, t, reading in rows:
        cells = (f"{t['delta']:+.4f} | {describe(t)} | {_p((t.get('prompt') or {}).get('p_two_sided', math.nan))}"
                 if t is not None
                 else "– | – | –")
        table.append(f"| {claim} | {what} | {cells} | **{reading}** |")
    said = lambda *starts: [c for c, _, _, r in rows if r.startswith(starts)]  # noqa: E731
    fmt = lambda xs: "; ".join(xs) if xs else "none"  # noqa: E731
    premise_note = ""
    if measured and measured.get("not_run"):
        premise_note = " The start's saturation was not measured (the premise run was not run)."
    elif measured and not measured["fired"]:
        premise_note = (f" The measured premise run did not plateau within {measured['budget']:,} samples, so these "
                        "comparisons test BroRL's recipe from a start that is still improving.")
    elif premise and premise[-1]["significant_gain"]:
        premise_note = (f" The start has not saturated (continued N={ref_n} still gains), so these comparisons test "
                        "BroRL's recipe outside the regime its theory is about.")
    sentences = (f"What was compared: N={ref_n} against larger N at equal total generated samples, at each setting's "
                 "own samples per step and learning rate; the seed is the unit of every test (a run's prompts share "
                 "its noise), the prompt-level p is secondary." + premise_note +
                 f" Supported: {fmt(said('supports', 'holds'))}. Contradicted: {fmt(said('contradicts', 'does not'))}."
                 f" Not resolved or not testable: {fmt(said('not resolved', 'not testable'))}."
                 + (" Earlier settings, re-tested at the seed level (their section below): "
                    + "; ".join(f"{name}: {_earlier_counts(found)}" for name, found in earlier.items()) + "."
                    if earlier else "") +
                 " The paper's absolute numbers (a 1.5B model on math, code and reasoning benchmarks) and its GPU "
                 "throughput are not tested at this scale.")
    return "\n".join(table) + "\n\n" + sentences


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
        where = "here" if p256_up == 0 else f"in {total - p256_up} of {total} settings"
        return ("larger N keeps more prompts in the update (the mechanism BroRL names), but that did not turn "
                f"into broader coverage {where}: at equal samples it sees fewer distinct prompts, and pass@256 / the "
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
    colours = {"won": "tab:green", "lost": "tab:red", "tied": "tab:gray", "not testable": "white"}
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


def markers(name: str = "") -> tuple[str, str]:
    """The verdict block's markers: :data:`MARKERS`, or ``<!-- study-verdict:<name>:start -->`` ... for a named
    study (``make study-docs STUDY_VERDICT=<name>``: one block per study in the same document)."""
    return MARKERS if not name else (f"<!-- study-verdict:{name}:start -->", f"<!-- study-verdict:{name}:end -->")


STAMP = "_Generated by `study_summary`"
"""How the summary's last line starts: when, on which machine, at which load it was written (:func:`run_stamp`)."""


def run_stamp() -> str:
    """The summary's date, machine and load: written when ``study_summary`` runs, right after the study's jobs,
    so the 5- and 15-minute load averages are the run's own (the machine's other work included)."""
    import datetime
    import os
    import platform

    cpu = next((line.split(":", 1)[1].strip() for line in _read_lines("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor() or "CPU not named")
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"{STAMP} {when} on {platform.system()} {platform.machine()}, {os.cpu_count()} cores ({cpu}); load "
            f"average (1 / 5 / 15 min) then {load}._")


def _read_lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def splice_verdict(summary_md, readme, name: str = "") -> None:
    """Copy the summary's generated verdict paragraph into ``readme`` between :func:`markers` (make study-docs),
    with the summary's date, machine and load line (:func:`run_stamp`) where it has one."""
    text = Path(summary_md).read_text()
    verdict = text.split("## Verdict\n\n", 1)[1].split("\n## ", 1)[0].strip()  # the whole section: table + sentences
    stamp = next((line for line in text.splitlines() if line.startswith(STAMP)), None)
    verdict = f"{verdict}\n\n{stamp}" if stamp else verdict
    doc = Path(readme).read_text()
    start, end = markers(name)
    if not (start in doc and end in doc):
        raise ValueError(f"{readme}: no {start} ... {end} block to write the verdict into")
    head, rest = doc.split(start, 1)
    write_text(readme, f"{head}{start}\n{verdict}\n{end}{rest.split(end, 1)[1]}")





def _retest_table_rows(summary_md):
    """(section, first cell, per-seed cell, printed p cell, printed verdict) of every table row with a per-seed
    column of an older ``summary.md``."""
    section, head = "", None
    for line in Path(summary_md).read_text().splitlines():
        if line.startswith("## "):
            section, head = line[3:], None
            continue
        if not line.startswith("|"):
            head = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if head is None:
            head = cells
            continue
        if set(line) <= set("|-"):
            continue
        col = next((i for i, h in enumerate(head) if h.startswith("per-seed")), None)
        pcol = next((i for i, h in enumerate(head) if "two-sided" in h),
                    next((i for i, h in enumerate(head) if h == "p" or h.startswith("p (")), None))
        if col is None or pcol is None:
            continue
        old = next((cells[i] for i, h in enumerate(head) if h in ("verdict", "significant gain", "BroRL better?")), "")
        yield section, cells[0], cells[col], cells[pcol], old


def retest_summary(summary_md) -> str:
    """Seed-level tests recomputed from an older ``summary.md`` (one written before the seed became the unit): every
    table row with a per-seed column gets its one-sample t over those per-seed values (paired by seed), beside the
    prompt-level p the row printed. For docs only (``python -m brorl.study.report --retest SUMMARY_MD``); a new run
    writes these tests itself."""
    out = []
    for section, row, per_seed, printed_p, old in _retest_table_rows(summary_md):
        test = one_sample([float(x) for x in per_seed.split(",") if x.strip()])
        new = seed_verdict(test, ("gain", "loss", "no significant change", "not testable")
                           if section.startswith("The premise") else ("won", "lost", "tied", "not testable"))
        out.append(f"| {section} | {row} | {test['delta']:+.4f} | {per_seed} | {describe(test)} | "
                   f"{printed_p} | {old.strip('*')} | {new if old else '–'} |")
    return "\n".join(["| section | row | Δ (mean of per-seed) | per-seed | seed-level p | prompt-level p (as printed) | "
                      "verdict then (prompts) | verdict now (seeds) |", "|---|---|---|---|---|---|---|---|", *out])


RETEST_KINDS = {"Verdict per setting": "best larger N - N=16", "The 2x2 factorial": "effect",
                "The premise": "premise: end - start"}
"""The sections of an older summary whose rows :func:`retest_csv` keeps, and the ``kind`` a new run's verdicts.csv
gives them (the other sections with per-seed values repeat these rows)."""


def retest_csv(summary_md, out_csv) -> int:
    """An older ``summary.md``'s comparisons as a new run's ``verdicts.csv`` (:data:`VERDICT_COLUMNS`: per-seed values,
    the seed-level test over them, the prompt-level p as the row printed it), so ``study.earlier`` can read every
    study alike (``python -m brorl.study.report --retest-csv SUMMARY_MD OUT_CSV``). Returns the rows written."""
    rows = []
    for section, row, per_seed, printed_p, old in _retest_table_rows(summary_md):
        kind = next((k for prefix, k in RETEST_KINDS.items() if section.startswith(prefix)), None)
        if kind is None:
            continue
        values = [float(x) for x in per_seed.split(",") if x.strip()]
        test = one_sample(values)
        words = (("gain", "loss", "no significant change", "not testable") if kind.startswith("premise") else
                 ("positive", "negative", "not resolved", "not testable") if kind == "effect" else
                 ("won", "lost", "tied", "not testable"))
        rows.append({"comparison": f"factorial {row}" if kind == "effect" else row, "kind": kind, "delta": test["delta"],
                     "per_seed": " ".join(f"{x:.6g}" for x in values), "seeds": test["seeds"],
                     "seed_test": test["test"] if test["testable"] else f"not testable ({test['why']})",
                     "seed_t": test["t"], "seed_df": test["df"], "seed_p": test["p_two_sided"], "prompt_t": "",
                     "prompt_p": printed_p, "prompts": "", "verdict": seed_verdict(test, words)})
    with atomic_open(out_csv, newline="") as f:
        w = csv.DictWriter(f, fieldnames=VERDICT_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return len(rows)


if __name__ == "__main__":  # python -m brorl.study.report SUMMARY_MD README_MD [NAME] | --retest SUMMARY_MD | --retest-csv ...
    import sys

    if sys.argv[1] == "--retest":
        print(retest_summary(sys.argv[2]))
    elif sys.argv[1] == "--retest-csv":
        print(f"{retest_csv(sys.argv[2], sys.argv[3])} comparisons -> {sys.argv[3]}")
    else:
        splice_verdict(*sys.argv[1:4])


def _refill_note(study: dict) -> str:
    from brorl.study.plan import REFILL

    r = {**REFILL, **(study.get("refill") or {})}
    per = [k for k, ab in (study.get("ablations") or {}).items() if ab.get("refill")]
    base = ("one generation round per step (dynamic sampling filters, no refill)" if r["max_rounds"] == 1 else
            f"dynamic-sampling refill up to {r['max_rounds']} rounds per step (prompts per step count kept prompts)")
    return base + (f"; own refill: {', '.join(per)}" if per else "")


# --- issue 29: the measured premise (slope stop) and the tail-dominated pool ---------------------------------

def premise_run(study: dict, results: Path) -> dict | None:
    """The premise run (``study.premise``; rule study_premise): continued N=16 from the start with the slope stop.
    Per seed: whether the stop fired and at how many generated samples; the held-out gain end - start. Its
    ``first_line`` opens the summary: "premise met at X samples" or "did not plateau within budget B"."""
    from brorl.study.plan import premise_settings

    p = premise_settings(study)
    if not p:
        return None
    if not p["run"]:
        return _premise_not_run(p, results)
    runs = load_arm(results / "premise")
    if not runs:
        raise FileNotFoundError(f"no finished premise run under {results / 'premise'} (study.premise is configured)")
    budget = p["sample_budget"]
    fired = [s for s in runs if _stopped(s) == "plateau"]
    n = runs[0]["n_rollouts"][0]
    at = [float(s["generated_samples"]) for s in fired]
    gains = [float(s["p_end"].mean() - s["p_start"].mean()) for s in runs]
    gain = {**one_sample(gains), "seed_deltas": gains}  # held-out mean@k, end - start, per seed (no prompt-level test)
    rule = (f"slope stop: one-sided 95% upper bound of the OLS slope of validation pass@1 over the last "
            f"{p['plateau_window']} probes (every {p['probe_every']} steps) below {p['plateau_slope']:g} per probe")
    if len(fired) == len(runs):
        first = (f"**Premise met at {np.mean(at):,.0f} samples** (continued N={n} from the start plateaued in every seed, "
                 f"{len(runs)} of {len(runs)}; {rule}).")
    elif not fired:
        first = (f"**Premise: did not plateau within budget {budget:,} samples** (continued N={n} from the start, "
                 f"{len(runs)} seed(s); {rule}): the start is not saturated, so every comparison below is from an "
                 "improving start, not BroRL's.")
    else:
        first = (f"**Premise met in {len(fired)} of {len(runs)} seeds** (plateau at {', '.join(f'{x:,.0f}' for x in at)} "
                 f"samples; the others did not plateau within {budget:,}; {rule}).")
    return {"first_line": first, "runs": runs, "fired": len(fired), "budget": budget, "gain": gain, "rule": rule, "n": n}


def _premise_not_run(p: dict, results: Path) -> dict:
    """``study.premise.run: false``: the first line says the premise was not measured, with its stated budget and
    a cost estimate from the generated samples per second of this study's own N=16 arms (their summaries)."""
    runs = [json.loads(f.read_text()) for f in sorted(results.glob("*/n16/seed*/summary.json"))]
    runs = [s for s in runs if s.get("wall_time_s")]
    step = min((16 * s["prompts_per_step"][-1] for s in runs), default=0)  # the smallest steps: nearest the premise's
    rates = [s["generated_samples"] / s["wall_time_s"] for s in runs if 16 * s["prompts_per_step"][-1] == step]
    budget = p["sample_budget"]
    cost = (f"at least {budget / np.median(rates) / 60:,.0f} min per seed at the median rate of this study's "
            f"{len(rates)} N=16 arm run(s) of {step:,} samples per step, {np.median(rates):,.0f} generated samples/s; "
            "smaller steps cost more per sample") if rates else "cost not estimated (no N=16 arm in this study)"
    first = (f"**Premise test not run** (`study.premise.run: false`): whether continued N=16 from the start "
             f"plateaus within {budget:,} samples was not measured this time ({len(p['seeds'])} seed(s): {cost}). "
             "Every comparison below is from a start whose saturation is not established.")
    return {"first_line": first, "runs": [], "fired": 0, "budget": budget, "not_run": True, "n": 16, "cost": cost}


def _stopped(summary: dict) -> str | None:
    """Why an arm's (last) stage stopped: plateau, sample_budget, time_budget or max_steps (a list per stage)."""
    v = summary.get("stopped")
    return v[-1] if isinstance(v, list) and v else v


def _premise_run_md(m: dict) -> list[str]:
    lines = ["## The premise test (measured plateau)", "",
             f"Continued N={m['n']} from the start until the {m['rule']}, or {m['budget']:,} generated samples.", "",
             "| seed | stopped | step | samples | validation pass@1 end | held-out start | held-out end | run |",
             "|---|---|---|---|---|---|---|---|"]
    for s in m["runs"]:
        lines.append(f"| {s['seed']} | {_stopped(s)} | {s.get('steps')} | {s['generated_samples']:,.0f} | "
                     f"{s.get('validation_pass1_end', math.nan):.4f} | {s['p_start'].mean():.4f} | {s['p_end'].mean():.4f} | "
                     f"{s['run_id'][:8]} |")
    g = m["gain"]
    lines += ["", f"Held-out gain, end - start: {g['delta']:+.4f} ({describe(g)}). Its validation curve: "
              "`saturation.png`.", ""]
    return lines


def band_mask(arm: list[dict]) -> np.ndarray:
    """Test prompts in BroRL's band at the start: single-answer prompts with start p in (1/512, 1/16) (the
    held-out ``tail`` of :func:`brorl.study.heldout.metrics`)."""
    from brorl.study.tail import in_band
    from brorl.tasks.core import FAMILIES, is_probe

    s = arm[0]
    single = np.array([not (t in FAMILIES and is_probe(t)) for t in s["task"]])
    return in_band(s["p_start"]) & single


def decide(rule: dict, band: dict) -> str:
    """``study.decision`` on the band comparison: supported iff Δ > margin at seed-level two-sided p < alpha."""
    if not band.get("testable"):
        return f"not testable ({band.get('why')})"
    if band["delta"] > rule["margin"] and band["p_two_sided"] < rule["alpha"]:
        return "supported"
    where = "the training pool" if rule.get("prompts") == "train_pool" else "the band"
    if band["delta"] < 0 and band["p_two_sided"] < rule["alpha"]:
        small = abs(band["delta"]) <= rule["margin"]
        return (f"not supported (N=16 is better on {where}, by {abs(band['delta']):.4f}"
                + (f": smaller than the margin {rule['margin']:g}, so neither arm is ahead by the rule's own measure)"
                   if small else ")"))
    return "not supported (not resolved at this margin and alpha)"


def tail_section(study: dict, plan: dict, arm_of, verdicts: dict, results: Path) -> dict | None:
    """Every setting on ``pool: tail``: the best larger N against N=16 on the test prompts in the band (seed-level,
    decides) and on the full test set, the training pool's own tail, pass@16 / pass@256 and the DS pass rate per
    arm; the pool's counts (``tail_pool.json``) and the decision rule (``study.decision``)."""
    ref_n = reference_n(study)
    from brorl.study.plan import _axes

    names = [s for s in plan if s != BASE and _axes(study, s).get("pool") == "tail"]
    if not names:
        return None
    pool = results / "data_tail" / "tail_pool.json"
    out = {"pool": json.loads(pool.read_text()) if pool.exists() else None, "settings": {},
           "decision": study.get("decision"), "ref_n": ref_n}
    for setting in names:
        v = verdicts[setting]
        best, ref = arm_of(setting, v["best_n"]), arm_of(v["ref_setting"], ref_n)
        mask = band_mask(ref)
        train = lambda arm, k: _mean(arm, lambda s: (s["heldout"].get("train_pool") or {}).get(k))  # noqa: E731
        arms = {n: arm_of(setting, n) for n in (ref_n, v["best_n"])}
        if mask.sum() >= 2:
            band = compare(best, ref, mask)
        else:  # nothing to compare on: say so (a toy test split can hold no prompt in the band)
            band = _untestable_compare(f"{int(mask.sum())} test prompt(s) in the band")
        pool_best, pool_ref = _train_pool_arm(best), _train_pool_arm(ref)
        pool = (compare(pool_best, pool_ref) if pool_best and pool_ref and pool_ref[0]["p_end"].size >= 2 else
                _untestable_compare("no per-prompt training-pool p in the arms' heldout.npz"))
        out["settings"][setting] = {
            "short": v["short"], "band_prompts": int(mask.sum()), "band": band, "all": v, "train_pool": pool,
            "pool_prompts": int(pool_ref[0]["p_end"].size) if pool_ref else 0,
            "arms": {n: {"band_start": float(np.mean([s["p_start"][mask].mean() for s in a])) if mask.any() else math.nan,
                         "band_end": float(np.mean([s["p_end"][mask].mean() for s in a])) if mask.any() else math.nan,
                         "all_end": float(np.mean([s["p_end"].mean() for s in a])),
                         "train_start": train(a, "q_pos_start"), "train_end": train(a, "q_pos_end"),
                         "train_zero": train(a, "zero_share_end"),
                         "pass16": _mean(a, lambda s: s["heldout"]["all"].get("pass@16")),
                         "pass256": _mean(a, lambda s: s["heldout"]["all"].get("pass@256")),
                         "ds": _mean(a, lambda s: s["dynamic_sampling_pass_rate"]),
                         "seeds": len(a), "runs": [s["run_id"] for s in a]} for n, a in arms.items()}}
    d = out["decision"]
    if d and d["setting"] in out["settings"]:
        out["outcome"] = decide(d, out["settings"][d["setting"]][decision_on(d)])
    return out


DECISION_ON = {"band": "on the band", "train_pool": "on the training pool"}
"""``study.decision.prompts``: where the decision rule compares the arms (``band``: the test prompts in the band at the
start; ``train_pool``: the training pool's own prompts, all in the band at the start: ``config/study_weak.yaml``,
where held-out prompts cannot gain without transfer)."""


def decision_on(rule: dict) -> str:
    return rule.get("prompts", "band")


def _untestable_compare(why: str) -> dict:
    return {"delta": math.nan, "seed_deltas": [], "testable": False, "why": why, "seeds": 0,
            "prompt": {"p_two_sided": math.nan}, "verdict": "not testable", "p_two_sided": math.nan}


def _train_pool_arm(arm: list[dict]) -> list[dict] | None:
    """The arm's seeds with the training pool's per-prompt p as ``p_start`` / ``p_end`` (for :func:`compare`), or
    None when its heldout.npz has none."""
    if not all("p_train_end" in s for s in arm):
        return None
    return [{**s, "p_start": s["p_train_start"], "p_end": s["p_train_end"]} for s in arm]


def _tail_md(t: dict) -> list[str]:
    lines = ["## The tail-dominated pool: BroRL's comparison where its theory says N should win", ""]
    pool = t["pool"]
    if pool:
        lines += [f"Training pool: {pool['kept']:,} of {pool['candidates']:,} fresh candidate prompts "
                  f"({pool['kept_share']:.1%}) lie in BroRL's band (1/512, 1/16) at the start (exact pass rate); only "
                  f"those are trained on. Test split: {pool['test_prompts']:,} prompts, "
                  f"{pool['test_in_band_single_answer']:,} of them in the band.", ""]
    d = t["decision"]
    if d:
        lines += [f"Decision rule (stated in the config before the run): BroRL's mechanism is supported at tiny scale "
                  f"if the larger N of **{d['setting']}** beats N={t['ref_n']} {DECISION_ON[decision_on(d)]} by > "
                  f"{d['margin']:g} at seed-level p < {d['alpha']:g}. **Outcome: {t.get('outcome', 'setting not in this summary')}.**", ""]
    lines += [f"| setting | arms | band prompts | band: {TEST_HEAD} | band verdict | all test: Δ | all-test verdict "
              "| training pool: Δ | seed-level p | pool verdict |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in t["settings"].items():
        pool = r["train_pool"]
        lines.append(f"| {name} | {r['short']} | {r['band_prompts']} | {_test_cells(r['band'])} | **{r['band']['verdict']}** "
                     f"| {r['all']['delta']:+.4f} | {r['all']['verdict']} | {pool['delta']:+.4f} | {describe(pool)} "
                     f"| {pool['verdict']} |")
    lines += ["", "Per arm (means over seeds): band and full test mean@k at the end, the training pool's own mean p "
              "(start -> end; its share still at p <= 1/512), held-out pass@16 / pass@256, dynamic-sampling pass rate.", "",
              "| setting | N | seeds | band start | band end | all test end | train pool start -> end | train pool zero share "
              "| pass@16 | pass@256 | DS pass rate | runs |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in t["settings"].items():
        for n, a in r["arms"].items():
            lines.append(f"| {name} | {n} | {a['seeds']} | {a['band_start']:.4f} | {a['band_end']:.4f} | {a['all_end']:.4f} "
                         f"| {a['train_start']:.4f} -> {a['train_end']:.4f} | {a['train_zero']:.3f} | {a['pass16']:.4f} "
                         f"| {a['pass256']:.4f} | {a['ds']:.2f} | {_runs(a['runs'])} |")
    return lines + [""]


# --- issue 29: the earlier settings, re-tested at the seed level (study.earlier) ---------------------------------

EARLIER_NEEDS = ("comparison", "kind", "per_seed", "prompt_p")


def _kind_words(kind: str) -> tuple[str, str, str, str]:
    if kind.startswith("premise"):
        return "gain", "loss", "no significant change", "not testable"
    if kind == "effect":
        return "positive", "negative", "not resolved", "not testable"
    return "won", "lost", "tied", "not testable"


def earlier_rows(path, key: str = "study.earlier") -> list[dict]:
    """The comparisons of an earlier study from its per-seed CSV (a run's ``verdicts.csv``, or one written from an
    older summary by :func:`retest_csv`), each re-tested with the seed as the unit: the per-seed values t-tested
    against 0 (paired by seed; a row the run tested with Welch's test, its seeds unmatched, keeps that run's
    seed-level p). A missing file, column or unreadable per-seed cell is an error naming ``key``, the file and line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{key}: {path} does not exist (a study's verdicts.csv, or one written by "
                                "`python -m brorl.study.report --retest-csv SUMMARY_MD OUT_CSV`)")
    rows = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in EARLIER_NEEDS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{key}: {path} has no column(s) {', '.join(missing)} (the columns of a study's verdicts.csv)")
        for line, r in enumerate(reader, start=2):
            try:
                values = [float(x) for x in (r["per_seed"] or "").split()]
                prompt_p = float(r["prompt_p"]) if (r["prompt_p"] or "").strip() else math.nan
            except ValueError as err:
                raise ValueError(f"{key}: {path}, line {line}: {err} (per_seed: space-separated numbers; prompt_p: a "
                                 "number)") from None
            test = one_sample(values)
            if (r.get("seed_test") or "").startswith("Welch") and (r.get("seed_p") or "").strip():
                test = {**test, "test": "Welch", "p_two_sided": float(r["seed_p"]), "df": float(r["seed_df"] or "nan"),
                        "delta": float(r["delta"])}
            rows.append({"comparison": r["comparison"], "kind": r["kind"], "values": values, "test": test,
                         "prompt_p": prompt_p, "verdict": seed_verdict(test, _kind_words(r["kind"]))})
    return rows


def earlier_section(study: dict) -> dict[str, list[dict]] | None:
    """``study.earlier`` ({name: per-seed CSV}) read by :func:`earlier_rows`; None when not configured."""
    earlier = study.get("earlier") or {}
    return {name: earlier_rows(path, f"study.earlier.{name}") for name, path in earlier.items()} or None


def _earlier_counts(rows: list[dict]) -> str:
    larger = [r["verdict"] for r in rows if r["kind"] == "best larger N - N=16"]
    if not larger:
        return "no larger-N comparison"
    return (f"larger N won {larger.count('won')}, lost {larger.count('lost')}, not resolved {larger.count('tied')}"
            + (f", not testable {larger.count('not testable')}" if "not testable" in larger else "") + f" of {len(larger)}")


def _earlier_md(earlier: dict[str, list[dict]]) -> list[str]:
    lines = ["## The earlier settings, re-tested at the seed level", "",
             "Earlier studies' comparisons (`study.earlier`: each study's per-seed CSV), with the seed as the unit: the "
             "per-seed Δ t-tested against 0 (seed-level p; paired by seed; Welch's test where that run's seeds were "
             "unmatched), the prompt-level p as that run printed it (secondary: a run's prompts share its noise). Fewer "
             "than 3 seeds: not testable. " + "; ".join(f"{name}: {_earlier_counts(rows)}" for name, rows in earlier.items())
             + ".", "", "| study | comparison | kind | Δ | per-seed Δ | seed-level p | prompt-level p (secondary) | verdict (seeds) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, rows in earlier.items():
        for r in rows:
            lines.append(f"| {name} | {r['comparison']} | {r['kind']} | {r['test']['delta']:+.4f} | {_seeds(r['values'])} | "
                         f"{describe(r['test'])} | {_p(r['prompt_p'])} | **{r['verdict']}** |")
    return lines + [""]
