"""The N-scaling study (issue 7): when does broadening exploration (more rollouts per prompt) beat more steps?

- :mod:`brorl.study.plan`: settings x N x seed arms from a start checkpoint (the premise test measures whether it saturated) at equal generated samples
  per step and in total; each ablation is a set of config axes over the same arm runner.
- :mod:`brorl.study.heldout`: exact held-out metrics of a checkpoint (mean@k, pass@k, histograms, tail and
  multi-answer probes) from teacher-forced probabilities.
- :mod:`brorl.study.report`: ``results/study/summary.md``: per setting, the best larger-N arm against N=16
  with a seed-level test (it decides) and a test over prompts (secondary).
"""
