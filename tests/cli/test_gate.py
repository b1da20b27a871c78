"""`dspark gate`: the policy file found and read, the steps, the one exit
code; the smoke step run through a real smoke on the CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE
from dspark.converters.gate import run_gate
from dspark.converters.policy import find_policy_file, load_policy
from dspark.schema.errors import UsageError
from dspark.schema.policy import Policy, SmokePolicy, parse_policy


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# --------------------------------------------------------------------------
# finding and reading the policy


def test_the_policy_is_found_from_the_working_directory_upward(tmp_path):
    write(tmp_path / "repo" / "pyproject.toml", '[project]\nname = "x"\n\n[tool.dspark]\nfail_on_warnings = true\n')
    start = tmp_path / "repo" / "drafts" / "k3"
    start.mkdir(parents=True)
    assert find_policy_file(start) == tmp_path / "repo" / "pyproject.toml"
    policy = load_policy(start=start)
    assert policy.fail_on_warnings is True and policy.source.endswith("pyproject.toml [tool.dspark]")
    # a dspark.toml nearer wins; a pyproject without [tool.dspark] is passed over
    write(tmp_path / "repo" / "drafts" / "pyproject.toml", '[project]\nname = "dspark-drafts"\n')
    write(tmp_path / "repo" / "drafts" / "k3" / "dspark.toml", 'require_target = true\n')
    assert find_policy_file(start) == start / "dspark.toml"
    assert find_policy_file(tmp_path / "repo" / "drafts") == tmp_path / "repo" / "pyproject.toml"


def test_no_policy_is_the_defaults(tmp_path):
    assert find_policy_file(tmp_path) is None
    assert load_policy(start=tmp_path) == Policy()


def test_a_named_policy_file_is_read(tmp_path):
    path = write(tmp_path / "gate.toml", '[waive]\nINV007 = "fp32 on purpose"\n[smoke]\ntokens = 16\n')
    policy = load_policy(path)
    assert policy.waivers == {"INV007": "fp32 on purpose"} and policy.smoke.tokens == 16


@pytest.mark.parametrize("text", ["fail_on_warnings = [\n", "waive = 3\n"], ids=["not-toml", "bad-value"])
def test_a_policy_that_cannot_be_read_is_a_usage_error(tmp_path, text):
    with pytest.raises(UsageError) as refused:
        load_policy(write(tmp_path / "dspark.toml", text))
    assert "dspark.toml" in refused.value.message


# --------------------------------------------------------------------------
# the gate, from the command line


def test_the_gate_passes_the_example_with_smoke_skipped_without_a_gpu(dspark, tiny_draft):
    run = dspark("gate", tiny_draft())
    assert run.exit_code == EXIT_OK, run.stdout + run.stderr
    assert "PASS" in run.stdout.splitlines()[-1]
    rows = {line.split()[0]: line.split()[1] for line in run.stdout.splitlines() if line.split()[:1] in (["check"], ["manifest"], ["smoke"])}
    assert rows["check"] == "passed" and rows["manifest"] == "skipped"
    assert rows["smoke"] == ("passed" if _gpu() else "skipped")


def _gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def test_the_gate_fails_what_check_deep_fails(dspark, tiny_draft):
    run = dspark("gate", tiny_draft(defect="nan"), "--format", "json")
    assert run.exit_code == EXIT_CHECK_FAILED
    document = run.json()
    assert document["steps"][0] == {"name": "check", "status": "failed", "detail": document["steps"][0]["detail"]}
    assert "PAY001" in document["steps"][0]["detail"]
    assert document["steps"][2]["status"] == "skipped" and "check failed" in document["steps"][2]["detail"]


def test_a_waived_error_passes_the_gate_and_the_reason_is_printed(dspark, tiny_draft, tmp_path):
    # A config error the smoke does not depend on: on a GPU the gate's smoke runs too.
    draft = tiny_draft(defect="mask-token-range")
    write(tmp_path / "pyproject.toml", '[tool.dspark.waive]\nCFG008 = "the mask token is unused by this deploy until INFRA-7"\n')
    run = dspark("gate", draft)
    assert run.exit_code == EXIT_OK
    assert "CFG008" in run.stdout and "[waived: the mask token is unused by this deploy until INFRA-7]" in run.stdout
    assert "1 waived" in run.stdout.splitlines()[-1]
    (tmp_path / "pyproject.toml").unlink()
    assert dspark("gate", draft).exit_code == EXIT_CHECK_FAILED


def test_a_waiver_turns_a_failing_gate_into_a_passing_one(dspark, tiny_draft, tmp_path):
    draft = tiny_draft(dtype="float32")
    write(tmp_path / "dspark.toml", "fail_on_warnings = true\n")
    assert dspark("gate", draft).exit_code == EXIT_CHECK_FAILED
    write(tmp_path / "dspark.toml", 'fail_on_warnings = true\n[waive]\nINV007 = "fp32 is what this draft serves in"\n')
    run = dspark("gate", draft, "--format", "json")
    assert run.exit_code == EXIT_OK
    (waived,) = [f for f in run.json()["findings"] if f["waived"]]
    assert waived["code"] == "INV007" and waived["waived"] == "fp32 is what this draft serves in"


def test_fail_on_warnings_names_the_codes(dspark, tiny_draft, tmp_path):
    draft = tiny_draft(dtype="float32")
    policy = write(tmp_path / "policy.toml", 'fail_on_warnings = ["PAY006"]\n')
    assert dspark("gate", draft, "--policy", policy).exit_code == EXIT_OK
    write(policy, 'fail_on_warnings = ["INV007"]\n')
    assert dspark("gate", draft, "--policy", policy).exit_code == EXIT_CHECK_FAILED


def test_unknown_policy_keys_exit_2_naming_the_key(dspark, tiny_draft, tmp_path):
    write(tmp_path / "dspark.toml", "fail_on_warning = true\n")
    run = dspark("gate", tiny_draft())
    assert run.exit_code == EXIT_USAGE
    assert "fail_on_warning: unknown policy key" in run.stderr


def test_require_target_refuses_a_gate_without_one(dspark, tiny_draft, tmp_path):
    write(tmp_path / "dspark.toml", "require_target = true\n")
    run = dspark("gate", tiny_draft())
    assert run.exit_code == EXIT_USAGE and "--target" in run.stderr
    from dspark.examples.fabricate import SCALES

    spec = SCALES["tiny"]
    target = write(tmp_path / "target" / "config.json", "")
    target.write_text(json.dumps({"hidden_size": spec.target_hidden_size, "num_hidden_layers": spec.target_num_hidden_layers,
                                  "vocab_size": spec.vocab_size}))
    assert dspark("gate", tiny_draft(name="d2"), "--target", target).exit_code == EXIT_OK


def test_a_policy_naming_several_engines_gates_on_every_one(dspark, tiny_draft, tmp_path):
    write(tmp_path / "dspark.toml", 'engine = ["tokenspeed", "tokenspeed@main"]\n')
    run = dspark("gate", tiny_draft(), "--format", "json")
    assert run.exit_code == 1  # main has no fc_norm modules: it refuses the weights
    document = run.json()
    assert [row["outcome"] for row in document["check"]["engine_verdicts"]] == ["pass", "refused"]


def test_the_policy_engine_is_used_and_the_flag_wins(dspark, tiny_draft, tmp_path):
    write(tmp_path / "dspark.toml", 'engine = "tokenspeed@pr1031"\n')
    assert dspark("gate", tiny_draft(), "--format", "json").json()["engine"] == "tokenspeed@pr1031"
    assert dspark("gate", tiny_draft(name="d2"), "--engine", "tokenspeed@main", "--format", "json").json()["engine"] == "tokenspeed@main"


def test_a_converted_draft_has_its_manifest_verified(dspark, tiny_draft, tmp_path):
    out = tmp_path / "served"
    assert dspark("convert", tiny_draft(prefix="draft_model."), out, "-q").exit_code == EXIT_OK
    document = dspark("gate", out, "--format", "json").json()
    assert document["steps"][1]["status"] == "passed" and "MAN004" in {f["code"] for f in document["findings"]}
    weights = next(out.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    document = dspark("gate", out, "--format", "json").json()
    assert document["passed"] is False and document["steps"][1]["status"] == "failed"


# --------------------------------------------------------------------------
# the smoke step, run for real on the CPU (the kernel under Triton's interpreter)


def _cpu_smoke(path, smoke_policy: SmokePolicy):
    from dspark.kernels.smoke_checkpoint import smoke_checkpoint

    return smoke_checkpoint(path, device="cpu", tokens=smoke_policy.tokens or 8, tolerance=smoke_policy.tolerance)


def test_the_smoke_step_runs_and_its_tolerance_comes_from_the_policy(tiny_draft, monkeypatch):
    pytest.importorskip("torch")
    if not _gpu():
        monkeypatch.setenv("TRITON_INTERPRET", "1")  # read when the kernel module is first imported
    draft = tiny_draft()
    report = run_gate(draft, smoke=_cpu_smoke)
    assert report.passed and report.steps[2].status == "passed" and report.smoke is not None
    strict = run_gate(draft, policy=parse_policy({"smoke": {"tolerance": 1e-12, "tokens": 4}}, "dspark.toml"), smoke=_cpu_smoke)
    assert not strict.passed and strict.steps[2].status == "failed" and "SMK002" in strict.steps[2].detail
    assert strict.smoke.tokens == 4


def test_a_required_smoke_without_a_gpu_fails_the_gate(tiny_draft):
    report = run_gate(tiny_draft(), policy=parse_policy({"smoke": {"required": True}}, "dspark.toml"),
                      no_smoke_reason="not run: no GPU here")
    assert not report.passed and report.steps[2].status == "failed"


def test_verify_makes_the_manifest_a_requirement(dspark, tiny_draft, tmp_path):
    draft = tiny_draft()
    document = dspark("gate", draft, "--verify", "--format", "json").json()
    assert document["passed"] is False and document["exit_code"] == EXIT_CHECK_FAILED
    assert document["steps"][1]["status"] == "failed" and "MAN005" in document["steps"][1]["detail"]
    out = tmp_path / "served"
    assert dspark("convert", draft, out, "-q").exit_code == EXIT_OK
    document = dspark("gate", out, "--verify", "--format", "json").json()
    assert document["passed"] is True and document["steps"][1]["status"] == "passed"


def test_strict_fails_the_gate_on_a_warning_the_policy_does_not_waive(dspark, tiny_draft, tmp_path):
    draft = tiny_draft(dtype="float32")  # INV007: a warning
    assert dspark("gate", draft).exit_code == EXIT_OK
    run = dspark("gate", draft, "--strict")
    assert run.exit_code == EXIT_CHECK_FAILED and "INV007" in run.stdout
    write(tmp_path / "dspark.toml", '[waive]\nINV007 = "fp32 is what this draft serves in"\n')
    assert dspark("gate", draft, "--strict").exit_code == EXIT_OK


def test_the_gate_help_says_what_it_does_by_default(dspark):
    run = dspark("gate", "--help")
    text = " ".join(run.stdout.split())
    for said in ("By default", "check --deep", "--verify", "--strict", "errors fail"):
        assert said in text


@pytest.mark.parametrize("text,suggested", [
    ("fail_on_warning = true\n", "did you mean 'fail_on_warnings'?"),
    ("[smoke]\ntoken = 8\n", "did you mean 'tokens'?"),
    ('[waive]\nINV07 = "fp32 on purpose"\n', "did you mean 'INV007'?"),
], ids=["key", "smoke-key", "code"])
def test_a_misspelt_policy_key_or_code_gets_a_did_you_mean(dspark, tiny_draft, tmp_path, text, suggested):
    write(tmp_path / "dspark.toml", text)
    run = dspark("gate", tiny_draft())
    assert run.exit_code == EXIT_USAGE and suggested in run.stderr
    assert "README.md#" in run.stderr  # a section that exists (tests/test_doc_anchors.py)


def test_a_gate_failed_only_by_smoke_says_why_not_zero_errors(dspark_process, tiny_draft, tmp_path):
    write(tmp_path / "dspark.toml", "[smoke]\nrequired = true\n")
    # no GPU visible to the run: the smoke the policy requires cannot run
    run = dspark_process("gate", tiny_draft(), env={"CUDA_VISIBLE_DEVICES": ""}, cwd=tmp_path)
    assert run.exit_code == EXIT_CHECK_FAILED, run.stdout + run.stderr
    verdict = run.stdout.splitlines()[-1]
    assert verdict.startswith("FAIL  smoke failed: not run:") and "(the policy requires it)" in verdict
    github = dspark_process("gate", tiny_draft(name="d2"), "--format", "github", env={"CUDA_VISIBLE_DEVICES": ""}, cwd=tmp_path)
    assert "FAIL" in github.stdout and "failed step(s): smoke" in github.stdout.splitlines()[-1]


def test_a_waived_error_is_counted_as_waived_not_as_an_error(dspark, tiny_draft, tmp_path):
    draft = tiny_draft(defect="mask-token-range")
    write(tmp_path / "dspark.toml", '[waive]\nCFG008 = "mask token unused until INFRA-7"\n')
    verdict = dspark("gate", draft).stdout.splitlines()[-1]
    assert verdict.startswith("PASS  0 error(s)") and verdict.endswith("1 waived")
    github = dspark("gate", draft, "--format", "github").stdout.splitlines()[-1]
    assert "PASS (0 error(s)" in github and "1 waived" in github


# --------------------------------------------------------------------------
# the engine installed here (runtime = true)


def test_runtime_true_judges_with_the_installed_engine(dspark, tiny_draft, fabricated_engine, tmp_path):
    write(tmp_path / "dspark.toml", "runtime = true\n")
    site = fabricated_engine("pr1016", wheel_kernel=False)
    run = dspark("gate", tiny_draft(fc_norm=False), "--format", "json", env={"DSPARK_ENGINE_PATH": str(site)})
    assert run.exit_code == EXIT_CHECK_FAILED
    document = run.json()
    assert document["engine"] == "tokenspeed@pr1016" and document["policy"]["runtime"] is True
    (step,) = [s for s in document["steps"] if s["name"] == "runtime"]
    assert step["status"] == "failed" and "RUN001" in step["detail"]
    assert [s["name"] for s in document["steps"]] == ["check", "runtime", "manifest", "smoke"]


def test_gate_runtime_flag_and_a_known_revision_pass(dspark, tiny_draft, fabricated_engine):
    site = fabricated_engine("pr1031")
    run = dspark("gate", tiny_draft(fc_norm=True), "--runtime", "--engine-path", site, "--format", "json")
    assert run.exit_code == EXIT_OK, run.stdout
    document = run.json()
    assert document["engine"] == "tokenspeed@pr1031"
    assert {f["code"] for f in document["findings"]} >= {"RUN002", "RUN003"}


def test_runtime_true_without_an_engine_fails_only_when_warnings_do(dspark, tiny_draft, tmp_path):
    write(tmp_path / "dspark.toml", "runtime = true\n")
    run = dspark("gate", tiny_draft(), "--format", "json")
    assert run.exit_code == EXIT_OK and "RUN005" in {f["code"] for f in run.json()["findings"]}
    write(tmp_path / "dspark.toml", 'runtime = true\nfail_on_warnings = ["RUN005"]\n')
    assert dspark("gate", tiny_draft("again"), "--format", "json").exit_code == EXIT_CHECK_FAILED


def test_without_runtime_the_gate_judges_the_named_engine(dspark, tiny_draft, fabricated_engine):
    site = fabricated_engine("pr1016", wheel_kernel=False)
    run = dspark("gate", tiny_draft(), "--format", "json", env={"DSPARK_ENGINE_PATH": str(site)})
    assert run.exit_code == EXIT_OK and run.json()["engine"] == "tokenspeed@0.1.1"
    assert not any(f["code"].startswith("RUN") for f in run.json()["findings"])


def test_runtime_must_be_a_boolean(tmp_path):
    with pytest.raises(UsageError, match="runtime: must be true or false"):
        load_policy(write(tmp_path / "dspark.toml", 'runtime = "yes"\n'))


def test_on_a_gpu_the_gate_smokes_the_engines_kernel_beside_dspark(dspark_process, tiny_draft, fabricated_engine):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("the gate's smoke runs on a GPU")
    site = fabricated_engine("pr1031")
    run = dspark_process("gate", tiny_draft(fc_norm=True), "--format", "json", env={"DSPARK_ENGINE_PATH": str(site)})
    assert run.exit_code == EXIT_OK, run.stdout + run.stderr
    document = json.loads(run.stdout)
    (smoke,) = [s for s in document["steps"] if s["name"] == "smoke"]
    assert smoke["status"] == "passed" and "the engine's" in smoke["detail"]
    assert "SMK010" in {f["code"] for f in document["findings"]}


def test_a_policy_engine_that_disagrees_with_the_installed_one_is_a_usage_error(dspark, tiny_draft, fabricated_engine,
                                                                               tmp_path):
    write(tmp_path / "dspark.toml", 'runtime = true\nengine = "tokenspeed@pr1031"\n')
    run = dspark("gate", tiny_draft(), env={"DSPARK_ENGINE_PATH": str(fabricated_engine("main"))})
    assert run.exit_code == EXIT_USAGE
    assert "dspark.toml: engine = tokenspeed@pr1031 and --runtime disagree" in run.stdout + run.stderr


def test_a_gate_over_several_engines_prints_their_verdicts(dspark, tiny_draft):
    run = dspark("gate", tiny_draft(), "--engine", "tokenspeed,tokenspeed@main")
    assert run.exit_code == 1
    assert "tokenspeed@0.1.1  PASS" in run.stdout and "tokenspeed@main  REFUSED AT LOAD" in run.stdout


# --------------------------------------------------------------------------
# the gate learns there is no GPU without torch


GATE_PROBE = """
import json, sys
from dspark.cli.main import main
sys.argv = ["dspark", "gate", sys.argv[1]]
try:
    main()
except SystemExit as exit:
    code = exit.code
sys.stderr.write(json.dumps({"exit": code, "torch": "torch" in sys.modules}) + "\\n")
"""


def _gate_imports_torch(draft: Path, **environment: str) -> dict:
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", GATE_PROBE, str(draft)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **environment})
    return json.loads(done.stderr.strip().splitlines()[-1]) | {"stdout": done.stdout}


def test_the_gate_on_a_cpu_machine_does_not_import_torch(tiny_draft):
    from dspark.cli.gate import _no_gpu_reason

    if _no_gpu_reason() is None:
        pytest.skip("a GPU may be here: the gate imports torch to run the smoke")
    result = _gate_imports_torch(tiny_draft())
    assert (result["exit"], result["torch"]) == (EXIT_OK, False), result
    assert "no GPU here" in result["stdout"]


def test_cuda_visible_devices_hiding_every_gpu_skips_the_smoke_without_torch(tiny_draft):
    result = _gate_imports_torch(tiny_draft(), CUDA_VISIBLE_DEVICES="")
    assert (result["exit"], result["torch"]) == (EXIT_OK, False), result
    assert "CUDA_VISIBLE_DEVICES" in result["stdout"]


def test_a_gpu_is_looked_for_in_the_driver_folders_nodes_and_tools(tmp_path, monkeypatch):
    from dspark.cli import gate

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpus = tmp_path / "proc" / "gpus"
    gpus.mkdir(parents=True)
    monkeypatch.setattr(gate, "GPU_FOLDERS", (gpus,))
    monkeypatch.setattr(gate, "GPU_DEVICE_NODES", (tmp_path / "nvidia0",))
    monkeypatch.setattr(gate, "GPU_TOOLS", ("dspark-no-such-tool",))
    assert "no GPU here" in gate._no_gpu_reason()  # an empty driver folder: no GPU
    (gpus / "0000:01:00.0").mkdir()
    assert gate._no_gpu_reason() is None
    (gpus / "0000:01:00.0").rmdir()
    (tmp_path / "nvidia0").touch()
    assert gate._no_gpu_reason() is None
    (tmp_path / "nvidia0").unlink()
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tool.parent))
    monkeypatch.setattr(gate, "GPU_TOOLS", ("nvidia-smi",))
    assert gate._no_gpu_reason() is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert "hides every GPU" in gate._no_gpu_reason()


def test_the_gate_says_how_much_it_read_in_binary_units(dspark, tiny_draft):
    document = dspark("gate", tiny_draft(), "--format", "json").json()
    detail = document["steps"][0]["detail"]
    assert "every value read (" in detail and "KiB)" in detail and " bytes)" not in detail
