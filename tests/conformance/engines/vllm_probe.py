"""The engine side of the vLLM harness: runs with a vLLM release's
environment (its code on PYTHONPATH, `VLLM_TARGET_DEVICE=cpu`).

    python vllm_probe.py CASES.json OUTCOMES.json [--timeout SECONDS]

The heavy vLLM modules are imported once; each case runs in a forked child
(a fresh world of one process, nothing shared with the next case) that
follows the server's path for a draft (`vllm serve TARGET
--speculative-config '{"model": DRAFT, "method": M}'`, Model Runner V2):

1. config: the target's and the draft's `ModelConfig` through
   `SpeculativeConfig` (vllm/config/speculative.py::SpeculativeConfig.__post_init__),
   which parses config.json with vLLM's `get_config` and wraps EAGLE-3 and
   DFlash configs in `EAGLEConfig`;
2. capture: the target built from the case's target config with vLLM's class,
   and Model Runner V2's capture set-up (`requires_aux_hidden_states`,
   `set_eagle3_aux_hidden_state_layers`), as
   vllm/v1/worker/gpu/model_runner.py::GPUModelRunner.load_model does;
3. build + load: the speculator's draft loader (`load_eagle_model`,
   `load_dflash_model`, `load_dspark_model`), which builds the registry's
   class through `get_model` and `DefaultModelLoader` (the folder's files
   through vLLM's safetensors iterator into the model's `load_weights`, then
   the not-loaded check) and shares the target's embedding and head;
4. startup: the DFlash/DSpark drafter's mask token, read as its speculator
   reads it at start-up.

Every parameter is filled with a sentinel before the loader runs, so one the
loader never wrote shows (`vllm_checks.py`).
"""

from __future__ import annotations

import argparse
import copy
import importlib
import inspect
import json
import os
import resource
import shlex
import signal
import sys
import tempfile
import traceback
from pathlib import Path

# This folder holds the host side's `vllm.py`, which would shadow the
# release's `vllm` package: the folder goes to the end of the path, so its
# helper modules are found and vLLM's own package wins.
HERE = str(Path(__file__).resolve().parent)
sys.path[:] = [p for p in sys.path if p and str(Path(p).resolve()) != HERE] + [HERE]

import vllm_stubs  # noqa: F401  (first: what the CPU-only environment lacks; each stub says why)
from outcomes import NO_RUN, REFUSED, Case, Outcome, read_cases, write_outcomes

import torch
from vllm.config import (DeviceConfig, LoadConfig, ModelConfig, ParallelConfig, SpeculativeConfig, VllmConfig,
                         set_current_vllm_config)
from vllm.distributed import parallel_state
from vllm.model_executor.model_loader import default_loader
from vllm.model_executor.model_loader.utils import initialize_model
from vllm.utils.torch_utils import set_default_torch_dtype
from vllm.v1.worker.gpu.spec_decode.eagle import eagle3_utils

import vllm_checks

CHILD_MEMORY_BYTES = 6 << 30
ENGINE_ROOT = Path(sys.modules["vllm"].__file__).resolve().parent


class Refusal(Exception):
    """vLLM's own code raised: the stage it raised in and the exception."""

    def __init__(self, stage: str, error: BaseException):
        super().__init__(stage)
        self.stage = stage
        self.error = error


def engine_frame(error: BaseException) -> str:
    """The last frame of the traceback that lies in vLLM's own code (or, for
    transformers' config validation inside vLLM's loader, the library's)."""
    frames = traceback.extract_tb(error.__traceback__)
    for frame in reversed(frames):
        if Path(frame.filename).resolve().is_relative_to(ENGINE_ROOT):
            return f"vllm/{Path(frame.filename).resolve().relative_to(ENGINE_ROOT)}:{frame.lineno}"
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""


class HarnessGap(Exception):
    """Something the harness, not the draft, lacks (a module of the
    environment, the target): the case gets no verdict."""


def stage(name: str, call, *args, **kwargs):
    try:
        return call(*args, **kwargs)
    except ImportError as error:  # the environment lacks a module: not the draft's doing
        raise HarnessGap(f"{type(error).__name__}: {error} (at {engine_frame(error)})") from error
    except HarnessGap:
        raise
    except Exception as error:  # the engine's refusal, whatever its type
        raise Refusal(name, error) from error


def target_stage(call, *args, **kwargs):
    """The target is the case's setting, not what is judged: vLLM refusing
    the tiny target config is a gap of the harness, not a verdict."""
    try:
        return call(*args, **kwargs)
    except Exception as error:
        raise HarnessGap(f"the target: {type(error).__name__}: {error} (at {engine_frame(error)})") from error


# -- the server's inputs -------------------------------------------------------

def launch_flag(launch: str | None, *names: str) -> str | None:
    """The value of a flag (any of its spellings) in the case's launch."""
    if not launch:
        return None
    words = shlex.split(launch)
    for i, word in enumerate(words):
        for name in names:
            if word.startswith(f"{name}="):
                return word.split("=", 1)[1]
            if word == name and i + 1 < len(words):
                return words[i + 1]
    return None


def launch_speculative_config(launch: str | None) -> dict:
    """`--speculative-config JSON` from the case's launch flags, if any."""
    value = launch_flag(launch, "--speculative-config", "-sc")
    return json.loads(value) if value is not None else {}


# The tiny targets state no length: without `--max-model-len` the server is
# started at this one.
DEFAULT_MAX_MODEL_LEN = 2048


def launch_max_model_len(launch: str | None) -> int:
    value = launch_flag(launch, "--max-model-len")
    return int(value) if value is not None else DEFAULT_MAX_MODEL_LEN


def launch_pipeline_size(launch: str | None) -> int:
    value = launch_flag(launch, "--pipeline-parallel-size", "-pp")
    return int(value) if value is not None else 1


# vLLM's P-EAGLE names (model_executor/models/registry.py@0.33.0:699, 706).
PEAGLE_CLASSES = ("PeagleLlamaForCausalLM", "PeagleQwen3ForCausalLM")


def user_method(case: Case) -> str:
    """The method a user passes for this draft: read from the folder's own
    architectures (speculators' algorithm), else the family the writer named.
    vLLM only guesses it from the path (speculative.py:1433-1509), so the
    harness passes it as a user would."""
    try:
        config = json.loads((Path(case.folder) / "config.json").read_text())
    except (OSError, ValueError):
        config = None
    if isinstance(config, dict):
        speculators = config.get("speculators_config")
        algorithm = speculators.get("algorithm") if isinstance(speculators, dict) else None
        if isinstance(algorithm, str):
            # DFlash2 launches as "dflash", as vLLM's own reader of this shape
            # rewrites it (transformers_utils/configs/speculators/base.py:135-136@0.33.0);
            # "dflash2" is no method SpeculativeConfig takes.
            return "dflash" if algorithm.lower() == "dflash2" else algorithm.lower()
        names = " ".join(a for a in (config.get("architectures") or []) if isinstance(a, str)).lower()
        if any(a in PEAGLE_CLASSES for a in config.get("architectures") or []):
            return "eagle3"  # with parallel drafting (user_parallel_drafting)
        for word in ("dspark", "dflash", "eagle3"):
            if word in names:
                return word
    family = case.family or ""
    if family.startswith(("eagle3", "peagle")):
        return "eagle3"
    if family == "k3_dspark":
        return "dspark"
    return "dflash"


def user_parallel_drafting(case: Case) -> dict:
    """What a user adds for a P-EAGLE folder not in speculators' format (a
    `PeagleLlamaForCausalLM` config, as convert writes it): vLLM drafts in
    parallel only when the launch says so (config/speculative.py::
    SpeculativeConfig.parallel_drafting@0.33.0:511-515). SpecForge's
    `PEagleDraftModel` export is launched as before (dspark does not judge it)."""
    try:
        config = json.loads((Path(case.folder) / "config.json").read_text())
    except (OSError, ValueError):
        config = None
    names = config.get("architectures") if isinstance(config, dict) else None
    if isinstance(names, list) and any(a in PEAGLE_CLASSES for a in names):
        return {"parallel_drafting": True}
    return {"parallel_drafting": True} if (case.family or "").startswith("peagle") else {}


def speculators_locked_fields(case: Case) -> dict:
    """What vLLM itself locks for a folder in speculators' format served as
    it is (`vllm serve DRAFT`): the method its own reader derives, with
    P-EAGLE served as eagle3 with parallel drafting
    (transformers_utils/config.py::maybe_override_with_speculators@0.33.0:
    837-856; configs/speculators/base.py::build_vllm_speculative_config:
    97-137). A user's "method" would be overridden there; {} for any other
    folder, or a release without the reader."""
    try:
        config = json.loads((Path(case.folder) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(config, dict) or not isinstance(config.get("speculators_config"), dict):
        return {}
    try:
        from vllm.transformers_utils.configs.speculators.base import SpeculatorsConfig

        derived = SpeculatorsConfig.extract_vllm_speculative_config(config_dict=config)
    except (ImportError, AttributeError, ValueError, KeyError, TypeError):
        return {}
    return {key: derived[key] for key in ("method", "parallel_drafting") if key in derived}


def target_folder(case: Case, scratch: Path) -> Path:
    folder = scratch / "target"
    folder.mkdir()
    (folder / "config.json").write_text(Path(case.target_config).read_text())
    return folder


# -- one case ------------------------------------------------------------------

def init_world(scratch: Path) -> None:
    """A world of one process on gloo, as a single-GPU server has one rank."""
    parallel_state.init_distributed_environment(
        world_size=1, rank=0, local_rank=0, distributed_init_method=f"file://{scratch / 'world'}", backend="gloo")
    parallel_state.ensure_model_parallel_initialized(1, 1)


def build_configs(case: Case, scratch: Path) -> VllmConfig:
    # `--language-model-only`: a multimodal target is served as text, its
    # vision tower not built (vllm/config/multimodal.py::MultiModalConfig@0.33.0:304);
    # the decoder that captures and the embedding and head the draft shares
    # are the same, and nothing of the draft depends on the tower.
    target = target_stage(ModelConfig, model=str(target_folder(case, scratch)), skip_tokenizer_init=True,
                          dtype="bfloat16", max_model_len=launch_max_model_len(case.launch),
                          language_model_only=True)
    # A user passes the method and the number of draft tokens; the case's
    # launch flags win where they say otherwise (a launch case's
    # --speculative-config is the whole of it: what it leaves out, the
    # release's own config fills in or refuses).
    spec = launch_speculative_config(case.launch)
    flags = spec if spec else {"method": user_method(case), "num_speculative_tokens": 3, **user_parallel_drafting(case)}
    flags = {"method": user_method(case), **flags}
    flags.update(speculators_locked_fields(case))
    flags["model"] = case.folder
    # The launch's pipeline size reaches every config check (this process
    # is still one stage: what the stages split is judged in
    # pipeline_capture).
    parallel = ParallelConfig(pipeline_parallel_size=launch_pipeline_size(case.launch))
    speculative = stage("config", SpeculativeConfig, target_model_config=target, target_parallel_config=parallel,
                        **flags)
    vllm_config = stage("config", VllmConfig, model_config=target, speculative_config=speculative,
                        parallel_config=parallel, device_config=DeviceConfig("cpu"), load_config=LoadConfig())
    stage("config", limit_length_as_v2, vllm_config)
    return vllm_config


def pipeline_capture(target: torch.nn.Module, vllm_config: VllmConfig, stand_in: str) -> bool:
    """At a pipeline above 1, Model Runner V2 relays the captured states
    across stages only for a decoder that declares it, and refuses any
    other target when it loads the model
    (v1/worker/gpu/model_runner.py::GPUModelRunner.load_model@0.32.0:405-417;
    v1/worker/gpu/spec_decode/eagle/eagle3_utils.py::set_eagle3_aux_hidden_state_layers@0.33.0:25-46):
    its own check runs here on the case's target (this process is one stage,
    so the relay itself is not run). True where it ran."""
    speculative = vllm_config.speculative_config
    if vllm_config.parallel_config.pipeline_parallel_size <= 1 or not runner_wants_aux_hidden_states(speculative):
        return False
    if stand_in:
        raise HarnessGap(f"the pipeline check needs the case's own target class ({stand_in[:200]})")
    eagle3_utils.verify_supports_aux_hidden_states_over_pp(target, speculative.method)
    return True


def limit_length_as_v2(vllm_config: VllmConfig) -> None:
    """The server runs Model Runner V2 (0.33.0's default where Triton is:
    config/vllm.py::VllmConfig.use_v2_model_runner@0.33.0:731-767); this CPU
    environment has no Triton, so VllmConfig picked V1 and skipped its one
    V2 step that depends on the draft: lowering the server's max_model_len
    to a draft whose length was not raised
    (config/vllm.py::VllmConfig._limit_max_model_len_to_draft@0.33.0:3025-3051).
    That step, the release's own, is run as V2 would; releases before
    0.33.0 have none."""
    limit = getattr(vllm_config, "_limit_max_model_len_to_draft", None)
    if limit is None or vllm_config.use_v2_model_runner:
        return
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    try:
        limit()
    finally:
        del os.environ["VLLM_USE_V2_MODEL_RUNNER"]


def build_target(vllm_config: VllmConfig, scratch: Path) -> tuple[torch.nn.Module, str]:
    """The case's target with vLLM's class, at the config's size, on the CPU
    (its weights are never loaded: only which layers it captures is read,
    and its embedding and head are what the draft shares).

    Where the tiny target config lacks what that class needs (the Kimi-K3
    class asserts its MLA head sizes), a Llama decoder of the target's
    width, depth and vocabulary stands in: it captures hidden_states[k] as
    Llama, Qwen, DeepSeek and Kimi-K3 do (llama.py::LlamaModel.forward@0.33.0:427-441,
    vllm/models/kimi_k3/nvidia/model.py::KimiK3Model.forward:1145-1189),
    and its embedding and head have the target's shapes. The outcome says so."""
    try:
        with set_default_torch_dtype(vllm_config.model_config.dtype), torch.device("cpu"):
            return initialize_model(vllm_config=vllm_config, model_config=vllm_config.model_config), ""
    except (AssertionError, AttributeError, TypeError, ValueError) as error:
        refusal = f"{type(error).__name__}: {error} (at {engine_frame(error)})"
    text = vllm_config.model_config.hf_text_config
    folder = scratch / "target-stand-in"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": text.hidden_size,
        "num_hidden_layers": text.num_hidden_layers, "vocab_size": text.vocab_size, "num_attention_heads": 1,
        "num_key_value_heads": 1, "intermediate_size": 2 * text.hidden_size, "tie_word_embeddings": False}))
    stand_in = copy.copy(vllm_config)
    stand_in.model_config = ModelConfig(model=str(folder), skip_tokenizer_init=True, dtype="bfloat16",
                                        max_model_len=2048)
    with set_default_torch_dtype(stand_in.model_config.dtype), torch.device("cpu"):
        model = initialize_model(vllm_config=stand_in, model_config=stand_in.model_config)
    original = vllm_config.model_config.architectures[0]
    return model, f"stand-in LlamaForCausalLM: {original} did not build from the case's config ({refusal[:300]})"


def runner_wants_aux_hidden_states(speculative) -> bool:
    """Whether Model Runner V2 sets up the target's capture. 0.33.0 asks
    `requires_aux_hidden_states`, which honours EAGLE-3's
    `eagle_config.use_aux_hidden_state`
    (v1/worker/gpu/spec_decode/eagle/eagle3_utils.py@0.33.0:15-22); earlier
    releases have no such function and capture for every method in this
    list (v1/worker/gpu/model_runner.py::GPUModelRunner.__init__@0.32.0:300-307,
    @0.31.0:281-288)."""
    if hasattr(eagle3_utils, "requires_aux_hidden_states"):
        return eagle3_utils.requires_aux_hidden_states(speculative)
    return speculative.method in ("eagle3", "dflash", "dspark", "extract_hidden_states")


def set_up_capture(target: torch.nn.Module, vllm_config: VllmConfig) -> tuple[int, ...] | None:
    """vllm/v1/worker/gpu/model_runner.py::GPUModelRunner.load_model@0.33.0:412-416:
    the target captures only when the runner asks for aux hidden states
    (one pipeline stage here: use_pp is false)."""
    speculative = vllm_config.speculative_config
    if not runner_wants_aux_hidden_states(speculative):
        return None
    if speculative.parallel_drafting and speculative.method == "eagle3":
        # P-EAGLE runs on the V1 runner (no parallel EAGLE in V2:
        # config/vllm.py::VllmConfig._get_v2_model_runner_unsupported_features@0.33.0:3070-3077).
        vllm_checks.parallel_eagle_capture(target, speculative)
        return vllm_checks.captured_ids(target)
    set_layers = eagle3_utils.set_eagle3_aux_hidden_state_layers
    if "use_pp" in inspect.signature(set_layers).parameters:
        set_layers(target, speculative, use_pp=False)
    else:
        set_layers(target, speculative)
    return vllm_checks.captured_ids(target)


def load_draft(target: torch.nn.Module, vllm_config: VllmConfig) -> torch.nn.Module:
    """The speculator's own draft loader for the method (the V2 speculators'
    `load_draft_model` call these: v1/worker/gpu/spec_decode/*/speculator.py)."""
    method = vllm_config.speculative_config.method
    if method == "dspark":
        from vllm.v1.worker.gpu.spec_decode.dspark.utils import load_dspark_model
        return load_dspark_model(target, vllm_config)
    if method == "dflash":
        from vllm.v1.worker.gpu.spec_decode.dflash.utils import load_dflash_model
        return load_dflash_model(target, vllm_config)
    from vllm.v1.worker.gpu.spec_decode.eagle.utils import load_eagle_model
    return load_eagle_model(target, vllm_config)


def run_case(case: Case, scratch: Path) -> Outcome:
    if not case.target_config:
        return Outcome(NO_RUN, reason="no target config: vLLM needs the target to start a draft")
    captured: list[int] | None = None
    try:
        vllm_config = build_configs(case, scratch)
        with set_current_vllm_config(vllm_config):
            init_world(scratch)
            target, stand_in = target_stage(build_target, vllm_config, scratch)
            ids = stage("capture", set_up_capture, target, vllm_config)
            relayed = stage("capture", pipeline_capture, target, vllm_config, stand_in)
            captured = vllm_checks.suite_layers(ids, target)
            sentinel = vllm_checks.Sentinel()
            with sentinel.around(default_loader.DefaultModelLoader):
                draft = stage("load", load_draft, target, vllm_config)
            stage("startup", vllm_checks.drafter_startup, vllm_config)
            outcome = vllm_checks.judge(case, vllm_config, target, draft, sentinel, ids, captured)
            if stand_in:
                outcome.details["target"] = stand_in
            if relayed:
                outcome.details["pipeline"] = "the target's decoder relays captured states across stages"
            return outcome
    except HarnessGap as gap:
        return Outcome(NO_RUN, reason=str(gap)[:2000], captured_layers=captured)
    except Refusal as refusal:
        error = refusal.error
        return Outcome(REFUSED, reason=f"{type(error).__name__}: {error}"[:2000], stage=refusal.stage,
                       captured_layers=captured, details={"where": engine_frame(error)})


# -- the batch -----------------------------------------------------------------

def run_isolated(case: Case, timeout: float) -> Outcome:
    """One forked child per case: a crash, a hang or a leaked global stays there."""
    with tempfile.TemporaryDirectory(prefix="vllm-case-") as scratch:
        result_file = Path(scratch) / "outcome.json"
        pid = os.fork()
        if pid == 0:
            code = 0
            # A draft whose config asks for an absurd size must not take the
            # machine down with it: past this the child gets a MemoryError.
            resource.setrlimit(resource.RLIMIT_DATA, (CHILD_MEMORY_BYTES, CHILD_MEMORY_BYTES))
            try:
                outcome = run_case(case, Path(scratch))
            except BaseException as error:  # the harness's own failure: no verdict
                outcome = Outcome(NO_RUN, reason=f"harness error: {type(error).__name__}: {error}"[:2000],
                                  details={"traceback": traceback.format_exc()[-4000:]})
                code = 1
            result_file.write_text(json.dumps(outcome.to_json()))
            os._exit(code)

        def expire(signum, frame):
            raise TimeoutError

        signal.signal(signal.SIGALRM, expire)
        signal.alarm(int(timeout))
        try:
            _, status = os.waitpid(pid, 0)
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return Outcome(NO_RUN, reason=f"no result within {timeout:.0f} s")
        finally:
            signal.alarm(0)
        if not result_file.exists():
            return Outcome(NO_RUN, reason=f"the case's process died (wait status {status})")
        return Outcome.from_json(json.loads(result_file.read_text()))


# The model modules the cases' drafts and targets resolve to, imported
# once before the children fork (each child would otherwise import them
# anew); a module a release lacks is skipped.
PRELOADED = (
    "vllm.model_executor.models.llama", "vllm.model_executor.models.llama_eagle3",
    "vllm.model_executor.models.qwen3", "vllm.model_executor.models.qwen3_eagle3",
    "vllm.model_executor.models.deepseek_v2", "vllm.model_executor.models.deepseek_eagle3",
    "vllm.model_executor.models.qwen3_dflash", "vllm.model_executor.models.qwen3_dspark",
    "vllm.model_executor.models.qwen3_5", "vllm.model_executor.models.kimi_k25", "vllm.models.kimi_k3",
    "vllm.v1.worker.gpu.spec_decode.eagle.utils", "vllm.v1.worker.gpu.spec_decode.dflash.utils",
    "vllm.v1.worker.gpu.spec_decode.dspark.utils",
)


def preload() -> None:
    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except ImportError:
            continue


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", type=Path)
    parser.add_argument("outcomes", type=Path)
    parser.add_argument("--timeout", type=float, default=150)
    args = parser.parse_args()
    preload()
    outcomes = {}
    for case in read_cases(args.cases):
        outcomes[case.id] = run_isolated(case, args.timeout)
        print(f"{case.id}: {outcomes[case.id].status} {outcomes[case.id].reason[:160]}", flush=True)
        write_outcomes(outcomes, args.outcomes)
    write_outcomes(outcomes, args.outcomes)


if __name__ == "__main__":
    main()
