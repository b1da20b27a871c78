"""What TokenSpeed's draft models cannot serve as a config declares it.

Each function is a config rule of one family's loader (`FamilyLoader.
config_limits`), found by running the engine's own model code on fabricated
drafts: the draft loads, and the model then computes something other than
what the config says, without a word (ENG001).
"""

from __future__ import annotations

import dataclasses

from typing import Any, Mapping

from dspark.schema.engines.base import Source
from dspark.schema.engines.tokenspeed_revisions import MAIN, PR1031
from dspark.schema.families.base import is_int
from dspark.schema.families.eagle3_common import DEFAULT_TAP_COUNT, target_capture_ids
from dspark.schema.findings import Finding, Severity

_DS3 = "python/tokenspeed/runtime/models/deepseek_v3.py"
_LE3 = "python/tokenspeed/runtime/models/llama_eagle3.py"
_K3_CONFIG = "python/tokenspeed/runtime/configs/kimi_k3_dspark_config.py"
_GQA = "python/tokenspeed/runtime/models/dflash.py"
_LLAMA = "python/tokenspeed/runtime/models/llama.py"

_YARN_OR_NONE = ("default", "yarn", "deepseek_yarn")


_SERVE_ELSEWHERE = "Serve the draft on an engine that honours it, or retrain without it."


def _finding(config_file: str, text: str, source: Source, feature: str, fix: str = _SERVE_ELSEWHERE) -> Finding:
    return Finding(
        "ENG001",
        f"{config_file}: {text} ({source.cite()}). {fix}",
        file=config_file,
        detail={"feature": feature, "source": source.cite()},
    )


def _rope_type(config: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The declared rope type and where: rope_scaling, else rope_parameters
    (`rope_type`, or the older `type` key). Given both, transformers'
    config classes (DeepseekV3Config, KimiK3DSparkConfig) keep
    rope_scaling's, as rope_findings reads them."""
    for field in ("rope_scaling", "rope_parameters"):
        block = config.get(field)
        if isinstance(block, Mapping):
            kind = block.get("rope_type", block.get("type"))
            if isinstance(kind, str):
                return kind, field
    return None, None


def mla_rope_only_yarn(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The MLA EAGLE-3 layer keeps YaRN scaling only and builds a plain
    rotary embedding for any other type, with a log line
    (models/deepseek_v3.py@f4d8ec6e:1950-1969). It compares the type as
    written: "YaRN" is dropped."""
    kind, field = _rope_type(config)
    if kind is None or kind in _YARN_OR_NONE:
        return []
    return [_finding(config_file, f"{field} declares rope type {kind!r}, which the MLA EAGLE-3 layer drops: it "
                     "applies unscaled RoPE", Source(_DS3, "1950-1969", MAIN), "rope_scaling")]


def k3_rope_only_yarn(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The K3 config hands the model YaRN from rope_parameters and nothing
    else (configs/kimi_k3_dspark_config.py@4b9766f6:139-170), in any case
    (it lower-cases the type)."""
    kind, field = _rope_type(config)
    if kind is None or kind.lower() in _YARN_OR_NONE:
        return []
    return [_finding(config_file, f"{field} declares rope type {kind!r}; the K3 DSpark config passes only YaRN "
                     "to the model, which then applies unscaled RoPE", Source(_K3_CONFIG, "139-170", PR1031),
                     "rope_scaling")]


def gqa_partial_rope_nested(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """`partial_rotary_factor` inside rope_parameters or rope_scaling is not
    read either: the attention rotates the whole head
    (models/dflash.py@f4d8ec6e:112-125). The top-level key is an unread flag."""
    for field in ("rope_parameters", "rope_scaling"):
        block = config.get(field)
        factor = block.get("partial_rotary_factor") if isinstance(block, Mapping) else None
        if factor is not None and factor != 1:
            return [_finding(config_file, f"{field}.partial_rotary_factor is {factor!r}, but the GQA DFlash/DSpark "
                             "attention rotates the whole head", Source(_GQA, "112-125", MAIN),
                             "partial_rotary_factor")]
    return []


# model_types TokenSpeed parses with its own Qwen config classes
# (utils/hf_transformers_utils.py@f4d8ec6e:69-72): they keep the
# rope_parameters a config.json writes as it is (configs/qwen3_config.py@
# f4d8ec6e:219, 240); transformers' own classes (llama, mistral) fill
# rope_theta into them from the top level.
_KEEPS_FILE_ROPE_PARAMETERS = ("qwen2", "qwen3")


def gqa_rope_parameters_need_theta(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The GQA attention takes its base from `rope_parameters["rope_theta"]`
    whenever the config has rope_parameters (models/dflash.py@f4d8ec6e:
    112-118), and its scaling from them too. The engine's Qwen config
    classes keep the rope_parameters config.json writes as they are (run
    on the pinned transformers 5.12): without rope_theta the model's
    construction fails whatever the top level says; beside a different
    rope_scaling, rope_parameters are served and rope_scaling is not."""
    parameters = config.get("rope_parameters")
    if parameters is None or config.get("model_type") not in _KEEPS_FILE_ROPE_PARAMETERS:
        return []
    scaling = config.get("rope_scaling")
    if isinstance(parameters, Mapping) and _reads_as_float(parameters.get("rope_theta")):
        if isinstance(scaling, Mapping) and any(
                scaling.get(key) != parameters.get(key) for key in set(scaling) - {"rope_theta"}):
            return [_finding(config_file, "rope_scaling and rope_parameters describe different RoPE; the GQA "
                             "DFlash/DSpark attention serves rope_parameters and never reads rope_scaling",
                             Source(_GQA, "112-118", MAIN), "rope_scaling",
                             "Keep the one the draft was trained with, in rope_parameters.")]
        return []
    what = ("has no rope_theta" if isinstance(parameters, Mapping) and "rope_theta" not in parameters
            else f"rope_theta is {parameters.get('rope_theta')!r}" if isinstance(parameters, Mapping)
            else f"is {type(parameters).__name__}, not an object")
    return [Finding(
        "ROP001",
        f"{config_file}: rope_parameters {what}; the GQA DFlash/DSpark attention reads its base only from "
        "rope_parameters['rope_theta'] (a top-level rope_theta is not read there), so the engine refuses the draft "
        f"({Source(_GQA, '112-118', MAIN).cite()}). Write rope_theta inside rope_parameters, or drop "
        "rope_parameters and keep the top-level rope_theta.",
        file=config_file,
        detail={"field": "rope_parameters.rope_theta", "source": Source(_GQA, "112-118", MAIN).cite()},
    )]


def llama_eagle3_rope_theta_at_the_top(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The Llama EAGLE-3 layer's base is `get_rope_theta(config)`
    (models/llama.py@f4d8ec6e:154), which reads `config.rope_theta` first
    (configs/utils.py@f4d8ec6e:35-39). On TokenSpeed's Qwen
    config classes that is the top-level value, 10000 when absent
    (configs/qwen3_config.py@f4d8ec6e:188, 218): a rope_theta only in
    rope_parameters is not served. (`config` is the engine's view: the
    default is filled in already.)"""
    parameters = config.get("rope_parameters")
    if config.get("model_type") not in _KEEPS_FILE_ROPE_PARAMETERS or not isinstance(parameters, Mapping):
        return []
    declared, served = parameters.get("rope_theta"), config.get("rope_theta")
    if not _reads_as_float(declared) or not _reads_as_float(served) or float(declared) == float(served):
        return []
    return [_finding(config_file, f"rope_parameters.rope_theta is {declared!r} but the Llama EAGLE-3 layer takes "
                     f"its base from the top-level rope_theta, {served!r} (10000 when absent)",
                     Source(_LLAMA, "154", MAIN), "rope_theta",
                     "Write the draft's rope_theta at the top level.")]


def eagle3_flags_only_in_eagle_config(model: str, lines: str):
    """The EAGLE-3 models read `norm_output`, `fc_norm` and `norm_before_fc`
    from the top level of the config only (`getattr(config, ...)`): one set
    only inside `eagle_config` is not served."""

    def rule(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        nested = config.get("eagle_config")
        if not isinstance(nested, Mapping):
            return []
        unread = [name for name in ("norm_output", "fc_norm", "norm_before_fc")
                  if nested.get(name) and not config.get(name)]
        if not unread:
            return []
        return [_finding(config_file, f"eagle_config sets {', '.join(unread)} but the engine reads "
                         f"{'it' if len(unread) == 1 else 'them'} at the top level only, where "
                         f"{'it is' if len(unread) == 1 else 'they are'} off", Source(model, lines, MAIN),
                         unread[0], "Set the flag at the top level of config.json.")]

    return rule


def _reads_as_float(value: Any) -> bool:
    """Whether Python's float() takes `value`, as the engine calls it."""
    if isinstance(value, (bool, int, float)):
        return True
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return False
        return True
    return False


def _tap_count(config: Mapping[str, Any]) -> int | None:
    ids, _ = target_capture_ids(config)
    if ids is None:
        return DEFAULT_TAP_COUNT
    return len(ids) if isinstance(ids, list) else None


def eagle3_fc_skipped_when_widths_meet(model: str, lines: str):
    """The EAGLE-3 forward applies input_norm, fc_norm and fc only when the
    captured state is wider than the embedding (`if hidden_states.size(-1)
    != embeds.size(-1)`): with taps x target width equal to hidden_size
    (one tap of the draft's own width) the raw target state enters the
    layer and fc is never applied."""

    def rule(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        hidden = config.get("hidden_size")
        width = config.get("target_hidden_size") or hidden
        count = _tap_count(config)
        if not (is_int(hidden) and is_int(width) and is_int(count)) or count * width != hidden:
            return []
        return [_finding(config_file, f"{count} tap(s) x {width} = hidden_size {hidden}: the engine's forward then "
                         "takes the captured state for already projected and never applies fc (nor fc_norm or "
                         "input_norm)", Source(model, lines, MAIN), "fc",
                         "Retrain on more taps (their concatenation must be wider than hidden_size).")]

    return rule


def mla_fc_norm_width(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The MLA EAGLE-3 model builds each fc_norm at hidden_size but applies
    it to a tap of target_hidden_size (models/deepseek_v3.py@f4d8ec6e:
    2166-2175, 2205-2222): with the two widths apart no fc_norm draft is
    servable, whatever width its weights have."""
    hidden, width = config.get("hidden_size"), config.get("target_hidden_size")
    if not config.get("fc_norm") or not (is_int(hidden) and is_int(width)) or hidden == width:
        return []
    return [_finding(config_file, f"fc_norm with target_hidden_size {width} != hidden_size {hidden}: the MLA "
                     f"EAGLE-3 model builds fc_norm {hidden} wide and applies it to {width}-wide taps, which "
                     "fails to load or at the first request", Source(_DS3, "2166-2175, 2205-2222", MAIN),
                     "fc_norm", "Retrain without fc_norm, or with a draft as wide as the target.")]


def llama_no_sliding_window(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The Llama EAGLE-3 attention has no sliding window
    (models/llama.py@f4d8ec6e:140-200); a draft trained with one (a Qwen3
    speculators layer) is served with full attention."""
    types = config.get("layer_types")
    sliding = isinstance(types, list) and "sliding_attention" in types
    if not sliding and not (config.get("use_sliding_window") and config.get("sliding_window")):
        return []
    return [_finding(config_file, "sliding-window layers are declared, but the Llama EAGLE-3 attention attends "
                     "over the whole context", Source(_LLAMA, "140-200", MAIN), "sliding_window")]


MLA_LIMITS = (mla_rope_only_yarn, mla_fc_norm_width, eagle3_fc_skipped_when_widths_meet(_DS3, "2205"),
              eagle3_flags_only_in_eagle_config(_DS3, "2166-2186"))
LLAMA_EAGLE3_LIMITS = (llama_no_sliding_window, eagle3_fc_skipped_when_widths_meet(_LE3, "539"),
                       llama_eagle3_rope_theta_at_the_top, eagle3_flags_only_in_eagle_config(_LE3, "480-509"))
def k3_fc_norm_only_in_dflash_config(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The K3 config class takes `fc_norm` as a top-level argument
    (configs/kimi_k3_dspark_config.py@4b9766f6:78, 112) and the model
    builds the per-tap norms from it alone (models/kimi_k3_dspark.py@
    4b9766f6:319-328): one set only inside `dflash_config` is not served,
    and the draft runs without fc_norm (shipped fc_norm weights are then
    FCN002)."""
    nested = config.get("dflash_config")
    if not isinstance(nested, Mapping) or not nested.get("fc_norm") or config.get("fc_norm"):
        return []
    unread = _finding(config_file, "dflash_config sets fc_norm but the engine reads it at the top level only, "
                      "where it is off, and serves the draft without its per-tap norms",
                      Source(_K3_CONFIG, "78, 112", PR1031), "fc_norm",
                      "Set fc_norm at the top level of config.json (and ship the fc_norm weights).")
    if "fc_norm" in config:
        # The top level says off, and it is the one served: the two flags
        # disagree, but what loads is what the top level declares (shipped
        # fc_norm weights would be FCN002).
        return [dataclasses.replace(unread, severity=Severity.WARNING, message=unread.message.replace(
            "where it is off", f"where it is {config['fc_norm']!r}, as served"))]
    return [unread]


K3_LIMITS = (k3_rope_only_yarn, k3_fc_norm_only_in_dflash_config)
GQA_LIMITS = (gqa_partial_rope_nested, gqa_rope_parameters_need_theta)
