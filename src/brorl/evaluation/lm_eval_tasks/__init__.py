"""The hook files of the project's lm-eval tasks, one per family of tasks (lm-eval imports them by path from the
rendered task folder, beside the YAMLs):

- ``utils.py``: the tiny task families' tasks (``brorl_tiny_<family>``, group ``brorl_tiny``), rendered by
  :mod:`brorl.evaluation.tiny`: the loader and the scorer (:func:`brorl.tasks.verify`);
- ``kind_utils.py``: the data catalog's benchmarks (``brorl_paper_<name>``, any kind), rendered by
  :mod:`brorl.evaluation.catalog_tasks`: the loader and one ``process_<kind>`` per module of :mod:`brorl.kinds`.

The task YAMLs themselves are not shipped: they are rendered from the registries at run time, and
``python -m brorl.evaluation.tiny DIR`` / ``python -m brorl.evaluation.catalog_tasks DIR`` write the portable form
(data from ``--metadata '{"data_dir": ...}'``) for the stock ``lm_eval`` CLI.
"""

from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parent
