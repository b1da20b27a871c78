"""dspark.kernels.smoke_projection: the fused path agrees with fp32, the
incremental fast path is caught skipping fc_norm, the folded path is right."""

import pytest

torch = pytest.importorskip("torch")

from dspark.kernels.reference import segmented_rmsnorm_reference  # noqa: E402
from dspark.kernels.smoke import REL_RMS_TOLERANCE, smoke_projection, synthetic_taps  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
S, TH, H = 5, 64, 48
EPS = 1e-5


def draft_weights(*, fc_norm: bool, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    weights = {
        "context_proj.weight": torch.randn(H, S * TH, generator=gen) / (S * TH) ** 0.5,
        "context_norm.weight": 1.0 + 0.1 * torch.randn(H, generator=gen),
    }
    if fc_norm:
        for i in range(S):
            weights[f"fc_norm.{i}.weight"] = 1.0 + 0.3 * torch.randn(TH, generator=gen)
    return {name: t.to(dtype) for name, t in weights.items()}


def run(weights, **kwargs):
    kwargs.setdefault("tokens", 8)
    return smoke_projection(
        weights, rms_norm_eps=EPS, num_segments=S, target_hidden=TH, device=DEVICE, **kwargs
    )


@pytest.mark.filterwarnings("ignore::dspark.kernels.KernelFallbackWarning")
@pytest.mark.parametrize("dtype", [pytest.param(torch.bfloat16, id="bf16"), pytest.param(torch.float32, id="fp32")])
def test_fc_norm_draft(dtype):
    result = run(draft_weights(fc_norm=True, dtype=dtype))

    assert result.has_fc_norm and result.ok, result
    assert result.fused.within_tolerance and result.folded.within_tolerance
    assert result.fused.cosine_similarity > 0.9999
    # The fast path skips the norms; taps whose scales span three decades
    # make that unmistakable.
    assert not result.incremental_fast_path_valid
    assert result.incremental.rel_rms_error > 10 * REL_RMS_TOLERANCE[dtype]
    assert result.tokens == 8 and result.hidden == H and result.dtype == dtype
    assert result.nonfinite_weights == () and not result.nonfinite_output


@pytest.mark.filterwarnings("ignore::dspark.kernels.KernelFallbackWarning")
def test_draft_without_fc_norm_keeps_the_fast_path():
    result = run(draft_weights(fc_norm=False))

    assert not result.has_fc_norm and result.ok
    assert result.incremental_fast_path_valid
    assert result.folded.within_tolerance


@pytest.mark.filterwarnings("ignore::dspark.kernels.KernelFallbackWarning")
def test_hf_cast_order_and_captured_taps():
    taps = synthetic_taps(3, S, TH, seed=4)
    result = run(draft_weights(fc_norm=True), taps=taps, cast_order="hf")
    assert result.tokens == 3 and result.cast_order == "hf" and result.ok


@pytest.mark.filterwarnings("ignore::dspark.kernels.KernelFallbackWarning")
def test_same_seed_same_numbers():
    weights = draft_weights(fc_norm=True)
    first, second = run(weights, seed=3), run(weights, seed=3)
    assert first.fused.stats == second.fused.stats
    assert run(weights, seed=4).fused.stats != first.fused.stats


@pytest.mark.filterwarnings("ignore::dspark.kernels.KernelFallbackWarning")
def test_nonfinite_weights_are_flagged():
    weights = draft_weights(fc_norm=True)
    weights["fc_norm.2.weight"][5] = float("nan")
    result = run(weights)
    assert result.nonfinite_weights == ("fc_norm.2.weight",)
    assert result.nonfinite_output and not result.ok


@pytest.mark.filterwarnings("ignore::dspark.kernels.KernelFallbackWarning")
@pytest.mark.parametrize("zeroed", ["context_proj.weight", "context_norm.weight"])
def test_an_all_zero_projection_never_passes(zeroed):
    """Zero weights make every path output zeros, equal to the zero
    reference: that must fail, not read as cosine 1 and a pass."""
    weights = draft_weights(fc_norm=True)
    weights[zeroed] = torch.zeros_like(weights[zeroed])
    result = run(weights)
    assert result.zero_weights == (zeroed,) and result.zero_output
    assert not result.fused.within_tolerance and result.fused.cosine_similarity == 0.0
    assert not result.ok


@pytest.mark.filterwarnings("ignore::dspark.kernels.KernelFallbackWarning")
def test_one_zero_fc_norm_fails_though_the_output_is_not_zero():
    weights = draft_weights(fc_norm=True)
    weights["fc_norm.2.weight"] = torch.zeros_like(weights["fc_norm.2.weight"])
    result = run(weights)
    assert result.zero_weights == ("fc_norm.2.weight",) and not result.zero_output
    assert result.fused.within_tolerance and not result.ok


def test_synthetic_taps_scale_by_decades():
    x = synthetic_taps(256, S, TH, seed=0, dtype=torch.float32).view(256, S, TH)
    rms = x.pow(2).mean(dim=(0, 2)).sqrt()
    assert rms[0] == pytest.approx(0.1, rel=0.1) and rms[-1] == pytest.approx(100.0, rel=0.1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
def test_synthetic_taps_are_drawn_in_the_working_dtype_only(dtype):
    """No wider copy on the way: at K3 scale (T = 8192) a float64 draw is
    2.35 GB on the host before it moves to the GPU."""
    from torch.utils._python_dispatch import TorchDispatchMode

    made = []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            made.extend(t.dtype for t in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(t, torch.Tensor))
            return out

    with Watch():
        x = synthetic_taps(16, S, TH, seed=1, dtype=dtype)
    assert x.dtype == dtype and x.shape == (16, S * TH)
    assert set(made) == {dtype}, made


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_synthetic_taps_are_drawn_on_the_device():
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    x = synthetic_taps(8192, 5, 7168, dtype=torch.bfloat16, device="cuda")
    assert x.is_cuda and x.dtype == torch.bfloat16
    # the taps themselves, nothing wider (a float64 draw on the GPU would be 4x)
    assert torch.cuda.max_memory_allocated() - before <= x.numel() * x.element_size() * 1.01


@pytest.mark.parametrize(
    "mutate, message",
    [
        pytest.param(lambda w: w.pop("fc_norm.4.weight"), "incomplete", id="partial-fc_norm"),
        pytest.param(lambda w: w.pop("context_norm.weight"), "missing tensor", id="no-context_norm"),
        pytest.param(lambda w: w.update({"fc_norm.0.weight": torch.ones(TH + 1)}), r"expected \[64\]", id="fc_norm-shape"),
        pytest.param(
            lambda w: w.update({"context_proj.weight": torch.ones(H, S * TH - 1)}), "S\\*th", id="context_proj-shape"
        ),
    ],
)
def test_rejects_inconsistent_weights(mutate, message):
    weights = draft_weights(fc_norm=True)
    mutate(weights)
    with pytest.raises(ValueError, match=message):
        run(weights)


@pytest.mark.skipif(DEVICE != "cuda", reason="timings are taken on CUDA only")
def test_cuda_timings_are_reported():
    result = run(draft_weights(fc_norm=True), tokens=256)
    assert result.timings is not None and result.timings.gemm_ms > 0
    assert result.timings.projection_ms >= result.timings.gemm_ms * 0.5


def test_no_timings_off_cuda():
    if DEVICE == "cuda":
        pytest.skip("CUDA present")
    assert run(draft_weights(fc_norm=False)).timings is None


def engine_like(x, weight, eps, out=None):
    """A serving engine's segmented RMSNorm, as dspark calls one: [T, S*th]."""
    y = segmented_rmsnorm_reference(x.float(), weight.float(), eps).to(x.dtype)
    return y if out is None else out.copy_(y)


def test_an_engines_kernel_runs_beside_dsparks_on_the_fc_norm_step():
    result = run(draft_weights(fc_norm=True), engine_norm=engine_like, engine_name="tokenspeed@pr1031")
    engine = result.engine
    assert engine.ran and engine.engine == "tokenspeed@pr1031" and engine.within_tolerance
    assert engine.engine_norm.name == "tokenspeed@pr1031 fc_norm"
    assert engine.dspark_norm.rel_rms_error == pytest.approx(engine.engine_norm.rel_rms_error, rel=0.5)


def test_an_engines_kernel_off_the_norm_is_caught_and_one_that_raises_is_told():
    def unweighted(x, weight, eps, out=None):
        return engine_like(x, torch.ones_like(weight), eps, out)

    assert not run(draft_weights(fc_norm=True), engine_norm=unweighted).engine.within_tolerance

    def refuses(x, weight, eps, out=None):
        raise ValueError("segmented_rmsnorm requires CUDA tensors")

    engine = run(draft_weights(fc_norm=True), engine_norm=refuses).engine
    assert not engine.ran and engine.reason == "it raised ValueError: segmented_rmsnorm requires CUDA tensors"
    assert not run(draft_weights(fc_norm=False), engine_norm=engine_like).engine.ran
