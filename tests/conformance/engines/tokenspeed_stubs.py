"""The stubs TokenSpeed's Python code needs to import and build models on a
CPU, each with why it leaves config parsing, model construction, weight
loading and startup validation as the release has them.

Installed once per probe process, before anything of `tokenspeed` is
imported (`install()`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path

# Compiled / GPU-only packages the engine imports at module top. Every name
# the engine takes from them is a kernel (attention, norm, rope, GEMM,
# sampling, all-reduce) or a kernel's result type: kernels hold no weights,
# and the config, registry, construction, load_weights and startup checks the
# probe runs call none of them (they run in forward passes), so a stand-in
# that only lets `from X import name` succeed changes nothing the probe reads.
# While the engine's modules are imported, a call (a decorator such as
# `triton.jit`, a `triton.Config(...)` in a table) returns another stand-in;
# once `seal()` runs, any call raises `StubCalled`, which the probe reports as
# NO_RUN (a harness gap), never as the engine's verdict.
# DFlash2 is no exception: its model takes `tokenspeed_kernel.ops.conv.
# dflash2_grouped_conv` (models/dflash2.py@0.1.1:30), called only by the
# convolution's forward on CUDA tensors (:109-123), and its drafter
# `ops.sampling.triton.dflash2_greedy_path` (execution/drafter/dflash2.py:26),
# called only when it walks a drafted lattice (:57-66); construction,
# load_weights and the drafter's __init__/wire_target call neither.
STUBBED_PACKAGES = (
    "tokenspeed_kernel",      # tokenspeed-kernel: Triton/CUDA kernels
    "tokenspeed_triton",      # the kernels' Triton fork
    "tokenspeed_scheduler",   # C++ request scheduler (serving loop only)
    "tokenspeed_mooncake",    # KV transfer engine (disaggregation only)
    "triton",                 # GPU compiler, not in a CPU torch
    "flashinfer",             # attention/sampling kernels
    "deep_gemm", "deep_ep",   # MoE/GEMM kernels and expert-parallel comms
    "sgl_kernel", "cutlass",  # kernel libraries
    "cuda", "nvidia",         # CUDA Python bindings
    "xgrammar",               # grammar-constrained sampling (serving loop only)
    "torch_memory_saver",     # GPU memory release hooks (serving loop only)
    "nvtx",                   # profiler ranges
)


class StubCalled(RuntimeError):
    """A stubbed kernel was called: the probe reached code that needs a GPU."""


_sealed = False


def seal(sealed: bool = True) -> None:
    """From now on a stubbed kernel that is called raises StubCalled (or,
    with `sealed=False`, gives a stand-in again: see tokenspeed_probe's
    target build)."""
    global _sealed
    _sealed = sealed


# Stand-ins that must answer as the real function does in an environment
# with no kernel plugin installed: discovery of kernel plugins (entry points)
# finds none (called from tokenspeed/runtime/plugins/__init__.py:130-134).
ANSWERS = {
    "tokenspeed_kernel.plugins.discover_plugins": lambda *args, **kwargs: [],
    # A memory-layout choice for the absorbed MLA factors (models/deepseek_v3.py:
    # 156-165): either answer keeps the same values, derived from kv_b_proj.
    "tokenspeed_kernel.ops.attention.mla.mla_project_value_prefers_contiguous_weight": lambda *a, **k: False,
}


class _StubObject(types.ModuleType):
    """A stubbed module: any attribute is another stand-in."""

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        qualified = f"{self.__name__}.{name}"
        value = ANSWERS[qualified] if qualified in ANSWERS else _make_stub(qualified)
        setattr(self, name, value)
        return value


def _is_availability_query(qualified: str) -> bool:
    """`native_latent_moe_available()`, `allreduce_fusion_supported()`,
    `has_flashinfer_...()`, `supports_...()`: a question whether a fused kernel
    exists. The answer is no (none is installed); the engine then builds its
    unfused path, whose parameters are loaded from the same checkpoint names."""
    name = qualified.rsplit(".", 1)[-1]
    return name.endswith(("_available", "_supported")) or name.startswith(("has_", "supports_", "is_"))


def _make_stub(qualified: str):
    """A class stand-in: importable, subclassable, usable in annotations and
    `isinstance`; calling it gives another stand-in until `seal()`, then
    raises StubCalled."""

    def _refuse(*args, **kwargs):
        if not _sealed:
            return _make_stub(f"{qualified}()")
        if _is_availability_query(qualified):
            return False
        raise StubCalled(f"{qualified} is a GPU kernel stand-in and was called on the probe's path")

    meta = type("_StubMeta", (type,), {
        "__getattr__": lambda cls, name: (_ for _ in ()).throw(AttributeError(name))
        if name.startswith("__") else _make_stub(f"{qualified}.{name}"),
        "__call__": lambda cls, *a, **k: _refuse(),
        "__bool__": lambda cls: False,
        "__getitem__": lambda cls, item: cls,
        "__iter__": lambda cls: iter(()),
        "__or__": lambda cls, other: cls,
        "__ror__": lambda cls, other: cls,
    })
    return meta(qualified.rsplit(".", 1)[-1], (), {"__module__": qualified.rsplit(".", 1)[0]})


# Modules of the stubbed packages that are plain Python and decide what the
# engine builds, so the release's own file is loaded instead of a stand-in:
# `tokenspeed_kernel.platform` describes the GPU (vendor, architecture) that
# model constructors branch on (see `gpu_platform`).
REAL_MODULES = ("tokenspeed_kernel.platform",)


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, kernel_code: Path) -> None:
        self.kernel_code = kernel_code

    def find_spec(self, fullname, path, target=None):
        if fullname in REAL_MODULES:
            file = self.kernel_code.joinpath(*fullname.split(".")).with_suffix(".py")
            return importlib.util.spec_from_file_location(fullname, file)
        if fullname.split(".")[0] in STUBBED_PACKAGES:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubObject(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        return None


def install(kernel_code: Path) -> None:
    """Stub the GPU packages; `kernel_code` holds tokenspeed-kernel's Python
    files (for REAL_MODULES)."""
    if not any(isinstance(finder, _StubFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _StubFinder(kernel_code))


def gpu_platform() -> None:
    """Describe the GPU the engine is served on: an NVIDIA Hopper (sm 9.0)
    with one device. `tokenspeed_kernel.platform.current_platform()` raises
    without a CUDA device; the engine's constructors read it only to choose
    kernels and fusions (e.g. models/deepseek_v3.py:61-64 at 0.1.1), and a
    fused layer's parameter is filled from the same checkpoint names."""
    from tokenspeed_kernel.platform import ArchVersion, Platform, PlatformInfo

    Platform.override(PlatformInfo(
        vendor="nvidia", arch_version=ArchVersion(9, 0), device_name="NVIDIA H100 80GB HBM3", device_count=1,
        total_memory=80 << 30, memory_bandwidth=3350.0, sm_count=132, max_threads_per_sm=2048,
        max_shared_memory_per_sm=228 << 10))


def eager_compile() -> None:
    """`torch.compile` runs the function it is given eagerly. 0.1.0 compiles
    helpers at module top (e.g. layers/vocab_parallel_embedding.py@0.1.0:163),
    which makes inductor import Triton (stubbed here, and absent from a CPU
    torch). A compiled function computes what the eager one does, and each is
    called only in forward passes, never by config, construction or
    load_weights."""
    import torch

    def compile(model=None, **kwargs):
        return model if model is not None else (lambda function: function)

    torch.compile = compile


def cpu_server() -> None:
    """What a server reads from the GPU itself, answered as the device of
    `gpu_platform` would: its memory (sizes the KV cache and scheduling
    limits, utils/server_args.py:752-760) and the drafter's GPU step buffers
    (pinned host and device tensors, execution/drafter/dflash.py:224-273,
    whose only checks are that the executor handed buffers and attention
    components over, which the probe does). Neither reads the draft."""
    import tokenspeed.runtime.utils.server_args as server_args
    from tokenspeed.runtime.execution.drafter.dflash import DFlash

    server_args.get_nvgpu_memory_capacity = lambda: 80 * 1024  # MiB, as nvidia-smi reports
    DFlash._init_native_buffers = lambda self: None
    # Device housekeeping the constructors and the embed/head sharing call
    # (e.g. models/llama_eagle3.py:713-714, models/qwen3_5.py:941,
    # models/kimi_k3_comm.py:151): the device index, streams,
    # events, cache release and synchronisation order GPU work and free
    # memory; they neither hold nor move a weight.
    import torch

    torch.cuda.current_device = lambda: 0
    torch.cuda.empty_cache = lambda: None
    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.cuda.Stream = _DeviceHandle
    torch.cuda.Event = _DeviceHandle


class _DeviceHandle:
    """A CUDA stream or event that orders nothing (see cpu_server)."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None


def drafter_attention_backend(server_args, draft_config):
    """A stand-in for the drafter's attention backend that answers the one
    question the drafter's construction asks of it: whether the backend the
    launch selects applies per-layer sliding windows (the class attribute
    `supports_layer_sliding_window`, layers/attention/backends/base.py:165,
    read at execution/drafter/dflash.py:198). The class is the registry's
    own choice for the draft's attention architecture, which takes no
    --drafter-attention-backend (nor --attention-backend, mirrored to it:
    utils/server_args.py::resolve_speculative_decoding:1123-1129) as the
    architecture's default, `mha` for a GQA draft
    (layers/attention/registry.py::_get_backend_cls:573-591). Building the
    real backend needs CUDA workspaces; it holds no weights."""
    from tokenspeed.runtime.layers.attention.registry import _get_backend_cls

    name = server_args.drafter_attention_backend
    try:
        backend = _get_backend_cls(name, draft_config.attention_arch)
    except ValueError:  # a backend for another architecture: the real build refuses it first
        backend = None
    # A backend that decides per instance (a property) is taken to apply none.
    supports = getattr(backend, "supports_layer_sliding_window", False)
    return types.SimpleNamespace(supports_layer_sliding_window=supports if isinstance(supports, bool) else False,
                                 backend_name=name)


def _is_cuda(device) -> bool:
    return (isinstance(device, str) and device.startswith("cuda")) or getattr(device, "type", None) == "cuda"


# Where a GPU tensor is made instead: the CPU, or the meta device while the
# probe builds a target (which it never loads: see tokenspeed_probe).
gpu_stand_in = "cpu"


def place_gpu_tensors_on_cpu() -> None:
    """The probe's only device is the CPU: a tensor the engine creates or
    moves onto the GPU (`device="cuda"`, `.to("cuda")`, `.cuda()`, pinned
    host memory) is made on the CPU instead, with the same values. Devices
    hold no checkpoint decision: the loader's checks compare names, shapes
    and counts, which do not depend on where a tensor lives."""
    import torch
    from torch.overrides import TorchFunctionMode

    class CudaOnCpu(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if _is_cuda(kwargs.get("device")):
                kwargs["device"] = gpu_stand_in
            if kwargs.get("pin_memory"):
                kwargs["pin_memory"] = False
            if func is torch.Tensor.cuda:
                return args[0]
            if func is torch.Tensor.to:
                args = tuple(gpu_stand_in if _is_cuda(arg) else arg for arg in args)
            return func(*args, **kwargs)

    CudaOnCpu().__enter__()
