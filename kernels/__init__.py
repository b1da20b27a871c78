"""Kernels for DSpark drafts: the segmented RMSNorm (``fc_norm``), its torch
reference, and the smoke test of the context projection.

Needs torch (the ``dspark[torch]`` extra). Triton is optional: without it
:func:`segmented_rmsnorm` computes the torch reference and :func:`kernel_status`
says so.
"""

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("dspark.kernels needs torch: pip install 'dspark[torch]'") from exc

from .reference import CAST_ORDERS, segmented_rmsnorm_reference
from .segmented_rmsnorm import (
    TRITON_UNAVAILABLE_REASON,
    KernelFallbackWarning,
    KernelStatus,
    kernel_status,
    segmented_rmsnorm,
    triton_available,
)
from .smoke import ProjectionSmokeResult, smoke_projection

__all__ = [
    "CAST_ORDERS",
    "KernelFallbackWarning",
    "KernelStatus",
    "ProjectionSmokeResult",
    "TRITON_UNAVAILABLE_REASON",
    "kernel_status",
    "segmented_rmsnorm",
    "segmented_rmsnorm_reference",
    "smoke_projection",
    "triton_available",
]
