"""Figure 3, its summary table, and the extended N sweep with Lemma 2's predictions."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pandas as pd

from brorl.theory.mass_balance import expected_unsampled_second_moments, unsampled_probability
from brorl.theory.simulation import METRICS, SimulationSettings
from brorl.atomic import frame_to_csv, save_figure, write_text
from brorl.profile import report

PANELS = {
    "q_pos": ("Q_pos (correct mass)", 1.0),
    "frac_correct_improved": ("% correct tokens improved", 100.0),
    "worst_correct_delta": ("worst Δprob among correct tokens", 1.0),
}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def seed_stats(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean, min and max over seeds of each metric, per (N, step)."""
    grouped = frame.groupby(["n_rollouts", "step"])[list(METRICS)]
    stats = grouped.agg(["mean", "std", "min", "max"])
    stats.columns = [f"{m}_{s}" for m, s in stats.columns]
    return stats.reset_index()


def plot_figure3(frame: pd.DataFrame, path: str | Path) -> None:
    """Three panels like BroRL Figure 3: mean over seeds (line) and min-max over seeds (band)."""
    plt = _plt()
    stats = seed_stats(frame)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    n_values = sorted(stats["n_rollouts"].unique())
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(n_values)))
    n_seeds = frame["seed"].nunique()
    for ax, (metric, (label, scale)) in zip(axes, PANELS.items()):
        for n, color in zip(n_values, colors):
            s = stats[stats["n_rollouts"] == n]
            ax.plot(s["step"], scale * s[f"{metric}_mean"], color=color, lw=1.4, label=f"N={n}")
            ax.fill_between(s["step"], scale * s[f"{metric}_min"], scale * s[f"{metric}_max"],
                            color=color, alpha=0.2, lw=0)
        ax.set_xlabel("step")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axes[2].axhline(0.0, color="k", lw=0.6)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Token-level simulation (BroRL Fig. 3 settings): mean over {n_seeds} seeds, band = min-max")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)


def summary_table(frame: pd.DataFrame, steps) -> pd.DataFrame:
    """One row per N: mean and s.d. over seeds of each metric at the given steps."""
    stats = seed_stats(frame)
    rows = []
    for n in sorted(stats["n_rollouts"].unique()):
        row = {"n_rollouts": int(n)}
        for step in steps:
            s = stats[(stats["n_rollouts"] == n) & (stats["step"] == step)]
            if s.empty:
                continue
            for metric in METRICS:
                row[f"{metric}@{step}"] = float(s[f"{metric}_mean"].iloc[0])
                row[f"{metric}_sd@{step}"] = float(np.nan_to_num(s[f"{metric}_std"].iloc[0]))
        rows.append(row)
    return pd.DataFrame(rows)


def _fmt(metric: str, mean: float, sd: float) -> str:
    if metric == "q_pos":
        return f"{mean:.4f} ± {sd:.4f}"
    if metric == "frac_correct_improved":
        return f"{100 * mean:.1f}% ± {100 * sd:.1f}"
    return f"{mean:.2e} ± {sd:.1e}"


def readings(table: pd.DataFrame, last: int, q_start: float | None = None) -> list[str]:
    """Plain statements about the paper's claims, computed from the table (not asserted)."""
    t = table.sort_values("n_rollouts")
    q = t[f"q_pos@{last}"].to_numpy()
    imp = t[f"frac_correct_improved@{last}"].to_numpy()
    worst = t[f"worst_correct_delta@{last}"].to_numpy()
    ns = t["n_rollouts"].to_numpy()

    def mono(x):
        return bool(np.all(np.diff(x) >= 0))

    out = [
        f"Q_pos at step {last} {'rises' if mono(q) else 'does not rise monotonically'} with N "
        f"({', '.join(f'N={n}: {v:.4f}' for n, v in zip(ns, q))}). Paper: larger N grows Q_pos faster.",
        f"The share of correct tokens above their start {'rises' if mono(imp) else 'does not rise monotonically'}"
        f" with N ({', '.join(f'{100 * v:.1f}%' for v in imp)}). Paper: larger N raises it.",
        f"Worst drop among correct tokens at step {last}: "
        + ", ".join(f"N={n}: {v:.2e}" for n, v in zip(ns, worst))
        + (f". At the largest N ({ns[-1]}) no correct token is below its start (paper: worst-case drops "
           f"'disappear' at large N)." if worst[-1] >= 0 else
           f". Even at the largest N ({ns[-1]}) some correct token is below its start, unlike the paper's "
           f"reading that drops disappear at large N."),
    ]
    if q_start is not None:
        fell = [int(n) for n, v in zip(ns, q) if v < q_start]
        out.append(f"Q_pos started at {q_start:.4f}. " + (
            f"At step {last} it is below that start for N in {fell}: small-N runs lose correct mass overall,"
            f" a stronger effect than the paper's 'occasional regressions'." if fell else
            f"At step {last} it is above that start for every N."))
    if len(ns) >= 3:
        gains = q - q[0]
        logn = np.log(ns.astype(float))
        slopes = np.diff(gains) / np.diff(logn)
        out.append("Gain in Q_pos per doubling of N between successive N values: "
                   + ", ".join(f"{math.log(2) * s:+.2e}" for s in slopes)
                   + (" -- shrinking, i.e. concave in log N (paper: 'monotonic but concave')."
                      if np.all(np.diff(slopes) <= 0) else " -- not uniformly shrinking."))
    return out


def write_summary(frame: pd.DataFrame, steps, md_path: str | Path, csv_path: str | Path,
                  settings: SimulationSettings, seconds: float | None = None) -> pd.DataFrame:
    table = summary_table(frame, steps)
    frame_to_csv(table, csv_path, index=False)
    steps = [s for s in steps if f"q_pos@{s}" in table]
    lines = [
        "# Token-level simulation (BroRL Figure 3)",
        "",
        f"Settings: vocabulary {settings.vocab_size:,}, |P| = {settings.num_correct:,}, rewards "
        f"{settings.reward_correct:+g} / {settings.reward_incorrect:+g}, "
        + (f"seeded start (correct logits {settings.correct_logit:g}, anchor {settings.anchor_logit:g}, anchor "
           f"{'in' if settings.anchor_in_correct else 'not in'} P)" if settings.seeded else "logits 0")
        + f", AdamW lr {settings.lr:g} (weight decay {settings.weight_decay:g}), {settings.steps} steps, "
        f"seeds {list(settings.seeds)}. Cells: mean ± s.d. over seeds.",
        "",
    ]
    header = ["N"]
    for metric in METRICS:
        header += [f"{metric} @{s}" for s in steps]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    for _, row in table.iterrows():
        cells = [f"{int(row['n_rollouts']):,}"]
        for metric in METRICS:
            cells += [_fmt(metric, row[f"{metric}@{s}"], row[f"{metric}_sd@{s}"]) for s in steps]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Reading against the paper", ""]
    q_start = float(frame.loc[frame["step"] == 0, "q_pos"].mean())
    lines += [f"- {r}" for r in readings(table, steps[-1], q_start)]
    if seconds is not None:
        lines += ["", f"Simulation wall time: {seconds:.1f} s."]
    write_text(md_path, report("\n".join(lines) + "\n"))
    return table


# --- extended sweep -------------------------------------------------------------------------------------

def sweep_n_values(n_min: int, n_max: int) -> list[int]:
    """Powers of two from n_min to n_max (inclusive)."""
    lo, hi = math.ceil(math.log2(n_min)), math.floor(math.log2(n_max))
    return [2 ** k for k in range(lo, hi + 1)]


def lemma2_table(settings: SimulationSettings, n_values) -> pd.DataFrame:
    """Lemma 2 at the initial distribution p(0): expected unsampled second moments and coupling sign.

    With E[S_R] > 0 (a reward-positive batch), the coupling term S_R (Q_pos U_neg2 - Q_neg U_pos2) is
    non-negative in expectation once Q_pos E[U_neg2] >= Q_neg E[U_pos2].
    """
    p = settings.initial_probs()
    correct = settings.correct_mask()
    q_pos = float(p[correct].sum())
    n_arr = np.asarray(n_values, dtype=float)
    u_pos2, u_neg2 = expected_unsampled_second_moments(p, correct, n_arr)
    miss = unsampled_probability(p, n_arr)
    e_ppos = (p * (1 - miss))[:, correct].sum(-1)
    e_pneg = (p * (1 - miss))[:, ~correct].sum(-1)
    e_sr = settings.reward_correct * e_ppos + settings.reward_incorrect * e_pneg
    return pd.DataFrame({
        "n_rollouts": np.asarray(n_values, dtype=int),
        "expected_u_pos2": u_pos2,
        "expected_u_neg2": u_neg2,
        "expected_s_r": e_sr,
        "expected_coupling": e_sr * (q_pos * u_neg2 - (1 - q_pos) * u_pos2),
        "expected_unsampled_correct_tokens": miss[:, correct].sum(-1),
    })


def _smallest_n(pred, n_hi: int = 10 ** 9) -> int | None:
    """Smallest integer N >= 1 with pred(N) true, assuming pred stays true once it turns true."""
    grid = [1]
    while grid[-1] < n_hi:
        grid.append(grid[-1] * 2)
    hi = next((n for n in grid if pred(n)), None)
    if hi is None:
        return None
    lo = hi // 2
    if hi == 1:
        return 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if pred(mid) else (mid, hi)
    return hi


def lemma2_thresholds(settings: SimulationSettings) -> dict[str, int | None]:
    """Lemma 2's predicted N thresholds at p(0)."""
    p = settings.initial_probs()
    correct = settings.correct_mask()
    q_pos = float(p[correct].sum())

    def coupling_nonneg(n):
        u_pos2, u_neg2 = expected_unsampled_second_moments(p, correct, n)
        return q_pos * u_neg2 >= (1 - q_pos) * u_pos2

    def all_correct_sampled(n):
        return float(unsampled_probability(p[correct], n).sum()) < 1.0

    return {"n_coupling_nonnegative": _smallest_n(coupling_nonneg),
            "n_expected_unsampled_correct_below_1": _smallest_n(all_correct_sampled)}


def sweep_table(frame: pd.DataFrame, settings: SimulationSettings) -> pd.DataFrame:
    """Per N: final metrics (worst over seeds) and the worst drop at any step, beside Lemma 2 at p(0)."""
    last = frame["step"].max()
    final = frame[frame["step"] == last].groupby("n_rollouts")
    rows = pd.DataFrame({
        "final_q_pos_mean": final["q_pos"].mean(),
        "final_frac_correct_improved_min": final["frac_correct_improved"].min(),
        "final_worst_correct_delta_min": final["worst_correct_delta"].min(),
        "any_step_worst_correct_delta_min": frame[frame["step"] > 0].groupby("n_rollouts")[
            "worst_correct_delta"].min(),
        "seeds": final["seed"].nunique(),
    }).reset_index()
    return rows.merge(lemma2_table(settings, rows["n_rollouts"].tolist()), on="n_rollouts")


def smallest_n_no_loss(table: pd.DataFrame, column: str) -> int | None:
    """Smallest swept N from which on (for it and every larger swept N) no seed has a negative value."""
    ordered = table.sort_values("n_rollouts")
    ok = (ordered[column] >= 0).to_numpy()
    ns = ordered["n_rollouts"].to_numpy()
    for i in range(len(ns)):
        if ok[i:].all():
            return int(ns[i])
    return None


def write_sweep(frame: pd.DataFrame, settings: SimulationSettings, csv_path, md_path, png_path) -> dict:
    table = sweep_table(frame, settings)
    frame_to_csv(table, csv_path, index=False)
    steps = int(frame["step"].max())
    n_final = smallest_n_no_loss(table, "final_worst_correct_delta_min")
    n_any = smallest_n_no_loss(table, "any_step_worst_correct_delta_min")
    pred = lemma2_thresholds(settings)
    ns = table["n_rollouts"].tolist()

    def show(n):
        return f"N = {n:,}" if n is not None else f"not reached up to N = {max(ns):,}"

    lines = [
        "# Extended N sweep (beyond the paper)",
        "",
        f"Powers of two from {min(ns):,} to {max(ns):,}, {steps} steps, seeds "
        f"{sorted(frame['seed'].unique().tolist())}; other settings as Figure 3.",
        "",
        "## When does no correct token lose mass?",
        "",
        "| criterion | smallest N |",
        "|---|---|",
        f"| simulation: at step {steps} no correct token is below its step-0 probability (every seed, and for "
        f"every larger swept N) | {show(n_final)} |",
        f"| simulation: no correct token is ever below its step-0 probability, at any step | {show(n_any)} |",
        f"| Lemma 2 at p(0): expected coupling term non-negative, Q_pos E[U_neg2] >= Q_neg E[U_pos2] | "
        f"{show(pred['n_coupling_nonnegative'])} |",
        f"| Lemma 2 at p(0): expected number of unsampled correct tokens per step below 1 | "
        f"{show(pred['n_expected_unsampled_correct_below_1'])} |",
        "",
        "Lemma 2 is evaluated at the initial distribution p(0) for a single update; the simulation runs AdamW,"
        " whose per-coordinate normalisation moves every unsampled logit by about the learning rate whatever"
        " the size of its gradient, so the two need not agree.",
        "",
        "## Per N",
        "",
        "| N | final Q_pos | final % improved (min over seeds) | final worst Δ (min) | worst Δ at any step | "
        "E[U_pos2] | E[U_neg2] | E[coupling] at p(0) | E[# unsampled correct] |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in table.iterrows():
        lines.append(
            f"| {int(r['n_rollouts']):,} | {r['final_q_pos_mean']:.4f} | "
            f"{100 * r['final_frac_correct_improved_min']:.1f}% | {r['final_worst_correct_delta_min']:.2e} | "
            f"{r['any_step_worst_correct_delta_min']:.2e} | {r['expected_u_pos2']:.2e} | "
            f"{r['expected_u_neg2']:.2e} | {r['expected_coupling']:.2e} | "
            f"{r['expected_unsampled_correct_tokens']:.1f} |")
    write_text(md_path, report("\n".join(lines) + "\n"))
    _plot_sweep(table, png_path, n_final, pred)
    return {"n_no_loss_final": n_final, "n_no_loss_any_step": n_any, **pred}


def _plot_sweep(table: pd.DataFrame, path, n_final, pred) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    n = table["n_rollouts"]
    axes[0].plot(n, table["final_worst_correct_delta_min"], "o-", label="final (min over seeds)")
    axes[0].plot(n, table["any_step_worst_correct_delta_min"], "s--", label="any step (min)")
    axes[0].axhline(0, color="k", lw=0.6)
    axes[0].set_yscale("symlog", linthresh=1e-8)
    axes[0].set_title("worst Δprob among correct tokens")
    axes[1].plot(n, 100 * table["final_frac_correct_improved_min"], "o-")
    axes[1].set_title("final % correct tokens improved (min over seeds)")
    axes[2].plot(n, table["expected_u_pos2"], "o-", label="E[U_pos2]")
    axes[2].plot(n, table["expected_u_neg2"], "s-", label="E[U_neg2]")
    axes[2].set_yscale("log")
    axes[2].set_title("Lemma 2 at p(0)")
    for key, style in (("n_coupling_nonnegative", ":"), ("n_expected_unsampled_correct_below_1", "-.")):
        if pred[key]:
            for ax in axes:
                ax.axvline(pred[key], color="gray", ls=style, lw=1)
    if n_final:
        for ax in axes:
            ax.axvline(n_final, color="red", ls="-", lw=0.8)
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("N (rollouts per step)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    axes[2].legend(fontsize=8)
    fig.suptitle("Extended N sweep: red = smallest N with no final loss; gray = Lemma 2 predictions "
                 "(dotted: coupling >= 0, dash-dot: < 1 unsampled correct token)")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)


# The theory rules' steps (`brorl theory-*`): each writes its outputs and logs them to the rule's MLflow run.

def run_theory_simulate(config: dict, csv_path) -> None:
    """``brorl theory-simulate``: the Figure-3 grid -> ``csv_path``; per-step mean curves and wall time logged."""
    import mlflow

    from brorl.theory.simulation import results_frame, run_grid
    from brorl.tracking import log_curves

    settings = SimulationSettings.from_dict(config)
    t0 = time.perf_counter()
    frame = results_frame(run_grid(settings))
    seconds = time.perf_counter() - t0
    Path(csv_path).parent.mkdir(parents=True, exist_ok=True)
    frame_to_csv(frame, csv_path, index=False)
    means = frame.groupby(["n_rollouts", "step"]).mean(numeric_only=True)
    log_curves({f"{metric}/n{n}": means.loc[n][metric].tolist() for n in settings.n_rollouts for metric in METRICS})
    mlflow.log_metric("wall_seconds", seconds)
    mlflow.log_artifact(csv_path)
    print(f"[theory-simulate] wrote {csv_path} ({len(frame)} rows) in {seconds:.1f} s")


def run_theory_figure3(config: dict, csv_path, figure, summary_md, summary_csv) -> None:
    """``brorl theory-figure3``: Figure 3 and the summary table from the simulation; the table's means logged."""
    import mlflow

    from brorl.tracking import log_artifacts

    settings = SimulationSettings.from_dict(config["simulation"])
    frame = pd.read_csv(csv_path)
    plot_figure3(frame, figure)
    table = write_summary(frame, config["summary_steps"], summary_md, summary_csv, settings)
    for _, row in table.iterrows():
        n = int(row["n_rollouts"])
        mlflow.log_metrics({f"{k.replace('@', '_at_')}/n{n}": float(v) for k, v in row.items()
                            if k != "n_rollouts" and "_sd@" not in k})
    log_artifacts(figure, summary_md, summary_csv)
    print(f"[theory-figure3] wrote {figure}, {summary_md}")


def run_theory_sweep(config: dict, csv_path, md_path, png_path) -> None:
    """``brorl theory-sweep``: the extended N sweep with Lemma 2's predictions; the smallest N found logged."""
    import mlflow

    from brorl.theory.simulation import results_frame, run_grid
    from brorl.tracking import log_artifacts

    settings = SimulationSettings.from_dict(config["simulation"])
    sweep = config["extended_sweep"]
    n_values = sweep_n_values(sweep["n_min"], sweep["n_max"])
    t0 = time.perf_counter()
    frame = results_frame(run_grid(settings, n_values=n_values, seeds=sweep["seeds"], steps=sweep["steps"]))
    found = write_sweep(frame, settings, csv_path, md_path, png_path)
    mlflow.log_metrics({k: float(v) if v is not None else float("nan") for k, v in found.items()})
    mlflow.log_metric("wall_seconds", time.perf_counter() - t0)
    log_artifacts(csv_path, md_path, png_path)
    print(f"[theory-sweep] {found}")
