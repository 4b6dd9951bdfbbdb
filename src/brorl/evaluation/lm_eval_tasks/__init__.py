"""The hooks of the tiny profile's lm-eval tasks: ``utils.py`` (the loader and the scorer).

The task YAMLs themselves are not shipped: :func:`brorl.evaluation.tiny.render_tasks` renders
``brorl_tiny_<family>.yaml`` (one task per evaluated family of :data:`brorl.tasks.FAMILIES`) and the group
``brorl_tiny.yaml`` from the family registry at run time and copies ``utils.py`` beside them;
``python -m brorl.evaluation.tiny DIR`` writes the portable form (data from ``--metadata '{"data_dir": ...}'``) for
the stock ``lm_eval`` CLI. See :mod:`brorl.evaluation.tiny` for the exact command lines.
"""

from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parent
