"""Tensor dtypes, named as safetensors names them.

Every reader reports dtypes with these codes (torch dtypes are mapped on the
way in), so rules compare one vocabulary.
"""

from __future__ import annotations

# bytes per element
DTYPE_ITEMSIZE: dict[str, int] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}

FLOATING_DTYPES = frozenset({"F8_E4M3", "F8_E5M2", "F16", "BF16", "F32", "F64"})

# `--dtype` spellings (torch's names) to safetensors codes.
CAST_TARGETS: dict[str, str] = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}

# config.json's `torch_dtype` for a safetensors code.
TORCH_DTYPE_NAMES: dict[str, str] = {
    "BF16": "bfloat16",
    "F16": "float16",
    "F32": "float32",
    "F64": "float64",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "I8": "int8",
    "U8": "uint8",
    "I16": "int16",
    "U16": "uint16",
    "I32": "int32",
    "U32": "uint32",
    "I64": "int64",
    "U64": "uint64",
    "BOOL": "bool",
}


def is_floating(dtype: str) -> bool:
    return dtype in FLOATING_DTYPES


def nbytes_of(dtype: str, shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count * DTYPE_ITEMSIZE[dtype]
