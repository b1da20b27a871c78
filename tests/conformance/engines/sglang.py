"""The SGLang harness: runs a released SGLang's own server-args resolution,
draft config, model registry, model construction, weight loader, target
capture set-up and drafting-worker checks over draft folders, on CPU.

The release's wheel is unpacked into the conformance cache (its Python
files only); its environment holds torch 2.13.0 (CPU) and the libraries
the config/model/loader path imports, at the versions the wheel's METADATA
pins. `sglang_probe.py` runs inside that environment (one process for
all cases, one forked child per case); `sglang_stubs.py` says which
packages are stood in for and which device-only gates are passed, each
with why loading and refusal are unchanged; `sglang_target.py` builds the
target and reads what it captures; `sglang_startup.py` holds the drafting
workers' checks.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import environments
import outcomes
from outcomes import NO_RUN, Case, Outcome

ENGINE = "sglang"
RELEASES: tuple[str, ...] = ("0.5.23", "0.5.22", "0.5.21", "0.5.20")

# The release's requirements (by distribution name) with which the path
# from `sglang.srt.server_args` to the models' load_weights imports; each is
# installed at the version or range the release's METADATA gives. Not
# minimised: some may be needed only by a module that path touches once.
IMPORTED_REQUIREMENTS = (
    "transformers", "tokenizers", "numpy", "einops", "pydantic", "psutil", "requests", "tqdm", "packaging",
    "regex", "orjson", "msgspec", "pybase64", "setproctitle", "pyzmq", "python-dateutil", "scipy",
    "sentencepiece", "compressed-tensors", "gguf", "partial_json_parser", "pillow", "uvloop", "fastapi",
    "aiohttp", "prometheus-client", "xxhash", "interegular", "openai", "tiktoken", "IPython", "easydict",
    "blobfile", "distro", "nvidia-ml-py", "python-multipart", "uvicorn", "watchfiles", "zstandard",
    "apache-tvm-ffi",
)
# Imported on that path by older releases only: 0.5.20's model modules
# import xgrammar at module level.
IMPORTED_BY_RELEASE = {"0.5.20": ("xgrammar",)}
# Imported on that path but not named by the METADATA (torch's CUDA build
# and `datasets` bring them in a GPU install): pinned to what was verified.
UNLISTED_REQUIREMENTS = ("safetensors==0.8.0", "triton==3.9.0", "dill==0.4.1")

CASE_TIMEOUT_S = 130  # the probe's own per-case bound (120 s) plus its bookkeeping
STARTUP_TIMEOUT_S = 300  # importing the release and loading its model registry


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_requirements(code: Path, version: str) -> list[str]:
    """The release's own requirement lines for the packages the path imports."""
    metadata = next(code.glob("sglang-*.dist-info/METADATA")).read_text()
    wanted = {_normalise(name) for name in (*IMPORTED_REQUIREMENTS, *IMPORTED_BY_RELEASE.get(version, ()))}
    found = {}
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = line.split(":", 1)[1].strip()
        if ";" in requirement:  # markers: only unconditional requirements apply
            if "extra ==" in requirement:
                continue
            requirement = requirement.split(";", 1)[0].strip()
        name = re.match(r"[A-Za-z0-9_.\-]+", requirement).group(0)
        if _normalise(name) in wanted:
            found[_normalise(name)] = requirement.replace(" ", "")
    missing = wanted - set(found)
    return sorted(found.values()) + sorted(missing) + list(UNLISTED_REQUIREMENTS)


def prepare(version: str) -> tuple[Path, Path]:
    """The release's code folder and its environment's python."""
    code = environments.released_code(ENGINE, version)
    # sglang/kernels/jit/utils/compile/paths.py::_resolve_kernel_path@0.5.23:17-26
    # insists on the CUDA source folders next to it at import time; the
    # unpacked code leaves the CUDA sources out (nothing is compiled on CPU).
    for folder in ("include", "csrc"):
        (code / "sglang" / "kernels" / "jit" / folder).mkdir(parents=True, exist_ok=True)
    python = environments.environment(f"sglang-{version}", pinned_requirements(code, version),
                                      constraints=["torch==2.13.0"])
    return code, python


def run(version: str, cases: list[Case], workdir: Path) -> dict[str, Outcome]:
    if version not in RELEASES:
        return {case.id: Outcome(NO_RUN, reason=f"the SGLang harness does not run {version}; it runs {RELEASES}")
                for case in cases}
    try:
        code, python = prepare(version)
    except Exception as error:  # no environment: no verdicts
        return {case.id: Outcome(NO_RUN, reason=f"preparing sglang {version} failed: {error}"[:2000])
                for case in cases}
    workdir.mkdir(parents=True, exist_ok=True)
    cases_path, outcomes_path = workdir / "sglang-cases.json", workdir / "sglang-outcomes.json"
    outcomes.write_cases(cases, cases_path)
    outcomes_path.unlink(missing_ok=True)
    tail = ""
    try:
        result = environments.run_in(
            python, Path(__file__).with_name("sglang_probe.py"), [str(cases_path), str(outcomes_path)],
            pythonpath=[code], timeout=STARTUP_TIMEOUT_S + CASE_TIMEOUT_S * len(cases))
        tail = (result.stdout + result.stderr)[-3000:]
    except subprocess.TimeoutExpired:
        tail = "the probe ran past its time limit"
    found = outcomes.read_outcomes(outcomes_path) if outcomes_path.exists() else {}
    return {case.id: found.get(case.id) or Outcome(NO_RUN, reason=f"the probe gave no outcome: {tail}")
            for case in cases}

