"""SGLang's releases older than 0.5.23, each the delta over its newer
neighbour: only the rules that differ, each cited to both releases
(`sglang/srt/<path>::<Qualified.name>@sglang==X:<lines>`, read from the
released wheels). Everything else is read as its neighbour reads it.

* 0.5.22 (over 0.5.23), GQA DFlash, dense DSpark and DFlash2 (whose own
  classes are unchanged since 0.5.20, `dflash2_loader`):
  - the DSpark config parser reads its nested fields from `dspark_config`
    only (`speculative/dspark_components/dspark_config.py::_get_dspark_config`
    @0.5.22:196-205); 0.5.23 merges `dflash_config` under it (194-212). A
    `markov_head_type` written only in dflash_config is not found, and with a
    rank the parser raises (`parse_dspark_draft_config`@0.5.22:259-262). The
    mask token is still read there, through the DFlash parser.
  - the DFlash MLP builds silu only (`models/dflash.py::DFlashMLP.__init__`
    @0.5.22:454-459; 0.5.23 adds swigluoai, 493-510);
  - `use_gemma_norm` is never read: every norm is a plain RMSNorm
    (`DFlashAttention.__init__`@0.5.22:241-242, `DFlashDecoderLayer.__init__`
    559, 567, `DFlashDraftModel.__init__` 686, 716; 0.5.23 builds
    GemmaRMSNorm, 247-250, 610-619, 695-699, 745, 775);
  - `rope_dim` in the rope parameters is never read: the rotary width is
    head_dim x partial_rotary_factor (`DFlashAttention.__init__`@0.5.22:
    244-258; 0.5.23 takes rope_dim, 252-278);
  - no DFLASH capture on BeamForCausalLM, MuseSparkForConditionalGeneration
    (not in the package) or MiniMaxM3SparseForConditionalGeneration (no
    setter: `models/minimax_m3_vl.py`@0.5.22:217; 0.5.23:272-290); the
    registry lacks the Beam, MuseSpark, MiniCPM-V 4.7 classes and the
    DFlash2Beam, MiniMaxDFlash2 and DSparkMiniMax drafts.
* 0.5.21 (over 0.5.22): Qwen3_5ForCausalLM and Qwen3_5MoeForCausalLM have no
  EAGLE-3 capture setter (`models/qwen3_5.py::Qwen3_5ForCausalLM`@0.5.21:
  1768, the DFLASH setter only; 0.5.22:1837), nor does ExaoneMoeForCausalLM
  exist (`models/exaone_moe.py`@0.5.22:867): an EAGLE-3 draft on such a
  target stops the engine (`attention_backend_setup.py::
  configure_aux_hidden_state_capture`@0.5.21:54-55, AttributeError).
* 0.5.20 (over 0.5.21): Lfm2VlForConditionalGeneration has no DFLASH setter
  (`models/lfm2_vl.py`@0.5.20:348; 0.5.21:186); the registry lacks
  LiLiCorrDraftModel, the GigaChat-3.5, IQuest-Q1, Bailing-MM and
  DiffusionGemma classes; Kimi-K3's target classes define
  set_dspark_layers_to_capture only (`models/kimi_k3.py`@0.5.20:3056, 3512;
  0.5.21 adds the DFLASH setter, 3154, 3615): they host a GQA DSpark draft
  and refuse a GQA DFlash one.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from dspark.schema.engines.base import FamilyLoader, Source, served_wrong
from dspark.schema.engines.sglang import dflash_gqa
from dspark.schema.engines.sglang.common import (
    ARCHITECTURES,
    CAPTURE_SETUP,
    DFLASH_MODEL,
    DFLASH_TARGET_CLASSES,
    DSPARK_CONFIG,
    EAGLE3_TARGET_CLASSES,
    REGISTRY,
)
from dspark.schema.families.base import is_int
from dspark.schema.findings import Finding

RELEASES = ("0.5.22", "0.5.21", "0.5.20")
_SRT = "sglang/srt/"


def at(version: str, lines: str, path: str, qualname: str = "") -> Source:
    """A rule read from release `version`'s wheel."""
    return Source(path, lines, f"sglang=={version}", qualname)


def _both(old: Source, new: Source) -> str:
    return f"; changed in {new.commit.split('==')[1]}: {new.cite()}"


# GQA DFlash / dense DSpark, 0.5.22 and older -----------------------------------

_NEW_SECTIONS = at("0.5.23", "206-211, 194-203 (_get_nested_config)", DSPARK_CONFIG, "_get_dspark_config")
_NEW_ACT = at("0.5.23", "493-510", DFLASH_MODEL, "DFlashMLP.__init__")
_NEW_GEMMA = at("0.5.23", "247-250, 610-619 (DFlashDecoderLayer.__init__), 695-699, 745, 775 "
                            "(DFlashDraftModel.__init__)", DFLASH_MODEL, "DFlashAttention.__init__")
_NEW_ROPE = at("0.5.23", "252-278", DFLASH_MODEL, "DFlashAttention.__init__")

# dflash.py moves between releases; the rules read the same lines of each.
_DFLASH_LINES = {
    "0.5.22": {"act": "454-459", "rope": "244-258",
               "gemma": "241-242, 559, 567 (DFlashDecoderLayer.__init__), "
                        "686, 716 (DFlashDraftModel.__init__)"},
    "0.5.21": {"act": "450-455", "rope": "252-266",
               "gemma": "249-250, 554, 562 (DFlashDecoderLayer.__init__), "
                        "678, 708 (DFlashDraftModel.__init__)"},
    "0.5.20": {"act": "398-403", "rope": "201-215",
               "gemma": "198-199, 502, 510 (DFlashDecoderLayer.__init__), "
                        "624, 654 (DFlashDraftModel.__init__)"},
}


def _gemma_norm_ignored(source: Source):
    def gemma_norm_ignored(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        if not config.get("use_gemma_norm"):
            return []
        return [served_wrong(config_file, "use_gemma_norm is set, but this SGLang builds every norm of the DFlash "
                             "draft as a plain RMSNorm: weights trained as Gemma's (1 + w) scale are served as w"
                             + _both(source, _NEW_GEMMA), source, "use_gemma_norm")]

    return gemma_norm_ignored


def _rope_parameters(config: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, str]:
    for key in ("rope_scaling", "rope_parameters"):
        if isinstance(config.get(key), Mapping):
            return config[key], key
    return None, ""


def _rope_dim_ignored(source: Source):
    def rope_dim_ignored(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        rope, key = _rope_parameters(config)
        rope_dim = rope.get("rope_dim") if rope else None
        heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
        head_dim = config.get("head_dim") or (hidden // heads if is_int(hidden) and is_int(heads) and heads else None)
        factor = config.get("partial_rotary_factor", 1.0)
        if not (is_int(rope_dim) and is_int(head_dim) and isinstance(factor, (int, float))):
            return []
        served = int(head_dim * factor)
        if served == rope_dim:
            return []
        return [served_wrong(config_file, f"{key}.rope_dim = {rope_dim}, but this SGLang never reads it and "
                             f"rotates head_dim x partial_rotary_factor = {served} dims of each head"
                             + _both(source, _NEW_ROPE), source, "rope_dim")]

    return rope_dim_ignored


def dflash_loader(version: str, base: FamilyLoader) -> FamilyLoader:
    """0.5.22's GQA DFlash/DSpark loader over 0.5.23's (`base`); 0.5.21
    and 0.5.20 read these rules alike, at their own lines."""
    lines = _DFLASH_LINES[version]
    act = at(version, lines["act"], DFLASH_MODEL, "DFlashMLP.__init__")
    sections = at(version, "196-205", DSPARK_CONFIG, "_get_dspark_config")
    required = at(version, "259-262", DSPARK_CONFIG, "parse_dspark_draft_config")
    swapped = {
        dflash_gqa.activation_supported: dflash_gqa.activation_rule(("silu",), act, _both(act, _NEW_ACT)),
        dflash_gqa.dspark_markov_head: dflash_gqa.dspark_markov_head_rule(
            ("dspark_config",), required,
            f" (read from dspark_config only, {sections.cite()}, never dflash_config{_both(sections, _NEW_SECTIONS)})"),
    }
    limits = tuple(swapped.get(rule, rule) for rule in base.config_limits)
    limits += (_gemma_norm_ignored(at(version, lines["gemma"], DFLASH_MODEL, "DFlashAttention.__init__")),
               _rope_dim_ignored(at(version, lines["rope"], DFLASH_MODEL, "DFlashAttention.__init__")))
    targets = base.target_classes - _DFLASH_TARGETS_GAINED[version]
    variants = {arch: hosts - _DFLASH_TARGETS_GAINED[version] - _DFLASH_SETTERS_GAINED.get(version, frozenset())
                for arch, hosts in base.variant_target_classes.items()}
    return dataclasses.replace(
        base,
        config_limits=limits,
        target_classes=targets,
        variant_target_classes=variants,
        sources={**base.sources, "target classes": _TARGET_SOURCES[version], "dspark config": sections,
                 "activation": act},
    )


def dflash2_loader(version: str, base: FamilyLoader) -> FamilyLoader:
    """The DFlash2 loader of `version` over 0.5.23's (`base`): DFlash2DraftModel,
    its selector, convolutions and config parser are unchanged since 0.5.20
    (`models/dflash.py::DFlash2DraftModel.__init__`@0.5.20:1148-1163,
    @0.5.23:1267-1282; `speculative/dflash_utils.py::parse_dflash_draft_config`
    @0.5.20:597-822, @0.5.23:588-813; 0.5.20's `DFlash2DraftModel.compute_candidates`
    inlines the target-head top-k that 0.5.21 moves to `candidate_topk`, the
    same candidates: 0.5.20:1174-1218, 0.5.21:1228-1237); the DFlash model around them changes as
    the GQA DFlash draft's does, and the DFLASH worker wires only to a class
    with the DFLASH setter (0.5.20's Kimi-K3 classes have the DSpark one only)."""
    loader = dflash_loader(version, base)
    return dataclasses.replace(
        loader,
        target_classes=loader.target_classes - _DFLASH_SETTERS_GAINED.get(version, frozenset()),
        sources={k: v for k, v in loader.sources.items() if k != "dspark config"},
    )


def eagle3_loader(version: str, base: FamilyLoader) -> FamilyLoader:
    """An EAGLE-3 loader of `version` over 0.5.23's: the targets that capture."""
    return dataclasses.replace(base, target_classes=base.target_classes - _EAGLE3_TARGETS_GAINED[version],
                               sources={**base.sources, "target classes": _TARGET_SOURCES[version]})


# Targets and registry ------------------------------------------------------------

# What each release's newer neighbours added, accumulated: a release serves
# 0.5.23's sets less every class gained after it. Read off each wheel's
# EntryClass lists and the capture setters each class defines or inherits.
_GAINED_DFLASH = {"0.5.22": frozenset({"BeamForCausalLM", "MiniMaxM3SparseForConditionalGeneration",
                                       "MuseSparkForConditionalGeneration"}),
                  "0.5.21": frozenset(),
                  "0.5.20": frozenset({"Lfm2VlForConditionalGeneration"})}
# Kimi-K3's classes gained set_dflash_layers_to_capture in 0.5.21 (models/
# kimi_k3.py@0.5.21:3154, 3615); in 0.5.20 they define
# set_dspark_layers_to_capture only (kimi_k3.py@0.5.20:3056, 3512), so they
# host a DSPARK draft and stop the engine on a DFLASH one
# (attention_backend_setup.py::configure_aux_hidden_state_capture@0.5.20:56-66).
_DFLASH_SETTERS_GAINED = {"0.5.20": frozenset({"KimiK3ForConditionalGeneration", "KimiK3LinearForCausalLM"})}
_GAINED_EAGLE3 = {"0.5.22": frozenset(),
                  "0.5.21": frozenset({"ExaoneMoeForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"}),
                  "0.5.20": frozenset()}
_GAINED_REGISTERED = {
    "0.5.22": frozenset({"BeamForCausalLM", "DFlash2BeamDraftModel", "DSparkMiniMaxDraftModel",
                         "MiniCPMV4_7ForConditionalGeneration", "MiniMaxDFlash2DraftModel",
                         "MuseSparkForConditionalGeneration"}),
    "0.5.21": frozenset({"EmbeddingGemma2Model", "ExaoneMoeForCausalLM"}),
    "0.5.20": frozenset({"BailingMM2NativeForConditionalGeneration", "BailingMMNativeForConditionalGeneration",
                         "BailingMoeV3VLForConditionalGeneration", "DiffusionGemmaForBlockDiffusion",
                         "GigaChat35ForCausalLM", "GigaChat35ForCausalLMNextN", "IQuestQ1ForCausalLM", "IQuestQ1MTP",
                         "LiLiCorrDraftModel"}),
}


def _since(version: str, gained: Mapping[str, frozenset]) -> frozenset:
    """Every class gained after `version` (in the releases newer than it)."""
    return frozenset().union(*(gained[v] for v in RELEASES[:RELEASES.index(version) + 1]))


_DFLASH_TARGETS_GAINED = {v: _since(v, _GAINED_DFLASH) for v in RELEASES}
_EAGLE3_TARGETS_GAINED = {v: _since(v, _GAINED_EAGLE3) for v in RELEASES}
_TARGET_SOURCES = {
    "0.5.22": at("0.5.22", "40-66", CAPTURE_SETUP, "configure_aux_hidden_state_capture"),
    "0.5.21": at("0.5.21", "40-66 (no EAGLE-3 setter: AttributeError); models/qwen3_5.py:1768 (DFLASH only; "
                 "0.5.22 adds set_eagle3_layers_to_capture at 1837)", CAPTURE_SETUP,
                 "configure_aux_hidden_state_capture"),
    "0.5.20": at("0.5.20", "40-67; models/qwen3_5.py:1736 (DFLASH only; 0.5.22 adds the EAGLE-3 setter at 1837); "
                 "models/lfm2_vl.py:348 (no DFLASH setter; 0.5.21 adds it at 186)", CAPTURE_SETUP,
                 "configure_aux_hidden_state_capture"),
}


def architectures(version: str):
    """0.5.23's resolution with the classes registered after `version` gone."""
    return dataclasses.replace(
        ARCHITECTURES,
        registered=ARCHITECTURES.registered - _since(version, _GAINED_REGISTERED),
        source=at(version, ("61-91" if version == "0.5.20" else "74-114")
                  + " (first registered wins; every models/*.py EntryClass)", REGISTRY, "_ModelRegistry"),
    )


# Every class a release names is one 0.5.23 knows: nothing was removed since 0.5.20.
assert all(_since(v, _GAINED_DFLASH) <= DFLASH_TARGET_CLASSES and _since(v, _GAINED_EAGLE3) <= EAGLE3_TARGET_CLASSES
           and _since(v, _GAINED_REGISTERED) <= ARCHITECTURES.registered for v in RELEASES)
