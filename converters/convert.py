"""`dspark convert`: a training checkpoint in, the family's servable layout
out. Plan first (`plan_conversion` -> `ConvertPlan`, nothing written;
`convert_plan.py`), then act (`convert_checkpoint` -> `ConvertReport`).

The output is written one tensor at a time into a temporary folder beside
the destination, fsynced, checked with the same code as `dspark check`, and
only then renamed into place (`writers/atomic.py`). An error, SIGINT or
SIGTERM removes the temporary folder; the destination is either absent or
complete.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from dspark.converters.casting import ChunkCaster
from dspark.converters.check import CheckReport, ProgressStart, check_checkpoint
from dspark.converters.convert_plan import (
    ConvertOptions,
    ConvertPlan,
    DroppedTensor,
    TensorPlan,
    error_from_findings,
    plan_conversion,
)
from dspark.converters.destination import refuse_to_replace_others_work
from dspark.converters.layouts.hf import CONFIG_NAME, MANIFEST_NAME, SAFETENSORS_INDEX
from dspark.converters.writers.atomic import (
    InterruptGuard,
    clean_stale_temporaries,
    fsync_dir,
    write_atomically,
    write_json,
)
from dspark.converters.writers.manifest import build_manifest, sha256_of_file
from dspark.converters.writers.safetensors import (
    CHUNKS_IN_FLIGHT,
    DEFAULT_MAX_SHARD_SIZE,
    PlannedTensor,
    write_index,
    write_shard,
)
from dspark.schema.dtypes import DTYPE_ITEMSIZE, TORCH_DTYPE_NAMES
from dspark.schema.errors import UsageError
from dspark.schema.findings import Finding, Severity
from dspark.schema.inventory import PayloadStats, TensorEntry, printable_name
from dspark.schema.rules import payload_findings

# Small enough for the read buffer, the cast's scratch and the output ring to
# stay in the L3 cache; 1, 2 and 4 MiB measured alike, 8 and 16 MiB slower,
# and 2 MiB keeps the peak RSS ~9 MiB lower than 4 MiB.
CHUNK_BYTES = 2 * 1024 * 1024


@dataclass
class ConvertReport:
    """What `convert` wrote and what the check of the output found."""

    plan: ConvertPlan
    files: dict[str, int]  # file name -> bytes, in the destination
    verification: CheckReport
    seconds: float

    @property
    def warnings(self) -> list[Finding]:
        return self.verification.warnings

    def to_dict(self) -> dict[str, Any]:
        verified = self.verification
        return {
            "passed": verified.passed(),
            "source": self.plan.source,
            "destination": self.plan.destination,
            "source_format": self.plan.source_format,
            "family": self.plan.family,
            "dtype": self.plan.to_dict()["dtype"],
            "tensors_written": len(self.plan.tensors),
            "bytes_in": self.plan.bytes_in,
            "bytes_out": self.plan.bytes_out,
            "renamed": len(self.plan.renames),
            "splits": self.plan.splits,
            "dropped": [d.to_dict() for d in self.plan.dropped],
            "casts": self.plan.casts,
            "not_cast": self.plan.not_cast,
            "shards": [s.to_dict() for s in self.plan.shards],
            "files": [{"name": n, "size": s} for n, s in sorted(self.files.items())],
            "config_changes": self.plan.config_changes,
            "replaced_existing": self.plan.replaces_existing,
            "seconds": round(self.seconds, 3),
            "source_notes": [f.to_dict() for f in self.plan.findings if f.code.startswith("SRC")],
            "verification": {
                "counts": {s: sum(1 for f in verified.findings if f.severity.value == s) for s in ("error", "warning", "info")},
                "findings": [f.to_dict() for f in verified.findings],
            },
            # every report has `findings`: here the source's notes and the output's check
            "findings": [f.to_dict() for f in self.plan.findings if f.code.startswith("SRC")]
            + [f.to_dict() for f in verified.findings],
        }


def convert_checkpoint(
    src: Path | str,
    dst: Path | str,
    options: ConvertOptions | None = None,
    *,
    progress: ProgressStart | None = None,
) -> ConvertReport:
    """Convert `src` into the servable layout at `dst`; see the module
    docstring for the guarantees. `progress(total_bytes)` may return a
    callable that is told the input bytes of each chunk processed."""
    plan = plan_conversion(src, dst, options)
    refuse_failing_plan(plan)
    return execute_plan(plan, progress=progress)


def refuse_failing_plan(plan: ConvertPlan) -> None:
    """Raise before writing anything when the output would fail the check."""
    if not plan.errors:
        return
    raise error_from_findings(
        plan.errors,
        f"{plan.source}: the converted draft would fail `dspark check` with {len(plan.errors)} error(s): "
        "{listed}. Nothing was written.",
        hint="Fix the source (or pass --config with a corrected config.json); "
        "`dspark convert --plan` shows every finding.",
        root=plan.checkpoint.root,
    )


def execute_plan(plan: ConvertPlan, *, progress: ProgressStart | None = None) -> ConvertReport:
    """Write the plan into a temporary folder, verify it, move it into place."""
    try:
        return _execute(plan, progress)
    except OSError as error:
        # Disk full, permissions, a file vanishing: the environment, not a bug.
        where = error.filename or plan.destination
        raise UsageError(
            f"{where}: {error.strerror or error} while converting {plan.source}; nothing was written to "
            f"{plan.destination}.",
            path=str(where),
            hint="Check free space and permissions where the destination is written, and that the input "
            "is complete and readable.",
        ) from error


def _execute(plan: ConvertPlan, progress: ProgressStart | None) -> ConvertReport:
    started = time.perf_counter()
    files, verification = write_atomically(
        Path(plan.destination),
        lambda folder: _write_and_verify(plan, folder, progress),
        replace=plan.options.force,
        before_replace=refuse_to_replace_others_work,
        last=(MANIFEST_NAME,),
    )
    return ConvertReport(plan, files, verification, time.perf_counter() - started)


def _write_and_verify(plan: ConvertPlan, folder: Path, progress: ProgressStart | None) -> tuple[dict[str, int], CheckReport]:
    from dspark.converters.payload_scan import payload_scanner

    reader = plan.checkpoint.reader
    advance = progress(plan.bytes_in) if progress else None
    by_name = {t.name: t for t in plan.tensors}
    # What every written payload holds (NaN/Inf, all zeros, all ones),
    # scanned on the output chunk while it is still in cache: the values
    # written are judged, so a cast that overflows is caught too.
    written_stats: dict[str, PayloadStats] = {}

    # The writer may still hold CHUNKS_IN_FLIGHT chunks when it asks for
    # the next, so the cast fills a ring of one more output buffers: no
    # chunk allocates, and the buffers stay in cache.
    widest = max((_output_chunk_bytes(t) for t in plan.tensors), default=0)
    ring = [memoryview(bytearray(widest)) for _ in range(CHUNKS_IN_FLIGHT + 1)]
    turn = 0
    cast = ChunkCaster()

    def source(planned: PlannedTensor) -> Iterator[Any]:
        nonlocal turn
        tensor = by_name[planned.name]
        src, dst = tensor.source.dtype, tensor.dtype
        scanner = payload_scanner(dst)
        for chunk in tensor.source_chunks(reader, CHUNK_BYTES):
            # Readers reuse their buffers too, so even an uncast chunk is
            # copied into the ring.
            out = cast.cast_into(chunk, src, dst, ring[turn])
            scanner.update(out)
            yield out
            turn = (turn + 1) % len(ring)
            if advance is not None:
                advance(len(chunk))
        written_stats[planned.name] = scanner.stats()

    written = []
    for shard in plan.shards:
        written += write_shard(folder / shard.file, shard, source)
    refusals = payload_refusals(plan, written_stats)
    if refusals:
        raise error_from_findings(
            refusals,
            f"{plan.source}: convert refuses to write values a server cannot use: {{listed}}. "
            f"Nothing was written to {plan.destination}.",
            hint=_refusal_hint(refusals),
            root=plan.checkpoint.root,
        )
    write_json(folder / CONFIG_NAME, plan.config)
    if len(plan.shards) > 1:
        write_index(folder / SAFETENSORS_INDEX, written)
    files = {shard.file: (folder / shard.file).stat().st_size for shard in plan.shards}
    manifest = build_manifest(
        source_format=plan.source_format,
        family=plan.family,
        dtype=TORCH_DTYPE_NAMES[plan.options.dtype] if plan.options.dtype else None,
        tensors=written,
        files=files,
        config_sha256=sha256_of_file(folder / CONFIG_NAME),
        engine=plan.options.engine,
        trained_taps=plan.trained_taps,
    )
    write_json(folder / MANIFEST_NAME, manifest)
    fsync_dir(folder)

    environ = os.environ if plan.options.environ is None else plan.options.environ
    verification = check_checkpoint(folder, environ=environ, payload_stats=written_stats, engine=plan.options.engine,
                                    launch=plan.options.launch)
    if verification.errors:
        raise error_from_findings(
            verification.errors,
            f"the converted output fails `dspark check` with {len(verification.errors)} error(s): {{listed}}. "
            f"Nothing was written to {plan.destination}.",
            hint="This points at a bug in dspark convert or a changing input; re-run with DSPARK_DEBUG=1 and report it.",
        )
    names = [p.name for p in folder.iterdir()]
    return {name: (folder / name).stat().st_size for name in sorted(names)}, verification


def payload_refusals(plan: ConvertPlan, written_stats: Mapping[str, PayloadStats]) -> list[Finding]:
    """The error findings on the values convert wrote, named by the input
    file and the output tensor name: NaN/Inf already in the input (PAY001),
    values the cast turned into Inf (CNV001), all-zero norms and matrices
    (PAY002, PAY004). (Warnings such as FCN006 come with the verification.)"""
    from dspark.converters.payload_scan import scan_chunks

    judged: list[tuple[TensorEntry, PayloadStats]] = []
    findings: list[Finding] = []
    for tensor in plan.tensors:
        stats = written_stats[tensor.name]
        from_input = stats.nonfinite_count
        if from_input and tensor.cast:
            # Rare: read this one tensor's input again to tell the input's
            # NaN/Inf from the cast's overflow.
            source_stats = scan_chunks(
                tensor.source.dtype, tensor.source_chunks(plan.checkpoint.reader, CHUNK_BYTES)
            )
            from_input = source_stats.nonfinite_count
            made = stats.nonfinite_count - from_input
            if made > 0:
                findings.append(Finding(
                    "CNV001",
                    f"{tensor.source.file}: {printable_name(tensor.name)}: the cast "
                    f"{tensor.source.dtype} -> {tensor.dtype} turns {made:,} finite value(s) into Inf "
                    f"(they exceed {TORCH_DTYPE_NAMES[tensor.dtype]}'s range).",
                    file=tensor.source.file,
                    tensor=tensor.name,
                    detail={"made_nonfinite": made, "source_dtype": tensor.source.dtype, "dtype": tensor.dtype},
                ))
        entry = TensorEntry(tensor.name, tensor.source.stored_name, tensor.dtype, tensor.shape, tensor.source.file)
        judged.append((entry, PayloadStats(from_input, stats.all_zero, stats.all_one)))
    findings += payload_findings(judged, plan.expected)
    return [f for f in findings if f.severity is Severity.ERROR]


def _refusal_hint(refusals: list[Finding]) -> str:
    codes = {f.code for f in refusals}
    hints = []
    overflowing = {f.detail["dtype"] for f in refusals if f.code == "CNV001"}
    if "F16" in overflowing:
        hints.append("use --dtype bfloat16 (float32's range) or --dtype keep instead of float16")
    elif overflowing:
        hints.append("use --dtype keep: these values sit at the very top of float32's range, which "
                     "also says the training run is in trouble")
    if codes - {"CNV001"}:
        hints.append("the input holds NaN/Inf or lost weights: re-export it from a good training step")
    text = "; ".join(hints)
    return text[0].upper() + text[1:] + ". `dspark check --deep SRC` lists every bad tensor."


def _output_chunk_bytes(tensor: TensorPlan) -> int:
    """The most bytes one chunk of this tensor becomes (a cast from 16 to
    32 bits doubles them)."""
    elements = CHUNK_BYTES // DTYPE_ITEMSIZE[tensor.source.dtype]
    return min(elements * DTYPE_ITEMSIZE[tensor.dtype], tensor.planned.nbytes)


__all__ = [
    "CHUNK_BYTES",
    "DEFAULT_MAX_SHARD_SIZE",
    "ConvertOptions",
    "ConvertPlan",
    "ConvertReport",
    "DroppedTensor",
    "InterruptGuard",
    "TensorPlan",
    "clean_stale_temporaries",
    "convert_checkpoint",
    "execute_plan",
    "payload_refusals",
    "plan_conversion",
    "refuse_failing_plan",
]
