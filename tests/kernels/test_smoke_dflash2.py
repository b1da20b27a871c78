"""`dspark smoke` on DFlash2 drafts: the context projection DFlash2 runs on
the concatenated target taps (fc, then hidden_norm; no fc_norm:
tokenspeed/runtime/models/dflash.py::DFlashDraftModel.project_target_hidden
@tokenspeed==0.1.1:397-398, which DFlash2DraftModel inherits) through
dspark's kernel against the fp32 reference, on fabricated GQA and MLA drafts,
in Triton's interpreter when no GPU is present (conftest.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from safetensors.torch import load_file, save_file  # noqa: E402

from dspark.examples.fabricate import fabricate  # noqa: E402
from dspark.kernels.smoke_checkpoint import smoke_checkpoint  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.filterwarnings("ignore::dspark.kernels.KernelFallbackWarning")


@pytest.mark.parametrize("variant", ["gqa", "mla"])
@pytest.mark.parametrize("kernel", ["dspark", "both"])
def test_a_dflash2_draft_runs_its_context_projection(tmp_path, variant, kernel):
    draft = fabricate(tmp_path / "d", family="dflash2", variant=variant)
    report = smoke_checkpoint(draft, device=DEVICE, tokens=8, kernel=kernel)
    assert report.family == "dflash2" and report.passed
    result = report.result
    # fc over the three taps of the draft's own width, into hidden_size; no fc_norm
    assert (result.num_segments, result.target_hidden, result.hidden) == (3, 40, 40)
    assert not result.has_fc_norm and result.fused.within_tolerance and result.folded.within_tolerance
    codes = {f.code for f in report.findings}
    # `both` needs no engine here: without fc_norm the engine runs no kernel of its own on this step
    assert ("SMK012" in codes) == (kernel == "both") and report.engine_kernel is None


def _edited(folder, name, edit):
    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    tensors[name] = edit(tensors[name])
    save_file(tensors, str(path), metadata={"format": "pt"})


@pytest.mark.parametrize("name, code", [("fc.weight", "SMK008"), ("hidden_norm.weight", "SMK008")])
def test_a_zeroed_dflash2_projection_fails(tmp_path, name, code):
    # The smoke reads DFlash2's own fc and hidden_norm: zeroing either is seen.
    draft = fabricate(tmp_path / "d", family="dflash2")
    _edited(draft, name, torch.zeros_like)
    report = smoke_checkpoint(draft, device=DEVICE, tokens=8)
    assert not report.passed and code in {f.code for f in report.findings}


def test_a_nan_in_the_dflash2_projection_fails(tmp_path):
    draft = fabricate(tmp_path / "d", family="dflash2")

    def poison(tensor):
        tensor = tensor.clone()
        tensor.view(-1)[0] = float("nan")
        return tensor

    _edited(draft, "fc.weight", poison)
    report = smoke_checkpoint(draft, device=DEVICE, tokens=8)
    assert not report.passed and "SMK001" in {f.code for f in report.findings}
