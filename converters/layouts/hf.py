"""A Hugging Face-style checkpoint folder: the file names a serving loader
looks for, and the file names dspark writes beside them.

Every module that names one of these files imports the name from here. A
file name read from an untrusted file (a shard index, DCP storage records,
a manifest) must pass `is_plain_file_name` before a path is built from it.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

CONFIG_NAME = "config.json"
SINGLE_SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
# A torch state dict: `torch.save`'s usual suffixes and HF's pytorch_model.bin.
TORCH_SUFFIXES = (".pt", ".pth", ".bin")
# A folder with no *.safetensors is loaded from every top-level *.bin in it
# (HF's pytorch_model-0000N-of-0000M.bin shards; their index is not read),
# less the trainer's files, matched by how the name ends
# (model_loader/loader.py@f4d8ec6e:258-313, weight_utils.py@f4d8ec6e:331-346).
SERVED_TORCH_SUFFIX = ".bin"
NOT_FOR_INFERENCE = ("training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt", "scaler.pt")
# What `dspark convert` writes beside the weights: every tensor's file,
# byte range and hash.
MANIFEST_NAME = "dspark-manifest.json"


def safetensors_entries(folder: Path) -> list[Path]:
    """The entries of `folder` named `*.safetensors` (files or not, hidden
    ones too), as `folder.glob("*.safetensors")` lists them, in no order
    and none for a folder that cannot be listed; without the regex a glob
    compiles (start-up, docs/check.md)."""
    try:
        with os.scandir(folder) as entries:
            return [folder / entry.name for entry in entries if os.path.normcase(entry.name).endswith(".safetensors")]
    except OSError:
        return []


def torch_weight_files(names) -> list[str]:
    """Of a folder's top-level file `names`, the torch files that hold the
    draft: every *.bin the engine loads, however many; else the one .pt or
    .pth there is (the engine reads none, but convert does). Empty when
    there are none, or several .pt files and no .bin."""
    candidates = sorted(n for n in names if n.endswith(TORCH_SUFFIXES) and not n.startswith(".")
                        and not n.endswith(NOT_FOR_INFERENCE))
    served = [n for n in candidates if n.endswith(SERVED_TORCH_SUFFIX)]
    if served:
        return served
    return candidates if len(candidates) == 1 else []


def shard_file_name(index: int, count: int) -> str:
    """The name of shard `index` (from 0) of `count`, as HF's sharding names it."""
    if count == 1:
        return SINGLE_SAFETENSORS
    return f"model-{index + 1:05d}-of-{count:05d}.safetensors"


def is_plain_file_name(name: Any) -> bool:
    """A bare file name inside the checkpoint folder: no folder part (either
    separator), not `.`/`..`, no NUL. Names read from untrusted files (a
    shard index, DCP storage records, a manifest) must pass this before any
    path is built from them."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "\x00" not in name
        and PurePosixPath(name).name == name
        and PureWindowsPath(name).name == name
    )
