"""torch.distributed.checkpoint (DCP) folders, as TorchSpec's trainer writes
them: `<run>/checkpoints/iter_NNNNNNN/model/` with `.metadata` and
`__<rank>_<n>.distcp` files, every weight keyed
`model_state.model.draft_model.<name>`.

Read without torch, at the speed of a safetensors file:

* `.metadata` is a pickle, read through an allow-list unpickler
  (`readers/dcp_metadata.py`) that refuses any global it does not know
  before anything runs. Nothing of torch is imported or called.
* Each tensor chunk in a `.distcp` file is a `torch.save` zip archive at
  the byte range the metadata records. `torch_save_blob` finds the chunk's
  values inside it (zip directory, local header, the tiny `data.pkl`
  through its own allow-list) and they are streamed by `pread` straight
  from the file, in bounded chunks, like a safetensors payload. A tensor
  that FSDP split by rows streams chunk after chunk; one split otherwise
  is assembled in memory first.

Only the draft's keys are read (`layouts/torchspec.py`'s `draft_keys`:
those under a `draft_model.` segment, else the `model_state.` / `model.`
sub-dict, else everything that is not optimizer or trainer state); the
rest is left behind and reported (SRC002).
`t2d`/`d2t` stay in the inventory: they are the draft's vocabulary maps.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from dspark.converters.layouts.hf import CONFIG_NAME, is_plain_file_name
from dspark.converters.layouts.torchspec import DCP_METADATA, draft_config_from_run, draft_keys, locate_dcp
from dspark.converters.layouts.torchspec_autoconfig import SOURCE as GENERATOR_SOURCE
from dspark.converters.layouts.torchspec_autoconfig import generate_draft_config
from dspark.converters.layouts.torchspec_run import (
    TARGET_PATH_KEY,
    RunTraining,
    local_target_folder,
    run_training,
    with_run_training,
)
from dspark.converters.readers import positional
from dspark.converters.readers.base import (
    Checkpoint,
    display_name,
    find_config_upwards,
    left_behind_finding,
    load_config_for,
    served_name_for,
)
from dspark.converters.readers.dcp_metadata import (
    DcpMetadataUnpickler,
    MetadataRecord,
    corrupt_error,
    dtype_code,
    int_tuple,
    is_record,
    malformed_error,
    read_dcp_metadata,
)
from dspark.converters.readers.safetensors_io import iter_range_chunks
from dspark.converters.readers.torch_save_blob import SavedTensor, locate_saved_tensor
from dspark.schema.dtypes import DTYPE_ITEMSIZE, TORCH_DTYPE_NAMES
from dspark.schema.errors import CheckpointError, UsageError
from dspark.schema.families import family_for_config
from dspark.schema.findings import Finding
from dspark.schema.inventory import TensorEntry, printable_name

METADATA_FILE = DCP_METADATA

# --------------------------------------------------------------------------
# Inventory


@dataclass(frozen=True)
class DcpChunk:
    """One stored piece of a tensor: where it sits in the tensor, and in
    which file, at which byte range, its `torch.save` archive lies."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    file: str
    start: int
    length: int

    @property
    def numel(self) -> int:
        count = 1
        for size in self.sizes:
            count *= size
        return count


def _chunks_for(fqn: str, tensor_md: Any, storage: dict, root: Path, file_sizes: dict, shown: str) -> tuple[DcpChunk, ...]:
    size = int_tuple(tensor_md.size)
    chunks: list[DcpChunk] = []
    for chunk_md in tensor_md.chunks:
        if not is_record(chunk_md, "ChunkStorageMetadata"):
            raise TypeError(f"a chunk is a {type(chunk_md).__name__}")
        offsets, sizes = int_tuple(chunk_md.offsets), int_tuple(chunk_md.sizes)
        if len(offsets) != len(size) or len(sizes) != len(size) or any(
            o < 0 or s < 0 or o + s > d for o, s, d in zip(offsets, sizes, size)
        ):
            raise corrupt_error(shown, f"{printable_name(fqn)}: chunk at {list(offsets)} of size {list(sizes)} "
                                  f"lies outside the tensor's shape {list(size)}", fqn)
        info = storage.get((fqn, offsets))
        if info is None:
            raise corrupt_error(shown, f"{printable_name(fqn)}: chunk at {list(offsets)} has no storage entry", fqn)
        if not is_record(info, "_StorageInfo"):
            raise TypeError(f"a storage record is a {type(info).__name__}")
        relative, start, length = info.relative_path, info.offset, info.length
        if not is_plain_file_name(relative):
            raise corrupt_error(shown, f"{printable_name(fqn)}: storage file {printable_name(str(relative))!r} is not a "
                                  "plain file name inside the checkpoint folder; refusing to follow it", fqn)
        if getattr(info, "transform_descriptors", None):
            raise corrupt_error(shown, f"{printable_name(fqn)}: stored with transforms {list(info.transform_descriptors)}, "
                                  "which dspark does not read", fqn)
        if relative not in file_sizes:
            file_path = root / relative
            file_sizes[relative] = file_path.stat().st_size if file_path.is_file() else None
        if file_sizes[relative] is None:
            raise corrupt_error(shown, f"{printable_name(fqn)}: storage file {relative} is missing", fqn)
        if not (isinstance(start, int) and isinstance(length, int) and start >= 0 and length > 0
                and start + length <= file_sizes[relative]):
            raise corrupt_error(shown, f"{printable_name(fqn)}: byte range [{start}, {start}+{length}) runs outside "
                                  f"{relative} ({file_sizes[relative]:,} bytes)", fqn)
        chunks.append(DcpChunk(offsets, sizes, relative, start, length))
    _check_tiling(fqn, size, chunks, shown)
    return tuple(chunks)


def _check_tiling(fqn: str, size: tuple[int, ...], chunks: list[DcpChunk], shown: str) -> None:
    """The chunks must cover the tensor exactly once."""
    numel = 1
    for d in size:
        numel *= d
    nonempty = [c for c in chunks if c.numel]
    overlap = any(
        all(a.offsets[i] < b.offsets[i] + b.sizes[i] and b.offsets[i] < a.offsets[i] + a.sizes[i] for i in range(len(size)))
        for n, a in enumerate(nonempty) for b in nonempty[n + 1:]
    )
    if overlap or sum(c.numel for c in nonempty) != numel or (numel and not nonempty):
        raise corrupt_error(shown, f"{printable_name(fqn)}: its {len(chunks)} chunks do not cover the tensor "
                              f"{list(size)} exactly once", fqn)


def open_dcp(path: Path, fmt: str = "dcp", *, config_path: Path | None = None) -> Checkpoint:
    """Open a DCP checkpoint: metadata only, no tensor read, no torch."""
    location = locate_dcp(path)
    model_dir = location.model_dir
    shown = METADATA_FILE if model_dir == path else str(model_dir.relative_to(path) / METADATA_FILE)
    metadata = read_dcp_metadata(model_dir / METADATA_FILE, shown)

    try:
        storage: dict[tuple[str, tuple[int, ...]], Any] = {}
        for index, info in metadata.storage_data.items():
            if not is_record(index, "MetadataIndex") or not isinstance(index.fqn, str):
                raise TypeError(f"a storage key is a {type(index).__name__}")
            offset = getattr(index, "offset", None)
            storage[(index.fqn, int_tuple(offset) if offset is not None else ())] = info
    except (AttributeError, TypeError, ValueError) as exc:
        raise malformed_error(shown, exc) from None

    fqns = [k for k in metadata.state_dict_metadata if isinstance(k, str)]
    draft = set(draft_keys(fqns))
    _refuse_training_state(fqns, draft, model_dir, path)

    # The run's config.yaml, read once: its target for a generated draft
    # config, and what the run trained with.
    training = run_training(location.run_root) if location.run_root is not None else None
    config, config_file, config_findings, family, config_source = _draft_config(path, location, config_path, training)
    if config is not None and family is not None and training is not None:
        shown_config = display_name(config_file, model_dir) if config_file else CONFIG_NAME
        config, trained = with_run_training(config, family, training, shown_config)
        config_findings = list(config_findings) + trained
    entries: list[TensorEntry] = []
    left_behind: list[str] = []
    file_sizes: dict[str, int | None] = {}
    for fqn in fqns:
        tensor_md = metadata.state_dict_metadata[fqn]
        if fqn not in draft or not is_record(tensor_md, "TensorStorageMetadata"):
            left_behind.append(fqn)
            continue
        try:
            chunks = _chunks_for(fqn, tensor_md, storage, model_dir, file_sizes, shown)
            entries.append(TensorEntry(
                served_name=served_name_for(family, fqn),
                stored_name=fqn,
                dtype=dtype_code(tensor_md.properties.dtype, file=shown, tensor=fqn),
                shape=int_tuple(tensor_md.size),
                file=chunks[0].file if chunks else "",
                locator=chunks,
            ))
        except (AttributeError, TypeError, ValueError) as exc:
            raise malformed_error(shown, exc, fqn) from None

    findings: list[Finding] = [location.note] if location.note else []
    if left_behind:
        findings.append(left_behind_finding(left_behind, shown))
    weight_files = sorted({c.file for e in entries for c in e.locator})
    details: dict[str, Any] = {"dcp_model_dir": str(model_dir), "left_behind": len(left_behind)}
    if config_source:
        details["config_from"] = config_source
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
        metadata=details,
    )


# TorchSpec saves the optimizer and the scheduler as DCP folders beside the
# model's (torchspec/training/checkpoint.py@6f21829:306-316).
_TRAINING_STATE_PREFIXES = ("optim_state", "lr_scheduler_state")


def _refuse_training_state(fqns: list[str], draft: set[str], model_dir: Path, path: Path) -> None:
    """A DCP folder of optimizer or scheduler state holds no draft: say
    where the weights are instead of listing every tensor as missing."""
    if draft or not fqns or not all(f.split(".", 1)[0] in _TRAINING_STATE_PREFIXES for f in fqns):
        return
    weights = model_dir.parent / "model"
    where = (f"the draft's weights are in {printable_name(str(weights))}" if (weights / METADATA_FILE).is_file()
             else f"TorchSpec keeps the draft's weights in the iteration's model/ folder, and "
                  f"{printable_name(str(weights))} holds none")
    entries = f"{len(fqns)} {'entry' if len(fqns) == 1 else 'entries'}"
    raise UsageError(
        f"{printable_name(str(path))}: this DCP folder holds TorchSpec's optimizer or scheduler state "
        f"({entries}, none of them draft weights); {where}.",
        hint="Pass the iteration folder, its model/ folder, or the run's output folder.",
    )


def _draft_config(path: Path, location, explicit: Path | None, training: RunTraining | None):
    """`--config`, else a config.json beside the weights or up the tree (to
    the folder above the one the user named, and at least to the training
    run's folder), else the file the run's config.yaml names under
    `model.draft_model_config`: TorchSpec copies no config.json into its
    runs (lightseekorg/TorchSpec torchspec/config/train_config.py@6f21829:86,233-244)."""
    model_dir = location.model_dir
    levels = len(model_dir.relative_to(path).parts) + 1
    if location.run_root is not None:
        levels = max(levels, len(model_dir.relative_to(location.run_root).parts))
    missing_note = None
    source = None
    if explicit is None and location.run_root is not None and find_config_upwards(model_dir, levels) is None:
        named = draft_config_from_run(location.run_root)
        if named.path is not None:
            explicit, source = named.path, "config.yaml: model.draft_model_config"
        elif named.generated_at_training:
            generated = _generated_draft_config(location.run_root, training)
            if isinstance(generated, str):
                missing_note = f"The training run's config.yaml was looked at too: {named.problem} ({generated})."
            else:
                config, note, source = generated
                return config, None, [note], family_for_config(config), source
        else:
            missing_note = f"The training run's config.yaml was looked at too: {named.problem}."
    config, config_file, findings, family = load_config_for(
        model_dir, explicit, search_parents=levels, missing_note=missing_note
    )
    return config, config_file, findings, family, source


def _generated_draft_config(run_root: Path, training: RunTraining) -> tuple[dict[str, Any], Finding, str] | str:
    """The EAGLE-3 config TorchSpec generated from the run's target at
    training time, made again from the same target folder, with its SRC007
    note and where it came from; or why it cannot be."""
    target_path = training.target_path
    if not target_path:
        return f"the run's config.yaml gives no {'.'.join(TARGET_PATH_KEY)} to generate it from"
    folder = local_target_folder(target_path, run_root)
    if folder is None:
        return (f"the run's {'.'.join(TARGET_PATH_KEY)}, {printable_name(target_path)!r}, is not a folder here "
                "with a config.json")
    generated = generate_draft_config(folder)
    if generated.config is None:
        return f"the target at {printable_name(str(folder))}: {generated.problem}"
    raised = (f"; vocab_size is the tokenizer's length, {generated.tokenizer_length}, larger than the target "
              "config's" if generated.tokenizer_length else "")
    note = Finding(
        "SRC007",
        f"{CONFIG_NAME}: the run's config.yaml sets no model.draft_model_config, so TorchSpec trained the draft on "
        f"a Llama EAGLE-3 config it generated from the target ({'.'.join(TARGET_PATH_KEY)} = "
        f"{printable_name(str(folder))}) and never saved; dspark generated the same config from that folder "
        f"({GENERATOR_SOURCE}, torchspec/train_entry.py@6f21829:184-195{raised}). Convert writes it.",
        file=CONFIG_NAME,
        detail={"source": "generated", "target": str(folder)},
    )
    return generated.config, note, f"generated from {folder / CONFIG_NAME}"


# --------------------------------------------------------------------------
# Payloads


_UNSIGNED = {1: "u1", 2: "<u2", 4: "<u4", 8: "<u8"}  # numpy views of any dtype, bits untouched


class DcpReader:
    """Streams a tensor's values from its chunks' `torch.save` archives;
    `entry.locator` holds the chunks. Every call opens its own files and
    buffers, so `--deep` may read several tensors at once."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def read_raw(self, entry: TensorEntry) -> bytes:
        return b"".join(bytes(chunk) for chunk in self.iter_chunks(entry, 1 << 30))

    def iter_chunks(self, entry: TensorEntry, chunk_bytes: int) -> Iterator[memoryview]:
        chunks: tuple[DcpChunk, ...] = entry.locator
        runs = _row_major_runs(chunks, entry.shape)
        if runs is not None:
            return self._stream(entry, runs, chunk_bytes)
        return self._assembled(entry, chunk_bytes)

    def locate(self, entry: TensorEntry, chunk: DcpChunk) -> SavedTensor:
        """Where one chunk's values sit in its `.distcp` file, checked
        against what the metadata says of it."""
        shown = f"{chunk.file} [{chunk.start:,}, {chunk.start + chunk.length:,})"
        with open(self.root / chunk.file, "rb", buffering=0) as handle:
            saved = locate_saved_tensor(handle.fileno(), chunk.start, chunk.length, shown=shown, tensor=entry.stored_name)
        if saved.dtype != entry.dtype or saved.shape != chunk.sizes:
            raise corrupt_error(shown, f"{printable_name(entry.stored_name)}: chunk holds "
                                  f"{TORCH_DTYPE_NAMES.get(saved.dtype, saved.dtype)}{list(saved.shape)}, the metadata "
                                  f"says {TORCH_DTYPE_NAMES.get(entry.dtype, entry.dtype)}{list(chunk.sizes)}",
                           entry.stored_name)
        return saved

    def _stream(self, entry: TensorEntry, runs: list[DcpChunk], chunk_bytes: int) -> Iterator[memoryview]:
        # Chunks are whole rows of the tensor, in order: the tensor's bytes
        # are the chunks' bytes one after the other, each read in place.
        itemsize = DTYPE_ITEMSIZE[entry.dtype]
        chunk_bytes = max(itemsize, chunk_bytes - chunk_bytes % itemsize)
        for chunk in runs:
            saved = self.locate(entry, chunk)
            if saved.is_contiguous:
                start, end = saved.byte_range
                yield from iter_range_chunks(self.root / chunk.file, start, end, chunk_bytes)
            else:
                flat = memoryview(self._values(chunk, saved)).cast("B")
                for position in range(0, len(flat), chunk_bytes):
                    yield flat[position:position + chunk_bytes]

    def _assembled(self, entry: TensorEntry, chunk_bytes: int) -> Iterator[memoryview]:
        # Split along a later axis (FSDP Shard(1), tensor parallel): the
        # tensor is put together in memory, then handed out.
        import numpy as np

        whole = np.empty(entry.shape, dtype=_UNSIGNED[DTYPE_ITEMSIZE[entry.dtype]])
        for chunk in entry.locator:
            if chunk.numel:
                region = tuple(slice(o, o + s) for o, s in zip(chunk.offsets, chunk.sizes))
                whole[region] = self._values(chunk, self.locate(entry, chunk))
        flat = memoryview(whole.reshape(-1).view(np.uint8))
        for position in range(0, len(flat), chunk_bytes):
            yield flat[position:position + chunk_bytes]

    def _values(self, chunk: DcpChunk, saved: SavedTensor):
        """One chunk's values as a C-ordered numpy array of unsigned
        integers of the dtype's width (the bits, not the numbers)."""
        import numpy as np

        word = np.dtype(_UNSIGNED[saved.itemsize])
        if saved.is_contiguous:
            values = np.empty(saved.shape, dtype=word)
            _pread_into(self.root / chunk.file, memoryview(values.reshape(-1).view(np.uint8)), saved.byte_range[0])
            return values
        storage = np.empty(saved.storage_bytes // saved.itemsize, dtype=word)
        _pread_into(self.root / chunk.file, memoryview(storage.view(np.uint8)), saved.data_start)
        strided = np.lib.stride_tricks.as_strided(
            storage[saved.storage_offset:], shape=saved.shape,
            strides=tuple(s * saved.itemsize for s in saved.stride), writeable=False,
        )
        return np.ascontiguousarray(strided)


def _row_major_runs(chunks: tuple[DcpChunk, ...], shape: tuple[int, ...]) -> list[DcpChunk] | None:
    """The non-empty chunks in storage order when each is one run of the
    tensor's C-ordered elements (whole trailing rows), else None."""
    starts: list[tuple[int, DcpChunk]] = []
    for chunk in chunks:
        if not chunk.numel:
            continue
        first = next((i for i, s in enumerate(chunk.sizes) if s != 1), len(shape))
        if any(chunk.sizes[i] != shape[i] for i in range(first + 1, len(shape))):
            return None
        start, stride = 0, 1
        for axis in reversed(range(len(shape))):
            start += chunk.offsets[axis] * stride
            stride *= shape[axis]
        starts.append((start, chunk))
    return [chunk for _, chunk in sorted(starts, key=lambda pair: pair[0])]


def _pread_into(path: Path, target: memoryview, offset: int) -> None:
    with open(path, "rb", buffering=0) as handle:
        filled = 0
        while filled < len(target):
            got = positional.pread_into(handle.fileno(), target[filled:], offset + filled)
            if got <= 0:
                raise CheckpointError(
                    f"{path}: file ended at byte {offset + filled:,} while reading a tensor chunk.",
                    code="SRC004",
                    path=str(path),
                    hint="The DCP checkpoint is incomplete or damaged; copy it again from the training run.",
                )
            filled += got


__all__ = ["DcpChunk", "DcpMetadataUnpickler", "DcpReader", "MetadataRecord", "open_dcp", "read_dcp_metadata"]
