"""Fixtures for the whole suite.

Every test runs in its own temporary folder with a clean environment, and
drafts are fabricated on demand by the real writers (torch tensors saved by
the safetensors library), never mocked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

# Environment that changes what dspark reports; a test sets what it needs.
_ISOLATED_VARIABLES = ("TOKENSPEED_DFLASH_AUX_STREAM", "DSPARK_DEBUG")


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run the test inside its own temporary folder, with none of the
    caller's dspark-relevant environment."""
    monkeypatch.chdir(tmp_path)
    for name in _ISOLATED_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.fixture
def tiny_draft(tmp_path: Path) -> Callable[..., Path]:
    """A factory for tiny K3 DSpark drafts: `tiny_draft(name="draft",
    **options)` writes `tmp_path/name` with
    `dspark.examples.fabricate.write_draft(**options)` (`defect=`,
    `fc_norm=`, `stream=`, `shards=`, `dtype=`, `prefix=`) and returns it."""
    from dspark.examples.fabricate import write_draft

    def make(name: str = "draft", **options) -> Path:
        return write_draft(tmp_path / name, **options)

    return make
