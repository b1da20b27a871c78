"""vLLM 0.33.0's loader for Kimi-K3 DSpark drafts (`K3DSparkModel` ->
K3DSparkForCausalLM, vllm/models/kimi_k3/nvidia/dspark_mla.py): MLA layers,
a Markov head, the target's embedding and head; no fc_norm and no AttnRes
stream of its own; every stored name is put under `model.` as it is, so a
stored `model.` prefix is refused; the loader returns what it loaded, so a
norm or the Markov embedding left out fails the load while a projection left
out is served uninitialised."""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.engines.base import (
    DROPPED,
    REJECTED,
    TARGET,
    FamilyLoader,
    FeatureSupport,
    FusedParameter,
    SkipRule,
    StreamResolution,
    TapReading,
    VocabHandling,
)
from dspark.schema.engines.vllm.common import (
    DEFAULT_LOADER,
    DSPARK_SHARING,
    HIDDEN_STATES_NUMBERING,
    K3_CONFIG,
    K3_DSPARK,
    K3_TARGET,
    PATH_NUMBERING,
    MODEL_UTILS,
    ROTARY_CACHES,
    TARGET_TAPS,
    TARGET_TAPS_SOURCE,
    TAPS_OUTSIDE,
    DEFAULT_TAPS_TEXT,
    at,
    default_taps,
    engine_refusal,
    launch_method,
    tap_agreement,
    tap_order,
)
from dspark.schema.findings import Finding

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
)


def k3_config_refusals(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """K3DSparkConfig.__init__ raises ValueError for an MLA variant the model
    lacks, a null q_lora_rank, a draft_vocab_size other than vocab_size, and
    an empty target_layer_ids or a num_target_layers that differs from its
    length (transformers_utils/configs/k3_dspark.py:44-77)."""
    source = at("44-77", K3_CONFIG, "K3DSparkConfig.__init__")
    findings = []
    flags = [name for name in ("mla_use_nope", "mla_use_output_gate", "mla_use_qk_norm", "dspark_bonus_anchor")
             if config.get(name)]
    if flags:
        findings.append(engine_refusal(config_file, f"{', '.join(flags)} set; K3DSparkConfig refuses them "
                                       "('MLA DSpark does not support ...')", source, flags[0],
                                       "Retrain without them; the K3 DSpark model has no such variant."))
    if "q_lora_rank" in config and config["q_lora_rank"] is None:
        findings.append(engine_refusal(config_file, "q_lora_rank is null; K3DSparkConfig refuses it", source,
                                       "q_lora_rank", "Write the q_lora_rank the draft was trained with."))
    draft_vocab = config.get("draft_vocab_size") or config.get("vocab_size")
    if draft_vocab != config.get("vocab_size") and config.get("vocab_size") is not None:
        findings.append(engine_refusal(config_file, f"draft_vocab_size {config.get('draft_vocab_size')!r} differs "
                                       f"from vocab_size {config.get('vocab_size')!r}; K3DSparkConfig requires them "
                                       "equal (the target's embedding and head are shared)", source,
                                       "draft_vocab_size", "Drop draft_vocab_size or make it vocab_size."))
    return findings


def k3_activation(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """KimiMLP builds silu or situ and raises ValueError for anything else
    (vllm/models/kimi_k3/nvidia/model.py:275-286)."""
    act = config.get("hidden_act", "silu")
    if act in ("silu", "situ"):
        return []
    return [engine_refusal(config_file, f"hidden_act is {act!r}; KimiMLP supports only silu and situ",
                           at("275-286", K3_TARGET, "KimiMLP.__init__"), "hidden_act", "Retrain with silu.")]


LIMITS = (launch_method("dspark"), k3_config_refusals, k3_activation, tap_order(TARGET_TAPS),
          tap_agreement(TAPS, "num_target_layers", at("150-157", K3_DSPARK, "K3DSparkModel.__init__")))

LOADER = FamilyLoader(
    family="k3_dspark",
    model_class="K3DSparkForCausalLM",
    model_types=("k3_dspark",),
    # orig_to_new_prefix {"": "model."} puts every stored name under model.
    # as it is (dspark_mla.py:437-452): no prefix is stripped.
    name_rewrites=(),
    skips=(
        # substr mappings to None (dspark_mla.py:440-444); confidence_head is
        # kept when enable_confidence_head (459-464).
        SkipRule(r"^(embed_tokens|lm_head)\.", "the target's embedding and head are shared after loading",
                 at("437-452", K3_DSPARK, "K3DSparkForCausalLM.hf_to_vllm_mapper")),
        SkipRule(r"confidence_head", "training-only unless enable_confidence_head", at("437-464", K3_DSPARK,
                                                                                       "K3DSparkForCausalLM"),
                 unless="enable_confidence_head"),
        ROTARY_CACHES,
    ),
    fused=(
        FusedParameter(
            "layers.{n}.mlp.gate_up_proj.weight",
            ("layers.{n}.mlp.gate_proj.weight", "layers.{n}.mlp.up_proj.weight"),
            fused_accepted=True, partial_passes=True, source=at("446-451", K3_DSPARK,
                                                                "K3DSparkForCausalLM.hf_to_vllm_mapper"),
        ),
        FusedParameter(
            "layers.{n}.self_attn.fused_qkv_a_proj.weight",
            ("layers.{n}.self_attn.q_a_proj.weight", "layers.{n}.self_attn.kv_a_proj_with_mqa.weight"),
            # context_kv_proj is filled from each layer's kv_a_proj_with_mqa
            # (39-58): a pre-fused tensor leaves it empty.
            fused_accepted=False, partial_passes=True, source=at(
                "39-58, 446-451 (K3DSparkForCausalLM.hf_to_vllm_mapper)", K3_DSPARK, "_duplicate_context_kv_weights"),
            when_pre_fused="is loaded, but the cross-layer context KV projection is filled only from separate "
            "kv_a_proj_with_mqa tensors, so it is served uninitialised",
        ),
    ),
    unexpected="rejects",
    missing="rejects",
    # DefaultModelLoader checks what load_weights returns against the
    # parameters, but counts every parameter of a module with a quant method
    # as loaded (default_loader.py:525-572): only norms and the Markov
    # embedding (a plain nn.Embedding) are really checked.
    missing_unchecked=(r"(^|\.)(context_proj|q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj|o_proj|gate_proj|"
                       r"up_proj|down_proj|markov_w2|proj)\.weight$", r"confidence_head\.proj\.bias$"),
    features={
        "fc_norm": FeatureSupport(
            supported=False,
            source=at("134-208 (no fc_norm)", K3_DSPARK, "K3DSparkModel"),
            when_unsupported="K3DSparkModel has no fc_norm: shipped fc_norm weights have no destination, which "
            "fails the load, and a declaration alone is ignored (the taps reach context_proj unnormalised)",
        ),
    },
    # target_layer_ids t is captured as t + 1 on the Kimi-K3 target, ids
    # 0..N (model.py:1145-1189).
    tap_low=-1,
    tap_high_offset=-1,
    tap_final_residual=False,  # the range above already ends at the last layer's output
    taps_outside_range=TAPS_OUTSIDE,
    stream=StreamResolution(
        nested_truthy_wins=False,
        validates_top_level=False,
        # The config's aux_hidden_stream is never read; the target captures
        # the prefix stream unless VLLM_KIMI_K3_AUX_ATTN_RES_STREAM=1 is set
        # for the whole server (model.py:1068-1106; vllm/envs.py:1664-1666).
        fixed_stream="prefix",
        source=at("1068-1106", K3_TARGET, "KimiLinearModel"),
    ),
    taps=TAPS,
    vocab=VocabHandling(d2t=REJECTED, t2d=REJECTED, embedding=TARGET, source=at("433-452", K3_DSPARK,
                                                                                "K3DSparkForCausalLM")),
    head_from_target="always",
    config_limits=LIMITS,
    coerces_values=False,
    # targets_without_capture stays empty: every Llama/Qwen2/Qwen3(-MoE)/DeepSeek/Kimi
    # target captures (EagleModelMixin; common.EAGLE3_TARGET_CLASSES).
    # target_num_hidden_layers is TokenSpeed's config field: neither
    # K3DSparkConfig (transformers_utils/configs/k3_dspark.py) nor the model
    # (models/kimi_k3/nvidia/dspark_mla.py) reads it; the target's own layer
    # count bounds the taps.
    ignored_fields=("num_key_value_heads", "target_num_hidden_layers"),
    sources={
        "load_weights": at("530-537", K3_DSPARK, "K3DSparkForCausalLM"),
        "name mapper": at("437-464", K3_DSPARK, "K3DSparkForCausalLM"),
        "config": at("7-77", K3_CONFIG, "K3DSparkConfig"),
        "context width": at("150-157", K3_DSPARK, "K3DSparkModel.__init__"),
        "taps (target)": TARGET_TAPS_SOURCE,
        "capture": at("1145-1189", K3_TARGET, "KimiLinearModel.forward"),
        "unknown names": at("425-448", MODEL_UTILS, "AutoWeightsLoader._load_module"),
        "never loaded": at("525-572", DEFAULT_LOADER, "DefaultModelLoader.track_weights_loading"),
        "embedding / lm_head": at("130-150", DSPARK_SHARING, "load_dspark_model"),
    },
)
