"""The smallest set of stand-ins that lets a vLLM release's Python code run
on a CPU without its compiled parts (engine side; imported before vLLM).
Each says why the draft's loading, the target's capture and the refusals
stay what the engine's code makes them.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

import torch


class _Placeholder:
    """Stands for any name of a stubbed module: importable, never used."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        return _Placeholder()

    def __call__(self, *args, **kwargs):
        return _Placeholder()

    def __mro_entries__(self, bases):
        return (object,)


class _PlaceholderModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder()


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes `torchvision` and its submodules importable as placeholders.

    Why: multimodal targets (Qwen3.5, Kimi-K2.5, Kimi-K3) import
    transformers' image processors at module level
    (vllm/model_executor/models/qwen3_vl.py@0.33.0:38 ->
    transformers/models/qwen2_vl/image_processing_qwen2_vl.py), which import
    torchvision; its only wheel for torch 2.13 is a CUDA build whose
    compiled ops do not load on the CPU torch. Images are pre-processed
    only for requests; building the target, setting up its capture and
    loading the draft never call torchvision, so nothing judged depends on
    it."""

    ROOT = "torchvision"

    def find_spec(self, fullname, path, target=None):
        if fullname == self.ROOT or fullname.startswith(self.ROOT + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _PlaceholderModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0+placeholder"
        return module

    def exec_module(self, module):
        pass


def _torchvision_loads() -> bool:
    if importlib.util.find_spec("torchvision") is None:
        return False
    try:
        import torchvision  # noqa: F401
    except Exception:
        return False
    return True


def _no_accelerator_cache_release() -> None:
    """torch.accelerator.empty_cache() raises on a machine with no
    accelerator (torch 2.13 CPU); vLLM calls it after loading
    (vllm/model_executor/model_loader/base_loader.py::BaseModelLoader.load_model@0.33.0:93, 114)
    only to hand cached device memory back. Releasing a cache writes no
    weight and checks nothing: on a CPU it is a no-op here."""
    if torch.accelerator.current_accelerator() is not None:
        return
    torch.accelerator.empty_cache = lambda: None


if not _torchvision_loads():
    sys.modules.pop("torchvision", None)
    sys.meta_path.insert(0, _StubFinder())
_no_accelerator_cache_release()


def _registry_inspects_in_process() -> None:
    """vLLM inspects a model class in a fresh interpreter only so that CUDA
    is not initialised in the server process
    (vllm/model_executor/models/registry.py::_run_in_subprocess@0.33.0:1594-1625,
    called from _LazyRegisteredModel.inspect_model_cls:1121-1124). There is
    no CUDA here, and that fresh interpreter would not have the stand-ins of
    this module; the same function runs in this process instead."""
    from vllm.model_executor.models import registry

    registry._run_in_subprocess = lambda fn: fn()


def _no_cpu_weight_packing() -> None:
    """On the CPU platform, vLLM repacks each linear and embedding weight
    after loading for its CPU GEMM kernels (AMX / oneDNN / sgl-kernel; the
    linear's own weight is then emptied), through `torch.ops._C`, the
    compiled extension left out here
    (vllm/model_executor/layers/utils.py::dispatch_cpu_unquantized_gemm@0.33.0:540-680,
    called from linear.py::UnquantizedLinearMethod.process_weights_after_loading:208-217
    and vocab_parallel_embedding.py:67-71 only when current_platform.is_cpu()).
    A GPU server never takes this path; it runs after the loader and its
    not-loaded check, so what was loaded is unchanged: the weights are kept
    as loaded."""
    from vllm.model_executor.layers import utils

    utils.dispatch_cpu_unquantized_gemm = lambda layer, remove_weight: None


def _no_cpu_mla_packing() -> None:
    """The CPU platform's MLA attention backend (AMX) repacks the absorbed
    `kv_b_proj` halves for its CPU kernel after loading, through
    `torch.ops._C.convert_weight_packed`
    (vllm/v1/attention/backends/mla/amx_mla.py::AMXMLAImpl.process_weights_after_loading@0.33.0:253-305).
    A GPU server runs another MLA backend; the step comes after the loader
    and its checks and only re-lays out a loaded weight, so nothing judged
    depends on it."""
    from vllm.v1.attention.backends.mla import amx_mla

    amx_mla.AMXMLAImpl.process_weights_after_loading = lambda self, act_dtype: None


class _NoStream:
    """Stands for a CUDA stream on a machine without CUDA."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def _cpu_streams() -> None:
    """The Kimi-K3 target creates a CUDA side stream in its constructor to
    overlap two GEMMs (vllm/models/kimi_k3/nvidia/model.py::KimiK3Model.__init__@0.33.0:978-981).
    A stream orders kernels; it holds no weight and takes no part in which
    hidden states are captured. With no CUDA, `torch.cuda.Stream` stands for
    nothing."""
    if not torch.cuda.is_available():
        torch.cuda.Stream = _NoStream


# The compiled activation kernels a release's activation layers look up in
# their constructors on the CPU platform with no guard
# (vllm/model_executor/layers/activation.py::SiluAndMul.__init__@0.30.0:128-135;
# GeluAndMul.__init__:420-433, NewGELU.__init__:552-561, FastGELU.__init__:
# 585-594, QuickGELU.__init__:618-627). Those guarded by `hasattr` (the
# CPU's activation_lut_bf16, gelu_tanh) are left absent, so each
# constructor takes the branch it takes without the extension.
_UNGUARDED_ACTIVATION_OPS = ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul", "gelu_new", "gelu_fast",
                             "gelu_quick")


def _activation_op_handles() -> None:
    """vLLM 0.30.0's activation layers keep a handle on their compiled
    kernel, `torch.ops._C.<op>`, when they are built on the CPU platform
    (0.31.0 on take it only on CUDA, XPU or a POWER CPU), so building the
    target's MLP fails on the missing extension before anything is loaded.
    Each missing handle stands for the kernel and raises if it is ever
    called. The handle is only called by the layer's forward, which the
    harness never runs: an activation has no weight, the loader never
    touches it, and the target's capture set-up and the draft's build,
    load and checks are the code's own, so loading is unchanged."""
    namespace = torch.ops._C
    for name in _UNGUARDED_ACTIVATION_OPS:
        if hasattr(namespace, name):
            continue

        def kernel(*args, _name=name, **kwargs):
            raise RuntimeError(f"torch.ops._C.{_name} is left out of this CPU environment (vllm_stubs.py)")

        setattr(namespace, name, kernel)


_cpu_streams()
_activation_op_handles()
_registry_inspects_in_process()
_no_cpu_weight_packing()
_no_cpu_mla_packing()
