"""TokenSpeed's loader for EAGLE-3 Llama drafts (`LlamaForCausalLMEagle3`),
at main (f4d8ec6e): fc built for hidden_size per tap, fc_norm and
norm_before_fc honoured, `d2t` read as the hot-token map, unknown names
dropped without a word."""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.engines.base import (
    DROPPED,
    FIRST_PRESENT,
    HOT_TOKEN_MAP,
    FamilyLoader,
    FeatureSupport,
    FusedParameter,
    SkipRule,
    Source,
    TapPaths,
    TapReading,
    TARGET_UNLESS_WIDTHS_DIFFER,
    VocabHandling,
)
from dspark.schema.engines.tokenspeed.common import (
    TARGET_CAPTURE,
    TARGETS_WITHOUT_CAPTURE_SOURCE,
    CAUSAL_LM,
    EAGLE3_LLAMA_MODEL,
    EAGLE3_T2D,
    EAGLE3_TAPS_OUTSIDE,
    EAGLE3_TARGET_SOURCE,
    EAGLE3_TARGET_TAPS,
    FACTORY,
    KEEPS_FILE_ROPE_PARAMETERS,
    LLAMA_MODEL,
    MAIN,
    NORM_BEFORE_RESIDUAL,
    NUMBERING,
    QWEN3_DEFAULTS,
    at_main,
    eagle3_fc_skipped_when_widths_meet,
    eagle3_flags_only_in_eagle_config,
    engine_finding,
    reads_as_float,
)
from dspark.schema.families.eagle3_common import (
    DEFAULT_TAP_COUNT,
    DEFAULT_TAPS_TEXT,
    TAP_IDS_FIELD,
    default_taps,
    one_layer,
    tap_agreement_rule,
)
from dspark.schema.findings import Finding

_LE3 = EAGLE3_LLAMA_MODEL

# transformers' LlamaConfig defaults: what the config class fills in for a
# field the config.json leaves out (read off transformers 5.12.0, the
# version TokenSpeed pins: python/pyproject.toml@f4d8ec6e:83).
_LLAMA_DEFAULTS = {
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
    "num_attention_heads": 32, "rms_norm_eps": 1e-6,
}

# The Llama draft counts the top-level list only, 3 when absent
# (models/llama_eagle3.py@f4d8ec6e:462-466); `null` makes len() raise.
TAPS = TapReading(
    target=EAGLE3_TARGET_TAPS,
    draft=TapPaths(paths=(TAP_IDS_FIELD,), pick=FIRST_PRESENT),
    numbering=NUMBERING,
    source=EAGLE3_TARGET_SOURCE,
    defaults=default_taps,
    defaults_text=DEFAULT_TAPS_TEXT,
    default_count=DEFAULT_TAP_COUNT,
)


def llama_eagle3_rope_theta_at_the_top(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The Llama EAGLE-3 layer's base is `get_rope_theta(config)`
    (models/llama.py@f4d8ec6e:154), which reads `config.rope_theta` first
    (configs/utils.py@f4d8ec6e:35-39). On TokenSpeed's Qwen
    config classes that is the top-level value, 10000 when absent
    (configs/qwen3_config.py@f4d8ec6e:188, 218): a rope_theta only in
    rope_parameters is not served. (`config` is the engine's view: the
    default is filled in already.)"""
    parameters = config.get("rope_parameters")
    if config.get("model_type") not in KEEPS_FILE_ROPE_PARAMETERS or not isinstance(parameters, Mapping):
        return []
    declared, served = parameters.get("rope_theta"), config.get("rope_theta")
    if not reads_as_float(declared) or not reads_as_float(served) or float(declared) == float(served):
        return []
    return [engine_finding(config_file, f"rope_parameters.rope_theta is {declared!r} but the Llama EAGLE-3 layer "
                           f"takes its base from the top-level rope_theta, {served!r} (10000 when absent)",
                           Source(LLAMA_MODEL, "154", MAIN,
                                  qualname="LlamaAttention.__init__.rope_theta"), "rope_theta",
                           "Write the draft's rope_theta at the top level.")]


def llama_no_sliding_window(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The Llama EAGLE-3 attention has no sliding window
    (models/llama.py@f4d8ec6e:140-200); a draft trained with one (a Qwen3
    speculators layer) is served with full attention."""
    types = config.get("layer_types")
    sliding = isinstance(types, list) and "sliding_attention" in types
    if not sliding and not (config.get("use_sliding_window") and config.get("sliding_window")):
        return []
    return [engine_finding(config_file, "sliding-window layers are declared, but the Llama EAGLE-3 attention "
                           "attends over the whole context", Source(LLAMA_MODEL, "140-200", MAIN,
                                                                    qualname="LlamaAttention"), "sliding_window")]


def fc_width_is_hidden_size(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The Llama model builds fc for hidden_size per tap and reads
    target_hidden_size only to skip sharing the target's embedding and head
    (models/llama_eagle3.py@f4d8ec6e:468-470, 727-733): a draft trained on
    wider taps cannot be served by this class."""
    hidden, target = config.get("hidden_size"), config.get("target_hidden_size")
    if "target_hidden_size" not in config or target == hidden or target is None:
        # null only stops the sharing (`hasattr` and `!=` at
        # models/llama_eagle3.py@f4d8ec6e:729-733); the vocab rules then
        # require the draft's own embedding and head (rules/vocab.py).
        return []
    return [Finding(
        "CFG003",
        f"{config_file}: target_hidden_size = {target!r} but hidden_size = {hidden!r}. LlamaForCausalLMEagle3 "
        "builds fc for hidden_size per tap (captured taps of another width fail at the first request) and, "
        "with the two different, never shares the target's embedding or head, so any it needs and the "
        "draft does not ship stay uninitialised. Serve it with a model that reads target_hidden_size, or "
        "drop the field if the widths are equal.",
        file=config_file,
        detail={"field": "target_hidden_size", "validator": "engine",
                "source": "models/llama_eagle3.py@f4d8ec6e:468-470, 727-733"},
    )]


LIMITS = (one_layer("LlamaForCausalLMEagle3", "models/llama_eagle3.py@f4d8ec6e:612-613"),
          tap_agreement_rule(lambda c: (*TAPS.draft_ids(c), TAPS.draft_count(c)),
                             "the Llama draft counts the top-level list only"),
          fc_width_is_hidden_size,
          llama_no_sliding_window,
          eagle3_fc_skipped_when_widths_meet(_LE3, "539", EAGLE3_TARGET_TAPS, "Eagle3LlamaModel.forward"),
          llama_eagle3_rope_theta_at_the_top,
          eagle3_flags_only_in_eagle_config(_LE3, "480-509", "Eagle3LlamaModel.__init__"))

LOADER = FamilyLoader(
    family="eagle3_llama",
    **TARGET_CAPTURE,
    model_class="LlamaForCausalLMEagle3",
    # hf_transformers_utils.get_config: TokenSpeed's own Qwen2/Qwen3 config
    # classes, transformers' AutoConfig for llama (utils/hf_transformers_utils.py@f4d8ec6e:69-86, 337-347).
    model_types=("llama", "qwen3", "qwen2"),
    # load_weights maps a leading `layers.0.` to `midlayer.`, then looks the
    # name up as it is or with `model.` added: a stored `model.` prefix
    # matches body parameters directly, but `model.layers.0.*` (never
    # mapped) and `model.lm_head.*` (the head is not under `model.`) match
    # nothing and are dropped (models/llama_eagle3.py@f4d8ec6e:675-719).
    # Any name holding `d2t` is the hot-token map, any holding `t2d` is
    # skipped (models/llama_eagle3.py@f4d8ec6e:691-698).
    name_rewrites=((r"^.*d2t.*$", "d2t"), (r"^.*t2d.*$", "t2d"), (r"^layers\.0\.", "midlayer."),
                   (r"^model\.(?!layers\.0\.|lm_head\.)", "")),
    # inv_freq is a buffer the rotary embedding recomputes: the loader finds
    # no parameter for it and drops it, which costs nothing.
    skips=(EAGLE3_T2D, SkipRule(r"rotary_emb\.inv_freq", "recomputed by the rotary embedding; dropped",
                                at_main("705-719", _LE3, qualname="LlamaForCausalLMEagle3.load_weights"))),
    fused=(
        FusedParameter(
            "midlayer.self_attn.qkv_proj.weight",
            ("midlayer.self_attn.q_proj.weight", "midlayer.self_attn.k_proj.weight",
             "midlayer.self_attn.v_proj.weight"),
            # A pre-stacked qkv_proj holds none of the `.q_proj` substrings and
            # is split by the configured sizes (layers/linear.py@f4d8ec6e:927-996).
            fused_accepted=True, partial_passes=True, source=at_main("678-711", _LE3,
                                                                     qualname="LlamaForCausalLMEagle3.load_weights"),
        ),
        FusedParameter(
            "midlayer.mlp.gate_up_proj.weight",
            ("midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight"),
            fused_accepted=True, partial_passes=True, source=at_main("678-711", _LE3,
                                                                     qualname="LlamaForCausalLMEagle3.load_weights"),
        ),
    ),
    unexpected="drops",
    missing="uninitialised",
    features={
        "fc_norm": FeatureSupport(supported=True, source=at_main("489-498", _LE3, "Eagle3LlamaModel.__init__")),
        "norm_before_fc": FeatureSupport(supported=True, source=at_main("480-488", _LE3, "Eagle3LlamaModel.__init__")),
        # Its meaning: feed the post-norm state back; the logits are normed
        # either way (converters/layouts/norm_output.py judges who trained it).
        # Read in the released wheels (0.1.0: 459, 531-532, the same code).
        "norm_output": FeatureSupport(supported=True, source=Source(
            "tokenspeed/runtime/models/llama_eagle3.py", "527-539, 460 (Eagle3LlamaModel.__init__)",
            "tokenspeed==0.1.1", "Eagle3LlamaModel.forward")),
    },
    unread_flags={
        "norm_before_residual": NORM_BEFORE_RESIDUAL,
        # LlamaMLP takes hidden_act and builds SiluAndMul whatever it says
        # (models/llama_eagle3.py@f4d8ec6e:150-188, called with it at 268).
        "hidden_act": FeatureSupport(
            supported=False,
            source=at_main("150-188, 268 (Eagle3DecoderLayer.resolve_mlp)", _LE3, "LlamaMLP"),
            when_unsupported="the EAGLE-3 MLP is always SiLU-gated: a draft trained with another activation "
            "is served with SiLU",
            fixed_value="silu",
            # transformers' ACT2FN maps "swish" to the same SiLU.
            same_as_fixed=("swish",),
        ),
    },
    tap_low=-1,
    tap_high_offset=-2,
    # id N captures the residual after the last layer
    # (models/base/transformer_model.py@f4d8ec6e:251-264); N-1 is never captured.
    tap_final_residual=True,
    config_limits=LIMITS,
    stream=None,
    taps=TAPS,
    # fc is built for hidden_size per tap, whatever target_hidden_size says
    # (models/llama_eagle3.py@f4d8ec6e:468-478), for the taps the draft
    # counts (462-466).
    dims={"S": TAPS.draft_count, "th": "hidden_size"},
    # ...so each tap must be hidden_size wide: the target's hidden_size is
    # compared with it (models/llama_eagle3.py@f4d8ec6e:468-470).
    target_width_field="hidden_size",
    # d2t is the hot-token map, never checked (`hot = d2t + arange`); t2d
    # is skipped; set_embed_and_head replaces the draft's embedding with the
    # target's unless target_hidden_size differs from hidden_size
    # (models/llama_eagle3.py@f4d8ec6e:691-698, 727-751).
    vocab=VocabHandling(d2t=HOT_TOKEN_MAP, t2d=DROPPED, embedding=TARGET_UNLESS_WIDTHS_DIFFER,
                        source=at_main("691-698, 727-751", _LE3, qualname="LlamaForCausalLMEagle3")),
    sources={
        "targets without capture": TARGETS_WITHOUT_CAPTURE_SOURCE,
        "load_weights": at_main("675-719", _LE3, qualname="LlamaForCausalLMEagle3.load_weights"),
        "one layer": at_main("612-613", _LE3, "LlamaForCausalLMEagle3.__init__"),
        "taps (draft)": at_main("462-466", _LE3, "Eagle3LlamaModel.__init__"),
        "taps (target)": at_main("44-75, 95-102 (_wire_draft_to_target_model)",
                                 FACTORY, qualname="_eagle_aux_layer_ids"),
        "taps vs target": at_main("133-144", CAUSAL_LM, "BaseCausalLM.set_eagle3_layers_to_capture"),
        "fc width": at_main("468-478", _LE3, "Eagle3LlamaModel.__init__"),
        "lm_head": at_main("617-631, 752-754 (LlamaForCausalLMEagle3.set_embed_and_head)", _LE3,
                           "LlamaForCausalLMEagle3.__init__"),
        "d2t": at_main("691-695", _LE3, qualname="LlamaForCausalLMEagle3.load_weights"),
        "embedding": at_main("727-751", _LE3, qualname="LlamaForCausalLMEagle3.set_embed_and_head"),
        "head_dim": at_main("148-150", LLAMA_MODEL, qualname="LlamaAttention.__init__"),
    },
    config_defaults={"llama": _LLAMA_DEFAULTS, "qwen3": QWEN3_DEFAULTS},
    # `getattr(config, "draft_vocab_size", None) is None` -> the target's
    # head replaces whatever was loaded (models/llama_eagle3.py@f4d8ec6e:620-622, 752-754).
    head_from_target="draft_vocab_size_null",
    taps_outside_range=EAGLE3_TAPS_OUTSIDE,
)
