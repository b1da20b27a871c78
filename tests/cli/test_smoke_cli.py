"""`dspark smoke` on real fabricated drafts, on the CPU (the Triton kernel
under its interpreter) and, where a GPU is present, on CUDA."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dspark.examples.fabricate import SCALES, draft_config, make_tensors, tensor_shapes, write_safetensors  # noqa: E402

SPEC = SCALES["tiny"]
TAPS = len(SPEC.target_layer_ids)
TARGET_HIDDEN = SPEC.target_hidden_size
GPU = torch.cuda.is_available()
# Where a GPU is visible the smoke runs on it, compiled; elsewhere on the CPU
# under Triton's interpreter.
DEVICE = "cuda" if GPU else "cpu"
BACKEND = "triton" if GPU else "triton-interpreter"


def write(folder: Path, *, fc_norm: bool = True, poison: str | None = None, fmt: str = "safetensors") -> Path:
    """A tiny K3 draft; `poison` names a tensor that gets one NaN."""
    config = draft_config(SPEC, fc_norm=fc_norm)
    tensors = make_tensors(tensor_shapes(SPEC, fc_norm=fc_norm), seed=3)
    if poison:
        tensors[poison].view(-1)[1] = math.nan
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    if fmt == "pt":
        torch.save({"draft_model." + k: v for k, v in tensors.items()}, folder / "draft.pt")
        return folder / "draft.pt"
    write_safetensors(folder, {"model." + k: v for k, v in tensors.items()})
    return folder


def without_module(tmp_path: Path, module: str) -> Path:
    """A folder for PYTHONPATH whose sitecustomize makes `module` absent in
    the child process, as on an install without it: the path finder does
    not find it, so `import` raises ModuleNotFoundError and
    `importlib.util.find_spec` returns None (torch asks the latter before it
    imports triton; an error from the finder itself would break torch's
    import, which no real install without the module does)."""
    folder = tmp_path / f"without_{module}"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        "import importlib.machinery\n"
        "_find = importlib.machinery.PathFinder.find_spec\n"
        "def _find_spec(cls, name, path=None, target=None):\n"
        f"    if name == {module!r} or name.startswith({module + '.'!r}):\n"
        "        return None\n"
        "    return _find(name, path, target)\n"
        "importlib.machinery.PathFinder.find_spec = classmethod(_find_spec)\n"
    )
    return folder


def pythonpath(*folders: Path) -> str:
    """PYTHONPATH with `folders` first and what the caller had after."""
    inherited = os.environ.get("PYTHONPATH")
    return os.pathsep.join([*map(str, folders), *([inherited] if inherited else [])])


def codes(run) -> list[str]:
    return [f["code"] for f in run.json()["findings"]]


def test_good_fc_norm_draft_passes_and_shows_why_the_fast_path_stands_down(dspark, tmp_path):
    run = dspark("smoke", write(tmp_path / "d"), "--device", DEVICE, "--tokens", "8", "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    report = run.json()
    assert report["passed"] and report["fc_norm"] and report["device"] == DEVICE
    assert report["kernel_backend"] == BACKEND
    assert report["paths"]["fused"]["within_tolerance"]
    # Per-tap scales span three orders of magnitude: without the norms the
    # projection is far off, which is why that path must stand down.
    assert not report["paths"]["incremental"]["within_tolerance"]
    assert report["paths"]["incremental"]["rel_rms_error"] > 0.1
    assert report["paths"]["folded"]["within_tolerance"]
    assert [c for c in codes(run) if c != "SMK007"] == ["SMK003", "SMK004"]


def test_draft_without_fc_norm_keeps_the_fast_path(dspark, tmp_path):
    run = dspark("smoke", write(tmp_path / "d", fc_norm=False), "--device", DEVICE, "--tokens", "8", "--format", "json")
    assert run.exit_code == 0
    report = run.json()
    assert not report["fc_norm"]
    assert report["paths"]["incremental"]["within_tolerance"]
    assert [c for c in codes(run) if c != "SMK007"] == ["SMK003"]


@pytest.mark.parametrize("poisoned", ["fc_norm.2.weight", "context_proj.weight"])
def test_nan_weight_fails(dspark, tmp_path, poisoned):
    run = dspark("smoke", write(tmp_path / "d", poison=poisoned), "--device", "cpu", "--format", "json")
    assert run.exit_code == 1
    assert "SMK001" in codes(run)
    if poisoned.startswith("fc_norm"):
        assert "SMK005" in codes(run)  # a NaN norm cannot be folded either
    finding = next(f for f in run.json()["findings"] if f["code"] == "SMK001")
    assert finding["tensor"] == poisoned
    # NaN is not JSON: the report stays parseable by strict parsers, with
    # null in its place.
    def reject(constant):
        raise AssertionError(f"{constant} in the JSON report")

    fused = json.loads(run.stdout, parse_constant=reject)["paths"]["fused"]
    assert fused["nonfinite"] and fused["max_abs_error"] is None


@pytest.mark.parametrize("zeroed", ["context_proj.weight", "context_norm.weight"])
def test_an_all_zero_projection_fails(dspark, tmp_path, zeroed):
    draft = write(tmp_path / "d")
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(draft / "model.safetensors"))
    tensors["model." + zeroed] = torch.zeros_like(tensors["model." + zeroed])
    save_file(tensors, str(draft / "model.safetensors"), metadata={"format": "pt"})
    run = dspark("smoke", draft, "--device", "cpu", "--format", "json")
    assert run.exit_code == 1
    report = run.json()
    assert "SMK008" in codes(run) and "SMK002" not in codes(run)
    finding = next(f for f in report["findings"] if f["code"] == "SMK008")
    assert finding["tensor"] == zeroed and finding["detail"] == {"zero_weights": [zeroed], "zero_output": True}
    fused = report["paths"]["fused"]
    assert fused["cosine_similarity"] == 0.0 and not fused["within_tolerance"]
    human = dspark("smoke", draft, "--device", "cpu")
    assert human.exit_code == 1 and human.stdout.rstrip().endswith("FAIL") and "1.000000" not in human.stdout


def test_human_report_names_the_paths_and_the_verdict(dspark, tmp_path):
    run = dspark("smoke", write(tmp_path / "d"), "--device", DEVICE, "--tokens", "3")
    assert run.exit_code == 0
    assert f"{DEVICE} ({BACKEND})" in run.stdout
    assert "3 x 5 x 40 bfloat16" in run.stdout
    for path in ("fused", "incremental", "folded"):
        assert path in run.stdout
    assert run.stdout.rstrip().endswith("PASS")


def test_reads_a_pt_state_dict(dspark, tmp_path):
    run = dspark("smoke", write(tmp_path / "d", fmt="pt"), "--device", "cpu", "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    assert run.json()["passed"]


@pytest.mark.parametrize("layout", ["per-tap", "concatenated"])
def test_captured_taps(dspark, tmp_path, layout):
    from safetensors.torch import save_file

    draft = write(tmp_path / "d")
    taps = torch.randn(6, TAPS, TARGET_HIDDEN).to(torch.bfloat16)
    if layout == "per-tap":
        tensors = {f"tap.{i}": taps[:, i].contiguous() for i in range(TAPS)}
    else:
        tensors = {"hidden": taps.reshape(6, TAPS * TARGET_HIDDEN).contiguous()}
    save_file(tensors, str(tmp_path / "taps.safetensors"))
    run = dspark("smoke", draft, "--device", "cpu", "--taps", tmp_path / "taps.safetensors", "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    assert run.json()["tokens"] == 6
    assert run.json()["taps"].endswith("taps.safetensors")


def test_taps_of_the_wrong_width_are_a_usage_error(dspark, tmp_path):
    from safetensors.torch import save_file

    save_file({"hidden": torch.zeros(4, TAPS * TARGET_HIDDEN + 1)}, str(tmp_path / "taps.safetensors"))
    run = dspark("smoke", write(tmp_path / "d"), "--device", "cpu", "--taps", tmp_path / "taps.safetensors")
    assert run.exit_code == 2
    assert "taps.safetensors" in run.stderr and f"[T, {TAPS * TARGET_HIDDEN}]" in run.stderr



@pytest.mark.parametrize("layout", ["per-tap", "concatenated"])
def test_taps_without_rows_are_a_usage_error(dspark, tmp_path, layout):
    from safetensors.torch import save_file

    if layout == "per-tap":
        tensors = {f"tap.{i}": torch.zeros(0, TARGET_HIDDEN) for i in range(TAPS)}
    else:
        tensors = {"hidden": torch.zeros(0, TAPS * TARGET_HIDDEN)}
    save_file(tensors, str(tmp_path / "taps.safetensors"))
    run = dspark("smoke", write(tmp_path / "d"), "--device", "cpu", "--taps", tmp_path / "taps.safetensors")
    assert run.exit_code == 2, run.stdout + run.stderr
    assert "taps.safetensors" in run.stderr and "no token rows" in run.stderr


def test_missing_context_proj_fails_the_checkpoint(dspark, tmp_path):
    config = draft_config(SPEC)
    tensors = make_tensors(tensor_shapes(SPEC))
    del tensors["context_proj.weight"]
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "config.json").write_text(json.dumps(config))
    write_safetensors(tmp_path / "d", tensors)
    run = dspark("smoke", tmp_path / "d", "--device", "cpu")
    assert run.exit_code == 1
    assert "context_proj.weight is missing" in run.stderr and "dspark check" in run.stderr


@pytest.mark.skipif(GPU, reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_a_usage_error(dspark, tmp_path):
    run = dspark("smoke", write(tmp_path / "d"), "--device", "cuda")
    assert run.exit_code == 2
    assert "no CUDA GPU" in run.stderr and "--device cpu" in run.stderr


@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_on_cuda_the_compiled_kernel_runs_and_is_timed(dspark, tmp_path):
    run = dspark("smoke", write(tmp_path / "d"), "--device", "cuda", "--tokens", "64", "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    report = run.json()
    assert report["kernel_backend"] == "triton" and report["timings"]["tokens"] == 64
    assert "SMK007" in codes(run)


def test_a_torch_that_does_not_import_is_named_as_broken_not_missing(dspark_process, tmp_path):
    """A torch whose import fails (a CUDA library missing on this host) is
    not "not installed": the error says what failed, exit 2."""
    broken = tmp_path / "broken_torch"
    (broken / "torch").mkdir(parents=True)
    (broken / "torch" / "__init__.py").write_text(
        "raise OSError('libcudart.so.13: cannot open shared object file: No such file or directory')\n")
    run = dspark_process("smoke", write(tmp_path / "d"), env={"PYTHONPATH": pythonpath(broken)})
    assert run.exit_code == 2, run.stdout + run.stderr
    assert "installed but does not import here" in run.stderr and "libcudart.so.13" in run.stderr
    assert "not installed" not in run.stderr and "Traceback" not in run.stderr


def test_without_torch_it_names_the_extra(dspark_process, tmp_path):
    draft = write(tmp_path / "d")
    run = dspark_process("smoke", draft, env={"PYTHONPATH": pythonpath(without_module(tmp_path, "torch"))})
    assert run.exit_code == 2, run.stderr
    assert "dspark[torch]" in run.stderr
    assert "Traceback" not in run.stderr


def test_without_triton_the_reference_runs_and_says_so(dspark_process, tmp_path):
    draft = write(tmp_path / "d")
    blocker = without_module(tmp_path, "triton")
    run = dspark_process("smoke", draft, "--device", "cpu", "--format", "json", env={"PYTHONPATH": pythonpath(blocker)})
    assert run.exit_code == 0, run.stderr
    report = run.json()
    assert report["kernel_backend"] == "torch-reference" and "triton" in report["kernel_fallback_reason"]
    assert "SMK006" in codes(run)
    # Warnings fail nothing here: the projection itself was still checked.
    assert report["paths"]["fused"]["within_tolerance"]


def test_a_fused_path_beyond_tolerance_is_an_error(tmp_path):
    import dataclasses

    from dspark.kernels.smoke_checkpoint import smoke_checkpoint, smoke_findings

    report = smoke_checkpoint(write(tmp_path / "d"), device="cpu", tokens=4)
    assert "SMK002" not in [f.code for f in report.findings]
    strict = dataclasses.replace(report.result.fused, tolerance=0.0)
    findings = smoke_findings(dataclasses.replace(report.result, fused=strict))
    [finding] = [f for f in findings if f.code == "SMK002"]
    assert finding.severity.value == "error" and "tolerance 0e+00" in finding.message


def test_every_smoke_code_is_tested():
    from dspark.schema.findings import FINDING_CODES

    # the engine's kernel beside dspark's: test_smoke_engine_kernel.py
    source = Path(__file__).read_text() + (Path(__file__).parent / "test_smoke_engine_kernel.py").read_text()
    smoke_codes = {code for code in FINDING_CODES if code.startswith("SMK")}
    untested = {code for code in smoke_codes if source.count(f'"{code}"') < 1}
    # SMK005 is the folded path of a NaN draft; SMK007 needs a GPU.
    assert untested == set()


def test_a_corrupt_weight_file_is_named_not_reported_as_missing_tensors(dspark, tmp_path):
    draft = write(tmp_path / "d")
    weights = draft / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])  # truncated copy
    run = dspark("smoke", draft, "--device", "cpu")
    assert run.exit_code == 1
    assert "damaged" in run.stderr and "model.safetensors" in run.stderr and "missing" not in run.stderr


def test_integer_taps_are_a_usage_error(dspark, tmp_path):
    from safetensors.torch import save_file

    save_file({"hidden": torch.ones(4, TAPS * TARGET_HIDDEN, dtype=torch.int32)}, str(tmp_path / "taps.safetensors"))
    run = dspark("smoke", write(tmp_path / "d"), "--device", "cpu", "--taps", tmp_path / "taps.safetensors")
    assert run.exit_code == 2
    assert "floating point" in run.stderr


# EAGLE-3: the context projection found by role (fc.weight, then
# midlayer.hidden_norm), fc_norm.{i} of hidden_size.


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
def test_an_eagle3_fc_norm_draft_runs_its_projection(dspark, tmp_path, scale):
    from dspark.examples.fabricate import write_eagle3_draft

    draft = write_eagle3_draft(tmp_path / "d", scale=scale, fc_norm=True)
    run = dspark("smoke", draft, "--device", DEVICE, "--tokens", "8", "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    report = run.json()
    assert report["family"] == scale.replace("tiny-", "eagle3_") and report["fc_norm"]
    assert report["kernel_backend"] == BACKEND
    assert report["paths"]["fused"]["within_tolerance"] and report["paths"]["folded"]["within_tolerance"]


def test_smoke_says_it_does_not_apply_to_norm_before_fc(dspark, tmp_path):
    from dspark.examples.fabricate import write_eagle3_draft

    def add(tensors):
        tensors["input_norm.weight"] = torch.ones(96, dtype=torch.bfloat16)

    draft = write_eagle3_draft(tmp_path / "d", norm_before_fc=True, tensor_edit=add)
    run = dspark("smoke", draft, "--device", DEVICE, "--tokens", "8")
    assert run.exit_code == 2
    assert "does not apply" in run.stdout + run.stderr and "norm_before_fc" in run.stdout + run.stderr


@pytest.mark.parametrize(("flags", "says"), [
    pytest.param(("--seed", "99999999999999999999999"), "--seed 99999999999999999999999: a seed is a whole number",
                 id="seed-past-int64"),
    pytest.param(("--seed", "-1"), "--seed -1: a seed is a whole number", id="negative-seed"),
    # 10^12 rows of 5 x 40 bf16 taps: no machine allocates them
    pytest.param(("--tokens", "1000000000000"), "does not fit in cpu memory", id="tokens-past-memory"),
    pytest.param(("--taps", "."), "--taps .: a folder, not a file", id="taps-a-folder"),
])
def test_flags_that_cannot_work_are_usage_errors_naming_the_flag(dspark, tmp_path, monkeypatch, flags, says):
    draft = write(tmp_path / "d")
    monkeypatch.chdir(tmp_path)
    run = dspark("smoke", draft, "--device", "cpu", *flags)
    assert run.exit_code == 2, run.stdout + run.stderr
    assert says in run.stderr and "dspark check" not in run.stderr and "internal error" not in run.stderr


def test_the_page_says_it_looked_only_at_the_context_projection(dspark, tiny_draft):
    # a NaN in a layer is no part of the projection: the smoke passes, and says what it did not read
    draft = tiny_draft(defect="nan")
    assert dspark("check", draft, "--deep").exit_code == 1
    run = dspark("smoke", draft, "--device", DEVICE, "--tokens", "3")
    assert run.exit_code == 0
    (line,) = [line for line in run.stdout.splitlines() if line.strip().startswith("looked at")]
    assert "context projection only" in line and "dspark check --deep" in line


def test_kernel_both_on_a_draft_without_fc_norm_needs_no_engine_and_says_so(dspark, tmp_path):
    # A DFlash2 draft projects its taps with fc and an ordinary RMSNorm: no
    # engine kernel to put beside dspark's, so `both` runs dspark's alone
    # (no engine installed here) and notes it; `engine` alone still refuses.
    from dspark.examples.fabricate import fabricate

    draft = fabricate(tmp_path / "d", family="dflash2")
    run = dspark("smoke", draft, "--device", DEVICE, "--tokens", "8", "--kernel", "both", "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    report = run.json()
    assert report["family"] == "dflash2" and not report["fc_norm"] and report["engine_kernel"] is None
    assert "SMK012" in {f["code"] for f in report["findings"]}
    assert dspark("smoke", draft, "--device", DEVICE, "--kernel", "engine").exit_code == 2
