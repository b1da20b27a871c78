"""SGLang 0.5.23's loader for GQA DFlash and dense DSpark drafts
(`DFlashDraftModel`, sglang/srt/models/dflash.py; `DSparkDraftModel` and its
Qwen3/Ling/LFM2 names, models/dspark.py, models/lfm2_dspark.py): `fc` is
taps x the draft's own hidden_size, no fc_norm, q/k norms always, the
stream the target captures whatever the draft declares, unknown names
dropped without a word (Markov-head names refused)."""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.engines.base import (
    FIRST_PRESENT,
    FamilyLoader,
    FeatureSupport,
    FusedParameter,
    SkipRule,
    Source,
    StreamResolution,
    TapPaths,
    TapReading,
    served_wrong,
)
from dspark.schema.engines.sglang.common import (
    DFLASH_MODEL,
    DFLASH_NUMBERING,
    DFLASH_TARGET_CLASSES,
    DFLASH_TARGET_SOURCE,
    DFLASH_UTILS,
    DFLASH_VARIANT,
    DSPARK_ONLY_TARGET_CLASSES,
    DSPARK_CONFIG,
    DSPARK_MODEL,
    KIMI_K3,
    QWEN3,
    QWEN3_DEFAULTS,
    SPEC_AUX,
    NON_CAPTURING_TARGETS,
    at,
    refused,
)
from dspark.schema.families.base import is_int
from dspark.schema.findings import Finding

_DF = DFLASH_MODEL

# parse_dflash_draft_config takes each field from dflash_config when the key
# is there, else from the top level (speculative/dflash_utils.py:588-660);
# the same reading feeds the draft's fc and the target's capture
# (model_runner_components/spec_aux_hidden_state.py:210-250). (A null nested
# list is read as "no list" there, where the top level is not consulted.)
_TAP_PATHS = TapPaths(paths=("dflash_config.target_layer_ids", "target_layer_ids"), pick=FIRST_PRESENT)

# Without a list the draft builds one tap per draft layer and the target
# captures build_target_layer_ids(N, draft layers), spread over [1, N-3]
# (speculative/dflash_utils.py:348-385; models/dflash.py:766-776).
TAPS = TapReading(
    target=_TAP_PATHS,
    numbering=DFLASH_NUMBERING,
    source=at("588-660", DFLASH_UTILS, "parse_dflash_draft_config"),
    count_fallback_field="num_hidden_layers",
)

_DSPARK_ARCHITECTURES = ("DSparkDraftModel", "Qwen3DSparkModel", "LingDSparkModel", "Lfm2DSparkDraftModel")
_MARKOV_HEAD_TYPES = ("vanilla", "gated", "rnn")


def _is_dspark(config: Mapping[str, Any]) -> bool:
    architectures = config.get("architectures")
    return isinstance(architectures, list) and bool(architectures) and architectures[0] in _DSPARK_ARCHITECTURES


# Where parse_dspark_draft_config looks for a DSpark field, first wins:
# {**dflash_config, **dspark_config} (dspark_config.py:194-212).
DSPARK_SECTIONS = ("dspark_config", "dflash_config")


def _dspark_field(config: Mapping[str, Any], key: str, default: Any = None,
                  sections: tuple[str, ...] = DSPARK_SECTIONS) -> tuple[Any, str]:
    """A DSpark field as parse_dspark_draft_config reads it: the `dspark_`
    prefixed top-level key, else {**dflash_config, **dspark_config}, else
    text_config, else the top level (speculative/dspark_components/
    dspark_config.py:214-296)."""
    prefixed = {"markov_rank": "dspark_markov_rank", "markov_head_type": "dspark_markov_head_type",
                "mask_token_id": "dspark_noise_token_id"}.get(key)
    if prefixed and config.get(prefixed) is not None:
        return config[prefixed], prefixed
    for section in sections:
        nested = config.get(section)
        if isinstance(nested, Mapping) and key in nested:
            return nested[key], f"{section}.{key}"
    text = config.get("text_config")
    if isinstance(text, Mapping) and key in text:
        return text[key], f"text_config.{key}"
    return config.get(key, default), key


def markov_rank(config: Mapping[str, Any]) -> Any:
    """The rank SGLang builds the Markov head with: build_markov_head reads
    the config's top-level attribute only, not the merged DSpark view
    (models/dspark.py:385-391) (None where its int() raises)."""
    raw = config.get("markov_rank", 0)
    try:
        return int(raw) if raw is not None else 0
    except (TypeError, ValueError, OverflowError):
        return None


def taps_within_declared_depth(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The draft model checks its own list against num_target_layers, which
    SGLang reads as the target's depth, and raises at startup for an id
    outside [0, num_target_layers) (models/dflash.py:766-776;
    speculative/dflash_utils.py:556-585)."""
    ids, path = _TAP_PATHS.read(config)
    nested = config.get("dflash_config")
    if isinstance(nested, Mapping) and "num_target_layers" in nested:
        depth, depth_path = nested["num_target_layers"], "dflash_config.num_target_layers"
    else:
        depth, depth_path = config.get("num_target_layers"), "num_target_layers"
    if not (isinstance(ids, list) and is_int(depth)) or not all(is_int(t) for t in ids):
        return []
    outside = [t for t in ids if not 0 <= t < depth]
    if not outside:
        return []
    return [refused(config_file, "num_target_layers", f"{path} holds {outside}, outside [0, {depth_path} = {depth}): "
                    "SGLang reads num_target_layers as the target's layer count, not the number of taps, and "
                    "the draft model raises on any id past it", at("766-776", _DF, "DFlashDraftModel.__init__"),
                    "Set num_target_layers to the target's layer count, or remove it.")]


def activation_rule(supported: tuple[str, ...], source: Source, since: str = ""):
    """The DFlash MLP builds the activations `supported` and raises on
    anything else; `since` says where a later release builds more."""

    def activation_supported(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        act = config.get("hidden_act", "silu")
        if act in supported:
            return []
        return [refused(config_file, "hidden_act", f"hidden_act = {act!r}: the DFlash MLP supports "
                        f"{' and '.join(supported)} only and raises ValueError{since}", source,
                        "Serve it on an engine with that activation, or retrain with silu.")]

    return activation_supported


# The DFlash MLP builds silu or swigluoai and raises on anything else
# (models/dflash.py:492-509).
activation_supported = activation_rule(("silu", "swigluoai"), at("492-509", _DF, "DFlashMLP.__init__"))


def dspark_markov_head_rule(sections: tuple[str, ...] = DSPARK_SECTIONS,
                            required_source: Source = at("265-268", DSPARK_CONFIG,
                                                         "parse_dspark_draft_config"), unread: str = ""):
    """The DSpark Markov-head rule of a release whose config parser reads the
    nested fields from `sections` (the mask token always from dflash_config
    too, through the DFlash parser); `unread` says what it leaves unread."""

    def dspark_markov_head(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        return _markov_head(config, config_file, sections, required_source, unread)

    return dspark_markov_head


def _markov_head(config: Mapping[str, Any], config_file: str, sections: tuple[str, ...],
                 required_source: Source, unread: str) -> list[Finding]:
    """A dense DSpark draft needs markov_rank > 0 and a markov_head_type
    SGLang builds (vanilla, gated, rnn; required with a rank unless a
    `dspark_` prefixed key is set) (models/dspark.py:385-405, 525-528;
    dspark_config.py:244-274), and the DSPARK worker a mask_token_id
    (dspark_config.py:112-121)."""
    if not _is_dspark(config):
        return []
    findings: list[Finding] = []
    raw_rank, rank_path = _dspark_field(config, "markov_rank", 0, sections)
    try:
        rank = int(raw_rank) if raw_rank is not None else 0
    except (TypeError, ValueError, OverflowError):
        rank = None
    source = at("385-405, 525-528", DSPARK_MODEL, "build_markov_head")
    built = markov_rank(config)
    if rank is not None and rank > 0 and (built is None or built <= 0):
        findings.append(refused(config_file, "markov_rank", f"{rank_path} = {raw_rank!r}, but the top-level "
                                f"markov_rank is {config.get('markov_rank')!r}: SGLang's DSpark config reads the "
                                "nested value, while build_markov_head reads the top-level attribute only and "
                                "raises ValueError for a rank <= 0", at("385-391, 537", DSPARK_MODEL,
                                                                        "build_markov_head"),
                                "Write markov_rank (and markov_head_type) at the top level of config.json."))
    elif rank is None or rank <= 0:
        findings.append(refused(config_file, "markov_rank", f"{rank_path} = {raw_rank!r}: a DSpark draft needs "
                                "markov_rank > 0 (its Markov head)", source,
                                "Set markov_rank to the rank the draft was trained with."))
    else:
        raw_type, type_path = _dspark_field(config, "markov_head_type", None, sections)
        prefixed = any(config.get(k) is not None for k in ("dspark_block_size", "dspark_markov_rank",
                                                             "dspark_noise_token_id", "dspark_target_layer_ids"))
        if raw_type is None and not prefixed:
            findings.append(refused(config_file, "markov_head_type", "markov_head_type is absent while "
                                    f"markov_rank = {rank}: SGLang's DSpark config requires it{unread}",
                                    required_source, "Set markov_head_type (vanilla, gated or rnn)."))
        elif raw_type is not None and str(raw_type).lower() not in _MARKOV_HEAD_TYPES:
            findings.append(refused(config_file, "markov_head_type", f"{type_path} = {raw_type!r}: SGLang builds "
                                    "vanilla, gated and rnn Markov heads only", at("269-275", DSPARK_CONFIG,
                                                                                   "parse_dspark_draft_config"),
                                    "Set the head type the draft was trained with."))
        elif raw_type is not None and str(config.get("markov_head_type", "vanilla")).lower() != str(raw_type).lower():
            # the config parser takes the nested type, but build_markov_head
            # reads the top-level attribute (vanilla when absent): the head
            # built is another than the one declared, without a word
            built_type = str(config.get("markov_head_type", "vanilla")).lower()
            findings.append(served_wrong(
                config_file, f"{type_path} = {raw_type!r} is the head SGLang's DSpark config reads, but "
                f"build_markov_head reads the top-level markov_head_type and builds a {built_type} head",
                at("385-405", DSPARK_MODEL, "build_markov_head"), "markov_head_type",
                "Write markov_head_type at the top level of config.json."))
    mask, _ = _dspark_field(config, "mask_token_id")
    if mask is None:
        findings.append(refused(config_file, "mask_token_id", "mask_token_id is not set (top level, dflash_config, "
                                "dspark_config or dspark_noise_token_id): the DSPARK worker needs it",
                                at("112-121", DSPARK_CONFIG,
                                   "resolve_runtime_config"), "Set mask_token_id to the id it was trained with."))
    return findings


dspark_markov_head = dspark_markov_head_rule()


def derived_taps_note(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """Without a list SGLang derives one: a tap per draft layer, spread
    evenly over target layers [1, N-3] (the middle one for a one-layer
    draft), the DFlash reference's choice (speculative/dflash_utils.py:348-385)."""
    if _TAP_PATHS.read(config)[0] is not None:
        return []
    return [Finding(
        "TAP003",
        f"{config_file}: no target_layer_ids; SGLang builds one tap per draft layer "
        f"({config.get('num_hidden_layers')!r}), spread evenly over target layers 1..N-3 "
        f"({at('348-385', DFLASH_UTILS, 'build_target_layer_ids').cite()}). Write the list the draft was trained on if it differs.",
        file=config_file,
        detail={"draft_taps": config.get("num_hidden_layers"), "target_ids": None},
    )]


def derived_taps_depth(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """Without a list the draft model derives its taps over num_target_layers
    (dflash_config's when the key is there, else the top level), else its own
    layer count (models/dflash.py:749-758); spreading two or more over [1, N-3]
    raises below four layers (speculative/dflash_utils.py:363-379)."""
    if _TAP_PATHS.read(config)[0] is not None:
        return []
    layers = config.get("num_hidden_layers")
    nested = config.get("dflash_config")
    if isinstance(nested, Mapping) and "num_target_layers" in nested:
        depth, depth_path = nested["num_target_layers"], "dflash_config.num_target_layers"
    else:
        depth, depth_path = config.get("num_target_layers"), "num_target_layers"
    if depth is None:
        depth, depth_path = layers, "num_hidden_layers (no num_target_layers)"
    if not (is_int(layers) and is_int(depth)) or layers < 2 or depth >= 4:
        return []
    return [refused(config_file, "target_layer_ids", f"no target_layer_ids, so the draft spreads its {layers} taps "
                    f"over {depth_path} = {depth} layers, and SGLang's layer selection raises below 4",
                    at("749-758", _DF,
                       "DFlashDraftModel.__init__"), "Write the target_layer_ids the draft was trained on (in dflash_config), "
                    "or num_target_layers = the target's layer count.")]


# transformers' Qwen2/Qwen3 config classes null sliding_window unless
# use_sliding_window (models/qwen3/configuration_qwen3.py:86-87 of 5.19.0).
_WINDOW_NEEDS_FLAG = ("qwen2", "qwen3")


def sliding_layers(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """layer_types as SGLang's DFlash attention reads them: one entry per
    draft layer (transformers refuses another count, configuration_utils.py:
    567-582 of 5.19.0), full or sliding attention only, and a sliding layer
    needs config.sliding_window as the config class leaves it
    (models/dflash.py:166-191; speculative/dflash_utils.py:400-417)."""
    types, layers = config.get("layer_types"), config.get("num_hidden_layers")
    if not isinstance(types, list):
        return []
    source = at("166-191", _DF, "_get_dflash_layer_attention_params")
    if is_int(layers) and len(types) != layers:
        return [refused(config_file, "layer_types", f"layer_types lists {len(types)} layers but num_hidden_layers is "
                        f"{layers}", source, "List one type per layer.")]
    if any(t not in ("full_attention", "sliding_attention") for t in types):
        return [refused(config_file, "layer_types", f"layer_types {types!r} holds a type other than full_attention "
                        "and sliding_attention", source, "Use the two types SGLang's DFlash attention builds.")]
    window = config.get("sliding_window")
    if config.get("model_type") in _WINDOW_NEEDS_FLAG and not config.get("use_sliding_window"):
        window = None
    if "sliding_attention" not in types or window is not None:
        return []
    return [Finding(
        "SWA001",
        f"{config_file}: layer_types has sliding_attention layers but SGLang finds no window (sliding_window "
        f"{config.get('sliding_window', 'absent')!r}, use_sliding_window {config.get('use_sliding_window')!r}; a "
        f"{config.get('model_type')} config keeps the window only with use_sliding_window): it refuses the draft "
        f"({at('400-417', DFLASH_UTILS, 'get_dflash_attention_sliding_window_size').cite()}). Set the window the draft was trained with.",
        file=config_file,
        detail={"field": "sliding_window", "source": at("400-417", DFLASH_UTILS,
                                                        "get_dflash_attention_sliding_window_size").cite()},
    )]


LIMITS = (derived_taps_note, derived_taps_depth, sliding_layers, taps_within_declared_depth, activation_supported, dspark_markov_head)

LOADER = FamilyLoader(
    family="dflash_gqa",
    model_class="DFlashDraftModel / DSparkDraftModel",
    # No "dflash"/"dspark" config type: the draft's config must parse as a
    # transformers config with the GQA fields (utils/hf_transformers/config.py:336-380).
    # SGLang's own loader fills every parameter of the draft under each of
    # these; under DeepseekV2Config (head_dim ignored) the norms no longer fit.
    model_types=("qwen3", "qwen2", "llama", "mistral", "qwen3_moe", "deepseek_v3", "kimi_k2", "gemma"),
    # resolve_param_name (models/dflash.py:905-923): the name as it is, else
    # without one leading `model.`, else the native export's
    # `encoder.fc.weight` / `encoder.output_norm_enc.weight` aliases.
    name_rewrites=((r"^model\.", ""), (r"^encoder\.fc\.weight$", "fc.weight"),
                   (r"^encoder\.output_norm_enc\.weight$", "hidden_norm.weight")),
    skips=(
        SkipRule(r"^(embed_tokens|lm_head)\.", "the draft uses the target's embedding and head",
                 at("627-641", DSPARK_MODEL, "DSparkDraftMixin.load_weights")),
        SkipRule(r"rotary_emb\.", "recomputed by the rotary embedding", at("627-641", DSPARK_MODEL,
                                                                           "DSparkDraftMixin.load_weights")),
        # The confidence head is built only when SGLANG_RAGGED_VERIFY_MODE
        # is not "static", its default (models/dspark.py:487-489; environ.py:1572).
        SkipRule(r"^confidence_head\.", "the confidence head is not built in SGLang's default verify mode",
                 at("487-489, 642-645 (DSparkDraftMixin.load_weights)", DSPARK_MODEL, "build_confidence_head")),
    ),
    fused=(
        FusedParameter(
            "layers.{n}.self_attn.qkv_proj.weight",
            ("layers.{n}.self_attn.q_proj.weight", "layers.{n}.self_attn.k_proj.weight",
             "layers.{n}.self_attn.v_proj.weight"),
            fused_accepted=True, partial_passes=True, source=at("886-940", _DF, "DFlashDraftModel.load_weights"),
        ),
        FusedParameter(
            "layers.{n}.mlp.gate_up_proj.weight",
            ("layers.{n}.mlp.gate_proj.weight", "layers.{n}.mlp.up_proj.weight"),
            fused_accepted=True, partial_passes=True, source=at("886-940", _DF, "DFlashDraftModel.load_weights"),
        ),
    ),
    # "Ignore unexpected weights (e.g., HF rotary caches)" (models/dflash.py:
    # 942-946): TorchSpec's context_proj/context_norm/final_norm, fc_norm and
    # any other name without a destination are dropped without a word.
    unexpected="drops",
    # DSparkDraftModel.load_weights hands every markov_head.* name to the
    # Markov head and raises ValueError for one it has no parameter for
    # (models/dspark.py:646-656); DFlashDraftModel drops them with the rest.
    unexpected_rejected=(("markov_head", SkipRule(r"^markov_head\.", "a Markov head name the built head lacks",
                                                  at("646-656", DSPARK_MODEL, "DSparkDraftMixin.load_weights"))),),
    missing="uninitialised",
    # The DFLASH worker takes the target tokenizer's "<|MASK|>" id, adding
    # the token when the tokenizer lacks it (speculative/dflash_worker_v2.py:
    # 1391-1471; dflash_utils.py:27, 677-681); a DSpark draft is refused
    # without one (dspark_markov_head above).
    mask_token_fallback="SGLang's DFLASH worker uses the target tokenizer's <|MASK|> token, adding it when missing",
    features={
        "fc_norm": FeatureSupport(
            supported=False,
            source=at("778-792", _DF, "DFlashDraftModel.__init__"),
            when_unsupported="SGLang's DFlash/DSpark model has no fc_norm: the weights are dropped without a word "
            "and the taps reach fc unnormalised",
        ),
        "aux_hidden_stream": FeatureSupport(
            supported=False,
            source=at("2871-2905, 3054-3071 (KimiK3LinearForCausalLM)", KIMI_K3, "KimiK3LinearModel.forward"),
            when_unsupported="SGLang never reads aux_hidden_stream: a Kimi-K3 target with attn_res_block_size set "
            "feeds the aggregated AttnRes mixture, any other target the prefix stream, whatever the draft declares",
        ),
    },
    # int() over each id, num_target_layers and block_size
    # (speculative/dflash_utils.py:503-520, 547-580, 610-672).
    int_coerced_fields=("target_layer_ids", "dflash_config.target_layer_ids", "num_target_layers",
                        "dflash_config.num_target_layers", "block_size", "dflash_config.block_size"),
    config_limits=LIMITS,
    # num_target_layers is the target's depth here (dflash_utils.py:556-585;
    # spec_aux_hidden_state.py:221-245), TorchSpec's tap count elsewhere.
    target_depth_field="num_target_layers",
    target_classes=DFLASH_TARGET_CLASSES,
    variant_target_classes={DFLASH_VARIANT: DFLASH_TARGET_CLASSES - DSPARK_ONLY_TARGET_CLASSES},
    target_wiring=("SGLang calls its set_dflash_layers_to_capture (set_dspark_layers_to_capture for DSPARK) "
                   "and get_input_embeddings(), and a DSpark draft takes its lm_head"),
    # The startup check takes [0, N) (spec_aux_hidden_state.py:247-250,
    # dflash_utils.py:577-584), but the target adds 1 and its layer loop never
    # reaches layer N, so id N-1 is never captured (models/qwen3.py:793-805).
    tap_low=0,
    tap_high_offset=-2,
    taps_outside_range=("refuses ids outside [0, N) at startup; id N-1 passes that check and is never captured, "
                        "so the first request fails on the feature width"),
    # Nothing reads aux_hidden_stream: the target's capture decides
    # (models/kimi_k3.py:2765, 2871-2905, 2955-2982; any other target captures
    # the residual entering the next layer).
    stream=StreamResolution(nested_truthy_wins=False, validates_top_level=False, fixed_stream=None,
                            source=at("2765, 2871-2905 (KimiK3LinearModel.forward), "
                                      "2955-2982 (KimiK3LinearModel._dspark_capture_stream)",
                                      KIMI_K3, "KimiK3LinearModel.__init__"), target_decides=True),
    taps=TAPS,
    # fc is built for the list's length, or one tap per draft layer
    # (models/dflash.py:766-792).
    dims={"S": TAPS.draft_count, "markov": markov_rank},
    targets_without_capture=frozenset(NON_CAPTURING_TARGETS),
    config_defaults={"qwen3": QWEN3_DEFAULTS},
    sources={
        "load_weights": at("886-1000", _DF, "DFlashDraftModel.load_weights"),
        "load_weights (DSpark)": at("627-660", DSPARK_MODEL, "DSparkDraftMixin.load_weights"),
        "fc width": at("766-792", _DF, "DFlashDraftModel.__init__"),
        "taps": at("588-672", DFLASH_UTILS, "parse_dflash_draft_config"),
        "taps vs target": at("207-283", SPEC_AUX, "_resolve_dflash_aux_hidden_state"),
        "target capture": at("793-805", QWEN3, "Qwen3ForCausalLM.set_dflash_layers_to_capture"),
        "target classes": DFLASH_TARGET_SOURCE,
        "markov head": at("385-405", DSPARK_MODEL, "build_markov_head"),
        "attention": at("199-300", _DF, "DFlashAttention"),
    },
)
