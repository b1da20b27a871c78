"""Kernel tests: a fallback to the torch reference where the kernel can run
fails the test. TRITON_INTERPRET (the CPU interpreter where no CUDA GPU is
present) is set by the suite's root conftest, before Triton is imported.
"""

import pytest

FALLBACK_IN_A_KERNEL_TEST = (
    "segmented_rmsnorm fell back to the torch reference where the kernel runs: the test would compare the "
    "reference with itself. Mark the test fallback_allowed if the fallback is what it tests."
)


def pytest_configure(config):
    config.addinivalue_line("markers", "fallback_allowed: the test expects segmented_rmsnorm's torch fallback")


class FallbackInAKernelTest(AssertionError):
    pass


@pytest.fixture(autouse=True)
def kernel_launches(request, monkeypatch):
    """Where the kernel can run here (a GPU, or Triton's interpreter), a
    fallback to the torch reference fails the test instead of passing it
    silently (a kernel that stands down at H = 7168 would otherwise be
    compared with the reference, which is itself). Yields the list of
    kernel launches, `(n_rows, num_segments, hidden)` each, for tests that
    assert the kernel ran."""
    launches: list[tuple[int, int, int]] = []
    try:
        import importlib

        import torch

        # The package re-exports the function under the module's name.
        kernel_module = importlib.import_module("dspark.kernels.segmented_rmsnorm")
    except ImportError:
        yield launches
        return
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if kernel_module.kernel_status(device).uses_kernel:
        if request.node.get_closest_marker("fallback_allowed") is None:
            def refuse(*args, **kwargs):
                raise FallbackInAKernelTest(FALLBACK_IN_A_KERNEL_TEST)

            monkeypatch.setattr(kernel_module, "segmented_rmsnorm_reference", refuse)
        run_kernel = kernel_module._run_kernel

        def counted(x, x_strides, weight, y, y_strides, n_rows, num_segments, hidden, *rest, **options):
            launches.append((n_rows, num_segments, hidden))
            return run_kernel(x, x_strides, weight, y, y_strides, n_rows, num_segments, hidden, *rest, **options)

        monkeypatch.setattr(kernel_module, "_run_kernel", counted)
    yield launches
