"""The served verdict's own question: will the engine open this folder as
it is?

The contents rules judge canonical names (trainer wrappers stripped,
training-module names renamed), which is what `dspark convert` writes. The
engine strips far less: K3 DSpark and GQA drafts lose one leading `model.`
(models/kimi_k3_dspark.py@4b9766f6:503; models/dflash.py@f4d8ec6e:488-493),
and it reads only top-level `*.safetensors` (or `*.bin` when there are none)
of a folder (model_loader/loader.py@f4d8ec6e:258-294). A checkpoint whose
contents are sound but whose layout the engine cannot open gets one error,
SRV001, with the command that makes it servable.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from dspark.schema.engines import EngineProfile, FamilyLoader, default_engine
from dspark.schema.families import DraftFamily
from dspark.schema.findings import Finding
from dspark.schema.inventory import TensorEntry, printable_name
from dspark.schema.records import record

_EXAMPLES = 3


@record
class ServedLayout:
    """What the readers learned about how the checkpoint sits on disk."""

    source: str  # what the user named
    format: str
    engine_openable: bool
    why_not: str | None = None
    # Options the convert command needs as well (`--config FILE` when the
    # config was given by hand): the command printed must work as it is.
    convert_options: tuple[str, ...] = ()
    # Where the printed convert command writes; beside the source when None.
    destination: str | None = None


def layout_findings(
    layout: ServedLayout,
    family: DraftFamily,
    loader: FamilyLoader | None,
    engine: EngineProfile,
    config: Mapping[str, Any] | None,
    entries: Sequence[TensorEntry],
    contents_errors: Sequence[str] = (),
) -> list[Finding]:
    """SRV001 when the engine cannot open the folder as it is, with the
    convert command that writes what it opens. `contents_errors`: the codes
    the contents fail with as convert would write them; convert refuses
    such a draft, so the command is then given with what to fix first."""
    reasons: list[str] = []
    detail: dict[str, Any] = {"format": layout.format, "openable": layout.engine_openable}
    if not layout.engine_openable:
        reasons.append(layout.why_not or f"the engine does not read {layout.format} checkpoints")
    if loader is not None and layout.engine_openable:
        # Names matter only once the engine can open the files at all.
        renamed = [
            (e.stored_name, loader.engine_name(e.stored_name), e.served_name)
            for e in entries
            if loader.engine_name(e.stored_name) != e.served_name
        ]
        if renamed:
            shown = "; ".join(
                (f"{printable_name(stored)} (the engine's parameter is {printable_name(served)})"
                 if looked_up == stored else
                 f"{printable_name(stored)} (the engine reads it as {printable_name(looked_up)}; its parameter "
                 f"is {printable_name(served)})")
                for stored, looked_up, served in renamed[:_EXAMPLES]
            )
            more = f" and {len(renamed) - _EXAMPLES} more" if len(renamed) > _EXAMPLES else ""
            reasons.append(f"{len(renamed)} tensor names the engine does not map to its parameters: {shown}{more}")
            detail["renamed_count"] = len(renamed)
            detail["renamed"] = [{"stored": s, "engine": e, "served": c} for s, e, c in renamed[:20]]
    if loader is not None:
        model_type = (config or {}).get("model_type")
        if config is not None and model_type not in loader.model_types:
            reasons.append(
                f"config.json model_type {model_type!r} is not one the engine's config loader parses for "
                f"{loader.model_class} ({', '.join(loader.model_types)})"
            )
            detail["model_type"] = model_type
    if not reasons:
        return []
    import shlex  # only for this finding's command line

    source = layout.source
    # convert writes the default engine's layout unless told which
    for_engine = () if engine.spec == default_engine().spec else ("--engine", engine.spec)
    command = " ".join(shlex.quote(arg) for arg in (
        "dspark", "convert", source, layout.destination or source.rstrip("/") + "-served", *for_engine,
        *layout.convert_options))
    detail["command"] = command
    detail["reasons"] = reasons
    if contents_errors:
        codes = ", ".join(dict.fromkeys(contents_errors))
        advice = (f"convert cannot make it servable as it is: the contents fail below ({codes}), and convert "
                  f"refuses such a draft. Fix those first; then: {command}")
        detail["convert_refuses"] = list(dict.fromkeys(contents_errors))
    else:
        advice = f"Run: {command}"
    return [Finding(
        "SRV001",
        f"not servable as it is by {engine.spec}: " + "; ".join(reasons)
        + f". The contents are judged below as convert would write them. {advice}",
        detail=detail,
    )]
