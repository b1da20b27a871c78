"""`dspark doctor` and `check --runtime` on this machine, as it is (no
serving engine installed), and with TokenSpeed installs fabricated on disk
(each revision's fingerprinting lines, a segmented RMSNorm written here)."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK
from dspark.converters.runtime import probe_runtime


def rows(run) -> dict[str, dict]:
    return {row["name"]: row for row in json.loads(run.stdout)["rows"]}


def _gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.without_engine
def test_doctor_says_what_is_here(dspark_process):
    run = dspark_process("doctor", "--format", "json")
    assert run.exit_code == EXIT_OK, run.stdout + run.stderr
    found = rows(run)
    from importlib.metadata import version

    for package in ("dspark", "safetensors"):
        assert found[package] == {"name": package, "status": "ok", "detail": version(package)}
    assert found["python"]["status"] == "ok"
    assert found["serving engine"]["status"] == "absent"
    assert found["serving engine"]["detail"].startswith("no serving engine is installed here")
    assert found["serving kernels"] == {"name": "serving kernels", "status": "absent",
                                        "detail": "no serving engine installed here"}
    if not _gpu():
        assert found["gpu"] == {"name": "gpu", "status": "absent", "detail": "no GPU (torch sees no CUDA device)"}
    kernel = found["triton kernel"]
    if pytest.importorskip("torch") and not _gpu():
        # the CPU: the kernel itself, run by Triton's interpreter, against the reference
        assert kernel["status"] == "ok", kernel
        assert "under Triton's interpreter" in kernel["detail"] and "matches the reference" in kernel["detail"]
        assert kernel["data"]["backend"] == "triton-interpreter"


@pytest.mark.without_engine
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
    assert "no serving engine is installed here" in done.stdout


def test_a_torch_that_does_not_import_is_a_problem_named_with_its_error(tmp_path):
    """Installed but failing (a CUDA library missing) is a problem of this
    machine, exit 1, with the error's first line; never "not installed",
    never a traceback."""
    import subprocess
    import sys

    broken = tmp_path / "broken_torch"
    (broken / "torch").mkdir(parents=True)
    (broken / "torch" / "__init__.py").write_text("raise OSError('libcudart.so.13: cannot open shared object file')\n")
    done = subprocess.run([sys.executable, "-c", "from dspark.cli.main import main; main()", "doctor", "--format", "json"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(broken), *sys.path[1:]])})
    assert done.returncode == EXIT_CHECK_FAILED, done.stderr
    found = {row["name"]: row for row in json.loads(done.stdout)["rows"]}
    assert found["torch import"]["status"] == "problem" and "libcudart.so.13" in found["torch import"]["detail"]
    assert "does not import here" in found["gpu"]["detail"] and "Traceback" not in done.stderr


@pytest.mark.without_engine
def test_doctor_quiet_prints_nothing_when_all_is_well(dspark_process):
    run = dspark_process("doctor", "-q")
    assert run.exit_code == EXIT_OK and run.stdout == ""


# --------------------------------------------------------------------------
# check --runtime


def run_codes(run) -> dict[str, dict]:
    return {f["code"]: f for f in run.json()["findings"] if f["code"].startswith("RUN")}


@pytest.mark.without_engine
def test_runtime_without_an_engine_says_so_and_judges_with_the_default(dspark, tiny_draft):
    assert probe_runtime().serving is None  # this machine, as the tests assume
    run = dspark("check", tiny_draft(fc_norm=True), "--runtime", "--format", "json")
    assert run.exit_code == EXIT_OK
    assert list(run_codes(run)) == ["RUN005"] and run.json()["engine"] == "tokenspeed@0.1.1"
    assert dspark("check", tiny_draft(fc_norm=True), "--runtime", "--strict").exit_code == EXIT_CHECK_FAILED


def test_without_runtime_the_installed_engine_is_not_judged(dspark, tiny_draft, fabricated_engine):
    site = fabricated_engine("pr1016", wheel_kernel=False)
    run = dspark("check", tiny_draft(fc_norm=True), "--format", "json", env={"DSPARK_ENGINE_PATH": str(site)})
    assert run.exit_code == EXIT_OK and not run_codes(run)


@pytest.mark.parametrize("fc_norm", [True, False], ids=["fc_norm", "prefix-only"])
def test_pr1016_without_the_wheel_kernel_will_not_start_for_any_draft(dspark, tiny_draft, fabricated_engine, fc_norm):
    site = fabricated_engine("pr1016", wheel_kernel=False)
    run = dspark("check", tiny_draft(fc_norm=fc_norm, stream="prefix"), "--runtime", "--engine-path", site,
                 "--format", "json")
    assert run.exit_code == EXIT_CHECK_FAILED
    codes = run_codes(run)
    assert codes["RUN001"]["severity"] == "error" and "will not start" in codes["RUN001"]["message"]
    assert "tokenspeed_kernel.ops.layernorm.triton" in codes["RUN001"]["message"]
    assert "5f1e48b5" in codes["RUN003"]["message"] and run.json()["engine"] == "tokenspeed@pr1016"


@pytest.mark.parametrize("revision", ["pr1016", "pr1031", "main"])
@pytest.mark.parametrize("fc_norm", [True, False], ids=["fc_norm", "prefix-only"])
def test_runtime_judges_as_the_installed_revisions_profile(dspark, tiny_draft, fabricated_engine, revision, fc_norm):
    draft = tiny_draft(fc_norm=fc_norm)
    site = fabricated_engine(revision)
    run = dspark("check", draft, "--runtime", "--format", "json", env={"DSPARK_ENGINE_PATH": str(site)})
    named = dspark("check", draft, "--engine", f"tokenspeed@{revision}", "--format", "json")
    assert run.exit_code == named.exit_code
    assert run.exit_code == (EXIT_CHECK_FAILED if revision == "main" and fc_norm else EXIT_OK)
    assert run.json()["engine"] == named.json()["engine"] == f"tokenspeed@{revision}"
    without_run = [f for f in run.json()["findings"] if not f["code"].startswith("RUN")]
    assert without_run == named.json()["findings"]
    codes = run_codes(run)
    assert set(codes) == {"RUN002", "RUN003"}
    assert f"--engine tokenspeed@{revision}" in codes["RUN003"]["message"]
    assert "kimi_k3_dspark.py" in codes["RUN003"]["message"]
    if revision == "pr1031":
        assert "engine-local" in codes["RUN002"]["message"]


def test_runtime_pr1016_reads_the_stream_variable(dspark, tiny_draft, fabricated_engine):
    site = fabricated_engine("pr1016")
    run = dspark("check", tiny_draft(stream="prefix"), "--runtime", "--format", "json",
                 env={"DSPARK_ENGINE_PATH": str(site), "TOKENSPEED_DFLASH_AUX_STREAM": "attn_res"})
    assert run.exit_code == EXIT_CHECK_FAILED
    assert "STR007" in {f["code"] for f in run.json()["findings"]}


def test_runtime_pr1016_reads_the_stream_variable_for_a_gqa_draft(dspark, tmp_path, fabricated_engine):
    """The installed 1016 drafter picks a GQA DFlash/DSpark draft's stream
    too (execution/drafter/dflash.py@5f1e48b5:56-65, 264-277): --runtime
    judges it as --engine tokenspeed@pr1016 does."""
    from dspark.examples.fabricate import fabricate

    draft = fabricate(tmp_path / "gqa", family="dflash_gqa")
    site = fabricated_engine("pr1016")
    env = {"DSPARK_ENGINE_PATH": str(site), "TOKENSPEED_DFLASH_AUX_STREAM": "attn_res"}
    run = dspark("check", draft, "--runtime", "--format", "json", env=env)
    named = dspark("check", draft, "--engine", "tokenspeed@pr1016", "--format", "json")
    assert run.exit_code == named.exit_code == EXIT_CHECK_FAILED
    assert [f for f in run.json()["findings"] if not f["code"].startswith("RUN")] == named.json()["findings"]
    assert "STR007" in {f["code"] for f in run.json()["findings"]}


@pytest.mark.parametrize("target, exit_code, stream_codes", [
    (None, EXIT_OK, ["STR002", "STR005"]),
    ("k3", EXIT_OK, ["STR002"]),
    ("qwen", EXIT_CHECK_FAILED, ["STR002", "STR006"]),
], ids=["no-target", "kimi-k3-attn-res", "qwen35"])
def test_runtime_pr1031_hands_a_gqa_drafts_declared_stream_to_the_target(dspark, tmp_path, fabricated_engine, target,
                                                                          exit_code, stream_codes):
    """The installed 1031 drafter resolves a GQA DFlash/DSpark draft's
    declared stream and hands it to the target (execution/drafter/dflash.py@
    4b9766f6:52-58, 258-271): --runtime judges it as --engine
    tokenspeed@pr1031 does, not as prefix served without a word."""
    from dspark.examples.fabricate import fabricate, target_config

    draft = fabricate(tmp_path / "gqa", family="dflash_gqa")
    config = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps(config | {"aux_hidden_stream": "attn_res"}))
    text = target_config("dflash_gqa")["text_config"]
    targets = {
        "qwen": target_config("dflash_gqa"),
        "k3": {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
               "text_config": {key: text[key] for key in ("hidden_size", "num_hidden_layers", "vocab_size")}
               | {"attn_res_block_size": 12}},
    }
    flags = []
    if target is not None:
        (tmp_path / f"{target}.json").write_text(json.dumps(targets[target]))
        flags = ["--target", str(tmp_path / f"{target}.json")]
    site = fabricated_engine("pr1031")
    run = dspark("check", draft, *flags, "--runtime", "--format", "json", env={"DSPARK_ENGINE_PATH": str(site)})
    named = dspark("check", draft, *flags, "--engine", "tokenspeed@pr1031", "--format", "json")
    assert run.exit_code == named.exit_code == exit_code
    assert run.json()["engine"] == "tokenspeed@pr1031"
    assert [f for f in run.json()["findings"] if not f["code"].startswith("RUN")] == named.json()["findings"]
    codes = [f["code"] for f in run.json()["findings"]]
    assert [code for code in codes if code.startswith("STR")] == stream_codes and "ENG001" not in codes


def test_runtime_and_an_engine_flag_that_disagree_is_a_usage_error(dspark, tiny_draft, fabricated_engine):
    site = fabricated_engine("main")
    run = dspark("check", tiny_draft(), "--runtime", "--engine-path", site, "--engine", "tokenspeed@pr1031")
    assert run.exit_code == 2 and "disagree" in run.stdout + run.stderr


def test_runtime_finds_the_engine_on_the_python_path_without_importing_it(dspark_process, tiny_draft, fabricated_engine):
    site = fabricated_engine("pr1031")
    (site / "tokenspeed" / "__init__.py").write_text("raise RuntimeError('imported: the probe must only read')\n")
    run = dspark_process("check", tiny_draft(fc_norm=True), "--runtime", "--format", "json",
                         env={"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))})
    assert run.exit_code == EXIT_OK, run.stderr
    assert json.loads(run.stdout)["engine"] == "tokenspeed@pr1031"
    assert "imported" not in run.stderr


# --------------------------------------------------------------------------
# doctor with an installed engine


CUDA_ONLY_KERNEL = '''
def segmented_rmsnorm(x, weight, eps, out=None):
    if not x.is_cuda or not weight.is_cuda:
        raise ValueError("segmented_rmsnorm requires CUDA tensors")
    raise AssertionError("not reached on the CPU")
'''


@pytest.mark.parametrize("revision", ["pr1016", "pr1031"])
def test_doctor_runs_the_engines_own_kernel(dspark_process, fabricated_engine, revision):
    pytest.importorskip("torch")
    site = fabricated_engine(revision)
    run = dspark_process("doctor", "--engine-path", site, "--format", "json")
    assert run.exit_code == EXIT_OK, run.stdout + run.stderr
    found = rows(run)
    assert found["serving engine"]["status"] == "ok" and f"tokenspeed@{revision}" in found["serving engine"]["detail"]
    assert found["serving kernels"]["status"] == "ok"
    kernel = found["engine kernel"]
    assert kernel["status"] == "ok" and "matches the reference" in kernel["detail"], kernel


def test_doctor_says_why_the_engines_kernel_cannot_run_here(dspark_process, fabricated_engine):
    pytest.importorskip("torch")
    if _gpu():
        pytest.skip("on a GPU the kernel runs")
    site = fabricated_engine("pr1031", kernel=CUDA_ONLY_KERNEL)
    run = dspark_process("doctor", "--engine-path", site, "--format", "json")
    assert run.exit_code == EXIT_OK, run.stdout + run.stderr
    kernel = rows(run)["engine kernel"]
    assert kernel["status"] == "not run" and "requires CUDA tensors" in kernel["detail"]


def test_doctor_fails_an_engine_that_cannot_import_its_kernel(dspark_process, fabricated_engine):
    site = fabricated_engine("pr1016", wheel_kernel=False)
    run = dspark_process("doctor", "--engine-path", site, "--format", "json")
    assert run.exit_code == EXIT_CHECK_FAILED
    found = rows(run)
    assert found["serving kernels"]["status"] == "problem" and "will not start" in found["serving kernels"]["detail"]


def test_doctor_on_main_has_no_engine_kernel_to_run(dspark_process, fabricated_engine):
    run = dspark_process("doctor", "--engine-path", fabricated_engine("main"), "--format", "json")
    assert run.exit_code == EXIT_OK
    found = rows(run)
    assert found["serving kernels"]["status"] == "absent" and "builds no fc_norm" in found["serving kernels"]["detail"]
    assert found["engine kernel"]["status"] in ("absent", "not run")
