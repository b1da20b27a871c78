"""The resolved view of a draft: what the serving side will do with it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ResolvedDraft:
    """What the serving side will do with this draft, as far as the config
    and the shipped tensors tell."""

    family: str | None = None
    fc_norm_declared: Any = None  # the raw value; None when absent
    fc_norm_shipped: int = 0  # number of fc_norm.* tensors shipped
    fc_norm: bool = False  # declared true
    stream: str | None = None  # effective stream; None when unresolvable
    stream_declared: str | None = None
    stream_source: str = "default"
    target_layer_ids: list[int] = field(default_factory=list)
    num_hidden_layers: int | None = None
    hidden_size: int | None = None
    target_hidden_size: int | None = None
    target_checked: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)
