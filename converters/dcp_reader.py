"""torch.distributed.checkpoint (DCP) folders, as TorchSpec's FSDP training
writes them: `iter_N/model/` with `.metadata` and `*.distcp` files.

`.metadata` is a pickle. It is read with `DcpMetadataUnpickler`, which
resolves only the checkpoint-metadata classes on an allow-list (torch's DCP
metadata dataclasses, `torch.Size`, dtypes and layouts, the filesystem
storage-info record, paths); any other global, a code payload included, is
refused with `UnsafeInputError` before anything runs. Each tensor chunk in a
`.distcp` file is a `torch.save` blob at a recorded byte range, loaded with
`torch.load(weights_only=True)` straight from that range; a tensor split
into several chunks (FSDP) is assembled from them.

Only the draft's keys are read (`draft_model.`, else the `model.` sub-dict,
else everything that is not optimizer or trainer state); the rest is left
behind and reported (SRC002).
"""

from __future__ import annotations

import io
import os
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from dspark.converters.inventory import Checkpoint, is_plain_file_name, load_config_for, served_name_for
from dspark.converters.pt_reader import left_behind_finding, refused_as_unsafe, tensor_byte_chunks, torch_dtype_code
from dspark.schema.dtypes import TORCH_DTYPE_NAMES
from dspark.schema.errors import CheckpointError, MissingDependencyError, UnsafeInputError, UsageError, require_torch
from dspark.schema.findings import Finding
from dspark.schema.inventory import TensorEntry, printable_name

METADATA_FILE = ".metadata"
DRAFT_PREFIXES = ("draft_model.", "model.")
NON_MODEL_PREFIXES = ("optimizer.", "optim.", "scheduler.", "lr_scheduler.", "rng", "trainer_state.", "extra_state.")

_DCP_METADATA = "torch.distributed.checkpoint.metadata"
_DCP_FILESYSTEM = "torch.distributed.checkpoint.filesystem"

# module -> names the metadata pickle may refer to. Everything here only
# builds plain records when called; none can reach the file system, the
# process or the interpreter.
ALLOWED_GLOBALS: dict[str, frozenset[str]] = {
    _DCP_METADATA: frozenset({
        "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
        "TensorProperties", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING",
    }),
    _DCP_FILESYSTEM: frozenset({"_StorageInfo"}),
    "torch.serialization": frozenset({"_get_layout"}),
    "pathlib": frozenset({"PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath", "Path"}),
    "collections": frozenset({"OrderedDict"}),
}


class DcpMetadataUnpickler(pickle.Unpickler):
    """Unpickles a DCP `.metadata` file, resolving only allow-listed globals."""

    def __init__(self, file, *, shown: str) -> None:
        super().__init__(file)
        self.shown = shown

    def find_class(self, module: str, name: str) -> Any:
        if name in ALLOWED_GLOBALS.get(module, ()):
            return super().find_class(module, name)
        if module == "torch":
            import torch

            value = getattr(torch, name, None) if not name.startswith("_") else None
            if name == "Size" or isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
                return torch.Size if name == "Size" else value
        raise UnsafeInputError(
            f"{self.shown}: refusing to unpickle: it refers to {printable_name(module)}.{printable_name(name)}, "
            "which is not part of DCP checkpoint metadata. A .metadata file that needs it may carry "
            "code; nothing from it was run.",
            code="SRC003",
            path=self.shown,
            hint="Only read checkpoints from a source you trust; re-save this one with "
            "torch.distributed.checkpoint on a trusted machine.",
        )

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafeInputError(
            f"{self.shown}: refusing to unpickle: DCP metadata has no persistent references.",
            code="SRC003",
            path=self.shown,
        )


def read_dcp_metadata(path: Path, shown: str | None = None) -> Any:
    """Parse `.metadata` with the restricted unpickler and check its shape."""
    shown = shown or str(path)
    try:
        from torch.distributed.checkpoint.metadata import Metadata
    except ImportError as exc:
        raise MissingDependencyError(
            f"{shown}: reading a DCP checkpoint needs a torch build with torch.distributed.",
            hint="Install a standard PyTorch wheel: pip install 'dspark[torch]'.",
        ) from exc
    try:
        with open(path, "rb") as handle:
            metadata = DcpMetadataUnpickler(handle, shown=shown).load()
    except UnsafeInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to parse is a corrupt file
        raise _corrupt(shown, f"not a readable DCP metadata pickle ({type(exc).__name__}: {exc})") from None
    if not isinstance(metadata, Metadata):
        raise _corrupt(shown, f"holds a {type(metadata).__name__}, not DCP checkpoint Metadata")
    if not isinstance(getattr(metadata, "state_dict_metadata", None), dict) or not isinstance(
        getattr(metadata, "storage_data", None), dict
    ):
        raise _corrupt(shown, "the metadata lacks its tensor or storage tables")
    return metadata


def _corrupt(shown: str, reason: str, tensor: str | None = None) -> CheckpointError:
    return CheckpointError(
        f"{shown}: {reason}.",
        code="SRC004",
        path=shown,
        tensor=tensor,
        hint="The DCP checkpoint is incomplete or damaged; copy it again from the training run.",
    )


def _malformed(shown: str, error: Exception, tensor: str | None = None) -> CheckpointError:
    # The allow-listed classes unpickle with whatever fields the file gives
    # them; a record of the wrong type shows up as one of these errors.
    where = f"{printable_name(tensor)}: " if tensor else ""
    return _corrupt(shown, f"{where}malformed metadata record ({type(error).__name__}: {error})", tensor)


# --------------------------------------------------------------------------
# Locating the model folder


def _iteration(folder: Path) -> int | None:
    match = re.fullmatch(r"iter_(\d+)", folder.name)
    return int(match.group(1)) if match else None


def locate_model_dir(path: Path) -> tuple[Path, Finding | None]:
    """Accept the `model/` folder, an `iter_N/` folder, or a run folder
    holding `iter_*` (the highest N is read, and a finding says so)."""
    if (path / METADATA_FILE).is_file():
        return path, None
    if (path / "model" / METADATA_FILE).is_file():
        return path / "model", None
    iterations = sorted(
        (n, p) for p in path.iterdir() if (n := _iteration(p)) is not None and (p / "model" / METADATA_FILE).is_file()
    )
    if not iterations:
        raise UsageError(
            f"{path}: no DCP checkpoint here (no .metadata, model/.metadata or iter_N/model/.metadata).",
            hint="Pass the training run's iter_N folder or its model/ folder.",
        )
    _, newest = iterations[-1]
    names = ", ".join(p.name for _, p in iterations[-5:])
    note = Finding(
        "SRC001",
        f"{path} is a training run with {len(iterations)} checkpoints ({names}); reading the newest, "
        f"{newest.name}/model. Pass an iter_N folder to read another.",
        file=f"{newest.name}/model",
        detail={"iterations": [p.name for _, p in iterations], "picked": newest.name},
    )
    return newest / "model", note


# --------------------------------------------------------------------------
# Inventory


@dataclass(frozen=True)
class DcpChunk:
    """One stored piece of a tensor: where it sits in the tensor and in which
    file, at which byte range, its `torch.save` blob lies."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    file: str
    start: int
    length: int


def _draft_keys(fqns: list[str]) -> list[str]:
    for prefix in DRAFT_PREFIXES:
        chosen = [k for k in fqns if k.startswith(prefix)]
        if chosen:
            return chosen
    return [k for k in fqns if not k.startswith(NON_MODEL_PREFIXES)]


def _chunks_for(fqn: str, tensor_md: Any, storage: dict, root: Path, file_sizes: dict, shown: str) -> tuple[DcpChunk, ...]:
    size = tuple(int(d) for d in tensor_md.size)
    chunks: list[DcpChunk] = []
    for chunk_md in tensor_md.chunks:
        offsets = tuple(int(d) for d in chunk_md.offsets)
        sizes = tuple(int(d) for d in chunk_md.sizes)
        if len(offsets) != len(size) or len(sizes) != len(size) or any(
            o < 0 or s < 0 or o + s > d for o, s, d in zip(offsets, sizes, size)
        ):
            raise _corrupt(shown, f"{printable_name(fqn)}: chunk at {list(offsets)} of size {list(sizes)} "
                                  f"lies outside the tensor's shape {list(size)}", fqn)
        info = storage.get((fqn, offsets))
        if info is None:
            raise _corrupt(shown, f"{printable_name(fqn)}: chunk at {list(offsets)} has no storage entry", fqn)
        relative, start, length = info.relative_path, info.offset, info.length
        if not is_plain_file_name(relative):
            raise _corrupt(shown, f"{printable_name(fqn)}: storage file {printable_name(str(relative))!r} is not a "
                                  "plain file name inside the checkpoint folder; refusing to follow it", fqn)
        if getattr(info, "transform_descriptors", None):
            raise _corrupt(shown, f"{printable_name(fqn)}: stored with transforms {list(info.transform_descriptors)}, "
                                  "which dspark does not read", fqn)
        if relative not in file_sizes:
            file_path = root / relative
            file_sizes[relative] = file_path.stat().st_size if file_path.is_file() else None
        if file_sizes[relative] is None:
            raise _corrupt(shown, f"{printable_name(fqn)}: storage file {relative} is missing", fqn)
        if not (isinstance(start, int) and isinstance(length, int) and start >= 0 and length > 0
                and start + length <= file_sizes[relative]):
            raise _corrupt(shown, f"{printable_name(fqn)}: byte range [{start}, {start}+{length}) runs outside "
                                  f"{relative} ({file_sizes[relative]:,} bytes)", fqn)
        chunks.append(DcpChunk(offsets, sizes, relative, start, length))
    _check_tiling(fqn, size, chunks, shown)
    return tuple(chunks)


def _check_tiling(fqn: str, size: tuple[int, ...], chunks: list[DcpChunk], shown: str) -> None:
    """The chunks must cover the tensor exactly once."""
    def numel(shape) -> int:
        count = 1
        for d in shape:
            count *= d
        return count

    nonempty = [c for c in chunks if numel(c.sizes)]
    overlap = any(
        all(a.offsets[i] < b.offsets[i] + b.sizes[i] and b.offsets[i] < a.offsets[i] + a.sizes[i] for i in range(len(size)))
        for n, a in enumerate(nonempty) for b in nonempty[n + 1:]
    )
    if overlap or sum(numel(c.sizes) for c in nonempty) != numel(size) or (numel(size) and not nonempty):
        raise _corrupt(shown, f"{printable_name(fqn)}: its {len(chunks)} chunks do not cover the tensor "
                              f"{list(size)} exactly once", fqn)


def open_dcp(path: Path, *, config_path: Path | None = None) -> Checkpoint:
    """Open a DCP checkpoint: metadata only, no tensor loaded."""
    require_torch("Reading a DCP checkpoint")
    model_dir, note = locate_model_dir(path)
    shown = METADATA_FILE if model_dir == path else str(model_dir.relative_to(path) / METADATA_FILE)
    metadata = read_dcp_metadata(model_dir / METADATA_FILE, shown)

    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    try:
        storage: dict[tuple[str, tuple[int, ...]], Any] = {}
        for index, info in metadata.storage_data.items():
            offset = getattr(index, "offset", None)
            storage[(index.fqn, tuple(int(d) for d in offset) if offset is not None else ())] = info
    except (AttributeError, TypeError, ValueError) as exc:
        raise _malformed(shown, exc) from None

    # The draft's config sits beside the weights, or up the tree as far as
    # the folder above the one the user named, and at least up to the
    # training run that holds iter_N/.
    levels = len(model_dir.relative_to(path).parts) + 1
    if _iteration(model_dir.parent) is not None:
        levels = max(levels, 2)
    config, config_file, config_findings, family = load_config_for(model_dir, config_path, search_parents=levels)

    fqns = list(metadata.state_dict_metadata)
    draft = set(_draft_keys(fqns))
    entries: list[TensorEntry] = []
    left_behind: list[str] = []
    file_sizes: dict[str, int | None] = {}
    for fqn in fqns:
        tensor_md = metadata.state_dict_metadata[fqn]
        if fqn not in draft or not isinstance(tensor_md, TensorStorageMetadata):
            left_behind.append(fqn)
            continue
        try:
            chunks = _chunks_for(fqn, tensor_md, storage, model_dir, file_sizes, shown)
            entries.append(TensorEntry(
                served_name=served_name_for(family, fqn),
                stored_name=fqn,
                dtype=torch_dtype_code(tensor_md.properties.dtype, file=shown, tensor=fqn),
                shape=tuple(int(d) for d in tensor_md.size),
                file=chunks[0].file if chunks else "",
                locator=chunks,
            ))
        except (AttributeError, TypeError, ValueError) as exc:
            raise _malformed(shown, exc, fqn) from None

    findings: list[Finding] = [note] if note else []
    if left_behind:
        findings.append(left_behind_finding(left_behind, shown))
    weight_files = sorted({c.file for e in entries for c in e.locator})
    return Checkpoint(
        source=path,
        root=model_dir,
        format="dcp",
        weight_files=weight_files,
        entries=entries,
        findings=findings,
        reader=DcpReader(model_dir),
        config=config,
        config_path=config_file,
        config_findings=config_findings,
        family=family,
        metadata={"dcp_model_dir": str(model_dir), "left_behind": len(left_behind)},
    )


# --------------------------------------------------------------------------
# Payloads


class _FileRange(io.RawIOBase):
    """A read-only, seekable window [start, start + length) of a file, so
    `torch.load` reads one blob in place: no copy of the rest of the file,
    and `readinto` straight into the tensor's storage."""

    def __init__(self, fd: int, start: int, length: int) -> None:
        super().__init__()
        self._fd, self._start, self._length, self._position = fd, start, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._length}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer) -> int:
        want = min(len(buffer), self._length - self._position)
        if want <= 0:
            return 0
        got = os.preadv(self._fd, [memoryview(buffer).cast("B")[:want]], self._start + self._position)
        self._position += got
        return got


class DcpReader:
    """Loads one tensor at a time; `entry.locator` holds its chunks."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def load(self, entry: TensorEntry) -> Any:
        import torch

        chunks: tuple[DcpChunk, ...] = entry.locator
        dtype = getattr(torch, TORCH_DTYPE_NAMES[entry.dtype])
        whole = len(chunks) == 1 and chunks[0].sizes == entry.shape
        result = None if whole else torch.empty(entry.shape, dtype=dtype)
        for chunk in chunks:
            part = self._load_chunk(entry, chunk, dtype, torch)
            if whole:
                return part
            if part.numel():
                region = tuple(slice(o, o + s) for o, s in zip(chunk.offsets, chunk.sizes))
                result[region].copy_(part)
            del part
        return result

    def _load_chunk(self, entry: TensorEntry, chunk: DcpChunk, dtype: Any, torch: Any) -> Any:
        shown = f"{chunk.file} [{chunk.start:,}, {chunk.start + chunk.length:,})"
        with open(self.root / chunk.file, "rb", buffering=0) as handle:
            window = _FileRange(handle.fileno(), chunk.start, chunk.length)
            try:
                part = torch.load(window, map_location="cpu", weights_only=True)
            except pickle.UnpicklingError as exc:
                if not refused_as_unsafe(exc):
                    raise _corrupt(shown, f"{entry.stored_name}: chunk is not a readable torch.save blob", entry.stored_name) from None
                raise UnsafeInputError(
                    f"{shown}: refusing to load {printable_name(entry.stored_name)}: the blob needs more than "
                    "weights-only loading allows; nothing from it was run.",
                    code="SRC003",
                    path=chunk.file,
                    tensor=entry.stored_name,
                    hint="Only read checkpoints from a source you trust.",
                ) from None
            except Exception as exc:  # noqa: BLE001 - any other failure is a corrupt blob
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise _corrupt(shown, f"{printable_name(entry.stored_name)}: chunk is not a readable torch.save "
                                      f"blob ({first})", entry.stored_name) from None
        if not isinstance(part, torch.Tensor) or part.dtype != dtype or tuple(part.shape) != chunk.sizes:
            got = f"{part.dtype}{list(part.shape)}" if isinstance(part, torch.Tensor) else type(part).__name__
            raise _corrupt(shown, f"{printable_name(entry.stored_name)}: chunk holds {got}, the metadata says "
                                  f"{dtype}{list(chunk.sizes)}", entry.stored_name)
        return part

    def read_raw(self, entry: TensorEntry) -> bytes:
        return b"".join(bytes(chunk) for chunk in self.iter_chunks(entry, 1 << 30))

    def iter_chunks(self, entry: TensorEntry, chunk_bytes: int) -> Iterator[memoryview]:
        return tensor_byte_chunks(self.load(entry), chunk_bytes)
