"""The guarded import: without a usable Triton, dspark.kernels imports, runs the
torch reference, warns once and says why."""

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

FAKE_TRITONS = [
    pytest.param("sys.modules['triton'] = None", "not importable", id="missing"),
    pytest.param(
        "fake = types.ModuleType('triton'); fake.__version__ = '2.1.0';"
        " fake.language = types.ModuleType('triton.language');"
        " sys.modules['triton'] = fake; sys.modules['triton.language'] = fake.language",
        "older than",
        id="too-old",
    ),
    pytest.param(
        "fake = types.ModuleType('triton'); fake.__version__ = '3.1.0';"
        " fake.language = types.ModuleType('triton.language');"
        " sys.modules['triton'] = fake; sys.modules['triton.language'] = fake.language",
        "lacks triton.jit",
        id="lacks-symbols",
    ),
]


def _run_fresh(prelude: str) -> subprocess.CompletedProcess:
    """Normalise a CPU tensor in a fresh interpreter after ``prelude`` ran; print
    ``triton_available|backend|reason``."""
    script = textwrap.dedent(
        """
        import sys, types, warnings
        {prelude}
        import torch
        import dspark.kernels as k
        x = torch.randn(3, 2 * 5)
        w = torch.rand(2, 5)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y = k.segmented_rmsnorm(x, w, 1e-5)
            k.segmented_rmsnorm(x, w, 1e-5)
        assert torch.equal(y, k.segmented_rmsnorm_reference(x, w, 1e-5))
        fallbacks = [c for c in caught if issubclass(c.category, k.KernelFallbackWarning)]
        assert len(fallbacks) == 1, [str(c.message) for c in caught]
        status = k.kernel_status("cpu")
        print(k.triton_available(), status.backend, status.reason, sep="|")
        """
    ).format(prelude=prelude)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("prelude, reason_part", FAKE_TRITONS)
def test_unusable_triton_falls_back_to_reference(prelude, reason_part):
    proc = _run_fresh(prelude)
    assert proc.returncode == 0, proc.stderr
    available, backend, reason = proc.stdout.strip().split("|")
    assert (available, backend) == ("False", "torch-reference")
    assert reason_part in reason


def test_cpu_tensor_without_interpreter_falls_back_to_reference():
    pytest.importorskip("triton")
    proc = _run_fresh("")
    assert proc.returncode == 0, proc.stderr
    available, backend, reason = proc.stdout.strip().split("|")
    assert (available, backend) == ("True", "torch-reference")
    assert "CUDA" in reason
