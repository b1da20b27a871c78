"""`dspark smoke --kernel engine|both`: the installed serving engine's own
segmented RMSNorm run beside dspark's on the draft's projection. The engines
are TokenSpeed installs fabricated on disk whose `segmented_rmsnorm` is a
small torch function written in tests/conftest.py (or here), with the
engine's signature; on the CPU dspark's kernel runs in Triton's interpreter."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE  # noqa: E402

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"

# Forgets the weight: the engine would serve the taps unscaled.
WEIGHTLESS_KERNEL = '''
import torch


def segmented_rmsnorm(x, weight, eps, out=None):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
'''

CUDA_ONLY_KERNEL = '''
def segmented_rmsnorm(x, weight, eps, out=None):
    if not x.is_cuda or not weight.is_cuda:
        raise ValueError("segmented_rmsnorm requires CUDA tensors")
    raise AssertionError("not reached in these tests")
'''

OTHER_SIGNATURE_KERNEL = '''
def segmented_rmsnorm(x, eps, weight):
    return x
'''


def smoke(dspark_process, draft, *args):
    run = dspark_process("smoke", draft, "--device", DEVICE, "--format", "json", *args)
    return run, (json.loads(run.stdout) if run.stdout.strip().startswith("{") else None)


def codes(document) -> list[str]:
    return [f["code"] for f in document["findings"]]


@pytest.mark.parametrize("revision", ["pr1016", "pr1031"])
@pytest.mark.parametrize("kernel", ["engine", "both"])
def test_the_engines_kernel_runs_beside_dspark(dspark_process, tiny_draft, fabricated_engine, revision, kernel):
    site = fabricated_engine(revision)
    run, document = smoke(dspark_process, tiny_draft(fc_norm=True), "--kernel", kernel, "--engine-path", site)
    assert run.exit_code == EXIT_OK, run.stdout + run.stderr
    engine = document["engine_kernel"]
    assert engine["ran"] and engine["engine"] == f"tokenspeed@{revision}"
    assert engine["paths"]["engine_norm"]["within_tolerance"] and engine["paths"]["dspark_norm"]["within_tolerance"]
    assert engine["call_source"].startswith(("tokenspeed-kernel/", "python/tokenspeed/"))
    (note,) = [f for f in document["findings"] if f["code"] == "SMK010"]
    assert "beside dspark's" in note["message"]
    if GPU:
        assert engine["timings"]["engine_ms"] > 0 and "x the engine's" in note["message"]


def test_an_engine_kernel_off_the_reference_fails_the_draft_on_that_engine(dspark_process, tiny_draft, fabricated_engine):
    site = fabricated_engine("pr1031", kernel=WEIGHTLESS_KERNEL)
    draft = tiny_draft(fc_norm=True)
    run, document = smoke(dspark_process, draft, "--kernel", "engine", "--engine-path", site)
    assert run.exit_code == EXIT_CHECK_FAILED, run.stdout + run.stderr
    assert "SMK009" in codes(document) and "SMK002" not in codes(document)
    # dspark's own kernel is not the one at fault
    assert dspark_process("smoke", draft, "--device", DEVICE, "--kernel", "dspark").exit_code == EXIT_OK


@pytest.mark.parametrize("setup, kernel, fc_norm, why", [
    pytest.param(None, "engine", True, "no serving engine is installed here", marks=pytest.mark.without_engine),
    ("main", "engine", True, "builds no fc_norm"),
    ("pr1031", "engine", False, "the draft has no fc_norm"),
    ("pr1016-lacking", "both", True, "the engine would not start"),
    ("other-signature", "engine", True, "takes (x, eps, weight)"),
], ids=["none-installed", "main", "no-fc_norm", "import-fails", "signature"])
def test_where_the_engines_kernel_cannot_run_it_says_why_with_exit_2(dspark_process, tiny_draft, fabricated_engine,
                                                                      setup, kernel, fc_norm, why):
    args = ["--kernel", kernel]
    if setup == "main":
        args += ["--engine-path", fabricated_engine("main")]
    elif setup == "pr1031":
        args += ["--engine-path", fabricated_engine("pr1031")]
    elif setup == "pr1016-lacking":
        args += ["--engine-path", fabricated_engine("pr1016", wheel_kernel=False)]
    elif setup == "other-signature":
        args += ["--engine-path", fabricated_engine("pr1031", kernel=OTHER_SIGNATURE_KERNEL)]
    run = dspark_process("smoke", tiny_draft(fc_norm=fc_norm), "--device", DEVICE, *args)
    assert run.exit_code == EXIT_USAGE, run.stdout + run.stderr
    assert why in run.stdout + run.stderr and "Traceback" not in run.stderr


@pytest.mark.skipif(GPU, reason="on a GPU the engine's CUDA-only kernel runs")
def test_an_engine_kernel_that_refuses_the_cpu_says_so(dspark_process, tiny_draft, fabricated_engine):
    site = fabricated_engine("pr1031", kernel=CUDA_ONLY_KERNEL)
    run = dspark_process("smoke", tiny_draft(fc_norm=True), "--device", "cpu", "--kernel", "engine",
                         "--engine-path", site)
    assert run.exit_code == EXIT_USAGE
    assert "requires CUDA tensors" in run.stdout + run.stderr


def test_the_default_kernel_does_not_look_for_an_engine(dspark_process, tiny_draft, fabricated_engine):
    site = fabricated_engine("pr1016", wheel_kernel=False)
    run = dspark_process("smoke", tiny_draft(fc_norm=True), "--device", DEVICE, "--format", "json",
                         env={"DSPARK_ENGINE_PATH": str(site)})
    document = json.loads(run.stdout)
    assert run.exit_code == EXIT_OK and document["kernel"] == "dspark" and document["engine_kernel"] is None
    assert dspark_process("smoke", tiny_draft("other", fc_norm=True), "--engine-path", site).exit_code == EXIT_USAGE


@pytest.mark.filterwarnings("ignore::dspark.kernels.KernelFallbackWarning")
def test_not_asked_for_the_engines_kernel_that_cannot_run_is_a_warning(tiny_draft, fabricated_engine):
    """What `gate` does: the engine's kernel runs where it can; where it
    cannot, the smoke goes on with dspark's and says why."""
    from dspark.kernels.smoke_checkpoint import smoke_checkpoint

    report = smoke_checkpoint(tiny_draft(fc_norm=True), device="cpu", kernel="both",
                              engine_path=fabricated_engine("main"), engine_required=False)
    (warning,) = [f for f in report.findings if f.code == "SMK011"]
    assert "builds no fc_norm" in warning.message and report.passed


@pytest.mark.filterwarnings("ignore::dspark.kernels.KernelFallbackWarning")
def test_the_engines_package_does_not_stay_imported_after_its_kernel_ran(tiny_draft, fabricated_engine):
    """A gate run in-process imports the engine's kernel for its smoke; a
    later runtime probe in the same process must find what is installed
    where it looks, not the package the smoke left in sys.modules."""
    import sys

    from dspark.converters.runtime import probe_runtime
    from dspark.kernels.smoke_checkpoint import smoke_checkpoint

    site = fabricated_engine("pr1031")
    report = smoke_checkpoint(tiny_draft(fc_norm=True), device=DEVICE, kernel="both", engine_path=site,
                              engine_required=True)
    assert report.engine_kernel is not None and report.engine_kernel.available
    assert not [name for name in sys.modules if name == "tokenspeed" or name.startswith("tokenspeed.")]
    assert probe_runtime(environ={}).profile != "tokenspeed@pr1031"


# TokenSpeed 0.1.1's kernel imports its Triton through the engine's own
# `tokenspeed.runtime.utils.triton`, and importing that runs the package's
# `utils/__init__`, which needs every library the server needs.
VENDOR_TRITON_KERNEL = '''
import torch

from tokenspeed.runtime.utils.triton import tl, triton


def segmented_rmsnorm(x, weight, eps, out=None):
    x32 = x.float()
    y = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
    if out is None:
        return y
    out.copy_(y)
    return out
'''


def _vendor_triton_engine(fabricated_engine, shim: str) -> "Path":
    site = fabricated_engine("0.1.1", kernel=VENDOR_TRITON_KERNEL, version="0.1.1")
    utils = site / "tokenspeed" / "runtime" / "utils"
    utils.mkdir(parents=True, exist_ok=True)
    (utils / "__init__.py").write_text("import cutlass_not_installed_here  # noqa: F401\n")
    (utils / "triton.py").write_text(shim)
    vendor = site / "vendor_triton"
    vendor.mkdir()
    (vendor / "__init__.py").write_text("__version__ = '3.9.10'\n\ndef jit(fn):\n    return fn\n\nlanguage = None\n")
    metadata = site / "vendor_triton-3.9.10.dist-info"
    metadata.mkdir()
    (metadata / "METADATA").write_text("Metadata-Version: 2.1\nName: vendor-triton\nVersion: 3.9.10\n")
    (metadata / "top_level.txt").write_text("vendor_triton\n")
    return site


def test_an_engine_package_that_does_not_import_here_still_runs_its_kernel_file(dspark_process, tiny_draft,
                                                                                fabricated_engine):
    """The kernel file and the engine module it imports are loaded alone
    when the rest of the engine's package cannot be imported; the report
    says so."""
    site = _vendor_triton_engine(fabricated_engine, "tl = triton = None\n")
    run, document = smoke(dspark_process, tiny_draft(fc_norm=True), "--kernel", "both", "--engine-path", site)
    assert run.exit_code == EXIT_OK, run.stdout + run.stderr
    engine = document["engine_kernel"]
    assert engine["ran"] and "cutlass_not_installed_here" in engine["loaded_alone"] and not engine["in_child"]
    (note,) = [f for f in document["findings"] if f["code"] == "SMK010"]
    assert "loaded alone" in note["message"]


def test_a_kernel_compiled_by_the_engines_own_triton_runs_in_a_child_process(dspark_process, tiny_draft,
                                                                             fabricated_engine):
    """TokenSpeed 0.1.1's kernel is compiled by tokenspeed_triton, which
    aborts a process that imported PyPI's triton (or the reverse): it runs
    in a child, which says how it loaded it."""
    site = _vendor_triton_engine(fabricated_engine, "import vendor_triton as triton\ntl = triton.language\n")
    run, document = smoke(dspark_process, tiny_draft(fc_norm=True), "--kernel", "both", "--engine-path", site)
    assert run.exit_code == EXIT_OK, run.stdout + run.stderr
    engine = document["engine_kernel"]
    assert engine["ran"] and engine["triton"] == "vendor_triton 3.9.10" and "child process" in engine["in_child"]
    assert "cutlass_not_installed_here" in engine["loaded_alone"]
    assert engine["paths"]["engine_norm"]["within_tolerance"]
    (note,) = [f for f in document["findings"] if f["code"] == "SMK010"]
    assert "in a child process" in note["message"] and "vendor_triton 3.9.10" in note["message"]


def test_a_child_that_fails_says_why_with_exit_2(dspark_process, tiny_draft, fabricated_engine):
    site = _vendor_triton_engine(fabricated_engine, "import vendor_triton as triton\ntl = triton.language\n")
    kernel = site / "tokenspeed" / "runtime" / "layers" / "segmented_rmsnorm.py"
    kernel.write_text(kernel.read_text().replace("    x32 = x.float()", "    raise ValueError('refused in the child')"))
    run = dspark_process("smoke", tiny_draft(fc_norm=True), "--device", DEVICE, "--kernel", "engine",
                         "--engine-path", site)
    assert run.exit_code == EXIT_USAGE, run.stdout + run.stderr
    assert "refused in the child" in run.stdout + run.stderr and "Traceback" not in run.stderr


def test_a_kernel_whose_engine_imports_reach_further_is_not_loaded_alone(dspark_process, tiny_draft,
                                                                         fabricated_engine):
    site = _vendor_triton_engine(fabricated_engine, "from tokenspeed.runtime.utils import common\n")
    run = dspark_process("smoke", tiny_draft(fc_norm=True), "--device", DEVICE, "--kernel", "engine",
                         "--engine-path", site)
    assert run.exit_code == EXIT_USAGE, run.stdout + run.stderr
    assert "cutlass_not_installed_here" in run.stdout + run.stderr and "Traceback" not in run.stderr


@pytest.mark.filterwarnings("ignore::dspark.kernels.KernelFallbackWarning")
def test_a_kernel_loaded_alone_leaves_no_engine_module_behind(tiny_draft, fabricated_engine):
    import sys

    from dspark.kernels.smoke_checkpoint import smoke_checkpoint

    site = _vendor_triton_engine(fabricated_engine, "tl = triton = None\n")
    report = smoke_checkpoint(tiny_draft(fc_norm=True), device=DEVICE, kernel="both", engine_path=site,
                              engine_required=True)
    assert report.engine_kernel.available and report.engine_kernel.loaded_alone
    assert not [name for name in sys.modules if name == "tokenspeed" or name.startswith("tokenspeed.")]


def test_what_the_engines_package_imported_from_beside_it_stays_imported(fabricated_engine):
    """Only the engine's own package leaves sys.modules after its kernel
    was imported: a compiled module beside it (tokenspeed_triton's
    libtriton) imported a second time aborts the process."""
    import sys

    from dspark.kernels import engine_loading

    site = fabricated_engine("0.1.1", kernel="import beside_the_engine\n" + VENDOR_TRITON_KERNEL.replace(
        "from tokenspeed.runtime.utils.triton import tl, triton\n", ""), version="0.1.1")
    (site / "beside_the_engine.py").write_text("LOADED = True\n")
    sys.modules.pop("beside_the_engine", None)
    module = "tokenspeed.runtime.layers.segmented_rmsnorm"
    engine_loading.import_function(module, str(site), "segmented_rmsnorm")
    assert "beside_the_engine" in sys.modules
    assert not [name for name in sys.modules if name == "tokenspeed" or name.startswith("tokenspeed.")]
    sys.modules.pop("beside_the_engine")
