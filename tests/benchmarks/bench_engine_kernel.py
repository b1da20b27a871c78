"""dspark's segmented RMSNorm against the serving engine's, side by side on one GPU.

The engine's kernel is the one the installed engine serves with, found as
`dspark smoke --kernel engine` finds it (`--engine-path DIR`, or the engine
on this Python's path, or $DSPARK_ENGINE_PATH), or a module file named with
`--engine-kernel-file` (TokenSpeed 1031's
python/tokenspeed/runtime/layers/segmented_rmsnorm.py imports only torch and
triton). It is called as the engine calls it: taps as ``[T, S, th]``,
weights ``[S, th]``, eps, ``out`` (schema/engines/tokenspeed/revisions.py,
KERNEL_CALLS).

For each shape, bf16 taps and bf16 weights, T in {1, 64, 256, 1024, 2048, 8192}:

* copy    -- ``out.copy_(x)``: the same bytes read and written, the floor;
* dspark  -- ``dspark.kernels.segmented_rmsnorm(x, w, eps, out=out)``;
* engine  -- the engine's ``segmented_rmsnorm(x.view(T, S, th), w, eps, out=...)``.

Shapes: Kimi-K3 DSpark (S = 5, th = 7168), the EAGLE-3 families' three
taps (S = 3; th = 4096 Llama-3-8B, 5120 Qwen3-32B, 7168 Kimi-K2.5 /
DeepSeek-V3, 8192 Llama-3.3-70B) and DFlash2's five (S = 5; th = 4096
Qwen3-8B, 5120 Qwen3-32B; a K3 DFlash2's 5 x 7168 is K3 DSpark's shape). Times are medians of
``triton.testing.do_bench`` (L2 flushed; for T <= 64 the better of two
medians). Each output is compared with the fp32 reference first; a kernel
that is wrong is reported, not timed. The table gives dspark / engine and
each over the copy.

    python tests/benchmarks/bench_engine_kernel.py [--engine-path DIR | --engine-kernel-file FILE] [--json out.json]

Exit 0 when both kernels ran right at every shape, 1 when one was wrong,
2 when there is no CUDA GPU or no engine kernel to compare with.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
import time
from pathlib import Path

import torch

SHAPES = (
    ("K3 DSpark", 5, 7168),
    ("EAGLE-3 Llama-3-8B", 3, 4096),
    ("EAGLE-3 Qwen3-32B", 3, 5120),
    ("EAGLE-3 Kimi-K2.5", 3, 7168),
    ("EAGLE-3 Llama-3.3-70B", 3, 8192),
    # DFlash2's context is its five target taps side by side, as DFlash's
    # (its fc reads taps x target width); Qwen3-8B and Qwen3-32B targets.
    ("DFlash2 Qwen3-8B", 5, 4096),
    ("DFlash2 Qwen3-32B", 5, 5120),
)
TOKENS = (1, 64, 256, 1024, 2048, 8192)
EPS = 1e-5
DTYPE = torch.bfloat16
DEVICE = "cuda"
GPU_NEEDED = "a CUDA GPU (written for an NVIDIA H200; any GPU triton compiles for will run it)"


def engine_kernel_from_file(path: Path):
    """The engine's kernel from one module file, adapted to dspark's call."""
    from dspark.kernels.engine_loading import adapt

    spec = importlib.util.spec_from_file_location("engine_segmented_rmsnorm", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return f"{path}", adapt(module.segmented_rmsnorm, segments_axis=True, takes_out=True)


def engine_kernel_installed(engine_path: str | None):
    from dspark.converters.runtime import probe_runtime
    from dspark.kernels.smoke_engine import load_engine_kernel

    kernel = load_engine_kernel(probe_runtime(engine_path))
    if not kernel.available:
        raise SystemExit(f"no engine kernel to compare with: {kernel.reason}")
    label = f"{kernel.engine}: {kernel.module} ({kernel.file})"
    if kernel.triton:
        label += f", compiled by {kernel.triton}"
    if kernel.loaded_alone:
        label += f"; loaded alone: {kernel.loaded_alone}"
    if kernel.in_child:
        label += f"; {kernel.in_child}"
    return label, kernel.run


def median_ms(fn, tokens: int) -> float:
    from triton.testing import do_bench

    runs = 2 if tokens <= 64 else 1
    return min(do_bench(fn, warmup=25, rep=100, return_mode="median") for _ in range(runs))


def measure(engine, segments: int, width: int, tokens: int, engine_row: dict | None = None) -> dict:
    """One shape at one T. `engine_row`: the engine's side, measured in its
    own process (a kernel that runs in a child: its copy there is
    `engine_copy_ms`)."""
    from dspark.kernels import segmented_rmsnorm, segmented_rmsnorm_reference

    x = torch.randn(tokens, segments * width, device=DEVICE, dtype=DTYPE)
    w = (torch.rand(segments, width, device=DEVICE) + 0.5).to(DTYPE)
    expected = segmented_rmsnorm_reference(x.float(), w.float(), EPS)
    ours, theirs, copy = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
    row = {"S": segments, "th": width, "T": tokens}
    sides = [("dspark", lambda: segmented_rmsnorm(x, w, EPS, out=ours))]
    if engine_row is None:
        sides.append(("engine", lambda: engine(x, w, EPS, out=theirs)))
    else:
        if "engine_error" in engine_row:
            row["engine_error"] = engine_row["engine_error"]
        else:
            row["engine_rel_rms"] = engine_row["engine_rel_rms"]
            row["engine_ok"] = bool(engine_row["engine_rel_rms"] <= 1e-2)
            if row["engine_ok"]:
                row["engine_ms"], row["engine_copy_ms"] = engine_row["engine_ms"], engine_row["copy_ms"]
    for name, fn in sides:
        try:
            got = fn()
            torch.cuda.synchronize()
        except Exception as error:  # noqa: BLE001 - a kernel that fails is reported in the table
            row[f"{name}_error"] = f"{type(error).__name__}: {error}"
            continue
        diff = (got.float() - expected).norm() / expected.norm()
        row[f"{name}_rel_rms"] = float(diff)
        row[f"{name}_ok"] = bool(diff <= 1e-2)
    row["copy_ms"] = median_ms(lambda: copy.copy_(x), tokens)
    for name, fn in sides:
        if row.get(f"{name}_ok"):
            row[f"{name}_ms"] = median_ms(fn, tokens)
    bytes_moved = 2 * x.numel() * x.element_size()
    row["copy_tbps"] = bytes_moved / (row["copy_ms"] * 1e-3) / 1e12
    return row


def ratio(a, b) -> str:
    return f"{a / b:.3f}" if a is not None and b else "-"


def us(value) -> str:
    return f"{value * 1e3:.1f}" if value is not None else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--engine-path", help="where the serving engine is installed (default: this Python's path)")
    where.add_argument("--engine-kernel-file", type=Path, help="the engine's segmented_rmsnorm module file")
    parser.add_argument("--tokens", type=lambda s: [int(t) for t in s.split(",")], default=list(TOKENS))
    parser.add_argument("--json", help="write the measurements here")
    args = parser.parse_args()

    if not torch.cuda.is_available():
        print(f"needs {GPU_NEEDED}: torch sees no CUDA device here", file=sys.stderr)
        return 2
    from dspark.kernels import kernel_status

    status = kernel_status("cuda")
    if status.backend != "triton":
        print(f"dspark's kernel does not run compiled here: {status.backend} ({status.reason})", file=sys.stderr)
        return 2
    try:
        label, engine = (engine_kernel_from_file(args.engine_kernel_file) if args.engine_kernel_file
                         else engine_kernel_installed(args.engine_path))
    except SystemExit as refusal:
        print(refusal, file=sys.stderr)
        return 2
    env = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "triton (dspark's)": __import__("triton").__version__,
        "engine kernel": label,
        "command": "python " + " ".join(sys.argv),
        "dtype": f"{DTYPE} taps and weights, eps={EPS}",
        "date": time.strftime("%Y-%m-%d"),
    }
    for key, value in env.items():
        print(f"{key}: {value}")
    print()
    header = (f"{'shape':<24} {'S':>2} {'th':>5} {'T':>5} {'copy µs':>9} {'dspark µs':>10} {'engine µs':>10} "
              f"{'dspark/engine':>14} {'dspark/copy':>12} {'engine/copy':>12}")
    print(header)
    rows, all_right = [], True
    in_child = {}
    if hasattr(engine, "bench"):
        # Its Triton cannot share this process with dspark's: the engine's
        # side of every row is made, checked and timed in a child process,
        # with the same do_bench (the engine's Triton's), each side against
        # a copy in its own process.
        measured = engine.bench([(s, w) for _, s, w in SHAPES], args.tokens, EPS)
        in_child = {(r["S"], r["th"], r["T"]): r for r in measured}
        print("engine kernel timed in a child process; engine/copy is against the child's own copy\n")
    for name, segments, width in SHAPES:
        for tokens in args.tokens:
            engine_row = in_child.get((segments, width, tokens)) if in_child else None
            row = {"shape": name, **measure(engine, segments, width, tokens, engine_row)}
            rows.append(row)
            all_right &= bool(row.get("dspark_ok")) and bool(row.get("engine_ok"))
            print(f"{name:<24} {segments:>2} {width:>5} {tokens:>5} {us(row['copy_ms']):>9} "
                  f"{us(row.get('dspark_ms')):>10} {us(row.get('engine_ms')):>10} "
                  f"{ratio(row.get('dspark_ms'), row.get('engine_ms')):>14} "
                  f"{ratio(row.get('dspark_ms'), row['copy_ms']):>12} "
                  f"{ratio(row.get('engine_ms'), row.get('engine_copy_ms') or row['copy_ms']):>12}")
            for side in ("dspark", "engine"):
                if not row.get(f"{side}_ok"):
                    print(f"    {side}: {row.get(f'{side}_error') or 'rel RMS %.3e off the fp32 reference' % row[f'{side}_rel_rms']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"env": env, "rows": rows}, fh, indent=1)
    return 0 if all_right else 1


if __name__ == "__main__":
    sys.exit(main())
