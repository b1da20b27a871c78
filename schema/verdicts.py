"""One engine's verdict on a draft, in words a deploy reads: it passes, the
engine refuses it at load (or at startup, or at the first request), or the
engine serves it wrong without a word. Decided from the findings and from
what the engine's loader does with a name it has no destination for and
with a parameter it never fills (`FamilyLoader.unexpected` / `missing`)."""

from __future__ import annotations

from typing import Iterable

from dspark.schema.findings import Finding, Severity

PASS = "pass"
REFUSED = "refused"
SERVED_WRONG = "served_wrong"
# dspark has no rules for the draft's family (ENG007): it fails, unjudged.
NOT_JUDGED = "not_judged"
OUTCOME_TEXT = {PASS: "pass", REFUSED: "refused at load", SERVED_WRONG: "served wrong",
                NOT_JUDGED: "not judged: dspark does not model this family"}
UNMODELLED_FAMILY = "ENG007"

# Errors that mean the draft loads and computes something other than what
# it was trained to: the engine raises nothing.
_SILENT = frozenset({
    "ENG001",  # a declared or shipped feature the engine does not honour
    "ENG008",  # a key the engine reads in another meaning than the trainer did
    "TAP006",  # the target captures other layers than the draft was trained on
    "LMH002",  # a trained head dropped for the tied embedding
    "VOC001", "VOC002", "VOC003",  # d2t is never validated
    "PAY001", "PAY002", "PAY004",  # values load as they are
    "LCH002",  # the launch given serves the draft wrong: it says so itself
    "ROP003",  # positions past the rotary cache the draft was trained with; nothing checks
    "INV008",  # a fused parameter holds whichever of its two sources was read last
    "STR007",  # the environment's stream is served over the checkpoint's
    "OVR001",  # one of two differing declarations is served, no check between them
})
# A name without a destination (or a declared tensor missing) is silent
# only when the loader drops it (or leaves the parameter as it was).
_UNEXPECTED = frozenset({"INV002", "FCN002", "FEA002"})
_MISSING = frozenset({"INV001", "FCN001", "FEA001"})


def is_silent(finding: Finding, unexpected: str | None, missing: str | None) -> bool:
    """Whether the engine loads the draft despite `finding` (an error)."""
    if finding.code == "ENG001" and (finding.detail or {}).get("shipped"):
        # weights of a feature the model does not build are names without destination
        return unexpected not in (None, "rejects")
    if finding.code in _SILENT or finding.severity is not Severity.ERROR:
        return True
    if finding.code == "SRV001":
        # Names the engine finds no parameter for, in files it opens: a
        # loader that drops them serves their parameters as they were.
        detail = finding.detail or {}
        names_only = detail.get("openable") and "renamed_count" in detail and "model_type" not in detail
        return bool(names_only) and unexpected not in (None, "rejects")
    if finding.code == "IDX004" and (finding.detail or {}).get("stray_shard"):
        # a file the index does not name is never opened: its tensors are
        # missing parameters, left as they were by a loader that does not check
        return missing not in (None, "rejects")
    if finding.code in _UNEXPECTED:
        if (finding.detail or {}).get("rejected"):
            return False  # a name this loader fails on, though it drops others
        return unexpected not in (None, "rejects")
    if finding.code in _MISSING:
        return missing not in (None, "rejects")
    detail = finding.detail or {}
    if finding.code == "FCN003":
        # an fc_norm weight missing (left as initialised) or one past the taps (no destination)
        return (missing if "missing" in detail else unexpected) not in (None, "rejects")
    if finding.code == "CFG006":
        # distinct taps out of order are captured in layer order: fc's blocks get other layers
        ids = detail.get("target_layer_ids")
        return isinstance(ids, list) and len(set(map(repr, ids))) == len(ids)
    return False


def outcome(findings: Iterable[Finding], *, unexpected: str | None, missing: str | None,
            strict: bool = False) -> tuple[str, list[Finding]]:
    """The verdict and the findings that decide it: any failing finding the
    engine stops on makes it REFUSED (the load fails first); failing
    findings it does not stop on make it SERVED_WRONG."""
    failing = [f for f in findings
               if f.severity is Severity.ERROR or (strict and f.severity is Severity.WARNING)]
    if not failing:
        return PASS, []
    unjudged = [f for f in failing if f.code == UNMODELLED_FAMILY]
    if unjudged:
        return NOT_JUDGED, unjudged
    refused = [f for f in failing if not is_silent(f, unexpected, missing)]
    return (REFUSED, refused) if refused else (SERVED_WRONG, failing)
