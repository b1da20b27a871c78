"""Host (CPU) time of one launch, without CUDA graphs: `out.copy_(x)`, the
public `segmented_rmsnorm`, the launch of its kernel as the public function
makes it (straight to the compiled kernel once compiled), and the same
launch through Triton's JIT, at a size where the GPU finishes each call
before the host has issued the next (T = 1, 5 x 7168 bf16 by default).

    python tests/benchmarks/bench_launch_overhead.py [--segments S --hidden H --calls N]

Prints microseconds of host time a call (median of 5 rounds of N calls,
no synchronisation inside a round) and each as a multiple of the copy's.
Needs a CUDA GPU. docs/kernels.md quotes what it printed on an H200. Not
collected by pytest.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from dspark.kernels import segmented_rmsnorm
from dspark.kernels.segmented_rmsnorm import _launch_through_triton, _run_kernel, choose_launch_config


def host_us(fn, calls: int) -> float:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(rounds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=7168)
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    x = torch.randn(1, args.segments, args.hidden, device=dev, dtype=torch.bfloat16)
    out = torch.empty_like(x)
    weight = torch.ones(args.segments, args.hidden, device=dev, dtype=torch.bfloat16)
    config = choose_launch_config(args.hidden, n_rows=1, num_segments=args.segments, device=dev)
    strides = x.stride()[:2]
    arguments = (x, weight, out, *strides, weight.stride(0), *strides, 1, 1e-5, args.segments, args.hidden,
                 config.block_size, config.block_rows, False, False, config.weight_first, config.split, False)
    grid = (args.segments * config.split, 1, 1)
    timings = {
        "copy_": host_us(lambda: out.copy_(x), args.calls),
        "segmented_rmsnorm": host_us(lambda: segmented_rmsnorm(x, weight, 1e-5, out=out), args.calls),
        "kernel launch alone": host_us(lambda: _run_kernel(x, strides, weight, out, strides, 1, args.segments,
                                                           args.hidden, 1e-5, False, config), args.calls),
        "Triton's JIT launch": host_us(lambda: _launch_through_triton(grid, arguments, config.num_warps), args.calls),
    }
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, T = 1, S = {args.segments}, "
          f"H = {args.hidden}, bf16; host time a call")
    for name, value in timings.items():
        print(f"  {name:<20} {value:6.1f} us   {value / timings['copy_']:.2f}x copy_")
    return 0


if __name__ == "__main__":
    sys.exit(main())
