"""numpy casts on raw bits against torch's `.to()`, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from dspark.converters.casting import CASTABLE, ChunkCaster, cast_bytes, float32_to_bfloat16, output_dtype

torch = pytest.importorskip("torch")

TORCH = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}

# Values where rounding is easy to get wrong: ties (even and odd), the
# largest finites and what overflows past them, subnormals of every width,
# signed zeros and infinities.
EDGES = [
    0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"),
    1.00390625, 1.01171875, 1.0 + 2**-8 + 2**-20, 1.0 + 2**-9,
    65504.0, 65519.99, 65520.0, -65520.0, 3.3895313892515355e38, 3.4e38, 3.4028234663852886e38,
    1e-40, -1e-40, 1.4e-45, 9.2e-41, 6e-8, 5.96e-8, 2.98e-8, 3e-8, 6.1e-5, 6.09e-5,
]


def _samples(dtype: str, seed: int = 0) -> "torch.Tensor":
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn(50_000, generator=generator, dtype=torch.float64)
    values = values * torch.exp(torch.randn(50_000, generator=generator, dtype=torch.float64) * 15)
    values = torch.cat([values, torch.tensor(EDGES, dtype=torch.float64)])
    return values.to(TORCH[dtype])


def _raw(tensor: "torch.Tensor") -> bytes:
    return tensor.contiguous().view(torch.uint8).numpy().tobytes()


def assert_bits_equal(got: bytes, want: "torch.Tensor", what: str) -> None:
    """Every element bit-identical, except that a NaN only has to be a NaN."""
    mine = torch.frombuffer(bytearray(got), dtype=want.dtype)
    assert mine.shape == want.shape, what
    same = (mine.view(torch.uint8).reshape(len(want), -1) == want.view(torch.uint8).reshape(len(want), -1)).all(dim=1)
    both_nan = mine.isnan() & want.isnan()
    wrong = ~(same | both_nan)
    if wrong.any():
        index = int(wrong.nonzero()[0])
        pytest.fail(f"{what}: {int(wrong.sum())} elements differ; first at {index}: {mine[index].item()!r} vs torch {want[index].item()!r}")


PAIRS = [pytest.param(s, d, id=f"{s}-to-{d}") for s in sorted(CASTABLE) for d in sorted(CASTABLE)]


@pytest.mark.parametrize("src,dst", PAIRS)
def test_cast_matches_torch_bit_for_bit(src: str, dst: str) -> None:
    source = _samples(src)
    got = np.asarray(cast_bytes(_raw(source), src, dst)).tobytes()
    assert_bits_equal(got, source.to(TORCH[dst]), f"{src}->{dst}")


@pytest.mark.parametrize("src,dst", [("F32", "BF16"), ("F32", "F16"), ("BF16", "F32"), ("F64", "BF16")])
def test_chunked_cast_equals_whole_cast(src: str, dst: str) -> None:
    raw = _raw(_samples(src, seed=1))
    item = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}[src]
    chunk = 1000 * item
    pieces = b"".join(np.asarray(cast_bytes(memoryview(raw)[i:i + chunk], src, dst)).tobytes() for i in range(0, len(raw), chunk))
    assert pieces == np.asarray(cast_bytes(raw, src, dst)).tobytes()


def test_nan_stays_nan_in_bfloat16_with_its_sign() -> None:
    # Quiet, signalling, payload-only and all-ones NaNs of both signs.
    patterns = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF], dtype=np.uint32)
    result = float32_to_bfloat16(patterns)
    assert np.isnan(torch.from_numpy(result.view(np.int16)).view(torch.bfloat16).float().numpy()).all()
    assert [bool(r & 0x8000) for r in result] == [False, True, False, True, False, True]


@pytest.mark.parametrize("src,dst", PAIRS)
def test_cast_into_a_reused_buffer_matches_cast_bytes(src: str, dst: str) -> None:
    raw = _raw(_samples(src, seed=2))
    item = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}[src]
    chunk = 4096 * item
    caster = ChunkCaster()
    out = memoryview(bytearray(4 * chunk))  # the widest cast, 16 -> 64 bits, quadruples
    pieces = []
    for start in range(0, len(raw), chunk):
        got = caster.cast_into(memoryview(raw)[start:start + chunk], src, dst, out)
        pieces.append(bytes(got))  # the next chunk overwrites `out`
    assert b"".join(pieces) == np.asarray(cast_bytes(raw, src, dst)).tobytes()


@pytest.mark.parametrize(
    "nan",
    [pytest.param(p, id=f"{p:08X}") for p in (0x7F800001, 0x7FC00000, 0x7FFFFFFF, 0xFF800001, 0xFFC00000, 0xFFFFFFFF)],
)
def test_a_nan_anywhere_in_a_reused_scratch_chunk_stays_nan(nan: int) -> None:
    # The NaN test is two max reductions; the infinities and the largest
    # finites beside each NaN must not be taken for NaNs.
    finite = np.array([0x7F800000, 0xFF800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000], dtype=np.uint32)
    scratch = np.empty(64, np.uint32)
    out = np.empty(len(finite) + 1, np.uint16)
    for where in range(len(finite) + 1):
        bits = np.insert(finite, where, np.uint32(nan))
        result = float32_to_bfloat16(bits, out=out, scratch=scratch)
        assert result is out
        assert np.isnan(torch.from_numpy(result.view(np.int16)).view(torch.bfloat16).float().numpy()[where])
        assert bool(result[where] & 0x8000) == bool(nan & 0x80000000)
        want = torch.from_numpy(finite.view(np.int32)).view(torch.float32).to(torch.bfloat16).view(torch.int16).numpy()
        assert np.delete(result, where).view(np.int16).tolist() == want.tolist()
    assert not np.isnan(
        torch.from_numpy(float32_to_bfloat16(finite).view(np.int16)).view(torch.bfloat16).float().numpy()
    ).any()


def test_rounding_overflow_goes_to_infinity_like_torch() -> None:
    largest = np.array([0x7F7FFFFF], dtype=np.uint32)  # float32 max rounds up past bfloat16 max
    assert float32_to_bfloat16(largest)[0] == 0x7F80


def test_same_dtype_is_returned_untouched() -> None:
    data = memoryview(b"\x00\x00\x80\x3f")
    assert cast_bytes(data, "F32", "F32") is data


def test_non_float_dtypes_are_never_cast() -> None:
    assert output_dtype("I64", "BF16") == "I64"
    assert output_dtype("F8_E4M3", "BF16") == "F8_E4M3"
    assert output_dtype("F32", None) == "F32"
    with pytest.raises(ValueError, match="cannot cast I32"):
        cast_bytes(b"\x00" * 4, "I32", "BF16")
