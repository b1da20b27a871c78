"""A draft served at `--pipeline-parallel-size` (`-pp`) above 1 on vLLM,
per release (read in each wheel; `path::name@vllm==X:lines`).

No config check ties the pipeline size to a draft: SpeculativeConfig builds
the draft's parallel config at size 1 (the whole drafter on the last
rank), and VllmConfig refuses a pipeline only with features a draft does
not bring (routed experts, HiSparse, adaptive verification). The server
runs Model Runner V2 (the V1 runner is the fallback only where V2 lacks a
feature, and from 0.31.0 V1 itself refuses a pipeline with asynchronous
scheduling: VllmConfig._get_v1_model_runner_unsupported_features). V2
captures the target's hidden states for an EAGLE-3 draft (unless 0.33.0
reads `eagle_config.use_aux_hidden_state: false`), a DFlash and a DSpark
draft, and at a pipeline it relays the states captured on earlier stages
to the last one, only for a target whose decoder declares it
(`supports_aux_hidden_states_over_pp`, False by default on
EagleModelMixin; True on Llama, Qwen2/Qwen3, GLM-4, Kimi-K3's KimiLinear
and DeepSeek-V4, MiniMax-M3 and Sarvam from 0.32.0, DomynEdge from
0.33.0). Any other target is refused when the runner loads the model:
"X does not support M with pipeline parallelism"
(v1/worker/gpu/spec_decode/eagle/eagle3_utils.py::
verify_supports_aux_hidden_states_over_pp, called from
GPUModelRunner.load_model before 0.33.0 and from
set_eagle3_aux_hidden_state_layers in 0.33.0). Relayed, every tap reaches
the drafter as at size 1.

A P-EAGLE draft (parallel drafting) runs on the V1 runner, which V2 lacks
it for; dspark does not judge it at a pipeline, and says so.
"""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.engines.base import Source
from dspark.schema.findings import Finding

EAGLE3_UTILS = "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py"
V2_RUNNER = "vllm/v1/worker/gpu/model_runner.py"
VLLM_CONFIG = "vllm/config/vllm.py"
INTERFACES = "vllm/model_executor/models/interfaces.py"

# Target architectures (registry names) whose decoder declares
# supports_aux_hidden_states_over_pp, by the release that adds them (read
# from each wheel's model files and registry).
_RELAYS_FROM = {
    "0.30.0": frozenset({
        "LlamaForCausalLM", "LLaMAForCausalLM", "InternLM3ForCausalLM", "IQuestCoderForCausalLM",
        "TeleChat3ForCausalLM", "MistralForCausalLM", "Ministral3ForCausalLM", "Qwen2ForCausalLM",
        "Qwen3ForCausalLM", "Glm4ForCausalLM", "KimiLinearForCausalLM", "KimiK3ForConditionalGeneration",
        "DeepseekV4ForCausalLM", "AriaForConditionalGeneration", "Phi4MMForCausalLM"}),
    "0.31.0": frozenset(),
    "0.32.0": frozenset({"MiniMaxM3SparseForCausalLM", "SarvamMLAForCausalLM"}),
    "0.33.0": frozenset({"DomynEdgeForCausalLM"}),
}
_ORDER = ("0.30.0", "0.31.0", "0.32.0", "0.33.0")

# Per release: (the check, its call site: V2's load_model, or the setter in
# 0.33.0, the interface default, what the V1 runner lacks).
_LINES = {
    "0.33.0": ("57-64", ("25-46", "set_eagle3_aux_hidden_state_layers"), "1611", "3089-3151"),
    "0.32.0": ("44-51", ("405-417", "GPUModelRunner.load_model"), "1572", "2955-2999"),
    "0.31.0": ("44-51", ("388-400", "GPUModelRunner.load_model"), "1563", "3105-3149"),
    "0.30.0": ("44-51", ("409-421", "GPUModelRunner.load_model"), "1572", "2883-2913"),
}


def relaying_targets(version: str) -> frozenset[str]:
    """The target architectures whose captured states V2 relays across stages."""
    found: set[str] = set()
    for release in _ORDER[:_ORDER.index(version) + 1]:
        found |= _RELAYS_FROM[release]
    return frozenset(found)


def _at(version: str, path: str, lines: str, qualname: str) -> Source:
    return Source(path, lines, f"vllm=={version}", qualname)


def sources(version: str) -> dict[str, Source]:
    verify, (call, call_name), default, v1 = _LINES[version]
    call_path = EAGLE3_UTILS if call_name.startswith("set_") else V2_RUNNER
    return {
        "verify": _at(version, EAGLE3_UTILS, verify, "verify_supports_aux_hidden_states_over_pp"),
        "call": _at(version, call_path, call, call_name),
        "default": _at(version, INTERFACES, default, "EagleModelMixin.supports_aux_hidden_states_over_pp"),
        "v1": _at(version, VLLM_CONFIG, v1, "VllmConfig._get_v1_model_runner_unsupported_features"),
    }


def captures(version: str, method: str, config: Mapping[str, Any]) -> bool:
    """Whether the runner captures the target's hidden states for the draft."""
    if method == "eagle3" and version == "0.33.0":
        eagle = config.get("eagle_config") if isinstance(config.get("eagle_config"), Mapping) else {}
        return bool(eagle.get("use_aux_hidden_state", True))
    return method in ("eagle3", "dflash", "dspark")


def judge(version: str, method: str, pp: int, ctx: Any, cited: Mapping[str, Source], launch_text: str
          ) -> list[Finding]:
    """The findings of a draft run as `method` at pipeline size `pp` > 1."""
    cf, release = ctx.config_file, f"vLLM {version}"
    if not captures(version, method, ctx.config):
        return []
    architectures = tuple(getattr(ctx.target, "architectures", ()) or ()) if ctx.target is not None else ()
    why = (f"Model Runner V2 relays the taps captured on earlier stages only for a target whose decoder "
           f"declares it ({cited['default'].cite()}), and refuses any other when it loads the model "
           f"({cited['verify'].cite()}, from {cited['call'].cite()})")
    if not architectures:
        return [Finding(
            "LCH003", f"{cf}: at --pipeline-parallel-size {pp} {why}: the verdict depends on the target's "
            "class. Pass --target to judge it.", file=cf,
            detail={"setting": "--pipeline-parallel-size",
                    "verdicts": {"1": "loads", str(pp): "depends on the target"}})]
    if architectures[0] in relaying_targets(version):
        return []
    return [Finding(
        "LCH001", f"{cf}: at --pipeline-parallel-size {pp} {release} refuses the draft on a {architectures[0]} "
        f"target: \"{architectures[0]} does not support {method} with pipeline parallelism\"; {why}. Serve it "
        "at --pipeline-parallel-size 1.", file=cf,
        detail={"pp_size": pp, "target": architectures[0], "launch": launch_text})]
