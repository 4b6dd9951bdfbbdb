"""The data catalog: every external model, benchmark and training source of the paper profile, in one place.

One row per source, with what the rest of the package needs to fetch, convert and score it:

- :data:`PAPER_MODELS`: hub checkpoints (``repo_id``, ``revision`` a branch, ``commit`` the pin that is fetched,
  ``dest``; :func:`brorl.data.hub.fetch_paper_model`);
- :data:`PAPER_BENCHMARKS`: the default evaluation set (``config/paper.yaml``; their lm-eval tasks are rendered
  from these rows, :mod:`brorl.evaluation.catalog_tasks`);
- :data:`CODE_BENCHMARKS`: BroRL Table 4's code benchmarks (registered, evaluated when a config asks for them);
- :data:`TRAIN_SOURCES`: the RL training sources with a computable reward (:mod:`brorl.data.training`), and
  :data:`LEFT_OUT`, the ones without.

A benchmark or training source is a :class:`BenchmarkSpec`: ``repo_id`` and ``revision`` (``"main"``: a
placeholder; a profile pins the commit in its config, ``evaluation.revisions`` / ``rl.data.revisions``), ``files``
(globs, also the fetch's ``allow_patterns``), ``fields`` (column names), ``kind`` -- the module of
:mod:`brorl.kinds` that converts its rows, scores its completions and rewards its training records (math, gpqa,
ifeval, reasoning_gym, code) --,
``gated`` (the terms of a gated repository; licences are not recorded), ``paper`` and ``note`` (where it comes
from, how sure we are). :func:`rows` lists the whole catalog as one table.

The name lists the rest of the package uses are derived here, never copied: :data:`MATH_BENCHMARKS` (BroRL
Table 3's columns, ``brorl.tables``), :data:`BENCHMARK_NAMES`, :data:`CODE_BENCHMARK_NAMES`, :data:`RG_CATEGORIES`
(BroRL Table 5's columns, the Reasoning Gym generator). The paper's own description of its data blend (sizes,
how sure the ids are) is :mod:`brorl.data.blend`.

Adding a paper benchmark: a row here (a new kind: also its module ``brorl/kinds/<kind>.py``), its pin in
``config/paper.yaml``, its paper values in ``brorl/tables/paper_reference.yaml``. Its lm-eval task is rendered from
the row at run time (nothing generated to commit).

This module only holds data. It imports the standard library and the Reasoning Gym categories of
:mod:`brorl.kinds.reasoning_gym`, whose module brings numpy and :mod:`brorl.rewards` (0.17 CPU-s to import the
catalog, from 0.02 before issue 33 step 3; 2026-12-06, load ~10): the DAG imports all of them anyway.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Mapping

from brorl.kinds.reasoning_gym import RG_CATEGORIES  # noqa: F401 -- BroRL Table 5's columns, read from here

#: The paper-profile checkpoints (paper.md §3.1 and §6). ``dest`` is relative to the project root. ``commit``: the
#: pinned commit, which is what is fetched (issue 17: commits seen in public references); the branch is a label:
#: NVIDIA moved ``main`` once already (v1 -> v2), so a moved branch is a warning, and the pinned commit is still
#: fetched (issue 27).
PAPER_MODELS: dict[str, dict[str, str]] = {
    # ProRLv2 (3K steps), the checkpoint both BroRL arms continue from [inferred from identical numbers].
    "prorl": {
        "repo_id": "nvidia/Nemotron-Research-Reasoning-Qwen-1.5B",
        "revision": "main",
        "commit": "c62ac5e70bd578a9235aa9d8e11fff2f1f63d4a0",
        "dest": "resources/models/prorl",
    },
    # The released BroRL model [paper.md §6: branch/revision `brorl`].
    "brorl-released": {
        "repo_id": "nvidia/Nemotron-Research-Reasoning-Qwen-1.5B",
        "revision": "brorl",
        "commit": "3441fcdf8c6e81a2959e6352ff50122e3c677d72",
        "dest": "resources/models/brorl-released",
    },
    # ProRL v1 (the model's main before v2). Not used by the paper profile. Public references give only the
    # prefix of its commit (b8904889...), which is not a pin: fetch_paper_model refuses it unless
    # allow_unpinned=True, and the manifest then records the commit actually fetched.
    "prorl-v1": {
        "repo_id": "nvidia/Nemotron-Research-Reasoning-Qwen-1.5B",
        "revision": "v1",
        "dest": "resources/models/prorl-v1",
    },
}

GPQA_TERMS = ("share your contact information with the authors, and do not reveal examples from the dataset "
              "in plain text or images online")
"""The conditions the gated GPQA repository asks to accept (its card: no examples online, to keep it out of
training corpora). Hence its problems and completions are not pushed or logged by default."""

@dataclass(frozen=True)
class BenchmarkSpec:
    """Where one benchmark's problems come from.

    ``fields`` maps a role to the candidate column names, first present wins: math ``problem`` / ``answer`` /
    ``id``; gpqa ``problem`` / ``correct`` / ``incorrect_1..3`` / ``id`` / ``domain``; ifeval ``problem`` /
    ``key`` / ``instruction_id_list`` / ``kwargs``. An empty ``id`` tuple means "no id column": the id is
    ``<file stem>-<row>``. ``files`` are globs over the snapshot's paths (``*`` crosses ``/``); they are also
    the fetch's ``allow_patterns``, so nothing else is downloaded.
    """

    name: str
    kind: str
    repo_id: str | None
    revision: str | None = "main"
    revision_pinned: bool = False
    files: tuple[str, ...] = ()
    fields: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    expected_size: int | None = None
    paper: str = ""
    note: str = ""
    where: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Row filter: keep a row only when, for every ``column: values`` here, the column's value, lower-cased with
    everything but letters and digits removed, is one of ``values`` (``"code_contests"`` -> ``"codecontests"``).
    Used by the code benchmarks, which share one file, and by Eurus-2's code rows (parquet: filtered in Arrow)."""
    gated: str = ""
    """Non-empty for a gated repository: the terms to accept on its page (a token is needed, and its problems and
    completions stay local unless ``checkpoints.share_gated`` says otherwise)."""
    skip_unusable_gold: bool = False
    """Training sources: skip (and count) maths rows whose gold answer is empty instead of failing."""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["files"] = list(self.files)
        d["fields"] = {k: list(v) for k, v in self.fields.items()}
        if self.where:
            d["where"] = {k: list(v) for k, v in self.where.items()}
        # absent when unused: the cached requests of the other benchmarks stay as they were
        for key in ("where", "gated", "skip_unusable_gold"):
            if not d.get(key):
                d.pop(key, None)
        return d

    @property
    def generated(self) -> bool:
        return self.repo_id is None


def _generated_rg(*, paper: str, note: str) -> BenchmarkSpec:
    """Reasoning Gym: generated locally by the pinned reasoning-gym package (nothing to fetch)."""
    return BenchmarkSpec("reasoning_gym", "reasoning_gym", None, revision=None, revision_pinned=True, paper=paper,
                         note=note)


_MATH = {"problem": ("problem", "question"), "answer": ("answer", "final_answer")}

PAPER_BENCHMARKS: dict[str, BenchmarkSpec] = {
    "aime24": BenchmarkSpec(
        "aime24", "math", "HuggingFaceH4/aime_2024", files=("data/*.parquet",),
        fields={**_MATH, "id": ("id",)}, expected_size=30,
        paper="BroRL Table 3 AIME24 (ProRL v1: math follows DeepScaleR / SimpleRL)",
        note="Same repository as brorl/paper_data_blend.yaml. Which copy the authors used is not stated "
             "(DeepScaleR ships its own JSON in its code repository)."),
    "aime25": BenchmarkSpec(
        "aime25", "math", "opencompass/AIME2025", files=("aime2025-I.jsonl", "aime2025-II.jsonl"),
        fields={**_MATH, "id": ()}, expected_size=30,
        paper="BroRL Table 3 AIME25",
        note="Parts I and II (15 + 15); no id column, ids are '<file stem>-<row>'. Copy not stated by the papers."),
    "amc": BenchmarkSpec(
        "amc", "math", "AI-MO/aimo-validation-amc", files=("data/*.parquet",),
        fields={**_MATH, "id": ("id",)}, expected_size=83,
        paper="BroRL Table 3 AMC (ProRL v1: AMC2022 + AMC2023)",
        note="83 AMC 12 2022/2023 problems; answers are stored as floats (142.0), written as integers."),
    "math500": BenchmarkSpec(
        "math500", "math", "HuggingFaceH4/MATH-500", files=("test.jsonl",),
        fields={**_MATH, "id": ("unique_id", "id")}, expected_size=500,
        paper="BroRL Table 3 MATH",
        note="'MATH' taken to be MATH-500 (the DeepScaleR convention ProRL follows) [inferred]."),
    "minerva": BenchmarkSpec(
        "minerva", "math", "math-ai/minervamath", files=("test.jsonl",),
        fields={**_MATH, "id": ("id", "idx")}, expected_size=272,
        paper="BroRL Table 3 Minerva",
        note="A public copy of the 272-problem Minerva Math set; the authors' copy is not stated."),
    "olympiadbench": BenchmarkSpec(
        "olympiadbench", "math", "Hothan/OlympiadBench", files=("OlympiadBench/OE_TO_maths_en_COMP/*",),
        fields={"problem": ("question", "problem"), "answer": ("final_answer", "answer"), "id": ("id",)},
        expected_size=674,
        paper="BroRL Table 3 OlympiadBench",
        note="The open-ended, text-only, English maths competition subset (DeepScaleR's choice) [inferred]; "
             "final_answer is a list (joined with ', '). At the pinned commit the subset is one file, "
             "OlympiadBench/OE_TO_maths_en_COMP/OE_TO_maths_en_COMP.parquet, of 674 rows (public loaders that pin "
             "it say so; the 675 this row gave before was DeepScaleR's count, not checked here)."),
    "gpqa_diamond": BenchmarkSpec(
        "gpqa_diamond", "gpqa", "Idavidrein/gpqa", files=("gpqa_diamond.csv",),
        fields={"problem": ("Question",), "correct": ("Correct Answer",),
                "incorrect_1": ("Incorrect Answer 1",), "incorrect_2": ("Incorrect Answer 2",),
                "incorrect_3": ("Incorrect Answer 3",), "id": ("Record ID",), "domain": ("High-level domain",)},
        expected_size=198,
        gated=GPQA_TERMS,
        paper="ProRL v1 GPQA (BroRL reports none); ProRL names spawn99/GPQA-diamond-ClaudeR1",
        note="ProRL's copy, spawn99/GPQA-diamond-ClaudeR1 (also in brorl/paper_data_blend.yaml), keeps the "
             "question and the correct answer's text but, going by its uploader's script, not the three "
             "distractors, so it cannot be asked as multiple choice. The canonical (gated: accept the terms "
             "and use a token) GPQA repository holds the same 198 diamond questions with all four options."),
    "ifeval": BenchmarkSpec(
        "ifeval", "ifeval", "google/IFEval", files=("ifeval_input_data.jsonl",),
        fields={"problem": ("prompt",), "key": ("key",), "instruction_id_list": ("instruction_id_list",),
                "kwargs": ("kwargs",)},
        expected_size=541,
        paper="ProRL v1 IFEval (BroRL reports none)",
        note="The canonical 541 prompts (lm-eval's ifeval task reads the same repository)."),
    "reasoning_gym": _generated_rg(
        paper="BroRL Table 5 (11 category averages); ProRL v1: 100 held-out samples per task",
        note="Generated locally by the reasoning-gym package (pinned in requirements.txt), no download."),
}


_PRIME_CODE = {"problem": ("prompt", "question", "problem", "description"),
               "tests": ("reward_model", "input_output", "tests", "test_cases"),
               "id": ("problem_id", "id", "task_id"), "data_source": ("data_source",)}
_PRIME_NOTE = ("PRIME-RL/Eurus-2-RL-Data validation.parquet holds 1,024 math and 1,024 code problems (its card); "
               "the code rows are split by their data_source column. ProRL v1: 'Code uses the PRIME validation set "
               "(APPS, CodeContests, Codeforces [MatrixStudio/Codeforces-Python-Submissions], TACO)'. That this "
               "file is that set is inferred (as in brorl/paper_data_blend.yaml's prime_code_validation); the "
               "data_source spellings are inferred too (the report lists the values the snapshot holds). Rows: "
               "problem = the last user message of 'prompt' (PRIME's system prompt dropped), tests = "
               "reward_model.ground_truth; ids are 'validation-<row>' (no id column).")


def _code_spec(name: str, sources: tuple[str, ...], extra_note: str = "") -> BenchmarkSpec:
    return BenchmarkSpec(
        name, "code", "PRIME-RL/Eurus-2-RL-Data", files=("validation.parquet",), fields=dict(_PRIME_CODE),
        where={"data_source": sources},
        paper=f"BroRL Table 4 {name} (ProRL v1: the PRIME validation set; binary rewards for code)",
        note=_PRIME_NOTE + extra_note)


CODE_BENCHMARKS: dict[str, BenchmarkSpec] = {
    "apps": _code_spec("apps", ("apps",)),
    "codecontests": _code_spec("codecontests", ("codecontests",)),
    "codeforces": _code_spec(
        "codeforces", ("codeforces",),
        " The project's data blend lists MatrixStudio/Codeforces-Python-Submissions for codeforces: the upstream "
        "of PRIME's codeforces rows, not a test set in the sandbox's format."),
    "taco": _code_spec("taco", ("taco",)),
}
"""BroRL Table 4's code benchmarks (kind ``code``, scored by :func:`brorl.sandbox.code_reward`). Kept apart from
:data:`PAPER_BENCHMARKS` (what ``config/paper.yaml`` evaluates by default); :func:`benchmark_spec` knows both."""


def benchmark_spec(name: str) -> BenchmarkSpec:
    try:
        return PAPER_BENCHMARKS[name] if name in PAPER_BENCHMARKS else CODE_BENCHMARKS[name]
    except KeyError:
        raise ValueError(f"unknown paper benchmark {name!r}; known: "
                         f"{sorted([*PAPER_BENCHMARKS, *CODE_BENCHMARKS])}") from None

def is_gated(name: str) -> bool:
    """Whether ``name`` is a paper benchmark from a gated repository (GPQA)."""
    spec = PAPER_BENCHMARKS.get(name) or CODE_BENCHMARKS.get(name)
    return bool(spec is not None and spec.gated)

TRAIN_SOURCES: dict[str, BenchmarkSpec] = {
    "deepscaler": BenchmarkSpec(
        "deepscaler", "math", "agentica-org/DeepScaleR-Preview-Dataset", files=("deepscaler.json",),
        fields={**_MATH, "id": ()},
        skip_unusable_gold=True,
        paper="ProRL v1 training blend: math, DeepScaleR, 40K, binary reward [paper]",
        note="About 40.3K problems in deepscaler.json (brorl/paper_data_blend.yaml); ids 'deepscaler-<row>'. Rows "
             "with an empty gold answer (the dataset's discussion #4 reports 6; upstream math.json has '' answers) "
             "are skipped and counted (train_data.json: sources.deepscaler.skipped.no_gold)."),
    "eurus2_code": BenchmarkSpec(
        "eurus2_code", "code", "PRIME-RL/Eurus-2-RL-Data", files=("train.parquet",), fields=dict(_PRIME_CODE),
        where={"ability": ("code",)},
        paper="ProRL v1 training blend: code, Eurus-2-RL / PRIME, 24K, fraction of tests passed [paper]",
        note="train.parquet mixes math and code (verl layout: data_source, prompt, ability, reward_model); the "
             "code rows are those with ability == 'code' [inferred]. ProRL's 24K selection is not published, so "
             "every code row with usable tests is kept [our choice]."),
    "reasoning_gym": _generated_rg(
        paper="ProRL v1 training blend: Reasoning Gym, 96 tasks, 37K, continuous reward [paper]",
        note="Generated by reasoning-gym 0.1.25 over the 11 categories the evaluation uses (104 tasks) with "
             "seed RG_TRAIN_SEED; ProRL's 96-task list and settings are not given [not stated]."),
}
"""The training sources with a computable reward. ``reward`` kind = the spec's kind."""

LEFT_OUT = {
    "scp116k": "STEM: ProRL kept 25K of 274K with a GPT-4o judge; the judged subset is not public",
    "llama_nemotron_if": "instruction following: ProRL's 10K prompts and their reward are not specified",
}


MATH_BENCHMARKS = tuple(name for name, spec in PAPER_BENCHMARKS.items() if spec.kind == "math")
"""BroRL Table 3's benchmarks (aime24, aime25, amc, math500, minerva, olympiadbench), in the table's order."""
BENCHMARK_NAMES = tuple(PAPER_BENCHMARKS)
"""The default evaluation list (``config/paper.yaml``, the portable task folder's default)."""
CODE_BENCHMARK_NAMES = tuple(CODE_BENCHMARKS)
"""BroRL Table 4 (apps, codecontests, codeforces, taco): registered and renderable, not in the default list."""
ALL_BENCHMARK_NAMES = (*BENCHMARK_NAMES, *CODE_BENCHMARK_NAMES)


def rows() -> list[dict]:
    """The whole catalog as one table, one row per source: ``id``, ``role`` (model | benchmark | train),
    ``repo_id``, ``revision``, ``commit`` (a model's pin; data is pinned by the profile's config), ``files``,
    ``kind`` (converter and reward kind; None for a model), ``gated``, ``note``."""
    out = [{"id": name, "role": "model", "repo_id": m["repo_id"], "revision": m["revision"],
            "commit": m.get("commit"), "files": [], "kind": None, "gated": False, "note": m["dest"]}
           for name, m in PAPER_MODELS.items()]
    for role, table in (("benchmark", {**PAPER_BENCHMARKS, **CODE_BENCHMARKS}), ("train", TRAIN_SOURCES)):
        out += [{"id": name, "role": role, "repo_id": s.repo_id, "revision": s.revision, "commit": None,
                 "files": list(s.files), "kind": s.kind, "gated": bool(s.gated), "note": s.note}
                for name, s in table.items()]
    return out
