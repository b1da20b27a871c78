"""The fabricator's drafts as conformance cases: every family's good
drafts (each build option that changes what is served, each engine's
layout) and every defect `python -m dspark.examples.fabricate
--list-defects` lists, but those in the payload values (the engines load
values as they are; dspark judges them only with --deep).

These are the drafts dspark believes it understands; the suite runs them
through the engines' own code so that belief is tested. The trained layers
of a fabricated draft are read from dspark's reading of its tap ids under
the engine whose layout it was written in (the default engine when none):
the fabricator writes ids in that engine's numbering.
"""

from __future__ import annotations

import json
from pathlib import Path

from outcomes import Case

from dspark.examples.fabricate import (
    FABRICATORS,
    DefectNotApplicable,
    FabricateError,
    fabricate,
    target_config,
)

ORIGIN = "dspark-fabricator"

# Build options worth a case of their own, per family: each changes what an
# engine builds or reads (a feature, a variant, a stream).
GOOD_VARIANTS: dict[str, list[dict]] = {
    "k3_dspark": [{}, {"fc_norm": False}, {"stream": "attn_res"}, {"fc_norm": False, "stream": None}],
    "dflash_gqa": [{}, {"variant": "dspark"}],
    "dflash2": [{}, {"variant": "mla"}],
    "eagle3_llama": [{}, {"fc_norm": True}, {"norm_before_fc": True}],
    "eagle3_mla": [{}, {"fc_norm": True}],
    "eagle3_qwen3": [{}, {"fc_norm": True, "norm_before_fc": True}],
}


def _slug(options: dict) -> str:
    if not options:
        return "good"
    return "good-" + "-".join(f"{k.replace('_', '-')}-{v}".lower() for k, v in options.items())


def _write_target(workdir: Path, family: str) -> Path:
    path = workdir / "targets" / f"{family}.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(target_config(family, "tiny"), indent=1))
    return path


def _trained_layers(folder: Path, target: Path, engine: str | None) -> list[int] | None:
    """The layers the fabricator meant: its ids read in the numbering of
    the engine whose layout it wrote (dspark's own reading, see the module
    docstring)."""
    from dspark.converters.check import check_checkpoint
    from dspark.schema.errors import DsparkError

    try:
        report = check_checkpoint(folder, target=target, engine=engine)
    except DsparkError:
        return None
    return report.resolved.tap_layers


def build(workdir: Path, *, engine: str | None = None) -> list[Case]:
    """Write every fabricated draft under `workdir/fabricated` and return
    the cases. `engine` (`NAME` or `NAME@REV`) adds that engine's layout of
    each good draft beside the default one."""
    root = workdir / "fabricated"
    cases: list[Case] = []
    engine_name = engine.partition("@")[0] if engine else None
    for family, fab in FABRICATORS.items():
        target = _write_target(workdir, family)
        layouts = [None] + ([engine_name] if engine_name else [])
        if fab.engine and fab.engine not in layouts:
            layouts.append(fab.engine)
        for layout in layouts:
            for options in GOOD_VARIANTS.get(family, [{}]):
                name = _slug(options) + (f"-{layout}-layout" if layout else "")
                folder = root / family / name
                try:
                    fabricate(folder, family=family, engine=layout, **options)
                except (FabricateError, DefectNotApplicable):
                    continue
                cases.append(Case(id=f"fabricated/{family}/{name}", folder=str(folder), origin=ORIGIN,
                                  family=family, target_config=str(target),
                                  trained_layers=_trained_layers(folder, target, layout or fab.engine),
                                  expect="a good draft"))
        for defect_name, defect in fab.defects.items():
            if defect.deep:
                continue  # payload values: the engines load them as they are
            folder = root / family / defect_name
            try:
                fabricate(folder, family=family, defect=defect_name, engine=fab.engine)
            except (FabricateError, DefectNotApplicable):
                continue
            good = root / family / ("good" + (f"-{fab.engine}-layout" if fab.engine else ""))
            # a defect in the tap ids is the list itself: what it was trained on is not the good draft's
            trained = None if defect_name.startswith("tap") else _trained_layers(good, target, fab.engine)
            cases.append(Case(id=f"fabricated/{family}/{defect_name}", folder=str(folder), origin=ORIGIN,
                              family=family, target_config=str(target),
                              trained_layers=trained,
                              expect=f"{defect.code}: {defect.description}"))
    return cases
