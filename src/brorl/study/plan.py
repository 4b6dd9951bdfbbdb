"""The study's plan: which arms run, from which start model, on which prompt pool, with which settings.

Config (``study`` section, ``config/study.yaml``; every stage also takes ``rl.recipe``)::

    study:
      seeds: [0, 1, 2]
      ns: [16, 64, 256, 512]        # N of the base setting
      ablation_ns: [16, 512]        # N of each ablation (the reference N = min(ns) and the paper's N)
      samples_per_step: 16384       # every arm generates N x prompts_per_step = this many samples a step
      prompts_per_step: {512: 128}  # optional: as the axis below, for the base and every setting (paper profile)
      steps: 6                      # -> samples_per_step x steps generated samples per arm
      settings: {...}               # RLSettings for every study stage (on top of rl.recipe)
      fresh_pool_size: 65536        # `pool: fresh`: a train pool this large (no prompt seen twice)
      late_start_steps: 100         # `start: late`: the ProRL stage continued this many more N=16 steps
      heldout_k: [1, 2, ..., 256]
      ablations:                    # name -> axes that differ from the base setting
        fewer_prompts: {prompts_per_step: {512: 8}}
        paper_prompts: {samples_per_step: 65536, steps: 3}
        fresh: {pool: fresh}
        no_kl: {settings: {beta: 0.0}}
        late_start: {start: late}
        lr_sqrt: {settings: {lr_rule: sqrt}}
        equal_time: {time_budget_s: 120}
        paper_comparison: {samples_per_step: 2048, steps: 48, prompts_per_step: {512: 32},
                           settings: {lr_rule: sqrt, b0: 2048}}
        batch_S: {...}, batch_8S: {...}
      factorial: [batch_S, batch_8S]   # two settings, small then large batch, same two N: the 2x2 N x batch
      budgets: {multiples: [4, 16], settings: [base, paper_comparison]}  # -> base_x4, paper_comparison_x16, ...
      include: [paper_comparison, ...] # run and summarise only these settings (empty or absent: all)
      refill: {max_rounds: 1, round_prompts: 0}  # dynamic-sampling refill of every arm (default: none)
      premise: {seeds: [0], sample_budget: ..., plateau_window: 8, plateau_slope: ...}  # the measured plateau
      tail_pool: {candidates: 24576, test_size: 2000}   # `pool: tail`: the start's (1/512, 1/16) training prompts
      decision: {setting: tail_comparison, margin: 0.01, alpha: 0.05}  # the decision rule, stated before the run

Axes of an ablation: ``ns``, ``samples_per_step`` and ``steps`` (every arm of the setting: its batch geometry and
total, e.g. the paper's 128 prompts per step at N=512), ``prompts_per_step`` ({N: prompts}: that N's samples per step change, its total
budget does not), ``pool`` (``fixed`` | ``fresh``), ``start`` (``plateau`` | ``late``), ``settings``
(RLSettings overrides), ``time_budget_s`` (equal wall time instead of equal samples: every arm of the setting
trains for this many seconds), ``refill`` (``{max_rounds, round_prompts}``: this setting's dynamic-sampling refill,
over ``study.refill``). ``budgets`` adds, for each named setting and multiple m, a setting ``<name>_x<m>``
with m times its steps (or seconds): the same comparison at m times the total budget.

An arm whose stage (with the learning rate resolved: the sqrt rule at B = B0 equals the constant rule), start and
pool equal an arm of an earlier setting (order: base, the ablations as listed, the budget settings) is not run
again: the setting reads that arm (e.g. ``fewer_prompts`` changes only N=512; ``paper_comparison``'s two arms are
cells of the factorial).

By default every arm runs one round of generation per step (``study.refill`` absent = ``max_rounds: 1``: dynamic
sampling filters the zero-signal groups but does not refill), so generated samples per step are exactly equal
across N. ``refill: {max_rounds: 10, round_prompts: 0}`` is the paper's kept-batch geometry (NeMo's
``dynamic_sampling_max_gen_batches: 10`` [nemo]): rounds are generated until ``prompts_per_step`` groups with a
learning signal are kept, so ``prompts_per_step`` counts kept prompts, generated samples per step vary, and the
total (``sample_budget``, generated samples) stays equal across N.

Two more parts run beside the settings when configured: ``premise`` (:func:`premise_stage`: continued N=16 from
the start with the slope plateau stop and a stated sample budget; rule ``study_premise``) and ``tail_pool``
(:mod:`brorl.study.tail`: a fresh training pool scored at the start, kept in BroRL's band; rule
``study_tail_pool``; the ``pool: tail`` of a setting).
"""

from __future__ import annotations

import math
from pathlib import Path

from brorl.profile import Profile

BASE = "base"
POOLS = {"fresh": "data_fresh", "tail": "data_tail"}
STARTS = {"late": "prorl_late"}
"""The study's own prompt pools and late start, under the study group's roots (``results/<root>/study/``,
``resources/<root>/study/``; brorl.layout): :func:`pools`, :func:`starts` give a profile's paths."""
AXES = ("ns", "samples_per_step", "steps", "prompts_per_step", "pool", "start", "settings", "time_budget_s", "refill")
REFILL = {"max_rounds": 1, "round_prompts": 0}
"""The study's default refill: one generation round per step (equal generated samples per step across N)."""
PREMISE_DEFAULTS = {"seeds": [0], "plateau_window": 8, "probe_every": 5, "run": True}
"""``study.premise`` defaults (``sample_budget`` and ``plateau_slope`` have none: the config states them)."""
LR_KEYS = ("lr_rule", "eta0", "b0")
TIME_STEP_CAP = 10  # equal-time arms: at most this many times the equal-sample steps


def pools(profile: Profile) -> dict[str, str]:
    """Prompt pools by name: the profile's training data (``fixed``: its data source's folder) and, on the tiny
    tasks, a large generated pool (``fresh``) and the start's hard-tail pool (``tail``, with ``study.tail_pool``)."""
    fixed = {"fixed": profile.data_dir}
    own = {name: profile.layout.results("study", "study", folder) for name, folder in POOLS.items()}
    return {**fixed, **own} if profile.data == "tasks" else fixed


def starts(profile: Profile, rl: dict) -> dict[str, str]:
    """Start models by name: ``plateau`` (the arms' start: the ProRL stage, or the fetched checkpoint) and ``late``
    (``late_start_steps`` more N=16 steps from it, the study_start rule)."""
    return {"plateau": profile.start_model(rl), "late": profile.layout.resources("study", "study", STARTS["late"])}


def reference_n(study: dict) -> int:
    """The N every setting's larger-N arms are compared with: the smallest N of the base setting (16 in the
    study profile, as ProRL's N [paper])."""
    return min(study["ns"])


def budget_settings(study: dict) -> dict[str, tuple[str, int]]:
    """``{"<setting>_x<m>": (setting, m)}`` from ``study.budgets``."""
    b = study.get("budgets") or {}
    return {f"{s}_x{m}": (s, int(m)) for s in b.get("settings", []) for m in b.get("multiples", [])}


def all_settings(study: dict) -> list[str]:
    """Every configured setting, in reuse order: base, the ablations as listed, the budget settings."""
    return [BASE, *study.get("ablations", {}), *budget_settings(study)]


def settings_names(study: dict) -> list[str]:
    """The settings that run and are summarised: ``study.include`` (in reuse order), or all of them."""
    include = study.get("include") or []
    return [s for s in all_settings(study) if not include or s in include]


def family(study: dict, setting: str) -> tuple[str, int]:
    """(the 1x setting, budget multiple) of a setting: ``paper_comparison_x4`` -> (paper_comparison, 4)."""
    return budget_settings(study).get(setting, (setting, 1))


def _axes(study: dict, setting: str) -> dict:
    common = {"prompts_per_step": study["prompts_per_step"]} if study.get("prompts_per_step") else {}
    if setting == BASE:
        return {"ns": study["ns"], **common}
    if setting in budget_settings(study):
        parent, m = budget_settings(study)[setting]
        ax = _axes(study, parent)
        if ax.get("time_budget_s"):
            return {**ax, "time_budget_s": ax["time_budget_s"] * m}
        return {**ax, "steps": ax.get("steps", study["steps"]) * m}
    ab = study.get("ablations", {})[setting]
    return {"ns": study.get("ablation_ns", study["ns"]), **common, **ab}


def arm_spec(rl: dict, study: dict, setting: str, n: int) -> dict:
    """What determines one (setting, N) arm: its stage settings (seed left out), start model and pool."""
    ax = _axes(study, setting)
    per_step, steps = ax.get("samples_per_step", study["samples_per_step"]), ax.get("steps", study["steps"])
    prompts = {int(k): v for k, v in (ax.get("prompts_per_step") or {}).items()}.get(n, per_step // n)
    refill = {**REFILL, **(study.get("refill") or {}), **(ax.get("refill") or {})}
    stage = {**rl.get("recipe", {}), **study.get("settings", {}), **ax.get("settings", {}),
             "n_rollouts": n, "prompts_per_step": prompts, **refill}
    if ax.get("time_budget_s"):
        stage.update(time_budget_s=ax["time_budget_s"], sample_budget=0,
                     steps=steps * TIME_STEP_CAP * max(1, per_step // (prompts * n)))
    else:
        stage.update(sample_budget=per_step * steps, steps=0)
    return {"stage": stage, "start": ax.get("start", "plateau"), "pool": ax.get("pool", "fixed")}


def arm_key(spec: dict) -> str:
    """What makes two arms the same run: the spec with the learning rate resolved (eta, not its rule)."""
    import json

    st = spec["stage"]
    lr = st.get("eta0", 3e-4)
    if st.get("lr_rule", "sqrt") == "sqrt":
        lr *= math.sqrt(st["n_rollouts"] * st["prompts_per_step"] / st.get("b0", 1024))
    stage = {**{k: v for k, v in st.items() if k not in LR_KEYS}, "lr": float(f"{lr:.12g}")}
    return json.dumps({**spec, "stage": stage}, sort_keys=True)


def study_plan(rl: dict, study: dict) -> dict[str, dict[int, str]]:
    """``{setting: {N: setting whose arm runs it}}`` for the settings that run: an arm equal to one of an earlier
    setting (:func:`all_settings` order, included or not) maps to that setting."""
    owners: dict[str, str] = {}
    out: dict[str, dict[int, str]] = {}
    for setting in all_settings(study):
        by_n = {n: owners.setdefault(arm_key(arm_spec(rl, study, setting, n)), setting)
                for n in _axes(study, setting)["ns"]}
        if setting in settings_names(study):
            out[setting] = by_n
    return out


def arm_jobs(rl: dict, study: dict) -> list[tuple[str, int]]:
    """The (setting, N) pairs that run (each over every seed): the owners of the included settings' arms."""
    return list(dict.fromkeys((owner, n) for by_n in study_plan(rl, study).values() for n, owner in by_n.items()))


def stage_for(rl: dict, study: dict, setting: str, n: int, seed: int) -> dict:
    return {**arm_spec(rl, study, setting, n)["stage"], "seed": seed}


def late_start_stage(profile: Profile, rl: dict, study: dict) -> dict:
    """The later start: the ProRL stage's settings continued ``late_start_steps`` more steps (no plateau stop).
    Paper profile (no ProRL stage here): the recipe at the reference N with its ``rl.arms`` batch (ProRL's
    16 x 512 [paper Table 1])."""
    from brorl.training.arms import prorl_settings

    if profile.trains_start:
        return {**prorl_settings(rl), "steps": study["late_start_steps"], "plateau_window": 0,
                "plateau_delta": 0.0, "sample_budget": 0}
    ref = reference_n(study)
    arms = rl.get("arms", {})
    batch = next((b for b in arms.get("batches", []) if b.get("n_rollouts") == ref),
                 {"n_rollouts": ref, "prompts_per_step": study["samples_per_step"] // ref})
    return {**rl.get("recipe", {}), **arms.get("settings", {}), **batch, "steps": study["late_start_steps"],
            "sample_budget": 0}


def premise_settings(study: dict) -> dict:
    """``study.premise`` over :data:`PREMISE_DEFAULTS` (empty: no premise run)."""
    return {**PREMISE_DEFAULTS, **study["premise"]} if study.get("premise") else {}


def premise_seeds(study: dict) -> list[int]:
    """The seeds the premise rule runs: none when ``study.premise`` is absent or declares ``run: false``."""
    p = premise_settings(study)
    return list(p["seeds"]) if p and p["run"] else []


def premise_stage(profile: Profile, rl: dict, study: dict) -> dict:
    """The premise test (issue 29): continued N=16 from the start as :func:`late_start_stage` builds it (the ProRL
    stage's batch and learning rate; a fetched start: the recipe at ProRL's batch), with the slope plateau stop,
    until it fires or ``sample_budget`` generated samples are spent."""
    p = premise_settings(study)
    return {**late_start_stage(profile, rl, {**study, "late_start_steps": 1}), "steps": 0,
            "sample_budget": p["sample_budget"], "plateau_rule": "slope", "plateau_window": p["plateau_window"],
            "plateau_slope": p["plateau_slope"], "probe_every": p["probe_every"]}


def heldout_settings(rl: dict, study: dict) -> dict:
    """``study.heldout`` over :data:`brorl.study.heldout.HELDOUT_DEFAULTS`."""
    from brorl.study.heldout import HELDOUT_DEFAULTS

    return {**HELDOUT_DEFAULTS, **(study.get("heldout") or {})}


def tail_families(tasks: dict, tail_pool: dict) -> list[str]:
    """The families of the tail pool (:mod:`brorl.study.tail`): ``tail_pool.families`` (``config/study_weak.yaml``:
    only the weak-transfer ``lookup``), else every family of ``tasks.tasks``."""
    return list(tail_pool.get("families") or tasks["tasks"])


def fresh_pool_tasks(tasks: dict, study: dict) -> dict:
    """The tiny task settings with a train pool of ``fresh_pool_size`` prompts per single-answer family (the
    validation and test splits are the same prompts: splits are drawn from disjoint hashed regions)."""
    return {**tasks, "train_size": study["fresh_pool_size"]}


def study_errors(config: dict) -> list[str]:
    """Every invalid part of the study section, naming the key (for config validation, before any job)."""
    from brorl.training.settings import RLSettings

    study, rl = config.get("study") or {}, config.get("rl") or {}
    profile = Profile.from_config(config)
    errors = []
    if not study:
        return errors
    if not rl:
        return ["study: needs the `rl` section (recipe and the ProRL stage the study starts from) [rule: study needs rl]"]
    known = [BASE, *study.get("ablations", {})]
    names = [s for s in all_settings(study) if family(study, s)[0] in known]  # a budget of an unknown setting: below
    for key, listed in (("include", study.get("include") or []), ("factorial", study.get("factorial") or []),
                        ("budgets.settings", (study.get("budgets") or {}).get("settings", []))):
        for name in listed:
            if name not in (known if key == "budgets.settings" else names):
                errors.append(f"study.{key}: {name!r} is not a setting (base, study.ablations, the budget "
                              f"settings: {', '.join(names)}) [rule: known settings]")
    factorial = study.get("factorial") or []
    for name in factorial if all(name in names for name in factorial) else []:
        if sorted(_axes(study, name)["ns"]) != sorted(_axes(study, factorial[0])["ns"]):
            errors.append(f"study.factorial: {factorial} need the same two N [rule: factorial N]")
        elif len(_axes(study, name)["ns"]) != 2:
            errors.append(f"study.factorial.{name}: needs exactly two N (the reference and one larger) [rule: factorial N]")
    for setting in names:
        where = ("study" if setting == BASE else f"study.budgets ({setting})" if setting in budget_settings(study)
                 else f"study.ablations.{setting}")
        ax = _axes(study, setting)
        per_step = ax.get("samples_per_step", study.get("samples_per_step", 0))
        unknown = sorted(set(ax) - set(AXES))
        if unknown:
            errors.append(f"{where}.{unknown[0]}: unknown axis (allowed: {', '.join(AXES)}) [rule: study axes]")
            continue
        if setting == BASE and len(ax["ns"]) < 2:
            errors.append("study.ns: needs the reference N (the smallest) and at least one larger N [rule: two N]")
            continue
        if ax.get("pool", "fixed") not in pools(profile):
            why = "" if profile.data == "tasks" else (f" (profile.data: {profile.data}: the pool is its training data;"
                                                     " `fresh` generates tiny tasks)")
            errors.append(f"{where}.pool: {ax['pool']!r} is not one of {', '.join(pools(profile))}{why} [rule: study pools]")
            continue
        if ax.get("start", "plateau") not in starts(profile, rl):
            errors.append(f"{where}.start: {ax['start']!r} is not one of {', '.join(starts(profile, rl))} [rule: study starts]")
            continue
        for k in (ax.get("prompts_per_step") or {}):
            if int(k) not in ax["ns"]:
                errors.append(f"{where}.prompts_per_step.{k}: N = {k} is not among this setting's N "
                              f"({ax['ns']}) [rule: prompts for a run N]")
        for n in ax["ns"]:
            if per_step % n and str(n) not in map(str, ax.get("prompts_per_step") or {}):
                errors.append(f"{where}: samples_per_step = {per_step} is not a multiple of N = {n} "
                              "(equal samples per step) [rule: samples_per_step % N == 0]")
                continue
            try:
                RLSettings.from_dict({**arm_spec(rl, study, setting, n)["stage"], "seed": 0})
            except (TypeError, ValueError) as err:
                errors.append(f"{where} (N={n}): {err} [rule: RLSettings]")
    errors += _premise_tail_errors(profile, rl, study, names)
    errors += _tail_family_errors(config.get("tasks") or {}, study)
    for name, path in (study.get("earlier") or {}).items():
        if not Path(str(path)).is_file():
            errors.append(f"study.earlier.{name}: {path} is not a file (an earlier study's verdicts.csv; a relative path "
                          "is from the working directory, the project root under Snakemake) [rule: earlier studies' "
                          "per-seed CSVs]")
    h = heldout_settings(rl, study)
    if h["mode"] not in ("exact", "sampled"):
        errors.append(f"study.heldout.mode: {h['mode']!r} is not one of exact, sampled [rule: heldout modes]")
    elif h["mode"] == "exact" and not profile.source.exact_heldout:
        errors.append(f"study.heldout.mode: exact needs enumerable answers (the tiny tasks); profile.data: "
                      f"{profile.data} takes `sampled` [rule: exact held-out is tiny-only]")
    if not profile.source.exact_heldout and not h["max_tokens"]:
        errors.append(f"study.heldout.max_tokens: profile.data: {profile.data} needs a completion length (0 = the "
                      "tiny tasks' answer length) [rule: paper max_tokens]")
    if h["engine"] not in ("hf", "vllm"):
        errors.append(f"study.heldout.engine: {h['engine']!r} is not one of hf, vllm [rule: heldout engines]")
    if h["mode"] == "sampled" and max(study.get("heldout_k") or [1]) > h["samples"]:
        errors.append(f"study.heldout.samples: {h['samples']} samples per prompt cannot estimate pass@"
                      f"{max(study['heldout_k'])} (study.heldout_k) [rule: k <= samples]")
    ref = reference_n(study)
    for setting in names[1:]:
        ns = _axes(study, setting)["ns"]
        if not any(n > ref for n in ns):
            errors.append(f"study.ablations.{setting}.ns: no N above the reference N = {ref} (the smallest of "
                          "study.ns) to compare [rule: larger N arm]")
    return list(dict.fromkeys(errors))


def _premise_tail_errors(profile: Profile, rl: dict, study: dict, names: list[str]) -> list[str]:
    """``study.premise``, ``study.tail_pool``, ``study.decision`` and the settings on ``pool: tail``."""
    from brorl.training.settings import RLSettings

    errors = []
    for name in set(names) & {"premise", "prorl_late", "data_fresh", "data_tail"}:
        errors.append(f"study.ablations.{name}: the name is a folder of the study's other rules under results/study "
                      "[rule: reserved setting names]")
    if study.get("premise"):
        missing = [k for k in ("sample_budget", "plateau_slope") if k not in study["premise"]]
        if missing:
            errors.append(f"study.premise.{missing[0]}: required (the premise run's stated budget and slope "
                          "threshold) [rule: premise states its budget]")
        else:
            try:
                RLSettings.from_dict({**premise_stage(profile, rl, study), "seed": 0})
            except (TypeError, ValueError) as err:
                errors.append(f"study.premise: {err} [rule: RLSettings]")
    tail_users = [s for s in names if s != BASE and _axes(study, s).get("pool") == "tail"]
    if tail_users and not study.get("tail_pool"):
        errors.append(f"study.ablations.{tail_users[0]}.pool: `tail` needs study.tail_pool (the candidates scored "
                      "at the start) [rule: tail pool configured]")
    if study.get("tail_pool") and profile.data != "tasks":
        errors.append(f"study.tail_pool: needs exact pass rates (the tiny tasks); profile.data: {profile.data} "
                      "[rule: tail pool is tiny-only]")
    d = study.get("decision")
    if d and d.get("setting") not in names:
        errors.append(f"study.decision.setting: {d.get('setting')!r} is not a setting ({', '.join(names)}) "
                      "[rule: known settings]")
    elif d and d.get("prompts") == "train_pool" and _axes(study, d["setting"]).get("pool") != "tail":
        errors.append(f"study.decision.prompts: train_pool needs the decision setting {d['setting']!r} on `pool: tail` "
                      "(only tail-pool arms score their training prompts) [rule: decision on the training pool]")
    return errors


def _tail_family_errors(tasks: dict, study: dict) -> list[str]:
    """``study.tail_pool.families``: single-answer families of ``tasks.tasks`` (the pool keeps prompts by their one
    answer's exact pass rate)."""
    from brorl.tasks.families import FAMILIES

    tp = study.get("tail_pool") or {}
    errors = []
    for i, name in enumerate(tp.get("families") or []):
        if name not in (tasks.get("tasks") or []):
            errors.append(f"study.tail_pool.families[{i}]: {name!r} is not a family of tasks.tasks "
                          f"({', '.join(tasks.get('tasks') or [])}) [rule: tail pool families]")
        elif name in FAMILIES and FAMILIES[name].probe:
            errors.append(f"study.tail_pool.families[{i}]: {name!r} is a multi-answer probe family; the pool needs "
                          "single-answer families [rule: tail pool families]")
    return errors
