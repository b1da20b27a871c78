"""Floating-point casts on raw little-endian bytes, with numpy, no torch.

Every cast rounds to nearest, ties to even (RNE), the way torch's `.to()`
does, and gives the same bits for every non-NaN value. A NaN stays a NaN
(its payload bits may differ from torch's, which differ between torch's own
scalar and vector paths).

bfloat16 has no numpy dtype, so it is handled as uint16 bit patterns:
bfloat16 is the top half of a float32, so float32 -> bfloat16 is a rounded
right shift and bfloat16 -> float32 is an exact left shift. Casts from
float64 go through float32 first, as torch does (two roundings).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# dtype codes (safetensors names) this module casts between
CASTABLE = frozenset({"F16", "BF16", "F32", "F64"})

# numpy is imported when a cast runs, not when the CLI starts.
_NUMPY_FLOAT = {"F16": "float16", "F32": "float32", "F64": "float64"}


def float32_to_bfloat16(
    bits: np.ndarray, out: np.ndarray | None = None, scratch: np.ndarray | None = None
) -> np.ndarray:
    """float32 bit patterns (uint32, shape [n]) -> bfloat16 bit patterns
    (uint16, shape [n]), RNE; into `out` (uint16, shape [n]) when given,
    computing in `scratch` (uint32, at least n) when given.

    Adding 0x7FFF plus the lowest kept bit and then truncating rounds to
    nearest with ties to even; a carry out of the mantissa correctly bumps
    the exponent (and a value above bfloat16's largest finite rounds to
    infinity, as in torch). NaN would be corrupted by the addition (it can
    carry into the sign), so NaNs are re-made quiet from their top bits.
    This is the hot loop of `dspark convert --dtype bfloat16`: five in-place
    passes over one scratch array plus two read-only reductions, so with a
    reused cache-sized scratch and output nothing is allocated per chunk.
    """
    import numpy as np

    count = len(bits)
    rounded = np.empty(count, np.uint32) if scratch is None else scratch[:count]
    result = np.empty(count, np.uint16) if out is None else out
    np.right_shift(bits, 16, out=rounded)
    np.bitwise_and(rounded, 1, out=rounded)
    np.add(rounded, 0x7FFF, out=rounded)
    np.add(rounded, bits, out=rounded)
    np.right_shift(rounded, 16, out=rounded)
    np.copyto(result, rounded, casting="unsafe")
    # NaNs are the bit patterns above infinity's: the largest int32 values
    # (positive NaNs, > 0x7F800000) and the largest uint32 ones (negative,
    # > 0xFF800000). Two max reductions find them without a boolean temporary.
    if count and (bits.view(np.int32).max() > 0x7F800000 or bits.max() > 0xFF800000):
        nan = np.isnan(bits.view(np.float32))
        result[nan] = ((bits[nan] >> 16) | 0x0040).astype(np.uint16)
    return result


def bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> float32 bit patterns (uint32); exact."""
    import numpy as np

    widened = bits.astype(np.uint32)
    widened <<= 16
    return widened


def _to_float32(data: memoryview | bytes, dtype: str) -> np.ndarray:
    """Any castable dtype -> float32 values (exact except from float64)."""
    import numpy as np

    if dtype == "BF16":
        return bfloat16_to_float32(np.frombuffer(data, dtype=np.uint16)).view(np.float32)
    values = np.frombuffer(data, dtype=_NUMPY_FLOAT[dtype])
    if dtype == "F32":
        return values
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(np.float32)


def cast_bytes(data: memoryview | bytes, src: str, dst: str) -> memoryview | np.ndarray:
    """Cast a buffer of `src` elements to `dst`; returns a buffer of the
    result (the input itself when src == dst). `data` must hold whole
    elements."""
    import numpy as np

    if src == dst:
        return data
    if src not in CASTABLE or dst not in CASTABLE:
        raise ValueError(f"cannot cast {src} to {dst}; castable dtypes are {sorted(CASTABLE)}")
    if dst == "BF16":
        if src == "F32":
            return float32_to_bfloat16(np.frombuffer(data, dtype=np.uint32))
        # float16 -> float32 is exact, so this is a single rounding; float64
        # rounds twice, like torch.
        return float32_to_bfloat16(_to_float32(data, src).view(np.uint32))
    if dst == "F32":
        return _to_float32(data, src)
    # bfloat16 widens exactly through float32; torch narrows float64 to
    # float32 before float16.
    via_float32 = src == "BF16" or (src == "F64" and dst == "F16")
    source = _to_float32(data, src) if via_float32 else np.frombuffer(data, dtype=_NUMPY_FLOAT[src])
    with np.errstate(over="ignore", invalid="ignore"):
        return source.astype(_NUMPY_FLOAT[dst])


def output_dtype(dtype: str, target: str | None) -> str:
    """The dtype a tensor is written in: `target` for castable floats, its
    own dtype otherwise (integers, bool and fp8 are never cast)."""
    if target is None or dtype not in CASTABLE:
        return dtype
    return target


class ChunkCaster:
    """Casts chunks into buffers the caller owns (`cast_into`), reusing one
    scratch array across chunks and tensors: the cast's passes stay in
    cache, and no chunk touches freshly allocated memory. One per thread."""

    def __init__(self) -> None:
        self._scratch = None

    def cast_into(self, data: memoryview | bytes, src: str, dst: str, out: memoryview) -> memoryview:
        """Cast `data` (whole `src` elements) to `dst` into the writable
        byte buffer `out`, which must hold the result; returns the view of
        `out` that does. Same bits as `cast_bytes`. src == dst copies;
        F32 -> BF16 allocates nothing; other pairs compute with temporaries
        and copy the result."""
        import numpy as np

        source = memoryview(data).cast("B")
        if src == dst:
            out[: len(source)] = source
            return out[: len(source)]
        if src == "F32" and dst == "BF16":
            bits = np.frombuffer(source, dtype=np.uint32)
            if self._scratch is None or len(self._scratch) < len(bits):
                self._scratch = np.empty(len(bits), np.uint32)
            target = np.frombuffer(out, dtype=np.uint16, count=len(bits))
            float32_to_bfloat16(bits, out=target, scratch=self._scratch)
            return out[: 2 * len(bits)]
        result = memoryview(np.ascontiguousarray(cast_bytes(source, src, dst))).cast("B")
        out[: len(result)] = result
        return out[: len(result)]
