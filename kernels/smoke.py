"""Smoke test of a draft's context projection: the fused kernel path against fp32.

For token rows ``x = [x_0 | ... | x_{S-1}]`` of target taps the draft computes
(DESIGN §2)::

    ctx = RMSNorm_ctx(context_proj(concat_i(RMSNorm_i(x_i))))

with ``RMSNorm_i`` present only for a draft with ``fc_norm``. This module runs
three ways of computing it and compares each with an fp32 reference of the
correct formula:

* ``fused``: :func:`~dspark.kernels.segmented_rmsnorm` on the concatenated taps,
  one GEMM, the context norm -- what a serving engine that honours ``fc_norm``
  runs.
* ``incremental``: the serving fast path that projects each tap with its own
  pre-split ``context_proj`` columns and sums, *without* the per-tap norms.
  It is right only for a draft without ``fc_norm``; for one with, the smoke
  shows by how much it is wrong, which is why it must stand down.
* ``folded``: the incremental path made right by folding each norm into the
  columns: ``acc += r_i(x_i) * (x_i @ (W_i * w_i)^T)`` with ``r_i`` the
  per-row inverse RMS of tap ``i``.

Pure function of tensors: it reads no file; the caller loads the weights.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import torch

from dspark.schema.errors import first_line

from .engine_loading import time_cuda_ms as _time_cuda_ms
from .reference import inverse_rms, segmented_rmsnorm_reference
from .segmented_rmsnorm import kernel_status, segmented_rmsnorm
from .testing import ErrorStats, error_stats

__all__ = [
    "PROJECTION_OVERHEAD_GOAL",
    "REL_RMS_TOLERANCE",
    "EngineKernelCheck",
    "PathCheck",
    "ProjectionSmokeResult",
    "ProjectionTimings",
    "smoke_projection",
    "synthetic_taps",
]

#: Largest relative RMS error (``||y - ref|| / ||ref||``) a path may show against
#: the fp32 reference, by working dtype. A bf16 path rounds the normalised taps,
#: the GEMM output and the context norm's output to 8 significant bits: each
#: rounding adds about 2**-9 / sqrt(3) ~ 1.1e-3 relative RMS, about 2e-3
#: together; the bound leaves a factor of 5 for long-tailed inputs. fp16 has 3
#: more bits; fp32 differs from the reference only by summation order.
REL_RMS_TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-4}

#: Goal for the fused path at T = 8192 on a GPU: norm + GEMM + context norm
#: within this factor of the GEMM alone.
PROJECTION_OVERHEAD_GOAL = 1.08


@dataclasses.dataclass(frozen=True)
class PathCheck:
    """One path's output (``[T, h]``) against the fp32 reference."""

    name: str
    stats: ErrorStats
    tolerance: float

    @property
    def max_abs_error(self) -> float:
        return self.stats.max_abs_error

    @property
    def rel_rms_error(self) -> float:
        return self.stats.rel_rms_error

    @property
    def cosine_similarity(self) -> float:
        return self.stats.cosine_similarity

    @property
    def nonfinite(self) -> bool:
        return self.stats.nonfinite > 0

    @property
    def within_tolerance(self) -> bool:
        # rel_rms_error is relative to the reference's scale and infinite
        # for an all-zero reference: zeros never match zeros.
        return not self.nonfinite and self.stats.rel_rms_error <= self.tolerance


@dataclasses.dataclass(frozen=True)
class ProjectionTimings:
    """Median GPU times in milliseconds at ``tokens`` rows."""

    tokens: int
    norm_ms: float
    gemm_ms: float
    projection_ms: float

    @property
    def overhead_ratio(self) -> float:
        """Whole projection over GEMM alone."""
        return self.projection_ms / self.gemm_ms

    @property
    def meets_goal(self) -> bool:
        return self.overhead_ratio <= PROJECTION_OVERHEAD_GOAL


@dataclasses.dataclass(frozen=True)
class EngineKernelCheck:
    """The serving engine's segmented RMSNorm beside dspark's, on the same
    taps and weights: each one's normalised taps against the fp32 norm,
    the whole projection through the engine's norm against the fp32
    projection, and (on CUDA) each norm's median time with a copy of the
    same bytes as the floor."""

    engine: str
    ran: bool
    reason: str | None  # why it did not run (it raised, or was not asked to run)
    dspark_norm: PathCheck | None = None
    engine_norm: PathCheck | None = None
    engine_projection: PathCheck | None = None
    dspark_ms: float | None = None
    engine_ms: float | None = None
    copy_ms: float | None = None

    @property
    def within_tolerance(self) -> bool:
        return self.ran and self.engine_norm.within_tolerance and self.engine_projection.within_tolerance


@dataclasses.dataclass(frozen=True)
class ProjectionSmokeResult:
    """What :func:`smoke_projection` found. Findings are data; the caller decides."""

    tokens: int
    num_segments: int
    target_hidden: int
    hidden: int
    dtype: torch.dtype
    device: str
    has_fc_norm: bool
    cast_order: str
    kernel_backend: str
    kernel_fallback_reason: str | None
    fused: PathCheck
    incremental: PathCheck
    folded: PathCheck
    nonfinite_weights: tuple[str, ...]
    timings: ProjectionTimings | None
    #: projection weights whose every value is zero (a lost or untrained tensor)
    zero_weights: tuple[str, ...] = ()
    #: the fp32 reference output is all zeros: the weights compute nothing,
    #: so there is nothing to compare the kernel with
    zero_output: bool = False
    #: the serving engine's kernel beside dspark's, when one was handed in
    engine: EngineKernelCheck | None = None

    @property
    def nonfinite_output(self) -> bool:
        return self.fused.nonfinite or self.folded.nonfinite

    @property
    def incremental_fast_path_valid(self) -> bool:
        """Whether projecting taps separately without norms gives the right answer
        (it does not for an ``fc_norm`` draft: the fast path must stand down)."""
        return self.incremental.within_tolerance

    @property
    def ok(self) -> bool:
        """The fused and folded paths agree with the reference; all is finite."""
        return (
            not self.nonfinite_weights
            and not self.zero_weights
            and not self.zero_output
            and self.fused.within_tolerance
            and self.folded.within_tolerance
        )


def synthetic_taps(
    tokens: int,
    num_segments: int,
    target_hidden: int,
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """Seeded stand-in for captured taps, ``[T, S*th]``.

    Tap ``i`` has RMS ``10 ** (3 * i / (S - 1) - 1)``, 0.1 for the first and
    100 for the last: a residual stream grows with depth, which is exactly what
    the per-tap norms undo.

    Drawn where they are used, in the working dtype: a K3 smoke at T = 8192
    is 294 M values, 2.35 GB in float64 on the host before the move. The
    values depend on the seed and the device's generator (a GPU draws other
    numbers than the CPU for the same seed).
    """
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(tokens, num_segments, target_hidden, generator=gen, dtype=dtype, device=device)
    exponents = [(3.0 * i / (num_segments - 1) - 1.0) if num_segments > 1 else 0.0 for i in range(num_segments)]
    for i, exponent in enumerate(exponents):
        x[:, i].mul_(10.0 ** exponent)
    return x.view(tokens, num_segments * target_hidden)


def _fc_norm_weights(weights: Mapping[str, torch.Tensor], num_segments: int, target_hidden: int):
    names = [f"fc_norm.{i}.weight" for i in range(num_segments)]
    present = [name for name in names if name in weights]
    if not present:
        return None
    if len(present) != num_segments:
        missing = sorted(set(names) - set(present))
        raise ValueError(f"fc_norm weights are incomplete: missing {', '.join(missing)}")
    for name in names:
        if tuple(weights[name].shape) != (target_hidden,):
            raise ValueError(f"{name} has shape {tuple(weights[name].shape)}, expected [{target_hidden}]")
    return torch.stack([weights[name] for name in names])


def _check_projection_weights(weights, num_segments, target_hidden):
    for name in ("context_proj.weight", "context_norm.weight"):
        if name not in weights:
            raise ValueError(f"missing tensor {name}")
    proj = weights["context_proj.weight"]
    if proj.dim() != 2 or proj.shape[1] != num_segments * target_hidden:
        raise ValueError(
            f"context_proj.weight has shape {tuple(proj.shape)}, expected [h, {num_segments * target_hidden}] (S*th)"
        )
    norm = weights["context_norm.weight"]
    if tuple(norm.shape) != (proj.shape[0],):
        raise ValueError(f"context_norm.weight has shape {tuple(norm.shape)}, expected [{proj.shape[0]}]")


def smoke_projection(
    weights: Mapping[str, torch.Tensor],
    *,
    rms_norm_eps: float,
    num_segments: int,
    target_hidden: int,
    tokens: int = 8,
    seed: int = 0,
    device: str | torch.device = "cpu",
    taps: torch.Tensor | None = None,
    cast_order: str = "fp32",
    measure_time: bool = True,
    tolerance: float | None = None,
    engine_norm: Callable[..., torch.Tensor] | None = None,
    engine_name: str = "engine",
) -> ProjectionSmokeResult:
    """Run a draft's context projection three ways and compare each with fp32.

    Args:
        weights: name -> tensor, names as the serving loader sees them:
            ``context_proj.weight`` ``[h, S*th]``, ``context_norm.weight``
            ``[h]`` and, for an ``fc_norm`` draft, ``fc_norm.{i}.weight``
            ``[th]`` for every ``i < S`` (all or none). The working dtype is
            ``context_proj.weight``'s.
        rms_norm_eps: the draft's ``rms_norm_eps``, used by every RMSNorm.
        num_segments: ``S``, the number of target taps.
        target_hidden: ``th``, the target's hidden size.
        tokens: ``T``, rows of synthetic taps (ignored when ``taps`` is given).
        seed: seeds the synthetic taps (see :func:`synthetic_taps`).
        device: where to compute; on CUDA the fused path also gets timed.
        taps: captured taps ``[T, S*th]`` to use instead of synthetic ones.
        cast_order: the segmented norm's cast order, ``"fp32"`` or ``"hf"``.
        measure_time: time the fused path on CUDA (norm alone, GEMM alone,
            whole projection).
        tolerance: the largest relative RMS error a path may show (a gate's
            policy); default :data:`REL_RMS_TOLERANCE` of the working dtype.
        engine_norm: the serving engine's segmented RMSNorm, adapted to
            ``(x [T, S*th], weight [S, th], eps, out=None) -> [T, S*th]``
            (see :mod:`dspark.kernels.smoke_engine`): run beside dspark's on
            the fc_norm step, for a draft with fc_norm.
        engine_name: what to call it in the result.

    Returns:
        A :class:`ProjectionSmokeResult`; nothing is raised for bad numbers.

    Raises:
        ValueError: a tensor is missing or has the wrong shape.
    """
    _check_projection_weights(weights, num_segments, target_hidden)
    device = torch.device(device)
    proj_w = weights["context_proj.weight"].to(device)
    dtype = proj_w.dtype
    hidden = proj_w.shape[0]
    ctx_w = weights["context_norm.weight"].to(device)
    fc_w = _fc_norm_weights(weights, num_segments, target_hidden)
    if fc_w is not None:
        fc_w = fc_w.to(device)
    nonfinite_weights = tuple(
        sorted(name for name, t in weights.items() if t.is_floating_point() and not bool(torch.isfinite(t).all()))
    )
    zero_weights = tuple(sorted(name for name, t in weights.items() if t.numel() and not bool(t.any())))

    if taps is None:
        x = synthetic_taps(tokens, num_segments, target_hidden, seed=seed, dtype=dtype, device=device)
    else:
        if taps.dim() != 2 or taps.shape[1] != num_segments * target_hidden:
            raise ValueError(f"taps has shape {tuple(taps.shape)}, expected [T, {num_segments * target_hidden}]")
        x = taps.to(device=device, dtype=dtype)
    tokens = x.shape[0]
    ctx_norm_w = ctx_w[None, :]

    # fp32 reference of the correct formula, from the same (rounded) inputs.
    x32 = x.float()
    normed32 = segmented_rmsnorm_reference(x32, fc_w.float(), rms_norm_eps) if fc_w is not None else x32
    expected = segmented_rmsnorm_reference(normed32 @ proj_w.float().t(), ctx_norm_w.float(), rms_norm_eps)

    def fused() -> torch.Tensor:
        normed = segmented_rmsnorm(x, fc_w, rms_norm_eps, cast_order=cast_order) if fc_w is not None else x
        return segmented_rmsnorm(normed @ proj_w.t(), ctx_norm_w, rms_norm_eps, cast_order=cast_order)

    taps_split = x.view(tokens, num_segments, target_hidden)
    columns = proj_w.view(hidden, num_segments, target_hidden)

    def incremental() -> torch.Tensor:
        acc = torch.zeros(tokens, hidden, dtype=torch.float32, device=device)
        for i in range(num_segments):
            acc += (taps_split[:, i] @ columns[:, i].t()).float()
        return segmented_rmsnorm(acc.to(dtype), ctx_norm_w, rms_norm_eps, cast_order=cast_order)

    def folded() -> torch.Tensor:
        acc = torch.zeros(tokens, hidden, dtype=torch.float32, device=device)
        for i in range(num_segments):
            tap = taps_split[:, i]
            if fc_w is None:
                acc += (tap @ columns[:, i].t()).float()
                continue
            folded_columns = (columns[:, i].float() * fc_w[i].float()[None, :]).to(dtype)
            acc += inverse_rms(tap, rms_norm_eps) * (tap @ folded_columns.t()).float()
        return segmented_rmsnorm(acc.to(dtype), ctx_norm_w, rms_norm_eps, cast_order=cast_order)

    tolerance = REL_RMS_TOLERANCE[dtype] if tolerance is None else tolerance
    checks = {
        name: PathCheck(name, error_stats(fn(), expected), tolerance)
        for name, fn in (("fused", fused), ("incremental", incremental), ("folded", folded))
    }

    status = kernel_status(device)
    timings = None
    if measure_time and device.type == "cuda":
        timings = _time_fused_path(x, fc_w, proj_w, ctx_norm_w, rms_norm_eps, cast_order)

    engine = None
    if engine_norm is not None:
        engine = _engine_beside(engine_norm, engine_name, x, fc_w, proj_w, ctx_norm_w, rms_norm_eps, cast_order,
                                normed32, expected, tolerance, measure_time and device.type == "cuda")

    return ProjectionSmokeResult(
        tokens=tokens,
        num_segments=num_segments,
        target_hidden=target_hidden,
        hidden=hidden,
        dtype=dtype,
        device=str(device),
        has_fc_norm=fc_w is not None,
        cast_order=cast_order,
        kernel_backend=status.backend,
        kernel_fallback_reason=status.reason,
        fused=checks["fused"],
        incremental=checks["incremental"],
        folded=checks["folded"],
        nonfinite_weights=nonfinite_weights,
        timings=timings,
        zero_weights=zero_weights,
        zero_output=not bool(expected.any()),
        engine=engine,
    )


def _engine_beside(engine_norm, name, x, fc_w, proj_w, ctx_norm_w, eps, cast_order, normed32, expected, tolerance,
                   measure_time) -> EngineKernelCheck:
    if fc_w is None:
        return EngineKernelCheck(name, False, "the draft has no fc_norm: the engine runs no segmented RMSNorm for it")
    # A kernel run in another process (ChildKernel) is timed there: timed
    # here, the process round trip would be what is measured.
    times_itself = getattr(engine_norm, "times_itself", False)
    try:
        if times_itself:
            normed, engine_times = engine_norm.run_timed(x, fc_w, eps, measure_time)
        else:
            normed = engine_norm(x, fc_w, eps)
        if x.device.type == "cuda":
            torch.cuda.synchronize()
    except Exception as error:  # noqa: BLE001 - the engine's kernel refusing these tensors is reported, not raised
        return EngineKernelCheck(name, False, f"it raised {type(error).__name__}: {first_line(error)}")
    ours = segmented_rmsnorm(x, fc_w, eps, cast_order=cast_order)
    projection = segmented_rmsnorm(normed @ proj_w.t(), ctx_norm_w, eps, cast_order=cast_order)
    times = {}
    if measure_time:
        ours_out, engine_out, copy_out = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
        timed = {
            "dspark": lambda: segmented_rmsnorm(x, fc_w, eps, out=ours_out, cast_order=cast_order),
            "engine": lambda: engine_norm(x, fc_w, eps, out=engine_out),
            "copy": lambda: copy_out.copy_(x),
        }
        if times_itself:
            del timed["engine"]
        times = _time_cuda_ms(timed)
        if times_itself:
            times["engine"] = engine_times.get("engine")
    return EngineKernelCheck(
        engine=name,
        ran=True,
        reason=None,
        dspark_norm=PathCheck("dspark fc_norm", error_stats(ours, normed32), tolerance),
        engine_norm=PathCheck(f"{name} fc_norm", error_stats(normed, normed32), tolerance),
        engine_projection=PathCheck(f"{name} projection", error_stats(projection, expected), tolerance),
        dspark_ms=times.get("dspark"),
        engine_ms=times.get("engine"),
        copy_ms=times.get("copy"),
    )


def _time_fused_path(x, fc_w, proj_w, ctx_norm_w, eps, cast_order) -> ProjectionTimings:
    """Time the fused path with preallocated outputs, as a serving engine runs it."""
    normed = torch.empty_like(x)
    projected = torch.empty(x.shape[0], proj_w.shape[0], dtype=x.dtype, device=x.device)
    context = torch.empty_like(projected)
    gemm_input = x if fc_w is None else normed

    def norm():
        if fc_w is not None:
            segmented_rmsnorm(x, fc_w, eps, out=normed, cast_order=cast_order)

    def gemm():
        torch.matmul(gemm_input, proj_w.t(), out=projected)

    def whole():
        norm()
        gemm()
        segmented_rmsnorm(projected, ctx_norm_w, eps, out=context, cast_order=cast_order)

    ms = _time_cuda_ms({"norm": norm, "gemm": gemm, "whole": whole})
    return ProjectionTimings(tokens=x.shape[0], norm_ms=ms["norm"], gemm_ms=ms["gemm"], projection_ms=ms["whole"])
