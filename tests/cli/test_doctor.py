"""`dspark doctor` and `check --runtime` on this machine, as it is (no
serving kernel package installed), and with a serving package fabricated
on the path."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK
from dspark.converters.runtime import probe_serving_kernels


def rows(run) -> dict[str, dict]:
    return {row["name"]: row for row in json.loads(run.stdout)["rows"]}


def _gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def test_doctor_says_what_is_here(dspark_process):
    run = dspark_process("doctor", "--format", "json")
    assert run.exit_code == EXIT_OK, run.stdout + run.stderr
    found = rows(run)
    from importlib.metadata import version

    for package in ("dspark", "safetensors"):
        assert found[package] == {"name": package, "status": "ok", "detail": version(package)}
    assert found["python"]["status"] == "ok"
    assert found["serving kernels"]["status"] == "absent"
    assert found["serving kernels"]["detail"].startswith("tokenspeed_kernel is not installed")
    if not _gpu():
        assert found["gpu"] == {"name": "gpu", "status": "absent", "detail": "no GPU (torch sees no CUDA device)"}
    kernel = found["triton kernel"]
    if pytest.importorskip("torch") and not _gpu():
        # the CPU: the kernel itself, run by Triton's interpreter, against the reference
        assert kernel["status"] == "ok", kernel
        assert "under Triton's interpreter" in kernel["detail"] and "matches the reference" in kernel["detail"]
        assert kernel["data"]["backend"] == "triton-interpreter"


def test_doctor_without_torch_says_so(dspark_process, tmp_path):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['torch'] = None\nfrom dspark.cli.main import main; main()",
         "doctor"],
        capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1"},
    )
    assert done.returncode == EXIT_OK, done.stderr
    assert "not probed: torch is not installed" in done.stdout
    assert "tokenspeed_kernel is not installed" in done.stdout


def test_doctor_quiet_prints_nothing_when_all_is_well(dspark_process):
    run = dspark_process("doctor", "-q")
    assert run.exit_code == EXIT_OK and run.stdout == ""


# --------------------------------------------------------------------------
# check --runtime


def serving_package(root: Path, *, with_norm: bool) -> Path:
    """A serving kernel package as it is installed: importable, never imported."""
    module = root / "tokenspeed_kernel" / "ops" / "layernorm" / "triton.py"
    module.parent.mkdir(parents=True)
    for folder in (root / "tokenspeed_kernel", root / "tokenspeed_kernel" / "ops", module.parent):
        (folder / "__init__.py").write_text("raise RuntimeError('imported: the probe must only read')\n")
    body = "def rmsnorm(x, w, eps):\n    return x\n"
    if with_norm:
        body += "\n\ndef segmented_rmsnorm(x, w, eps):\n    return x\n"
    module.write_text(textwrap.dedent(body))
    return root


def test_runtime_fails_an_fc_norm_draft_without_serving_kernels(dspark, tiny_draft):
    assert not probe_serving_kernels().installed  # this machine, as the tests assume
    run = dspark("check", tiny_draft(fc_norm=True), "--runtime", "--format", "json")
    assert run.exit_code == EXIT_CHECK_FAILED
    codes = {f["code"]: f for f in run.json()["findings"]}
    assert codes["RUN001"]["severity"] == "error" and "tokenspeed_kernel is not installed" in codes["RUN001"]["message"]
    assert "RUN002" in codes


def test_runtime_passes_a_draft_without_fc_norm(dspark, tiny_draft):
    run = dspark("check", tiny_draft(fc_norm=False), "--runtime", "--format", "json")
    assert run.exit_code == EXIT_OK
    assert [f["code"] for f in run.json()["findings"] if f["code"].startswith("RUN")] == ["RUN002"]


def test_without_runtime_the_installed_kernels_are_not_judged(dspark, tiny_draft):
    run = dspark("check", tiny_draft(fc_norm=True), "--format", "json")
    assert run.exit_code == EXIT_OK and not any(f["code"].startswith("RUN") for f in run.json()["findings"])


@pytest.mark.parametrize("with_norm, exit_code", [(True, EXIT_OK), (False, EXIT_CHECK_FAILED)], ids=["exposed", "lacking"])
def test_runtime_reads_the_installed_serving_package(dspark_process, tiny_draft, tmp_path, with_norm, exit_code):
    package = serving_package(tmp_path / "site", with_norm=with_norm)
    run = dspark_process("check", tiny_draft(fc_norm=True), "--runtime", "--format", "json", env={"PYTHONPATH": str(package)})
    assert run.exit_code == exit_code, run.stderr
    (note,) = [f for f in json.loads(run.stdout)["findings"] if f["code"] == "RUN002"]
    assert note["detail"]["has_segmented_rmsnorm"] is with_norm
    assert "imported" not in run.stderr
