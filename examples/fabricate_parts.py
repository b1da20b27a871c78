"""What every fabricated draft is made of, whatever its family: seeded
tensors, the defects that break a good draft, and the writers (real
safetensors files, or a header over a payload hole).

`dspark.examples.fabricate` is the command and the family registry; the
families live in it and in `fabricate_gqa` and `fabricate_eagle3`.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from dspark.schema.dtypes import nbytes_of


# --------------------------------------------------------------------------
# Defects: each turns a good (config, tensors) into a bad one. The code is
# the finding `dspark check` must report; `deep` marks payload defects.


@dataclass(frozen=True)
class Defect:
    code: str
    apply: Callable[[dict, dict], None]
    deep: bool = False
    description: str = ""
    # Build options the defect needs (("fc_norm", True): it breaks the
    # fc_norm weights, so the draft must have them). Applied when the caller
    # leaves the option unset; a caller who sets it otherwise is refused.
    needs: tuple[tuple[str, Any], ...] = ()
    # The finding compares the draft with its target: check it with the
    # target's config (`target_config` in the fabricator) as `--target`.
    target: bool = False


class FabricateError(ValueError):
    """A draft that cannot be made as asked (a defect of another family, an
    option the family does not have): the command exits 2 with the message."""


class DefectNotApplicable(FabricateError):
    """The defect has nothing to break in this draft (no d2t to shorten in a
    draft that ships the full vocabulary): the caller asked for a draft that
    cannot exist."""


def drop(prefix: str) -> Callable[[dict, dict], None]:
    def apply(config: dict, tensors: dict) -> None:
        names = [n for n in tensors if n.startswith(prefix)]
        if not names:
            raise DefectNotApplicable(f"this draft has no tensor named {prefix}* to drop")
        for name in names:
            del tensors[name]
    return apply


def set_field(field: str, value: Any) -> Callable[[dict, dict], None]:
    def apply(config: dict, tensors: dict) -> None:
        config[field] = value
    return apply


def unset(field: str) -> Callable[[dict, dict], None]:
    def apply(config: dict, tensors: dict) -> None:
        config.pop(field, None)
    return apply


def mutate(name: str, change: Callable[[Any], Any]) -> Callable[[dict, dict], None]:
    def apply(config: dict, tensors: dict) -> None:
        if name not in tensors:
            raise DefectNotApplicable(f"this draft has no tensor {name}")
        tensors[name] = change(tensors[name])
    return apply


def poke(value: float) -> Callable[[Any], Any]:
    """One value, in the middle of the tensor."""
    def change(tensor):
        tensor = tensor.clone()
        tensor.view(-1)[tensor.numel() // 2] = value
        return tensor
    return change


def fill(value: float) -> Callable[[Any], Any]:
    def change(tensor):
        return tensor.clone().fill_(value)
    return change


def widen(tensor):
    """One input column too many."""
    import torch

    return torch.cat([tensor, tensor[:, :1]], dim=1).contiguous()


def narrow(tensor):
    """One row (or entry) too few."""
    return tensor[:-1].contiguous()


def retype(dtype: str) -> Callable[[Any], Any]:
    def change(tensor):
        import torch

        return tensor.to(getattr(torch, dtype))
    return change


# --------------------------------------------------------------------------
# Tensors


def _is_norm(name: str) -> bool:
    return name.endswith("norm.weight") or name.startswith("fc_norm.") or "layernorm" in name


def make_tensors(shapes: dict[str, tuple[int, ...]], *, dtype: str = "bfloat16", seed: int = 0):
    """Seeded tensors: norms near 1 (never exactly 1), matrices ~N(0, 0.02)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    torch_dtype = getattr(torch, dtype)
    tensors = {}
    for name, shape in shapes.items():
        values = torch.randn(shape, generator=generator, dtype=torch.float32)
        values = 1.0 + 0.05 * values if _is_norm(name) else 0.02 * values
        tensors[name] = values.to(torch_dtype).contiguous()
    return tensors


# safetensors' dtype names for the torch dtypes a fabricated draft holds.
_SAFETENSORS_DTYPES = {
    "bfloat16": "BF16", "float16": "F16", "float32": "F32", "float64": "F64",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
}
_TORCH_DTYPES = {code: name for name, code in _SAFETENSORS_DTYPES.items()}


def safetensors_dtype(torch_dtype_name: str) -> str:
    """`bfloat16` -> `BF16`."""
    return _SAFETENSORS_DTYPES[torch_dtype_name]


def shape_tensors(specs: dict[str, tuple[tuple[int, ...], str]]):
    """Tensors with a shape and a dtype and no values (torch's meta device):
    enough for a defect to drop, rename, reshape or retype them before a
    header-only draft is written from them."""
    import torch

    return {name: torch.empty(shape, dtype=getattr(torch, _TORCH_DTYPES[dtype]), device="meta")
            for name, (shape, dtype) in specs.items()}


def specs_of(tensors: dict) -> dict[str, tuple[tuple[int, ...], str]]:
    """Name -> (shape, safetensors dtype) of torch tensors, real or meta."""
    return {name: (tuple(tensor.shape), safetensors_dtype(str(tensor.dtype).removeprefix("torch.")))
            for name, tensor in tensors.items()}


# --------------------------------------------------------------------------
# Writing


def write_config(out: Path, config: dict, *, as_list: bool = False) -> None:
    """config.json as json.dump writes it (NaN included: the defect that
    needs one wants exactly that); an empty config is not written, and
    `as_list` wraps it in a list (a config that is not an object)."""
    if as_list:
        (out / "config.json").write_text(json.dumps([config]))
    elif config:
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def _as_open_would(path: Path) -> None:
    """Give `path` the mode open() would (what the umask leaves of 0666):
    the safetensors library writes its files 0600, and a draft written for
    a team, a CI job or a serving user to read must be readable by them."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def write_safetensors(out: Path, tensors: dict, *, shards: int = 1) -> None:
    """Write tensors with the safetensors library: one model.safetensors, or
    `shards` files plus model.safetensors.index.json."""
    from safetensors.torch import save_file

    if shards <= 1:
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
        _as_open_would(out / "model.safetensors")
        return
    names = list(tensors)
    per_shard = math.ceil(len(names) / shards)
    weight_map = {}
    total = 0
    for index in range(shards):
        part = names[index * per_shard:(index + 1) * per_shard]
        shard_name = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: tensors[n] for n in part}, str(out / shard_name), metadata={"format": "pt"})
        _as_open_would(out / shard_name)
        for name in part:
            weight_map[name] = shard_name
            total += tensors[name].numel() * tensors[name].element_size()
    index_doc = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index_doc, indent=2) + "\n")


# How a header-only fixture says its payload is a hole on purpose (holes.py reads it).
HOLE_MARK_KEY, HOLE_MARK_VALUE = "dspark_payload", "hole"


def write_header_file(path: Path, specs: dict[str, tuple[tuple[int, ...], str]], *, prefix: str = "") -> None:
    """A safetensors file whose payload is a hole: a real header (readable
    by the safetensors library) and a file of the right length, whose
    payload reads as zeros."""
    # The mark says the hole is meant: a check names it a fixture (PAY007)
    # rather than fail it as an unfinished download (PAY006).
    header: dict[str, Any] = {"__metadata__": {"format": "pt", HOLE_MARK_KEY: HOLE_MARK_VALUE}}
    offset = 0
    for name, (shape, dtype) in specs.items():
        size = nbytes_of(dtype, shape)
        header[prefix + name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors pads the header to 8 bytes
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)))
        handle.write(raw)
        handle.truncate(8 + len(raw) + offset)


def write_header_only(out: Path, config: dict[str, Any], specs: dict[str, tuple[tuple[int, ...], str]],
                      *, prefix: str = "") -> Path:
    """A draft whose payload is a hole, for any config and tensor list:
    real-size header-only checks."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    write_header_file(out / "model.safetensors", specs, prefix=prefix)
    return out
