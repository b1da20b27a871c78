"""What an installed engine registers, read from its files (`ast`, never
imported): the draft architectures its registry maps, and the target classes
that can capture hidden states for a drafter. These lists change in every
release (a target gains EAGLE-3 capture, a draft class arrives), so with an
engine installed they are read from it rather than taken from the release
profile dspark models (`check --runtime`; RUN008 names what differs).

* vLLM: the keys of `_SPECULATIVE_DECODING_MODELS` in
  model_executor/models/registry.py are the draft architectures
  (registry.py::_ModelRegistry.resolve_model_cls looks them up); a registered
  text or multimodal model captures when its class implements SupportsEagle3
  (v1/worker/gpu/spec_decode/eagle/eagle3_utils.py::
  set_eagle3_aux_hidden_state_layers raises otherwise), followed through its
  bases across the package's modules.
* SGLang and TokenSpeed: every `EntryClass` of a models/ module is
  registered (models/registry.py imports each and collects them). In SGLang
  a target captures for EAGLE-3 when its class has
  `set_eagle3_layers_to_capture`, for DFlash/DSpark when it has
  `set_dflash_layers_to_capture` or `set_dspark_layers_to_capture`
  (model_runner_components/attention_backend_setup.py::
  configure_aux_hidden_state_capture checks with hasattr).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from dspark.converters.fingerprints import parse_source, statements


@dataclass(frozen=True)
class EngineLists:
    """Lists read from an installed engine; None where not read."""

    drafts: frozenset[str] | None = None  # registered architectures a draft may name
    eagle3_targets: frozenset[str] | None = None  # target architectures that capture for EAGLE-3
    dflash_targets: frozenset[str] | None = None  # ... for DFlash/DSpark drafters
    read_from: tuple[str, ...] = ()  # the files the lists were read in

    def to_dict(self) -> dict:
        def listed(value):
            return sorted(value) if value is not None else None

        return {"drafts": listed(self.drafts), "eagle3_targets": listed(self.eagle3_targets),
                "dflash_targets": listed(self.dflash_targets), "read_from": list(self.read_from)}


# The folders (under the site folder) the lists are read in: bases are
# followed within them only, so an installed engine and a release's wheel
# (tests/conformance/fingerprints.py records its lists) are read alike.
FOLDERS = {
    "vllm": ("vllm/model_executor/models", "vllm/models"),
    "sglang": ("sglang/srt/models",),
    "tokenspeed": ("tokenspeed/runtime/models",),
}


class _Classes:
    """Classes of a package's modules, followed through their bases."""

    def __init__(self, root: Path, package: str) -> None:
        self.root, self.package = root, package
        self.folders = [root / folder for folder in FOLDERS.get(package, ())]
        self.modules: dict[Path, tuple[dict[str, ast.ClassDef], dict[str, tuple[str, str, int]], dict[str, str]]] = {}

    def _module(self, path: Path):
        if path not in self.modules:
            try:
                tree = parse_source(path.read_text(encoding="utf-8", errors="replace"))
            except OSError:
                tree = None
            classes, imports, aliases = {}, {}, {}
            for node in (statements(tree.body) if tree is not None else []):
                if isinstance(node, ast.ClassDef):
                    classes[node.name] = node
                elif isinstance(node, ast.ImportFrom) and node.module is not None or (
                        isinstance(node, ast.ImportFrom) and node.level):
                    for alias in node.names:
                        imports[alias.asname or alias.name] = (node.module or "", alias.name, node.level)
                elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            aliases[target.id] = node.value.id
            self.modules[path] = (classes, imports, aliases)
        return self.modules[path]

    def module_file(self, dotted: str, base: Path | None = None, level: int = 0) -> Path | None:
        if level:
            folder = base.parent
            for _ in range(level - 1):
                folder = folder.parent
            parts = dotted.split(".") if dotted else []
            target = folder.joinpath(*parts)
        else:
            if not dotted.startswith(self.package + ".") and dotted != self.package:
                return None
            target = self.root.joinpath(*dotted.split("."))
        for candidate in (target.with_suffix(".py"), target / "__init__.py"):
            if candidate.is_file() and any(folder in candidate.parents for folder in self.folders):
                return candidate
        return None

    def find(self, path: Path, name: str, depth: int = 0) -> tuple[Path, ast.ClassDef] | None:
        """The class `name` as module `path` sees it (defined, aliased or imported)."""
        if depth > 12:
            return None
        classes, imports, aliases = self._module(path)
        if name in classes:
            return path, classes[name]
        if name in aliases and aliases[name] != name:
            return self.find(path, aliases[name], depth + 1)
        if name in imports:
            module, original, level = imports[name]
            found = self.module_file(module, path, level)
            if found is not None:
                return self.find(found, original, depth + 1)
        return None

    def ancestry(self, path: Path, node: ast.ClassDef, depth: int = 0) -> list[tuple[Path, ast.ClassDef | None, str]]:
        """The class and its bases, depth first: (file, class or None when
        outside the package, name)."""
        out = [(path, node, node.name)]
        if depth > 20:
            return out
        for base in node.bases:
            name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
            if name is None:
                continue
            found = self.find(path, name)
            out += self.ancestry(*found, depth + 1) if found else [(path, None, name)]
        return out

    def has_base(self, path: Path, name: str, base: str) -> bool:
        found = self.find(path, name)
        return found is not None and any(n == base for _, _, n in self.ancestry(*found))

    def has_method(self, path: Path, name: str, methods: tuple[str, ...]) -> bool:
        found = self.find(path, name)
        if found is None:
            return False
        return any(isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in methods
                   for _, cls, _ in self.ancestry(*found) if cls is not None for item in cls.body)


def _dict_entries(tree: ast.Module, name: str) -> dict[str, tuple[str, str]]:
    """`NAME = {"Arch": ("module", "Class"), ...}` at module level."""
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(
            node, "target", None)
        if isinstance(target, ast.Name) and target.id == name and isinstance(node.value, ast.Dict):
            entries = {}
            for key, value in zip(node.value.keys, node.value.values):
                if (isinstance(key, ast.Constant) and isinstance(value, ast.Tuple) and len(value.elts) == 2
                        and all(isinstance(e, ast.Constant) for e in value.elts)):
                    entries[key.value] = (value.elts[0].value, value.elts[1].value)
            return entries
    return {}


def read_vllm(package: Path) -> EngineLists:
    registry = package / "model_executor" / "models" / "registry.py"
    tree = parse_source(registry.read_text(encoding="utf-8", errors="replace")) if registry.is_file() else None
    if tree is None:
        return EngineLists()
    drafts = _dict_entries(tree, "_SPECULATIVE_DECODING_MODELS")
    classes = _Classes(package.parent, package.name)
    models = package / "model_executor" / "models"
    targets = set()
    for table in ("_TEXT_GENERATION_MODELS", "_MULTIMODAL_MODELS", "_TRANSFORMERS_SUPPORTED_MODELS"):
        for arch, (module, name) in _dict_entries(tree, table).items():
            path = classes.module_file(module) if "." in module else classes.module_file(module, models / "x.py", 1)
            if path is not None and classes.has_base(path, name, "SupportsEagle3"):
                targets.add(arch)
    return EngineLists(drafts=frozenset(drafts) or None, eagle3_targets=frozenset(targets) or None,
                       read_from=(str(registry),))


def _entry_classes(models: Path) -> dict[str, Path]:
    """class name -> the module file whose EntryClass names it."""
    found: dict[str, Path] = {}
    for path in sorted(models.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "EntryClass" not in text:
            continue
        tree = parse_source(text)
        for node in (tree.body if tree is not None else []):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass"
                                                    for t in node.targets):
                values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
                for value in values:
                    if isinstance(value, ast.Name):
                        found.setdefault(value.id, path)
    return found


def read_entry_classes(package: Path, models: str, *, capture: bool) -> EngineLists:
    folder = package.joinpath(*models.split("/"))
    if not folder.is_dir():
        return EngineLists()
    entries = _entry_classes(folder)
    if not entries:
        return EngineLists()
    eagle3 = dflash = None
    if capture:
        classes = _Classes(package.parent, package.name)
        eagle3 = frozenset(n for n, p in entries.items() if classes.has_method(p, n, ("set_eagle3_layers_to_capture",)))
        dflash = frozenset(n for n, p in entries.items()
                           if classes.has_method(p, n, ("set_dflash_layers_to_capture", "set_dspark_layers_to_capture")))
    return EngineLists(drafts=frozenset(entries), eagle3_targets=eagle3, dflash_targets=dflash,
                       read_from=(str(folder),))


def read_engine_lists(distribution: str, package: Path) -> EngineLists:
    """The lists an installed engine's files lay out readably; empty where
    dspark reads none for it."""
    if distribution == "vllm":
        return read_vllm(package)
    if distribution == "sglang":
        return read_entry_classes(package, "srt/models", capture=True)
    if distribution == "tokenspeed":
        return read_entry_classes(package, "runtime/models", capture=False)
    return EngineLists()


KEYS = ("drafts", "eagle3_targets", "dflash_targets")
WHAT = {"drafts": "draft architectures registered", "eagle3_targets": "targets that capture for EAGLE-3",
        "dflash_targets": "targets that capture for DFlash/DSpark"}


def recorded_lists(distribution: str, release: str) -> dict[str, frozenset[str] | None] | None:
    """The lists read in a modelled release's wheel (schema/engines/<engine>/
    fingerprints.py), or None where none were recorded."""
    import importlib

    from dspark.schema.engines.fingerprint_tables import lists_of

    try:
        table = importlib.import_module(f"dspark.schema.engines.{distribution}.fingerprints")
    except ModuleNotFoundError:
        return None
    row = lists_of(table).get(release)
    if row is None:
        return None
    return {key: frozenset(row[key]) if row.get(key) is not None else None for key in KEYS}


def differences(installed: EngineLists, recorded: dict[str, frozenset[str] | None]) -> dict[str, tuple]:
    """key -> (added, removed) where the installed engine's list differs
    from the release's (both read alike)."""
    found = {}
    for key in KEYS:
        have, had = getattr(installed, key), recorded.get(key)
        if have is None or had is None:
            continue
        added, removed = tuple(sorted(have - had)), tuple(sorted(had - have))
        if added or removed:
            found[key] = (added, removed)
    return found


def as_installed(profile, changes: dict[str, tuple]):
    """`profile` with the installed engine's lists where they differ from
    the release's: a draft class it registers (or no longer does), a target
    that captures (or no longer does)."""
    import dataclasses

    if not changes:
        return profile
    architectures = profile.architectures
    if "drafts" in changes:
        added, removed = changes["drafts"]
        architectures = dataclasses.replace(
            architectures, registered=(architectures.registered - frozenset(removed)) | frozenset(added),
            aliases={k: v for k, v in architectures.aliases.items() if k not in removed})
    loaders = {}
    for family, loader in profile.loaders.items():
        key = "eagle3_targets" if family.startswith("eagle3") else "dflash_targets"
        if key in changes:
            added, removed = changes[key]
            if loader.target_classes is not None:
                loader = dataclasses.replace(
                    loader, target_classes=(loader.target_classes - frozenset(removed)) | frozenset(added))
            else:  # any capturing target will do: those that stopped capturing are refused
                loader = dataclasses.replace(loader, targets_without_capture=(
                    loader.targets_without_capture | frozenset(removed)) - frozenset(added))
        if "eagle3_targets" in changes and key != "eagle3_targets" and loader.target_classes is None:
            # vLLM's DFlash and DSpark drafters need the same SupportsEagle3 capture
            added, removed = changes["eagle3_targets"]
            loader = dataclasses.replace(loader, targets_without_capture=(
                loader.targets_without_capture | frozenset(removed)) - frozenset(added))
        loaders[family] = loader
    return dataclasses.replace(profile, architectures=architectures, loaders=loaders)
