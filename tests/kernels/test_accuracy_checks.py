"""The accuracy contract's check itself (dspark.kernels.testing), on hand-made tensors."""

import pytest

torch = pytest.importorskip("torch")

from dspark.kernels.testing import assert_kernel_close, error_stats  # noqa: E402


def _flip(tensor: torch.Tensor, count: int, ulps: int = 1) -> torch.Tensor:
    """A copy of a bf16/fp16 tensor with its first ``count`` elements moved by ``ulps`` ulp."""
    bits = tensor.clone().view(torch.int16)
    bits.view(-1)[:count] += ulps
    return bits.view(tensor.dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_one_flip_passes_in_a_small_tensor_two_do_not(dtype):
    expected = (torch.rand(500, dtype=torch.float64) + 0.5).to(dtype)
    assert_kernel_close("one flip", _flip(expected, 1), expected)
    with pytest.raises(AssertionError, match="2 differ, 1 allowed"):
        assert_kernel_close("two flips", _flip(expected, 2), expected)


def test_share_of_identical_elements_in_a_large_tensor():
    expected = (torch.rand(10_000, dtype=torch.float64) + 0.5).to(torch.bfloat16)
    assert_kernel_close("0.1 % flipped", _flip(expected, 10), expected)
    with pytest.raises(AssertionError, match="11 differ, 10 allowed"):
        assert_kernel_close("0.11 % flipped", _flip(expected, 11), expected)


def test_no_flip_allowed_when_every_element_must_be_identical():
    expected = (torch.rand(5000, dtype=torch.float64) + 0.5).to(torch.bfloat16)
    with pytest.raises(AssertionError, match="1 differ, 0 allowed"):
        assert_kernel_close("one flip", _flip(expected, 1), expected, min_identical=1.0)


def test_two_ulps_never_pass():
    expected = (torch.rand(10_000, dtype=torch.float64) + 0.5).to(torch.bfloat16)
    with pytest.raises(AssertionError, match="max ulp 2"):
        assert_kernel_close("one element 2 ulp off", _flip(expected, 1, ulps=2), expected)


def test_fp32_relative_tolerance_and_non_finite_values():
    expected = torch.rand(100, dtype=torch.float64).float() + 1.0
    assert_kernel_close("1e-6 off", expected * (1 + 1e-6), expected)
    with pytest.raises(AssertionError):
        assert_kernel_close("1e-5 off", expected * (1 + 1e-5), expected)
    with_nan = expected.clone()
    with_nan[3] = float("nan")
    with pytest.raises(AssertionError, match="1 non-finite"):
        assert_kernel_close("a NaN", with_nan, expected)
    assert error_stats(with_nan, expected).nonfinite == 1


def test_zeros_against_zeros_is_never_a_match():
    zeros = torch.zeros(64)
    stats = error_stats(zeros, zeros)
    assert stats.rel_rms_error == float("inf") and stats.cosine_similarity == 0.0
    # relative to the reference's scale: the same absolute error is large
    # against a small reference and small against a large one
    small, large = torch.full((64,), 1e-3, dtype=torch.float64), torch.full((64,), 1e3, dtype=torch.float64)
    assert error_stats(small + 1e-4, small).rel_rms_error == pytest.approx(0.1)
    assert error_stats(large + 1e-4, large).rel_rms_error == pytest.approx(1e-7)
    assert error_stats(zeros, large).rel_rms_error == pytest.approx(1.0)
    assert error_stats(zeros, large).cosine_similarity == 0.0
