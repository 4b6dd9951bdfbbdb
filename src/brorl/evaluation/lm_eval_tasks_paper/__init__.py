"""lm-eval task definitions of the paper profile, shipped with the package (an lm-eval ``--include_path``).

One generate-until task per paper benchmark, ``brorl_paper_<name>.yaml`` (``aime24``, ``aime25``, ``amc``,
``math500``, ``minerva``, ``olympiadbench``, ``gpqa_diamond``, ``ifeval``, ``reasoning_gym``), written by
:func:`brorl.evaluation.paper_benchmarks.write_shipped_tasks` with the paper's decoding (k = 16, T = 0.6,
top_p = 0.95, 32,768 new tokens) and reading the data from ``--metadata '{"data_dir": ...}'``
(``<data_dir>/<name>/test.jsonl``, made by :func:`brorl.data.benchmarks.prepare_benchmark`).
:func:`brorl.evaluation.paper_benchmarks.render_tasks` writes the same files with another decoding and an
absolute data path. The code benchmarks (``apps``, ``codecontests``, ``codeforces``, ``taco``) are not shipped
here (not in the default list): ``render_tasks(..., names=CODE_BENCHMARK_NAMES)`` writes them.
``paper_utils.py`` holds the loader and the scorers (importable as
``brorl.evaluation.lm_eval_tasks_paper.paper_utils`` too). See :mod:`brorl.evaluation.paper_benchmarks` for the
stock ``lm_eval`` command line.
"""

from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parent
