"""A DCP checkpoint's `.metadata` pickle, read without torch.

`DcpMetadataUnpickler` resolves only the checkpoint-metadata classes on an
allow-list (torch's DCP metadata dataclasses, `torch.Size`, dtype/layout
names, the filesystem storage record, paths) and rebuilds each as a plain
local record; any other global, a code payload included, is refused with
`UnsafeInputError` before anything runs. Nothing of torch is imported or
called. `readers/dcp.py` turns the records into the inventory.
"""

from __future__ import annotations

import pickle
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark.schema.dtypes import TORCH_DTYPE_NAMES
from dspark.schema.errors import CheckpointError, UnsafeInputError
from dspark.schema.inventory import printable_name

_DCP_METADATA = "torch.distributed.checkpoint.metadata"
_DCP_FILESYSTEM = "torch.distributed.checkpoint.filesystem"
_DTYPE_CODES = {name: code for code, name in TORCH_DTYPE_NAMES.items()}


# --------------------------------------------------------------------------
# .metadata, rebuilt as plain records


class MetadataRecord:
    """One of DCP's metadata dataclasses, rebuilt as plain attributes:
    pickle creates it empty (NEWOBJ) and fills it from its state (BUILD).
    `kind` is the torch class name it stands for."""

    kind = ""

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and all(isinstance(s, (dict, type(None))) for s in state):
            state = {**(state[0] or {}), **(state[1] or {})}  # (__dict__, __slots__) state
        if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
            raise TypeError(f"{self.kind} state is a {type(state).__name__}, not a field mapping")
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"{self.kind}({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"


class _TensorProperties(MetadataRecord):
    kind = "TensorProperties"

    def __setstate__(self, state: Any) -> None:
        # torch pickles TensorProperties as a 5-tuple (its __getstate__)
        if isinstance(state, tuple) and len(state) == 5:
            self.dtype, self.layout, self.requires_grad, self.memory_format, self.pin_memory = state
        else:
            super().__setstate__(state)


def _record_class(kind: str, **defaults: Any) -> type[MetadataRecord]:
    return type(kind, (MetadataRecord,), {"kind": kind, **defaults})


# Field defaults matter: torch leaves a field out of the pickled state when
# it holds its default (MetadataIndex.offset for a non-tensor entry,
# _StorageInfo.transform_descriptors without extensions).
METADATA_RECORDS: dict[str, type[MetadataRecord]] = {
    "TensorProperties": _TensorProperties,
    "Metadata": _record_class("Metadata", planner_data=None, storage_data=None, storage_meta=None, version=None),
    "MetadataIndex": _record_class("MetadataIndex", offset=None, index=None),
    "_StorageInfo": _record_class("_StorageInfo", transform_descriptors=None),
    **{kind: _record_class(kind) for kind in (
        "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata", "StorageMeta",
    )},
}


@dataclass(frozen=True)
class TorchName:
    """A `torch.<name>` global in the pickle (a dtype, layout or memory
    format). Inert: it is a name, never called."""

    name: str


def _torch_size(values: Any) -> tuple[int, ...]:
    return tuple(values)


def _layout_name(name: Any) -> str:
    return str(name)


def _memory_format_code(value: Any) -> tuple[str, Any]:
    return ("memory_format", value)


def _path_text(*parts: Any) -> str:
    return "/".join(str(p) for p in parts)


# module -> name -> what it becomes. Everything here only builds plain
# records when called; none can reach the file system, the process or the
# interpreter.
ALLOWED_GLOBALS: dict[str, dict[str, Any]] = {
    _DCP_METADATA: {
        **{kind: METADATA_RECORDS[kind] for kind in (
            "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
            "TensorProperties", "MetadataIndex", "StorageMeta",
        )},
        "_MEM_FORMAT_ENCODING": _memory_format_code,
    },
    _DCP_FILESYSTEM: {"_StorageInfo": METADATA_RECORDS["_StorageInfo"]},
    "torch.serialization": {"_get_layout": _layout_name},
    "torch": {"Size": _torch_size},
    "pathlib": {name: _path_text for name in ("PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath", "Path")},
    "collections": {"OrderedDict": OrderedDict},
}


class DcpMetadataUnpickler(pickle.Unpickler):
    """Unpickles a DCP `.metadata` file, resolving only allow-listed globals."""

    def __init__(self, file, *, shown: str) -> None:
        super().__init__(file)
        self.shown = shown

    def find_class(self, module: str, name: str) -> Any:
        allowed = ALLOWED_GLOBALS.get(module, {})
        if name in allowed:
            return allowed[name]
        if module == "torch" and name.isidentifier() and not name.startswith("_") and name.islower():
            return TorchName(name)  # torch.bfloat16, torch.strided, torch.contiguous_format
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


def is_record(value: Any, kind: str) -> bool:
    return isinstance(value, MetadataRecord) and value.kind == kind


def read_dcp_metadata(path: Path, shown: str | None = None) -> MetadataRecord:
    """Parse `.metadata` with the restricted unpickler and check its shape."""
    shown = shown or str(path)
    try:
        with open(path, "rb") as handle:
            metadata = DcpMetadataUnpickler(handle, shown=shown).load()
    except UnsafeInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to parse is a corrupt file
        raise corrupt_error(shown, f"not a readable DCP metadata pickle ({type(exc).__name__}: {exc})") from None
    if not is_record(metadata, "Metadata"):
        kind = metadata.kind if isinstance(metadata, MetadataRecord) else type(metadata).__name__
        raise corrupt_error(shown, f"holds a {kind}, not DCP checkpoint Metadata")
    if not isinstance(getattr(metadata, "state_dict_metadata", None), dict) or not isinstance(
        getattr(metadata, "storage_data", None), dict
    ):
        raise corrupt_error(shown, "the metadata lacks its tensor or storage tables")
    return metadata


def corrupt_error(shown: str, reason: str, tensor: str | None = None) -> CheckpointError:
    return CheckpointError(
        f"{shown}: {reason}.",
        code="SRC004",
        path=shown,
        tensor=tensor,
        hint="The DCP checkpoint is incomplete or damaged; copy it again from the training run.",
    )


def malformed_error(shown: str, error: Exception, tensor: str | None = None) -> CheckpointError:
    # The allow-listed records take whatever fields the file gives them; a
    # record of the wrong type shows up as one of these errors.
    where = f"{printable_name(tensor)}: " if tensor else ""
    return corrupt_error(shown, f"{where}malformed metadata record ({type(error).__name__}: {error})", tensor)


def int_tuple(values: Any) -> tuple[int, ...]:
    result = tuple(values)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in result):
        raise ValueError(f"{values!r:.60} is not a sequence of integers")
    return result


def dtype_code(dtype: Any, *, file: str, tensor: str) -> str:
    name = dtype.name if isinstance(dtype, TorchName) else None
    code = _DTYPE_CODES.get(name) if name else None
    if code is None:
        raise CheckpointError(
            f"{file}: {printable_name(tensor)} has dtype {f'torch.{name}' if name else repr(dtype)}, which a "
            "safetensors checkpoint cannot hold.",
            code="SRC004",
            path=file,
            tensor=tensor,
            hint="Convert that tensor to a real floating-point dtype before exporting.",
        )
    return code
