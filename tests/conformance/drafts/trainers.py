"""Drafts written by the trainers' own released code, as conformance cases.

SpecForge 0.2.0 and speculators 0.9.0 each run in an environment of their
own (torch 2.13.0 CPU, the few libraries their writing code imports, the
release itself from its wheel on PYTHONPATH: the trainers are never
installed with their dependencies, which pin other torch builds and serving
engines). One writer process per trainer writes every folder
(`specforge_writer.py`, `speculators_writer.py`: what each writes, how, and
where its tap numbering comes from) and a manifest the cases are read from.
SpecForge runs first: `speculators convert` is tried on its exports.

Each case's `target_config` is the config.json of the tiny target the draft
was trained against (`targets_writer.py`); `trained_layers` is in the
suite's numbering (layer outputs), converted by each writer from its
trainer's own numbering.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import environments
from outcomes import Case

HERE = Path(__file__).resolve().parent
SPECFORGE = ("specforge", "0.2.0")
SPECULATORS = ("speculators", "0.9.0")
# hs-connectors is speculators' own hidden-states transport, pinned by it
# (Requires-Dist: hs-connectors==0.9.0); `speculators train` imports it.
HS_CONNECTORS = ("hs-connectors", "0.9.0")

# What each trainer's writing path imports beyond torch: read from the
# releases' METADATA (Requires-Dist), keeping only what the config, model,
# checkpoint, export/convert and CLI modules import; never the serving
# engines they pin (sglang, vllm) nor another torch.
SPECFORGE_REQUIREMENTS = ["transformers==5.8.1", "pydantic", "safetensors", "pyyaml", "numpy", "tqdm",
                          "huggingface-hub", "accelerate", "datasets"]
SPECULATORS_REQUIREMENTS = ["transformers==5.19.0", "pydantic>=2", "pydantic-settings>=2", "safetensors",
                            "loguru==0.7.3", "typer>=0.12", "rich", "click", "pyyaml", "numpy<=2.5.4", "tqdm",
                            "huggingface-hub", "openai>=2.0.0", "datasets>=4.0.0,<=5.1.0", "packaging", "httpx",
                            "aiohttp", "psutil"]
WRITER_TIMEOUT_S = 900


def _write(trainer: tuple[str, str], requirements: list[str], script: str, root: Path, args: list[str],
           extra_code: list[Path]) -> dict:
    name, version = trainer
    python = environments.environment(f"{name}-{version}", requirements, constraints=["torch==2.13.0"])
    code = [environments.released_code(name, version), *extra_code]
    result = environments.run_in(python, HERE / script, ["--root", str(root), *args],
                                 pythonpath=code, timeout=WRITER_TIMEOUT_S)
    manifest = root / "manifest.json"
    if result.returncode != 0 or not manifest.exists():
        tail = (result.stdout + result.stderr)[-3000:]
        raise RuntimeError(f"{script} failed (exit {result.returncode}):\n{tail}")
    return json.loads(manifest.read_text())


def _cases(manifest: dict, origin: str, targets: Path) -> list[Case]:
    return [Case(id=entry["id"], folder=entry["folder"], origin=origin, family=entry["family"],
                 target_config=str(targets / entry["target"] / "config.json"),
                 trained_layers=entry["trained_layers"], expect=entry["expect"], source_case=entry["source"],
                 trained_norm=entry.get("trained_norm"),
                 check_without_target=bool(entry.get("check_without_target")))
            for entry in manifest["drafts"]]


def build(workdir: Path) -> list[Case]:
    """Write every trainer's draft folder under `workdir/trainers` and
    return the cases. A writer part that failed is reported on stderr by
    the manifest's `failures` and simply has no cases."""
    root = workdir / "trainers"
    targets = root / "targets"
    specforge_root, speculators_root = root / "specforge", root / "speculators"
    for stale in (specforge_root, speculators_root):  # a draft the writers no longer write must not linger
        shutil.rmtree(stale, ignore_errors=True)
    specforge = _write(SPECFORGE, SPECFORGE_REQUIREMENTS, "specforge_writer.py", specforge_root,
                       ["--targets", str(targets)], [])
    speculators = _write(SPECULATORS, SPECULATORS_REQUIREMENTS, "speculators_writer.py", speculators_root,
                         ["--targets", str(targets), "--specforge-manifest", str(specforge_root / "manifest.json")],
                         [environments.released_code(*HS_CONNECTORS)])
    for label, manifest in (("specforge", specforge), ("speculators", speculators)):
        for part, error in manifest["failures"].items():
            print(f"trainers: {label}: {part}: {error}")
        for part, reason in manifest.get("refusals", {}).items():
            print(f"trainers: {label} refuses, as expected: {part}: {reason}")
    return (_cases(specforge, f"{SPECFORGE[0]}@{SPECFORGE[1]}", targets)
            + _cases(speculators, f"{SPECULATORS[0]}@{SPECULATORS[1]}", targets))
