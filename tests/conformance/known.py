"""Disagreements between a run of an engine's own code and dspark, each
with its reason, in data.

`judged_right` names the side the reading of the engine's code says is
right:
- "dspark": the run cannot see what decides the verdict (code past what
  the harness runs, a value it cannot score); the case counts as agreeing
  by that reason, and the citation says where the engine decides it.
- "engine": dspark is wrong and not yet fixed; the case stays a
  disagreement in the summary, carrying its reason.

`engine` is a release (`vllm@0.33.0`) or a whole engine (`vllm`); `case`
is an fnmatch pattern over case ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase


@dataclass(frozen=True)
class KnownDisagreement:
    engine: str
    case: str
    judged_right: str   # "dspark" or "engine"
    reason: str
    citation: str = ""

    def matches(self, engine_release: str, case_id: str) -> bool:
        name = engine_release.partition("@")[0]
        return self.engine in (engine_release, name) and fnmatchcase(case_id, self.case)


KNOWN: tuple[KnownDisagreement, ...] = (
)


def reason_for(engine_release: str, case_id: str) -> KnownDisagreement | None:
    for entry in KNOWN:
        if entry.matches(engine_release, case_id):
            return entry
    return None
