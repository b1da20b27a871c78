"""The serving engine's own segmented RMSNorm, run beside dspark's.

`converters/runtime.py` finds the installed engine and the module its K3
DSpark model imports `segmented_rmsnorm` from; this module imports that
module (the engine's kernel is code to run, unlike the engine, which is only
read) and adapts dspark's call to the engine's signature, read from the
engine's code at each revision (schema/engines/tokenspeed/revisions.py,
`KERNEL_CALLS`): both revisions take the taps as ``[..., S, th]``, the
stacked weights ``[S, th]``, eps and an optional ``out``
(tokenspeed_kernel/ops/layernorm/triton.py@5f1e48b5:160-211;
python/tokenspeed/runtime/layers/segmented_rmsnorm.py@4b9766f6:35-76, which
also refuses tensors that are not on a GPU), and the K3 model calls it with
the taps unflattened to ``[T, S, th]``
(models/kimi_k3_dspark.py@5f1e48b5:367-372, @4b9766f6:369-375).

Where the kernel cannot run here, `EngineKernel.reason` says why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from dspark.converters.doctor import ABSENT, NOT_RUN, OK, PROBLEM, DoctorRow
from dspark.converters.runtime import Runtime
from dspark.schema.engines.tokenspeed import revisions as ts
from dspark.schema.errors import first_line

from .reference import segmented_rmsnorm_reference

# (x [T, S*th], weight [S, th], eps, out [T, S*th] or None) -> [T, S*th]
SegmentedNorm = Callable[..., torch.Tensor]


@dataclasses.dataclass(frozen=True)
class EngineKernel:
    """The installed engine's segmented RMSNorm, ready to call, or why not."""

    engine: str  # the profile, e.g. tokenspeed@pr1031
    module: str | None
    file: str | None
    run: SegmentedNorm | None
    reason: str | None  # why it cannot run here; None when `run` is set
    call_source: str | None = None  # where its signature was read

    @property
    def available(self) -> bool:
        return self.run is not None

    def to_dict(self) -> dict:
        return {"engine": self.engine, "module": self.module, "file": self.file, "available": self.available,
                "reason": self.reason, "call_source": self.call_source}


def load_engine_kernel(runtime: Runtime) -> EngineKernel:
    """Import the installed engine's `segmented_rmsnorm`, as its K3 DSpark
    model does, and adapt it to dspark's call."""
    serving = runtime.serving
    if serving is None:
        return EngineKernel(runtime.profile, None, None, None, "no serving engine is installed here")
    kernel = serving.kernel
    profile = serving.profile or serving.distribution
    if kernel is None:
        if serving.missing:
            why = f"{serving.describe()} lacks the files its K3 DSpark model would be read from"
        elif serving.distribution == "tokenspeed":
            why = f"{profile}'s K3 DSpark model builds no fc_norm and runs no segmented RMSNorm"
        else:
            why = f"dspark does not know where {serving.distribution} keeps a segmented RMSNorm"
        return EngineKernel(profile, None, None, None, why)
    if not kernel.importable:
        return EngineKernel(profile, kernel.module, kernel.file, None,
                            f"{kernel.module} cannot be imported: {kernel.why_missing} (the engine would not start)")
    call = ts.KERNEL_CALLS.get(kernel.revision or "")
    if call is None:
        return EngineKernel(profile, kernel.module, kernel.file, None,
                            f"dspark has not read how {kernel.module}.{ts.KERNEL_FUNCTION} is called")
    try:
        function = _import(kernel.module, kernel.root)
    except Exception as error:  # noqa: BLE001 - any failure of the engine's import is what is reported
        return EngineKernel(profile, kernel.module, kernel.file, None,
                            f"importing {kernel.module} failed: {type(error).__name__}: {first_line(error)}",
                            call.source.cite())
    parameters = _parameters(function)
    if parameters is not None and tuple(parameters[:3]) != call.parameters[:3]:
        return EngineKernel(profile, kernel.module, kernel.file, None,
                            f"{kernel.module}.{ts.KERNEL_FUNCTION} takes ({', '.join(parameters)}), not the "
                            f"({', '.join(call.parameters)}) read at {call.source.cite()}", call.source.cite())
    takes_out = parameters is None or "out" in parameters
    return EngineKernel(profile, kernel.module, kernel.file, _adapt(function, call.segments_axis, takes_out), None,
                        call.source.cite())


def _parameters(function) -> list[str] | None:
    try:
        return list(inspect.signature(function).parameters)
    except (TypeError, ValueError):  # a builtin or a Triton-wrapped callable without one
        return None


def _import(module: str, root: str | None):
    """`module`'s segmented_rmsnorm, imported from `root` first. A package
    of the same name imported earlier from elsewhere is set aside, so the
    installed one is the one that runs."""
    head = module.split(".")[0]
    set_aside = {}
    if root is not None:
        for name in [n for n in sys.modules if n == head or n.startswith(head + ".")]:
            if not _under(sys.modules[name], root):
                set_aside[name] = sys.modules.pop(name)
    before = set(sys.modules)
    try:
        with _on_path(root):
            loaded = importlib.import_module(module)
        return getattr(loaded, ts.KERNEL_FUNCTION)
    finally:
        if root is not None:
            # The function keeps what it needs; left in sys.modules, the
            # engine's package would be what a later look-up in this
            # process finds (the runtime probe, another --engine-path)
            # instead of what is installed where it looks.
            added = [name for name in set(sys.modules) - before if _under(sys.modules[name], root)]
            for name in added:
                sys.modules.pop(name, None)
            sys.modules.update(set_aside)


def _under(module, root: str) -> bool:
    places = [getattr(module, "__file__", None)]
    try:  # a namespace package's path is computed from its parent's
        places += list(getattr(module, "__path__", None) or ())
    except (KeyError, AttributeError):
        pass
    base = Path(root).resolve()
    return any(place and Path(place).resolve().is_relative_to(base) for place in places)


@contextlib.contextmanager
def _on_path(root: str | None):
    if root is None or root in sys.path:
        yield
        return
    sys.path.insert(0, root)
    importlib.invalidate_caches()
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(root)


def _adapt(function, segments_axis: bool, takes_out: bool) -> SegmentedNorm:
    def run(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor | None = None) -> torch.Tensor:
        rows = x.shape[0]
        segments, width = weight.shape
        shaped = x.view(rows, segments, width) if segments_axis else x
        if out is not None and takes_out:
            result = function(shaped, weight.contiguous(), float(eps), out=out.view_as(shaped))
        else:
            result = function(shaped, weight.contiguous(), float(eps))
            if out is not None:
                out.copy_(result.reshape(out.shape))
                return out
        return result.reshape(rows, segments * width)

    return run


# Rows x taps x width of the self-test, as dspark's kernel row.
SELF_TEST_SHAPE = (5, 3, 64)


def engine_kernel_row(runtime: Runtime) -> DoctorRow:
    """Run the installed engine's segmented_rmsnorm on a tiny fp32 input and
    compare it with the reference, as dspark's own kernel row does."""
    kernel = load_engine_kernel(runtime)
    if not kernel.available:
        status = ABSENT if runtime.serving is None or kernel.module is None else NOT_RUN
        if runtime.serving is not None and runtime.kernel is not None and not runtime.kernel.importable:
            status = PROBLEM
        return DoctorRow("engine kernel", status, f"not run: {kernel.reason}", kernel.to_dict())
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows, taps, width = SELF_TEST_SHAPE
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, taps * width, generator=generator).to(device)
    weight = (torch.rand(taps, width, generator=generator) + 0.5).to(device)
    try:
        got = kernel.run(x, weight, 1e-5)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as error:  # noqa: BLE001 - the engine's kernel refusing or failing is what this row is for
        return DoctorRow("engine kernel", NOT_RUN if device == "cpu" else PROBLEM,
                         f"{kernel.module}.{ts.KERNEL_FUNCTION} did not run on {device}: "
                         f"{type(error).__name__}: {first_line(error)}", kernel.to_dict())
    expected = segmented_rmsnorm_reference(x, weight, 1e-5)
    max_abs = float((got.float() - expected.float()).abs().max())
    data = {**kernel.to_dict(), "device": device, "max_abs_error": max_abs}
    if torch.allclose(got, expected, rtol=1e-5, atol=1e-6):
        return DoctorRow("engine kernel", OK, f"{kernel.module}.{ts.KERNEL_FUNCTION} ran on {device}; matches the "
                         f"reference (max abs error {max_abs:.1e})", data)
    return DoctorRow("engine kernel", PROBLEM, f"{kernel.module}.{ts.KERNEL_FUNCTION} ran on {device} but differs "
                     f"from the reference (max abs error {max_abs:.3e})", data)
