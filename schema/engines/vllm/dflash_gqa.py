"""vLLM 0.33.0's loader for GQA DFlash drafts (`DFlashDraftModel` ->
DFlashQwen3ForCausalLM) and dense Qwen3 DSpark drafts (`Qwen3DSparkModel`,
or `DSparkDraftModel` with model_type qwen3 -> Qwen3DSparkForCausalLM, the
DFlash backbone plus a Markov head): fc built for target_hidden_size per
tap, no fc_norm, the prefix stream only, any name without a destination
refused, a parameter left out served uninitialised."""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.engines.base import (
    DRAFT_IF_SHIPPED,
    HEAD_NOT_SHIPPED_UNLESS_DECLARED,
    DROPPED,
    REJECTED_WHEN_FULL_VOCAB,
    FamilyLoader,
    FeatureSupport,
    FusedParameter,
    SkipRule,
    TapReading,
    VocabHandling,
)
from dspark.schema.engines.vllm.common import (
    BIAS_WITHOUT_DESTINATION,
    DEFAULT_LOADER,
    DFLASH_SHARING,
    DSPARK_SHARING,
    HIDDEN_STATES_NUMBERING,
    PATH_NUMBERING,
    MODEL_UTILS,
    QWEN3_DFLASH,
    QWEN3_DSPARK,
    ROTARY_CACHES,
    SILU_ONLY_SOURCES,
    SPEC_UTILS,
    SPECULATIVE,
    T2D,
    TARGET_TAPS,
    TARGET_TAPS_SOURCE,
    TAPS_OUTSIDE,
    UNREAD_STREAM,
    DEFAULT_TAPS_TEXT,
    at,
    default_taps,
    engine_refusal,
    served_wrong,
    launch_method,
    silu_only,
    tap_agreement,
    tap_order,
    width_or,
)
from dspark.schema.findings import Finding

_DF = QWEN3_DFLASH

# The drafter sizes fc from the list the target captures (the same
# get_eagle3_aux_layers_from_config), else num_hidden_layers
# (qwen3_dflash.py:84-93). No defaults on the target side: a DFlash draft
# without ids gets the target's EAGLE-3 defaults (2, N//2, N-3) while fc
# expects num_hidden_layers taps.
TAPS = TapReading(
    target=TARGET_TAPS,
    # The target's numbering (the top-level eagle list and the defaults);
    # target_layer_ids are layer outputs the runner adds 1 to.
    numbering=HIDDEN_STATES_NUMBERING,
    source=TARGET_TAPS_SOURCE,
    # With no list the runner still sets the target's EAGLE-3 defaults
    # (eagle3_utils.py:34-40).
    defaults=default_taps,
    defaults_text=DEFAULT_TAPS_TEXT,
    path_numbering=PATH_NUMBERING,
    count_fallback_field="num_hidden_layers",
)


def _fc_width(config: Mapping[str, Any]) -> Any:
    # getattr(config, "target_hidden_size", None) or hidden_size (qwen3_dflash.py:90-92)
    return width_or(config, "target_hidden_size", "hidden_size")


def sample_from_anchor_refused(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The DFlash speculator (and DSpark's, which runs its __init__) raises
    ValueError when dflash_config.sample_from_anchor is true
    (v1/worker/gpu/spec_decode/dflash/speculator.py:79-88)."""
    nested = config.get("dflash_config")
    if not isinstance(nested, Mapping) or not nested.get("sample_from_anchor", False):
        return []
    return [engine_refusal(config_file, "dflash_config.sample_from_anchor is true; the DFlash speculator "
                           "refuses it (a fixed 1+N query layout)",
                           at("79-88", "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py",
                              "DFlashSpeculator.__init__"),
                           "dflash_config.sample_from_anchor", "Drop the key from dflash_config.")]


def dspark_needs_qwen3(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """`DSparkDraftModel` is served as the Qwen3 DSpark draft only with
    model_type qwen3; any other model_type makes the draft a DeepSeek-V4
    DSpark (model_type rewritten to deepseek_v4), which is not this model
    (config/speculative.py:1455-1468, 1535-1566)."""
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or "DSparkDraftModel" not in architectures:
        return []
    if config.get("model_type") == "qwen3" or any(a in ("Qwen3DSparkModel", "Qwen3OmniDSparkModel")
                                                   for a in architectures):
        return []
    return [engine_refusal(config_file, f"DSparkDraftModel with model_type {config.get('model_type')!r}: vLLM "
                           "serves DSparkDraftModel as the Qwen3 DSpark draft only when model_type is qwen3, and "
                           "otherwise loads it as a DeepSeek-V4 DSpark stage", at("1535-1566", SPECULATIVE,
                                                                                  "SpeculativeConfig.__post_init__"),
                           "model_type", "Write model_type qwen3 or architectures [\"Qwen3DSparkModel\"].")]


def markov_rank_required(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """Qwen3DSparkModel builds its Markov head from config.markov_rank with no
    default (qwen3_dspark.py:205-218): a DSpark draft without it fails at build."""
    architectures = config.get("architectures")
    dspark = isinstance(architectures, list) and any(
        a in ("DSparkDraftModel", "Qwen3DSparkModel", "Qwen3OmniDSparkModel") for a in architectures)
    if not dspark or config.get("markov_rank") is not None:
        return []
    return [engine_refusal(config_file, "a DSpark draft without a top-level markov_rank; Qwen3DSparkModel reads "
                           "config.markov_rank (dspark_config is not read) and fails at build",
                           at("205-218", QWEN3_DSPARK,
                              "Qwen3DSparkModel.__init__"), "markov_rank", "Write markov_rank at the top level.")]


def layer_types_served(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """layer_types as vLLM's config path and DFlash layers take it.

    The draft's config.json parses through transformers' config class
    (transformers_utils/config.py:340-420), whose validation refuses a
    layer_types list whose length is not num_hidden_layers (transformers
    configuration_utils.py:694-709@transformers==5.20.2; vLLM 0.33.0 pins
    transformers>=5.16.1,<5.21). A sliding layer (or dflash_config.use_swa)
    needs dflash_config.swa_window_size or the top-level sliding_window as the
    config class leaves it, else ValueError at build
    (qwen3_dflash.py:96-157); Qwen2/Qwen3 configs null sliding_window unless
    use_sliding_window (models/qwen3/configuration_qwen3.py:87@transformers==5.20.2)."""
    layer_types = config.get("layer_types")
    layers = config.get("num_hidden_layers")
    nested = config.get("dflash_config") if isinstance(config.get("dflash_config"), Mapping) else {}
    if isinstance(layer_types, list) and isinstance(layers, int) and len(layer_types) != layers:
        return [engine_refusal(config_file, f"layer_types lists {len(layer_types)} layers but num_hidden_layers is "
                               f"{layers}; transformers' config validation, which vLLM's config loader runs, "
                               "refuses it (transformers/configuration_utils.py:694-709@transformers==5.20.2)",
                               at("340-420", "vllm/transformers_utils/config.py", "HFConfigParser"), "layer_types",
                               "List one type per layer.")]
    findings = []
    if isinstance(layer_types, list) and "chunked_attention" in layer_types:
        # Only "sliding_attention" gets a window and causal masking; any other
        # type is built as full attention, without a word (qwen3_dflash.py:59-73, 96-157).
        findings.append(served_wrong(
            config_file, "layer_types holds chunked_attention, which the DFlash layer builds as full attention "
            "(no chunk, no window) without a word: a draft trained with chunked attention is served another "
            "attention than it learned",
            at("96-157, 59-73 (_SLIDING_ATTENTION, _dflash_layer_causal)", _DF, "_resolve_layer_attention"),
            "chunked_attention",
            "Retrain with full_attention or sliding_attention layers, or serve it on an engine that builds "
            "chunked layers."))
    sliding = (isinstance(layer_types, list) and "sliding_attention" in layer_types) or bool(nested.get("use_swa"))
    if not sliding:
        return findings
    top = config.get("sliding_window")
    if config.get("model_type") in ("qwen2", "qwen3") and not config.get("use_sliding_window"):
        top = None
    if nested.get("swa_window_size", top) is not None:
        return findings
    return findings + [engine_refusal(config_file, "a sliding-attention layer without a window: the DFlash layer reads "
                           "dflash_config.swa_window_size, else the top-level sliding_window (which a Qwen config "
                           "class nulls unless use_sliding_window), and raises ValueError at build",
                           at("96-157", _DF, "_resolve_layer_attention"), "sliding_window",
                           "Set dflash_config.swa_window_size (or sliding_window with use_sliding_window: true) "
                           "to the window the draft was trained with.")]


LIMITS = (launch_method("dflash", ("Qwen3DSparkModel", "Qwen3OmniDSparkModel", "DSparkDraftModel")),
          silu_only(SILU_ONLY_SOURCES["qwen"]), sample_from_anchor_refused, dspark_needs_qwen3,
          markov_rank_required, layer_types_served, tap_order(TARGET_TAPS),
          tap_agreement(TAPS, "the list the target captures, else num_hidden_layers", at("84-93", _DF,
                                                                                         "_get_dflash_fc_input_size")))

LOADER = FamilyLoader(
    family="dflash_gqa",
    model_class="DFlashQwen3ForCausalLM / Qwen3DSparkForCausalLM",
    # The draft's config.json parses through AutoConfig (transformers_utils/config.py:340-420);
    # the layers read Qwen3 fields.
    model_types=("qwen3", "qwen2", "llama", "qwen3_moe"),
    # load_weights prepends "model." to every name but lm_head/d2t
    # (qwen3_dflash.py:851-892); the mapper turns a whole `midlayer` module
    # name into layers.0 and Muse Glimmer's encoder.fc / encoder.output_norm_enc
    # into fc / hidden_norm (390-410).
    name_rewrites=((r"^.*t2d.*$", "t2d"), (r"^encoder\.output_norm_enc\.", "hidden_norm."),
                   (r"^encoder\.fc\.", "fc."), (r"^midlayer\.", "layers.0.")),
    skips=(T2D, ROTARY_CACHES,
           # The DSpark confidence head (a training head speculators and
           # SpecForge ship): built and loaded when enable_confidence_head,
           # mapped to nothing otherwise, never refused
           # (qwen3_dspark.py::Qwen3DSparkModel.__init__@0.33.0:219-231,
           # Qwen3DSparkForCausalLM.load_weights:366-368).
           SkipRule(r"^confidence_head\.", "the DSpark confidence head: loaded when enable_confidence_head, "
                    "dropped otherwise", at("219-231, 366-368 (Qwen3DSparkForCausalLM.load_weights)", QWEN3_DSPARK,
                                            "Qwen3DSparkModel.__init__"))),
    fused=(
        FusedParameter(
            "layers.{n}.self_attn.qkv_proj.weight",
            ("layers.{n}.self_attn.q_proj.weight", "layers.{n}.self_attn.k_proj.weight",
             "layers.{n}.self_attn.v_proj.weight"),
            fused_accepted=True, partial_passes=True, source=at("403-410", _DF, "DFlashQwen3Model.hf_to_vllm_mapper"),
        ),
        FusedParameter(
            "layers.{n}.mlp.gate_up_proj.weight",
            ("layers.{n}.mlp.gate_proj.weight", "layers.{n}.mlp.up_proj.weight"),
            fused_accepted=True, partial_passes=True, source=at("403-410", _DF, "DFlashQwen3Model.hf_to_vllm_mapper"),
        ),
    ),
    unexpected="rejects",
    unexpected_dropped=(BIAS_WITHOUT_DESTINATION,),
    # load_weights returns None (qwen3_dflash.py:851-892; qwen3_dspark.py:312-372):
    # nothing compares loaded with built (default_loader.py:503-523).
    missing="uninitialised",
    features={
        "fc_norm": FeatureSupport(
            supported=False,
            source=at("412-495 (no fc_norm)", _DF, "DFlashQwen3Model.__init__"),
            when_unsupported="DFlashQwen3Model has no fc_norm: shipped fc_norm weights have no destination, "
            "which fails the load, and a declaration alone is ignored (the taps reach fc unnormalised)",
        ),
        "aux_hidden_stream": UNREAD_STREAM,
    },
    # target_layer_ids t is captured as t + 1 in [0, N]: t in [-1, N-1].
    tap_low=-1,
    tap_high_offset=-1,
    tap_final_residual=False,  # the range above already ends at the last layer's output
    taps_outside_range=TAPS_OUTSIDE + " (DFlash raises ValueError naming the mismatch, qwen3_dflash.py:829-849)",
    stream=None,
    taps=TAPS,
    vocab=VocabHandling(d2t=REJECTED_WHEN_FULL_VOCAB, t2d=DROPPED, embedding=DRAFT_IF_SHIPPED,
                        source=at("736-775, 851-892", _DF, "DFlashQwen3ForCausalLM")),
    # The target's head replaces the draft's unless the draft ships one
    # (process_eagle_weight marks it, model_executor/models/utils.py:1178-1198)
    # or, for DFlash, its config sets has_own_lm_head: then the draft's own
    # lm_head is kept whether or not it was loaded (dflash/utils.py:60-73;
    # qwen3_dflash.py:755-763), and nothing checks it was (missing above).
    # DSpark shares by the shipped head alone (dspark/utils.py:130-150).
    head_from_target=HEAD_NOT_SHIPPED_UNLESS_DECLARED,
    dims={"th": _fc_width, "tw": _fc_width, "S": TAPS.draft_count},
    # fc takes each tap at target_hidden_size (else hidden_size): the target's
    # hidden_size must equal it, or the first request fails on fc's width
    target_width_field="target_hidden_size",
    target_width_fallback="hidden_size",
    config_limits=LIMITS,
    # targets_without_capture stays empty: every Llama/Qwen2/Qwen3(-MoE)/DeepSeek/Kimi
    # target captures (EagleModelMixin; common.EAGLE3_TARGET_CLASSES).
    sources={
        "load_weights": at("851-892", _DF, "DFlashQwen3ForCausalLM.load_weights"),
        "name mapper": at("390-410", _DF, "DFlashQwen3Model.hf_to_vllm_mapper"),
        "fc width": at("84-93", _DF, "_get_dflash_fc_input_size"),
        "taps (target)": TARGET_TAPS_SOURCE,
        "mask token": at("92-115", SPEC_UTILS, "get_parallel_drafting_token_id"),
        "dspark load_weights": at("312-372", QWEN3_DSPARK, "Qwen3DSparkForCausalLM.load_weights"),
        "markov head": at("48-81, 192-230 (Qwen3DSparkModel)", QWEN3_DSPARK, "DSparkMarkovHead"),
        "embedding / lm_head (dflash)": at("60-73", DFLASH_SHARING, "load_dflash_model"),
        "embedding / lm_head (dspark)": at("130-150", DSPARK_SHARING, "load_dspark_model"),
        "unknown names": at("425-448", MODEL_UTILS, "AutoWeightsLoader._load_module"),
        "never loaded": at("503-523", DEFAULT_LOADER, "DefaultModelLoader.load_weights"),
    },
)
