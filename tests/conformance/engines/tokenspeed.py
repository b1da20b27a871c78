"""The TokenSpeed harness: runs a TokenSpeed release from PyPI (its wheel's
Python code, in an environment of its own) over draft folders and reports
what its startup path did with each (see tokenspeed_probe.py for the steps,
tokenspeed_stubs.py for what stands in for the GPU).

The environment holds torch 2.13.0 (CPU) and, at the versions the wheel's
METADATA pins, only the libraries that its config, model, loader and drafter
modules import (REQUIRED_DISTRIBUTIONS). The compiled packages it depends on
(tokenspeed-kernel, -scheduler, -mooncake, -smg, ...) are not installed:
their modules are stand-ins, except tokenspeed-kernel's pure-Python
`platform` module, read from that wheel at the version pip resolves.
"""

from __future__ import annotations

import re
from pathlib import Path

import environments
from outcomes import NO_RUN, Case, Outcome, read_outcomes, write_cases

ENGINE = "tokenspeed"
# 0.1.1 (October 2026) is what `pip install tokenspeed` gives. 0.1.0 wires
# its drafter otherwise (inside ModelExecutor.__init__, no
# execution/factory.py::configure_draft_target, no K3 DSpark or GQA DSpark
# model, no DSPARK algorithm): the probe takes its 0.1.0 path there.
RELEASES: tuple[str, ...] = ("0.1.0", "0.1.1")

# What the probe's imports load (tokenspeed.runtime's config, model, loader,
# drafter and server-argument modules, and what they import at module top),
# by distribution name as the METADATA spells it. Checked by listing the
# distributions of the modules a probe process has loaded.
REQUIRED_DISTRIBUTIONS = (
    "transformers", "compressed-tensors", "einops", "huggingface_hub", "msgspec", "numpy", "orjson",
    "packaging", "pillow", "psutil", "pybase64", "pydantic", "pyzmq", "requests", "setproctitle", "tqdm",
    "viztracer", "aiohttp", "fastapi",
)
KERNEL_DISTRIBUTION = "tokenspeed-kernel"
# The tokenspeed-kernel a `pip install tokenspeed==V` resolves: the newest
# that meets the METADATA's bound (>=0.1.4 at 0.1.1; 0.1.3 and 0.1.4 are on
# the index; 0.1.0 asks >=0.1.3.dev0, which also resolves to 0.1.4). Only
# its `platform` module is read.
KERNEL_FOR_RELEASE = {"0.1.0": "0.1.4", "0.1.1": "0.1.4"}
BATCH_SECONDS_PER_CASE = 150

_REQUIREMENT = re.compile(r"^Requires-Dist:\s*([A-Za-z0-9_.\-]+)\s*(.*)$")


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _metadata_requirements(code: Path, version: str) -> dict[str, str]:
    """{normalised name: requirement as written} for the release's
    unconditional requirements (no `extra ==` marker)."""
    metadata = code / f"tokenspeed-{version}.dist-info" / "METADATA"
    found = {}
    for line in metadata.read_text().splitlines():
        match = _REQUIREMENT.match(line)
        if match and "extra ==" not in match.group(2):
            name, rest = match.group(1), match.group(2).split(";")[0].strip()
            found[_normalise(name)] = f"{name}{rest}"
    return found


def _prepare(version: str) -> tuple[Path, Path, Path]:
    """(python, the release's code, tokenspeed-kernel's code)."""
    code = environments.released_code(ENGINE, version)
    requirements = _metadata_requirements(code, version)
    wanted = [requirements.get(_normalise(name), name) for name in REQUIRED_DISTRIBUTIONS]
    python = environments.environment(f"{ENGINE}-{version}", wanted, constraints=["torch==2.13.0"])
    kernel = environments.released_code(KERNEL_DISTRIBUTION, KERNEL_FOR_RELEASE[version])
    return python, code, kernel


def run(version: str, cases: list[Case], workdir: Path) -> dict[str, Outcome]:
    """Run the release's probe over `cases` (one process, a fork per case)."""
    if not cases:
        return {}
    try:
        python, code, kernel = _prepare(version)
    except Exception as error:  # noqa: BLE001 - any failure to prepare is a NO_RUN for every case
        return {case.id: Outcome(NO_RUN, reason=f"could not prepare tokenspeed {version}: {error}"[:2000])
                for case in cases}
    workdir.mkdir(parents=True, exist_ok=True)
    cases_file = workdir / f"tokenspeed-{version}-cases.json"
    outcomes_file = workdir / f"tokenspeed-{version}-outcomes.json"
    outcomes_file.unlink(missing_ok=True)
    write_cases(cases, cases_file)
    probe = Path(__file__).with_name("tokenspeed_probe.py")
    try:
        result = environments.run_in(python, probe, [str(cases_file), str(outcomes_file), str(kernel), version],
                                     pythonpath=[code, probe.parent],
                                     timeout=60 + BATCH_SECONDS_PER_CASE * len(cases))
        log = (result.stdout + result.stderr)[-3000:]
    except Exception as error:  # noqa: BLE001 - a batch that cannot finish gives NO_RUN, never an exception
        log = f"{type(error).__name__}: {error}"
    found = read_outcomes(outcomes_file) if outcomes_file.exists() else {}
    return {case.id: found.get(case.id) or Outcome(NO_RUN, reason=f"the probe gave no outcome: {log[-1500:]}")
            for case in cases}
