"""SGLang 0.5.23's loader for EAGLE-3 Llama drafts (`LlamaForCausalLMEagle3`,
sglang/srt/models/llama_eagle3.py): fc built for target_hidden_size per tap,
fc_norm (or the legacy `use_aux_norm` and `aux_norm_*` names),
norm_before_fc (eagle_config's first) and norm_output honoured, `d2t` read
as the hot-token map, every name without a destination dropped without a
word, every parameter never loaded served uninitialised."""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.engines.base import (
    DROPPED,
    FIRST_PRESENT,
    FIRST_TRUTHY,
    HOT_TOKEN_MAP,
    TARGET_UNLESS_OWN_HEAD_AND_WIDTHS_DIFFER,
    FamilyLoader,
    FeatureSupport,
    FusedParameter,
    SkipRule,
    TapPaths,
    TapReading,
    VocabHandling,
)
from dspark.schema.engines.sglang.common import (
    EAGLE3_NUMBERING,
    EAGLE3_TARGET_CLASSES_SOURCE,
    EAGLE3_TARGET_SOURCE,
    EAGLE3_TARGET_TAPS,
    EAGLE_WORKER,
    LLAMA,
    LLAMA_DEFAULTS,
    LLAMA_EAGLE3,
    NORM_BEFORE_RESIDUAL,
    QWEN3_DEFAULTS,
    SPEC_AUX,
    at,
    engine_finding,
    refused,
    silu_only,
)
from dspark.schema.engines.sglang.taps import EAGLE3_TARGET_CAPTURE, eagle3_tap_rules
from dspark.schema.families.eagle3_common import DEFAULT_TAP_COUNT, DEFAULT_TAPS_TEXT, TAP_IDS_FIELD, default_taps
from dspark.schema.findings import Finding

_LE3 = LLAMA_EAGLE3

# The draft sizes fc from `num_aux_hidden_states` when set, else from the
# length of eagle_config's list when it is non-empty, else 3; the top-level
# list is never read (models/llama_eagle3.py:156-161).
TAPS = TapReading(
    target=EAGLE3_TARGET_TAPS,
    draft=TapPaths(paths=(f"eagle_config.{TAP_IDS_FIELD}",), pick=FIRST_TRUTHY),
    count_fields=("num_aux_hidden_states",),
    numbering=EAGLE3_NUMBERING,
    source=EAGLE3_TARGET_SOURCE,
    defaults=default_taps,
    defaults_text=DEFAULT_TAPS_TEXT,
    default_count=DEFAULT_TAP_COUNT,
)


def _target_width(config: Mapping[str, Any]) -> Any:
    """`config.target_hidden_size` when the attribute exists (null too),
    else hidden_size (models/llama_eagle3.py:151-154)."""
    return config["target_hidden_size"] if "target_hidden_size" in config else config.get("hidden_size")


def draft_vocab_size_needed(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """Without tied embeddings the model reads `config.draft_vocab_size` as
    an attribute (models/llama_eagle3.py:303-308); transformers' config
    classes have no such field, so a config.json without the key raises
    AttributeError at startup. (null is read: the target's head is served.)"""
    if "draft_vocab_size" in config or config.get("tie_word_embeddings"):
        return []
    return [refused(config_file, "draft_vocab_size", "draft_vocab_size is absent and tie_word_embeddings is "
                    "false: LlamaForCausalLMEagle3 reads config.draft_vocab_size, which the config class does not "
                    "define (AttributeError)", at("303-308", _LE3, "LlamaForCausalLMEagle3.__init__"),
                    "Set draft_vocab_size to the head's row count, or to null to serve the target's head.")]


def target_width_readable(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """fc is `target_hidden_size * taps` wide whenever the key is present:
    null makes the product fail at startup (models/llama_eagle3.py:151-167)."""
    if "target_hidden_size" not in config or config["target_hidden_size"] is not None:
        return []
    return [refused(config_file, "target_hidden_size", "target_hidden_size is null: LlamaForCausalLMEagle3 "
                    "builds fc as target_hidden_size x taps whenever the key is present (TypeError)",
                    at("151-167", _LE3,
                       "LlamaModel.__init__"), "Remove the key, or set it to the target's hidden_size.")]


def qkv_without_bias(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The first layer's qkv_proj is rebuilt without a bias
    (models/llama_eagle3.py:66-75) whatever attention_bias says: a draft
    trained with q/k/v biases is served without them (o_proj keeps its)."""
    if not (config.get("attention_bias") or config.get("bias")):
        return []
    return [engine_finding(config_file, "attention_bias is set, but LlamaForCausalLMEagle3 rebuilds the first "
                           "layer's qkv_proj without a bias: the q/k/v biases the draft was trained with are dropped",
                           at("66-75", _LE3, "LlamaDecoderLayer.__init__"), "attention_bias")]


LIMITS = (
    qkv_without_bias,
    draft_vocab_size_needed,
    target_width_readable,
    silu_only("LlamaForCausalLMEagle3", at("116-119", LLAMA, "LlamaMLP.__init__")),
    *eagle3_tap_rules(TAPS, "LlamaForCausalLMEagle3", at("156-161", _LE3,
                                                         "LlamaModel.__init__"), at("237-247", _LE3,
                                                                                                     "LlamaModel.forward")),
)

LOADER = FamilyLoader(
    family="eagle3_llama",
    model_class="LlamaForCausalLMEagle3",
    # Any transformers config with Llama's fields builds it (LlamaConfig,
    # Qwen2/Qwen3Config); SGLang registers no config class of its own for
    # them (utils/hf_transformers/config.py:336-380), and nothing on the load
    # path reads model_type: SGLang's own loader fills every parameter of the
    # draft under each of these. DeepseekV2Config is not one: it ignores
    # head_dim and the q/k/v weights no longer fit (a load error).
    model_types=("llama", "qwen2", "qwen3", "mistral", "qwen3_moe", "deepseek_v3", "kimi_k2", "gemma"),
    # load_weights (models/llama_eagle3.py:325-378): any name holding `d2t`
    # is the hot-token map and any holding `t2d` is skipped (350-356); the
    # legacy names midlayer, aux_norm_low/mid/high become layers.0 and
    # fc_norm.0/1/2 wherever they sit (337-348); q/k/v and gate/up are
    # stacked; then the name is looked up as it is, else with `model.`
    # added. So a stored `model.` prefix finds the body, `layers.0.` and
    # `midlayer.` are the same layer, and `model.lm_head.*` finds nothing.
    # (Names below are the family's: `midlayer.` for layer 0.)
    name_rewrites=((r"^.*d2t.*$", "d2t"), (r"^.*t2d.*$", "t2d"), (r"aux_norm_low", "fc_norm.0"),
                   (r"aux_norm_mid", "fc_norm.1"), (r"aux_norm_high", "fc_norm.2"),
                   (r"^model\.(?!lm_head\.)", ""), (r"^layers\.0\.", "midlayer.")),
    skips=(SkipRule(r"^t2d$", "the target-to-draft table is never read", at("355-356", _LE3,
                                                                            "LlamaForCausalLMEagle3.load_weights")),
           SkipRule(r"rotary_emb\.inv_freq", "a buffer the rotary embedding recomputes; dropped",
                    at("370-378", _LE3, "LlamaForCausalLMEagle3.load_weights"))),
    fused=(
        FusedParameter(
            "midlayer.self_attn.qkv_proj.weight",
            ("midlayer.self_attn.q_proj.weight", "midlayer.self_attn.k_proj.weight",
             "midlayer.self_attn.v_proj.weight"),
            # A pre-stacked qkv_proj holds no `.q_proj` and is loaded whole.
            fused_accepted=True, partial_passes=True, source=at("326-369", _LE3, "LlamaForCausalLMEagle3.load_weights"),
        ),
        FusedParameter(
            "midlayer.mlp.gate_up_proj.weight",
            ("midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight"),
            fused_accepted=True, partial_passes=True, source=at("326-369", _LE3, "LlamaForCausalLMEagle3.load_weights"),
        ),
    ),
    # Neither branch of load_weights has an else: a name found under neither
    # spelling is dropped without a word (358-378), and nothing checks that
    # every parameter was loaded (model_loader/loader.py:1028-1066).
    unexpected="drops",
    missing="uninitialised",
    features={
        "fc_norm": FeatureSupport(supported=True, source=at("184-196, 241-246 (LlamaModel.forward)",
                                                            _LE3, "LlamaModel.__init__")),
        "norm_before_fc": FeatureSupport(supported=True, source=at("169-182, 239-240 (LlamaModel.forward)",
                                                                   _LE3, "LlamaModel.__init__")),
        # Its meaning: feed the post-norm state back; the logits are normed
        # either way (converters/layouts/norm_output.py judges who trained it).
        "norm_output": FeatureSupport(supported=True, source=at("207, 264-269", _LE3, "LlamaModel")),
    },
    # fc_norm: `config.fc_norm or config.use_aux_norm`; norm_before_fc:
    # `eagle_config.get("norm_before_fc", config.norm_before_fc)`
    # (models/llama_eagle3.py:169-187).
    flag_sources={"fc_norm": TapPaths(("fc_norm", "use_aux_norm"), pick=FIRST_TRUTHY),
                  "norm_before_fc": TapPaths(("eagle_config.norm_before_fc", "norm_before_fc"), pick=FIRST_PRESENT)},
    unread_flags={"norm_before_residual": NORM_BEFORE_RESIDUAL},
    # fc, each fc_norm and input_norm are built from target_hidden_size
    # when the key exists (models/llama_eagle3.py:151-196).
    dims={"S": TAPS.draft_count, "th": _target_width, "fcn": _target_width},
    **EAGLE3_TARGET_CAPTURE,
    config_limits=LIMITS,
    stream=None,
    taps=TAPS,
    # d2t is the hot-token map, never checked (`d2t + arange`); t2d is
    # skipped (models/llama_eagle3.py:350-356). With draft_vocab_size null
    # the worker attaches the target's embedding and head; otherwise the
    # target's embedding unless target_hidden_size differs from hidden_size
    # (speculative/eagle_worker_v2.py:336-369; models/llama.py:895-916).
    vocab=VocabHandling(d2t=HOT_TOKEN_MAP, t2d=DROPPED, embedding=TARGET_UNLESS_OWN_HEAD_AND_WIDTHS_DIFFER,
                        source=at("336-369 (init_lm_head); models/llama.py:895-916", EAGLE_WORKER,
                                  "EagleDraftWorker.init_lm_head")),
    # `config.draft_vocab_size is None` -> load_lm_head_from_target, the
    # head as wide as the vocabulary, replaced by the target's
    # (models/llama_eagle3.py:300-314).
    head_from_target="draft_vocab_size_unset",
    sources={
        "target classes": EAGLE3_TARGET_CLASSES_SOURCE,
        "load_weights": at("325-378", _LE3, "LlamaForCausalLMEagle3.load_weights"),
        "taps (draft)": at("156-161", _LE3, "LlamaModel.__init__"),
        "taps (target)": at("185-196", SPEC_AUX, "_resolve_eagle_aux_hidden_state"),
        "taps vs target": at("485-494, 929-941 (LlamaForCausalLM.set_eagle3_layers_to_capture)",
                             LLAMA, "LlamaModel.forward"),
        "fc width": at("151-167", _LE3, "LlamaModel.__init__"),
        "lm_head": at("300-314", _LE3, "LlamaForCausalLMEagle3.__init__"),
        "d2t": at("350-353", _LE3, "LlamaForCausalLMEagle3.load_weights"),
        "embedding": at("336-369", EAGLE_WORKER, "EagleDraftWorker.init_lm_head"),
        "layers": at("46-86, 198-204 (LlamaModel.__init__)", _LE3, "LlamaDecoderLayer"),
        "head_dim": at("195-200", LLAMA, "LlamaAttention.__init__"),
    },
    config_defaults={"llama": LLAMA_DEFAULTS, "qwen3": QWEN3_DEFAULTS},
)
