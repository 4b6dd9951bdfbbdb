"""Time the full Figure-3 simulation (5 values of N x 1,000 steps x 3 seeds) and compare with a floor.

    python benchmarks/bench_simulation.py [--threads T]

Prints the wall time per run and in total, the work per step (bytes over memory, flops, binary searches),
and how far the measured step time is from a floor made of the same machine's measured streaming rate
and binary-search rate.
"""

import argparse
import time

import torch

from brorl.theory.simulation import SimulationSettings, run_one, work_per_step


def stream_rate(v: int, repeats: int = 2000) -> float:
    """Bytes/s of a simple elementwise pass (read 2 arrays, write 1) at the simulation's size."""
    a, b, c = torch.rand(v), torch.rand(v), torch.empty(v)
    torch.add(a, b, out=c)
    t0 = time.perf_counter()
    for _ in range(repeats):
        torch.add(a, b, out=c)
    return 12.0 * v * repeats / (time.perf_counter() - t0)


def search_rate(v: int, n: int = 51_200, repeats: int = 50) -> float:
    """Sorted binary searches per second into a CDF of size v."""
    cdf = torch.cumsum(torch.rand(v), 0)
    u = torch.sort(torch.rand(n) * cdf[-1]).values
    torch.searchsorted(cdf, u)
    t0 = time.perf_counter()
    for _ in range(repeats):
        torch.searchsorted(cdf, u)
    return n * repeats / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    s = SimulationSettings()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, V={s.vocab_size:,}, "
          f"|P|={s.num_correct:,}, {s.steps} steps, seeds {s.seeds}")
    bw, sr = stream_rate(s.vocab_size), search_rate(s.vocab_size)
    print(f"measured: elementwise streaming {bw / 1e9:.1f} GB/s, sorted binary searches {sr / 1e6:.1f} M/s")
    print(f"{'N':>7} {'s/run':>7} {'ms/step':>8} {'floor ms':>9} {'x floor':>8}  work/step")
    total = 0.0
    t_all = time.perf_counter()
    for n in s.n_rollouts:
        times = [run_one(s, n, seed).seconds for seed in s.seeds]
        total += sum(times)
        per_step = 1e3 * sum(times) / (len(times) * s.steps)
        w = work_per_step(s, n)
        floor = 1e3 * (w["bytes"] / bw + w["searches"] / sr)
        print(f"{n:>7} {sum(times) / len(times):>7.2f} {per_step:>8.3f} {floor:>9.3f} {per_step / floor:>8.1f}"
              f"  {w['bytes'] / 1e6:.1f} MB, {w['flops'] / 1e6:.1f} Mflop, {int(w['searches']):,} searches")
    print(f"full Figure-3 grid ({len(s.n_rollouts)} N x {len(s.seeds)} seeds x {s.steps} steps): "
          f"{time.perf_counter() - t_all:.1f} s wall (target < 60 s)")


if __name__ == "__main__":
    main()
