"""The edits users make to a trainer's draft after saving it, each applied
to a copy of the folder: the config and safetensors files as a user would
change them with a text editor, `safetensors` and `torch`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable


def _load_config(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "config.json").read_text())


def _save_config(folder: Path, config: dict[str, Any]) -> None:
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def _tensors(folder: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    tensors: dict[str, Any] = {}
    for file in sorted(folder.glob("*.safetensors")):
        tensors.update(load_file(file))
    return tensors


def _save_tensors(folder: Path, tensors: dict[str, Any]) -> None:
    """One `model.safetensors`, replacing whatever files (and index) were there."""
    from safetensors.torch import save_file

    for file in [*folder.glob("*.safetensors"), *folder.glob("*.safetensors.index.json")]:
        file.unlink()
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})


def copy_and_edit(source: Path, destination: Path, edit: Callable[[Path], None]) -> Path:
    if destination.exists():
        shutil.rmtree(destination)
    shutil.copytree(source, destination, symlinks=False)
    edit(destination)
    return destination


def remove_config_key(*path: str) -> Callable[[Path], None]:
    """Delete one (possibly nested) config key."""
    def edit(folder: Path) -> None:
        config = _load_config(folder)
        node = config
        for key in path[:-1]:
            node = node[key]
        node.pop(path[-1])
        _save_config(folder, config)
    return edit


def set_config(**updates: Any) -> Callable[[Path], None]:
    """Set top-level config keys (a dict value merges into a dict there)."""
    def edit(folder: Path) -> None:
        config = _load_config(folder)
        for key, value in updates.items():
            if isinstance(value, dict) and isinstance(config.get(key), dict):
                config[key] = {**config[key], **value}
            else:
                config[key] = value
        _save_config(folder, config)
    return edit


def drop_tensors(*prefixes: str) -> Callable[[Path], None]:
    """Remove every tensor whose name starts with one of `prefixes`."""
    def edit(folder: Path) -> None:
        tensors = _tensors(folder)
        _save_tensors(folder, {k: v for k, v in tensors.items() if not k.startswith(prefixes)})
    return edit


def reshape_tensor(name: str, shape: tuple[int, ...]) -> Callable[[Path], None]:
    """Store one tensor in another shape of as many elements."""
    def edit(folder: Path) -> None:
        tensors = _tensors(folder)
        tensors[name] = tensors[name].reshape(shape)
        _save_tensors(folder, tensors)
    return edit


def cast_floats(dtype_name: str) -> Callable[[Path], None]:
    """Cast every floating-point tensor (the int/bool token maps stay) and
    record the dtype in the config, as `model.to(dtype)` + save would."""
    def edit(folder: Path) -> None:
        import torch

        dtype = getattr(torch, dtype_name)
        tensors = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in _tensors(folder).items()}
        _save_tensors(folder, tensors)
        config = _load_config(folder)
        for key in ("torch_dtype", "dtype"):
            if key in config:
                config[key] = dtype_name
        if "transformer_layer_config" in config:
            config["transformer_layer_config"]["dtype"] = dtype_name
        _save_config(folder, config)
    return edit


def add_fc_norm_weights(count: int, width: int) -> Callable[[Path], None]:
    """Ship `fc_norm.{i}.weight` (ones, as a fresh RMSNorm) without touching the config."""
    def edit(folder: Path) -> None:
        import torch

        tensors = _tensors(folder)
        dtype = tensors["fc.weight"].dtype
        for index in range(count):
            tensors[f"fc_norm.{index}.weight"] = torch.ones(width, dtype=dtype)
        _save_tensors(folder, tensors)
    return edit


def shard(pieces: int) -> Callable[[Path], None]:
    """Split the weights into `pieces` files with a `model.safetensors.index.json`,
    as `save_pretrained(max_shard_size=...)` lays them out."""
    def edit(folder: Path) -> None:
        from safetensors.torch import save_file

        tensors = _tensors(folder)
        for file in folder.glob("*.safetensors"):
            file.unlink()
        names = sorted(tensors)
        weight_map: dict[str, str] = {}
        total = 0
        for piece in range(pieces):
            chunk = names[piece::pieces]
            file_name = f"model-{piece + 1:05d}-of-{pieces:05d}.safetensors"
            save_file({k: tensors[k].contiguous() for k in chunk}, str(folder / file_name), metadata={"format": "pt"})
            weight_map.update({k: file_name for k in chunk})
            total += sum(tensors[k].numel() * tensors[k].element_size() for k in chunk)
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return edit


def rename_tensors(old_prefix: str, new_prefix: str) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        tensors = _tensors(folder)
        _save_tensors(folder, {(new_prefix + k[len(old_prefix):] if k.startswith(old_prefix) else k): v
                               for k, v in tensors.items()})
    return edit


def combine(*edits: Callable[[Path], None]) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        for one in edits:
            one(folder)
    return edit


def flatten_speculators_eagle3(id_shift: int) -> Callable[[Path], None]:
    """Rewrite a speculators EAGLE-3 folder in SpecForge/SGLang's shape, as
    users do to serve it there: the layer config at the top level,
    architectures LlamaForCausalLMEagle3, the tap ids (each plus `id_shift`)
    under eagle_config, and `layers.0.*` renamed `midlayer.*`."""
    def edit(folder: Path) -> None:
        config = _load_config(folder)
        tap_ids = [i + id_shift for i in config["eagle_aux_hidden_state_layer_ids"]]
        flat = {**config["transformer_layer_config"], "architectures": ["LlamaForCausalLMEagle3"],
                "draft_vocab_size": config["draft_vocab_size"],
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": tap_ids, "use_aux_hidden_state": True}}
        for key in ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual", "target_hidden_size"):
            if config.get(key) is not None:
                flat[key] = config[key]
        _save_config(folder, flat)
        rename_tensors("layers.0.", "midlayer.")(folder)
    return edit


def hoist_from(section: str, *keys: str) -> Callable[[Path], None]:
    """Copy keys from a nested config section to the top level."""
    def edit(folder: Path) -> None:
        config = _load_config(folder)
        config.update({key: config[section][key] for key in keys if key in config[section]})
        _save_config(folder, config)
    return edit
