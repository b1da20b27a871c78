"""Accuracy checks for kernel outputs, shared by the tests and ``dspark smoke``.

Each check names the tensor it looks at and says how far off it is: max abs
error, ulp distance (fp16/bf16) or max relative error (fp32), relative RMS
error, cosine similarity and the share of bit-identical elements.
"""

from __future__ import annotations

import dataclasses
import math

import torch

__all__ = ["ErrorStats", "assert_kernel_close", "error_stats", "ulp_distance"]

_HALF_DTYPES = (torch.float16, torch.bfloat16)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-element distance in units in the last place between two fp16/bf16 tensors.

    Args:
        a, b: same shape, both fp16 or both bf16.

    Returns:
        int32 tensor of ``a``'s shape. The bit patterns are mapped to integers
        ordered like the floats (negative values mirrored, so -0 == +0), hence
        adjacent representable values are 1 apart.
    """
    if a.dtype != b.dtype or a.dtype not in _HALF_DTYPES:
        raise TypeError(f"ulp_distance needs two fp16 or two bf16 tensors, got {a.dtype} and {b.dtype}")

    def ordered(t: torch.Tensor) -> torch.Tensor:
        bits = t.contiguous().view(torch.int16).to(torch.int32)
        return torch.where(bits < 0, -(bits & 0x7FFF), bits)

    return (ordered(a) - ordered(b)).abs()


@dataclasses.dataclass(frozen=True)
class ErrorStats:
    """How far ``actual`` is from ``expected`` (computed in fp64).

    ``rel_rms_error`` is ``||a - e|| / ||e||``, relative to the reference's
    scale: infinite when ``expected`` is all zeros, whatever ``actual`` is.
    ``cosine_similarity`` is 0 when either side is all zeros. ``max_ulp`` is
    set for fp16/bf16 pairs of the same dtype, ``max_rel_error``
    (elementwise ``|a - e| / |e|``) otherwise.
    """

    max_abs_error: float
    rel_rms_error: float
    cosine_similarity: float
    identical_fraction: float
    max_ulp: int | None = None
    max_rel_error: float | None = None
    nonfinite: int = 0

    def describe(self) -> str:
        parts = [f"max abs err {self.max_abs_error:.3e}"]
        if self.max_ulp is not None:
            parts.append(f"max ulp {self.max_ulp}")
        if self.max_rel_error is not None:
            parts.append(f"max rel err {self.max_rel_error:.3e}")
        parts += [
            f"rel RMS err {self.rel_rms_error:.3e}",
            f"cos {self.cosine_similarity:.8f}",
            f"identical {self.identical_fraction:.6f}",
        ]
        if self.nonfinite:
            parts.append(f"{self.nonfinite} non-finite")
        return ", ".join(parts)


def error_stats(actual: torch.Tensor, expected: torch.Tensor) -> ErrorStats:
    """Compare two tensors of the same shape (any float dtypes, any devices)."""
    if actual.shape != expected.shape:
        raise ValueError(f"shapes differ: {tuple(actual.shape)} vs {tuple(expected.shape)}")
    a = actual.detach().double().cpu().reshape(-1)
    e = expected.detach().double().cpu().reshape(-1)
    if a.numel() == 0:
        return ErrorStats(0.0, 0.0, 1.0, 1.0)
    nonfinite = int((~torch.isfinite(a)).sum())
    diff = (a - e).abs()
    e_norm = e.norm().item()
    a_norm = a.norm().item()
    # An error relative to a reference of no scale is undefined, and two
    # zero vectors point nowhere: zeros against zeros must never read as a
    # match (a lost weight gives exactly that), so both count as the worst.
    rel_rms = diff.norm().item() / e_norm if e_norm > 0 else float("inf")
    cosine = (a @ e).item() / (a_norm * e_norm) if a_norm > 0 and e_norm > 0 else 0.0
    max_ulp = max_rel = None
    if actual.dtype == expected.dtype and actual.dtype in _HALF_DTYPES:
        max_ulp = int(ulp_distance(actual.detach().cpu(), expected.detach().cpu()).max())
    else:
        max_rel = (diff / e.abs().clamp_min(1e-300)).max().item()
    return ErrorStats(
        max_abs_error=diff.max().item(),
        rel_rms_error=rel_rms,
        cosine_similarity=cosine,
        identical_fraction=(a == e).double().mean().item(),
        max_ulp=max_ulp,
        max_rel_error=max_rel,
        nonfinite=nonfinite,
    )


def assert_kernel_close(
    name: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    max_ulp: int = 1,
    min_identical: float = 0.999,
    fp32_rtol: float = 2e-6,
) -> None:
    """Assert that ``actual`` meets the kernel's accuracy contract against ``expected``.

    fp16/bf16: every element within ``max_ulp`` ulp and at least
    ``min_identical`` of them bit-identical, where a single differing element
    passes any share below 1: a different reduction order flips an output now
    and then, and in a tensor of fewer than 1000 elements one flip alone is
    more than 0.1 %. fp32: every element within ``fp32_rtol`` relative error.
    Non-finite values never pass. The message names the tensor and gives
    :meth:`ErrorStats.describe`.
    """
    assert actual.shape == expected.shape, f"{name}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{name}: dtype {actual.dtype} != {expected.dtype}"
    if actual.numel() == 0:
        return
    stats = error_stats(actual, expected)
    message = f"{name}: {stats.describe()}"
    assert stats.nonfinite == 0, message
    if actual.dtype in _HALF_DTYPES:
        assert stats.max_ulp <= max_ulp, message
        differing = int((actual.detach().cpu().double() != expected.detach().cpu().double()).sum())
        allowed = math.floor((1.0 - min_identical) * actual.numel() + 1e-9)
        if min_identical < 1.0:
            allowed = max(1, allowed)
        assert differing <= allowed, f"{message} ({differing} differ, {allowed} allowed)"
    else:
        a = actual.detach().double().cpu()
        e = expected.detach().double().cpu()
        assert bool(((a - e).abs() <= fp32_rtol * e.abs() + 1e-37).all()), message
