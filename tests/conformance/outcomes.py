"""The data the conformance suite passes between its parts.

A `Case` is one draft folder to judge (with the target and launch it is
meant for); an `Outcome` is what one engine release's own code did with it.
Both travel as JSON between the suite (which runs in dspark's environment)
and the harnesses (which run in each engine release's own environment), so
they are plain dataclasses of JSON values.

Tap numbering, everywhere in this suite: a layer k in `trained_layers` and
`captured_layers` means "the residual stream after target decoder layer k"
(0-based), the number SpecForge and SGLang write. vLLM's ids are one more
(its hidden_states[k] is the input of layer k); a harness converts what its
engine captures to this numbering before it reports it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

# What an engine release did with a draft.
LOADED = "loaded"              # built, every parameter written, served as trained
REFUSED = "refused"            # an exception from the engine's own code (config, build, load, startup)
SERVED_WRONG = "served_wrong"  # loaded without a word, but not as trained (reason says what)
NO_RUN = "no_run"              # the harness could not run the engine's code: no verdict
STATUSES = (LOADED, REFUSED, SERVED_WRONG, NO_RUN)


@dataclass
class Case:
    """One draft folder to judge.

    id: stable and readable, `SET/ORIGIN/NAME` (`fabricated/k3_dspark/good`,
        `trainers/speculators/eagle3_llama/train-dry-run`).
    folder: the draft folder, as the engine would be pointed at it.
    origin: who wrote it: `dspark-fabricator`, `speculators@0.9.0`,
        `specforge@0.2.0`, or `dspark-convert:<engine spec>` for a convert
        output (then `source_case` names the case it was converted from).
    family: dspark's family name when the writer knows it, else None.
    target_config: a config.json of the (tiny) target the draft is meant
        for; harnesses build that target to read what it captures.
    launch: server flags in the engine's own spelling, or None (defaults).
    trained_layers: the target layers the draft was trained on, in the
        suite's numbering (see the module docstring), or None when unknown.
    expect: for a deliberate defect, what the writer meant to break; free
        text, shown beside disagreements.
    trained_norm: for an EAGLE-3 draft whose trainer's own class said how
        it normed its states, {"logits_normed", "normed_state_fed_back"}
        (booleans); harnesses compare what the built draft does.
    check_without_target: dspark judges the folder without --target (the
        engine still runs on `target_config`): what the config says alone.
    """

    id: str
    folder: str
    origin: str
    family: str | None = None
    target_config: str | None = None
    launch: str | None = None
    trained_layers: list[int] | None = None
    expect: str = ""
    source_case: str | None = None
    trained_norm: dict[str, bool] | None = None
    check_without_target: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Case":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class Outcome:
    """What one engine release's own code did with one case.

    status: one of STATUSES.
    reason: the engine's own message (refused), what was not served as
        trained (served_wrong), why the harness could not run (no_run), or
        a short note (loaded).
    stage: where it was decided: config, build, load, capture, startup.
    captured_layers: what the target captures for the draft, in the suite's
        numbering, where the harness got that far.
    unwritten: parameters the loader never wrote.
    """

    status: str
    reason: str = ""
    stage: str = ""
    captured_layers: list[int] | None = None
    unwritten: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown outcome status {self.status!r}; one of {STATUSES}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Outcome":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def write_cases(cases: list[Case], path: Path) -> None:
    path.write_text(json.dumps([c.to_json() for c in cases], indent=1))


def read_cases(path: Path) -> list[Case]:
    return [Case.from_json(item) for item in json.loads(path.read_text())]


def write_outcomes(outcomes: dict[str, Outcome], path: Path) -> None:
    path.write_text(json.dumps({k: v.to_json() for k, v in outcomes.items()}, indent=1))


def read_outcomes(path: Path) -> dict[str, Outcome]:
    return {k: Outcome.from_json(v) for k, v in json.loads(path.read_text()).items()}


def norm_problems(case: Case, draft) -> list[str]:
    """The built EAGLE-3 draft's norms against how it was trained
    (`Case.trained_norm`). Every engine's EAGLE-3 model computes the logits
    from the normed state and feeds back the normed state when its
    `norm_output` attribute is set, the un-normed one otherwise
    (vllm/model_executor/models/llama_eagle3.py::LlamaModel.forward@0.33.0:
    252, 283-288; sglang/srt/models/llama_eagle3.py::LlamaModel.forward@
    0.5.23:207, 264-269; tokenspeed/runtime/models/llama_eagle3.py::
    Eagle3LlamaModel.forward@0.1.1:460, 527-539); the attribute is what the
    engine's own config reading set."""
    trained = case.trained_norm
    inner = getattr(draft, "model", None)
    if not trained or inner is None or not hasattr(inner, "norm_output"):
        return []
    served = {"logits_normed": True, "normed_state_fed_back": bool(inner.norm_output)}
    problems = []
    if trained.get("logits_normed") is False:
        problems.append("the draft's head was trained on the un-normed state; the engine feeds it the normed one")
    if bool(trained.get("normed_state_fed_back")) != served["normed_state_fed_back"]:
        fed = "normed" if served["normed_state_fed_back"] else "un-normed"
        was = "normed" if trained.get("normed_state_fed_back") else "un-normed"
        problems.append(f"the engine feeds the {fed} state back between drafting steps; the draft was trained on "
                        f"the {was} one")
    return problems
