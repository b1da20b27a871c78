"""Benchmark dspark.kernels.segmented_rmsnorm on a CUDA GPU against its baselines.

All in one run, S = 5 segments of H = 7168 (Kimi-K3 taps; ``--segments`` and
``--hidden`` pick another draft's, e.g. 3 x 4096 for Llama-3-8B EAGLE-3 or
3 x 7168 for Kimi-K2.5 EAGLE-3), bf16 input and bf16 weights, for T in
{1, 8, 64, 512, 2048, 8192, 32768}:

* copy      -- ``out.copy_(x)``: the same bytes read and written, the ceiling;
* kernel    -- ``segmented_rmsnorm(x, w, eps, out=out)``, the public function;
* compile   -- ``torch.compile`` of the per-segment reference (five HF-style
               RMSNorms in fp32 and a cat), compiled for each T;
* eager     -- the same per-segment reference, not compiled.

Times are medians of ``triton.testing.do_bench`` (L2 flushed before every
call; for T <= 64 the better of two medians, for the copy and the kernel alike). For T <= 64 the copy and the kernel are also timed under CUDA-graph
replay (``--graph-calls`` calls captured back to back, replayed), which
leaves launch overhead out. Bandwidth counts bytes read plus bytes written.
The table ends with PASS/FAIL for each goal; ``--sweep`` also times launch
configurations of the kernel (warps, sum precision, weight placement) and two
Triton kernels that only copy, as floors; ``--smoke-tokens 8192`` the smoke projection
(norm alone, GEMM alone, whole projection).

    python tests/benchmarks/bench_segmented_rmsnorm.py [--segments S --hidden H] [--sweep] [--smoke-tokens 8192] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from dspark.kernels import kernel_status, segmented_rmsnorm
from dspark.kernels.segmented_rmsnorm import _launch, choose_launch_config

TOKENS = (1, 8, 64, 512, 2048, 8192, 32768)
SEGMENTS, HIDDEN, EPS = 5, 7168, 1e-5
DTYPE = torch.bfloat16

# Goals (docs/kernels.md).
BANDWIDTH_GOAL = 0.97  # x copy's TB/s at T >= 2048
LATENCY_GOAL = 1.25  # x copy's time at T <= 64, do_bench and graph replay
LARGE_T, SMALL_T = 2048, 64


def per_segment_rmsnorm(x: torch.Tensor, weights: list[torch.Tensor], eps: float) -> torch.Tensor:
    """The textbook way: one HF LlamaRMSNorm per segment, then cat. ``x`` is
    ``[T, S*H]``, each weight ``[H]``."""
    outputs = []
    for segment, weight in zip(x.chunk(len(weights), dim=-1), weights):
        hidden = segment.float()
        hidden = hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + eps)
        outputs.append(weight * hidden.to(segment.dtype))
    return torch.cat(outputs, dim=-1)


def bench_ms(fn) -> float:
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def graph_replay_ms(fn, calls: int, replays: int = 20) -> float:
    """Per-call time of ``fn`` captured ``calls`` times in one CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return sorted(times)[len(times) // 2]


def make_inputs(tokens: int, seed: int = 0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    scales = torch.logspace(-1, 2, SEGMENTS, device="cuda").repeat_interleave(HIDDEN)
    x = (torch.randn(tokens, SEGMENTS * HIDDEN, device="cuda", generator=gen) * scales).to(DTYPE)
    w = (1 + 0.2 * torch.randn(SEGMENTS, HIDDEN, device="cuda", generator=gen)).to(DTYPE)
    return x, w


def tb_per_s(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e12


@dataclasses.dataclass
class Row:
    tokens: int
    bytes: int
    copy_us: float
    kernel_us: float
    compile_us: float | None
    eager_us: float | None
    graph_copy_us: float | None = None
    graph_kernel_us: float | None = None
    config: str = ""

    def tbps(self, us: float | None) -> float | None:
        return None if us is None else tb_per_s(self.bytes, us * 1e-3)


def spin_up(seconds: float = 1.0) -> None:
    """Keep the GPU busy for a moment so that its clocks are up before timing:
    an idle H200 sits at a few hundred MHz and the first small-T timings would
    measure the clock ramp."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


def run_main(args) -> list[Row]:
    """Copy and kernel for every T first, then the compiled and eager
    baselines: compiling leaves the GPU idle for seconds, and an idle H200
    drops its clocks (a small-T kernel timed right after a compile measured
    up to 6 x slower); each T also starts with a short spin-up."""
    rows = []
    for tokens in args.tokens:
        x, w = make_inputs(tokens)
        cfg = choose_launch_config(HIDDEN, n_rows=tokens, num_segments=SEGMENTS, device=x.device)
        out = torch.empty_like(x)
        nbytes = 2 * x.numel() * x.element_size() + w.numel() * w.element_size()
        spin_up(0.3)
        # Small launches are noisy: take the better of two medians, for both.
        tries = 2 if tokens <= SMALL_T else 1
        copy_ms = min(bench_ms(lambda: out.copy_(x)) for _ in range(tries))
        kernel_ms = min(bench_ms(lambda: segmented_rmsnorm(x, w, EPS, out=out)) for _ in range(tries))
        row = Row(tokens, nbytes, copy_ms * 1e3, kernel_ms * 1e3, None, None,
                  config=f"{cfg.num_warps} warps, "
                         + (f"{cfg.split} programs/row-segment, " if cfg.split > 1 else f"{cfg.block_rows} row/program, ")
                         + f"weight loaded {'first' if cfg.weight_first else 'after the sum'}")
        if tokens <= SMALL_T:
            row.graph_copy_us = graph_replay_ms(lambda: out.copy_(x), args.graph_calls) * 1e3
            row.graph_kernel_us = graph_replay_ms(lambda: segmented_rmsnorm(x, w, EPS, out=out), args.graph_calls) * 1e3
        rows.append(row)
        print(f"  T={tokens:>6}: copy {row.copy_us:9.2f} us, kernel {row.kernel_us:9.2f} us", flush=True)
    for row in rows:
        x, w = make_inputs(row.tokens)
        weights = list(w.unbind(0))
        if not args.skip_compile:
            torch._dynamo.reset()
            compiled = torch.compile(per_segment_rmsnorm, dynamic=False)
            compiled(x, weights, EPS)
            spin_up(0.3)
            row.compile_us = bench_ms(lambda: compiled(x, weights, EPS)) * 1e3
        if not args.skip_eager:
            row.eager_us = bench_ms(lambda: per_segment_rmsnorm(x, weights, EPS)) * 1e3
    return rows


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def print_table(rows: list[Row]) -> list[str]:
    header = (
        f"{'T':>6} {'MB':>8} | {'copy us':>9} {'TB/s':>5} | {'kernel us':>9} {'TB/s':>5} {'/copy':>6} | "
        f"{'compile us':>10} {'TB/s':>5} | {'eager us':>9} {'TB/s':>5} | {'graph copy':>10} {'graph krnl':>10} {'ratio':>5} | cfg"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        graph_ratio = None if r.graph_copy_us is None else r.graph_kernel_us / r.graph_copy_us
        lines.append(
            f"{r.tokens:>6} {r.bytes / 1e6:>8.2f} | {r.copy_us:>9.2f} {r.tbps(r.copy_us):>5.2f} | "
            f"{r.kernel_us:>9.2f} {r.tbps(r.kernel_us):>5.2f} {r.tbps(r.kernel_us) / r.tbps(r.copy_us):>6.3f} | "
            f"{fmt(r.compile_us, '10.2f')} {fmt(r.tbps(r.compile_us), '5.2f')} | "
            f"{fmt(r.eager_us, '9.2f')} {fmt(r.tbps(r.eager_us), '5.2f')} | "
            f"{fmt(r.graph_copy_us, '10.2f')} {fmt(r.graph_kernel_us, '10.2f')} {fmt(graph_ratio, '5.3f')} | {r.config}"
        )
    print("\n".join(lines))
    return lines


def check_goals(rows: list[Row]) -> list[tuple[str, bool]]:
    verdicts = []
    for r in rows:
        if r.tokens >= LARGE_T:
            ratio = r.copy_us / r.kernel_us
            verdicts.append((f"T={r.tokens}: bandwidth {ratio:.3f} x copy >= {BANDWIDTH_GOAL}", ratio >= BANDWIDTH_GOAL))
        if r.compile_us is not None:
            verdicts.append(
                (f"T={r.tokens}: kernel {r.kernel_us:.2f} us < torch.compile {r.compile_us:.2f} us", r.kernel_us < r.compile_us)
            )
        if r.tokens <= SMALL_T:
            ratio = r.kernel_us / r.copy_us
            verdicts.append((f"T={r.tokens}: latency {ratio:.3f} x copy <= {LATENCY_GOAL}", ratio <= LATENCY_GOAL))
            ratio = r.graph_kernel_us / r.graph_copy_us
            verdicts.append(
                (f"T={r.tokens}: graph-replay latency {ratio:.3f} x copy <= {LATENCY_GOAL}", ratio <= LATENCY_GOAL)
            )
    for text, ok in verdicts:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")
    return verdicts


SWEEP = [
    # name: warps per program, sum precision (None: what the cast order picks),
    # cast order, weight placement (None: what choose_launch_config picks)
    ("w2", dict(num_warps=2, fp64_sum=None, hf=False)),
    ("w4", dict(num_warps=4, fp64_sum=None, hf=False)),
    ("w8 (default)", dict(num_warps=8, fp64_sum=None, hf=False)),
    ("w16", dict(num_warps=16, fp64_sum=None, hf=False)),
    ("w4 fp64 sum", dict(num_warps=4, fp64_sum=True, hf=False)),
    ("w4 hf (fp64 sum)", dict(num_warps=4, fp64_sum=None, hf=True)),
    ("w8 hf (fp64 sum)", dict(num_warps=8, fp64_sum=None, hf=True)),
    ("w8 weight first", dict(num_warps=8, fp64_sum=None, hf=False, weight_first=True)),
    ("w8 weight after sum", dict(num_warps=8, fp64_sum=None, hf=False, weight_first=False)),
]

# Triton kernels that only copy, for the floor a Triton launch has here:
# "row-segment" is tiled like the kernel (one program per row of a segment,
# 8 warps), "flat" is 1024 elements a program, 4 warps.
COPY_BASELINES = ("triton copy, row-segment", "triton copy, flat 1024")


@triton.jit
def _copy_kernel(X, Y, n_elements, BLOCK: tl.constexpr, HIDDEN: tl.constexpr, PER_SEGMENT: tl.constexpr):
    lanes = tl.arange(0, BLOCK)
    if PER_SEGMENT:
        offsets = tl.program_id(0).to(tl.int64) * HIDDEN + lanes
        mask = lanes < HIDDEN
    else:
        offsets = tl.program_id(0).to(tl.int64) * BLOCK + lanes
        mask = offsets < n_elements
    tl.store(Y + offsets, tl.load(X + offsets, mask=mask), mask=mask)


def triton_copy(x: torch.Tensor, out: torch.Tensor, per_segment: bool) -> None:
    n = x.numel()
    if per_segment:
        block = triton.next_power_of_2(HIDDEN)
        _copy_kernel[(n // HIDDEN,)](x, out, n, BLOCK=block, HIDDEN=HIDDEN, PER_SEGMENT=True, num_warps=8)
    else:
        _copy_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024, HIDDEN=HIDDEN, PER_SEGMENT=False, num_warps=4)


def run_sweep(tokens_list, graph_calls: int) -> list[dict]:
    """Time launch variants through the private launcher: do_bench for large
    T, graph replay for T <= 64. Prints us and copy time / time."""
    results = []
    copies = {}
    for tokens in tokens_list:
        x, w = make_inputs(tokens, seed=1)
        out = torch.empty_like(x)
        x3, y3 = x.view(tokens, SEGMENTS, HIDDEN), out.view(tokens, SEGMENTS, HIDDEN)
        graph = tokens <= SMALL_T

        def timed(fn):
            return (graph_replay_ms(fn, graph_calls) if graph else bench_ms(fn)) * 1e3

        copies[tokens] = copy_us = timed(lambda: out.copy_(x))
        base = choose_launch_config(HIDDEN, n_rows=tokens, num_segments=SEGMENTS, device=x.device)
        for name, fields in SWEEP:
            weight_first = fields.get("weight_first")
            cfg = dataclasses.replace(
                base, num_warps=fields["num_warps"],
                weight_first=base.weight_first if weight_first is None else weight_first,
            )
            us = timed(lambda: _launch(x3, w, y3, EPS, fields["hf"], cfg, fp64_sum=fields["fp64_sum"]))
            results.append({"tokens": tokens, "config": name, "us": us, "copy_us": copy_us, "graph": graph})
        for name in COPY_BASELINES:
            us = timed(lambda: triton_copy(x, out, per_segment="row-segment" in name))
            results.append({"tokens": tokens, "config": name, "us": us, "copy_us": copy_us, "graph": graph})
        print(f"  swept T={tokens}", flush=True)
    print(f"{'config':<24} " + " ".join(f"{'T=' + str(t):>15}" for t in tokens_list))
    print(f"{'copy':<24} " + " ".join(f"{copies[t]:9.2f}      " for t in tokens_list))
    for name in [name for name, _ in SWEEP] + list(COPY_BASELINES):
        cells = [next(r for r in results if r["config"] == name and r["tokens"] == t) for t in tokens_list]
        print(f"{name:<24} " + " ".join(f"{r['us']:9.2f}({r['copy_us'] / r['us']:4.2f})" for r in cells))
    return results


def run_smoke(tokens: int) -> dict:
    """The smoke projection at full K3 size with synthetic weights: accuracy of
    the three paths and the fused path's timings."""
    from dspark.kernels.smoke import PROJECTION_OVERHEAD_GOAL, smoke_projection

    gen = torch.Generator(device="cuda").manual_seed(0)
    weights = {
        "context_proj.weight": (torch.randn(HIDDEN, SEGMENTS * HIDDEN, device="cuda", generator=gen)
                                / (SEGMENTS * HIDDEN) ** 0.5).to(DTYPE),
        "context_norm.weight": (1 + 0.1 * torch.randn(HIDDEN, device="cuda", generator=gen)).to(DTYPE),
    }
    for i in range(SEGMENTS):
        weights[f"fc_norm.{i}.weight"] = (1 + 0.2 * torch.randn(HIDDEN, device="cuda", generator=gen)).to(DTYPE)
    result = smoke_projection(weights, rms_norm_eps=EPS, num_segments=SEGMENTS, target_hidden=HIDDEN,
                              tokens=tokens, device="cuda")
    t = result.timings
    print(f"smoke projection T={tokens}, backend {result.kernel_backend}")
    for check in (result.fused, result.incremental, result.folded):
        print(f"  {check.name:<11} {check.stats.describe()} -> {'within' if check.within_tolerance else 'OUTSIDE'} "
              f"tolerance {check.tolerance:g}")
    print(f"  norm {t.norm_ms * 1e3:.1f} us, GEMM {t.gemm_ms * 1e3:.1f} us, whole projection {t.projection_ms * 1e3:.1f} us"
          f" = {t.overhead_ratio:.4f} x GEMM")
    print(f"{'PASS' if t.meets_goal else 'FAIL'}  smoke T={tokens}: whole projection {t.overhead_ratio:.4f} x GEMM "
          f"<= {PROJECTION_OVERHEAD_GOAL}")
    return {
        "tokens": tokens, "norm_us": t.norm_ms * 1e3, "gemm_us": t.gemm_ms * 1e3,
        "projection_us": t.projection_ms * 1e3, "overhead_ratio": t.overhead_ratio, "meets_goal": t.meets_goal,
        "paths": {c.name: dataclasses.asdict(c.stats) | {"within_tolerance": c.within_tolerance}
                  for c in (result.fused, result.incremental, result.folded)},
    }


def main() -> int:
    global SEGMENTS, HIDDEN  # the shape every measurement below uses
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=lambda s: [int(t) for t in s.split(",")], default=list(TOKENS))
    parser.add_argument("--graph-calls", type=int, default=100)
    parser.add_argument("--sweep", action="store_true", help="also time launch configurations")
    parser.add_argument("--sweep-tokens", type=lambda s: [int(t) for t in s.split(",")], default=[1, 8, 64, 2048, 8192, 32768])
    parser.add_argument("--only-sweep", action="store_true", help="the sweep alone, no table")
    parser.add_argument("--skip-compile", action="store_true")
    parser.add_argument("--skip-eager", action="store_true")
    parser.add_argument("--smoke-tokens", type=int, default=0, help="also run the smoke projection at this T")
    parser.add_argument("--json", help="write the measurements here")
    parser.add_argument("--segments", type=int, default=SEGMENTS, help="taps S (default 5: Kimi-K3)")
    parser.add_argument("--hidden", type=int, default=HIDDEN, help="tap width H (default 7168)")
    args = parser.parse_args()
    SEGMENTS, HIDDEN = args.segments, args.hidden

    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    status = kernel_status("cuda")
    if status.backend != "triton":
        print(f"the kernel does not run here: {status.backend} ({status.reason})", file=sys.stderr)
        return 2
    env = {
        "gpu": torch.cuda.get_device_name(0),
        "sms": torch.cuda.get_device_properties(0).multi_processor_count,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "command": "python " + " ".join(sys.argv),
        "shape": f"S={SEGMENTS} H={HIDDEN} {DTYPE} x, {DTYPE} weights, eps={EPS}",
        "date": time.strftime("%Y-%m-%d"),
    }
    for key, value in env.items():
        print(f"{key}: {value}")
    torch.manual_seed(0)
    spin_up()
    if args.only_sweep:
        run_sweep(args.sweep_tokens, args.graph_calls)
        return 0

    rows = run_main(args)
    print()
    table = print_table(rows)
    print()
    verdicts = check_goals(rows)
    sweep = run_sweep(args.sweep_tokens, args.graph_calls) if args.sweep else []
    smoke = run_smoke(args.smoke_tokens) if args.smoke_tokens else None
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {"env": env, "rows": [dataclasses.asdict(r) for r in rows], "table": table,
                 "verdicts": verdicts, "sweep": sweep, "smoke": smoke},
                fh, indent=1,
            )
    passed = all(ok for _, ok in verdicts) and (smoke is None or smoke["meets_goal"])
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
