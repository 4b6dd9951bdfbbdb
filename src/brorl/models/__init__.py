"""The tiny stand-in model: character-level tokenizer, Llama/Qwen3 causal LM, supervised warm start,
exact answer probabilities, a shared-prompt sampler and the per-prompt difficulty estimate.

Entry points for the pipeline: :func:`train_sft`, :func:`estimate_difficulty`, :func:`plot_difficulty`
(with :func:`brorl.tasks.write_splits` before them).
"""

from brorl.models.difficulty import BINS, difficulty_histogram, estimate_difficulty, plot_difficulty
from brorl.models.scoring import (answer_string_probabilities, candidate_probabilities, exact_answer_probability,
                                  sequence_logprobs)
from brorl.models.settings import DifficultySettings, ModelSettings, SFTSettings
from brorl.models.sft import build_model, evaluate_exact, load_model, save_model_folder, train_sft
from brorl.models.sampling import decode_completions, hf_generate_token_ids, sample_token_ids
from brorl.models.tokenizer import build_tokenizer

__all__ = ["BINS", "difficulty_histogram", "estimate_difficulty", "plot_difficulty", "answer_string_probabilities",
           "candidate_probabilities", "exact_answer_probability", "sequence_logprobs", "DifficultySettings",
           "ModelSettings", "SFTSettings", "build_model", "evaluate_exact", "load_model", "save_model_folder",
           "train_sft", "decode_completions", "hf_generate_token_ids", "sample_token_ids", "build_tokenizer"]
