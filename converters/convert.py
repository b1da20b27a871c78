"""`dspark convert`: a training checkpoint in, the family's servable layout
out. Plan first (`plan_conversion` -> `ConvertPlan`, nothing written), then
act (`convert_checkpoint` -> `ConvertReport`).

The output is written one tensor at a time into a temporary folder beside
the destination, fsynced, checked with the same code as `dspark check`, and
only then renamed into place. An error, SIGINT or SIGTERM removes the
temporary folder; the destination is either absent or complete.
"""

from __future__ import annotations

import copy
import glob
import os
import shutil
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from dspark.converters.casting import CASTABLE, ChunkCaster, output_dtype
from dspark.converters.check import CheckReport, check_checkpoint
from dspark.converters.configs import CONFIG_NAME
from dspark.converters.readers import Checkpoint, detect_format, open_checkpoint
from dspark.converters.manifest import MANIFEST_NAME, build_manifest, sha256_of_file, written_by_convert
from dspark.converters.writer import (
    CHUNKS_IN_FLIGHT,
    INDEX_FILE,
    PlannedTensor,
    ShardPlan,
    natural_key,
    parse_size,
    plan_shards,
    write_index,
    write_json,
    write_shard,
)
from dspark.schema.dtypes import CAST_TARGETS, DTYPE_ITEMSIZE, TORCH_DTYPE_NAMES, is_floating
from dspark.schema.errors import CheckpointError, UsageError
from dspark.schema.engines import DEFAULT_ENGINE
from dspark.schema.families import DraftFamily
from dspark.schema.findings import Finding, Severity, group_findings
from dspark.schema.inventory import PayloadStats, TensorEntry, has_control_characters, printable_name
from dspark.schema.rules import DEFAULT_STREAM, STREAMS, check_contract, load_config_schema, nested_field, payload_findings

DEFAULT_MAX_SHARD_SIZE = "5GB"
# Small enough for the read buffer, the cast's scratch and the output ring to
# stay in the L3 cache; 1, 2 and 4 MiB measured alike, 8 and 16 MiB slower,
# and 2 MiB keeps the peak RSS ~9 MiB lower than 4 MiB.
CHUNK_BYTES = 2 * 1024 * 1024
TEMP_MARK = ".dspark-tmp-"
OLD_MARK = ".dspark-old-"

ProgressStart = Callable[[int], Callable[[int], None] | None]


# --------------------------------------------------------------------------
# Options and plan


@dataclass(frozen=True)
class ConvertOptions:
    """What to convert to. `dtype` is a safetensors code or None (keep)."""

    dtype: str | None = None
    max_shard_size: int = 5 * 10**9
    keep_skipped: bool = False
    config_path: Path | None = None
    force: bool = False
    environ: Mapping[str, str] | None = None  # for the verification; os.environ when None

    @classmethod
    def from_flags(
        cls,
        *,
        dtype: str = "keep",
        max_shard_size: str | int = DEFAULT_MAX_SHARD_SIZE,
        keep_skipped: bool = False,
        config_path: Path | str | None = None,
        force: bool = False,
        environ: Mapping[str, str] | None = None,
    ) -> "ConvertOptions":
        """Options from the command line's spellings (`bfloat16`, `5GB`)."""
        if dtype != "keep" and dtype not in CAST_TARGETS:
            raise UsageError(
                f"--dtype {dtype!r} is not one of keep, {', '.join(CAST_TARGETS)}.",
                hint="Use --dtype bfloat16 for serving.",
            )
        return cls(
            dtype=None if dtype == "keep" else CAST_TARGETS[dtype],
            max_shard_size=parse_size(max_shard_size),
            keep_skipped=keep_skipped,
            config_path=Path(config_path) if config_path is not None else None,
            force=force,
            environ=environ,
        )


@dataclass(frozen=True)
class TensorPlan:
    """One tensor to write: where it comes from and what it becomes."""

    source: TensorEntry
    name: str
    dtype: str
    shard: str

    @property
    def renamed(self) -> bool:
        return self.source.stored_name != self.name

    @property
    def cast(self) -> bool:
        return self.source.dtype != self.dtype

    @property
    def planned(self) -> PlannedTensor:
        return PlannedTensor(self.name, self.dtype, self.source.shape)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source.stored_name,
            "source_file": self.source.file,
            "source_dtype": self.source.dtype,
            "dtype": self.dtype,
            "shape": list(self.source.shape),
            "shard": self.shard,
            "nbytes": self.planned.nbytes,
        }


@dataclass(frozen=True)
class DroppedTensor:
    stored_name: str
    served_name: str
    reason: str
    dtype: str
    nbytes: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ConvertPlan:
    """Everything `convert` will do, decided before a byte is written."""

    source: str
    destination: str
    source_format: str
    family: str
    options: ConvertOptions
    tensors: list[TensorPlan]
    dropped: list[DroppedTensor]
    shards: list[ShardPlan]
    config: dict[str, Any]
    config_source: str | None
    config_changes: list[str]
    findings: list[Finding]  # the source's notes + the contract on the planned output
    replaces_existing: bool
    checkpoint: Checkpoint = field(repr=False, compare=False, default=None)
    # served name -> what the contract expects of it (roles for the value checks)
    expected: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.ERROR]

    @property
    def renames(self) -> list[tuple[str, str]]:
        return [(t.source.stored_name, t.name) for t in self.tensors if t.renamed]

    @property
    def casts(self) -> dict[str, dict[str, int]]:
        """"F32->BF16" -> tensors, bytes in, bytes out."""
        summary: dict[str, dict[str, int]] = {}
        for tensor in self.tensors:
            if tensor.cast:
                row = summary.setdefault(f"{tensor.source.dtype}->{tensor.dtype}", {"tensors": 0, "bytes_in": 0, "bytes_out": 0})
                row["tensors"] += 1
                row["bytes_in"] += tensor.source.nbytes
                row["bytes_out"] += tensor.planned.nbytes
        return dict(sorted(summary.items()))

    @property
    def not_cast(self) -> list[str]:
        """Tensors a --dtype left alone (integers, bool, fp8)."""
        if self.options.dtype is None:
            return []
        return [t.name for t in self.tensors if t.source.dtype not in CASTABLE]

    @property
    def bytes_in(self) -> int:
        return sum(t.source.nbytes for t in self.tensors)

    @property
    def bytes_out(self) -> int:
        return sum(t.planned.nbytes for t in self.tensors)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "destination": self.destination,
            "source_format": self.source_format,
            "family": self.family,
            "dtype": TORCH_DTYPE_NAMES[self.options.dtype] if self.options.dtype else "keep",
            "max_shard_size": self.options.max_shard_size,
            "keep_skipped": self.options.keep_skipped,
            "replaces_existing": self.replaces_existing,
            "config_source": self.config_source,
            "tensors": [t.to_dict() for t in self.tensors],
            "renames": [{"from": a, "to": b} for a, b in self.renames],
            "dropped": [d.to_dict() for d in self.dropped],
            "casts": self.casts,
            "not_cast": self.not_cast,
            "shards": [s.to_dict() for s in self.shards],
            "config_changes": self.config_changes,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "findings": [f.to_dict() for f in self.findings],
            "passed": not self.errors,
        }


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


# --------------------------------------------------------------------------
# Planning


def plan_conversion(src: Path | str, dst: Path | str, options: ConvertOptions | None = None) -> ConvertPlan:
    """Read the source's headers and decide every rename, drop, cast and
    shard. Raises `UsageError` for impossible paths and `CheckpointError`
    for a source that cannot be converted; returns the plan, whose
    `findings` say whether the output would pass `dspark check`."""
    options = options or ConvertOptions()
    src, dst = Path(src), Path(dst)
    fmt = detect_format(src)
    replaces = _check_paths(src, dst, force=options.force)
    checkpoint = open_checkpoint(src, config_path=_config_for(src, fmt, options.config_path))

    _refuse_unconvertible(checkpoint)
    family: DraftFamily = checkpoint.family

    kept: list[tuple[TensorEntry, str]] = []
    dropped: list[DroppedTensor] = []
    owners: dict[str, TensorEntry] = {}
    for entry in checkpoint.entries:
        name = entry.served_name
        reason = _drop_reason(family, name)
        if reason and not options.keep_skipped:
            dropped.append(DroppedTensor(entry.stored_name, name, reason, entry.dtype, entry.nbytes))
            continue
        _refuse_bad_name(entry, owners.get(name))
        owners[name] = entry
        kept.append((entry, output_dtype(entry.dtype, options.dtype)))
    kept.sort(key=lambda item: natural_key(item[0].served_name))

    shards = plan_shards(
        [PlannedTensor(entry.served_name, dtype, entry.shape) for entry, dtype in kept], options.max_shard_size
    )
    shard_of = {t.name: s.file for s in shards for t in s.tensors}
    tensors = [TensorPlan(entry, entry.served_name, dtype, shard_of[entry.served_name]) for entry, dtype in kept]
    config, changes = normalise_config(checkpoint.config, family, [t.planned for t in tensors])

    planned_entries = [
        TensorEntry(t.name, t.name, t.dtype, t.source.shape, t.shard) for t in tensors
    ]
    environ = os.environ if options.environ is None else options.environ
    contract = check_contract(config, planned_entries, config_file=CONFIG_NAME, environ=environ)
    findings = group_findings([f for f in checkpoint.findings if f.severity is not Severity.ERROR] + contract.findings)

    return ConvertPlan(
        source=str(src),
        destination=str(dst),
        source_format=checkpoint.format,
        family=family.name,
        options=options,
        tensors=tensors,
        dropped=dropped,
        shards=shards,
        config=config,
        config_source=str(checkpoint.config_path) if checkpoint.config_path else None,
        config_changes=changes,
        findings=findings,
        replaces_existing=replaces,
        checkpoint=checkpoint,
        expected=contract.expected,
    )


def _config_for(src: Path, fmt: str, explicit: Path | None) -> Path | None:
    """safetensors inputs: config.json beside the weights, else in the
    folder above (DCP and .pt readers search upwards themselves)."""
    if explicit is not None or not fmt.startswith("safetensors"):
        return explicit
    root = src if src.is_dir() else src.parent
    if not (root / CONFIG_NAME).is_file() and (root.parent / CONFIG_NAME).is_file():
        return root.parent / CONFIG_NAME
    return None


def _check_paths(src: Path, dst: Path, *, force: bool) -> bool:
    """Refuse destinations that would clobber the input or an existing
    folder; returns whether an existing destination will be replaced."""
    source = src.resolve()
    target = dst.resolve()
    shown_src, shown_dst = printable_name(str(src)), printable_name(str(dst))
    if target == source or source in target.parents:
        raise UsageError(
            f"{shown_dst} is inside the input {shown_src}; convert never writes into its input.",
            hint="Choose a destination outside the source folder.",
        )
    if target in source.parents:
        raise UsageError(
            f"{shown_src} is inside the destination {shown_dst}; replacing it would delete the input.",
            hint="Choose a destination that does not contain the source.",
        )
    exists = dst.exists() or dst.is_symlink()
    if exists and not force:
        raise UsageError(
            f"{shown_dst} already exists.",
            hint="Pass --force to replace it (it is replaced only once the new one is complete), or pick another path.",
        )
    if exists and not dst.is_dir():
        raise UsageError(f"{shown_dst} exists and is not a folder; refusing to replace it.", hint="Pick another destination.")
    if exists:
        _refuse_to_replace_others_work(dst)
    if dst.parent.exists() and not dst.parent.is_dir():
        raise UsageError(f"{printable_name(str(dst.parent))} is not a folder.", hint="Pick another destination.")
    return exists


# How many of the entries --force would lose a refusal names.
SHOWN_ENTRIES = 5


def _refuse_to_replace_others_work(dst: Path) -> None:
    """--force replaces only what convert itself wrote (a folder whose
    manifest accounts for every entry in it) or an empty folder. Anything
    else -- a target model's folder, a git checkout, notes, a draft someone
    copied in by hand -- may be the only copy of someone's work: refuse,
    naming what would be lost."""
    shown = printable_name(str(dst))
    try:
        has_manifest, unaccounted = written_by_convert(dst)
    except (ValueError, OSError) as error:
        raise UsageError(
            f"{shown} has a {MANIFEST_NAME} that cannot be read ({error}); --force cannot tell that "
            "dspark wrote this folder, so it will not replace it.",
            hint="Check the destination path; remove that folder yourself if you really mean to replace it.",
        ) from None
    if not unaccounted:
        return
    listed = ", ".join(unaccounted[:SHOWN_ENTRIES])
    if len(unaccounted) > SHOWN_ENTRIES:
        listed += f" and {len(unaccounted) - SHOWN_ENTRIES} more"
    why = (f"holds {len(unaccounted)} entr{'y' if len(unaccounted) == 1 else 'ies'} its {MANIFEST_NAME} does not list"
           if has_manifest else f"was not written by dspark convert (no {MANIFEST_NAME})")
    raise UsageError(
        f"{shown} {why}; --force would delete {listed}. --force only replaces a folder that "
        "dspark convert wrote, or an empty one.",
        hint="Check the destination path, or convert into a new folder; remove that folder yourself "
        "if you really mean to replace it.",
    )


def _refuse_unconvertible(checkpoint: Checkpoint) -> None:
    if checkpoint.config is None:
        finding = checkpoint.config_findings[0]
        raise CheckpointError(
            f"{checkpoint.source}: cannot convert without the draft's config: {finding.message}",
            code=finding.code,
            path=finding.file,
            hint="Pass --config PATH/config.json, or put config.json beside the weights or in the folder above.",
        )
    if checkpoint.family is None:
        config = checkpoint.config
        raise CheckpointError(
            f"{checkpoint.config_display}: model_type {config.get('model_type')!r} / architectures "
            f"{config.get('architectures')!r} is not a known draft family, so the servable layout is unknown.",
            code="CFG004",
            path=checkpoint.config_display,
            hint="Fix model_type/architectures in the config (k3_dspark / K3DSparkModel for a K3 draft).",
        )
    errors = [f for f in checkpoint.findings if f.severity is Severity.ERROR]
    if errors:
        raise _error_from_findings(
            errors,
            f"{checkpoint.source}: the input's files are inconsistent: {{listed}}",
            hint=f"Run `dspark check {checkpoint.source}` for the full report, fix the input, then convert.",
        )


def _error_from_findings(errors: list[Finding], template: str, *, hint: str) -> CheckpointError:
    """One error for a list of error findings: the first five in the message
    (`{listed}` in `template`), all of them in `detail`, the first one's
    code, file and tensor on the error."""
    listed = "; ".join(f"{f.code} {f.message.rstrip('.')}" for f in errors[:5])
    if len(errors) > 5:
        listed += f" (and {len(errors) - 5} more)"
    return CheckpointError(
        template.replace("{listed}", listed),  # not format(): paths may hold braces
        code=errors[0].code,
        path=errors[0].file,
        tensor=errors[0].tensor,
        detail={"findings": [f.to_dict() for f in errors]},
        hint=hint,
    )


def _drop_reason(family: DraftFamily, served_name: str) -> str | None:
    if family.is_skipped(served_name):
        return "skipped by the serving loader"
    if family.is_training_only(served_name):
        return "training-only"
    return None


def _refuse_bad_name(entry: TensorEntry, first: TensorEntry | None) -> None:
    name = entry.served_name
    if not name or has_control_characters(name):
        raise CheckpointError(
            f"{entry.file}: tensor name {printable_name(entry.stored_name)!r} is empty or holds control characters.",
            code="SRC004",
            path=entry.file,
            tensor=entry.stored_name,
            hint="Rename the tensor in the training code and re-export.",
        )
    if first is not None:
        raise CheckpointError(
            f"{first.file}: {printable_name(first.stored_name)} and {entry.file}: "
            f"{printable_name(entry.stored_name)} both become {printable_name(name)}; convert cannot write both.",
            code="INV006",
            path=entry.file,
            tensor=name,
            hint="Remove one of them from the input (they differ only in wrapper prefixes).",
        )


def normalise_config(
    config: Mapping[str, Any], family: DraftFamily, tensors: list[PlannedTensor]
) -> tuple[dict[str, Any], list[str]]:
    """The config as the server should read it: family identity, `fc_norm`
    and `aux_hidden_stream` explicit, `torch_dtype` true to the data.

    Nothing is inferred: `fc_norm` absent with fc_norm weights shipped stays
    absent (the check then fails, as it must); an invalid stream is left
    for the check to report.
    """
    out = copy.deepcopy(dict(config))
    changes: list[str] = []

    def put(key: str, value: Any, why: str) -> None:
        if out.get(key) != value or key not in out:
            before = repr(out[key]) if key in out else "absent"
            out[key] = value
            changes.append(f"{key}: {before} -> {value!r} ({why})")

    loader = DEFAULT_ENGINE.loader_for(family.name)
    parseable = loader.model_types if loader is not None else family.model_types
    if out.get("model_type") not in parseable:
        # Pin what the new config class would otherwise default (TokenSpeed's
        # Qwen3Config assumes head_dim 128, configs/qwen3_config.py@f4d8ec6e:173-197).
        if family.dims.get("hd") is not None and "head_dim" not in out:
            head_dim = family.resolve_dims(out).get("hd")
            if head_dim is not None:
                put("head_dim", head_dim, "explicit, so the engine's config class does not default it")
        put("model_type", parseable[0], f"a model_type the engine's config loader parses for {family.name}")
    architectures = out.get("architectures")
    # The engine loads the first registered entry: the family's class goes first.
    first = next((a for a in architectures if a in family.architectures), None) if isinstance(architectures, list) else None
    if not isinstance(architectures, list) or not architectures or architectures[0] != first:
        put("architectures", [first or family.architectures[0]], f"the {family.name} family, first")

    if "fc_norm" not in out and not any(family.fc_norm_index(t.name) is not None for t in tensors):
        put("fc_norm", False, "no fc_norm weights shipped; absent means false")

    declared, where = nested_field(out, "aux_hidden_stream")
    if "aux_hidden_stream" not in load_config_schema(family.schema_file).get("properties", {}):
        pass  # a family without a stream (EAGLE-3): nothing to make explicit
    elif declared is None:
        put("aux_hidden_stream", DEFAULT_STREAM, "the default, made explicit")
    elif isinstance(declared, str) and declared.lower() in STREAMS:
        stream = declared.lower()
        put("aux_hidden_stream", stream, f"from {where}" if where != "aux_hidden_stream" else "normalised")
        nested = out.get("dflash_config")
        if isinstance(nested, dict) and nested.get("aux_hidden_stream") not in (None, stream):
            nested["aux_hidden_stream"] = stream
            changes.append(f"dflash_config.aux_hidden_stream: {declared!r} -> {stream!r} (normalised)")

    by_dtype: Counter[str] = Counter()
    for tensor in tensors:
        if is_floating(tensor.dtype):
            by_dtype[tensor.dtype] += tensor.nbytes
    if by_dtype:
        dominant = max(sorted(by_dtype), key=lambda d: by_dtype[d])
        name = TORCH_DTYPE_NAMES[dominant]
        put("torch_dtype", name, "the dtype of the weights written")
        if "dtype" in out:
            put("dtype", name, "the dtype of the weights written")
    return out, changes


# --------------------------------------------------------------------------
# Acting


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
    raise _error_from_findings(
        plan.errors,
        f"{plan.source}: the converted draft would fail `dspark check` with {len(plan.errors)} error(s): "
        "{listed}. Nothing was written.",
        hint="Fix the source (or pass --config with a corrected config.json); "
        "`dspark convert --plan` shows every finding.",
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
    destination = Path(os.path.abspath(plan.destination))
    parent = destination.parent
    parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temporaries(destination)
    temporary = parent / f".{destination.name}{TEMP_MARK}{os.getpid()}"
    if temporary.exists():
        shutil.rmtree(temporary)

    with InterruptGuard() as guard:
        try:
            temporary.mkdir()
            files, verification = _write_and_verify(plan, temporary, progress)
            guard.commit(lambda: _move_into_place(temporary, destination, replace=plan.options.force))
        except BaseException:
            guard.disarm()
            shutil.rmtree(temporary, ignore_errors=True)
            raise
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
        for chunk in reader.iter_chunks(tensor.source, CHUNK_BYTES):
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
        raise _error_from_findings(
            refusals,
            f"{plan.source}: convert refuses to write values a server cannot use: {{listed}}. "
            f"Nothing was written to {plan.destination}.",
            hint=_refusal_hint(refusals),
        )
    write_json(folder / CONFIG_NAME, plan.config)
    if len(plan.shards) > 1:
        write_index(folder / INDEX_FILE, written)
    files = {shard.file: (folder / shard.file).stat().st_size for shard in plan.shards}
    manifest = build_manifest(
        source_format=plan.source_format,
        family=plan.family,
        dtype=TORCH_DTYPE_NAMES[plan.options.dtype] if plan.options.dtype else None,
        tensors=written,
        files=files,
        config_sha256=sha256_of_file(folder / CONFIG_NAME),
    )
    write_json(folder / MANIFEST_NAME, manifest)
    _fsync_dir(folder)

    environ = os.environ if plan.options.environ is None else plan.options.environ
    verification = check_checkpoint(folder, environ=environ, payload_stats=written_stats)
    if verification.errors:
        raise _error_from_findings(
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
                tensor.source.dtype, plan.checkpoint.reader.iter_chunks(tensor.source, CHUNK_BYTES)
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
        entry = TensorEntry(tensor.name, tensor.source.stored_name, tensor.dtype, tensor.source.shape, tensor.source.file)
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


def _fsync_dir(folder: Path) -> None:
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return  # platforms without directory handles
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _move_into_place(temporary: Path, destination: Path, *, replace: bool) -> None:
    exists = destination.exists() or destination.is_symlink()
    if exists and not replace:
        raise UsageError(f"{destination} appeared while converting; not replacing it.", hint="Pass --force to replace it.")
    if not exists:
        os.rename(temporary, destination)
        _fsync_dir(destination.parent)
        return
    if destination.is_dir() and not destination.is_symlink():
        # Again, now: files may have been put there while converting.
        _refuse_to_replace_others_work(destination)
    old = destination.parent / f".{destination.name}{OLD_MARK}{os.getpid()}"
    os.rename(destination, old)
    try:
        os.rename(temporary, destination)
    except BaseException:
        os.rename(old, destination)
        raise
    _fsync_dir(destination.parent)
    if old.is_symlink() or not old.is_dir():
        old.unlink()
    else:
        shutil.rmtree(old, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def clean_stale_temporaries(destination: Path) -> list[Path]:
    """Remove what a killed convert (SIGKILL, power loss) left beside
    `destination`: its temporary folder, and a previous destination it had
    moved aside (put back if the destination is missing)."""
    removed: list[Path] = []
    pattern = glob.escape(f".{destination.name}")
    for mark in (TEMP_MARK, OLD_MARK):
        for leftover in sorted(destination.parent.glob(f"{pattern}{mark}*")):
            pid_text = leftover.name.rsplit(mark, 1)[-1]
            if not pid_text.isdigit() or int(pid_text) == os.getpid() or _pid_alive(int(pid_text)):
                continue
            if mark == OLD_MARK and not (destination.exists() or destination.is_symlink()):
                os.rename(leftover, destination)
                continue
            shutil.rmtree(leftover, ignore_errors=True)
            removed.append(leftover)
    return removed


class _Interrupted(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class InterruptGuard:
    """SIGINT and SIGTERM raise inside the conversion (so the temporary
    folder is removed) instead of killing it midway; both are held back
    while the result is being moved into place. On the way out the previous
    handlers come back and an interrupted run re-delivers its signal to
    them (SIGINT -> KeyboardInterrupt; SIGTERM -> the default action, which
    ends the process). Outside the main thread Python cannot install
    handlers, and the guard does nothing."""

    SIGNALS = tuple(s for s in (getattr(signal, "SIGINT", None), getattr(signal, "SIGTERM", None)) if s is not None)

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}
        self._armed = False
        self._pending: int | None = None

    def _handle(self, signum: int, frame: Any) -> None:
        if self._armed:
            self._armed = False
            raise _Interrupted(signum)
        self._pending = self._pending or signum

    def __enter__(self) -> "InterruptGuard":
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
            self._armed = True
        return self

    def disarm(self) -> None:
        """From here on a signal is only noted (cleanup must finish)."""
        self._armed = False

    def commit(self, move: Callable[[], None]) -> None:
        """Run `move` with the signals blocked, then hand them back."""
        blocking = hasattr(signal, "pthread_sigmask") and bool(self._previous)
        if blocking:
            signal.pthread_sigmask(signal.SIG_BLOCK, self.SIGNALS)
        try:
            move()
            self._armed = False
            self._restore()
        finally:
            if blocking:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, self.SIGNALS)

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._armed = False
        self._restore()
        signum = exc.signum if isinstance(exc, _Interrupted) else self._pending
        if signum is None:
            return False
        if signum == getattr(signal, "SIGTERM", None):
            signal.raise_signal(signum)  # the previous handler decides; by default the process ends here
        raise KeyboardInterrupt from None
