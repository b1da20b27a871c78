"""What SGLang needs to run its config, model and loader code on a CPU.

1. Import-time stand-ins (`install`) for packages SGLang imports at module
   level that this environment does not provide (`STUBBED` says why each
   leaves loading unchanged). None holds a weight, parses a config or names
   a tensor; each stands in only so that the module importing it loads. A stand-in is a package
   whose every attribute is a placeholder class; CALLING a placeholder
   raises `StubCalled`, so a case that reaches it reports NO_RUN (the
   harness could not run it) instead of a fabricated result.
2. Device gates (`bypass_device_gates`): checks that refuse a CPU for
   reasons of kernels or memory, never of the draft; each says why below.
3. The process set-up a CPU scheduler does before it builds models
   (`prepare_runtime`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

# package -> why a draft's config, build, load and capture are the same without it
STUBBED = {
    "torchvision": "image transforms for multimodal processors (configs/nano_nemotron_vl.py imports "
                   "multimodal/internvl_utils.py); no draft or target config, weight or capture reads them. "
                   "The PyPI build is a CUDA build whose operators do not register against the CPU torch.",
}


class StubCalled(RuntimeError):
    """A stubbed kernel was called: the case left the config/weight path."""


class _PlaceholderMeta(type):
    def __getattr__(cls, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args, **kwargs):
        raise StubCalled(f"{cls.__qualname__} is a stand-in for a CUDA-only package; it cannot run on CPU")

    def __bool__(cls) -> bool:
        return False


def _placeholder(qualname: str) -> type:
    placeholder = _PlaceholderMeta(qualname.rsplit(".", 1)[-1], (), {})
    placeholder.__qualname__ = qualname
    return placeholder


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _placeholder(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".", 1)[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0+stub"
        return module

    def exec_module(self, module) -> None:
        return None


def install() -> None:
    """Put the stand-ins in front of the real import system (once)."""
    if not any(isinstance(finder, _StubFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _StubFinder())


def _cuda_device_view(view):
    """`view` with `device` read as "cuda" and every other field as it is."""

    class DeviceAsCuda:
        def __getattr__(self, name):
            return "cuda" if name == "device" else getattr(view, name)

    return DeviceAsCuda()


def _cuda_platform_view(platform):
    """`platform` read as CUDA (is_cuda true), every other question answered as it is."""

    class PlatformAsCuda:
        def __getattr__(self, name):
            return True if name == "is_cuda" else getattr(platform, name)

    return PlatformAsCuda()


def _speculative_handlers_on_cuda() -> None:
    """`arg_groups/speculative_hook.py::_handle_dflash@0.5.23:287-301` and
    `::_handle_dspark@0.5.23:666-672` refuse any device but CUDA/NPU/XPU
    before they read the draft: a statement about kernels (the draft's
    attention runs on FlashInfer/FA), not about the checkpoint. Each handler
    runs in full with only its `cfg.device` read as "cuda"; every other
    check, default and the draft config it reads are unchanged."""
    from sglang.srt.arg_groups import speculative_hook

    for name in ("_handle_dflash", "_handle_dspark"):
        handler = getattr(speculative_hook, name)

        def on_cuda(server_args, _handler=handler):
            real_view = speculative_hook.resolving_view
            speculative_hook.resolving_view = lambda args: _cuda_device_view(real_view(args))
            try:
                return _handler(server_args)
            finally:
                speculative_hook.resolving_view = real_view

        setattr(speculative_hook, name, on_cuda)


def _mamba_cache_validation_on_cuda() -> None:
    """`arg_groups/mamba_hook.py::validate_mamba_extra_buffer@0.5.23:115-122`
    (`@0.5.21:101-111`) refuses a hybrid (Mamba) target's cache snapshots
    off CUDA, through `get_platform().is_cuda`: a memory feature of the
    target's KV pool that no draft or capture code reads. The validation
    runs in full with only the platform read as CUDA."""
    from sglang.srt.arg_groups import mamba_hook

    validate_extra_buffer = mamba_hook.validate_mamba_extra_buffer

    def validate_on_cuda(*args, **kwargs):
        real_platform = mamba_hook.get_platform
        mamba_hook.get_platform = lambda: _cuda_platform_view(real_platform())
        try:
            return validate_extra_buffer(*args, **kwargs)
        finally:
            mamba_hook.get_platform = real_platform

    mamba_hook.validate_mamba_extra_buffer = validate_on_cuda


def _rope_as_on_cuda() -> None:
    """`layers/rotary_embedding/base.py::RotaryEmbedding.__init__@0.5.23:122-141`
    picks its rope kernel by platform: SGLang's on CUDA, vLLM's on a
    platform it does not know (this CPU without the CPU engine). It takes
    the CPU branch here (torch's rope): a rope holds no parameter, and its
    cos/sin cache is computed before the branch, the same on every device.
    `layers/rotary_embedding/factory.py::get_rope_wrapper@0.5.23:516-551`
    sends the published device ("cpu" here) to the CPU engine's rope, which
    knows only deepseek_yarn; on CUDA it builds `get_rope` from the same
    config fields, which it builds here too."""
    from sglang.srt.layers.rotary_embedding import base as rotary_base
    from sglang.srt.layers.rotary_embedding import factory

    rotary_base._is_cpu = True
    device_rope = factory.get_rope_wrapper

    def rope_as_on_cuda(*args, device=None, **kwargs):
        return device_rope(*args, device=None if device == "cpu" else device, **kwargs)

    for module in list(sys.modules.values()):
        if getattr(module, "get_rope_wrapper", None) is device_rope:
            module.get_rope_wrapper = rope_as_on_cuda


def bypass_device_gates() -> None:
    """Let the checks that refuse a CPU for reasons of kernels or memory,
    never of the draft, run as on CUDA (each function says why)."""
    _speculative_handlers_on_cuda()
    _mamba_cache_validation_on_cuda()
    _rope_as_on_cuda()


def _one_process_stands_for_the_last_stage(runtime_context) -> None:
    """At --pp-size P the launcher starts P pipeline processes; this one
    stands for the last stage, which hosts the draft. The release checks
    each configured width against the group built
    (`runtime_context.py::_validate_parallel@0.5.23:331-350`): the pipeline
    group's row is left out, as the harness builds one process (its layers
    are cut to the last stage's by `sglang_target._last_stage_first_layer`).
    Called in a case's own forked process only. 0.5.20 has no such check."""
    widths = getattr(runtime_context, "_WIDTH_AND_GROUP", None)
    if widths is not None:
        runtime_context._WIDTH_AND_GROUP = tuple(row for row in widths if row != ("pp_size", "pp_group"))


def publish_for_scheduler(server_args) -> None:
    """Publish the process config as a one-process scheduler's launcher does:
    rank 0 of one (`runtime_context.py::publish@0.5.23:1489-1515` takes the
    placement as `SpawnRanks`; 0.5.20 has no placement argument)."""
    from sglang.srt import runtime_context

    if int(getattr(server_args, "pp_size", 1) or 1) > 1:
        _one_process_stands_for_the_last_stage(runtime_context)
    if hasattr(runtime_context, "SpawnRanks"):
        runtime_context.publish(server_args, role="scheduler", ranks=runtime_context.SpawnRanks(world_rank=0))
    else:
        runtime_context.publish(server_args, role="scheduler")


def prepare_runtime() -> None:
    """What a CPU scheduler process sets up before it builds models: the
    release's model registry, a one-process gloo world and its parallel
    groups (`weight_cache/daemon.py::WeightCacheDaemon@0.5.23:215-234` does the same)."""
    import socket

    from sglang.srt.distributed.parallel_state import initialize_model_parallel, init_distributed_environment
    from sglang.srt.models.registry import ModelRegistry
    from sglang.srt.server_args import ServerArgs

    # 0.5.21+ import the model modules on first use; 0.5.20 at registry import.
    getattr(ModelRegistry, "_load_default_models", ModelRegistry.get_supported_archs)()
    bypass_device_gates()
    publish_for_scheduler(ServerArgs(model_path="dummy", device="cpu"))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                 distributed_init_method=f"tcp://127.0.0.1:{port}")
    initialize_model_parallel()
