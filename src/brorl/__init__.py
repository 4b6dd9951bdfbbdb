"""BroRL reproduction pipeline.

Organised by what a reader of the paper looks for:

- :mod:`brorl.theory`   -- BroRL Section 2: the mass-balance theorem, Lemma 2 and the token-level
  simulation of Figure 3.
- :mod:`brorl.config`   -- loading and validating the pipeline configuration (tiny / paper profiles).
- :mod:`brorl.tracking` -- one MLflow run per Snakemake rule.
"""

__version__ = "0.1.0"
