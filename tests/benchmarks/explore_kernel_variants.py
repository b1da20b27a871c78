"""Exploration: kernel variants tried against the EAGLE-3 shape goals
(>= 0.97 x copy bandwidth at T = 2048, <= 1.25 x copy latency at T <= 64).

    python tests/benchmarks/explore_kernel_variants.py            # round 1
    python tests/benchmarks/explore_kernel_variants.py --round2   # round 2, T = 2048 and 8192
    python tests/benchmarks/explore_kernel_variants.py --round3   # round 3: the floor of the grid
    python tests/benchmarks/explore_kernel_variants.py --round4 [--coop | --tma]
                                          # round 4: persistent, cooperative, TMA programs

Round 2 (row-pipelined programs, whole-row programs, the weight loaded first
in its own dtype) is described beside its kernels below; medians of 11
interleaved do_bench runs at T = 2048, with their range.

Round 3 asks what bounds the kernel at T = 2048: a Triton kernel that only
copies, with the shipped kernel's own grid (a whole row-segment a program),
against a flat copy of 1024 or 4096 elements a program; and the shipped
kernel itself under other tiles, register caps (``maxnreg``) and split
row-segments at large T. Medians of 9 interleaved do_bench runs at T = 2048
(3 at 8192), with their range.

Each variant is its own small Triton kernel here, compared with the kernel
dspark ships (`cur`): streaming cache hints (loads evict-first, stores .cs),
a segment split into power-of-two pieces so no lane is padded (5120 = 4096 +
1024, 7168 = 4096 + 2048 + 1024), the weight loaded beside x, and at small T a
row-segment shared by SPLIT programs, each summing all of it and storing its
slice. Bandwidth: medians of 7 interleaved do_bench runs (L2 flushed), copy
time / time. Latency: CUDA-graph replay of 100 calls, time / copy time.
docs/kernels.md quotes what it printed on an H200. Needs a CUDA GPU for the
timings (the correctness lines also run under TRITON_INTERPRET=1). Not
collected by pytest.
"""
import statistics
import sys

import torch
import triton
import triton.language as tl
from bench_segmented_rmsnorm import graph_replay_ms  # the script's own folder is on sys.path


@triton.jit
def _piece_sq(X_base, off: tl.constexpr, C: tl.constexpr, HINT: tl.constexpr):
    cols = off + tl.arange(0, C)
    if HINT:
        x = tl.load(X_base + cols, eviction_policy="evict_first").to(tl.float32)
    else:
        x = tl.load(X_base + cols).to(tl.float32)
    return x


@triton.jit(do_not_specialize=["n_rows", "eps"])
def _variant_kernel(X, W, Y, xrs, xss, yrs, yss, n_rows, eps,
                    S: tl.constexpr, H: tl.constexpr, C0: tl.constexpr, C1: tl.constexpr, C2: tl.constexpr,
                    HINT: tl.constexpr, SPLIT: tl.constexpr, WFIRST: tl.constexpr):
    """One row-segment a program (SPLIT programs share one: each sums all, stores 1/SPLIT).
    H = C0 + C1 + C2, each a power of two or 0: no padded lanes."""
    pid = tl.program_id(0)
    part = pid % SPLIT
    rs = pid // SPLIT
    seg = (rs % S).to(tl.int64)
    row = (rs // S).to(tl.int64)
    xb = X + seg * xss + row * xrs
    yb = Y + seg * yss + row * yrs
    wb = W + seg * H
    x0 = _piece_sq(xb, 0, C0, HINT)
    if WFIRST:
        w0 = tl.load(wb + tl.arange(0, C0)).to(tl.float32)
    ss = tl.sum(x0 * x0, axis=0)
    if C1 > 0:
        x1 = _piece_sq(xb, C0, C1, HINT)
        if WFIRST:
            w1 = tl.load(wb + C0 + tl.arange(0, C1)).to(tl.float32)
        ss += tl.sum(x1 * x1, axis=0)
    if C2 > 0:
        x2 = _piece_sq(xb, C0 + C1, C2, HINT)
        if WFIRST:
            w2 = tl.load(wb + C0 + C1 + tl.arange(0, C2)).to(tl.float32)
        ss += tl.sum(x2 * x2, axis=0)
    r = tl.div_rn(1.0, tl.sqrt_rn(tl.div_rn(ss, H * 1.0) + eps))
    if SPLIT == 1:
        if not WFIRST:
            w0 = tl.load(wb + tl.arange(0, C0)).to(tl.float32)
        c0 = tl.arange(0, C0)
        if HINT:
            tl.store(yb + c0, (x0 * r * w0).to(Y.dtype.element_ty), cache_modifier=".cs")
        else:
            tl.store(yb + c0, (x0 * r * w0).to(Y.dtype.element_ty))
        if C1 > 0:
            if not WFIRST:
                w1 = tl.load(wb + C0 + tl.arange(0, C1)).to(tl.float32)
            c1 = C0 + tl.arange(0, C1)
            if HINT:
                tl.store(yb + c1, (x1 * r * w1).to(Y.dtype.element_ty), cache_modifier=".cs")
            else:
                tl.store(yb + c1, (x1 * r * w1).to(Y.dtype.element_ty))
        if C2 > 0:
            if not WFIRST:
                w2 = tl.load(wb + C0 + C1 + tl.arange(0, C2)).to(tl.float32)
            c2 = C0 + C1 + tl.arange(0, C2)
            if HINT:
                tl.store(yb + c2, (x2 * r * w2).to(Y.dtype.element_ty), cache_modifier=".cs")
            else:
                tl.store(yb + c2, (x2 * r * w2).to(Y.dtype.element_ty))
    else:
        # Only for C1 == C2 == 0: this program stores slice `part` of C0 (re-read from L1/L2).
        SL: tl.constexpr = C0 // SPLIT
        c = part * SL + tl.arange(0, SL)
        xs = tl.load(xb + c).to(tl.float32)
        ws = tl.load(wb + c).to(tl.float32)
        tl.store(yb + c, (xs * r * ws).to(Y.dtype.element_ty))


# Round 2 (2026-11-30): against the bandwidth goal at T = 2048 only.
# rowloop: K rows of one segment a program, the next row's loads issued
# before this row's reduction (WHOLD: the weight loaded once and held).
# wholerow: one program a row, the next segment's loads issued before this
# segment's reduction. wbf: the weight loaded first but kept in x's dtype
# until the multiply, BR rows a program.
@triton.jit(do_not_specialize=["n_rows", "eps"])
def rowloop_kernel(X, W, Y, xrs, xss, yrs, yss, n_rows, eps,
                   S: tl.constexpr, H: tl.constexpr, BLOCK: tl.constexpr, K: tl.constexpr, WHOLD: tl.constexpr):
    pid = tl.program_id(0)
    seg = (pid % S).to(tl.int64)
    row0 = (pid // S).to(tl.int64) * K
    cols = tl.arange(0, BLOCK)
    cm = cols < H
    xb = X + seg * xss
    yb = Y + seg * yss
    wp = W + seg * H + cols
    x = tl.load(xb + row0 * xrs + cols, mask=cm & (row0 < n_rows), other=0.0).to(tl.float32)
    if WHOLD:
        w = tl.load(wp, mask=cm, other=0.0).to(tl.float32)
    for i in tl.static_range(K):
        row = row0 + i
        if i + 1 < K:
            xn = tl.load(xb + (row + 1) * xrs + cols, mask=cm & (row + 1 < n_rows), other=0.0).to(tl.float32)
        ss = tl.sum(x * x, axis=0)
        r = tl.div_rn(1.0, tl.sqrt_rn(tl.div_rn(ss, H * 1.0) + eps))
        if not WHOLD:
            w = tl.load(wp, mask=cm, other=0.0).to(tl.float32)
        tl.store(yb + row * yrs + cols, (x * r * w).to(Y.dtype.element_ty), mask=cm & (row < n_rows))
        if i + 1 < K:
            x = xn


@triton.jit(do_not_specialize=["n_rows", "eps"])
def wholerow_kernel(X, W, Y, xrs, xss, yrs, yss, n_rows, eps,
                    S: tl.constexpr, H: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    cm = cols < H
    x = tl.load(X + row * xrs + cols, mask=cm, other=0.0).to(tl.float32)
    for s in tl.static_range(S):
        if s + 1 < S:
            xn = tl.load(X + row * xrs + (s + 1) * xss + cols, mask=cm, other=0.0).to(tl.float32)
        ss = tl.sum(x * x, axis=0)
        r = tl.div_rn(1.0, tl.sqrt_rn(tl.div_rn(ss, H * 1.0) + eps))
        w = tl.load(W + s * H + cols, mask=cm, other=0.0).to(tl.float32)
        tl.store(Y + row * yrs + s * yss + cols, (x * r * w).to(Y.dtype.element_ty), mask=cm)
        if s + 1 < S:
            x = xn


@triton.jit(do_not_specialize=["n_rows", "eps"])
def wbf_kernel(X, W, Y, xrs, xss, yrs, yss, n_rows, eps,
               S: tl.constexpr, H: tl.constexpr, BLOCK: tl.constexpr, BR: tl.constexpr):
    pid = tl.program_id(0)
    seg = (pid % S).to(tl.int64)
    rows = (pid // S).to(tl.int64) * BR + tl.arange(0, BR)[:, None]
    cols = tl.arange(0, BLOCK)[None, :]
    m = (rows < n_rows) & (cols < H)
    x = tl.load(X + seg * xss + rows * xrs + cols, mask=m, other=0.0)
    w = tl.load(W + seg * H + cols, mask=cols < H, other=0.0)
    xf = x.to(tl.float32)
    ss = tl.sum(xf * xf, axis=1)
    r = tl.div_rn(1.0, tl.sqrt_rn(tl.div_rn(ss, H * 1.0) + eps))
    tl.store(Y + seg * yss + rows * yrs + cols, (x.to(tl.float32) * r[:, None] * w.to(tl.float32)).to(Y.dtype.element_ty), mask=m)


def launch_wbf(x, w, y, eps, br, warps):
    T, S, H = x.shape
    wbf_kernel[(triton.cdiv(T, br) * S,)](x, w, y, x.stride(0), x.stride(1), y.stride(0), y.stride(1), T, eps,
                                         S=S, H=H, BLOCK=triton.next_power_of_2(H), BR=br, num_warps=warps,
                                         enable_fp_fusion=False)


def launch_rowloop(x, w, y, eps, K, warps, whold=False):
    T, S, H = x.shape
    grid = (triton.cdiv(T, K) * S,)
    rowloop_kernel[grid](x, w, y, x.stride(0), x.stride(1), y.stride(0), y.stride(1), T, eps,
                         S=S, H=H, BLOCK=triton.next_power_of_2(H), K=K, WHOLD=whold, num_warps=warps,
                         enable_fp_fusion=False)


def launch_wholerow(x, w, y, eps, warps):
    T, S, H = x.shape
    wholerow_kernel[(T,)](x, w, y, x.stride(0), x.stride(1), y.stride(0), y.stride(1), T, eps,
                          S=S, H=H, BLOCK=triton.next_power_of_2(H), num_warps=warps, enable_fp_fusion=False)




def round2(dev) -> None:
    from triton.testing import do_bench
    from dspark.kernels.reference import segmented_rmsnorm_reference
    from dspark.kernels.segmented_rmsnorm import _launch, choose_launch_config
    for S, H in [(3, 4096), (4, 8192), (3, 5120)]:
        x = torch.randn(37, S, H, device=dev, dtype=torch.bfloat16)
        w = (torch.rand(S, H, device=dev) + 0.5).to(torch.bfloat16)
        ref = segmented_rmsnorm_reference(x, w, 1e-5)
        for name, fn in [("rowloop K=2", lambda y: launch_rowloop(x, w, y, 1e-5, 2, 8)),
                         ("rowloop K=4 held weight", lambda y: launch_rowloop(x, w, y, 1e-5, 4, 8, True)),
                         ("wholerow", lambda y: launch_wholerow(x, w, y, 1e-5, 8)),
                         ("wbf 2 rows", lambda y: launch_wbf(x, w, y, 1e-5, 2, 8))]:
            y = torch.empty_like(x)
            fn(y)
            print(f"correct S={S} H={H} {name}: maxdiff={(y.float() - ref.float()).abs().max().item():.3g} "
                  f"identical={(y == ref).float().mean().item():.5f}", flush=True)
    for S, H in [(3, 4096), (4, 8192), (3, 5120), (3, 7168), (5, 7168)]:
        w = (torch.rand(S, H, device=dev) + 0.5).to(torch.bfloat16)
        for T in [2048, 8192]:
            x = torch.randn(T, S, H, device=dev, dtype=torch.bfloat16)
            y = torch.empty_like(x)
            cfg = choose_launch_config(H, n_rows=T, num_segments=S, device=dev)
            cands = {"cur": lambda: _launch(x, w, y, 1e-5, False, cfg)}
            for K in (2, 4):
                for warps in (4, 8):
                    cands[f"rl{K}w{warps}"] = (lambda K=K, warps=warps: launch_rowloop(x, w, y, 1e-5, K, warps))
                    cands[f"rl{K}w{warps}h"] = (lambda K=K, warps=warps: launch_rowloop(x, w, y, 1e-5, K, warps, True))
            for warps in (8, 16):
                cands[f"whole{warps}"] = (lambda warps=warps: launch_wholerow(x, w, y, 1e-5, warps))
            for br, warps in ((1, 4), (1, 8), (2, 4), (2, 8)):
                cands[f"wbf_r{br}w{warps}"] = (lambda br=br, warps=warps: launch_wbf(x, w, y, 1e-5, br, warps))
            ratios = {k: [] for k in cands}
            for _ in range(11 if T == 2048 else 3):
                copy = do_bench(lambda: y.copy_(x), warmup=25, rep=100)
                for k, fn in cands.items():
                    ratios[k].append(copy / do_bench(fn, warmup=25, rep=100))
            print(f"BW2 S={S} H={H} T={T}: " + " ".join(
                f"{k}:{statistics.median(v):.3f}[{min(v):.3f}-{max(v):.3f}]" for k, v in ratios.items()), flush=True)


# Round 3 (2026-12-01): copies that bound the kernel. gridcopy: the shipped
# kernel's grid and tile (BR rows of one segment a program), no reduction.
# flatcopy: BLOCK consecutive elements a program, the copy's own granularity.
@triton.jit
def gridcopy_kernel(X, Y, xrs, xss, yrs, yss, n_rows, S: tl.constexpr, H: tl.constexpr, BLOCK: tl.constexpr,
                    BR: tl.constexpr):
    pid = tl.program_id(0)
    seg = (pid % S).to(tl.int64)
    rows = (pid // S).to(tl.int64) * BR + tl.arange(0, BR)[:, None]
    cols = tl.arange(0, BLOCK)[None, :]
    m = (rows < n_rows) & (cols < H)
    tl.store(Y + seg * yss + rows * yrs + cols, tl.load(X + seg * xss + rows * xrs + cols, mask=m), mask=m)


@triton.jit
def flatcopy_kernel(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(Y + offs, tl.load(X + offs, mask=m), mask=m)


def launch_shipped(x, w, y, config, maxnreg=None):
    """The shipped kernel with any tile, split and register cap; returns the compiled kernel."""
    from dspark.kernels.segmented_rmsnorm import _segmented_rmsnorm_kernel
    T, S, H = x.shape
    extra = {} if maxnreg is None else {"maxnreg": maxnreg}
    return _segmented_rmsnorm_kernel[(triton.cdiv(T, config.block_rows) * S * config.split,)](
        x, w, y, x.stride(0), x.stride(1), w.stride(0), y.stride(0), y.stride(1), T, 1e-5,
        N_SEGMENTS=S, HIDDEN=H, BLOCK_SIZE=config.block_size, BLOCK_ROWS=config.block_rows, FP64_SUM=False,
        HF_CAST_ORDER=False, WEIGHT_FIRST=config.weight_first, SPLIT=config.split, INTERPRETER=False,
        num_warps=config.num_warps, enable_fp_fusion=False, **extra)


def ranked_against_copy(x, y, candidates, runs):
    """Each candidate's copy time / its time, `runs` times, each run against
    a fresh `y.copy_(x)` (do_bench, L2 flushed); best median first."""
    from triton.testing import do_bench
    ratios = {k: [] for k in candidates}
    for _ in range(runs):
        copy = do_bench(lambda: y.copy_(x), warmup=25, rep=100)
        for k, fn in candidates.items():
            ratios[k].append(copy / do_bench(fn, warmup=25, rep=100))
    return sorted(ratios.items(), key=lambda kv: -statistics.median(kv[1]))


def bf16_taps(dev, w, T):
    """T rows of bf16 taps for weights `w` [S, H], an output buffer, the
    reference result and the shipped kernel's tile for them."""
    from dspark.kernels.reference import segmented_rmsnorm_reference
    from dspark.kernels.segmented_rmsnorm import choose_launch_config
    S, H = w.shape
    x = torch.randn(T, S, H, device=dev, dtype=torch.bfloat16)
    return (x, torch.empty_like(x), segmented_rmsnorm_reference(x, w, 1e-5),
            choose_launch_config(H, n_rows=T, num_segments=S, device=dev))


def round3(dev) -> None:
    from dspark.kernels.segmented_rmsnorm import LaunchConfig
    for S, H in [(3, 4096), (4, 8192), (3, 5120), (3, 7168), (5, 7168)]:
        block = triton.next_power_of_2(H)
        w = (torch.rand(S, H, device=dev) + 0.5).to(torch.bfloat16)
        for T in [2048, 8192]:
            x, y, ref, cur = bf16_taps(dev, w, T)
            n = x.numel()
            cands = {
                "cur": lambda: launch_shipped(x, w, y, cur),
                f"gridcopy_r{cur.block_rows}w{cur.num_warps}": lambda: gridcopy_kernel[
                    (triton.cdiv(T, cur.block_rows) * S,)](x, y, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                                                           T, S=S, H=H, BLOCK=block, BR=cur.block_rows,
                                                           num_warps=cur.num_warps),
                "flat1024w4": lambda: flatcopy_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024, num_warps=4),
                "flat4096w8": lambda: flatcopy_kernel[(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096, num_warps=8),
            }
            variants = {f"r{r}w{wp}": (LaunchConfig(block, r, wp), None)
                        for r, wp in ((1, 1), (1, 2), (1, 4), (1, 8), (1, 16), (2, 8), (4, 8)) if r * block <= 16384}
            variants.update({f"r1w8_cap{cap}": (LaunchConfig(block, 1, 8), cap) for cap in (32, 40, 48)})
            variants.update({f"split{sp}w{wp}": (LaunchConfig(block, 1, wp, split=sp), None)
                             for sp in (2, 4) for wp in (4, 8)})
            for name, (config, cap) in variants.items():
                compiled = launch_shipped(x, w, y, config, cap)
                identical = (y == ref).float().mean().item()
                if T == 2048:
                    print(f"  S={S} H={H} {name}: {compiled.n_regs} registers, {compiled.n_spills} spilled, "
                          f"identical {identical:.5f}", flush=True)
                cands[name] = lambda config=config, cap=cap: launch_shipped(x, w, y, config, cap)
            ranked = ranked_against_copy(x, y, cands, 9 if T == 2048 else 3)
            print(f"BW3 S={S} H={H} T={T} (cur: {cur.block_rows} rows, {cur.num_warps} warps): " + " ".join(
                f"{k}:{statistics.median(v):.3f}[{min(v):.3f}-{max(v):.3f}]" for k, v in ranked), flush=True)


# Round 4 (2026-12-01): persistent programs. If the bandwidth lost at
# T = 2048 is the last wave's tail (about half a program's lifetime, which
# grows with the bytes every resident program holds), G = k x SMs programs
# that stride over the row-segments, one in flight and the next prefetched,
# should end together and lose less.
@triton.jit(do_not_specialize=["n_rows", "eps"])
def persistent_kernel(X, W, Y, xrs, xss, yrs, yss, n_rows, eps,
                      S: tl.constexpr, H: tl.constexpr, BLOCK: tl.constexpr, PREFETCH: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0)
    total = n_rows * S
    cols = tl.arange(0, BLOCK)
    cm = cols < H
    item = pid.to(tl.int64)
    x = tl.load(X + (item // S) * xrs + (item % S) * xss + cols, mask=cm & (cols * 0 + item < total), other=0.0).to(tl.float32)
    while item < total:
        following = item + step
        if PREFETCH:
            xn = tl.load(X + (following // S) * xrs + (following % S) * xss + cols,
                         mask=cm & (cols * 0 + following < total), other=0.0).to(tl.float32)
        ss = tl.sum(x * x, axis=0)
        r = tl.div_rn(1.0, tl.sqrt_rn(tl.div_rn(ss, H * 1.0) + eps))
        seg = item % S
        w = tl.load(W + seg * H + cols, mask=cm, other=0.0).to(tl.float32)
        tl.store(Y + (item // S) * yrs + seg * yss + cols, (x * r * w).to(Y.dtype.element_ty), mask=cm)
        if PREFETCH:
            x = xn
        else:
            x = tl.load(X + (following // S) * xrs + (following % S) * xss + cols,
                        mask=cm & (cols * 0 + following < total), other=0.0).to(tl.float32)
        item = following


def launch_persistent(x, w, y, programs, warps, prefetch=True):
    T, S, H = x.shape
    return persistent_kernel[(programs,)](x, w, y, x.stride(0), x.stride(1), y.stride(0), y.stride(1), T, 1e-5,
                                          S=S, H=H, BLOCK=triton.next_power_of_2(H), PREFETCH=prefetch,
                                          num_warps=warps, enable_fp_fusion=False)


# Cooperative programs: C programs share a row-segment, each loading 1/C of
# it (a copy's granularity), publishing its partial sum of squares, and
# waiting for the others' through a counter that only grows (launch
# `generation` g waits for g * C arrivals, so nothing is reset between
# launches). The partials are summed in a fixed order: deterministic. A
# program only waits for programs of its own segment, which the hardware
# starts at about the same time (consecutive ids); GPU only (the
# interpreter runs programs one after another and would wait forever).
@triton.jit(do_not_specialize=["n_rows", "eps", "generation"])
def coop_kernel(X, W, Y, P, COUNT, xrs, xss, yrs, yss, n_rows, eps, generation,
                S: tl.constexpr, H: tl.constexpr, C: tl.constexpr, CHUNK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    item = pid // C
    part = pid % C
    row = item // S
    seg = item % S
    cols = part * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(X + row * xrs + seg * xss + cols).to(tl.float32)
    tl.store(P + item * C + part, tl.sum(x * x, axis=0))
    arrived = tl.atomic_add(COUNT + item, 1, sem="release", scope="gpu") + 1
    target = generation * C
    while arrived < target:
        arrived = tl.atomic_add(COUNT + item, 0, sem="acquire", scope="gpu")
    partials = tl.load(P + item * C + tl.arange(0, C), volatile=True)
    ss = tl.sum(partials, axis=0)
    r = tl.div_rn(1.0, tl.sqrt_rn(tl.div_rn(ss, H * 1.0) + eps))
    w = tl.load(W + seg * H + cols).to(tl.float32)
    tl.store(Y + row * yrs + seg * yss + cols, (x * r * w).to(Y.dtype.element_ty))


class Coop:
    def __init__(self, x, parts):
        T, S, H = x.shape
        self.parts = parts
        self.partials = torch.empty(T * S * parts, device=x.device, dtype=torch.float32)
        self.count = torch.zeros(T * S, device=x.device, dtype=torch.int32)
        self.generation = 0

    def __call__(self, x, w, y, warps):
        T, S, H = x.shape
        self.generation += 1
        return coop_kernel[(T * S * self.parts,)](
            x, w, y, self.partials, self.count, x.stride(0), x.stride(1), y.stride(0), y.stride(1), T, 1e-5,
            self.generation, S=S, H=H, C=self.parts, CHUNK=H // self.parts, num_warps=warps, enable_fp_fusion=False)


# TMA (Hopper's tensor memory accelerator, through host-side tensor
# descriptors): a program's row-segments arrive in shared memory by bulk
# copies issued by one thread, and leave the same way, instead of every
# thread issuing its own vector loads and stores.
@triton.jit(do_not_specialize=["eps"])
def tma_kernel(x_desc, W, y_desc, eps, S: tl.constexpr, H: tl.constexpr, BR: tl.constexpr,
               TMA_LOAD: tl.constexpr, TMA_STORE: tl.constexpr, X, Y):
    first = tl.program_id(0) * BR
    rows = first + tl.arange(0, BR)[:, None]
    cols = tl.arange(0, H)[None, :]
    if TMA_LOAD:
        x = x_desc.load([first, 0]).to(tl.float32)
    else:
        x = tl.load(X + rows.to(tl.int64) * H + cols).to(tl.float32)
    ss = tl.sum(x * x, axis=1)
    r = tl.div_rn(1.0, tl.sqrt_rn(tl.div_rn(ss, H * 1.0) + eps))
    w = tl.load(W + (rows % S) * H + cols).to(tl.float32)
    y = (x * r[:, None] * w).to(Y.dtype.element_ty)
    if TMA_STORE:
        y_desc.store([first, 0], y)
    else:
        tl.store(Y + rows.to(tl.int64) * H + cols, y)


def launch_tma(x, w, y, rows, warps, tma_load=True, tma_store=True):
    from triton.tools.tensor_descriptor import TensorDescriptor
    T, S, H = x.shape
    x2, y2 = x.view(T * S, H), y.view(T * S, H)
    return tma_kernel[(T * S // rows,)](
        TensorDescriptor.from_tensor(x2, [rows, H]), w, TensorDescriptor.from_tensor(y2, [rows, H]), 1e-5,
        S=S, H=H, BR=rows, TMA_LOAD=tma_load, TMA_STORE=tma_store, X=x2, Y=y2, num_warps=warps,
        enable_fp_fusion=False)


def round4(dev) -> None:
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    for S, H in [(3, 4096), (4, 8192), (3, 7168)]:
        w = (torch.rand(S, H, device=dev) + 0.5).to(torch.bfloat16)
        for T in [2048, 8192]:
            x, y, ref, cur = bf16_taps(dev, w, T)
            cands = {"cur": lambda: launch_shipped(x, w, y, cur)}
            for k in (() if {"--coop", "--tma"} & set(sys.argv[1:]) else (2, 3, 4, 6, 8)):
                for warps in (4, 8):
                    for prefetch in (True, False):
                        name = f"p{k}w{warps}{'' if prefetch else 'n'}"
                        compiled = launch_persistent(x, w, y, k * sms, warps, prefetch)
                        if T == 2048 and k == 4:
                            print(f"  S={S} H={H} {name}: {compiled.n_regs} registers, {compiled.n_spills} spilled, "
                                  f"identical {(y == ref).float().mean().item():.5f}", flush=True)
                        cands[name] = (lambda k=k, warps=warps, prefetch=prefetch:
                                       launch_persistent(x, w, y, k * sms, warps, prefetch))
            if "--tma" in sys.argv[1:] and H & (H - 1) == 0:
                for rows, warps, load, store in ((1, 4, 1, 1), (1, 8, 1, 1), (2, 8, 1, 1), (1, 8, 1, 0),
                                                 (1, 8, 0, 1), (2, 4, 1, 1), (4, 8, 1, 1)):
                    name = f"tma_r{rows}w{warps}{'L' if load else ''}{'S' if store else ''}"
                    try:
                        y.zero_()
                        launch_tma(x, w, y, rows, warps, bool(load), bool(store))
                        torch.cuda.synchronize()
                    except Exception as error:  # an exploration: report and go on
                        print(f"  {name}: {type(error).__name__}: {str(error)[:200]}", flush=True)
                        continue
                    if T == 2048:
                        print(f"  S={S} H={H} {name}: identical {(y == ref).float().mean().item():.5f}", flush=True)
                    cands[name] = (lambda rows=rows, warps=warps, load=load, store=store:
                                   launch_tma(x, w, y, rows, warps, bool(load), bool(store)))
            if "--coop" in sys.argv[1:] and H & (H - 1) == 0:
                for parts, warps in ((2, 4), (4, 4), (4, 2), (8, 2), (8, 1)):
                    coop = Coop(x, parts)
                    y.zero_()
                    coop(x, w, y, warps)
                    torch.cuda.synchronize()
                    if T == 2048:
                        print(f"  S={S} H={H} coop{parts}w{warps}: max diff "
                              f"{(y.float() - ref.float()).abs().max().item():.3g}, identical "
                              f"{(y == ref).float().mean().item():.5f}", flush=True)
                    cands[f"coop{parts}w{warps}"] = (lambda coop=coop, warps=warps: coop(x, w, y, warps))
            ranked = ranked_against_copy(x, y, cands, 7 if T == 2048 else 3)
            print(f"BW4 S={S} H={H} T={T}: " + " ".join(
                f"{k}:{statistics.median(v):.3f}[{min(v):.3f}-{max(v):.3f}]" for k, v in ranked[:12]), flush=True)


def pieces(h):
    out = []
    bit = 1 << (h.bit_length() - 1)
    while h and len(out) < 3:
        if h >= bit:
            out.append(bit)
            h -= bit
        bit >>= 1
    assert h == 0, "needs more than 3 pieces"
    return out + [0] * (3 - len(out))


def launch_variant(x, w, y, eps, *, hint=False, split=1, wfirst=False, warps=8, piecewise=True):
    T, S, H = x.shape
    if piecewise:
        c0, c1, c2 = pieces(H)
    else:
        c0, c1, c2 = H, 0, 0
    grid = (T * S * split,)
    _variant_kernel[grid](x, w, y, x.stride(0), x.stride(1), y.stride(0), y.stride(1), T, eps,
                          S=S, H=H, C0=c0, C1=c1, C2=c2, HINT=hint, SPLIT=split, WFIRST=wfirst,
                          num_warps=warps, enable_fp_fusion=False)


def check_correct():
    from dspark.kernels.reference import segmented_rmsnorm_reference
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    for S, H in [(3, 4096), (3, 5120), (2, 7168), (1, 8192)]:
        x = torch.randn(3, S, H, device=dev, dtype=torch.bfloat16)
        w = (torch.rand(S, H, device=dev) + 0.5).to(torch.bfloat16)
        ref = segmented_rmsnorm_reference(x, w, 1e-5)
        for kw in [dict(), dict(hint=True), dict(wfirst=True), dict(split=4, piecewise=False)]:
            if kw.get("split", 1) > 1 and H not in (4096, 8192):
                continue
            y = torch.empty_like(x)
            launch_variant(x, w, y, 1e-5, **kw)
            d = (y.float() - ref.float()).abs().max().item()
            same = (y == ref).float().mean().item()
            print(f"correct S={S} H={H} {kw}: maxdiff={d:.3g} identical={same:.5f}", flush=True)


def main():
    if not torch.cuda.is_available():
        # Round 1's correctness pass launches the variants too, which Triton
        # cannot do on the CPU (outside its interpreter).
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    for flag, run_round in (("--round2", round2), ("--round3", round3), ("--round4", round4)):
        if flag in sys.argv[1:]:
            spin = torch.randn(1 << 26, device="cuda")
            for _ in range(300):  # clocks up before the first timing
                spin.mul_(1.0)
            torch.cuda.synchronize()
            run_round(torch.device("cuda"))
            return 0
    check_correct()
    from triton.testing import do_bench
    from dspark.kernels.segmented_rmsnorm import _launch, choose_launch_config
    dev = torch.device("cuda")
    a = torch.randn(1 << 26, device=dev)
    for _ in range(300):
        a.mul_(1.0)
    torch.cuda.synchronize()
    shapes = [(3, 4096), (3, 5120), (4, 8192), (3, 7168), (5, 7168)]
    for S, H in shapes:
        w = (torch.rand(S, H, device=dev) + 0.5).to(torch.bfloat16)
        for T in [2048, 4096, 8192]:
            x = torch.randn(T, S, H, device=dev, dtype=torch.bfloat16); y = torch.empty_like(x)
            cfg = choose_launch_config(H, n_rows=T, num_segments=S, device=dev)
            cands = {
                "cur": lambda: _launch(x, w, y, 1e-5, False, cfg),
                "hint_w8": lambda: launch_variant(x, w, y, 1e-5, hint=True, warps=8),
                "pw_w8": lambda: launch_variant(x, w, y, 1e-5, warps=8),
                "pw_w4": lambda: launch_variant(x, w, y, 1e-5, warps=4),
                "hint_w4": lambda: launch_variant(x, w, y, 1e-5, hint=True, warps=4),
            }
            if H == 8192:
                cands["hint_w16"] = lambda: launch_variant(x, w, y, 1e-5, hint=True, warps=16)
            ratios = {k: [] for k in cands}
            for _ in range(7):
                copy = do_bench(lambda: y.copy_(x), warmup=25, rep=150)
                for k, fn in cands.items():
                    ratios[k].append(copy / do_bench(fn, warmup=25, rep=150))
            print(f"BW S={S} H={H} T={T}: " + " ".join(f"{k}:{statistics.median(v):.3f}" for k, v in ratios.items()),
                  flush=True)
        for T in [1, 8, 64]:
            x = torch.randn(T, S, H, device=dev, dtype=torch.bfloat16); y = torch.empty_like(x)
            cfg = choose_launch_config(H, n_rows=T, num_segments=S, device=dev)
            cands = {
                "cur": lambda: _launch(x, w, y, 1e-5, False, cfg),
                "pw_wf_w8": lambda: launch_variant(x, w, y, 1e-5, wfirst=True, warps=8),
                "pw_wf_w4": lambda: launch_variant(x, w, y, 1e-5, wfirst=True, warps=4),
                "pw_wf_w16": lambda: launch_variant(x, w, y, 1e-5, wfirst=True, warps=16),
            }
            if H in (4096, 8192):
                for sp in (2, 4, 8):
                    cands[f"split{sp}_w8"] = (lambda sp=sp: launch_variant(x, w, y, 1e-5, split=sp, piecewise=False, warps=8))
                    cands[f"split{sp}_w4"] = (lambda sp=sp: launch_variant(x, w, y, 1e-5, split=sp, piecewise=False, warps=4))
            res = {k: [] for k in cands}
            for _ in range(3):
                copy = graph_replay_ms(lambda: y.copy_(x), 100)
                for k, fn in cands.items():
                    res[k].append(graph_replay_ms(fn, 100) / copy)
            print(f"LAT S={S} H={H} T={T} copy={copy * 1e3:.2f}us: " + " ".join(f"{k}:{statistics.median(v):.2f}" for k, v in res.items()),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
