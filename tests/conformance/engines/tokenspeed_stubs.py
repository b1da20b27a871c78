"""The stubs TokenSpeed's Python code needs to import and build models on a
CPU, each with why it leaves config parsing, model construction, weight
loading and startup validation as the release has them.

Installed once per probe process, before anything of `tokenspeed` is
imported (`install()`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

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
STUBBED_PACKAGES = (
    "tokenspeed_kernel",      # tokenspeed-kernel: Triton/CUDA kernels
    "tokenspeed_triton",      # the kernels' Triton fork
    "tokenspeed_scheduler",   # C++ request scheduler (serving loop only)
    "tokenspeed_mooncake",    # KV transfer engine (disaggregation only)
    "triton",                 # GPU compiler, not in a CPU torch
    "flashinfer",             # attention/sampling kernels
    "deep_gemm", "deep_ep",   # MoE/GEMM kernels and expert-parallel comms
    "sgl_kernel", "cuda", "nvidia", "cutlass",
    "xgrammar",               # grammar-constrained sampling (serving loop only)
    "torch_memory_saver",     # GPU memory release hooks (serving loop only)
)


class StubCalled(RuntimeError):
    """A stubbed kernel was called: the probe reached code that needs a GPU."""


_sealed = False


def seal() -> None:
    """From now on a stubbed kernel that is called raises StubCalled."""
    global _sealed
    _sealed = True


class _StubObject(types.ModuleType):
    """A stubbed module: any attribute is another stand-in."""

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _make_stub(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


def _make_stub(qualified: str):
    """A class stand-in: importable, subclassable, usable in annotations and
    `isinstance`; calling it gives another stand-in until `seal()`, then
    raises StubCalled."""

    def _refuse(*args, **kwargs):
        if not _sealed:
            return _make_stub(f"{qualified}()")
        raise StubCalled(f"{qualified} is a GPU kernel stand-in and was called on the probe's path")

    meta = type("_StubMeta", (type,), {
        "__getattr__": lambda cls, name: (_ for _ in ()).throw(AttributeError(name))
        if name.startswith("__") else _make_stub(f"{qualified}.{name}"),
        "__call__": lambda cls, *a, **k: _refuse(),
        "__bool__": lambda cls: False,
        "__getitem__": lambda cls, item: cls,
        "__or__": lambda cls, other: cls,
        "__ror__": lambda cls, other: cls,
    })
    return meta(qualified.rsplit(".", 1)[-1], (), {"__module__": qualified.rsplit(".", 1)[0]})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in STUBBED_PACKAGES:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubObject(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        return None


def install() -> None:
    if not any(isinstance(finder, _StubFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _StubFinder())
