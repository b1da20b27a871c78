"""Run one SGLang release's own startup path over draft folders, on CPU.

Runs with the release's environment (its python, its wheel's code on the
path): `python sglang_probe.py CASES.json OUTCOMES.json`. The heavy
SGLang modules are imported once; each case then runs in a forked child
with a time limit, so a crash or a global one case leaves behind cannot
change another.

Per case, as the server does it (paths relative to `sglang/srt/`):
0. the target alone (`--model-path`, completed with the released defaults
   its tiny config may leave out: `sglang_target.RELEASED_DEFAULTS`); a
   target SGLang does not take is NO_RUN, never a verdict on the draft;
1. config: `prepare_server_args` with the draft as
   `--speculative-draft-model-path` and the algorithm a user passes for
   its family, resolved and published (`server_args.py::prepare_server_args`,
   `runtime_context.py::publish`), then the draft's `ModelConfig`
   (`configs/model_config.py::ModelConfig.from_server_args`, draft rewrites);
2. build: `model_loader/utils.py::get_model_architecture` (registry) and
   `model_loader/loader.py::_initialize_model` on CPU, every parameter then
   filled with a sentinel;
3. load: `DefaultModelLoader._get_all_weights` (file patterns, index) into
   the model's own `load_weights` (`DefaultModelLoader.load_weights_and_postprocess`);
4. capture: the target named by the case built on the meta device, then
   `model_runner_components/spec_aux_hidden_state.py::resolve_spec_aux_hidden_state_config`
   and `model_runner_components/attention_backend_setup.py::configure_aux_hidden_state_capture`;
5. startup: the drafting worker's checks that read the draft config.

REFUSED: the release's code raised at one of these steps. SERVED_WRONG:
all ran, but a parameter kept its sentinel, a declared or shipped feature
has no module, the captured layers or their order differ from what the
draft was trained on / lists, fc's width differs from what is captured, or
the EAGLE-3 hot-token map is missing or malformed. LOADED otherwise.
"""

from __future__ import annotations

import json
import os
import select
import shlex
import signal
import sys
import tempfile
import traceback
import warnings
from pathlib import Path

import sglang_stubs
import sglang_startup
import sglang_target

# This folder holds the other engines' harnesses too (a `vllm.py`): off the
# path, so that no engine module name resolves to one of them.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]
sglang_stubs.install()
# The release warns at import about every platform it does not find (AWQ,
# GGUF, ...): noise around the outcomes, never a verdict.
warnings.filterwarnings("ignore")

import torch  # noqa: E402

import outcomes  # noqa: E402
from outcomes import LOADED, NO_RUN, REFUSED, SERVED_WRONG, Case, Outcome, norm_problems  # noqa: E402

HARNESS_FOLDER = Path(__file__).resolve().parent
CASE_TIMEOUT_S = 120
SENTINEL = float("nan")


def raised_by_harness(error: BaseException) -> bool:
    """Whether the innermost frame is this harness's own code (a bug here, no verdict)."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and Path(frames[-1].filename).resolve().parent == HARNESS_FOLDER


def engine_frame(error: BaseException) -> str:
    """The last traceback frame inside the sglang package: where the engine refused."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f"{os.sep}sglang{os.sep}" in f.filename]
    if not frames:
        return ""
    frame = frames[-1]
    return f"{frame.filename.split(os.sep + 'sglang' + os.sep, 1)[-1]}:{frame.lineno} ({frame.name})"


def algorithm_for(folder: Path) -> str:
    """The `--speculative-algorithm` a user passes for this draft: EAGLE3 for
    an EAGLE-3 draft, DSPARK for a DSpark draft, DFLASH for a DFlash one,
    chosen from what the folder says it is (architectures, Markov fields)."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return "EAGLE3"
    if not isinstance(config, dict):
        return "EAGLE3"
    architecture = " ".join(config.get("architectures") or []).lower()
    if "dspark" in architecture or "dspark" in str(config.get("model_type", "")).lower():
        return "DSPARK"
    if "dflash" in architecture:
        return "DFLASH"
    return "EAGLE3"


def derived_target(folder: Path) -> dict:
    """A Llama target as wide, as deep and with the vocabulary the draft
    says its target has, for a case that names none (Llama: every
    algorithm has its capture setter there, `models/llama.py@0.5.23:929-953`)."""
    try:
        draft = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        draft = {}
    draft = draft if isinstance(draft, dict) else {}
    nested = draft.get("dflash_config") if isinstance(draft.get("dflash_config"), dict) else {}
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": draft.get("target_hidden_size") or draft.get("hidden_size") or 4096,
            "num_hidden_layers": draft.get("target_num_hidden_layers") or nested.get("num_target_layers")
            or draft.get("num_target_layers") or 32,
            "vocab_size": draft.get("vocab_size") or 32000,
            "num_attention_heads": 1, "num_key_value_heads": 1}  # any width divides into one head


def target_folder(case: Case, workdir: Path, details: dict) -> Path:
    """A folder holding the case's target config.json (the target the draft
    is for), completed with the released defaults it may leave out."""
    folder = workdir / "target"
    folder.mkdir(parents=True, exist_ok=True)
    if case.target_config is None:
        config = derived_target(Path(case.folder))
        details["target_derived"] = config
    else:
        source = Path(case.target_config)
        config = json.loads((source / "config.json" if source.is_dir() else source).read_text())
    filled = sglang_target.complete_target_config(config)
    if filled:
        details["target_completed"] = filled
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def checkpoint_parameters(model: torch.nn.Module):
    """The parameters a checkpoint must write: all but those SGLang itself
    marks optional, with a default of their own (the KV-cache scales,
    `layers/quantization/kv_cache.py::BaseKVCacheMethod.create_weights@0.5.23:38-46`)."""
    return [(name, parameter) for name, parameter in model.named_parameters()
            if not getattr(parameter, "_skip_weight_check", False)]


def fill_with_sentinel(model: torch.nn.Module) -> None:
    """Every floating parameter NaN, every integer one -1, so one the loader never writes shows."""
    with torch.no_grad():
        for _, parameter in checkpoint_parameters(model):
            parameter.fill_(SENTINEL if parameter.is_floating_point() else -1)


def unwritten_parameters(model: torch.nn.Module) -> list[str]:
    names = []
    with torch.no_grad():
        for name, parameter in checkpoint_parameters(model):
            values = parameter.detach()
            untouched = torch.isnan(values) if values.is_floating_point() else values == -1
            if values.numel() and bool(untouched.all()):
                names.append(name)
    return names


def judge(case: Case, workdir: Path) -> Outcome:
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_executor.model_runner_components.load_model_utils import build_load_config
    from sglang.srt.model_loader.loader import (DefaultModelLoader, _get_quantization_config, _initialize_model,
                                                get_model_loader,
                                                set_default_torch_dtype)
    from sglang.srt.runtime_context import get_spec
    from sglang.srt.server_args import prepare_server_args

    folder = Path(case.folder)
    algorithm = algorithm_for(folder)
    details: dict = {"algorithm": algorithm}
    stage = "config"
    captured = None
    try:
        target = target_folder(case, workdir, details)
    except (OSError, ValueError) as error:
        return Outcome(NO_RUN, reason=f"the case's target config could not be read: {error}", details=details)
    try:
        serve_target = ["--model-path", str(target), "--device", "cpu", "--skip-tokenizer-init"]
        try:  # the target alone first: a target SGLang does not take is no verdict on the draft
            sglang_stubs.publish_for_scheduler(prepare_server_args(serve_target))
        except Exception as error:
            return Outcome(NO_RUN, reason=f"the case's target config is not one SGLang serves: "
                                          f"{type(error).__name__}: {error}"[:2000], stage=stage,
                           details={**details, "where": engine_frame(error)})
        argv = [*serve_target, "--speculative-algorithm", algorithm, "--speculative-draft-model-path", str(folder),
                *shlex.split(case.launch or "")]
        server_args = prepare_server_args(argv)
        sglang_stubs.publish_for_scheduler(server_args)
        draft_config = ModelConfig.from_server_args(
            server_args, model_path=get_spec().speculative_draft_model_path, is_draft_model=True)
        target_config = ModelConfig.from_server_args(server_args)

        stage = "build"
        load_config = build_load_config(
            server_args=server_args, tp_rank=0, remote_instance_weight_transporter_engine=None,
            remote_instance_weight_transporter_session_id="", draft_model_idx=None,
            weight_cache_mode="off", weight_cache_socket=None)
        loader = get_model_loader(load_config, draft_config)
        if not isinstance(loader, DefaultModelLoader):
            return Outcome(NO_RUN, reason=f"the release picks {type(loader).__name__}, which this harness does not run",
                           stage=stage, details=details)
        # model_loader/loader.py::DefaultModelLoader.load_model: built under the
        # draft's dtype on the target device (CPU here), then loaded.
        quant_config = _get_quantization_config(draft_config, load_config)
        with set_default_torch_dtype(draft_config.dtype), torch.device("cpu"):
            draft = _initialize_model(draft_config, load_config, quant_config)
        details["draft_class"] = type(draft).__name__
        fill_with_sentinel(draft)

        stage = "load"
        with set_default_torch_dtype(draft_config.dtype):
            DefaultModelLoader.load_weights_and_postprocess(
                draft, loader._get_all_weights(draft_config, draft), torch.device("cpu"))
        unwritten = unwritten_parameters(draft)
        if algorithm == "EAGLE3":
            # The EAGLE-3 worker hands the draft the target's embedding at
            # startup, whatever the draft shipped
            # (speculative/eagle_worker_v2.py::EAGLEWorkerV2.init_lm_head@0.5.23:353-363):
            # a draft embedding the loader never wrote is replaced, not served.
            unwritten = [name for name in unwritten if not name.endswith("embed_tokens.weight")]

        stage = "capture"
        captured, capture_note = sglang_target.captured_layers(
            server_args, target_config, algorithm, load_config, workdir)
        details["capture"] = capture_note

        stage = "startup"
        details["startup"] = sglang_startup.check(algorithm, draft_config, target_config)
    except sglang_target.TargetNotBuilt as error:
        return Outcome(NO_RUN, reason=f"the case's target config is not one SGLang builds: {error}", stage=stage,
                       details={**details, "traceback": traceback.format_exc()[-2500:]})
    except sglang_stubs.StubCalled as error:
        return Outcome(NO_RUN, reason=f"a stubbed kernel was reached: {error}", stage=stage, details=details)
    except Exception as error:  # the engine's own code refused the draft
        details["where"] = engine_frame(error)
        details["traceback"] = traceback.format_exc()[-2500:]
        if raised_by_harness(error):
            return Outcome(NO_RUN, reason=f"harness error: {type(error).__name__}: {error}"[:2000], stage=stage,
                           details=details)
        return Outcome(REFUSED, reason=f"{type(error).__name__}: {error}"[:2000], stage=stage, details=details,
                       captured_layers=captured)
    return verdict(case, draft, draft_config, int(target_config.vocab_size), captured, unwritten, details)


def verdict(case: Case, draft, draft_config, target_vocab, captured, unwritten, details) -> Outcome:
    problems = []
    if unwritten:
        problems.append(f"{len(unwritten)} parameter(s) never loaded: {', '.join(unwritten[:8])}")
    if case.trained_layers is not None and captured is not None and list(captured) != list(case.trained_layers):
        problems.append(f"the target captures layers {captured}, the draft was trained on {case.trained_layers}")
    width = sglang_target.fc_input_width(draft)
    target_width = details.get("capture", {}).get("captured_width")
    if width is not None and target_width is not None and width != target_width:
        problems.append(f"fc reads {width} features, the target captures {target_width}")
    requested = details.get("capture", {}).get("requested_ids")
    if captured is not None and requested and list(requested) != sorted(set(requested)):
        problems.append(f"the draft lists its taps as {list(requested)}; the target hands them over once each, "
                        f"in layer order")
    problems += sglang_startup.dropped_features(Path(case.folder), draft, draft_config)
    problems += norm_problems(case, draft)
    problems += sglang_startup.hot_token_map_problems(details["algorithm"], draft, target_vocab)
    problems += sglang_startup.block_size_problems(details["algorithm"], draft, draft_config)
    problems += sglang_startup.dflash2_problems(Path(case.folder), draft, draft_config)
    problems += sglang_startup.stream_problems(Path(case.folder), details.get("capture", {}).get("served_stream"))
    status = SERVED_WRONG if problems else LOADED
    return Outcome(status, reason="; ".join(problems), stage="" if problems else "startup",
                   captured_layers=captured, unwritten=unwritten, details=details)


def run_isolated(judge_case, timeout_s: float) -> Outcome:
    """Judge one case in a forked child; a crash, a hang or a leaked global stays there."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        try:
            outcome = judge_case()
        except BaseException as error:  # a fault of this harness, not a verdict
            outcome = Outcome(NO_RUN, reason=f"harness error: {type(error).__name__}: {error}",
                              details={"traceback": traceback.format_exc()[-3000:]})
        with os.fdopen(write_end, "w") as pipe:
            pipe.write(json.dumps(outcome.to_json()))
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        ready, _, _ = select.select([pipe], [], [], timeout_s)
        if not ready:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            return Outcome(NO_RUN, reason=f"timed out after {timeout_s:.0f} s")
        text = pipe.read()
    _, status = os.waitpid(child, 0)
    if not text:
        return Outcome(NO_RUN, reason=f"the case's process died (wait status {status})")
    return Outcome.from_json(json.loads(text))


def main() -> None:
    cases_path, outcomes_path = Path(sys.argv[1]), Path(sys.argv[2])
    cases = outcomes.read_cases(cases_path)
    sglang_stubs.prepare_runtime()
    results: dict[str, Outcome] = {}
    with tempfile.TemporaryDirectory(prefix="sglang-probe-") as scratch:
        for index, case in enumerate(cases):
            workdir = Path(scratch) / str(index)
            workdir.mkdir()
            results[case.id] = run_isolated(lambda: judge(case, workdir), CASE_TIMEOUT_S)
            outcomes.write_outcomes(results, outcomes_path)  # what finished survives a host time-out
    outcomes.write_outcomes(results, outcomes_path)


if __name__ == "__main__":
    main()
