"""`--target`: what the target model can honour, as the engine checks it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from dspark.schema.engines import FamilyLoader
from dspark.schema.families import DraftFamily
from dspark.schema.findings import Finding, Severity
from dspark.schema.rules.common import bounded_taps, is_int

# The Kimi-K3 target's config classes: their `attn_res_block_size` defaults
# to 12 when absent, and only the K3 model implements the AttnRes capture
# (configs/kimi_k3_config.py@4b9766f6:142, 183, 239, 378;
# models/kimi_k3.py@4b9766f6:2660-2680).
_ATTN_RES_MODEL_TYPES = ("kimi_k3", "kimi_linear", "kimi_k3_vision")
_ATTN_RES_DEFAULT_BLOCK = 12
_MISSING = object()


@dataclass(frozen=True)
class TargetFacts:
    """The fields of a target model's config that a draft depends on.
    Values nested under `text_config` (K3's multimodal config) count."""

    source: str
    hidden_size: Any = None
    num_hidden_layers: Any = None
    vocab_size: Any = None
    attn_res_block_size: Any = None
    model_type: Any = None
    attn_res_declared: bool = False

    @classmethod
    def from_config(cls, config: Mapping[str, Any], source: str) -> "TargetFacts":
        text = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else {}

        def pick(name: str, default: Any = None) -> Any:
            return text.get(name, config.get(name, default))

        block = pick("attn_res_block_size", _MISSING)
        return cls(
            source=source,
            hidden_size=pick("hidden_size"),
            num_hidden_layers=pick("num_hidden_layers"),
            vocab_size=pick("vocab_size"),
            attn_res_block_size=None if block is _MISSING else block,
            model_type=text.get("model_type") or config.get("model_type"),
            attn_res_declared=block is not _MISSING,
        )

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


def target_findings(
    config: Mapping[str, Any],
    target: TargetFacts,
    family: DraftFamily,
    loader: FamilyLoader | None,
) -> list[Finding]:
    findings: list[Finding] = []
    checks = (
        ("TGT002", family.target_width_field, target.hidden_size, "hidden_size"),
        ("TGT004", "vocab_size", target.vocab_size, "vocab_size"),
    )
    if family.tap_count_field is not None:
        checks += (("TGT003", "target_num_hidden_layers", target.num_hidden_layers, "num_hidden_layers"),)
    for code, draft_field, target_value, target_field in checks:
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
            if code == "TGT004" and draft_value < target_value:
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
    layer_ids, _ = bounded_taps(family, config)
    if is_int(target.num_hidden_layers) and isinstance(layer_ids, list) and loader is not None:
        low, high = loader.tap_low, target.num_hidden_layers + loader.tap_high_offset
        final = target.num_hidden_layers if loader.tap_final_residual else None
        outside = [t for t in layer_ids if is_int(t) and not (low <= t <= high or t == final)]
        if outside:
            findings.append(Finding(
                "TGT005",
                f"taps {outside} cannot be captured from the target ({target.source}, "
                f"{target.num_hidden_layers} layers): the engine accepts tap ids in [{low}, {high}]"
                + (f" and {final}" if final is not None else "")
                + f" for a {family.name} draft and {loader.taps_outside_range}.",
                file=target.source,
                detail={"outside": outside, "target_layers": target.num_hidden_layers, "range": [low, high],
                        "source": loader.sources.get("taps vs target").cite()
                        if loader.sources.get("taps vs target") else None},
            ))
    return findings
