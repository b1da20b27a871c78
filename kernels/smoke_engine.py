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

Where the engine's package does not import here but its kernel can run (a
host that has the engine's Triton but not every library its package
imports), the kernel's own file is loaded alone, with the engine modules it
imports when those import nothing more of the engine
(`engine_loading.load_kernel_alone`): the same kernel source, compiled by
the same Triton, as the engine serves with. `EngineKernel.loaded_alone`
says so, and why. A kernel compiled by a Triton of the engine's own
(TokenSpeed 0.1.1's `tokenspeed_triton`) runs in a child process
(`ChildKernel`, engine_child.py), so that two Triton builds never share
one (engine_loading.py says why).

Where the kernel cannot run here, `EngineKernel.reason` says why.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from dspark.converters.doctor import ABSENT, NOT_RUN, OK, PROBLEM, DoctorRow
from dspark.converters.runtime import Runtime
from dspark.schema.engines.tokenspeed import revisions as ts
from dspark.schema.errors import first_line

from . import engine_loading as loading
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
    # How it was loaded: None (the engine's package imported it, as serving
    # does), or why its file was loaded alone.
    loaded_alone: str | None = None
    triton: str | None = None  # the Triton that compiles it: "tokenspeed_triton 3.9.10"
    in_child: str | None = None  # why it runs in a child process; None: in this one

    @property
    def available(self) -> bool:
        return self.run is not None

    @property
    def loaded_alone_why(self) -> str | None:
        """Why its file was loaded alone, here or (once it ran) in its child."""
        return self.loaded_alone or getattr(self.run, "answer", {}).get("loaded_alone")

    def to_dict(self) -> dict:
        return {"engine": self.engine, "module": self.module, "file": self.file, "available": self.available,
                "reason": self.reason, "call_source": self.call_source, "loaded_alone": self.loaded_alone_why,
                "triton": self.triton, "in_child": self.in_child}


def load_engine_kernel(runtime: Runtime) -> EngineKernel:
    """Import the installed engine's `segmented_rmsnorm`, as its K3 DSpark
    model does, and adapt it to dspark's call; where it is compiled by a
    Triton of the engine's own, ready to run in a child process."""
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
    foreign = loading.foreign_tritons(kernel.module, kernel.file, kernel.root)
    if foreign:
        version = loading.distribution_version(foreign[0], kernel.root)
        triton = f"{foreign[0]} {version}" if version else foreign[0]
        child = ChildKernel(kernel.module, kernel.file, kernel.root, call.segments_axis, call.parameters[:3])
        return EngineKernel(profile, kernel.module, kernel.file, child, None, call.source.cite(), triton=triton,
                            in_child=f"compiled by {triton}, not by PyPI's triton that compiles dspark's: run "
                                     "in a child process, so that the two Triton builds never share one")
    try:
        function, loaded_alone = loading.load_function(kernel.module, kernel.file, kernel.root, ts.KERNEL_FUNCTION)
    except loading.KernelLoadError as error:
        return EngineKernel(profile, kernel.module, kernel.file, None, str(error), call.source.cite())
    parameters = loading.parameters(function)
    if parameters is not None and tuple(parameters[:3]) != call.parameters[:3]:
        return EngineKernel(profile, kernel.module, kernel.file, None,
                            f"{kernel.module}.{ts.KERNEL_FUNCTION} takes ({', '.join(parameters)}), not the "
                            f"({', '.join(call.parameters)}) read at {call.source.cite()}", call.source.cite())
    takes_out = parameters is None or "out" in parameters
    return EngineKernel(profile, kernel.module, kernel.file, loading.adapt(function, call.segments_axis, takes_out),
                        None, call.source.cite(), loaded_alone, loading.triton_of(function))


class ChildKernelError(RuntimeError):
    """The engine's kernel failed in its child process; the message says how."""


CHILD_SCRIPT = Path(__file__).with_name("engine_child.py")


@dataclasses.dataclass(frozen=True)
class ChildKernel:
    """The engine's kernel, run in a child process (engine_child.py): called
    as dspark calls a kernel, or asked to time itself there, where its own
    Triton runs."""

    module: str
    file: str | None
    root: str | None
    segments_axis: bool
    expected_parameters: tuple[str, ...]

    # What the child said last (how it loaded the kernel, which Triton).
    answer: dict = dataclasses.field(default_factory=dict, compare=False)

    times_itself = True  # timings of it taken in this process would time the process round trip

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, eps: float,
                 out: torch.Tensor | None = None) -> torch.Tensor:
        result, _ = self.run_timed(x, weight, eps, measure_time=False)
        if out is not None:
            out.copy_(result)
            return out
        return result

    def run_timed(self, x: torch.Tensor, weight: torch.Tensor, eps: float,
                  measure_time: bool) -> tuple[torch.Tensor, dict]:
        """The kernel's output on `x`, and (with measure_time, on a GPU) its
        median time and a copy's of the same bytes, both taken in the child."""
        with tempfile.TemporaryDirectory(prefix="dspark-engine-kernel-") as folder:
            inputs, output = Path(folder, "inputs.pt"), Path(folder, "output.pt")
            torch.save({"x": x.detach().contiguous(), "weight": weight.detach().contiguous()}, inputs)
            answer = self._ask({"job": "run", "inputs": str(inputs), "output": str(output), "eps": float(eps),
                                "device": x.device.type, "measure_time": measure_time and x.device.type == "cuda"},
                               folder)
            result = torch.load(output, map_location=x.device, weights_only=True)
        return result, {name: answer[f"{name}_ms"] for name in ("engine", "copy") if f"{name}_ms" in answer}

    def bench(self, shapes, tokens, eps: float) -> list[dict]:
        """Each shape at each T, made, checked and timed in the child
        (engine_child.py's `bench`)."""
        with tempfile.TemporaryDirectory(prefix="dspark-engine-kernel-") as folder:
            return self._ask({"job": "bench", "eps": float(eps), "device": "cuda",
                              "bench": {"shapes": [list(s) for s in shapes], "tokens": list(tokens)}}, folder)["rows"]

    def _ask(self, job: dict, folder: str) -> dict:
        request = Path(folder, "request.json")
        request.write_text(json.dumps({
            "module": self.module, "file": self.file, "root": self.root, "function": ts.KERNEL_FUNCTION,
            "segments_axis": self.segments_axis, "expected_parameters": list(self.expected_parameters), **job}))
        # TRITON_INTERPRET would make the engine's Triton interpret too: the
        # child runs the kernel as the engine does.
        environ = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        done = subprocess.run([sys.executable, str(CHILD_SCRIPT), str(request)], capture_output=True, text=True,
                              env=environ, check=False)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if not lines:
            why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise ChildKernelError(f"its child process ended without an answer ({why})")
        answer = json.loads(lines[-1])
        self.answer.clear()
        self.answer.update(answer)
        if not answer.get("ok"):
            raise ChildKernelError(answer.get("error") or "its child process failed")
        return answer


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
    how = (f" (compiled by {kernel.triton})" if kernel.triton else "") + (
        " in a child process" if kernel.in_child else "") + (
        f"; its package did not import here ({kernel.loaded_alone_why.split('; ')[0].removeprefix('importing ')}), "
        "so its file was loaded alone" if kernel.loaded_alone_why else "")
    if torch.allclose(got, expected, rtol=1e-5, atol=1e-6):
        return DoctorRow("engine kernel", OK, f"{kernel.module}.{ts.KERNEL_FUNCTION}{how} ran on {device}; matches "
                         f"the reference (max abs error {max_abs:.1e})", data)
    return DoctorRow("engine kernel", PROBLEM, f"{kernel.module}.{ts.KERNEL_FUNCTION}{how} ran on {device} but "
                     f"differs from the reference (max abs error {max_abs:.3e})", data)
