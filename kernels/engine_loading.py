"""Loading a serving engine's segmented RMSNorm, in this process or a child.

Imports only the standard library and torch, and no module of dspark's: the
child process (`engine_child.py`, run as a script) loads this file as a
top-level module so that it never imports `dspark.kernels`, whose kernel
imports PyPI's `triton`. An engine that compiles its kernels with a Triton
build of its own (TokenSpeed 0.1.1 imports `tokenspeed_triton`:
runtime/utils/triton.py@0.1.1:21-24) runs its kernel in that child: two
Triton builds register their compiler types with nanobind in one registry
per process, and a clash there aborts the process, which no `except`
catches (a compiled Triton module imported twice does it: `refusing to add
duplicate key "PAD_ZERO"`). Whether two builds clash depends on the pair;
the child keeps dspark's process safe for any pair.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

# The Triton dspark's own kernel is compiled by.
DSPARK_TRITON = "triton"

# Private names the modules loaded alone live under, so they never stand in
# for the engine's own modules in sys.modules.
ALONE_PREFIX = "_dspark_engine_kernel_"


class KernelLoadError(Exception):
    """The engine's kernel could not be loaded; the message says why."""


def load_function(module: str, file: str | None, root: str | None, name: str) -> tuple[Callable, str | None]:
    """`module.name` as the engine imports it, and None; or, where the
    engine's package does not import here, from the kernel's file alone and
    why (`load_kernel_alone`). Raises KernelLoadError when neither works."""
    try:
        return import_function(module, root, name), None
    except Exception as error:  # noqa: BLE001 - any failure of the engine's import is what is reported
        failure = f"importing {module} failed: {type(error).__name__}: {_first_line(error)}"
    function = load_kernel_alone(module, file, root, name)
    if function is None:
        raise KernelLoadError(failure)
    return function, (f"{failure}; its kernel file was loaded alone, with the engine modules it imports, "
                      "as the engine compiles it")


def import_function(module: str, root: str | None, name: str):
    """`module.name`, imported from `root` first. A package of the same
    name imported earlier from elsewhere is set aside, so the installed one
    is the one that runs."""
    head = module.split(".")[0]
    set_aside = {}
    if root is not None:
        for loaded in [n for n in sys.modules if n == head or n.startswith(head + ".")]:
            if not _under(sys.modules[loaded], root):
                set_aside[loaded] = sys.modules.pop(loaded)
    before = set(sys.modules)
    try:
        with on_path(root):
            imported = importlib.import_module(module)
        return getattr(imported, name)
    finally:
        if root is not None:
            # The function keeps what it needs; left in sys.modules, the
            # engine's package would be what a later look-up in this
            # process finds (the runtime probe, another --engine-path)
            # instead of what is installed where it looks. Only the
            # engine's own package goes: what it imported from beside it
            # stays, since a compiled module imported a second time can
            # abort the process (tokenspeed_triton's libtriton does:
            # nanobind refuses to register its types twice).
            for added in [n for n in set(sys.modules) - before
                          if _in_package(n, head) and _under(sys.modules[n], root)]:
                sys.modules.pop(added, None)
            sys.modules.update(set_aside)


def load_kernel_alone(module: str, file: str | None, root: str | None, name: str):
    """`module.name` from its file alone, or None.

    Each import of the engine's own package in the kernel's file must name a
    module file whose imports are all outside the engine (TokenSpeed
    0.1.1's `tokenspeed.runtime.utils.triton`, which imports only
    `tokenspeed_triton`). Those are loaded from their files, seen by the
    kernel's file under their own names while it runs, and taken out of
    sys.modules again."""
    leaves = engine_leaves(module, file, root)
    if leaves is None:
        return None
    saved = {leaf: sys.modules.get(leaf) for leaf in leaves}
    try:
        with on_path(root):  # the engine's Triton is installed beside it
            for leaf, path in leaves.items():
                sys.modules[leaf] = _exec_file(ALONE_PREFIX + leaf.replace(".", "_"), path)
            loaded = _exec_file(ALONE_PREFIX + module.replace(".", "_"), Path(file))
        return getattr(loaded, name, None)
    except Exception:  # noqa: BLE001 - the kernel cannot be loaded alone either: the package's failure is reported
        return None
    finally:
        for leaf, before in saved.items():
            if before is None:
                sys.modules.pop(leaf, None)
            else:
                sys.modules[leaf] = before


def engine_leaves(module: str, file: str | None, root: str | None) -> dict[str, Path] | None:
    """The engine modules the kernel's file imports, by name, each a file
    that imports nothing more of the engine; None when that is not so."""
    if file is None or root is None:
        return None
    head = module.split(".")[0]
    imported = _imports(Path(file))
    if imported is None:
        return None
    leaves = {}
    for name in [n for n in imported if _in_package(n, head)]:
        path = Path(root, *name.split(".")).with_suffix(".py")
        below = _imports(path) if path.is_file() else None
        if below is None or any(_in_package(n, head) for n in below):
            return None  # a package's __init__, or a module that imports more of the engine
        leaves[name] = path
    return leaves


def foreign_tritons(module: str, file: str | None, root: str | None) -> list[str]:
    """The Triton packages other than PyPI's that the kernel's file (and the
    engine modules it imports) import at top level, read without importing
    anything."""
    head = module.split(".")[0]
    files = [Path(file)] if file else []
    files += list((engine_leaves(module, file, root) or {}).values())
    found = []
    for path in files:
        for name in _imports(path) or []:
            top = name.split(".")[0]
            if "triton" in top and top != DSPARK_TRITON and not _in_package(top, head) and top not in found:
                found.append(top)
    return found


def distribution_version(package: str, root: str | None) -> str | None:
    """The installed version of the distribution that holds `package`,
    read from its metadata under `root` (or this Python's path)."""
    paths = [root] if root else None
    for dist in importlib.metadata.distributions(path=paths) if paths else importlib.metadata.distributions():
        top = (dist.read_text("top_level.txt") or "").split()
        name = (dist.metadata["Name"] or "").lower().replace("-", "_")
        if package in top or name == package:
            return dist.version
    return None


def parameters(function) -> list[str] | None:
    try:
        return list(inspect.signature(function).parameters)
    except (TypeError, ValueError):  # a builtin or a Triton-wrapped callable without one
        return None


def triton_of(function) -> str | None:
    """The Triton the kernel's module compiles with, as `name version`:
    read from the `triton` its module holds."""
    triton = getattr(function, "__globals__", {}).get("triton")
    if triton is None or not hasattr(triton, "jit"):
        return None
    return f"{triton.__name__} {getattr(triton, '__version__', '?')}"


def adapt(function, segments_axis: bool, takes_out: bool):
    """dspark's call `(x [T, S*th], weight [S, th], eps, out=None)` on the
    engine's function, which takes the taps as `[T, S, th]` when
    `segments_axis`."""
    def run(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor | None = None) -> torch.Tensor:
        rows = x.shape[0]
        segments, width = weight.shape
        shaped = x.view(rows, segments, width) if segments_axis else x
        if out is not None and takes_out:
            result = function(shaped, weight.contiguous(), float(eps), out=out.view_as(shaped))
        else:
            result = function(shaped, weight.contiguous(), float(eps))
            if out is not None:
                out.copy_(result.reshape(out.shape))
                return out
        return result.reshape(rows, segments * width)

    return run


def time_cuda_ms(fns: Mapping[str, Callable[[], object]], *, warmup: int = 3, reps: int = 15) -> dict[str, float]:
    """Median milliseconds of each function. The functions take turns, so that
    a clock that drifts during the run (a GEMM heats the chip) biases none."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end))
    return {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}


@contextlib.contextmanager
def on_path(root: str | None):
    if root is None or root in sys.path:
        yield
        return
    sys.path.insert(0, root)
    importlib.invalidate_caches()
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(root)


def _in_package(name: str, head: str) -> bool:
    return name == head or name.startswith(head + ".")


def _imports(file: Path) -> list[str] | None:
    """The modules `file` imports at top level (None: it imports one
    relatively, or does not parse)."""
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"), str(file))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    names = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                return None
            if node.module != "__future__":
                names.append(node.module or "")
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return names


def _exec_file(name: str, file: Path):
    spec = importlib.util.spec_from_file_location(name, file)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def _under(module, root: str) -> bool:
    places = [getattr(module, "__file__", None)]
    try:  # a namespace package's path is computed from its parent's
        places += list(getattr(module, "__path__", None) or ())
    except (KeyError, AttributeError):
        pass
    base = Path(root).resolve()
    return any(place and Path(place).resolve().is_relative_to(base) for place in places)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
