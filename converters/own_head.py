"""vLLM 0.31.0+'s DFlash drafter keeps the draft's own `lm_head` when the
config sets `has_own_lm_head`, whether or not the checkpoint shipped one
(`FamilyLoader.head_from_target` HEAD_NOT_SHIPPED_UNLESS_DECLARED): a GQA
DFlash draft declaring it without shipping the head is served a head no
weight was loaded into. Judged here because it needs the shipped names."""

from __future__ import annotations

from typing import Any, Mapping

from dspark.schema.engines.base import HEAD_NOT_SHIPPED_UNLESS_DECLARED, OWN_HEAD_FLAG
from dspark.schema.findings import Finding
from dspark.schema.inventory import TensorEntry

HEAD = "lm_head.weight"


def declared_own_head_findings(config: Mapping[str, Any], entries: list[TensorEntry], loader,
                               config_file: str) -> list[Finding]:
    """INV001 for `lm_head.weight` when the engine keeps the draft's own head
    because the config says it has one, and the checkpoint ships none."""
    if loader is None or loader.head_from_target != HEAD_NOT_SHIPPED_UNLESS_DECLARED:
        return []
    # imported here: a check imports only the family of the draft it judges
    from dspark.schema.families.dflash_gqa import is_dspark_variant

    if not config.get(OWN_HEAD_FLAG) or is_dspark_variant(config):
        return []
    if any(entry.served_name == HEAD for entry in entries):
        return []
    source = loader.sources.get("embedding / lm_head (dflash)")
    cited = f" ({source.cite()})" if source is not None else ""
    return [Finding(
        "INV001",
        f"{HEAD} is missing; {config_file} sets has_own_lm_head: {config.get(OWN_HEAD_FLAG)!r}, so the engine "
        f"keeps the draft's own lm_head instead of attaching the target's{cited}, and nothing loads it: the "
        "draft's logits come from an uninitialised head without a word. Ship the head the draft was trained with, "
        "or remove has_own_lm_head if it shares the target's.",
        tensor=HEAD,
        detail={"expected_shape": None, "declared": OWN_HEAD_FLAG, "source": source.cite() if source else None},
    )]
