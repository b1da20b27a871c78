"""`.pt` / `.pth` / `.bin` state dicts, loaded with `torch.load(weights_only=True)`
and nothing else.

A file that needs more than weights-only loading allows (a pickled class,
a code payload) is refused with `UnsafeInputError`; nothing in it runs.

Memory: zip-format files are memory-mapped (`mmap=True`), so opening reads
no payload. Mapped pages count toward resident memory once touched, so the
reader hands each chunk's pages back to the kernel (`madvise`) as soon as
the chunk has been consumed: resident memory stays near one chunk, however
large the file. Files in torch's legacy (pre-1.6) format cannot be mapped
and are loaded whole.
"""

from __future__ import annotations

import ctypes
import mmap
import pickle
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Iterator

from dspark.converters.layouts.hf import CONFIG_NAME, torch_weight_files
from dspark.converters.layouts.specforge import (
    CAPTURE_LAYERS_FIELD,
    DRAFT_STATE_KEY,
    NO_CONFIG_SAVED,
    PROVENANCE_KEY,
    holds_training_state,
    locate_training_state,
    recorded_capture_layers,
    recorded_draft_config,
    refuse_rank_state,
)
from dspark.converters.layouts.trained_taps import with_trained_taps
from dspark.converters.readers.base import (
    Checkpoint,
    display_name,
    find_config_upwards,
    left_behind_finding,
    load_config_for,
    served_name_for,
)
from dspark.schema.dtypes import TORCH_DTYPE_NAMES
from dspark.schema.errors import CheckpointError, UnsafeInputError, first_line, require_torch
from dspark.schema.findings import Finding, Severity
from dspark.schema.inventory import TensorEntry, printable_name

# Where training code nests the weights, most specific first (SpecForge's
# training_state.pt: converters/layouts/specforge.py).
NESTED_STATE_DICT_KEYS = ("draft_model", DRAFT_STATE_KEY, "state_dict", "model", "module")
_MAX_NESTING = 4

# TorchSpec's DFlash exporter writes one .pt and no config
# (lightseekorg/TorchSpec scripts/tools/extract_dflash_checkpoint.py@6f21829:47,97).
PT_HAS_NO_CONFIG = (
    "A .pt state dict carries no config of its own (TorchSpec's extract_dflash_checkpoint.py writes none): "
    "pass --config with the draft config the run was trained with."
)

_TORCH_NAME_TO_CODE = {name: code for code, name in TORCH_DTYPE_NAMES.items()}


def torch_dtype_code(dtype: Any, *, file: str, tensor: str) -> str:
    """A torch dtype as a safetensors code (`torch.bfloat16` -> `BF16`)."""
    code = _TORCH_NAME_TO_CODE.get(str(dtype).removeprefix("torch."))
    if code is None:
        raise CheckpointError(
            f"{file}: {printable_name(tensor)} has dtype {dtype}, which a safetensors checkpoint cannot hold.",
            code="SRC004",
            path=file,
            tensor=tensor,
            hint="Convert that tensor to a real floating-point dtype before exporting.",
        )
    return code


def require_dense(tensor: Any, *, file: str, name: str) -> None:
    """Refuse a tensor that has no plain bytes to read: a meta tensor (no
    data at all) or a sparse or other non-strided layout."""
    layout, device = str(tensor.layout).removeprefix("torch."), tensor.device.type
    if layout != "strided" or device != "cpu":
        what = "a meta tensor, which holds no data" if device == "meta" else f"stored as {layout} on {device}"
        raise CheckpointError(
            f"{file}: {printable_name(name)} is {what}; a safetensors checkpoint holds dense CPU tensors only.",
            code="SRC004",
            path=file,
            tensor=name,
            hint="Materialise the weights (tensor.to_dense(), or load the real values) before torch.save.",
        )


def tensor_byte_chunks(
    tensor: Any, chunk_bytes: int, release: Callable[[int, int], None] | None = None
) -> Iterator[memoryview]:
    """A tensor's bytes, C order, in chunks of at most `chunk_bytes`, as
    views of its memory (no copy when it is contiguous). `release(address,
    length)` is called on the source memory once a chunk is consumed."""
    import torch

    source = tensor.detach()
    dense = source if source.is_contiguous() else source.contiguous()
    if dense.numel() == 0:
        return
    flat = dense.reshape(-1).view(torch.uint8).numpy()
    view = memoryview(flat)
    base = dense.data_ptr()
    for start in range(0, len(view), chunk_bytes):
        chunk = view[start:start + chunk_bytes]
        yield chunk
        if release is not None and dense is source:
            release(base + start, len(chunk))
    if release is not None and dense is not source:
        storage = source.untyped_storage()
        release(storage.data_ptr(), storage.nbytes())


class _FilePages:
    """Gives the pages of one memory-mapped file back to the kernel.

    Only addresses inside a mapping of that very file (read from
    /proc/self/maps) are released; those pages are clean and file-backed,
    so releasing them drops them from resident memory and a later access
    reads them from the file again. Anywhere else (not Linux, anonymous
    memory) it does nothing.
    """

    _MADV_DONTNEED = 4

    def __init__(self, path: Path) -> None:
        self.ranges: list[tuple[int, int]] = []
        self._madvise = None
        if not sys.platform.startswith("linux"):
            return
        target = str(path.resolve())
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    parts = line.split(None, 5)
                    if len(parts) == 6 and parts[5].rstrip("\n") == target:
                        start, end = (int(x, 16) for x in parts[0].split("-"))
                        self.ranges.append((start, end))
            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            self._madvise = libc.madvise
        except (OSError, AttributeError):
            self.ranges = []

    def __bool__(self) -> bool:
        return bool(self.ranges and self._madvise)

    def release(self, address: int, length: int) -> None:
        start = address // mmap.PAGESIZE * mmap.PAGESIZE
        end = -(-(address + length) // mmap.PAGESIZE) * mmap.PAGESIZE
        for low, high in self.ranges:
            if low <= start and end <= high:
                self._madvise(start, end - start, self._MADV_DONTNEED)
                return


class PtReader:
    """Payloads of loaded state dicts; `entry.locator` is the tensor, and
    `pages[entry.file]` the pages of its memory-mapped file, if mapped."""

    def __init__(self, pages: dict[str, _FilePages | None]) -> None:
        self.pages = {name: file_pages for name, file_pages in pages.items() if file_pages}

    def read_raw(self, entry: TensorEntry) -> bytes:
        return b"".join(bytes(chunk) for chunk in self.iter_chunks(entry, 1 << 30))

    def iter_chunks(self, entry: TensorEntry, chunk_bytes: int) -> Iterator[memoryview]:
        file_pages = self.pages.get(entry.file)
        return tensor_byte_chunks(entry.locator, chunk_bytes, file_pages.release if file_pages else None)


def refused_as_unsafe(error: Exception) -> bool:
    """Whether torch's weights-only unpickler refused something it would
    have to run (a global, a call), rather than bytes that are no pickle at
    all ("Unsupported operand": a corrupt file)."""
    text = str(error).lower()
    return "weights only" in text and "unsupported operand" not in text


def _unsafe(path: Path, error: Exception) -> UnsafeInputError:
    text = str(error)
    named = re.search(r"GLOBAL ([\w.]+)", text)
    other = re.search(r"Unsupported[^\n.]*", text)
    detail = f"it references {named.group(1)}" if named else (other.group(0).strip() if other else "refused by the weights-only unpickler")
    return UnsafeInputError(
        f"{path}: refusing to load: it needs more than weights-only loading allows ({detail}). "
        "Loading it fully could run code hidden in the file; dspark never does.",
        code="SRC003",
        path=str(path),
        hint="Re-save only the weights on a trusted machine: torch.save(model.state_dict(), PATH).",
    )


def load_weights_only(path: Path, torch: Any) -> tuple[Any, bool]:
    """`torch.load(weights_only=True)`, memory-mapped where the format
    allows. Returns the object and whether it is mapped."""
    for mapped in (True, False):
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mapped), mapped
        except pickle.UnpicklingError as error:
            if refused_as_unsafe(error):
                raise _unsafe(path, error) from None
            raise _corrupt(path, error) from None
        except RuntimeError as error:
            if mapped and "mmap can only be used" in str(error):
                continue  # legacy (non-zip) format: load it whole
            raise _corrupt(path, error) from None
        except Exception as error:  # noqa: BLE001 - any other failure is a corrupt file
            raise _corrupt(path, error) from None
    raise AssertionError("unreachable")


def _corrupt(path: Path, error: Exception) -> CheckpointError:
    # torch's weights-only message opens with advice to retry with
    # weights_only=False; the reason itself ("Unsupported operand 103") is
    # further down.
    unsupported = re.search(r"Unsupported operand[^\n.]*", str(error))
    first = unsupported.group(0).strip() if unsupported else first_line(error)
    return CheckpointError(
        f"{path}: not a readable torch checkpoint ({first}).",
        code="SRC004",
        path=str(path),
        hint="Re-export the file; it may be truncated or not a torch.save file.",
    )


def find_state_dict(obj: Any, torch: Any, shown: str) -> tuple[dict[str, Any], str | None, list[str]]:
    """The draft's tensors (flattened, dotted keys), where they were nested,
    and the names of entries left behind."""
    left_behind: list[str] = []
    nested_under: list[str] = []
    current = obj
    for _ in range(_MAX_NESTING):
        if not isinstance(current, Mapping) or any(isinstance(v, torch.Tensor) for v in current.values()):
            break
        key = next((k for k in NESTED_STATE_DICT_KEYS if isinstance(current.get(k), Mapping)), None)
        if key is None:
            break
        left_behind += [_join(nested_under, str(k)) for k in current if k != key]
        nested_under.append(key)
        current = current[key]
    if not isinstance(current, Mapping):
        raise CheckpointError(
            f"{shown}: holds a {type(current).__name__}, not a state dict of tensors.",
            code="SRC004",
            path=shown,
            hint="Save the draft with torch.save(model.state_dict(), PATH).",
        )
    tensors: dict[str, Any] = {}

    def walk(mapping: Mapping, prefix: str) -> None:
        for key, value in mapping.items():
            if not isinstance(key, str):
                left_behind.append(_join(nested_under, prefix + repr(key)))
            elif isinstance(value, torch.Tensor):
                tensors[prefix + key] = value
            elif isinstance(value, Mapping):
                walk(value, prefix + key + ".")
            else:
                left_behind.append(_join(nested_under, prefix + key))

    walk(current, "")
    if not tensors:
        raise CheckpointError(
            f"{shown}: no tensors found (top-level keys: {', '.join(map(str, list(obj)[:8])) if isinstance(obj, Mapping) else '-'}).",
            code="SRC004",
            path=shown,
            hint=f"dspark looks for a flat state dict or one under {', '.join(NESTED_STATE_DICT_KEYS)}.",
        )
    return tensors, ".".join(nested_under) or None, left_behind


def _join(parts: list[str], name: str) -> str:
    return ".".join([*parts, name])


def open_pt(path: Path, fmt: str = "pt", *, config_path: Path | None = None) -> Checkpoint:
    """Open a state dict: the file itself, a folder holding one or several
    (`torch_weight_files`: every *.bin, HF's shards), or a SpecForge step
    folder or output folder (its training_state.pt; the per-rank optimizer
    files beside it are never read)."""
    torch = require_torch("Reading a .pt checkpoint")
    location = None
    if path.is_dir() and holds_training_state(path):
        location = locate_training_state(path)
        weights = location.state_file
    elif path.is_dir():
        names = torch_weight_files(p.name for p in path.iterdir() if p.is_file())
        if len(names) > 1:
            return _open_torch_shards(path, names, config_path, torch)
        weights = path / names[0]
    else:
        weights = path
    refuse_rank_state(weights)
    folder = weights.parent  # where the draft's config is looked for
    # The inventory, findings and errors name the file from the folder the
    # user gave (a SpecForge output folder: which step's training_state.pt).
    root = path if location is not None else folder
    named = weights.relative_to(root).as_posix()
    obj, mapped = load_weights_only(weights, torch)
    tensors, nested_under, left_behind = find_state_dict(obj, torch, named)
    for name, tensor in tensors.items():
        require_dense(tensor, file=named, name=name)
    explicit, missing_note, config_from = config_path, PT_HAS_NO_CONFIG, None
    if nested_under == DRAFT_STATE_KEY and explicit is None and find_config_upwards(folder, 1) is None:
        recorded = recorded_draft_config(obj)
        if recorded.path is not None:
            explicit, config_from = recorded.path, f"{named}: {PROVENANCE_KEY}.draft_config"
        else:
            missing_note = (f"{NO_CONFIG_SAVED}, and {recorded.problem}: pass --config with the draft config "
                            "the run was trained with.")
    config, config_file, config_findings, family = load_config_for(
        folder, explicit, search_parents=1, missing_note=missing_note
    )
    captured = recorded_capture_layers(obj) if nested_under == DRAFT_STATE_KEY else None
    if captured and config is not None and family is not None:
        config, taken = with_trained_taps(
            config, family, captured, config_file=display_name(config_file, folder) if config_file else CONFIG_NAME,
            source=f"{named} ({PROVENANCE_KEY}.{CAPTURE_LAYERS_FIELD})",
            cite="specforge/algorithms/model_providers.py@a6b6b02:188-210",
        )
        config_findings = list(config_findings) + taken
    elif nested_under == DRAFT_STATE_KEY and config is not None and family is not None and family.tap_ids_field:
        config_findings = list(config_findings) + [_no_capture_recorded(config, family, named)]

    entries = [_entry(family, name, tensor, named) for name, tensor in tensors.items()]
    findings = [location.note] if location is not None and location.note else []
    if left_behind:
        findings.append(left_behind_finding(left_behind, named))
    metadata: dict[str, Any] = {"memory_mapped": mapped}
    if nested_under:
        metadata["state_dict_key"] = nested_under
    if config_from:
        metadata["config_from"] = config_from
    return Checkpoint(
        source=path,
        root=root,
        format="pt",
        weight_files=[named],
        entries=entries,
        findings=findings,
        reader=PtReader({named: _FilePages(weights) if mapped else None}),
        config=config,
        config_path=config_file,
        config_findings=config_findings,
        family=family,
        metadata=metadata,
    )


def _no_capture_recorded(config: dict, family, named: str) -> Finding:
    """SRC007 (a warning) for a SpecForge training state that records no
    capture layers: an offline run resolves none (its hidden states were
    captured beforehand; specforge/training/assembly.py@a6b6b02:210-212),
    so which layers they came from, a run override included, is not in the
    checkpoint. The config's list, or the engine's defaults, is used."""
    declared, where = family.tap_ids(config)
    said = f"the config's {where} = {declared}" if declared else "the target's defaults (the config lists none)"
    return Finding(
        "SRC007",
        f"{named}: the run recorded no capture layers (an offline run records none, "
        "specforge/training/assembly.py@a6b6b02:210-212, nor does an older SpecForge), so the layers its "
        f"hidden states were captured from, a run override included, are not in the checkpoint; {said} is what convert writes and the target "
        "captures. Check it is the list the hidden states were made with, or pass --config with that list.",
        file=named,
        detail={"problem": "no capture layers recorded", "declared": declared},
        severity=Severity.WARNING,
    )


def _entry(family, name: str, tensor: Any, file: str) -> TensorEntry:
    """The inventory entry of one loaded tensor; its payload is the tensor."""
    return TensorEntry(
        served_name=served_name_for(family, name),
        stored_name=name,
        dtype=torch_dtype_code(tensor.dtype, file=file, tensor=name),
        shape=tuple(tensor.shape),
        file=file,
        locator=tensor,
    )


def _open_torch_shards(folder: Path, names: list[str], config_path: Path | None, torch: Any) -> Checkpoint:
    """Several *.bin files (HF's pytorch_model-0000N-of-0000M.bin): the
    engine loads every one and yields each file's top-level entries as they
    are (model_loader/weight_utils.py@f4d8ec6e:690-705); a tensor in two
    files is served from the one it reads last, in glob order (IDX005)."""
    from dspark.converters.readers.copies import compare_copies
    from dspark.converters.readers.safetensors import stored_twice_finding

    config, config_file, config_findings, family = load_config_for(
        folder, config_path, search_parents=1, missing_note=PT_HAS_NO_CONFIG)
    entries: list[TensorEntry] = []
    owners: dict[str, TensorEntry] = {}
    twice: list[tuple[TensorEntry, TensorEntry]] = []
    findings: list[Finding] = []
    pages: dict[str, _FilePages | None] = {}
    nested_keys: list[str] = []
    all_mapped = True
    for named in names:
        obj, mapped = load_weights_only(folder / named, torch)
        all_mapped = all_mapped and mapped
        pages[named] = _FilePages(folder / named) if mapped else None
        tensors, nested_under, left_behind = find_state_dict(obj, torch, named)
        if nested_under:
            nested_keys.append(nested_under)
        if left_behind:
            findings.append(left_behind_finding(left_behind, named))
        for name, tensor in tensors.items():
            require_dense(tensor, file=named, name=name)
            entry = _entry(family, name, tensor, named)
            if name in owners:
                twice.append((owners[name], entry))
                continue
            owners[name] = entry
            entries.append(entry)
    reader = PtReader(pages)
    for first, second in twice:
        findings.append(stored_twice_finding(
            second.stored_name, first.file, second.file,
            layouts=((first.dtype, first.shape), (second.dtype, second.shape)), byte_ranges=None,
            comparison=compare_copies(reader, first, second, limit=None)))
    metadata: dict[str, Any] = {"memory_mapped": all_mapped}
    if nested_keys:
        metadata["state_dict_key"] = nested_keys[0]
    return Checkpoint(
        source=folder,
        root=folder,
        format="pt",
        weight_files=list(names),
        entries=entries,
        findings=findings,
        reader=reader,
        config=config,
        config_path=config_file,
        config_findings=config_findings,
        family=family,
        metadata=metadata,
    )
