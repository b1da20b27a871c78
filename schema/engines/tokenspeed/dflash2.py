"""TokenSpeed 0.1.1's loader for DFlash2 drafts (`DFlash2DraftModel`,
tokenspeed/runtime/models/dflash2.py, served by the DFlash2 drafter,
execution/drafter/dflash2.py; 0.1.0 and the git snapshots register no such
class, so they refuse it: ENG006).

The model is the GQA DFlash model (models/dflash.py) with a grouped
convolution around each layer's attention and MLP and a candidate selector,
so taps, stream, fc, hidden_norm and the target's capture are the GQA DFlash
loader's as 0.1.1 ships it (`releases.gqa_loader_0_1_1`). What differs:

* the build reads conv_kernel_size, conv_group_size, block_size,
  selector_rank, selector_top_k through `_dflash2_config_value`
  (dflash_config when it holds the key, else the top level) and int()s
  each: absent, the build fails; the drafter reads selector_top_k,
  output_multiplier and final_logit_softcapping from dflash_config only;
* `attention_mode: "mla"` builds Kimi-K3 DSpark's MLA attention, whose
  load_weights refuses any name without a destination and any parameter
  left empty, where the GQA path drops the one and leaves the other
  uninitialised.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from dspark.schema.engines.base import FamilyLoader, FeatureSupport, SkipRule, Source, served_wrong
from dspark.schema.engines.tokenspeed.releases import GQA_MODEL, RELEASE_0_1_1, at_0_1_1
from dspark.schema.families.dflash2 import BUILD_FIELDS, dflash2_value, uses_mla
from dspark.schema.findings import Finding

_RUNTIME = "tokenspeed/runtime/"
DFLASH2_MODEL = _RUNTIME + "models/dflash2.py"
DFLASH2_DRAFTER = _RUNTIME + "execution/drafter/dflash2.py"
MODEL_CONFIG = _RUNTIME + "configs/model_config.py"


def _refusal(config_file: str, text: str, source: Source, field: str, fix: str) -> Finding:
    return Finding(
        "CFG003",
        f"{config_file}: {text}; the engine refuses the draft ({source.cite()}). {fix}",
        file=config_file,
        detail={"field": field, "source": source.cite(), "validator": "engine"},
    )


def _as_int(value: Any) -> int | None:
    """int(value) as Python computes it, None where it raises."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def build_fields(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The convolution and the selector are built from int() of each field
    as `_dflash2_config_value` reads it (models/dflash2.py::_dflash2_config_value
    @tokenspeed==0.1.1:50-52; DFlash2DecoderLayer.__init__:346-351;
    DFlash2DraftModel.__init__:430-438), and refused where the conv or the
    selector raises (DFlashGroupedConv.__init__:139-146;
    CandidateSelector.__init__:226-231)."""
    values = {key: dflash2_value(config, key) for key in (*BUILD_FIELDS, "block_size")}
    ints = {key: _as_int(value) for key, value in values.items()}
    unread = [f"{key} = {values[key]!r}" for key, value in ints.items() if value is None]
    if unread:
        return [_refusal(config_file, "DFlash2 builds its convolution and candidate selector from int() of "
                         + ", ".join(unread) + " (read in dflash_config when it holds the key, else at the top "
                         "level), which raises", at_0_1_1("50-52, 346-351 (DFlash2DecoderLayer.__init__), 430-438 (DFlash2DraftModel.__init__)",
                                  DFLASH2_MODEL, "_dflash2_config_value"),
                         "dflash_config", "Write each of conv_kernel_size, conv_group_size, block_size, "
                         "selector_rank and selector_top_k in dflash_config as the draft was trained.")]
    problems = []
    hidden = config.get("hidden_size")
    group, taps, block = ints["conv_group_size"], ints["conv_kernel_size"], ints["block_size"]
    if group <= 0 or (isinstance(hidden, int) and hidden % group):
        problems.append(f"conv_group_size {group} does not divide hidden_size {hidden}")
    if taps < 1 or taps > block:
        problems.append(f"conv_kernel_size {taps} is outside [1, block_size {block}]")
    if ints["selector_rank"] < 1:
        problems.append(f"selector_rank {ints['selector_rank']} is not positive")
    vocab = config.get("vocab_size")
    if ints["selector_top_k"] < 2 or (isinstance(vocab, int) and ints["selector_top_k"] > vocab):
        problems.append(f"selector_top_k {ints['selector_top_k']} is outside [2, vocab_size {vocab}]")
    if not problems:
        return []
    return [_refusal(config_file, "DFlash2's " + "; ".join(problems) + ": the model raises ValueError at build",
                     at_0_1_1("139-146, 226-231 (CandidateSelector.__init__)", DFLASH2_MODEL, "DFlashGroupedConv.__init__"),
                     "dflash_config", "Write the values the draft was trained with.")]


def drafter_fields(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The DFlash2 drafter reads selector_top_k, output_multiplier and
    final_logit_softcapping from dflash_config only
    (execution/drafter/dflash2.py::DFlash2.__init__@tokenspeed==0.1.1:85-91):
    selector_top_k absent there is int(None) at startup; the other two
    written only at the top level are never read (the head's logits are
    served unscaled, uncapped)."""
    nested = config.get("dflash_config")
    nested = nested if isinstance(nested, Mapping) else {}
    source = at_0_1_1("85-91", DFLASH2_DRAFTER, "DFlash2.__init__")
    if nested.get("selector_top_k") is None:
        return [_refusal(config_file, "dflash_config.selector_top_k is absent: the DFlash2 drafter takes it "
                         "from dflash_config only and int(None) raises at startup (the model would read the top "
                         "level)", source, "dflash_config.selector_top_k",
                         "Write selector_top_k in dflash_config.")]
    findings = []
    for key, neutral in (("output_multiplier", 1.0), ("final_logit_softcapping", None)):
        top = config.get(key)
        if key in nested or top is None or top == neutral or (key == "final_logit_softcapping" and not top):
            continue
        findings.append(served_wrong(
            config_file, f"{key} is {top!r} at the top level only; the DFlash2 drafter reads it from "
            "dflash_config alone, so the candidates are ranked from logits without it", source, key,
            f"Write {key} in dflash_config."))
    return findings


def mla_attention(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """An MLA DFlash2 draft: the model builds MLA when `attention_mode`
    (dflash_config first, then the top level) lower-cases to "mla"
    (models/dflash2.py::_dflash2_uses_mla@tokenspeed==0.1.1:55-56), from
    int() of the five MLA widths (307-320); the engine lays its KV cache out
    for MLA only when dflash_config.attention_mode is exactly "mla"
    (configs/model_config.py::_is_dflash2_mla@tokenspeed==0.1.1:354-366,
    used at 748): otherwise the MLA latent is written into a per-head cache
    (models/dflash2.py::write_context_kv:459-482)."""
    if not uses_mla(config):
        return []
    widths = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    absent = [key for key in widths if _as_int(config.get(key)) is None]
    if absent:
        return [_refusal(config_file, "attention_mode is mla but " + ", ".join(absent) + " cannot be read by "
                         "int(): the MLA attention cannot be built", at_0_1_1("307-320", DFLASH2_MODEL, "DFlash2DecoderLayer.__init__"),
                         absent[0], "Write the MLA widths the draft was trained with.")]
    nested = config.get("dflash_config")
    if isinstance(nested, Mapping) and nested.get("attention_mode") == "mla":
        return []
    return [_refusal(config_file, f"the model builds MLA attention (attention_mode "
                     f"{dflash2_value(config, 'attention_mode')!r}) but the engine sizes the KV cache for MLA only "
                     "when dflash_config.attention_mode is exactly \"mla\": the latent is written into a per-head "
                     "cache and the first request fails",
                     at_0_1_1("354-366, 748 (ModelConfig.__init__)", MODEL_CONFIG, "_is_dflash2_mla"), "dflash_config.attention_mode",
                     "Write \"attention_mode\": \"mla\" (lower case) in dflash_config.")]


def _gqa_only(rule: Callable[[Mapping[str, Any], str], list]) -> Callable[[Mapping[str, Any], str], list]:
    """A rule of the GQA attention, which an MLA draft does not build."""

    def rule_for_gqa(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        return [] if uses_mla(config) else rule(config, config_file)

    rule_for_gqa.__name__ = rule.__name__
    rule_for_gqa.__doc__ = rule.__doc__
    return rule_for_gqa


def loader_0_1_1(gqa: FamilyLoader) -> FamilyLoader:
    """0.1.1's DFlash2 loader over its GQA DFlash loader (`gqa`)."""
    from dspark.schema.engines.tokenspeed.dflash_gqa import (
        gqa_partial_rope_nested,
        gqa_rope_parameters_need_theta,
    )

    gqa_limits = tuple(limit for limit in gqa.config_limits
                       if limit not in (gqa_partial_rope_nested, gqa_rope_parameters_need_theta)
                       and getattr(limit, "__name__", "") != "markov_head")
    load = at_0_1_1("484-557 (MLA)", DFLASH2_MODEL, "DFlash2DraftModel.load_weights")
    return dataclasses.replace(
        gqa,
        family="dflash2",
        model_class="DFlash2DraftModel",
        # A GQA draft parses as a GQA config class (as DFlash's); an MLA one
        # needs the five MLA widths on its config, which DeepSeek-V3's class holds.
        model_types=gqa.model_types + ("deepseek_v3",),
        skips=(
            # GQA: DFlashDraftModel.load_weights drops a name without a parameter
            # (models/dflash.py@tokenspeed==0.1.1:507-542); MLA: skipped by name (502).
            SkipRule(r"^embed_tokens\.", "the draft uses the target's embedding",
                     at_0_1_1("502 (MLA); models/dflash.py:507-542 (GQA)", DFLASH2_MODEL,
                                       "DFlash2DraftModel.load_weights")),
            SkipRule(r"rotary_emb\.inv_freq", "recomputed by the rotary embedding", at_0_1_1("502", DFLASH2_MODEL, "DFlash2DraftModel.load_weights")),
        ),
        # The MLA path's own loop: "model." removed, every other name needs a
        # parameter, every parameter a name (543-552).
        unexpected_rejected=(("mla", SkipRule(r".", "the MLA DFlash2 loader refuses any name without a "
                                              "parameter", load)),),
        features={
            **gqa.features,
            "fc_norm": FeatureSupport(
                supported=False,
                source=Source(GQA_MODEL, "381-398 (DFlashDraftModel.__init__: no fc_norm)", RELEASE_0_1_1,
                              qualname="DFlashDraftModel"),
                when_unsupported="the DFlash2 model has no fc_norm: shipped weights are dropped (GQA) or refused "
                "(MLA), and the taps reach fc unnormalised",
            ),
        },
        config_limits=(*gqa_limits, _gqa_only(gqa_partial_rope_nested), _gqa_only(gqa_rope_parameters_need_theta),
                       build_fields, drafter_fields, mla_attention),
        int_coerced_fields=gqa.int_coerced_fields + tuple(
            f"{where}{key}" for key in (*BUILD_FIELDS, "block_size") for where in ("", "dflash_config.")),
        sources={
            **gqa.sources,
            "model": at_0_1_1("408-563", DFLASH2_MODEL, "DFlash2DraftModel"),
            "convolution": at_0_1_1("126-187", DFLASH2_MODEL, "DFlashGroupedConv"),
            "selector": at_0_1_1("213-264", DFLASH2_MODEL, "CandidateSelector"),
            "drafter": at_0_1_1("69-124 (__init__, wire_target)", DFLASH2_DRAFTER, "DFlash2"),
            "load_weights (GQA)": Source(GQA_MODEL, "507-542", RELEASE_0_1_1, qualname="DFlashDraftModel.load_weights"),
            "load_weights (MLA)": load,
            "MLA KV cache": at_0_1_1("354-366, 748 (ModelConfig.__init__)", MODEL_CONFIG, "_is_dflash2_mla"),
        },
    )
