"""`--target`: what the target model can honour."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from dspark.schema.families import nested_field
from dspark.schema.findings import Finding
from dspark.schema.rules.common import is_int


@dataclass(frozen=True)
class TargetFacts:
    """The fields of a target model's config that a draft depends on.
    Values nested under `text_config` (K3's multimodal config) count."""

    source: str
    hidden_size: Any = None
    num_hidden_layers: Any = None
    vocab_size: Any = None
    attn_res_block_size: Any = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any], source: str) -> "TargetFacts":
        text = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else {}

        def pick(name: str) -> Any:
            return text.get(name, config.get(name))

        return cls(
            source=source,
            hidden_size=pick("hidden_size"),
            num_hidden_layers=pick("num_hidden_layers"),
            vocab_size=pick("vocab_size"),
            attn_res_block_size=pick("attn_res_block_size"),
        )

    def can_supply_attn_res(self) -> bool:
        value = self.attn_res_block_size
        return is_int(value) and value > 0


def target_findings(config: Mapping[str, Any], target: TargetFacts) -> list[Finding]:
    findings: list[Finding] = []
    checks = (
        ("TGT002", "target_hidden_size", target.hidden_size, "hidden_size"),
        ("TGT003", "target_num_hidden_layers", target.num_hidden_layers, "num_hidden_layers"),
        ("TGT004", "vocab_size", target.vocab_size, "vocab_size"),
    )
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
            findings.append(Finding(
                code,
                f"draft {draft_field} = {draft_value} but the target ({target.source}) has "
                f"{target_field} = {target_value}. This draft was trained for another target.",
                file=target.source,
                detail={"draft": draft_value, "target": target_value, "field": draft_field},
            ))
    layer_ids, _ = nested_field(config, "target_layer_ids")
    if is_int(target.num_hidden_layers) and isinstance(layer_ids, list):
        outside = [t for t in layer_ids if is_int(t) and not 0 <= t < target.num_hidden_layers]
        if outside:
            findings.append(Finding(
                "TGT005",
                f"taps {outside} do not exist in the target ({target.source}), which has "
                f"{target.num_hidden_layers} layers.",
                file=target.source,
                detail={"outside": outside, "target_layers": target.num_hidden_layers},
            ))
    return findings
