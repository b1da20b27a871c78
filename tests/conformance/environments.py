"""Released code, fetched at run time into a cache outside the repository.

`released_code(name, version)` downloads one release's wheel from the
package index (`pip download NAME==VERSION --no-deps`) and unpacks its
Python files; `environment(key, requirements)` builds a virtual
environment with what that code imports (torch 2.13.0 CPU and the
release's pinned libraries). Nothing here is imported by dspark itself, and
nothing fetched is ever written inside the repository.

The cache is `$DSPARK_CONFORMANCE_CACHE`, else `~/.cache/dspark-conformance`.
Every step is idempotent: a finished step leaves a `.done` marker, so a
second run reuses what the first one built.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]


def cache_root() -> Path:
    root = Path(os.environ.get("DSPARK_CONFORMANCE_CACHE") or Path.home() / ".cache" / "dspark-conformance")
    root = root.expanduser().resolve()
    if root == REPOSITORY or REPOSITORY in root.parents:
        raise SystemExit(f"the conformance cache {root} lies inside the repository; engines' code never enters it")
    root.mkdir(parents=True, exist_ok=True)
    return root


def _run(command: list[str], what: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-4000:]
        raise RuntimeError(f"{what} failed (exit {result.returncode}): {' '.join(command)}\n{tail}")


def wheel(name: str, version: str) -> Path:
    """The release's wheel, downloaded once into the cache."""
    folder = cache_root() / "wheels" / f"{name}-{version}"
    marker = folder / ".done"
    if not marker.exists():
        folder.mkdir(parents=True, exist_ok=True)
        _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
              "-d", str(folder), f"{name}=={version}"], f"downloading {name}=={version}")
        marker.touch()
    found = sorted(folder.glob("*.whl"))
    if not found:
        raise RuntimeError(f"no wheel for {name}=={version} in {folder}")
    return found[0]


def released_code(name: str, version: str, *, suffixes: tuple[str, ...] = (".py", ".json", ".txt", ".yaml", ".jinja")) -> Path:
    """A folder holding the wheel's pure-Python files (put it on PYTHONPATH).
    Compiled extensions are left out on purpose: the harnesses run the
    Python config, model and loader code on CPU, never a CUDA kernel."""
    target = cache_root() / "code" / f"{name}-{version}"
    marker = target / ".done"
    if marker.exists():
        return target
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    with zipfile.ZipFile(wheel(name, version)) as archive:
        for member in archive.namelist():
            if member.endswith("/") or ".." in Path(member).parts:
                continue
            if member.endswith(suffixes) or ".dist-info/" in member:
                archive.extract(member, target)
    marker.touch()
    return target


def environment(key: str, requirements: list[str], *, constraints: list[str] | None = None) -> Path:
    """A virtual environment under the cache, with `requirements` installed
    (torch==2.13.0 first, the CPU build). Returns its python. Rebuilt when
    the requirement list changes."""
    folder = cache_root() / "venvs" / key
    marker = folder / ".done"
    wanted = "\n".join(["torch==2.13.0", *requirements, "--", *(constraints or [])])
    if marker.exists() and marker.read_text() == wanted:
        return folder / "bin" / "python"
    if folder.exists():
        shutil.rmtree(folder)
    _run([sys.executable, "-m", "venv", str(folder)], f"creating the environment {key}")
    python = folder / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--quiet", "torch==2.13.0"], f"installing torch into {key}")
    if requirements:
        command = [str(python), "-m", "pip", "install", "--quiet", *requirements]
        if constraints:
            constraint_file = folder / "constraints.txt"
            constraint_file.write_text("\n".join(constraints) + "\n")
            command += ["-c", str(constraint_file)]
        _run(command, f"installing {' '.join(requirements)} into {key}")
    marker.write_text(wanted)
    return python


def run_in(python: Path, module_file: Path, args: list[str], *, pythonpath: list[Path], timeout: float,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run one harness script with another environment's python, the
    released code first on its path and the suite's folder after it (for
    `outcomes.py`), never dspark's."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    environ["PYTHONPATH"] = os.pathsep.join(str(p) for p in [*pythonpath, Path(__file__).parent])
    environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    environ.update(env or {})
    return subprocess.run([str(python), str(module_file), *args], capture_output=True, text=True,
                          timeout=timeout, env=environ)
