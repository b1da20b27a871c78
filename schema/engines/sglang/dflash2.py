"""SGLang 0.5.23's loader for DFlash2 drafts (`DFlash2DraftModel`, and its
aliases `DFlash2BeamDraftModel` and `MiniMaxDFlash2DraftModel`,
sglang/srt/models/dflash.py): the GQA DFlash model (`DFlashDraftModel`,
whose loader, taps, fc and capture it inherits: `dflash_gqa.LOADER`) with a
candidate selector, served by the DFLASH worker (launched with
`--speculative-algorithm DFLASH`; the worker builds its selector sampler
from `draft_model.candidate_selector` and points the draft's `lm_head` at
the target's, speculative/dflash_worker_v2.py::DFlashWorkerV2.__init__
@sglang==0.5.23:442, ::_maybe_build_draft_sampler:907-911).

What SGLang reads, and where it differs from TokenSpeed's and vLLM's model:

* every DFlash2 field comes from `dflash_config` alone, read by the DFlash
  parser (speculative/dflash_utils.py::parse_dflash_draft_config:619-655),
  block_size excepted (there, else the top level: 608-617);
* the grouped convolutions are built by the DFlash model itself, only when
  dflash_config.conv_kernel_size is set (models/dflash.py::
  DFlashDraftModel.__init__:718-740): without it the convolutions the draft
  was trained with are dropped without a word, where TokenSpeed reads the
  top level and vLLM refuses;
* their block is the launch's (set_block_size, 806-817; 16 when neither
  the launch nor the config gives one), never refused for a missing
  block_size or a kernel wider than the block;
* selector_top_k is any positive int (1 included: TokenSpeed wants 2 or
  more); output_multiplier must be positive;
* `attention_mode` and `input_embedding_scale` are never read: GQA
  attention for every draft, the target's embedding unscaled.

0.5.20 to 0.5.22 build DFlash2 the same way (`DFlash2DraftModel`,
`CandidateSelector`, `DFlashGroupedConv` and `parse_dflash_draft_config`
are unchanged); what changed in the DFlash model around them is
`releases.dflash_loader`'s, and the aliases are 0.5.23's only.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from dspark.schema.engines.base import FamilyLoader, SkipRule, served_wrong
from dspark.schema.engines.sglang import dflash_gqa
from dspark.schema.engines.sglang.common import (
    DFLASH2_NUMBERING,
    DFLASH_MODEL,
    DFLASH_TARGET_CLASSES,
    DFLASH_UTILS,
    DFLASH_WORKER,
    DSPARK_ONLY_TARGET_CLASSES,
    at,
    refused,
)
from dspark.schema.families.dflash2 import SERVE_FIELDS
from dspark.schema.families.dflash_gqa import gqa_head_dim
from dspark.schema.findings import Finding

_PARSER = at("619-655", DFLASH_UTILS, "parse_dflash_draft_config")
_CONVS = at("718-740", DFLASH_MODEL, "DFlashDraftModel.__init__")
_SELECTOR = at("1267-1282", DFLASH_MODEL, "DFlash2DraftModel.__init__")
_GROUPS = at("543-563", DFLASH_MODEL, "DFlashGroupedConv.__init__")
_LOGITS = at("1284-1291", DFLASH_MODEL, "DFlash2DraftModel._transform_unary_logits")


def _nested(config: Mapping[str, Any]) -> Mapping[str, Any]:
    nested = config.get("dflash_config")
    return nested if isinstance(nested, Mapping) else {}


def _parsed(value: Any, minimum: int) -> tuple[int | None, str]:
    """`_parse_optional_int(value, min_value=minimum)` (dflash_utils.py::
    _parse_optional_int:501-516): int(value), refused where int() raises or
    the result is below `minimum`; the text says why."""
    try:
        parsed = int(value)
    except (TypeError, ValueError, OverflowError):
        return None, "int() cannot read it"
    if parsed < minimum:
        return None, f"it must be >= {minimum}"
    return parsed, ""


def build_fields(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The convolution and selector sizes as parse_dflash_draft_config reads
    them: `dflash_config.get(key, 0)`, never the top level, each a non-negative
    int (dflash_utils.py:619-650); the two convolution sizes and the two
    selector sizes are set together or not at all; DFlash2DraftModel needs a
    selector rank (models/dflash.py:1270-1273); a group size must divide
    hidden_size (DFlashGroupedConv.__init__:547-551)."""
    nested = _nested(config)
    values: dict[str, int] = {}
    for key in ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"):
        raw = nested.get(key, 0)
        if raw is None:  # _parse_optional_int passes None through: read as absent
            values[key] = 0
            continue
        parsed, why = _parsed(raw, 0)
        if parsed is None:
            return [refused(config_file, f"dflash_config.{key}", f"dflash_config.{key} = {raw!r}: {why}",
                            _PARSER, f"Write {key} as the draft was trained with.")]
        values[key] = parsed
    for first, second in (("conv_kernel_size", "conv_group_size"), ("selector_rank", "selector_top_k")):
        if bool(values[first]) != bool(values[second]):
            unread = [k for k in (first, second) if not values[k] and config.get(k) is not None]
            return [refused(config_file, f"dflash_config.{first}",
                            f"dflash_config has {first} = {values[first]} and {second} = {values[second]}: "
                            "SGLang's DFlash parser needs the pair set together"
                            + (f" (the top level's {', '.join(unread)} is not read)" if unread else ""),
                            _PARSER, f"Write {first} and {second} in dflash_config.")]
    if not values["selector_rank"]:
        return [refused(config_file, "dflash_config.selector_rank",
                        "dflash_config.selector_rank is absent or 0"
                        + (" (the top level's is not read)" if config.get("selector_rank") is not None else "")
                        + ": DFlash2DraftModel raises without a selector rank", _SELECTOR,
                        "Write selector_rank and selector_top_k in dflash_config.")]
    group, hidden = values["conv_group_size"], config.get("hidden_size")
    if values["conv_kernel_size"] and isinstance(hidden, int) and hidden % group:
        return [refused(config_file, "dflash_config.conv_group_size",
                        f"dflash_config.conv_group_size {group} does not divide hidden_size {hidden}: the grouped "
                        "convolution raises at build", _GROUPS, "Write the group size the draft was trained with.")]
    return []


def convolutions_built(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """Without dflash_config.conv_kernel_size the DFlash model builds no
    convolution (models/dflash.py::DFlashDraftModel.__init__:718-740), and
    its loader drops the shipped `*_conv.*` weights without a word (886-1000):
    the draft is served as plain DFlash. Sizes written at the top level only
    are never read here, where TokenSpeed reads them."""
    nested = _nested(config)
    if nested.get("conv_kernel_size") or nested.get("conv_group_size"):
        return []
    elsewhere = [key for key in ("conv_kernel_size", "conv_group_size") if config.get(key) is not None]
    return [served_wrong(
        config_file, "dflash_config has no conv_kernel_size"
        + (f" (the top level's {', '.join(elsewhere)} is not read)" if elsewhere else "")
        + ": SGLang builds the draft without its grouped convolutions and drops their weights without a word",
        _CONVS, "dflash_config.conv_kernel_size",
        "Write conv_kernel_size and conv_group_size in dflash_config.")]


def logit_fields(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """output_multiplier and final_logit_softcapping are read from
    dflash_config only (dflash_utils.py:651-655) and applied to the
    candidates' logits (models/dflash.py::DFlash2DraftModel.
    _transform_unary_logits:1284-1291): one written at the top level only is
    never read; a multiplier <= 0 is refused. input_embedding_scale is read
    nowhere in SGLang: the target's embedding is served unscaled."""
    nested = _nested(config)
    findings: list[Finding] = []
    multiplier = nested.get("output_multiplier", 1.0)
    try:
        positive = float(multiplier) > 0
    except (TypeError, ValueError, OverflowError):
        return [refused(config_file, "dflash_config.output_multiplier", f"dflash_config.output_multiplier = "
                        f"{multiplier!r}: float() cannot read it", at("651-653", DFLASH_UTILS,
                                                                      "parse_dflash_draft_config"),
                        "Write the multiplier the draft was trained with.")]
    if not positive:
        return [refused(config_file, "dflash_config.output_multiplier", f"dflash_config.output_multiplier = "
                        f"{multiplier!r}: SGLang's DFlash parser wants it positive",
                        at("651-653", DFLASH_UTILS, "parse_dflash_draft_config"),
                        "Write the multiplier the draft was trained with.")]
    softcap = nested.get("final_logit_softcapping")
    try:
        float(softcap or 0.0)
    except (TypeError, ValueError, OverflowError):
        return [refused(config_file, "dflash_config.final_logit_softcapping", "dflash_config.final_logit_softcapping "
                        f"= {softcap!r}: float() cannot read it", at("654-655", DFLASH_UTILS,
                                                                     "parse_dflash_draft_config"),
                        "Write the softcap the draft was trained with.")]
    neutral = {"input_embedding_scale": 1.0, "output_multiplier": 1.0, "final_logit_softcapping": 0.0}
    for key in SERVE_FIELDS:
        if key == "input_embedding_scale":
            value, where = (nested[key], f"dflash_config.{key}") if key in nested else (config.get(key), key)
            if value is None or value == neutral[key]:
                continue
            findings.append(served_wrong(
                config_file, f"{where} = {value!r}, but SGLang never reads input_embedding_scale: the draft's "
                "input is the target's embedding unscaled", at("848-884", DFLASH_MODEL,
                                                                "DFlashDraftModel.forward"),
                key, "Serve the draft on an engine that scales the embedding (TokenSpeed, vLLM), or retrain "
                "without the scale."))
            continue
        value = config.get(key)
        if key in nested or value is None or not value or value == neutral[key]:
            continue
        findings.append(served_wrong(
            config_file, f"{key} is {value!r} at the top level only; SGLang's DFlash parser reads it from "
            "dflash_config alone and ranks the candidates from logits without it",
            at("651-655", DFLASH_UTILS, "parse_dflash_draft_config"), key, f"Write {key} in dflash_config."))
    return findings


# Rules of the DSpark variant and of the DFlash GQA draft's own model that a
# DFlash2 draft never meets.
_NOT_DFLASH2 = (dflash_gqa.dspark_markov_head,)

LOADER: FamilyLoader = dataclasses.replace(
    dflash_gqa.LOADER,
    family="dflash2",
    model_class="DFlash2DraftModel",
    # its ids are mapped up by one on a Muse Glimmer target: layer outputs there too
    taps=dataclasses.replace(dflash_gqa.TAPS, numbering=DFLASH2_NUMBERING),
    skips=(
        # DFlash2DraftModel's lm_head is None until the worker points it at the
        # target's (models/dflash.py:1280-1282; dflash_worker_v2.py:907-911,
        # 1484-1485); the embedding is the target's (dflash_worker_v2.py:222-230):
        # neither name has a parameter, and the loader drops them (943-946).
        SkipRule(r"^(embed_tokens|lm_head)\.", "the draft uses the target's embedding and head",
                 at("1280-1282", DFLASH_MODEL, "DFlash2DraftModel.__init__")),
        SkipRule(r"rotary_emb\.", "recomputed by the rotary embedding",
                 at("943-946", DFLASH_MODEL, "DFlashDraftModel.load_weights")),
    ),
    # DFlashDraftModel.load_weights drops Markov-head names with the rest.
    unexpected_rejected=(),
    config_limits=(*(limit for limit in dflash_gqa.LOADER.config_limits if limit not in _NOT_DFLASH2),
                   build_fields, convolutions_built, logit_fields),
    # Nothing reads attention_mode: GQA attention for every draft, so an MLA
    # draft's projections have no destination (and q/k/v none shipped).
    fixed_features={"gqa": True, "mla": False},
    dims={**dflash_gqa.LOADER.dims, "o_head": gqa_head_dim},
    int_coerced_fields=dflash_gqa.LOADER.int_coerced_fields + tuple(
        f"dflash_config.{key}" for key in ("conv_kernel_size", "conv_group_size", "selector_rank",
                                           "selector_top_k")),
    # The DFLASH worker wires to a class with set_dflash_layers_to_capture,
    # not the DSpark-only ones (model_runner_components/attention_backend_setup.py).
    target_classes=DFLASH_TARGET_CLASSES - DSPARK_ONLY_TARGET_CLASSES,
    variant_target_classes={},
    sources={
        **{k: v for k, v in dflash_gqa.LOADER.sources.items() if "DSpark" not in k and k != "markov head"},
        "load_weights": at("886-999", DFLASH_MODEL, "DFlashDraftModel.load_weights"),
        "model": at("1264-1302", DFLASH_MODEL, "DFlash2DraftModel"),
        "convolution": at("536-591", DFLASH_MODEL, "DFlashGroupedConv"),
        "selector": at("1142-1261", DFLASH_MODEL, "CandidateSelector"),
        "config": at("588-813", DFLASH_UTILS, "parse_dflash_draft_config"),
        "block size": at("806-817", DFLASH_MODEL, "DFlashDraftModel.set_block_size"),
        "worker": at("388-616", DFLASH_WORKER, "DFlashWorkerV2.__init__"),
        "registry": at("1317-1324", DFLASH_MODEL, "EntryClass"),
    },
)
