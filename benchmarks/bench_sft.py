"""Time the tiny model's hot paths: one SFT step and the samplers.

    python benchmarks/bench_sft.py [--threads T] [--model-dir resources/tiny/models/sft]

1. One SFT step (batch 256 of the default task mix) with eager and SDPA attention.
2. Sampling throughput (samples/s) of the shared-prompt KV-cache sampler against HF
   ``generate(num_return_sequences=N)``, at N = 16 and N = 512, ~1k and ~8k samples per call.
3. Exact teacher-forced Q_pos for 200 prompts.

Without --model-dir a randomly initialised model is used (finished rows stop early only for a trained
model, so the sampler numbers are a pessimistic bound then).
"""

import argparse
import time

import torch

from brorl.models.sampling import hf_generate_token_ids, sample_token_ids
from brorl.models.scoring import encode, exact_answer_probability
from brorl.models.settings import ModelSettings, SFTSettings
from brorl.models.sft import ExampleStream, build_model, load_model, tokenizer_corpus
from brorl.models.tokenizer import build_tokenizer
from brorl.tasks import TaskSettings, format_prompt, generate_split, max_new_tokens


def best_of(fn, repeats=3):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model-dir", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ts, sft = TaskSettings(), SFTSettings()
    tok = build_tokenizer(tokenizer_corpus(ts))
    stream = ExampleStream(tok, ts, sft)
    ids, labels = stream.batch(0)
    print(f"threads {args.threads}; batch {tuple(ids.shape)}")
    for attn in ("eager", "sdpa"):
        model = build_model(ModelSettings(attn_implementation=attn), tok)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step():
            logits = model(input_ids=ids).logits[:, :-1]
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                     labels[:, 1:].reshape(-1), ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            opt.step()

        step()
        print(f"SFT step ({attn}): {best_of(step, 5):.3f} s")

    if args.model_dir:
        model, tok = load_model(args.model_dir)
    else:
        model = build_model(ModelSettings(), tok)
    model.eval()
    recs = generate_split("add", "validation", 512, ts.seed, settings=ts)
    prompts = [encode(tok, format_prompt(tok, r)) for r in recs]
    gen = max_new_tokens(ts)
    for total in (1024, 8192):
        for n in (16, 512):
            p = prompts[: max(1, total // n)]
            for name, fn in (("kv-shared", sample_token_ids), ("hf-generate", hf_generate_token_ids)):
                t = best_of(lambda: fn(model, p, n, gen, tok.eos_token_id, tok.pad_token_id, seed=0,
                                       chunk_samples=total), repeats=2)
                print(f"sample N={n:4d} x {len(p):3d} prompts ({n * len(p)} per call) {name:12s}: "
                      f"{n * len(p) / t:8.0f} samples/s")
    t = best_of(lambda: exact_answer_probability(model, tok, recs[:200]))
    print(f"exact Q_pos, 200 prompts: {t:.3f} s")


if __name__ == "__main__":
    main()
