"""lm-eval task definitions of the tiny profile, shipped with the package (an lm-eval ``--include_path``).

``brorl_tiny_add.yaml``, ``brorl_tiny_multiple.yaml`` (one task per tiny family) and the group ``brorl_tiny.yaml``
are written by :func:`brorl.evaluation.tiny.write_shipped_tasks` with the default decoding (k, temperature and
generation length of :class:`brorl.evaluation.tiny.TinyDefaults`); they read the data from ``--metadata
'{"data_dir": ...}'``. :func:`brorl.evaluation.tiny.render_tasks` writes the same files with another decoding and
an absolute data path. ``utils.py`` holds the loader and the scorer. See :mod:`brorl.evaluation.tiny` for the
exact stock ``lm_eval`` command lines.
"""

from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parent
