"""RL training core: the ProRLv2 recipe with BroRL's rollout scaling on TRL's ``GRPOTrainer``.

- :mod:`brorl.training.trainer`: the algorithm (dynamic sampling, REINFORCE++-baseline advantages, clip-higher
  PPO with k2 KL, the learning-rate rule) as a ``GRPOTrainer`` subclass plus pure functions;
- :mod:`brorl.training.settings`: :class:`RLSettings`;
- :mod:`brorl.training.stage`: :func:`train_stage`, the resumable stage runner (metrics.csv, probes,
  checkpoints, final HF folder).

TRL is imported lazily: ``import brorl.training`` stays cheap.
"""

from brorl.training.settings import RLSettings

_LAZY = {
    "train_stage": "brorl.training.stage", "read_metrics": "brorl.training.stage",
    "METRIC_COLUMNS": "brorl.training.stage", "latest_checkpoint": "brorl.training.stage",
    "BroRLTrainer": "brorl.training.trainer", "learning_rate": "brorl.training.trainer",
    "reinforce_pp_advantages": "brorl.training.trainer", "dynamic_sampling": "brorl.training.trainer",
    "group_has_signal": "brorl.training.trainer", "clipped_surrogate": "brorl.training.trainer",
    "k2_kl": "brorl.training.trainer",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["RLSettings", *sorted(_LAZY)]
