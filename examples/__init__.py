"""Example drafts: the bundled tiny K3 DSpark draft, and `fabricate`, which
writes drafts of any size, good or with a chosen defect."""

from pathlib import Path

TINY_EXAMPLE = Path(__file__).resolve().parent / "tiny-k3-dspark"
