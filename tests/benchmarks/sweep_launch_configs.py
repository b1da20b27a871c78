"""Exploration: segmented_rmsnorm launch configurations at the tap shapes
of EAGLE-3 and K3 drafts.

    python tests/benchmarks/sweep_launch_configs.py           # rows x warps, T >= 1024
    python tests/benchmarks/sweep_launch_configs.py --small   # split row-segments, T <= 64
    python tests/benchmarks/sweep_launch_configs.py --shapes 3x4096,1x4096 \
        --candidates r1w8,r4w8 --tokens 2048,32768         # some shapes, tiles, T

`--shapes`, `--candidates` (rows `r`, warps `w`) and `--tokens` narrow the
first sweep, which then prints each median with the range of the 7 runs.

The first times rows per program x warps as a fraction of the copy's
bandwidth (medians of 7 interleaved do_bench runs, L2 flushed): it is how the
4-rows-on-8-warps choice for 4096-wide taps was made, and why no tiling
reaches 0.97 of the copy at T = 2048 for 3 x 4096, 3 x 5120, 4 x 8192.
`--small` times programs per row-segment (`split`) at T <= 64, as a multiple
of the copy's latency, both with do_bench (L2 flushed; the better of two
medians) and under CUDA-graph replay (100 calls): it set
`split_for` and `MAX_SPLIT`. Needs a CUDA GPU. docs/kernels.md
quotes what it printed on an H200. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys

import torch
import triton
from triton.testing import do_bench

from bench_segmented_rmsnorm import graph_replay_ms  # the script's own folder is on sys.path

from dspark.kernels.segmented_rmsnorm import LaunchConfig, _launch, choose_launch_config

SHAPES = [(3, 4096), (3, 5120), (4, 8192), (3, 7168)]
TOKENS = [1024, 2048, 4096, 8192, 32768]
# (rows per program, warps)
CANDIDATES = [(1, 4), (1, 8), (2, 4), (2, 8), (4, 4), (4, 8), (8, 8), (8, 16), (16, 16)]


SMALL_SHAPES = [(3, 4096), (3, 5120), (4, 8192), (3, 7168), (5, 7168)]
SMALL_TOKENS = [1, 2, 4, 8, 16, 32, 64]
SPLITS = [1, 2, 4, 8]


def sweep_small(dev: torch.device) -> None:
    for segments, hidden in SMALL_SHAPES:
        weight = (torch.rand(segments, hidden, device=dev) + 0.5).to(torch.bfloat16)
        for tokens in SMALL_TOKENS:
            x = torch.randn(tokens, segments, hidden, device=dev, dtype=torch.bfloat16)
            y = torch.empty_like(x)
            shipped = choose_launch_config(hidden, n_rows=tokens, num_segments=segments, device=dev)
            configs = {split: dataclasses.replace(shipped, split=split) for split in SPLITS}
            bench = {split: [] for split in SPLITS}
            graph = {split: [] for split in SPLITS}
            for _ in range(3):
                copy_bench = min(do_bench(lambda: y.copy_(x), warmup=25, rep=100) for _ in range(2))
                copy_graph = graph_replay_ms(lambda: y.copy_(x), 100)
                for split, config in configs.items():
                    def run(config=config):
                        _launch(x, weight, y, 1e-5, False, config)
                    bench[split].append(min(do_bench(run, warmup=25, rep=100) for _ in range(2)) / copy_bench)
                    graph[split].append(graph_replay_ms(run, 100) / copy_graph)
            line = " ".join(f"split{k}:{statistics.median(bench[k]):.2f}/{statistics.median(graph[k]):.2f}" for k in SPLITS)
            print(f"S={segments} H={hidden} T={tokens} (shipped split {shipped.split}; do_bench/graph x copy): {line}",
                  flush=True)


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    def shapes(text: str) -> list[tuple[int, int]]:
        return [tuple(int(n) for n in item.split("x")) for item in text.split(",")]

    def candidates(text: str) -> list[tuple[int, int]]:
        return [tuple(int(n) for n in item.lstrip("r").split("w")) for item in text.split(",")]

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="split row-segments at T <= 64")
    parser.add_argument("--shapes", type=shapes, help="taps x width, e.g. 3x4096,4x8192")
    parser.add_argument("--candidates", type=candidates, help="rows and warps a program, e.g. r1w8,r4w8")
    parser.add_argument("--tokens", type=lambda text: [int(n) for n in text.split(",")], help="e.g. 2048,8192")
    args = parser.parse_args(argv)
    args.narrowed = any(value is not None for value in (args.shapes, args.candidates, args.tokens))
    args.shapes = args.shapes or SHAPES
    args.candidates = args.candidates or CANDIDATES
    args.tokens = args.tokens or TOKENS
    return args


def main() -> int:
    args = parse_arguments(sys.argv[1:])
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    torch.manual_seed(0)
    spin = torch.randn(1 << 26, device=dev)
    for _ in range(300):  # clocks up before the first timing
        spin.mul_(1.0)
    torch.cuda.synchronize()
    if args.small:
        sweep_small(dev)
        return 0
    for segments, hidden in args.shapes:
        weight = (torch.rand(segments, hidden, device=dev) + 0.5).to(torch.bfloat16)
        block = triton.next_power_of_2(hidden)
        for tokens in args.tokens:
            x = torch.randn(tokens, segments, hidden, device=dev, dtype=torch.bfloat16)
            y = torch.empty_like(x)
            ratios = {c: [] for c in args.candidates if c[0] * block <= 65536}
            for _ in range(7):  # interleaved, so drift hits every candidate alike
                copy = do_bench(lambda: y.copy_(x), warmup=25, rep=200)
                for rows, warps in ratios:
                    config = LaunchConfig(block, rows, warps, False)
                    kernel = do_bench(lambda: _launch(x, weight, y, 1e-5, False, config), warmup=25, rep=200)
                    ratios[(rows, warps)].append(copy / kernel)
            if args.narrowed:
                line = " ".join(f"r{r}w{w}:{statistics.median(v):.3f}[{min(v):.3f}-{max(v):.3f}]"
                                for (r, w), v in ratios.items())
            else:
                line = " ".join(f"r{r}w{w}:{statistics.median(v):.3f}" for (r, w), v in ratios.items())
            print(f"S={segments} H={hidden} T={tokens}: {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
