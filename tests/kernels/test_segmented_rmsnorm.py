"""Accuracy and API tests for dspark.kernels.segmented_rmsnorm.

On a machine without a CUDA GPU the kernel runs in Triton's interpreter
(tests/kernels/conftest.py sets TRITON_INTERPRET=1); with one it runs compiled.
Every check compares with the torch reference of the same cast order.
"""

import dataclasses
import importlib
import itertools
import os
import zlib

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from dspark.kernels import (  # noqa: E402
    kernel_status,
    segmented_rmsnorm,
    segmented_rmsnorm_reference,
)
from dspark.kernels.testing import assert_kernel_close, ulp_distance  # noqa: E402

# The package re-exports the function under the module's name; fetch the module itself.
kernel_module = importlib.import_module("dspark.kernels.segmented_rmsnorm")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
EPS = 1e-5

if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") == "1" and not kernel_status(DEVICE).uses_kernel:
    # Skipping here would hide every kernel test behind one line of output.
    raise pytest.UsageError(
        "triton was imported before tests/kernels/conftest.py set TRITON_INTERPRET=1; "
        "set TRITON_INTERPRET=1 in the environment to test the kernel on the CPU"
    )

requires_kernel = pytest.mark.skipif(
    not kernel_status(DEVICE).uses_kernel,
    reason=f"kernel does not run here: {kernel_status(DEVICE).reason}",
)
pytestmark = requires_kernel

_DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}

# (x dtype, weight dtype): fp32 weights or weights in the input's dtype.
DTYPE_PAIRS = [
    (torch.float32, torch.float32),
    (torch.float16, torch.float32),
    (torch.float16, torch.float16),
    (torch.bfloat16, torch.float32),
    (torch.bfloat16, torch.bfloat16),
]
DTYPE_PARAMS = [
    pytest.param(x_dtype, w_dtype, id=f"x{_DTYPE_NAMES[x_dtype]}-w{_DTYPE_NAMES[w_dtype]}")
    for x_dtype, w_dtype in DTYPE_PAIRS
]
CAST_ORDER_PARAMS = [pytest.param(order, id=order) for order in ("fp32", "hf")]

# Odd widths with every row count; the K3 width (7168) with the row counts
# the interpreter gets through quickly, and T = 127 in bf16, the serving dtype.
_SMALL_SHAPES = list(itertools.product((0, 1, 8, 127), (1, 5), (1, 3, 100, 129)))
_WIDE_SHAPES = [(t, s, 7168) for t in (0, 1, 8) for s in (1, 5)]
MATCH_PARAMS = [
    pytest.param(
        t, s, h, x_dtype, w_dtype, order,
        id=f"T{t}-S{s}-H{h}-x{_DTYPE_NAMES[x_dtype]}-w{_DTYPE_NAMES[w_dtype]}-{order}",
    )
    for t, s, h in _SMALL_SHAPES + _WIDE_SHAPES + [(127, 5, 7168)]
    for x_dtype, w_dtype in DTYPE_PAIRS
    for order in ("fp32", "hf")
    if (t, h) != (127, 7168) or x_dtype == torch.bfloat16
]


def make_taps(n_rows, num_segments, hidden, dtype, *, seed, device=DEVICE):
    """Token rows of concatenated taps ``[T, S*H]``; tap ``i`` has a scale 10**(i-2),
    as the residual stream grows with depth."""
    gen = torch.Generator().manual_seed(seed)
    scales = torch.logspace(-2, num_segments - 3, num_segments, dtype=torch.float64)
    x = torch.randn(n_rows, num_segments, hidden, generator=gen, dtype=torch.float64) * scales[:, None]
    return x.reshape(n_rows, num_segments * hidden).to(dtype).to(device)


def make_weight(num_segments, hidden, dtype, *, seed, device=DEVICE):
    gen = torch.Generator().manual_seed(seed + 1)
    w = 1.0 + 0.5 * torch.randn(num_segments, hidden, generator=gen, dtype=torch.float64)
    return w.to(dtype).to(device)


def _seed(*parts) -> int:
    # crc32, not hash(): str hashes change from one interpreter to the next.
    return zlib.crc32(repr(parts).encode())


@pytest.mark.parametrize("n_rows, num_segments, hidden, x_dtype, w_dtype, cast_order", MATCH_PARAMS)
def test_matches_reference(n_rows, num_segments, hidden, x_dtype, w_dtype, cast_order):
    seed = _seed(n_rows, num_segments, hidden, str(x_dtype), str(w_dtype), cast_order)
    x = make_taps(n_rows, num_segments, hidden, x_dtype, seed=seed)
    w = make_weight(num_segments, hidden, w_dtype, seed=seed)

    y = segmented_rmsnorm(x, w, EPS, cast_order=cast_order)

    expected = segmented_rmsnorm_reference(x, w, EPS, cast_order=cast_order)
    assert_kernel_close(f"y[T={n_rows},S={num_segments},H={hidden}]", y, expected)


@pytest.mark.parametrize("x_dtype", [pytest.param(torch.float16, id="fp16"), pytest.param(torch.bfloat16, id="bf16")])
def test_hf_order_sums_in_fp64_and_matches_the_reference_bit_for_bit(x_dtype):
    """In the "hf" order a one-ulp flip of the rounded intermediate can become
    two ulps of the output, so the 1-ulp contract rests on the factor being
    the reference's to the bit: the kernel sums in fp64 there (docs/kernels.md)."""
    x = make_taps(16, 5, 7168, x_dtype, seed=31)
    w = make_weight(5, 7168, x_dtype, seed=31)
    y = segmented_rmsnorm(x, w, EPS, cast_order="hf")
    expected = segmented_rmsnorm_reference(x, w, EPS, cast_order="hf")
    differing = (ulp_distance(y.cpu(), expected.cpu()) > 0).sum().item()
    assert differing == 0, f"{differing} of {y.numel()} outputs differ from the reference"


def test_fp32_sums_would_break_the_hf_order():
    """The same fp16 input with fp32 sums forced: outputs differ from the
    reference, some by two ulps, which is why the "hf" order sums in fp64 (and
    why the test above can fail)."""
    x = make_taps(16, 5, 7168, torch.float16, seed=31)
    w = make_weight(5, 7168, torch.float16, seed=31)
    y = torch.empty_like(x)
    config = kernel_module.choose_launch_config(7168, n_rows=16, num_segments=5, device=x.device)
    kernel_module._launch(x.view(16, 5, 7168), w, y.view(16, 5, 7168), EPS, True, config, fp64_sum=False)
    ulps = ulp_distance(y.cpu(), segmented_rmsnorm_reference(x, w, EPS, cast_order="hf").cpu())
    assert (ulps > 0).sum().item() > 0
    assert ulps.max().item() == 2


@pytest.mark.parametrize("cast_order", CAST_ORDER_PARAMS)
@pytest.mark.parametrize("x_dtype, w_dtype", DTYPE_PARAMS)
def test_strided_rows_in_and_out(x_dtype, w_dtype, cast_order):
    n_rows, num_segments, hidden = 9, 5, 129
    wide = make_taps(n_rows, num_segments + 1, hidden, x_dtype, seed=7)
    x = wide[:, 3 : 3 + num_segments * hidden]  # row stride (S+1)*H, odd offset
    out_buffer = torch.full((n_rows, num_segments * hidden + 17), float("nan"), dtype=x_dtype, device=DEVICE)
    out = out_buffer[:, 17:]
    w = make_weight(num_segments, hidden, w_dtype, seed=7)

    result = segmented_rmsnorm(x, w, EPS, out=out, cast_order=cast_order)

    assert result.data_ptr() == out.data_ptr()
    assert torch.isnan(out_buffer[:, :17]).all(), "wrote outside out"
    expected = segmented_rmsnorm_reference(x, w, EPS, cast_order=cast_order)
    assert_kernel_close("y (strided rows)", out, expected)


@pytest.mark.parametrize("cast_order", CAST_ORDER_PARAMS)
@pytest.mark.parametrize("x_dtype, w_dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("n_rows, hidden", [pytest.param(8, 7168, id="T8-S5-H7168"), pytest.param(127, 100, id="T127-S5-H100")])
def test_in_place(n_rows, hidden, x_dtype, w_dtype, cast_order):
    x = make_taps(n_rows, 5, hidden, x_dtype, seed=11)
    w = make_weight(5, hidden, w_dtype, seed=11)
    expected = segmented_rmsnorm_reference(x, w, EPS, cast_order=cast_order)

    result = segmented_rmsnorm(x, w, EPS, out=x, cast_order=cast_order)

    assert result is x
    assert_kernel_close("x (in place)", x, expected)


@pytest.mark.parametrize("x_dtype, w_dtype", DTYPE_PARAMS)
def test_segment_layout_input(x_dtype, w_dtype):
    """``[..., S, H]`` input, including a view whose segments are not adjacent."""
    w = make_weight(5, 100, w_dtype, seed=3)
    x = make_taps(2 * 3, 5, 100, x_dtype, seed=3).reshape(2, 3, 5, 100)
    assert_kernel_close("y[B,T,S,H]", segmented_rmsnorm(x, w, EPS), segmented_rmsnorm_reference(x, w, EPS))

    padded = make_taps(4, 5, 130, x_dtype, seed=4).reshape(4, 5, 130)
    x_view = padded[:, :, 30:]  # segment stride 130, row stride 650
    y = segmented_rmsnorm(x_view, w, EPS)
    assert y.shape == x_view.shape
    assert_kernel_close("y[T,S,H] (gapped segments)", y, segmented_rmsnorm_reference(x_view, w, EPS))


@pytest.mark.parametrize("hf", [pytest.param(False, id="fp32"), pytest.param(True, id="hf")])
def test_other_tilings(hf):
    """Tiles of several rows, the last one partly past the end, other warp
    counts, the weight loaded before or after the reduction: each row of each
    tile normalised on its own, nothing written past the last row."""
    x = make_taps(23, 3, 100, torch.bfloat16, seed=21).view(23, 3, 100)
    w = make_weight(3, 100, torch.bfloat16, seed=21)
    y = torch.full((24, 3, 100), float("nan"), dtype=x.dtype, device=DEVICE)
    base = kernel_module.choose_launch_config(100)
    expected = segmented_rmsnorm_reference(x, w, EPS, cast_order="hf" if hf else "fp32")
    for block_rows, num_warps, weight_first in ((1, 1, False), (4, 2, True), (8, 4, False), (16, 8, True)):
        config = dataclasses.replace(base, block_rows=block_rows, num_warps=num_warps, weight_first=weight_first)
        y.fill_(float("nan"))
        kernel_module._launch(x, w, y[:23], EPS, hf, config)
        assert_kernel_close(f"y ({config})", y[:23], expected)
        assert y[23].isnan().all(), f"{config} wrote past the last row"


@pytest.mark.parametrize("hf", [pytest.param(False, id="fp32"), pytest.param(True, id="hf")])
@pytest.mark.parametrize("split", [2, 8])
@pytest.mark.parametrize(
    "n_rows, num_segments, hidden, w_dtype",
    [
        pytest.param(3, 3, 7168, torch.bfloat16, id="T3-S3-H7168"),  # the last slice partly past H
        pytest.param(2, 2, 4096, torch.float32, id="T2-S2-H4096"),
        pytest.param(1, 1, 4100, torch.bfloat16, id="T1-S1-H4100"),  # slices of 1024, five of them empty
    ],
)
def test_row_segments_split_between_programs(n_rows, num_segments, hidden, w_dtype, split, hf):
    """Each of `split` programs sums the whole segment and stores its slice:
    every slice normalised by the whole segment's factor, nothing written
    outside the rows (strided, with a gap between them)."""
    x = make_taps(n_rows, num_segments, hidden, torch.bfloat16, seed=_seed(n_rows, hidden, split)).view(
        n_rows, num_segments, hidden)
    w = make_weight(num_segments, hidden, w_dtype, seed=hidden)
    storage = torch.full((n_rows, num_segments + 1, hidden), float("nan"), dtype=x.dtype, device=DEVICE)
    y = storage[:, :num_segments]
    config = dataclasses.replace(kernel_module.choose_launch_config(hidden), split=split, weight_first=split == 8)
    kernel_module._launch(x, w, y, EPS, hf, config)
    assert_kernel_close(f"y ({config})", y, segmented_rmsnorm_reference(x, w, EPS, cast_order="hf" if hf else "fp32"))
    assert storage[:, num_segments].isnan().all(), f"{config} wrote between rows"


def test_a_split_launch_in_place_has_one_program_a_segment():
    """Split, another program could still be reading a slice this one has
    overwritten; in place the launch does not split."""
    x = make_taps(2, 3, 7168, torch.bfloat16, seed=31).view(2, 3, 7168)
    w = make_weight(3, 7168, torch.bfloat16, seed=31)
    expected = segmented_rmsnorm_reference(x, w, EPS)
    config = dataclasses.replace(kernel_module.choose_launch_config(7168), split=8, weight_first=True)
    kernel_module._launch(x, w, x, EPS, False, config)
    assert_kernel_close("x (in place, split asked)", x, expected)


def test_how_many_programs_share_a_row_segment():
    """At most one program a multiprocessor, at most MAX_SPLIT a segment."""
    assert kernel_module.split_for(3, 132) == 8      # T = 1, 3 taps
    assert kernel_module.split_for(20, 132) == 4     # T = 4, 5 taps
    assert kernel_module.split_for(40, 132) == 2     # T = 8, 5 taps
    assert kernel_module.split_for(66, 132) == 2
    assert kernel_module.split_for(67, 132) == 1
    assert kernel_module.split_for(320, 132) == 1    # T = 64, 5 taps
    with pytest.raises(ValueError, match="power of two"):
        kernel_module.LaunchConfig(8192, 1, 8, True, split=3)
    with pytest.raises(ValueError, match="one row a tile"):
        kernel_module.LaunchConfig(128, 32, 4, True, split=2)
    assert kernel_module.choose_launch_config(7168, n_rows=1, num_segments=5, device=torch.device("cpu")).split == 1
    if DEVICE == "cuda":
        cuda = torch.device("cuda")
        sms = torch.cuda.get_device_properties(cuda).multi_processor_count
        assert kernel_module.choose_launch_config(7168, n_rows=1, num_segments=5, device=cuda).split == \
            kernel_module.split_for(5, sms)
        assert kernel_module.choose_launch_config(7168, n_rows=64, num_segments=5, device=cuda).split == 1
        assert kernel_module.choose_launch_config(100, n_rows=1, num_segments=5, device=cuda).split == 1


def test_tiles_of_launches_longer_than_one_wave():
    """Several waves: 4096-wide taps on 8 warps, one row a program and four
    from 32768 row-segments; exactly 8192-wide ones two rows from 8192
    row-segments; other widths as the default (docs/kernels.md)."""
    assert kernel_module.streaming_tile(4096, 1, 4, programs=6144) == (1, 8)
    assert kernel_module.streaming_tile(4096, 1, 4, programs=32767) == (1, 8)
    assert kernel_module.streaming_tile(4096, 1, 4, programs=32768) == (4, 8)
    assert kernel_module.streaming_tile(8192, 1, 8, programs=8192) == (2, 8)
    assert kernel_module.streaming_tile(8192, 1, 8, programs=8191) == (1, 8)
    assert kernel_module.streaming_tile(7168, 1, 8, programs=1 << 20) == (1, 8)
    assert kernel_module.streaming_tile(5120, 1, 8, programs=1 << 20) == (1, 8)
    assert kernel_module.streaming_tile(1024, 4, 4, programs=1 << 20) == (4, 4)
    if DEVICE == "cuda":
        cuda = torch.device("cuda")
        config = kernel_module.choose_launch_config(8192, n_rows=4096, num_segments=4, device=cuda)
        assert (config.block_rows, config.num_warps, config.weight_first) == (2, 8, False)
        assert kernel_module.choose_launch_config(8192, n_rows=1024, num_segments=4, device=cuda).block_rows == 1


@pytest.mark.parametrize("hf", [pytest.param(False, id="fp32"), pytest.param(True, id="hf")])
def test_two_rows_of_8192_a_program(hf):
    """The tile long 8192-wide launches use: two rows a program, the last
    tile half past the end, strided rows; nothing written past the last row."""
    x = make_taps(3, 2, 8192, torch.bfloat16, seed=41).view(3, 2, 8192)
    w = make_weight(2, 8192, torch.bfloat16, seed=41)
    storage = torch.full((4, 3, 8192), float("nan"), dtype=x.dtype, device=DEVICE)
    y = storage[:3, :2]
    config = kernel_module.LaunchConfig(8192, 2, 8)
    kernel_module._launch(x, w, y, EPS, hf, config)
    assert_kernel_close(f"y ({config})", y, segmented_rmsnorm_reference(x, w, EPS, cast_order="hf" if hf else "fp32"))
    assert storage[:, 2].isnan().all() and storage[3].isnan().all(), f"{config} wrote outside the rows"


def test_launch_config_for_the_k3_width():
    """8 warps per 7168-wide segment; the weight's load goes beside x's only
    when every program fits on the GPU at once (docs/kernels.md)."""
    config = kernel_module.choose_launch_config(7168, n_rows=8, num_segments=5, device=torch.device("cpu"))
    assert (config.block_size, config.block_rows, config.num_warps) == (8192, 1, 8)
    assert not config.weight_first
    if DEVICE == "cuda":
        cuda = torch.device("cuda")
        assert kernel_module.choose_launch_config(7168, n_rows=8, num_segments=5, device=cuda).weight_first
        assert not kernel_module.choose_launch_config(7168, n_rows=32768, num_segments=5, device=cuda).weight_first


def test_leading_dims_that_do_not_collapse():
    """[B, T, S*H] views whose batch and token strides cannot merge go through copies."""
    w = make_weight(5, 8, torch.float32, seed=6)
    x = make_taps(4 * 6, 5, 8, torch.float32, seed=6).view(4, 6, 40)[:, :2]
    out = torch.full((4, 6, 40), float("nan"), device=DEVICE)[:, 3:5]
    segmented_rmsnorm(x, w, EPS, out=out)
    assert_kernel_close("y (non-collapsing rows)", out, segmented_rmsnorm_reference(x, w, EPS))


def test_non_contiguous_last_dim_is_copied():
    w = make_weight(5, 3, torch.float32, seed=5)
    x = torch.randn(15, 3, device=DEVICE).t()  # [3, 15], last-dim stride 3
    assert x.stride(-1) != 1
    assert_kernel_close("y (column-major x)", segmented_rmsnorm(x, w, EPS), segmented_rmsnorm_reference(x, w, EPS))


def test_zero_rows():
    w = make_weight(5, 7168, torch.bfloat16, seed=1)
    x = torch.empty(0, 5 * 7168, dtype=torch.bfloat16, device=DEVICE)
    y = segmented_rmsnorm(x, w, EPS)
    assert y.shape == (0, 5 * 7168) and y.dtype == torch.bfloat16


def test_eps_is_a_runtime_value():
    x = make_taps(4, 5, 100, torch.float32, seed=2) * 1e-3  # mean square near eps
    w = make_weight(5, 100, torch.float32, seed=2)
    compiled_before = _compiled_variants()
    for eps in (1e-6, 1e-5, 1e-2):
        assert_kernel_close(f"y (eps={eps})", segmented_rmsnorm(x, w, eps), segmented_rmsnorm_reference(x, w, eps))
    if compiled_before is not None:
        # One compile for the first call at most; new eps values and new row
        # counts reuse it: one row (a row stride that is never used), a
        # multiple of 16 rows (Triton would specialise on it), 37 rows. All
        # these launches fit on the GPU at once, so the weight's placement
        # (the one per-T choice, docs/kernels.md) is the same.
        for n_rows in (1, 16, 37):
            segmented_rmsnorm(make_taps(n_rows, 5, 100, torch.float32, seed=n_rows), w, 0.5)
        assert _compiled_variants() - compiled_before <= 1


def test_cached_launch_needs_triton_3_3_and_compiled_kernels():
    """From Triton 3.3 a compiled kernel takes every argument, constexprs
    included; 3.2 and older take only the runtime ones, so they, and the
    interpreter, always launch through the JIT."""
    supported = kernel_module._cached_launch_supported
    assert supported("3.3.1", interpreted=False) and supported("3.6.0", interpreted=False)
    assert supported("3.9.0", interpreted=False) and supported("4.0.0", interpreted=False)
    assert not supported("3.2.0", interpreted=False) and not supported("2.3.1", interpreted=False)
    assert not supported("3.6.0", interpreted=True)
    assert not supported("unknown", interpreted=False)


class _InterpretedKernel:
    """What a compiled kernel is to the launch cache, run by Triton's
    interpreter (which compiles nothing): launching it runs the kernel."""

    def __init__(self, num_warps: int) -> None:
        self.num_warps = num_warps
        self.launches = 0

    def __getitem__(self, grid):
        def launch(*arguments):
            self.launches += 1
            kernel_module._segmented_rmsnorm_kernel[grid](*arguments, num_warps=self.num_warps,
                                                          enable_fp_fusion=False)
        return launch


def test_a_repeated_launch_skips_the_jit_and_matches_the_reference(monkeypatch):
    """The first launch of a key goes through the JIT; later ones, with other
    row counts (other grids), straight to the compiled kernel. A pointer of
    another alignment is another key: Triton would compile another variant.
    On a GPU the compiled kernel is Triton's own; under the interpreter a
    stand-in that runs the kernel takes its place, so the cache's keys are
    tested on the CPU too."""
    if DEVICE == "cuda" and not kernel_module._CACHED_LAUNCH:
        pytest.skip("launches go through Triton's JIT with this Triton")
    through_jit = []
    real = kernel_module._launch_through_triton

    def counting(grid, arguments, num_warps):
        through_jit.append(grid)
        compiled = real(grid, arguments, num_warps)
        return compiled if DEVICE == "cuda" else _InterpretedKernel(num_warps)

    monkeypatch.setattr(kernel_module, "_launch_through_triton", counting)
    monkeypatch.setattr(kernel_module, "_COMPILED", {})
    monkeypatch.setattr(kernel_module, "_CACHED_LAUNCH", True)
    w = make_weight(3, 4096, torch.bfloat16, seed=51)
    for n_rows in (5, 5, 300, 2):
        x = make_taps(n_rows, 3, 4096, torch.bfloat16, seed=n_rows)
        assert_kernel_close(f"y (T={n_rows})", segmented_rmsnorm(x, w, EPS), segmented_rmsnorm_reference(x, w, EPS))
    # One JIT launch per launch configuration (on an H200: T = 5 and 2 share
    # one, T = 300 has another; on the CPU all three share one); the repeats
    # and the other grids are cached.
    configs = {kernel_module.choose_launch_config(4096, n_rows=n, num_segments=3, device=torch.device(DEVICE))
               for n in (5, 300, 2)}
    jit_launches = len(through_jit)
    assert jit_launches == len(configs), f"{jit_launches} JIT launches for {len(configs)} configurations"
    storage = make_taps(6, 3, 4096, torch.bfloat16, seed=52).flatten()
    x = storage[1:1 + 5 * 3 * 4096].view(5, 3 * 4096)  # 2 bytes past a 16-byte boundary
    assert_kernel_close("y (x not 16-byte aligned)", segmented_rmsnorm(x, w, EPS),
                        segmented_rmsnorm_reference(x, w, EPS))
    assert len(through_jit) == jit_launches + 1, "an unaligned x reused a kernel compiled for aligned ones"
    x = storage[8:8 + 5 * 3 * 4096].view(5, 3 * 4096)  # 16-byte aligned again: the first key
    assert_kernel_close("y (aligned again)", segmented_rmsnorm(x, w, EPS), segmented_rmsnorm_reference(x, w, EPS))
    assert len(through_jit) == jit_launches + 1


def _compiled_variants():
    """Number of compiled variants of the kernel, or None where that cannot be read."""
    try:
        caches = kernel_module._segmented_rmsnorm_kernel.device_caches
        return sum(len(entry[0]) for entry in caches.values())
    except (AttributeError, TypeError, IndexError):
        return None  # the interpreter compiles nothing; other Triton versions keep other caches


def test_hf_and_fp32_orders_differ_on_about_a_quarter_of_bf16_outputs():
    """The documented gap between the two cast orders (docs/kernels.md)."""
    x = make_taps(64, 5, 1024, torch.bfloat16, seed=9)
    w = make_weight(5, 1024, torch.bfloat16, seed=9)
    hf = segmented_rmsnorm(x, w, EPS, cast_order="hf")
    fp32 = segmented_rmsnorm(x, w, EPS, cast_order="fp32")
    ulps = ulp_distance(hf.cpu(), fp32.cpu())
    assert 0.2 < (ulps > 0).float().mean().item() < 0.3
    assert ulps.max().item() <= 2


@pytest.mark.parametrize(
    "n_rows, row_stride",
    [
        pytest.param(2, 2**31 + 64, id="stride-past-2^31"),
        # A stride that fits in 32 bits times a row index: only 64-bit row
        # arithmetic reaches the third row.
        pytest.param(3, 2**30 + 64, id="row-index-times-stride-past-2^31"),
    ],
)
def test_large_offsets_use_64_bit_arithmetic(n_rows, row_stride):
    """A row that starts past element 2**31 of its storage."""
    hidden, num_segments = 16, 2
    storage = torch.empty((n_rows - 1) * row_stride + num_segments * hidden, dtype=torch.bfloat16, device=DEVICE)
    x = storage.as_strided((n_rows, num_segments * hidden), (row_stride, 1))
    x.copy_(make_taps(n_rows, num_segments, hidden, torch.bfloat16, seed=13))
    w = make_weight(num_segments, hidden, torch.float32, seed=13)

    y = segmented_rmsnorm(x, w, EPS)

    assert_kernel_close("y (row at 2**31)", y, segmented_rmsnorm_reference(x, w, EPS))


@pytest.mark.skipif(DEVICE != "cuda", reason="needs 8.6 GB of GPU memory")
def test_more_than_2_pow_31_elements():
    n_rows, num_segments, hidden = 60_000, 5, 7168  # 2.15e9 elements
    assert n_rows * num_segments * hidden > 2**31
    x = torch.randn(n_rows, num_segments * hidden, dtype=torch.bfloat16, device=DEVICE)
    w = make_weight(num_segments, hidden, torch.bfloat16, seed=17)
    y = segmented_rmsnorm(x, w, EPS)
    tail = slice(n_rows - 8, n_rows)
    assert_kernel_close("y[-8:] (T*S*H > 2**31)", y[tail], segmented_rmsnorm_reference(x[tail], w, EPS))
    del x, y
    torch.cuda.empty_cache()


def test_rejects_bad_arguments():
    x = make_taps(2, 5, 8, torch.float32, seed=0)
    w = make_weight(5, 8, torch.float32, seed=0)
    with pytest.raises(ValueError, match="cast_order"):
        segmented_rmsnorm(x, w, EPS, cast_order="bf16")
    with pytest.raises(ValueError, match=r"\[5, 8\]"):
        segmented_rmsnorm(x[:, :-1], w, EPS)
    with pytest.raises(ValueError, match="out must match"):
        segmented_rmsnorm(x, w, EPS, out=torch.empty(2, 40, dtype=torch.float16, device=DEVICE))
    with pytest.raises(ValueError, match="overlaps"):
        buffer = make_taps(3, 5, 8, torch.float32, seed=0)
        segmented_rmsnorm(buffer[:2], w, EPS, out=buffer[1:])
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        segmented_rmsnorm(x.double(), w, EPS)


# --------------------------------------------------------------------------
# The kernel ran: a fallback cannot pass for it (tests/kernels/conftest.py)


@pytest.mark.parametrize("hidden", [pytest.param(7168, id="H7168"), pytest.param(8192, id="H8192")])
def test_the_kernel_runs_at_the_widths_of_real_taps(kernel_launches, hidden):
    x = make_taps(2, 5, hidden, torch.bfloat16, seed=3)
    w = make_weight(5, hidden, torch.bfloat16, seed=3)
    segmented_rmsnorm(x, w, EPS)
    assert kernel_launches == [(2, 5, hidden)]


@pytest.mark.filterwarnings("ignore::dspark.kernels.KernelFallbackWarning")
def test_a_fallback_fails_a_kernel_test(monkeypatch):
    """Lowering the fused width limit below K3's width (the mutation the
    fixture is there for) makes the K3-width tests fail, not pass."""
    monkeypatch.setattr(kernel_module, "MAX_FUSED_HIDDEN", 4096)
    kernel_module._plan.cache_clear()
    try:
        with pytest.raises(AssertionError, match="fell back to the torch reference"):
            segmented_rmsnorm(make_taps(1, 5, 7168, torch.bfloat16, seed=3),
                              make_weight(5, 7168, torch.bfloat16, seed=3), EPS)
    finally:
        kernel_module._plan.cache_clear()
