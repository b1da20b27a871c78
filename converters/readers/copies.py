"""Two stored copies of one tensor, compared as the engine would serve them.

The engine loads every copy it finds of a tensor and keeps the one it reads
last (a tensor in two shards: IDX005; two stored names that load into one
parameter: INV006; a head beside the embedding it is tied to: LMH001/002).
Copies with the same values serve the same either way, and so do copies
that round alike into the dtypes a draft is served in; copies that differ
serve whichever came last. Which verdict is right depends on the values,
so these are the places where a header-only check reads payload, up to
`COMPARE_LIMIT_HEADER_ONLY` a copy; `--deep` and `convert`, which read every
payload anyway, compare copies of any size.
"""

from __future__ import annotations

import dataclasses
from array import array
from typing import Iterator

from dspark.converters.casting import CASTABLE, bfloat16_to_float32, cast_bytes
from dspark.schema.errors import CheckpointError
from dspark.schema.findings import Finding, Severity
from dspark.schema.inventory import TensorEntry, printable_name

# How two copies compared. SAME_AS_SERVED: different values that become
# the same once cast to the dtype the engine serves the draft in.
SAME, DIFFERENT, NOT_COMPARED, UNREADABLE = "identical", "different", "not compared", "unreadable"
SAME_AS_SERVED = "identical as served"

#: The dtypes a draft's floating-point weights are served in: the target's
#: (engine/event_loop.py@f4d8ec6e:1031-1036), which "auto" resolves to the
#: target config's, bf16 when it names none and fp16 for an fp32 one, never
#: fp32 (configs/model_config.py@f4d8ec6e:766-795). Copies serve the same
#: only if they agree in both, whichever target the draft is deployed on.
SERVED_FLOAT_DTYPES = ("BF16", "F16")

#: Largest copy a header-only check reads to compare it with the other:
#: enough for norms, biases and small matrices; a duplicated embedding
#: (gigabytes, and a download for a remote folder) waits for --deep.
COMPARE_LIMIT_HEADER_ONLY = 64 << 20

COMPARE_CHUNK = 8 << 20


def serves_the_same(comparison: str) -> bool:
    """Whether copies that compared so load the same values."""
    return comparison in (SAME, SAME_AS_SERVED)


# dtype -> (bytes an element, array typecode) for integer copies compared by value
_INTEGERS = {"I8": (1, "b"), "U8": (1, "B"), "I16": (2, "h"), "U16": (2, "H"), "I32": (4, "i"),
             "U32": (4, "I"), "I64": (8, "q")}


def compare_copies(reader, first: TensorEntry, second: TensorEntry, *, limit: int | None) -> str:
    """How `first` and `second` compare, read through the checkpoint's
    `reader`; copies of more than `limit` bytes are not read. Copies in two
    dtypes are compared by value where both widen exactly into one (bf16,
    fp16 and fp32 into fp64; integers into int64): the engine casts both
    into one parameter, so copies of the same values serve the same."""
    if tuple(first.shape) != tuple(second.shape):
        return DIFFERENT
    widen = _widening(first.dtype, second.dtype)
    if widen is None:
        return DIFFERENT
    if limit is not None and max(first.nbytes, second.nbytes) > limit:
        return NOT_COMPARED
    try:
        if streams_equal(widen[0](iter(reader.iter_chunks(first, COMPARE_CHUNK))),
                         widen[1](iter(reader.iter_chunks(second, COMPARE_CHUNK)))):
            return SAME
        if first.dtype not in CASTABLE or second.dtype not in CASTABLE:
            return DIFFERENT
        for served in SERVED_FLOAT_DTYPES:
            if first.dtype == second.dtype == served:
                return DIFFERENT  # casting to their own dtype changes nothing: already compared
            if not streams_equal(_cast_to(first.dtype, served)(iter(reader.iter_chunks(first, COMPARE_CHUNK))),
                                 _cast_to(second.dtype, served)(iter(reader.iter_chunks(second, COMPARE_CHUNK)))):
                return DIFFERENT
    except (OSError, CheckpointError):
        return UNREADABLE
    return SAME_AS_SERVED


def _cast_to(dtype: str, served: str):
    """A stream transform: `dtype` values cast to `served` as torch's copy
    into a parameter rounds them (to nearest, ties to even)."""
    def convert(chunks: Iterator) -> Iterator[bytes]:
        size = _FLOATS[dtype]
        for piece in _whole_elements(chunks, size):
            yield piece if len(piece) % size else bytes(memoryview(cast_bytes(piece, dtype, served)).cast("B"))
    return convert


def _widening(first: str, second: str):
    """Two stream transforms that bring both dtypes to one encoding, or None."""
    if first == second:
        return _as_is, _as_is
    if {first, second} == {"BF16", "F32"}:
        return (_bf16_as_f32, _as_is) if first == "BF16" else (_as_is, _bf16_as_f32)
    if first in _FLOATS and second in _FLOATS:
        # every value of F16 and BF16 is exact in F32, and of all three in F64
        return _as_f64(first), _as_f64(second)
    if first in _INTEGERS and second in _INTEGERS:
        return _as_int64(*_INTEGERS[first]), _as_int64(*_INTEGERS[second])
    return None


def _as_is(chunks: Iterator) -> Iterator:
    return chunks


def _whole_elements(chunks: Iterator, size: int) -> Iterator[bytes]:
    """The stream re-cut so that no element spans two pieces."""
    carry = b""
    for chunk in chunks:
        data = carry + bytes(chunk)
        cut = len(data) - len(data) % size
        carry = data[cut:]
        if cut:
            yield data[:cut]
    if carry:
        yield carry  # a torn last element: compares unequal


def _bf16_as_f32(chunks: Iterator) -> Iterator[bytes]:
    """bf16 values as the fp32 values they are exactly (the high half)."""
    for piece in _whole_elements(chunks, 2):
        out = bytearray(len(piece) * 2)
        out[2::4] = piece[0::2]
        out[3::4] = piece[1::2]
        yield bytes(out)


_FLOATS = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}


def _as_f64(dtype: str):
    def convert(chunks: Iterator) -> Iterator[bytes]:
        import numpy as np  # only when two copies in two float dtypes are compared

        size = _FLOATS[dtype]
        for piece in _whole_elements(chunks, size):
            if len(piece) % size:
                yield piece
            elif dtype == "BF16":
                yield bfloat16_to_float32(np.frombuffer(piece, np.uint16)).view(np.float32).astype(np.float64).tobytes()
            else:
                yield np.frombuffer(piece, {"F16": np.float16, "F32": np.float32, "F64": np.float64}[dtype]
                                    ).astype(np.float64).tobytes()
    return convert


def _as_int64(size: int, code: str):
    def convert(chunks: Iterator) -> Iterator[bytes]:
        for piece in _whole_elements(chunks, size):
            if len(piece) % size:
                yield piece
            else:
                yield array("q", memoryview(piece).cast(code)).tobytes()
    return convert


def streams_equal(first: Iterator, second: Iterator) -> bool:
    """Whether two streams of chunks carry the same bytes, however each is cut."""
    left, right = b"", b""
    while True:
        while not left:
            chunk = next(first, None)
            if chunk is None:
                break
            left = bytes(chunk)
        while not right:
            chunk = next(second, None)
            if chunk is None:
                break
            right = bytes(chunk)
        if not left or not right:
            return not left and not right
        common = min(len(left), len(right))
        if left[:common] != right[:common]:
            return False
        left, right = left[common:], right[common:]


def alike_text(comparison: str, first_dtype: str, second_dtype: str) -> str:
    """How two copies that serve the same are alike, for a message."""
    if comparison == SAME_AS_SERVED:
        return ("with different values that round to the same ones in bf16 and in fp16, the dtypes the engine "
                "serves a draft in (the target's; never fp32 unless launched with --dtype float32)")
    if first_dtype == second_dtype:
        return "byte for byte the same"
    return f"with the same values as {first_dtype} and {second_dtype} (the engine casts either into one parameter)"


def judge_same_served_name(finding: Finding, checkpoint, *, limit: int | None) -> Finding:
    """INV006 (two stored tensors that load into one parameter) judged by
    their bytes, read through `checkpoint.reader` up to `limit` a copy: the
    engine loads both and keeps the one it reads last (llama_eagle3.py@f4d8ec6e:
    688-689, deepseek_v3.py@f4d8ec6e:2368 for `midlayer.` and `layers.0.`),
    so identical copies serve the same values, a warning; copies that
    differ, or were not compared, stay an error. Any other finding as it is."""
    if finding.code != "INV006":
        return finding
    stored = finding.detail.get("stored_names") or []
    by_name = {entry.stored_name: entry for entry in checkpoint.entries if entry.stored_name in stored}
    if len(stored) != 2 or len(by_name) != 2:
        return finding
    first, second = by_name[stored[0]], by_name[stored[1]]
    comparison = compare_copies(checkpoint.reader, first, second, limit=limit)
    detail = dict(finding.detail, comparison=comparison)
    if serves_the_same(comparison):
        return dataclasses.replace(
            finding,
            message=f"{first.file}: {printable_name(first.stored_name)} and {second.file}: "
                    f"{printable_name(second.stored_name)} both load as {printable_name(first.served_name)}, "
                    + alike_text(comparison, first.dtype, second.dtype)
                    + ": the engine loads both into one parameter, with the same values. Keep one to save the space.",
            severity=Severity.WARNING, detail=detail)
    why = {
        DIFFERENT: " Their bytes differ.",
        NOT_COMPARED: f" They were not compared ({first.nbytes / 2**20:,.1f} MiB each, over the "
                      f"{COMPARE_LIMIT_HEADER_ONLY >> 20} MiB a header-only check compares; "
                      "`dspark check --deep` compares them).",
        UNREADABLE: " One copy could not be read back to compare them.",
    }[comparison]
    return dataclasses.replace(finding, message=finding.message + why, detail=detail)


def judge_tied_head(finding: Finding, reader, entries: dict[str, TensorEntry], *, limit: int | None) -> Finding:
    """LMH002 (a head shipped beside `tie_word_embeddings`) judged by value:
    a head with the shipped embedding's values is what a tied model saves
    under both names, so the engine serves what was trained (LMH001, a
    warning); one that differs stays LMH002; one too large to compare
    header-only is a warning until `--deep` compares it (it is dropped
    either way, and a genuinely tied draft must not fail for its size).
    `entries` maps the names in the finding's detail to the tensors to
    read. Any other finding as it is."""
    from dspark.schema.rules.vocab import tied_head_finding

    if finding.code != "LMH002" or not finding.detail.get("embedding"):
        return finding
    head, embedding = entries.get(finding.detail.get("head")), entries.get(finding.detail["embedding"])
    if head is None or embedding is None:
        return finding
    comparison = compare_copies(reader, head, embedding, limit=limit)
    detail = dict(finding.detail, comparison=comparison)
    if serves_the_same(comparison):
        alike = ("the embedding's values" if comparison == SAME else
                 "values that round to the embedding's in bf16 and in fp16, the dtypes a draft is served in")
        return Finding(
            "LMH001",
            f"{head.file}: {printable_name(head.stored_name)} is shipped beside tie_word_embeddings: true with "
            f"{alike} ({printable_name(embedding.stored_name)}), as a tied model saves them: the engine "
            "serves the embedding as the head and drops this copy. Remove it to save the space.",
            file=head.file, tensor=finding.tensor, detail=detail, severity=Severity.WARNING,
        )
    why, severity = {
        DIFFERENT: ("it differs from the embedding", Severity.ERROR),
        NOT_COMPARED: (f"it was not compared with the embedding ({head.nbytes / 2**20:,.1f} MiB, over the "
                       f"{COMPARE_LIMIT_HEADER_ONLY >> 20} MiB a header-only check compares; "
                       "`dspark check --deep` compares them)", Severity.WARNING),
        UNREADABLE: ("one of the two could not be read back to compare them", Severity.ERROR),
    }[comparison]
    return tied_head_finding(finding.file, finding.tensor, why, detail, severity)
