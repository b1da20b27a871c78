"""Exploration: kernel variants tried against the EAGLE-3 shape goals
(>= 0.97 x copy bandwidth at T = 2048, <= 1.25 x copy latency at T <= 64).

    python tests/benchmarks/explore_kernel_variants.py

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


def graph_us(fn, calls=100, replays=20):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay(); torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    return statistics.median(times)


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
    check_correct()
    if not torch.cuda.is_available():
        return 0
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
                copy = graph_us(lambda: y.copy_(x))
                for k, fn in cands.items():
                    res[k].append(graph_us(fn) / copy)
            print(f"LAT S={S} H={H} T={T} copy={copy:.2f}us: " + " ".join(f"{k}:{statistics.median(v):.2f}" for k, v in res.items()),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
