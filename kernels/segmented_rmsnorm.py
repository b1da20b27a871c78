"""Segmented RMSNorm: one RMSNorm per target tap, fused into one Triton kernel.

A DSpark draft with ``fc_norm`` normalises each of its ``S`` target taps on
its own, with its own weight, before the taps are concatenated and projected by
``context_proj`` (DESIGN §1-2). This module holds the kernel, its launcher and
the public :func:`segmented_rmsnorm`. The torch reference is
:func:`dspark.kernels.reference.segmented_rmsnorm_reference`.

Triton is optional. Where it is missing, too old, or cannot run the tensor at
hand (a CPU tensor outside ``TRITON_INTERPRET=1``), :func:`segmented_rmsnorm`
computes the reference instead, warns once with :class:`KernelFallbackWarning`,
and :func:`kernel_status` says which backend runs and why, so a caller can
report it. Importing this module never fails for lack of Triton: a runtime
that imports a kernel symbol its installed kernel package lacks would fail
before it could serve anything.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings

import torch

from .reference import CAST_ORDERS, SUPPORTED_DTYPES, segmented_rmsnorm_reference, split_segments

__all__ = [
    "KernelFallbackWarning",
    "KernelStatus",
    "LaunchConfig",
    "MAX_FUSED_HIDDEN",
    "choose_launch_config",
    "split_for",
    "streaming_tile",
    "kernel_status",
    "segmented_rmsnorm",
    "triton_available",
]

#: Oldest Triton the kernel is written and tested against.
MIN_TRITON_VERSION = (3, 0)

#: The kernel keeps a whole segment in registers; wider segments use the reference.
MAX_FUSED_HIDDEN = 32768


def _probe_triton():
    """Import Triton and check that it has what the kernel uses.

    Returns ``(triton, tl, None)`` or ``(None, None, reason)``.
    """
    try:
        import triton
        import triton.language as tl
    except Exception as exc:  # ImportError, or a broken install raising anything
        return None, None, f"triton is not importable ({type(exc).__name__}: {exc})"
    version = getattr(triton, "__version__", "0")
    try:
        major_minor = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        major_minor = (0, 0)
    if major_minor < MIN_TRITON_VERSION:
        wanted = ".".join(map(str, MIN_TRITON_VERSION))
        return None, None, f"triton {version} is older than {wanted}"
    needed = ("jit", "cdiv", "next_power_of_2")
    needed_tl = ("constexpr", "program_id", "arange", "cast", "load", "store", "sum", "where",
                 "sqrt_rn", "div_rn", "int64", "uint16", "uint32", "bfloat16", "float32", "float64")
    missing = [f"triton.{name}" for name in needed if not hasattr(triton, name)]
    missing += [f"triton.language.{name}" for name in needed_tl if not hasattr(tl, name)]
    if missing:
        return None, None, f"triton {version} lacks {', '.join(missing)}"
    return triton, tl, None


triton, tl, TRITON_UNAVAILABLE_REASON = _probe_triton()


class KernelFallbackWarning(UserWarning):
    """The Triton kernel could not run; the torch reference computed the result."""


@dataclasses.dataclass(frozen=True)
class KernelStatus:
    """Which implementation :func:`segmented_rmsnorm` uses for a device.

    ``backend`` is ``"triton"`` (compiled kernel), ``"triton-interpreter"``
    (the same kernel run by Triton's CPU interpreter, ``TRITON_INTERPRET=1``)
    or ``"torch-reference"`` (fallback). ``reason`` says why the kernel does
    not run, and is ``None`` when it does.
    """

    backend: str
    reason: str | None = None

    @property
    def uses_kernel(self) -> bool:
        return self.backend != "torch-reference"


def triton_available() -> bool:
    """Whether Triton imported and has what the kernel needs."""
    return triton is not None


if triton is not None:

    @triton.jit
    def _round_to(value, dtype: tl.constexpr, INTERPRETER: tl.constexpr):
        """Round fp32 ``value`` to ``dtype``, to nearest even (``INTERPRETER``: in software).

        Triton's interpreter truncates fp32 -> bf16, so there the rounding is
        done on the bits: add 0x7FFF plus the lowest kept bit, drop the low 16
        bits (NaN is kept quiet). The GPU's conversion already rounds to nearest
        even, so compiled kernels use it.
        """
        if INTERPRETER and dtype == tl.bfloat16:
            bits = value.to(tl.uint32, bitcast=True)
            rounded = (bits + (((bits >> 16) & 1) + 0x7FFF)) >> 16
            rounded = tl.where(value != value, (bits >> 16) | 0x40, rounded)
            return rounded.to(tl.uint16).to(tl.bfloat16, bitcast=True)
        else:
            return value.to(dtype)

    @triton.jit(do_not_specialize=["n_rows", "eps"])
    def _segmented_rmsnorm_kernel(
        X_ptr,
        W_ptr,
        Y_ptr,
        X_row_stride,
        X_seg_stride,
        W_seg_stride,
        Y_row_stride,
        Y_seg_stride,
        n_rows,
        eps,
        N_SEGMENTS: tl.constexpr,
        HIDDEN: tl.constexpr,
        BLOCK_SIZE: tl.constexpr,
        BLOCK_ROWS: tl.constexpr,
        FP64_SUM: tl.constexpr,
        HF_CAST_ORDER: tl.constexpr,
        WEIGHT_FIRST: tl.constexpr,
        SPLIT: tl.constexpr,
        INTERPRETER: tl.constexpr,
    ):
        """``y[t, s, :] = x[t, s, :] / sqrt(mean(x[t, s, :]**2) + eps) * w[s, :]``.

        Program ``pid`` normalises segment ``pid % N_SEGMENTS`` of the
        ``BLOCK_ROWS`` rows of tile ``pid // N_SEGMENTS``, and exits: so
        consecutive programs read consecutive memory, and the hardware keeps
        every multiprocessor full of programs, which streams like a copy
        (docs/kernels.md: persistent, software-pipelined programs stayed
        7-12 % short of the copy's bandwidth).

        Where the launch needs more than one wave of programs, the weight is
        loaded only after the sum of squares: held across the reduction it
        costs registers, hence programs per multiprocessor, hence bytes in
        flight (measured: 0.91-0.94 of the copy instead of 0.98-1.01). Where all programs
        fit at once (``WEIGHT_FIRST``, small T), registers are plentiful and
        the weight's load is better issued beside ``x``'s, off the critical
        path (measured: 0.12-0.25 us less at T <= 64).

        With ``SPLIT`` > 1 (a one-row tile, a launch of a few programs, ``Y``
        not ``X``), ``SPLIT`` programs share a segment: each reads and sums
        all of it (one DRAM fetch serves them all; the others hit in cache)
        and stores only its ``1 / SPLIT`` slice. At T <= 8 there are too few
        programs to keep the memory system busy, and each one's store of a
        whole 8-16 KB segment is on the critical path; split, the stores
        run side by side on more multiprocessors (measured on an H200 under
        CUDA-graph replay: 1.46-1.74 -> 1.36-1.57 x the copy's latency at
        T <= 4; `python tests/benchmarks/sweep_launch_configs.py --small`,
        docs/kernels.md).
        Another program may still be reading a slice this one writes, so a
        split launch never runs in place.

        A tile holds whole segments (``BLOCK_SIZE >= HIDDEN``): each element is
        read once, before the program writes it, which is what lets ``Y`` alias
        ``X``.

        Arithmetic: ``x`` and ``w`` are upcast to fp32. The sum of squares is
        accumulated in fp32, or with ``FP64_SUM`` in fp64 (squares of fp32
        values are exact there) and rounded to fp32 once, which makes it
        independent of the reduction's order. ``1 / sqrt(sum / H + eps)`` then
        takes correctly rounded fp32 steps, as the reference does. With
        ``HF_CAST_ORDER`` the normalised value is rounded to ``x``'s dtype
        before the weight multiplies it (Hugging Face order); otherwise the
        product is formed in fp32 and rounded once to ``Y``'s dtype.
        """
        pid = tl.program_id(0)
        if SPLIT > 1:
            part = pid % SPLIT
            pid = pid // SPLIT
        seg = (pid % N_SEGMENTS).to(tl.int64)
        tile = pid // N_SEGMENTS
        cols = tl.arange(0, BLOCK_SIZE)[None, :]  # [1, BLOCK_SIZE]
        # 64-bit row offsets: T * S * H may exceed 2**31 elements.
        rows = tl.cast(tile, tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)[:, None]
        mask = (rows < n_rows) & (cols < HIDDEN)
        x_ptrs = X_ptr + seg * X_seg_stride + rows * X_row_stride
        y_ptrs = Y_ptr + seg * Y_seg_stride + rows * Y_row_stride
        x = tl.load(x_ptrs + cols, mask=mask, other=0.0).to(tl.float32)
        if SPLIT > 1:
            # This program's slice: re-read (from cache) in its own lanes,
            # and its weight, both issued beside the whole segment's load.
            SLICE: tl.constexpr = BLOCK_SIZE // SPLIT
            cols = part * SLICE + tl.arange(0, SLICE)[None, :]
            mask = (rows < n_rows) & (cols < HIDDEN)
            x_slice = tl.load(x_ptrs + cols, mask=mask, other=0.0).to(tl.float32)
        w_ptrs = W_ptr + seg * W_seg_stride + cols
        if WEIGHT_FIRST:
            w = tl.load(w_ptrs, mask=cols < HIDDEN, other=0.0).to(tl.float32)
        if FP64_SUM:
            x64 = x.to(tl.float64)
            sum_squares = tl.sum(x64 * x64, axis=1).to(tl.float32)
        else:
            sum_squares = tl.sum(x * x, axis=1)
        mean_square = tl.div_rn(sum_squares, HIDDEN * 1.0)
        inv_rms = tl.div_rn(1.0, tl.sqrt_rn(mean_square + eps))
        if SPLIT > 1:
            x = x_slice
        y = x * inv_rms[:, None]
        if HF_CAST_ORDER:
            y = _round_to(y, X_ptr.dtype.element_ty, INTERPRETER).to(tl.float32)
        if not WEIGHT_FIRST:
            w = tl.load(w_ptrs, mask=cols < HIDDEN, other=0.0).to(tl.float32)
        y = _round_to(y * w, Y_ptr.dtype.element_ty, INTERPRETER)
        tl.store(y_ptrs + cols, y, mask=mask)


def _decorated_for_interpreter() -> bool:
    if triton is None:
        return False
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(_segmented_rmsnorm_kernel, InterpretedFunction)


# Triton decides at decoration time (TRITON_INTERPRET=1 when it is imported).
_INTERPRETED = _decorated_for_interpreter()


def kernel_status(device: torch.device | str | None = None) -> KernelStatus:
    """Say which implementation :func:`segmented_rmsnorm` uses for ``device``.

    ``device`` defaults to the current CUDA device if there is one, else the CPU.
    """
    if triton is None:
        return KernelStatus("torch-reference", TRITON_UNAVAILABLE_REASON)
    if _INTERPRETED:
        return KernelStatus("triton-interpreter")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if torch.device(device).type != "cuda":
        return KernelStatus(
            "torch-reference",
            f"the Triton kernel runs on CUDA tensors, not {torch.device(device).type} "
            "(TRITON_INTERPRET=1 runs it in Triton's interpreter)",
        )
    return KernelStatus("triton")


@functools.lru_cache(maxsize=None)
def _warn_fallback(reason: str) -> None:
    warnings.warn(
        f"dspark.kernels.segmented_rmsnorm: using the torch reference: {reason}",
        KernelFallbackWarning,
        stacklevel=3,
    )


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """How one launch tiles the work (see :func:`choose_launch_config`)."""

    block_size: int  # columns of a tile: H rounded up to a power of two
    block_rows: int  # rows of a tile, one program each
    num_warps: int
    weight_first: bool = False  # load the weight beside x, not after the sum of squares
    split: int = 1  # programs sharing one row-segment, each storing a slice (one-row tiles only)

    def __post_init__(self) -> None:
        if self.split < 1 or self.split & (self.split - 1) or self.split > self.block_size:
            raise ValueError(f"split must be a power of two from 1 to block_size, got {self.split}")
        if self.split > 1 and self.block_rows != 1:
            raise ValueError("a split launch has one row a tile")


@functools.lru_cache(maxsize=8)
def _multiprocessor_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


#: A launch of at most this many programs per multiprocessor runs in one wave.
#: Set by the largest variant at H = 7168: 8 warps of 79 registers (fp32
#: order, weight loaded first; the others take 55-63), of which three fit on a
#: multiprocessor's 64 K registers. For other widths it only guides speed.
ONE_WAVE_PROGRAMS_PER_SM = 3


def choose_launch_config(
    hidden: int, *, n_rows: int = 0, num_segments: int = 1, device: torch.device | None = None
) -> LaunchConfig:
    """Pick the tiling for ``n_rows`` rows of ``num_segments`` segments of
    ``hidden`` values on ``device``.

    Deterministic from the shape (no autotuning, which the interpreter cannot
    run). One program per tile of ``block_rows`` rows of one segment; narrow
    segments share a tile between rows, so that a tile is at least about 4096
    elements. One warp per 1024 elements of the tile (32 a thread, four
    16-byte vectors of bf16), between 4 and 16 warps: measured on an H200 for
    S = 5, H = 7168 (docs/kernels.md), 8 warps stream at the copy's
    bandwidth where 4 reach 0.95-0.99 of it and 16 about 0.9. The weight is
    loaded first when all programs fit on a CUDA device at once.
    ``n_rows``, ``num_segments`` and ``device`` decide only what depends on
    the launch's size: the weight's placement, the split of a one-wave
    launch (:func:`split_for`) and the tile of a longer one
    (:func:`streaming_tile`).
    """
    block_size = triton.next_power_of_2(hidden)
    block_rows = max(1, min(64, 4096 // block_size))
    num_warps = min(16, max(4, block_size * block_rows // 1024))
    weight_first = False
    if device is not None and device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        multiprocessors = _multiprocessor_count(index)
        one_wave = ONE_WAVE_PROGRAMS_PER_SM * multiprocessors
        programs = triton.cdiv(n_rows, block_rows) * num_segments
        weight_first = programs <= one_wave
        if not weight_first:
            block_rows, num_warps = streaming_tile(hidden, block_rows, num_warps, programs)
        if weight_first and block_rows == 1:
            split = split_for(programs, multiprocessors)
            return LaunchConfig(block_size, block_rows, num_warps, weight_first, split)
    return LaunchConfig(block_size, block_rows, num_warps, weight_first)


#: From this many one-row programs, 8192-wide segments go two rows a program.
TWO_ROW_MIN_PROGRAMS = 8192
#: From this many one-row programs, 4096-wide segments go four rows a program.
FOUR_ROW_MIN_PROGRAMS = 32768


def streaming_tile(hidden: int, block_rows: int, num_warps: int, programs: int) -> tuple[int, int]:
    """``(block_rows, num_warps)`` for a launch of several waves, given the
    default tile and how many programs it would take.

    Measured on an H200 (docs/kernels.md, bf16, ``do_bench`` against the
    copy): 4096-wide taps (Llama-3-8B EAGLE-3) stream best on 8 warps, one
    row a program below 32768 row-segments (3 x 4096 at T = 2048:
    0.955-0.963 against 0.952-0.953 with four rows in two runs; at
    T = 8192 within 0.01 either way) and four rows from there (T = 32768:
    0.990 against 0.975); 4 warps, the default, trail both.
    Segments of exactly 8192 (no padded
    lanes) stream best two rows a program once there are 8192 row-segments
    or more: 0.978-0.998 against 0.968-0.986 from 16384 of them (2, 4 or 8
    taps), within 0.005 either way at 8192, and mostly worse below
    (0.87-0.95 against 0.89-0.95); ``tests/benchmarks/sweep_launch_configs.py
    --shapes ...`` (the commands and table in docs/kernels.md). Padded widths (5120, 7168) lose 1-4 % with two rows, and
    keep one (``tests/benchmarks/explore_kernel_variants.py --round3``).
    """
    block_size = triton.next_power_of_2(hidden)
    if block_size == 4096 and block_rows == 1:
        return (4 if programs >= FOUR_ROW_MIN_PROGRAMS else 1), 8
    if hidden == 8192 and block_rows == 1 and programs >= TWO_ROW_MIN_PROGRAMS:
        return 2, num_warps
    return block_rows, num_warps


#: Most programs that share one row-segment (``SPLIT`` in the kernel).
MAX_SPLIT = 8


def split_for(programs: int, multiprocessors: int) -> int:
    """Programs per row-segment for a launch of ``programs`` one-row tiles:
    the largest power of two up to ``MAX_SPLIT`` that keeps the launch
    within one program a multiprocessor. Measured on an H200 (132
    multiprocessors) at T <= 64 for 3-5 taps of 4096-8192 (``python
    tests/benchmarks/sweep_launch_configs.py --small``, docs/kernels.md),
    this was the fastest split under CUDA-graph replay, or within 0.02 x
    the copy of it, for every shape and T but one (3 x 4096 at T = 8: 1.47
    against 1.41 with 8)."""
    split = 1
    while split < MAX_SPLIT and programs * split * 2 <= multiprocessors:
        split *= 2
    return split


def _run_kernel(x, x_strides, weight, y, y_strides, n_rows, num_segments, hidden, eps, hf_cast_order, config,
                fp64_sum=None):
    """Launch the kernel; ``x``/``y`` are any tensors whose first element is row 0,
    segment 0, and whose rows and segments sit at ``*_strides`` (elements).
    ``fp64_sum`` overrides the choice of sum precision (benchmarks)."""
    if fp64_sum is None:
        # fp64 sums make the factor independent of the reduction order. The
        # "hf" order needs that: one ulp of difference in its rounded
        # intermediate can become two ulps of the output. In the fp32 order a
        # last-bit difference of the factor moves an output by one ulp at
        # most, and rarely; there fp32 sums save 0.15-0.5 us at T <= 64.
        fp64_sum = hf_cast_order and x.element_size() < 4
    # In place, another program of a split row-segment could read a slice
    # this one has already overwritten.
    x_address, y_address, w_address = x.data_ptr(), y.data_ptr(), weight.data_ptr()
    split = config.split if y_address != x_address else 1
    grid = (triton.cdiv(n_rows, config.block_rows) * num_segments * split, 1, 1)
    # In the kernel's parameter order: the runtime arguments, then the constexprs.
    arguments = (
        x, weight, y,
        x_strides[0], x_strides[1], weight.stride(0), y_strides[0], y_strides[1],
        n_rows, eps,
        num_segments, hidden, config.block_size, config.block_rows, fp64_sum, hf_cast_order,
        config.weight_first, split, _INTERPRETED,
    )
    if not _CACHED_LAUNCH:
        _launch_through_triton(grid, arguments, config.num_warps)
        return
    # Everything Triton's NVIDIA backend specialises a compiled kernel on,
    # and more: exact strides (so integers equal to 1 or divisible by 16),
    # 16-byte pointer alignment, the integer width of n_rows, dtypes,
    # constexprs, warps, and the current device, which Triton launches on
    # and loads the kernel for.
    key = (
        torch.cuda.current_device() if x.is_cuda else None, x.dtype, weight.dtype, y.dtype, config.num_warps,
        arguments[3:8], arguments[10:],
        x_address % 16 == 0, w_address % 16 == 0, y_address % 16 == 0, n_rows > _INT32_MAX,
    )
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = _launch_through_triton(grid, arguments, config.num_warps)
        if len(_COMPILED) >= _COMPILED_LIMIT:
            _COMPILED.clear()
        if compiled is not None and callable(getattr(compiled, "__getitem__", None)):
            _COMPILED[key] = compiled
        return
    compiled[grid](*arguments)


def _launch_through_triton(grid, arguments, num_warps):
    """The launch through Triton's JIT (which compiles on first use); returns
    what it returns, the compiled kernel in Triton 3."""
    return _segmented_rmsnorm_kernel[grid](
        *arguments,
        num_warps=num_warps,
        # Every product and sum rounded on its own, as in the reference.
        enable_fp_fusion=False,
    )


#: Triton's JIT binds and specialises every argument on every launch: 4-5 us
#: of CPU a call more than the compiled kernel's own launcher on an H200's
#: host (docs/kernels.md), which under do_bench at T <= 64 shows up as
#: latency whenever the host falls behind the GPU. A launch whose key has been
#: seen goes straight to the compiled kernel (``CompiledKernel[grid](*args)``),
#: which takes every argument in the kernel's order from Triton 3.3 on; older
#: Triton, and the interpreter, always go through the JIT. So does ROCm:
#: Triton's AMD backend also specialises pointers on the size of their
#: storage, which the key does not hold. A cached launch skips what the JIT
#: re-reads on every call (TRITON_DEBUG and other settings changed after the
#: first launch, pre-run hooks); launch hooks still run.
_INT32_MAX = 2**31 - 1
_COMPILED: dict = {}
_COMPILED_LIMIT = 256


def _cached_launch_supported(version: str, interpreted: bool) -> bool:
    """Whether launches may skip Triton's JIT once a kernel is compiled."""
    if interpreted:
        return False
    try:
        return tuple(int(part) for part in version.split(".")[:2]) >= (3, 3)
    except ValueError:
        return False


_CACHED_LAUNCH = (triton is not None and torch.version.hip is None
                  and _cached_launch_supported(triton.__version__, _INTERPRETED))


def _launch(x3, weight, y3, eps: float, hf_cast_order: bool, config: LaunchConfig, fp64_sum=None) -> None:
    """Run the kernel on ``x3``/``y3`` of shape ``[T, S, H]`` (last dim contiguous),
    ``weight`` ``[S, H]`` (last dim contiguous). No checks."""
    n_rows, num_segments, hidden = x3.shape
    _run_kernel(
        x3, x3.stride()[:2], weight, y3, y3.stride()[:2], n_rows, num_segments, hidden, float(eps), hf_cast_order,
        config, fp64_sum,
    )


def _row_layout(shape, stride, num_segments: int, hidden: int):
    """``(n_rows, row_stride, segment_stride)`` of a ``[..., S*H]`` or ``[..., S, H]``
    tensor whose leading dims collapse into one strided row index and whose
    last dim is contiguous; None otherwise."""
    if len(shape) >= 2 and tuple(shape[-2:]) == (num_segments, hidden):
        lead, lead_stride, segment_stride, last_stride = shape[:-2], stride[:-2], stride[-2], stride[-1]
    else:  # [..., S*H]
        lead, lead_stride, segment_stride, last_stride = shape[:-1], stride[:-1], hidden * stride[-1], stride[-1]
    if last_stride != 1 and hidden > 1:
        return None
    n_rows, row_stride = 1, 0
    for size, step in zip(reversed(lead), reversed(lead_stride)):
        if size == 1:
            continue
        if n_rows > 1 and step != row_stride * n_rows:
            return None
        if n_rows == 1:
            row_stride = step
        n_rows *= size
    if 0 in lead:
        n_rows = 0
    if n_rows <= 1:
        # Never multiplied by a row index that reaches memory; the stride of
        # contiguous rows keeps Triton's divisibility specialisation, hence
        # the compiled variant, the same as for more rows.
        row_stride = num_segments * segment_stride
    return n_rows, row_stride, segment_stride


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What a call needs that depends only on its tensors' shapes, strides,
    dtypes and devices; cached, so that a repeated call costs a dictionary
    lookup and the launch."""

    fallback_reason: str | None = None
    # Both x and out can be handed to the kernel as they are; else copies.
    direct: bool = False
    n_rows: int = 0
    x_strides: tuple[int, int] = (0, 0)
    y_strides: tuple[int, int] = (0, 0)
    device_index: int | None = None
    config: LaunchConfig | None = None


@functools.lru_cache(maxsize=1024)
def _plan(x_meta, weight_meta, out_meta, cast_order) -> _Plan:
    x_shape, x_stride, x_dtype, device = x_meta
    w_shape, w_stride, w_dtype, w_device = weight_meta
    _check_arguments(x_shape, x_dtype, device, w_shape, w_dtype, w_device, out_meta, cast_order)
    num_segments, hidden = w_shape

    status = kernel_status(device)
    if status.uses_kernel and hidden > MAX_FUSED_HIDDEN:
        status = KernelStatus("torch-reference", f"H = {hidden} exceeds {MAX_FUSED_HIDDEN}")
    if not status.uses_kernel:
        return _Plan(fallback_reason=status.reason)

    x_layout = _row_layout(x_shape, x_stride, num_segments, hidden)
    if out_meta is None:  # a new contiguous tensor
        y_layout = None if x_layout is None else (x_layout[0], num_segments * hidden, hidden)
    else:
        y_layout = _row_layout(out_meta[0], out_meta[1], num_segments, hidden)
    direct = x_layout is not None and y_layout is not None and (w_stride[1] == 1 or hidden == 1)
    n_rows = x_layout[0] if direct else 0
    return _Plan(
        direct=direct,
        n_rows=n_rows,
        x_strides=x_layout[1:] if direct else (0, 0),
        y_strides=y_layout[1:] if direct else (0, 0),
        device_index=device.index if device.type == "cuda" else None,
        config=(choose_launch_config(hidden, n_rows=n_rows, num_segments=num_segments, device=device)
                if direct else None),
    )


def _check_arguments(x_shape, x_dtype, x_device, w_shape, w_dtype, w_device, out_meta, cast_order) -> None:
    if cast_order not in CAST_ORDERS:
        raise ValueError(f"cast_order must be one of {CAST_ORDERS}, got {cast_order!r}")
    if x_dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"x must be float32, float16 or bfloat16, got {x_dtype}")
    if w_dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"weight must be float32, float16 or bfloat16, got {w_dtype}")
    if len(w_shape) != 2:
        raise ValueError(f"weight must be [S, H], got shape {tuple(w_shape)}")
    if w_device != x_device:
        raise ValueError(f"weight is on {w_device}, x on {x_device}")
    num_segments, hidden = w_shape
    if not (
        (len(x_shape) >= 2 and tuple(x_shape[-2:]) == (num_segments, hidden))
        or (len(x_shape) >= 1 and x_shape[-1] == num_segments * hidden)
    ):
        raise ValueError(
            f"x has shape {tuple(x_shape)}; expected [..., {num_segments * hidden}] "
            f"(S*H) or [..., {num_segments}, {hidden}] (S, H) for a weight of shape "
            f"[{num_segments}, {hidden}]"
        )
    if out_meta is not None:
        out_shape, _, out_dtype, out_device = out_meta
        if out_shape != x_shape or out_dtype != x_dtype or out_device != x_device:
            raise ValueError(
                f"out must match x in shape, dtype and device: out is {tuple(out_shape)} "
                f"{out_dtype} on {out_device}, x is {tuple(x_shape)} {x_dtype} on {x_device}"
            )


def segmented_rmsnorm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    *,
    out: torch.Tensor | None = None,
    cast_order: str = "fp32",
) -> torch.Tensor:
    """RMS-normalise each segment of each row with its own weight, in one kernel.

    For row ``t`` and segment ``s`` (``x_s = x[t, s*H:(s+1)*H]``)::

        y_s = x_s / sqrt(mean(x_s**2) + eps) * w_s

    with the factor ``1 / sqrt(mean + eps)`` formed in fp32 in the same steps as
    :func:`~dspark.kernels.reference.segmented_rmsnorm_reference`. The sum of
    squares is accumulated in fp32 in the ``"fp32"`` order (outputs within one
    ulp of the reference, nearly all identical) and in fp64 in the ``"hf"``
    order for 16-bit inputs (the reference's factor, bit for bit).

    Cast order (``x`` in fp16/bf16; for fp32 inputs both are the same):

    * ``"fp32"`` -- normalise and weight in fp32, round once to ``x.dtype``.
      This is what the serving kernel does.
    * ``"hf"`` -- round the normalised value to ``x.dtype``, then multiply by
      the weight (in fp32) and round again: Hugging Face ``LlamaRMSNorm``'s
      order, which training used.

    The two orders differ by one ulp on about a quarter of fp16/bf16 outputs
    (25-26 % measured, for any weights other than exactly 1; docs/kernels.md),
    so compare a result with the reference of the same order.

    Args:
        x: ``[T, S*H]`` (the concatenated taps) or ``[..., S, H]``; fp32, fp16
            or bf16. Rows may be strided; the last dimension should be
            contiguous (otherwise a contiguous copy is normalised).
        weight: ``[S, H]``, one RMSNorm weight per segment, fp32 or ``x``'s
            dtype.
        eps: added to the mean of squares; a runtime value (no recompile).
        out: optional output of ``x``'s shape, dtype and device; it may be
            ``x`` itself (in place) but must not otherwise overlap it.
        cast_order: ``"fp32"`` or ``"hf"``, see above.

    Returns:
        ``out``, or a new tensor of ``x``'s shape and dtype.

    Where the kernel cannot run (see :func:`kernel_status`) the torch reference
    computes the result and a :class:`KernelFallbackWarning` is issued once.
    """
    plan = _plan(
        (x.shape, x.stride(), x.dtype, x.device),
        (weight.shape, weight.stride(), weight.dtype, weight.device),
        None if out is None else (out.shape, out.stride(), out.dtype, out.device),
        cast_order,
    )
    if plan.fallback_reason is not None:
        _warn_fallback(plan.fallback_reason)
        result = segmented_rmsnorm_reference(x, weight, eps, cast_order=cast_order)
        return result if out is None else out.copy_(result)

    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    elif out is not x and torch._C._overlaps(out, x):
        if out.data_ptr() != x.data_ptr() or out.stride() != x.stride():
            raise ValueError("out overlaps x without being the same view; pass out=x for in place")
    if plan.device_index is not None and plan.device_index != torch.cuda.current_device():
        # Triton launches on the current device, not the tensors'.
        with torch.cuda.device(plan.device_index):
            return _normalise(x, weight, eps, out, cast_order, plan)
    return _normalise(x, weight, eps, out, cast_order, plan)


def _normalise(x, weight, eps, out, cast_order, plan: _Plan) -> torch.Tensor:
    """The kernel on ``x`` into ``out``, on the current device."""
    if not plan.direct:
        return _normalise_through_copies(x, weight, eps, out, cast_order)
    if plan.n_rows == 0:
        return out
    num_segments, hidden = weight.shape
    _run_kernel(x, plan.x_strides, weight, out, plan.y_strides, plan.n_rows, num_segments, hidden, float(eps),
                cast_order == "hf", plan.config)
    return out


def _normalise_through_copies(x, weight, eps, out, cast_order) -> torch.Tensor:
    """The kernel on contiguous copies, for layouts it cannot address directly
    (a non-contiguous last dim, leading dims that do not collapse into one)."""
    num_segments, hidden = weight.shape
    x3 = split_segments(x, num_segments, hidden).reshape(-1, num_segments, hidden).contiguous()
    y3 = torch.empty_like(x3)
    if x3.shape[0]:
        config = choose_launch_config(hidden, n_rows=x3.shape[0], num_segments=num_segments, device=x.device)
        _launch(x3, weight.contiguous(), y3, eps, cast_order == "hf", config)
    return out.copy_(y3.reshape(out.shape))
