"""The vLLM harness: runs a vLLM release's own config, model and loader code
on CPU over draft folders (host side; `vllm_probe.py` is the engine side).

The release's wheel is unpacked into the conformance cache (Python files
only: the CUDA extension `vllm._C` is left out, see `vllm_stubs.py`), and an
environment is built with torch 2.13.0 (CPU) and the libraries the wheel pins
in its METADATA (`Requires-Dist`), restricted to what the config, model,
loader and speculative-decoding start-up path imports. The probe runs once
for the whole batch and forks one child per case.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import environments
from outcomes import NO_RUN, Case, Outcome, read_outcomes, write_cases

ENGINE = "vllm"
# 0.30.0's activation layers take `torch.ops._C` handles while the target is
# built (vllm/model_executor/layers/activation.py@0.30.0:135): see
# vllm_stubs.py::_activation_op_handles.
RELEASES: tuple[str, ...] = ("0.33.0", "0.32.0", "0.31.0", "0.30.0")

# The distributions `vllm.config`, `vllm.model_executor` (models, loaders)
# and `vllm.v1.worker.gpu.spec_decode` import on that path, spelled as in
# Requires-Dist (a release pins only some of them). Everything else the
# wheel pins (kernels, CUDA libraries, torch itself: 2.14.0 for 0.33.0) is
# left out: torch is the CPU 2.13.0 build. torchvision is left out too (its
# only wheel for torch 2.13 is a CUDA build; see vllm_stubs.py).
IMPORTED = (
    "regex", "cachetools", "psutil", "sentencepiece", "numpy", "requests", "tqdm", "blake3", "py-cpuinfo",
    "transformers", "huggingface-hub", "tokenizers", "safetensors", "pydantic", "pyyaml", "einops", "msgspec",
    "cloudpickle", "filelock", "typing-extensions", "pyzmq", "cbor2", "pybase64", "aiohttp", "openai",
    "oss-harmony", "openai-harmony", "pillow", "uvloop", "prometheus-client", "xgrammar", "fastapi",
    "partial-json-parser", "llguidance", "compressed-tensors",
)
# Imported, but not pinned in every release's METADATA.
UNPINNED = ("uvloop",)

PER_CASE_TIMEOUT_S = 150
BATCH_SETUP_S = 300


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_requirements(code: Path) -> list[str]:
    """The release's own `Requires-Dist` lines for the distributions in
    IMPORTED (markers kept: pip evaluates them), with no extra."""
    metadata = next(code.glob("vllm-*.dist-info/METADATA"))
    wanted = {_normalised(n) for n in IMPORTED}
    found: dict[str, str] = {}
    for line in metadata.read_text().splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = line.split(":", 1)[1].strip()
        if "extra ==" in requirement:
            continue
        name = _normalised(re.split(r"[\s\[<>=!~;(]", requirement, maxsplit=1)[0])
        if name in wanted:
            found.setdefault(name, requirement)
    return sorted(found.values()) + [u for u in UNPINNED if _normalised(u) not in found]


def _no_run(cases: list[Case], reason: str) -> dict[str, Outcome]:
    return {case.id: Outcome(NO_RUN, reason=reason) for case in cases}


def run(version: str, cases: list[Case], workdir: Path) -> dict[str, Outcome]:
    if version not in RELEASES:
        return _no_run(cases, f"vllm {version} is not a release this harness runs ({', '.join(RELEASES)})")
    try:
        code = environments.released_code("vllm", version)
        python = environments.environment(f"vllm-{version}", pinned_requirements(code),
                                          constraints=["torch==2.13.0"])
    except (RuntimeError, OSError, StopIteration) as error:
        return _no_run(cases, f"preparing vllm {version}: {error}")

    workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vllm-probe-", dir=workdir) as scratch:
        cases_file = Path(scratch) / "cases.json"
        outcomes_file = Path(scratch) / "outcomes.json"
        write_cases(cases, cases_file)
        probe = Path(__file__).with_name("vllm_probe.py")
        try:
            result = environments.run_in(
                python, probe, [str(cases_file), str(outcomes_file), "--timeout", str(PER_CASE_TIMEOUT_S)],
                pythonpath=[code], timeout=BATCH_SETUP_S + PER_CASE_TIMEOUT_S * len(cases),
                # The CPU platform (vllm/platforms/__init__.py::cpu_platform_plugin@0.33.0:174-227):
                # no CUDA device is probed, tensors are built on the CPU.
                # Kimi-K3's fused GEMM+all-reduce kernels are a server-wide
                # switch for a multi-GPU Blackwell launch (CUTLASS DSL,
                # vllm/models/kimi_k3/nvidia/model.py::maybe_init_gemm_rs_ar@0.33.0:176-198);
                # off, the target's layers are built with plain linears that
                # capture the same hidden states.
                env={"VLLM_TARGET_DEVICE": "cpu", "VLLM_CONFIGURE_LOGGING": "0",
                     "VLLM_KIMI_K3_GEMM_AR": "0", "VLLM_ENABLE_GEMM_RS": "0"},
            )
        except subprocess.TimeoutExpired:
            return _no_run(cases, "the vLLM probe ran past its batch time limit")
        if not outcomes_file.exists():
            tail = (result.stdout + result.stderr)[-3000:]
            return _no_run(cases, f"the vLLM probe wrote no outcomes (exit {result.returncode}): {tail}")
        outcomes = read_outcomes(outcomes_file)
    for case in cases:
        outcomes.setdefault(case.id, Outcome(NO_RUN, reason="the vLLM probe gave no outcome for this case"))
    return outcomes
