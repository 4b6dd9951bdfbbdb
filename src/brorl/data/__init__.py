"""External data of the paper profile: one catalog, the fetch code and the converters beside it.

- :mod:`brorl.data.catalog` -- the table: every external model, benchmark and training source (repository,
  revision, files, converter / reward kind, gating) and the name lists derived from it;
- :mod:`brorl.data.hub` -- pinned Hugging Face snapshots with a verified manifest (a local stand-in offline);
- :mod:`brorl.data.manifest` -- the verified folder every fetch shares: the sha256 manifest beside it, its checks,
  the atomic move into place and the fetch errors;
- :mod:`brorl.data.pins` -- which commit a source must resolve to, and the rules' pin checks;
- :mod:`brorl.data.wheel` -- a model from a pinned package-index wheel (its GGUF member converted);
- :mod:`brorl.data.benchmarks` -- the benchmark converters: a snapshot (or a generated kind's generator) -> JSONL,
  each row converted by its kind (:mod:`brorl.kinds`);
- :mod:`brorl.data.training` -- the training-source converter (splits) and the reward of its records (by kind);
- :mod:`brorl.data.source` -- the paper training data as a data source kind (``PaperSource``, ``profile.data: paper``);
- :mod:`brorl.data.blend` -- the papers' own description of their data blend (``paper_data_blend.yaml``).
"""
