"""Runs one TokenSpeed release's own startup path over draft folders, on CPU,
in the release's environment: `python tokenspeed_probe.py CASES OUTCOMES
KERNEL_CODE` (KERNEL_CODE: tokenspeed-kernel's Python files, see
tokenspeed_stubs).

Per case, what the server does (citations are to 0.1.1's
tokenspeed/runtime/):
1. config: `prepare_server_args` over the launch flags, then the target's
   and the draft's `ModelConfig` through `EventLoop._load_model_config`
   (engine/event_loop.py:169-175, 607-628): get_config, the architecture
   rewrite, the block-width reconciliation (configs/model_config.py:369-401).
2. build + load: `DefaultModelLoader.load_model` (model_loader/loader.py:
   450-492): the registry's class, built on CPU, its weight iterator over the
   folder into the model's load_weights, the post-load hooks. Every
   parameter is filled with NaN between construction and loading.
3. capture: the target named by the case, built by its own class on the meta
   device, and `configure_draft_target` (execution/factory.py:161-200): the
   draft's `configure_target` (startup validation, taps, stream) or the
   EAGLE-3 capture, and the embed/head sharing.
4. startup: the drafter class `get_drafter_impl` picks, constructed (mask
   token, block geometry, sliding windows) and wired to the target
   (execution/model_executor.py:567-578).

0.1.0 (LEGACY_RELEASES) runs steps 1-2 through the same functions (its
`EventLoop._load_model_config`, engine/event_loop.py@0.1.0:1046-1063, takes
no target config; its loader, model_loader/loader.py@0.1.0:447-480), and
steps 3-4 as its `ModelExecutor.__init__` does them in one place
(execution/model_executor.py@0.1.0:374-423, see `_wire_legacy`). It has no
DSPARK algorithm (utils/server_args.py@0.1.0:1531-1534 offers EAGLE3, MTP,
DFLASH), so a block draft is launched with DFLASH and its architecture meets
the release's model registry.
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import signal
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path

# Python puts this script's folder first on the path, where the host-side
# harness `tokenspeed.py` would shadow the engine's `tokenspeed` package:
# move the folder behind the release's code.
_HERE = str(Path(__file__).resolve().parent)
sys.path[:] = [entry for entry in sys.path if entry != _HERE] + [_HERE]

import outcomes  # noqa: E402
import tokenspeed_stubs  # noqa: E402
from tokenspeed_verdict import (  # noqa: E402
    capture_reading,
    dflash2_cache_refusal,
    dflash2_served_wrong,
    dropped_trained_tensors,
    proposal_checks,
    served_wrong,
)
from outcomes import LOADED, NO_RUN, REFUSED, SERVED_WRONG, Case, Outcome, norm_problems  # noqa: E402

CASE_SECONDS = 120

# Releases whose drafter is built and wired inside ModelExecutor.__init__
# (no execution/factory.py::configure_draft_target, no drafter registry).
LEGACY_RELEASES = ("0.1.0",)

# Tensor operations that consume a checkpoint tensor's values (a weight
# loader copies, casts, stacks or offsets them into a parameter or a table);
# reading a tensor's shape or dtype is not one.
VALUE_READS = frozenset({"copy_", "set_", "__setitem__", "__add__", "add", "__mul__", "mul", "cat", "stack", "clone",
                         "to", "contiguous", "float", "half", "bfloat16", "type", "index_select", "__getitem__"})


# Fields the engine's target classes need that a tiny target config may
# leave out, with the values of the released models' own config.json (Qwen3.5:
# a full-attention layer every 4, configs/qwen3_5_text_base_config.py:266-275
# has no default; Kimi-K2.5's DeepSeek-V3 text model: its MoE layer frequency
# and router (models/deepseek_v3.py:330, 1849) and YaRN rope_scaling
# (layers/rotary_embedding.py:1335-1336)). Only absent keys are filled,
# in the text config: none changes which layers the target has or captures.
TARGET_COMPLETIONS = {
    "qwen3_5_text": {"full_attention_interval": 4},
    "deepseek_v3": {"moe_layer_freq": 1, "topk_method": "noaux_tc", "scoring_func": "sigmoid",
                    "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096,
                                     "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}},
}


def _completed_target(config: dict) -> dict:
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    for key, value in TARGET_COMPLETIONS.get(text.get("model_type"), {}).items():
        text.setdefault(key, value)
    return config


class HarnessGap(Exception):
    """The probe itself cannot run this case (not the engine's verdict)."""


class LaunchRefused(Exception):
    """The release's own argument parser refuses the case's launch flags
    (a flag it does not have): the server exits before it builds anything."""


def _engine_frame(error: BaseException) -> str:
    """The last frame of the traceback inside the engine's package."""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if "/tokenspeed/" in frame.filename:
            return f"{frame.filename.split('/tokenspeed/', 1)[1]}:{frame.lineno} ({frame.name})"
    return ""


def _algorithm(case: Case, config: dict, legacy: bool = False) -> str:
    """The --speculative-algorithm a user passes for this draft. A release
    without DSPARK is given DFLASH, the block-drafting algorithm it has."""
    names = " ".join(str(a) for a in config.get("architectures") or []) + " " + str(config.get("model_type", ""))
    family = case.family or ""
    if family == "k3_dspark" or "DSpark" in names or "dspark" in names:
        return "DFLASH" if legacy else "DSPARK"
    if family == "dflash_gqa" or "DFlash" in names or "dflash" in names:
        return "DFLASH"
    return "EAGLE3"


def _read_config(folder: Path) -> dict:
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


class Probe:
    """Imports the release once; `run(case)` runs one case (in a fork)."""

    def __init__(self, kernel_code: Path, version: str = "0.1.1") -> None:
        self.legacy = version in LEGACY_RELEASES
        tokenspeed_stubs.install(kernel_code)
        if self.legacy:
            tokenspeed_stubs.eager_compile()
        tokenspeed_stubs.gpu_platform()
        tokenspeed_stubs.cpu_server()
        import torch

        if self.legacy:
            self._import_legacy(torch)
            return

        from tokenspeed.runtime.engine.event_loop import EventLoop
        from tokenspeed.runtime.execution import factory
        from tokenspeed.runtime.execution.drafter import get_drafter_impl
        from tokenspeed.runtime.model_loader import loader as loader_module
        # Imports every model module (models/registry.py:90-123) while the
        # stand-ins still answer module-top calls.
        from tokenspeed.runtime.models.registry import ModelRegistry  # noqa: F401
        from tokenspeed.runtime.utils.server_args import prepare_server_args

        # The drafters get_drafter_impl imports lazily, imported now so that
        # their module tops run before the stubs are sealed.
        import tokenspeed.runtime.execution.drafter.dflash  # noqa: F401
        import tokenspeed.runtime.execution.drafter.dflash2  # noqa: F401
        import tokenspeed.runtime.execution.drafter.dspark  # noqa: F401
        import tokenspeed.runtime.execution.drafter.eagle  # noqa: F401
        import tokenspeed.runtime.execution.drafter.deepseek_v4_dspark  # noqa: F401
        import tokenspeed.runtime.execution.drafter.deepseek_v41_dspark  # noqa: F401
        import tokenspeed.runtime.execution.drafter.mtp  # noqa: F401

        self.torch = torch
        self.event_loop = EventLoop
        self.factory = factory
        self.get_drafter_impl = get_drafter_impl
        self.loader_module = loader_module
        self.prepare_server_args = prepare_server_args
        tokenspeed_stubs.seal()
        tokenspeed_stubs.place_gpu_tensors_on_cpu()

    def _import_legacy(self, torch) -> None:
        from tokenspeed.runtime.engine.event_loop import EventLoop
        # The executor module holds 0.1.0's drafter choice and EAGLE-3 tap
        # reading (execution/model_executor.py@0.1.0:88-113); importing it
        # imports the three drafters.
        from tokenspeed.runtime.execution import model_executor
        from tokenspeed.runtime.model_loader import loader as loader_module
        from tokenspeed.runtime.models.registry import ModelRegistry  # noqa: F401
        from tokenspeed.runtime.utils.server_args import prepare_server_args

        self.torch = torch
        self.event_loop = EventLoop
        self.model_executor = model_executor
        self.loader_module = loader_module
        self.prepare_server_args = prepare_server_args
        tokenspeed_stubs.seal()
        tokenspeed_stubs.place_gpu_tensors_on_cpu()

    # -- the steps -----------------------------------------------------------

    def _model_configs(self, case: Case, algorithm: str, target_dir: Path, language_only: bool):
        # --yarn-ramp-mask-device cpu: the YaRN frequency table is computed
        # on the host (the default is the GPU; utils/server_args.py:548,
        # layers/rotary_embedding.py:580-590); it is no checkpoint weight.
        # --language-model-only, for a multimodal target whose tiny config
        # has no vision tower: the server then skips the encoder
        # (configs/model_config.py:620-633), which holds no draft-facing layer.
        # (0.1.0 has no such flag: its YaRN table follows the stand-in device.)
        argv = ["--model", str(target_dir), "--speculative-algorithm", algorithm,
                "--speculative-draft-model-path", case.folder,
                *([] if self.legacy else ["--yarn-ramp-mask-device", "cpu"]),
                *(["--language-model-only"] if language_only else []), *shlex.split(case.launch or "")]
        try:
            server_args = self.prepare_server_args(argv)
        except SystemExit as error:
            if not case.launch:
                raise HarnessGap(f"the release's argument parser refuses the probe's own flags (exit {error.code})"
                                 ) from None
            # The probe's flags alone parse (every case without a launch
            # does): a flag of the case's launch this release does not have
            # stops the server, whatever the draft.
            raise LaunchRefused(f"the release's argument parser refuses the launch (exit {error.code}): "
                                f"{case.launch}") from None
        # One process stands for the world: the launcher gives each process
        # its rank before it builds anything (entrypoints/engine.py:639).
        # Under --pipeline-parallel-size > 1 it is a rank of the LAST stage,
        # the one that samples and so alone runs the drafter, loads the
        # draft's layers, head and own embedding and wires the target
        # (execution/factory.py::pipeline_stage_builds_draft:206-222); the
        # earlier stages' draft loads are run beside it (_load_earlier_stages).
        mapping = server_args.mapping
        # a copy without a rank, for the earlier stages (a rank is set once)
        self.unranked_mapping = copy.deepcopy(mapping)
        mapping.rank = mapping.world_size - 1 if getattr(mapping, "pp_size", 1) > 1 else 0
        # The scheduler publishes the launch to its process-wide dict before
        # it builds a model (engine/event_loop.py:637); layers read it.
        from tokenspeed.runtime.utils.env import global_server_args_dict_update

        global_server_args_dict_update(server_args)
        host = types.SimpleNamespace(server_args=server_args)
        try:
            target_config = self.event_loop._load_model_config(host, str(target_dir))
        except tokenspeed_stubs.StubCalled:
            raise
        except Exception as error:
            if self.legacy:
                self._resolve_draft_alone(host, case)
            raise HarnessGap(f"the engine does not take the case's target config: {type(error).__name__}: {error}")
        host.model_config = target_config
        draft_config = self.event_loop._load_model_config(host, case.folder, is_draft_worker=True)
        return server_args, target_config, draft_config

    def _resolve_draft_alone(self, host, case: Case) -> None:
        """A target this release has no config for (0.1.0 knows no Kimi-K3,
        the only target of a K3 draft) stops the server before the draft is
        read; the draft would be refused on its own by the same release when
        its config or architecture is one the release does not have: its
        ModelConfig (engine/event_loop.py@0.1.0:1046-1063) and the model
        registry's resolution (model_loader/utils.py@0.1.0::
        get_model_architecture:45, models/registry.py@0.1.0::
        _raise_for_unsupported:44-56) are run on the draft alone and raise
        what they raise. Neither reads the target."""
        from tokenspeed.runtime.model_loader.utils import get_model_architecture

        draft_config = self.event_loop._load_model_config(host, case.folder, is_draft_worker=True)
        get_model_architecture(draft_config)

    def _load_draft(self, server_args, draft_config):
        """DefaultModelLoader.load_model as the server runs it, with every
        parameter set to NaN right after construction."""
        torch = self.torch
        module = self.loader_module
        original = module._initialize_model
        yielded: dict[int, str] = {}  # data address -> checkpoint name
        read: set[int] = set()         # data addresses copied from

        def initialize_then_poison(model_config, load_config):
            model = original(model_config, load_config)
            with torch.no_grad():
                for parameter in model.parameters():
                    if parameter.is_floating_point():
                        parameter.fill_(float("nan"))
            return model

        def recording(iterator):
            for name, tensor in iterator:
                yielded[tensor.data_ptr()] = name
                yield name, tensor

        class CopiedFrom(torch.overrides.TorchFunctionMode):
            """Notes every tensor a value is copied or assigned from, so a
            checkpoint tensor the loader never reads shows (dropped)."""

            def __torch_function__(self, func, types, args=(), kwargs=None):
                if getattr(func, "__name__", "") in VALUE_READS:
                    for value in (*args, *(kwargs or {}).values()):
                        if isinstance(value, torch.Tensor) and value.device.type == "cpu":
                            read.add(value.data_ptr())
                return func(*args, **(kwargs or {}))

        original_all = module.DefaultModelLoader._get_all_weights
        module._initialize_model = initialize_then_poison
        module.DefaultModelLoader._get_all_weights = lambda self, mc, model: recording(original_all(self, mc, model))
        try:
            load_config = module.LoadConfig(load_format=server_args.load_format,
                                            download_dir=server_args.download_dir)
            loader = module.get_model_loader(load_config)
            # load_model reads only `.device` (model_loader/loader.py:456);
            # the engine's DeviceConfig refuses "cpu" (configs/device_config.py:37).
            with CopiedFrom():
                model = loader.load_model(model_config=draft_config, device_config=types.SimpleNamespace(device="cpu"))
        finally:
            module._initialize_model = original
            module.DefaultModelLoader._get_all_weights = original_all
        unwritten = sorted(name for name, parameter in model.named_parameters()
                           if parameter.is_floating_point() and torch.isnan(parameter).any())
        dropped = sorted(name for address, name in yielded.items() if address not in read)
        return model, unwritten, dropped, load_config

    def _load_earlier_stages(self, server_args, draft_config, dropped_last: list[str]) -> list[str]:
        """The draft's load on every stage before the last, each as its own
        rank would run it: a block drafter's model is built there too
        (execution/factory.py::pipeline_stage_builds_draft:206-222), with the
        taps that stage owns (models/kimi_k3_dspark.py:342-352). Only the
        rank differs from the last stage's config, so the same ModelConfig is
        reused with a mapping at that rank. The server stops if any stage's
        load does; a name is dropped only if no stage loads it."""
        mapping = server_args.mapping
        dropped = set(dropped_last)
        for stage in range(mapping.pp_size - 1):
            stage_mapping = copy.deepcopy(self.unranked_mapping)
            stage_mapping.rank = stage * mapping.stage_world_size
            stage_config = copy.copy(draft_config)
            stage_config.mapping = stage_mapping
            stage_model, _, stage_dropped, _ = self._load_draft(server_args, stage_config)
            dropped &= set(stage_dropped)
            self.owned_taps |= set(getattr(stage_model, "local_tap_indices", ()))
        return sorted(dropped)

    def _build_target(self, target_config, load_config):
        torch = self.torch
        from tokenspeed.runtime.model_loader.utils import set_default_torch_dtype

        # The target is built for its capture wiring only (the setters the
        # draft calls and the layer list they check): its weights are never
        # loaded or run, so its kernels' plans and workspaces (MoE plans,
        # fused collectives) may be stand-ins, and its tensors meta.
        tokenspeed_stubs.gpu_stand_in = "meta"
        tokenspeed_stubs.seal(False)
        try:
            with set_default_torch_dtype(target_config.dtype), torch.device("meta"):
                return self.loader_module._initialize_model(target_config, load_config)
        finally:
            tokenspeed_stubs.gpu_stand_in = "cpu"
            tokenspeed_stubs.seal(True)

    def _start_drafter(self, server_args, algorithm, draft, draft_config, target):
        """The drafter the executor builds (execution/model_executor.py:
        567-578), with stand-ins for the GPU resources it is handed."""
        drafter_class = self.get_drafter_impl(algorithm, draft)
        runner = types.SimpleNamespace(model=draft, model_config=draft_config, server_args=server_args,
                                       device="cpu", mapping=server_args.mapping)
        drafter = drafter_class(
            spec_num_tokens=server_args.speculative_num_draft_tokens,
            spec_num_steps=server_args.speculative_num_steps,
            draft_model_runner=runner,
            attn_backend=tokenspeed_stubs.drafter_attention_backend(server_args, draft_config),
            token_to_kv_pool=types.SimpleNamespace(),
            runtime_states=types.SimpleNamespace(),
            input_buffers=types.SimpleNamespace(max_bs=1),
            vocab_size=draft_config.vocab_size,
        )
        drafter.wire_target(target)
        return drafter

    def _wire_legacy(self, server_args, algorithm, draft, draft_config, target, target_config):
        """0.1.0's drafter construction and wiring, the steps of
        ModelExecutor.__init__ in its order (execution/model_executor.py@0.1.0:
        374-423); its buffers and attention components are stand-ins (see
        tokenspeed_stubs.cpu_server), the page size the executor's default
        (the launch's --block-size, :344-346). Of the step buffers the
        drafters read only the batch bound and, for EAGLE-3, the shape of
        the sequence-length buffer (execution/drafter/eagle.py@0.1.0:119-133):
        one request's worth stands in; neither reads the draft."""
        executor = self.model_executor
        runner = types.SimpleNamespace(model=draft, model_config=draft_config, server_args=server_args,
                                       device="cpu", mapping=server_args.mapping)
        drafter_class = executor._get_drafter_impl(algorithm, draft)
        drafter = drafter_class(
            spec_num_tokens=server_args.speculative_num_draft_tokens,
            spec_num_steps=server_args.speculative_num_steps,
            draft_model_runner=runner,
            page_size=int(server_args.block_size),
            runtime_states=types.SimpleNamespace(),
            input_buffers=types.SimpleNamespace(max_bs=1, seq_lens_buf=self.torch.zeros(1, dtype=self.torch.int32)),
            req_to_page=self.torch.zeros((2, 1), dtype=self.torch.int32),
            attn_backend=types.SimpleNamespace(),
            token_to_kv_pool=types.SimpleNamespace(),
            vocab_size=draft_config.vocab_size,
        )
        if hasattr(drafter, "bind_target_model"):
            drafter.bind_target_model(target)
        if algorithm in ("EAGLE3", "MTP"):
            embed, head = target.get_embed_and_head()
            draft.set_embed_and_head(embed, head)
        if algorithm == "EAGLE3" and hasattr(target, "set_eagle3_layers_to_capture"):
            target.set_eagle3_layers_to_capture(executor._eagle_aux_layer_ids(draft_config.hf_config))
        if algorithm == "DFLASH":
            if not hasattr(target, "set_dflash_layers_to_capture"):
                raise ValueError("DFLASH requires the target model to support set_dflash_layers_to_capture.")
            incremental = getattr(drafter, "_incremental_proj_enabled", False)
            target.set_dflash_layers_to_capture(
                drafter.target_layer_ids,
                incremental_callback=drafter._on_capture_slot_ready if incremental else None,
                slot_bufs=drafter._incr_slot_bufs if incremental else None,
            )
        return drafter

    # -- one case ----------------------------------------------------------------

    def run(self, case: Case) -> Outcome:
        folder = Path(case.folder)
        config = _read_config(folder)
        algorithm = _algorithm(case, config, self.legacy)
        if not case.target_config:
            raise HarnessGap("the case names no target: the server needs one to start")
        stage = "config"
        captured = None
        drafter = None
        try:
            with tempfile.TemporaryDirectory() as target_dir:
                target_json = _completed_target(json.loads(Path(case.target_config).read_text()))
                (Path(target_dir) / "config.json").write_text(json.dumps(target_json))
                language_only = "text_config" in target_json and "vision_config" not in target_json
                server_args, target_config, draft_config = self._model_configs(case, algorithm, Path(target_dir),
                                                                               language_only)
                stage = "build"
                draft, unwritten, dropped, load_config = self._load_draft(server_args, draft_config)
                self.owned_taps = set(getattr(draft, "local_tap_indices", ()))
                if getattr(server_args.mapping, "pp_size", 1) > 1:
                    dropped = self._load_earlier_stages(server_args, draft_config, dropped)
                before = dict(draft.named_parameters())
                try:
                    target = self._build_target(target_config, load_config)
                except tokenspeed_stubs.StubCalled:
                    raise
                except Exception as error:
                    raise HarnessGap(f"the engine cannot build the case's target: {type(error).__name__}: {error} "
                                     f"at {_engine_frame(error)}")
                stage = "capture"
                if self.legacy:
                    drafter = self._wire_legacy(server_args, algorithm, draft, draft_config, target, target_config)
                    captured, stream = capture_reading(target)
                else:
                    runner = types.SimpleNamespace(model=target, model_config=target_config,
                                                   mapping=server_args.mapping)
                    draft_runner = types.SimpleNamespace(model=draft, model_config=draft_config)
                    self.factory.configure_draft_target(server_args, runner, draft_runner)
                    captured, stream = capture_reading(target)
                    stage = "startup"
                    if algorithm in ("DFLASH", "DSPARK"):
                        drafter = self._start_drafter(server_args, algorithm, draft, draft_config, target)
        except (HarnessGap, tokenspeed_stubs.StubCalled):
            raise
        except LaunchRefused as refusal:
            return Outcome(REFUSED, reason=str(refusal), stage="launch", details={"algorithm": algorithm})
        except Exception as error:
            if traceback.extract_tb(error.__traceback__)[-1].filename == __file__:
                raise  # the probe's own mistake, not the engine's verdict
            cause = _stub_in_chain(error)
            if cause is not None:
                raise cause from error
            stage = "load" if stage == "build" and _loading(error) else stage
            return Outcome(REFUSED, reason=f"{type(error).__name__}: {error}"[:2000], stage=stage,
                           captured_layers=captured, details={"at": _engine_frame(error), "algorithm": algorithm})
        cache_refusal = dflash2_cache_refusal(draft, draft_config)
        if cache_refusal is not None:
            return Outcome(REFUSED, reason=cache_refusal, stage="first request", captured_layers=captured,
                           details={"algorithm": algorithm})
        # Parameters the target shared into the draft replace the draft's own
        # (the embedding and head): those the loader left alone are served.
        after = dict(draft.named_parameters())
        unwritten = [name for name in unwritten if after.get(name) is before[name]]
        details = {"algorithm": algorithm, "class": type(draft).__name__, "stream": stream,
                   "num_steps": server_args.speculative_num_steps,
                   "num_draft_tokens": server_args.speculative_num_draft_tokens}
        details["dropped"] = dropped
        wrong = served_wrong(config, draft, captured, stream, case.trained_layers, unwritten, target_config)
        wrong += dropped_trained_tensors(dropped)
        if getattr(server_args.mapping, "pp_size", 1) > 1 and hasattr(draft, "local_tap_indices"):
            unowned = sorted(set(range(len(draft.target_layer_ids))) - self.owned_taps)
            if unowned:
                wrong.append(f"tap(s) {unowned} owned by no pipeline stage: never projected")
            details["owned_taps"] = sorted(self.owned_taps)
        wrong += proposal_checks(algorithm, config, draft, captured, target_config, drafter)
        wrong += norm_problems(case, draft)
        wrong += dflash2_served_wrong(config, draft, drafter)
        status = SERVED_WRONG if wrong else LOADED
        return Outcome(status, reason="; ".join(wrong), stage="startup" if not wrong else "capture",
                       captured_layers=captured, unwritten=unwritten, details=details)


def _stub_in_chain(error: BaseException) -> BaseException | None:
    """A stand-in call the engine wrapped in its own exception."""
    seen = error
    while seen is not None:
        if isinstance(seen, tokenspeed_stubs.StubCalled):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _loading(error: BaseException) -> bool:
    return any("load_weights" in frame.name or "weight_loader" in frame.name or "weights_iterator" in frame.name
               for frame in traceback.extract_tb(error.__traceback__))


def _run_isolated(probe: Probe, case: Case) -> Outcome:
    """One case in a forked child, bounded in time."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        result_file = Path(handle.name)
    pid = os.fork()
    if pid == 0:
        try:
            try:
                outcome = probe.run(case)
            except tokenspeed_stubs.StubCalled as error:
                outcome = Outcome(NO_RUN, reason=f"a GPU kernel stand-in was called: {error}",
                                  details={"at": _engine_frame(error)})
            except HarnessGap as error:
                outcome = Outcome(NO_RUN, reason=str(error))
            except BaseException as error:  # the harness failed, not the engine
                outcome = Outcome(NO_RUN, reason=f"harness error {type(error).__name__}: {error}",
                                  details={"traceback": traceback.format_exc()[-3000:]})
            result_file.write_text(json.dumps(outcome.to_json()))
        finally:
            os._exit(0)
    deadline = time.monotonic() + CASE_SECONDS
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            result_file.unlink(missing_ok=True)
            return Outcome(NO_RUN, reason=f"timed out after {CASE_SECONDS} s")
        time.sleep(0.05)
    try:
        return Outcome.from_json(json.loads(result_file.read_text()))
    except (OSError, ValueError):
        return Outcome(NO_RUN, reason=f"the case's process died (wait status {status})")
    finally:
        result_file.unlink(missing_ok=True)


def main(cases_file: str, outcomes_file: str, kernel_code: str, version: str = "0.1.1") -> None:
    cases = outcomes.read_cases(Path(cases_file))
    probe = Probe(Path(kernel_code), version)
    results = {}
    for case in cases:
        results[case.id] = _run_isolated(probe, case)
        print(f"{case.id}: {results[case.id].status} {results[case.id].reason[:160]}", file=sys.stderr, flush=True)
        # After every case: a batch stopped part-way still reports what ran.
        outcomes.write_outcomes(results, Path(outcomes_file))


if __name__ == "__main__":
    main(*sys.argv[1:5])
