"""The tap list a trainer recorded as the one its training data was
captured from, written into the draft config convert writes.

A trainer may capture other layers than its draft config lists (a run-level
override): TorchSpec's `inference.aux_hidden_states_layers`, SpecForge's
`model.aux_hidden_state_layer_ids` (recorded in the checkpoint as
`capture_layers`). Both number layers as the serving engine does (their
defaults are the layers TokenSpeed captures without ids). The recorded list
is what the draft learned from; the config's own is then wrong.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from dspark.schema.families import DraftFamily
from dspark.schema.findings import Finding


def with_trained_taps(
    config: Mapping[str, Any], family: DraftFamily, taps: list[int], *, config_file: str, source: str, cite: str
) -> tuple[dict[str, Any], list[Finding]]:
    """`config` with `taps` where the family's draft and target read tap ids,
    and an SRC007 note, when they differ from what it declares."""
    out = copy.deepcopy(dict(config))
    declared, where = family.tap_ids(out)
    if declared == list(taps):
        return out, []
    _put_taps(out, family, list(taps))
    said = f"says {declared} ({where})" if declared else "gives none"
    return out, [Finding(
        "SRC007",
        f"{config_file}: taps {list(taps)} from {source}: the layers the training data was captured from "
        f"({cite}). The draft config {said}; convert writes {list(taps)} as {family.tap_ids_field}.",
        file=config_file,
        detail={"field": family.tap_ids_field, "value": list(taps), "declared": declared, "source": source},
    )]


def _put_taps(config: dict[str, Any], family: DraftFamily, taps: list[int]) -> None:
    config[family.tap_ids_field] = list(taps)
    section = config.get(family.tap_ids_section) if family.tap_ids_section else None
    if isinstance(section, dict):
        section[family.tap_ids_field] = list(taps)
    if family.tap_count_field and family.tap_count_field in config:
        config[family.tap_count_field] = len(taps)
