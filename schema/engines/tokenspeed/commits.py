"""The TokenSpeed commits dspark's rules were read at, apart from how an
installed engine is recognised (`revisions.py`, which re-exports them): a
check needs the commits, not the fingerprints."""

from __future__ import annotations

REPOSITORY = "lightseekorg/tokenspeed"
# main, for the GQA DFlash/DSpark and EAGLE-3 drafts
MAIN = "f4d8ec6e"
# the head of PR 1016, the first serving change for Kimi-K3 DSpark drafts
# (fc_norm through tokenspeed_kernel, the stream overridable by environment)
PR1016 = "5f1e48b5"
# the head of PR 1031, the serving change for Kimi-K3 DSpark drafts
PR1031 = "4b9766f6"

STREAM_ENV_VAR = "TOKENSPEED_DFLASH_AUX_STREAM"
