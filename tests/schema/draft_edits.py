"""What several schema tests do to a written draft, and how they read a
citation: one copy here, imported by name (the folder is on the path)."""

from __future__ import annotations

import json
import re
from pathlib import Path


def set_config_fields(folder: Path, **fields) -> Path:
    """Set top-level keys of a written draft's config.json (None drops the
    key); its tensors stay as written."""
    config = json.loads((folder / "config.json").read_text())
    for key, value in fields.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def without_qualname(citation: str) -> str:
    """A citation without its `::Qualified.name` (the lines and commit are
    what these tests pin)."""
    return re.sub(r"::[\w.]+(?=@)", "", citation)
