"""q.K^T of one decode step's generated part, over the two key layouts of ``brorl.models.kv_cache.PreallocatedLayer``
(issue 31): keys held [B, H, S, D] (``keys_transposed=False``) or [B, H, D, S] (``True``, what a 16-bit
``SharedPromptLayer`` on the CPU uses). SmolLM2-135M's shapes: 3 key heads, 3 query heads per key head, head size 64;
B = 256 rows; t positions filled of 264. Prints ms per batched matmul (mean of 50 after 5 warm-ups), side by side,
and whether the two give the same numbers.

    python benchmarks/bench_transposed_keys.py [--threads 2]
"""

from __future__ import annotations

import argparse
import time

import torch

from brorl.models.kv_cache import PreallocatedLayer


def bench(f, n: int = 50) -> float:
    for _ in range(5):
        f()
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n * 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    b, hk, g, d, cap = 256, 3, 3, 64, 264
    print(f"torch {torch.__version__}, {a.threads} threads; q [{b}, {hk}, {g}, {d}] @ K^T [{b}, {hk}, {d}, t]")
    for dtype in (torch.bfloat16, torch.float32):
        for t in (32, 128, 250):
            gen = torch.Generator().manual_seed(0)
            q = torch.randn(b, hk, g, d, generator=gen).to(dtype)
            k = torch.randn(b, hk, t, d, generator=gen).to(dtype)
            usual, transposed = (PreallocatedLayer(k, k, cap, keys_transposed=kt) for kt in (False, True))
            ku, kt = usual.keys.transpose(-1, -2), transposed.keys.transpose(-1, -2)  # what attend's q @ k^T reads
            ms_u, ms_t = bench(lambda: q @ ku), bench(lambda: q @ kt)
            same = torch.equal(q @ ku, q @ kt)
            print(f"{str(dtype):15s} t={t:3d}  [B, H, S, D] {ms_u:6.3f} ms   [B, H, D, S] {ms_t:6.3f} ms   "
                  f"{ms_u / ms_t:4.2f}x   same numbers: {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
