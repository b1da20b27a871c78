"""Run the Triton kernels in Triton's CPU interpreter when no CUDA GPU is present.

TRITON_INTERPRET is read when a kernel is decorated, so it must be set before
``dspark.kernels`` (and with it Triton) is imported; pytest loads this file
before the test modules beside it. An explicit TRITON_INTERPRET wins.
"""

import os


def _cuda_present() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


if not _cuda_present():
    os.environ.setdefault("TRITON_INTERPRET", "1")
