"""`--target`: what the target model can honour, as the engine checks it."""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.engines import FamilyLoader
from dspark.schema.engines.base import TARGET_UNLESS_WIDTHS_DIFFER
from dspark.schema.families import DraftFamily
from dspark.schema.families.eagle3_common import TAP_IDS_FIELD, default_taps
from dspark.schema.findings import Finding, Severity
from dspark.schema.records import record
from dspark.schema.rules.common import bounded_taps, default_tap_count, is_int, tap_ids, tap_width_fields
from dspark.schema.rules.token_map import TokenMapValues
from dspark.schema.rules.vocab import larger_vocab_through_d2t

# The Kimi-K3 target's config classes: their `attn_res_block_size` defaults
# to 12 when absent, and only the K3 model implements the AttnRes capture
# (configs/kimi_k3_config.py@4b9766f6:142, 183, 239, 378;
# models/kimi_k3.py@4b9766f6:2660-2680).
_ATTN_RES_MODEL_TYPES = ("kimi_k3", "kimi_linear", "kimi_k3_vision")
_ATTN_RES_DEFAULT_BLOCK = 12
# Multimodal target configs whose config class builds the language model
# from `text_config` alone (its hidden_size and vocab_size are properties
# over it; a text_config without a field takes its class default, never
# the wrapper's top-level value): configs/kimi_k3_config.py@f4d8ec6e:390-420,
# configs/kimi_k25_config.py@f4d8ec6e:159-200; models/kimi_k3.py@f4d8ec6e:
# 3016-3017.
_TEXT_CONFIG_WRAPPERS = ("kimi_k3", "kimi_k25")
_MISSING = object()
@record
class TargetFacts:
    """The fields of a target model's config that a draft depends on.
    Values nested under `text_config` (a multimodal config's language
    model) come first; for Kimi-K3 and Kimi-K2.5 configs they are the only
    ones read."""

    source: str
    hidden_size: Any = None
    num_hidden_layers: Any = None
    vocab_size: Any = None
    attn_res_block_size: Any = None
    model_type: Any = None
    attn_res_declared: bool = False
    architectures: tuple = ()
    context: tuple = (None, None)  # (max_position_embeddings, RoPE block): the length an engine derives

    @classmethod
    def from_config(cls, config: Mapping[str, Any], source: str) -> "TargetFacts":
        text = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else {}
        # (Given none, the engine's class would build KimiLinearConfig's
        # defaults and refuse top-level sizes, properties without a setter;
        # such a hand-written config is read at its top level here, as the
        # numbers its author meant.)
        wrapper = config.get("model_type") in _TEXT_CONFIG_WRAPPERS and bool(text)

        def pick(name: str, default: Any = None) -> Any:
            if wrapper:  # the language model is built from text_config alone
                return text.get(name, default)
            return text.get(name, config.get(name, default))

        block = pick("attn_res_block_size", _MISSING)
        return cls(
            source=source, hidden_size=pick("hidden_size"),
            num_hidden_layers=pick("num_hidden_layers"),
            vocab_size=pick("vocab_size"),
            attn_res_block_size=None if block is _MISSING else block,
            model_type=text.get("model_type") or config.get("model_type"),
            attn_res_declared=block is not _MISSING,
            architectures=tuple(a for a in config.get("architectures") or () if isinstance(a, str))
            if isinstance(config.get("architectures"), list) else (),
            context=(pick("max_position_embeddings"), pick("rope_parameters") or pick("rope_scaling")),
        )

    def captures_final_residual(self, classes: frozenset[str]) -> bool:
        """Whether tap id N (its layer count) reaches the draft: only on the
        engine's target `classes` that capture it
        (`FamilyLoader.final_residual_targets`). Without `architectures`, a
        llama model_type is taken as the Llama target it names."""
        if self.architectures:
            return any(a in classes for a in self.architectures)
        return self.model_type == "llama" and "LlamaForCausalLM" in classes

    def never_captures(self, classes: frozenset[str]) -> bool:
        """Whether the target's model class is one of the engine's that
        return no captured states (`FamilyLoader.targets_without_capture`)."""
        return bool(self.architectures) and self.architectures[0] in classes

    def is_attn_res_model(self) -> bool:
        return self.model_type in _ATTN_RES_MODEL_TYPES

    def effective_attn_res_block_size(self) -> Any:
        if not self.attn_res_declared and self.is_attn_res_model():
            return _ATTN_RES_DEFAULT_BLOCK
        return self.attn_res_block_size

    def can_supply_attn_res(self) -> bool:
        # The setter refuses a falsy block size; any truthy one enables it.
        return self.is_attn_res_model() and bool(self.effective_attn_res_block_size())

    def attn_res_reason(self) -> str:
        if not self.is_attn_res_model():
            return f"model_type {self.model_type!r} is not a Kimi-K3 target, whose model alone captures AttnRes"
        return f"attn_res_block_size = {self.attn_res_block_size!r}"


# EAGLE-3 drafters share the target's embedding (and head): the engine
# attaches it in set_embed_and_head unless target_hidden_size is present and
# differs from hidden_size (execution/factory.py@f4d8ec6e:89-94,
# drafter/eagle.py@f4d8ec6e:74). Both embeddings are padded to 64 rows
# (layers/vocab_parallel_embedding.py@f4d8ec6e:43, 82). When the padded
# shapes differ, the Llama draft rebuilds its embedding at its own vocab_size
# and raises (models/llama_eagle3.py@f4d8ec6e:727-751); the MLA draft keeps
# its own embedding if the checkpoint shipped one, else raises
# (models/deepseek_v3.py@f4d8ec6e:2408-2426).
_EMBEDDING_SHARING_FAMILIES = ("eagle3_llama", "eagle3_mla")
_VOCAB_PADDING = 64
EMBEDDING = "embed_tokens.weight"


def _padded_vocab(size: int) -> int:
    return -(-size // _VOCAB_PADDING) * _VOCAB_PADDING


def _target_embedding_refused(config: Mapping[str, Any], family: DraftFamily, draft_vocab: int, target_vocab: int,
                              shipped: frozenset[str] | None, loader: FamilyLoader | None = None) -> bool:
    """Whether the engine refuses to attach the target's embedding to this
    EAGLE-3 draft at load (see _EMBEDDING_SHARING_FAMILIES): TokenSpeed's
    attachment (`VocabHandling.embedding` TARGET_UNLESS_WIDTHS_DIFFER); SGLang
    swaps the whole parameter (models/llama.py:910-918@sglang==0.5.23)."""
    if loader is not None and loader.vocab is not None and loader.vocab.embedding != TARGET_UNLESS_WIDTHS_DIFFER:
        return False
    if family.name not in _EMBEDDING_SHARING_FAMILIES or _padded_vocab(draft_vocab) == _padded_vocab(target_vocab):
        return False
    if "target_hidden_size" in config and config["target_hidden_size"] != config.get("hidden_size"):
        return False  # nothing of the target's is attached
    if family.name == "eagle3_mla":
        return shipped is not None and EMBEDDING not in shipped
    return True


def _shares_padded_vocab(config: Mapping[str, Any], family: DraftFamily, draft_vocab: int,
                         target_vocab: int) -> bool:
    """An EAGLE-3 draft that takes the target's embedding and head whole:
    both vocabularies pad to the same rows (see _EMBEDDING_SHARING_FAMILIES)."""
    return (family.name in _EMBEDDING_SHARING_FAMILIES and _padded_vocab(draft_vocab) == _padded_vocab(target_vocab)
            and not ("target_hidden_size" in config and config["target_hidden_size"] != config.get("hidden_size")))


def target_findings(
    config: Mapping[str, Any],
    target: TargetFacts,
    family: DraftFamily,
    loader: FamilyLoader | None,
    shipped: frozenset[str] | None = None,
    *,
    token_map: TokenMapValues | None = None,
) -> list[Finding]:
    """`shipped`: the served names of the tensors the checkpoint holds;
    `token_map(count)`: the first values of its d2t, read by the caller
    (called only for a draft vocabulary larger than the target's)."""
    findings: list[Finding] = []
    width_field, width_fallback = tap_width_fields(family, loader)
    checks = (
        ("TGT002", width_field, target.hidden_size, "hidden_size"),
        ("TGT004", "vocab_size", target.vocab_size, "vocab_size"),
    )
    if family.tap_count_field is not None:
        checks += (("TGT003", "target_num_hidden_layers", target.num_hidden_layers, "num_hidden_layers"),)
    for code, draft_field, target_value, target_field in checks:
        draft_value = config.get(draft_field)
        if code == "TGT002" and draft_field not in config and width_fallback is not None:
            # the width the engine builds fc for when the field is absent
            draft_field = width_fallback
            draft_value = config.get(draft_field)
        if not is_int(target_value):
            findings.append(Finding(
                "TGT001",
                f"{target.source}: {target_field} is missing or not an integer "
                f"({target_value!r}); cannot verify the draft's {draft_field}.",
                file=target.source,
                detail={"field": target_field},
            ))
            continue
        if is_int(draft_value) and draft_value != target_value:
            severity = None
            why = {
                "TGT002": "the engine fails at the first context write (captured width mismatch)",
                "TGT003": "the engine never compares them; taps are checked against the real layer count",
                "TGT004": "the engine never compares them, and the draft can propose token ids the target "
                "does not have",
            }[code]
            ending = "This draft was trained for another target."
            startup = loader.startup_target_checks if loader is not None else None
            if startup is not None and code in ("TGT003", "TGT004"):
                # compared with the loaded target before the server starts
                findings.append(Finding(
                    code,
                    f"draft {draft_field} = {draft_value} but the target ({target.source}) has {target_field} = "
                    f"{target_value}: the engine compares them at startup and refuses to start "
                    f"({startup.cite()}). {ending}",
                    file=target.source,
                    detail={"draft": draft_value, "target": target_value, "field": draft_field,
                            "source": startup.cite()},
                    severity=Severity.ERROR,
                ))
                continue
            if code == "TGT004" and _target_embedding_refused(config, family, draft_value, target_value, shipped,
                                                              loader):
                why = (f"the engine shares the target's embedding with the draft, and its "
                       f"{_padded_vocab(target_value)} padded rows do not fit the draft's "
                       f"{_padded_vocab(draft_value)}: it refuses the draft at load")
                ending = ("Train or export the draft with the target's vocab_size"
                          + (", or ship the draft's own embed_tokens.weight." if family.name == "eagle3_mla" else "."))
            elif code == "TGT004" and draft_value > target_value and _shares_padded_vocab(
                    config, family, draft_value, target_value):
                severity, why, ending, extra = larger_vocab_through_d2t(
                    config, family, target_value, _padded_vocab(target_value), shipped, token_map, why, ending)
                findings.append(Finding(
                    code,
                    f"draft {draft_field} = {draft_value} but the target ({target.source}) has "
                    f"{target_field} = {target_value}: {why}. {ending}",
                    file=target.source,
                    detail={"draft": draft_value, "target": target_value, "field": draft_field, **extra},
                    severity=severity,
                ))
                continue
            elif code == "TGT004" and draft_value < target_value:
                # Every draft id is a target id: the engine loads and serves
                # it (padded vocabularies differ across sizes of one
                # tokenizer); the token tables' own rules judge the rest.
                severity = Severity.WARNING
                why = "the engine never compares them, and every draft token id is a target id"
                ending = "Check the draft was trained with this target's tokenizer."
            findings.append(Finding(
                code,
                f"draft {draft_field} = {draft_value} but the target ({target.source}) has "
                f"{target_field} = {target_value}: {why}. {ending}",
                file=target.source,
                detail={"draft": draft_value, "target": target_value, "field": draft_field},
                severity=severity,
            ))
    if loader is not None and target.never_captures(loader.targets_without_capture):
        hosts = ("Kimi-K3, Kimi-K2.5, Qwen3.5 or MiniMax-M3, whose classes the DFlash drafter wires to"
                 if loader is not None and loader.target_classes is not None
                 else "Llama, DeepSeek/Kimi, GPT-OSS, MiniMax")
        findings.append(Finding(
            "TGT006",
            f"the target ({target.source}) is {target.architectures[0]}, whose model in the engine never "
            f"captures hidden states (its forward returns none, {loader.sources['targets without capture'].cite()}): the "
            f"{family.name} draft gets no taps to read. Serve it with a target whose model captures "
            f"({hosts}).",
            file=target.source,
            detail={"architecture": target.architectures[0]},
        ))
        return findings
    findings += _drafter_host_findings(target, family, loader, config)
    findings += tap_range_findings(config, target, family, loader)
    findings += colliding_default_taps(config, target, family, loader)
    return findings


def _drafter_host_findings(target: TargetFacts, family: DraftFamily, loader: FamilyLoader | None,
                           config: Mapping[str, Any]) -> list[Finding]:
    """TGT007: a target class the family's drafter (its variant's, where the
    engine hosts variants on different classes) cannot wire itself to."""
    findings: list[Finding] = []
    variant = (config.get("architectures") or [None])[0] if isinstance(config.get("architectures"), list) else None
    variant = variant if isinstance(variant, str) else None
    hosts = None if loader is None else loader.variant_target_classes.get(variant, loader.target_classes)
    if hosts is not None and target.architectures and target.architectures[0] not in hosts:
        wiring = loader.sources.get("target classes")
        cited = wiring.cite() if wiring else None
        takes = loader.target_wiring or ("the engine's DFlash drafter takes get_input_embeddings() (no argument), "
                                         "lm_head, the logits processor and set_dflash_layers_to_capture from it")
        kind = f"{family.name} draft" + (f" ({variant})" if variant in loader.variant_target_classes else "")
        supported = sorted(hosts)
        named = ", ".join(supported[:12]) + (f" and {len(supported) - 12} more" if len(supported) > 12 else "")
        findings.append(Finding(
            "TGT007",
            f"the target ({target.source}) is {target.architectures[0]}, which cannot host a {kind}: "
            f"at startup {takes}, and this class lacks one, so the engine refuses to start ({cited}). "
            f"It serves {kind}s on {named} only.",
            file=target.source,
            detail={"architecture": target.architectures[0], "supported": supported, "source": cited,
                    "variant": variant},
        ))
    return findings


def tap_range_findings(config: Mapping[str, Any], target: TargetFacts, family: DraftFamily,
                        loader: FamilyLoader | None) -> list[Finding]:
    """TGT005 for taps the target's own capture setter refuses or drops,
    TGT008 for ids a Kimi-K3 target reads one-based."""
    findings: list[Finding] = []
    layer_ids, _ = bounded_taps(family, config, loader)
    if is_int(target.num_hidden_layers) and isinstance(layer_ids, list) and loader is not None:
        low, high = loader.tap_low, target.num_hidden_layers + loader.tap_high_offset
        source = loader.sources.get("taps vs target").cite() if loader.sources.get("taps vs target") else None
        if loader.target_classes is not None and target.model_type:
            # A DFlash-style draft's taps are checked by the target's own
            # set_dflash_layers_to_capture: the K3 model captures a layer's
            # output in place, [0, N-1] (models/kimi_k3.py@4b9766f6:2627-2648);
            # the others capture it entering the next layer, [0, N-2]
            # (models/base/causal_lm.py@4b9766f6:146-165,
            # models/deepseek_v3.py@4b9766f6:1697-1715, which models/kimi_k25.py@4b9766f6:285-297
            # hands a Kimi-K2.5 target's capture to).
            # A target config naming no model_type keeps the family's own range.
            high = target.num_hidden_layers - (1 if target.is_attn_res_model() else 2)
            if not loader.target_wiring:
                source = ("models/kimi_k3.py@4b9766f6:2627-2648" if target.is_attn_res_model() else
                          "models/base/causal_lm.py@4b9766f6:146-165; models/deepseek_v3.py@4b9766f6:1697-1715")
        hosted = loader.target_classes is None or not target.architectures \
            or target.architectures[0] in loader.target_classes
        one_based = default_tap_count(family, loader) is not None and target.is_attn_res_model() and hosted
        if one_based:
            # An EAGLE-3 draft on Kimi-K3: the K3 model takes the ids unchanged
            # as one-based completed-layer ids and refuses any outside [1, N]
            # (models/kimi_k3.py@f4d8ec6e:2580-2599; the wrapper hands them on,
            # 3023-3028), capturing layer id-1's output (:2555).
            low, high, source = 1, target.num_hidden_layers, _K3_EAGLE3_SOURCE
        numbering = loader.taps.numbering if loader.taps is not None else None
        if numbering is not None and numbering.shift is not None and not one_based \
                and all(is_int(t) for t in layer_ids):
            # A target that captures the ids as they are rather than one
            # higher (SGLang's DeepSeek targets, when the first id is not 1)
            # takes them one higher too.
            shift = numbering.shift(layer_ids, target.architectures[0] if target.architectures else None)
            low, high = low - shift, high - shift
        final = (target.num_hidden_layers
                 if loader.tap_final_residual and target.captures_final_residual(loader.final_residual_targets)
                 and not one_based else None)
        outside = [t for t in layer_ids if is_int(t) and not (low <= t <= high or t == final)]
        if outside:
            findings.append(Finding(
                "TGT005",
                f"taps {outside} cannot be captured from the target ({target.source}, "
                f"{target.num_hidden_layers} layers, model_type {target.model_type!r}): the engine accepts tap "
                f"ids in [{low}, {high}]"
                + (f" and {final}" if final is not None else "")
                + f" for a {family.name} draft on it and "
                + ("refuses the draft at startup" if one_based else loader.taps_outside_range) + ".",
                file=target.source,
                detail={"outside": outside, "target_layers": target.num_hidden_layers, "range": [low, high],
                        "source": source},
            ))
        elif one_based and layer_ids:
            findings.append(_one_based_taps(layer_ids, target))
    return findings


_K3_EAGLE3_SOURCE = "models/kimi_k3.py@f4d8ec6e:2580-2599, 2555, 3023-3028"


def _one_based_taps(ids: list, target: TargetFacts) -> Finding:
    """The Kimi-K3 target reads EAGLE-3 tap ids one-based; every other
    target reads them from 0 (they add 1 before capturing). The same list
    feeds one layer earlier there. Right for a draft exported for K3 in its
    numbering; the trainers dspark reads (TorchSpec, SpecForge, speculators
    after convert) write lists counted from 0 and know no K3 target, so
    which one this is cannot be told from the files: a warning."""
    earlier = [t - 1 for t in ids]
    raised = [t + 1 for t in ids]
    if max(raised) <= target.num_hidden_layers:
        fix = f"needs each id raised by 1 ({raised})"
    else:
        fix = f"cannot be served here: raised by 1, {max(raised)} is past the target's {target.num_hidden_layers} layers"
    return Finding(
        "TGT008",
        f"the target ({target.source}) is a Kimi-K3 model, which reads EAGLE-3 tap ids as one-based completed "
        f"layers: {ids} feed the outputs of layers {earlier} counted from 0, one layer earlier than the same "
        "ids on any other target. Right for a draft exported for Kimi-K3 in that numbering; a draft whose list "
        f"counts from 0, as TorchSpec, SpecForge and speculators write them, {fix}.",
        file=target.source,
        detail={"ids": list(ids), "captured_layers": earlier, "source": _K3_EAGLE3_SOURCE},
        severity=Severity.WARNING,
    )


# With no tap list it reads, an EAGLE-3 target captures layers
# [2, N//2, N-3] in its +1 numbering, and its layer loop captures each layer
# once, in layer order, however often the list names it
# (models/base/causal_lm.py@f4d8ec6e:133-144 and
# models/base/transformer_model.py@f4d8ec6e:219-221; a set in
# models/deepseek_v3.py@f4d8ec6e:1688-1693, 1591-1593). On a target of 1, 2,
# 4, 5 or 6 layers the three name fewer distinct layers it has, and fc,
# built for three taps, gets fewer states. A Kimi-K3 target takes the same
# three as one-based ids and refuses them at startup unless they are
# ascending, distinct and within [1, N] (models/kimi_k3.py@f4d8ec6e:2580-2599).
_DEFAULT_CAPTURE_SOURCE = ("models/base/causal_lm.py@f4d8ec6e:133-144; models/base/transformer_model.py@f4d8ec6e:"
                           "219-221; models/deepseek_v3.py@f4d8ec6e:1688-1693, 1591-1593")


def colliding_default_taps(config: Mapping[str, Any], target: TargetFacts, family: DraftFamily,
                            loader: FamilyLoader | None) -> list[Finding]:
    layers = target.num_hidden_layers
    defaults_count = default_tap_count(family, loader)
    if defaults_count is None or not is_int(layers) or tap_ids(family, loader, config)[0] is not None:
        return []
    count = loader.taps.draft_count(config) if loader is not None and loader.taps is not None else family.dims["S"](config)
    if count != defaults_count:
        return []  # TAP001 already says the count differs from the defaults'
    defaults = [tap + 1 for tap in default_taps(layers)]  # in the target's +1 numbering
    detail = {"draft_taps": count, "target_layers": layers, "default_layers": defaults}
    if target.is_attn_res_model():
        if defaults == sorted(set(defaults)) and all(1 <= layer <= layers for layer in defaults):
            return []
        what = (f"the Kimi-K3 target ({target.source}, {layers} layers) takes its default ids {defaults}, which are "
                f"not ascending, distinct ids within [1, {layers}]: it refuses the draft at startup")
        detail["source"] = _K3_EAGLE3_SOURCE
    else:
        captured = sorted({layer for layer in defaults if 0 <= layer < layers})
        if len(captured) == count:
            return []
        what = (f"the target ({target.source}, {layers} layers) captures its default layers {defaults} (ids "
                f"{default_taps(layers)}); it captures each layer once, so fc, built for {count} taps, gets "
                f"{len(captured)} and the draft fails at the first request")
        detail.update(captured_layers=captured, source=_DEFAULT_CAPTURE_SOURCE)
    return [Finding(
        "TAP001",
        f"the draft names no tap list the target reads, so {what}. Write the list the draft was trained on in "
        f"eagle_config.{TAP_IDS_FIELD}.",
        file=target.source,
        detail=detail,
    )]


def declared_width_on_target(finding: Finding, target: TargetFacts, config: Mapping[str, Any]) -> Finding:
    """The Llama EAGLE-3 draft's CFG003 for a `target_hidden_size` that
    differs from `hidden_size`, judged on a target: the model builds fc from
    hidden_size and reads target_hidden_size only to stop sharing the
    target's embedding and head (models/llama_eagle3.py@f4d8ec6e:462-470,
    727-733). On a target exactly hidden_size wide the taps fit, and the
    draft is served with its own embedding and head (which the vocabulary
    rules require it to ship): a warning that the field is wrong."""
    detail = finding.detail or {}
    if (finding.code != "CFG003" or detail.get("field") != "target_hidden_size"
            or not str(detail.get("source", "")).startswith("models/llama_eagle3.py")
            or not is_int(target.hidden_size) or target.hidden_size != config.get("hidden_size")):
        return finding
    return Finding(
        "CFG003",
        f"{finding.file}: target_hidden_size = {config.get('target_hidden_size')!r}, but the target "
        f"({target.source}) is {target.hidden_size} wide, as hidden_size says: LlamaForCausalLMEagle3 builds fc "
        "from hidden_size, so the taps fit, and only stops sharing the target's embedding and head, which this "
        "draft must ship. Set target_hidden_size to the target's width or drop it, so other loaders agree.",
        file=finding.file,
        detail={**detail, "target_hidden_size": target.hidden_size},
        severity=Severity.WARNING,
    )
