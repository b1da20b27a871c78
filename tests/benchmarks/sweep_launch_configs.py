"""Exploration: segmented_rmsnorm launch configurations (rows per program x
warps) at the tap shapes of EAGLE-3 and K3 drafts, as a fraction of the
copy's bandwidth (medians of 7 interleaved do_bench runs, L2 flushed).

    python tests/benchmarks/sweep_launch_configs.py

Needs a CUDA GPU. docs/kernels.md quotes what it printed on an H200; it is
how the 4-rows-on-8-warps choice for 4096-wide taps was made, and why no
tiling reaches 0.97 of the copy at T = 2048 for 3 x 4096, 3 x 5120, 4 x 8192.
Not collected by pytest.
"""

from __future__ import annotations

import statistics
import sys

import torch
import triton
from triton.testing import do_bench

from dspark.kernels.segmented_rmsnorm import LaunchConfig, _launch

SHAPES = [(3, 4096), (3, 5120), (4, 8192), (3, 7168)]
TOKENS = [1024, 2048, 4096, 8192, 32768]
# (rows per program, warps)
CANDIDATES = [(1, 4), (1, 8), (2, 4), (2, 8), (4, 4), (4, 8), (8, 8), (8, 16), (16, 16)]


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    torch.manual_seed(0)
    spin = torch.randn(1 << 26, device=dev)
    for _ in range(300):  # clocks up before the first timing
        spin.mul_(1.0)
    torch.cuda.synchronize()
    for segments, hidden in SHAPES:
        weight = (torch.rand(segments, hidden, device=dev) + 0.5).to(torch.bfloat16)
        block = triton.next_power_of_2(hidden)
        for tokens in TOKENS:
            x = torch.randn(tokens, segments, hidden, device=dev, dtype=torch.bfloat16)
            y = torch.empty_like(x)
            ratios = {c: [] for c in CANDIDATES if c[0] * block <= 65536}
            for _ in range(7):  # interleaved, so drift hits every candidate alike
                copy = do_bench(lambda: y.copy_(x), warmup=25, rep=200)
                for rows, warps in ratios:
                    config = LaunchConfig(block, rows, warps, False)
                    kernel = do_bench(lambda: _launch(x, weight, y, 1e-5, False, config), warmup=25, rep=200)
                    ratios[(rows, warps)].append(copy / kernel)
            line = " ".join(f"r{r}w{w}:{statistics.median(v):.3f}" for (r, w), v in ratios.items())
            print(f"S={segments} H={hidden} T={tokens}: {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
