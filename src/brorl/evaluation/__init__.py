"""Benchmark evaluation: lm-eval task definitions rendered from the registries, the sampling metrics (mean@k,
unbiased pass@k) and the per-(model, benchmark) runner.

- :mod:`brorl.evaluation.metrics`: ``pass_at_k``, ``powers_of_two``, ``metric_name``, ``sample_metrics``;
- :mod:`brorl.evaluation.tiny`: the tiny profile's lm-eval tasks (``brorl_tiny_<family>`` per evaluated family,
  group ``brorl_tiny``), :func:`render_tasks` and the stock ``lm_eval`` command lines; the hooks live in
  ``brorl/evaluation/lm_eval_tasks``;
- :mod:`brorl.evaluation.benchmarks`: the registry (benchmark name -> lm-eval task, renderer, category field);
- :mod:`brorl.evaluation.runner`: :func:`evaluate` (lm-eval hf backend, result JSON, content-keyed cache).

Importing this package loads neither lm-eval nor torch.
"""

from brorl.evaluation.metrics import metric_name, pass_at_k, powers_of_two, sample_metrics

_LAZY = {
    "evaluate": "brorl.evaluation.runner",
    "model_hash": "brorl.evaluation.runner",
    "render_tasks": "brorl.evaluation.tiny",
    "BENCHMARKS": "brorl.evaluation.benchmarks",
    "Benchmark": "brorl.evaluation.benchmarks",
    "get_benchmark": "brorl.evaluation.benchmarks",
    "register_benchmark": "brorl.evaluation.benchmarks",
    "benchmark_names": "brorl.evaluation.benchmarks",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["metric_name", "pass_at_k", "powers_of_two", "sample_metrics", *sorted(_LAZY)]
