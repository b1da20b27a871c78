"""`dspark doctor`'s kernel rows: the GPU, and whether the Triton kernel
compiles here and matches its torch reference on a tiny input."""

from __future__ import annotations

import torch

from dspark.converters.doctor import ABSENT, NOT_RUN, OK, PROBLEM, DoctorRow

from .reference import segmented_rmsnorm_reference
from .segmented_rmsnorm import kernel_status, segmented_rmsnorm

# Rows x taps x width of the self-test: every code path of the kernel, in milliseconds.
SELF_TEST_SHAPE = (5, 3, 64)


def gpu_row() -> DoctorRow:
    if not torch.cuda.is_available():
        return DoctorRow("gpu", ABSENT, "no GPU (torch sees no CUDA device)")
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return DoctorRow("gpu", OK, ", ".join(names) + f" (CUDA {torch.version.cuda})", {"devices": names})


def kernel_row() -> DoctorRow:
    """Run `segmented_rmsnorm` on a tiny fp32 input where the kernel can
    run here (the GPU, else Triton's interpreter when it was asked for)
    and compare it with the reference."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    status = kernel_status(device)
    if not status.uses_kernel:
        return DoctorRow("triton kernel", NOT_RUN, f"not run: {status.reason}", {"backend": status.backend})
    rows, taps, width = SELF_TEST_SHAPE
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, taps * width, generator=generator).to(device)
    weight = (torch.rand(taps, width, generator=generator) + 0.5).to(device)
    where = "on " + (torch.cuda.get_device_name(0) if device == "cuda" else "the CPU, under Triton's interpreter (TRITON_INTERPRET=1)")
    try:
        got = segmented_rmsnorm(x, weight, 1e-5)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as error:  # noqa: BLE001 - a compile failure is what this row is for
        return DoctorRow("triton kernel", PROBLEM, f"did not compile or run {where}: {type(error).__name__}: {error}",
                         {"backend": status.backend})
    expected = segmented_rmsnorm_reference(x, weight, 1e-5)
    max_abs = float((got.float() - expected.float()).abs().max())
    data = {"backend": status.backend, "device": device, "shape": list(SELF_TEST_SHAPE), "max_abs_error": max_abs}
    if torch.allclose(got, expected, rtol=1e-5, atol=1e-6):
        return DoctorRow("triton kernel", OK, f"segmented_rmsnorm compiled and ran {where}; matches the reference "
                         f"(max abs error {max_abs:.1e})", data)
    return DoctorRow("triton kernel", PROBLEM, f"segmented_rmsnorm ran {where} but differs from the reference "
                     f"(max abs error {max_abs:.3e})", data)
