"""The hooks of the paper profile's lm-eval tasks: ``paper_utils.py`` (the loader and the scorers; importable as
``brorl.evaluation.lm_eval_tasks_paper.paper_utils`` too).

The task YAMLs are not shipped: :func:`brorl.evaluation.paper_benchmarks.render_tasks` renders one generate-until
task per paper benchmark, ``brorl_paper_<name>.yaml``, from its catalog row (:mod:`brorl.data.catalog`) at run time
and copies ``paper_utils.py`` beside them. ``python -m brorl.evaluation.paper_benchmarks DIR [NAME ...]`` writes the
portable form for the stock ``lm_eval`` CLI: the paper's decoding (k = 16, T = 0.6, top_p = 0.95, 32,768 new
tokens), the data read from ``--metadata '{"data_dir": ...}'`` (``<data_dir>/<name>/test.jsonl``, made by
:func:`brorl.data.benchmarks.prepare_benchmark`); by default the catalog's default list (``aime24``, ``aime25``,
``amc``, ``math500``, ``minerva``, ``olympiadbench``, ``gpqa_diamond``, ``ifeval``, ``reasoning_gym``); the code
benchmarks (``apps``, ``codecontests``, ``codeforces``, ``taco``) when named. See
:mod:`brorl.evaluation.paper_benchmarks` for the stock ``lm_eval`` command line.
"""

from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parent
