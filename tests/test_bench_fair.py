"""benchmarks/bench_fair_throughput.py without its peers: the torch engines on a tiny saved model (exactly N x T
tokens although the end token is likely: the end token stops nothing), the ceiling fraction, and a table that never
rounds a loss into a tie or a win."""

import importlib.util
import sys

import pytest
import torch

from brorl.config import PROJECT_ROOT
from brorl.models.settings import ModelSettings
from brorl.models.sft import build_model

spec = importlib.util.spec_from_file_location("bench_fair", PROJECT_ROOT / "benchmarks/bench_fair_throughput.py")
bench = sys.modules["bench_fair"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


class _Tok:
    eos_token_id, pad_token_id = 1, 0

    def __len__(self):
        return 6


def row(engine, precision, tps, lo, hi, n=256, t=64):
    return {"engine": engine, "precision": precision, "n": n, "new_tokens": t, "prompt_tokens": 30,
            "tokens_per_s": tps, "tokens_per_s_min": lo, "tokens_per_s_max": hi, "samples_per_s": tps / t,
            "threads": "2", "load_avg": "1.00/1.00/1.00"}


@pytest.mark.parametrize("engine", ["hf", "shared_prompt", "prefix_tree", "prefix_tree+inverse_cdf",
                                    "prefix_tree+inverse_cdf+shared_kv"])
def test_torch_engines_generate_exactly_n_times_t_tokens(tmp_path, engine):
    torch.manual_seed(0)
    model = build_model(ModelSettings(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                                      tie_word_embeddings=False), _Tok(), seed=0)
    with torch.no_grad():
        model.lm_head.weight[1].fill_(0.0)
        model.lm_head.bias = None
        model.model.norm.weight.fill_(1.0)
    model.save_pretrained(tmp_path)
    rows = bench.torch_cells(engine, "fp32", tmp_path, [2, 3, 4], ns=[4, 8], tokens=[5], repeats=2, threads=1,
                             max_kv_gib=1.0)
    assert [(r["n"], r["new_tokens"], r["generated_tokens"], r["repeats"]) for r in rows] == [(4, 5, 20, 2),
                                                                                             (8, 5, 40, 2)]
    assert all(r["seconds_min"] <= r["seconds_median"] <= r["seconds_max"] for r in rows)


def test_torch_cells_skip_what_exceeds_the_memory_bound(tmp_path):
    model = build_model(ModelSettings(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32), _Tok(),
                        seed=0)
    model.save_pretrained(tmp_path)
    rows = bench.torch_cells("shared_prompt", "fp32", tmp_path, [2, 3], ns=[2, 4096], tokens=[64], repeats=1,
                             threads=1, max_kv_gib=0.01)
    assert [r["n"] for r in rows] == [2]


def test_ceiling_fraction_at_the_rows_precision():
    rows = [row("vllm", "fp32", 100.0, 90, 110), row("vllm", "bf16", 100.0, 90, 110),
            row("llama_cpp_batched", "q4_1", 100.0, 90, 110)]
    ceiling = [{"precision": "fp32", "shape": "square 2048", "gflops": 200.0},
               {"precision": "bf16", "shape": "square 2048", "gflops": 400.0}]
    bench.add_ceiling(rows, ceiling, params=100_000_000)
    assert rows[0]["ceiling_tokens_per_s"] == 1000.0 and rows[0]["ceiling_fraction"] == 0.1
    assert rows[1]["ceiling_tokens_per_s"] == 2000.0 and rows[1]["ceiling_fraction"] == 0.05
    assert rows[2]["ceiling_tokens_per_s"] == 2000.0


def test_a_loss_is_never_rounded_into_a_tie_or_a_win(tmp_path):
    assert bench.ratio_text(0.9996) == "0.999x"
    assert bench.ratio_text(1.2349) == "1.234x"
    close = [row("vllm", "fp32", 100.0, 95, 105), row("shared_prompt", "fp32", 99.96, 96, 104)]
    assert "not resolved" in bench.winner_line(close)
    apart = [row("vllm", "fp32", 150.0, 140, 160), row("shared_prompt", "fp32", 100.0, 96, 104)]
    assert bench.winner_line(apart) == ("Fastest: vllm/fp32, 1.500x the next (shared_prompt/fp32).")
    rows = close + [row("llama_cpp_batched", "f32", 50.0, 45, 55), row("vllm", "bf16", 200.0, 190, 210)]
    bench.write_md(tmp_path / "fair.md", rows, [], 135_000_000, "# title")
    text = (tmp_path / "fair.md").read_text()
    fp32 = text.split("**fp32, N = 256")[1].split("**16-bit")[0]
    assert "llama_cpp_batched | f32" in fp32 and "0.999x" in fp32 and "vllm | bf16" not in fp32
    assert "0.500x" in fp32
