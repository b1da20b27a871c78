"""Fixtures for the whole suite.

Every test runs in its own temporary folder with a clean environment, and
drafts are fabricated on demand by the real writers (torch tensors saved by
the safetensors library), never mocked.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest


def _cuda_present() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


# Triton reads TRITON_INTERPRET when it is first imported, and torch imports
# it along with torch._dynamo, which some tests' collection reaches: set
# here, before any test module, so a kernel run in-process later (the CLI's
# smoke) finds Triton interpreting whichever tests ran first. Without CUDA
# the kernel runs only under the interpreter; an explicit value wins.
if not _cuda_present():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Environment that changes what dspark reports; a test sets what it needs.
_ISOLATED_VARIABLES = ("TOKENSPEED_DFLASH_AUX_STREAM", "DSPARK_DEBUG", "DSPARK_ENGINE_PATH")


def _engine_on_this_path() -> str | None:
    """The serving engine installed on this Python's path, if one: tests of a
    machine without one cannot hold where one is (a GPU host that serves)."""
    from dspark.converters.engine_install import find_installed_engines

    found = find_installed_engines()
    return f"{found[0].distribution} {found[0].version or ''} at {found[0].location}" if found else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`@pytest.mark.without_engine`: a test of what dspark says where no
    serving engine is installed is skipped where one is on the path."""
    marked = [item for item in items if item.get_closest_marker("without_engine")]
    installed = _engine_on_this_path() if marked else None
    if installed:
        skip = pytest.mark.skip(reason=f"a serving engine is installed on this Python's path ({installed}); "
                                       "the test is of a machine without one")
        for item in marked:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run the test inside its own temporary folder, with none of the
    caller's dspark-relevant environment."""
    monkeypatch.chdir(tmp_path)
    for name in _ISOLATED_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.fixture
def tiny_draft(tmp_path: Path) -> Callable[..., Path]:
    """A factory for tiny K3 DSpark drafts: `tiny_draft(name="draft",
    **options)` writes `tmp_path/name` with
    `dspark.examples.fabricate.write_draft(**options)` (`defect=`,
    `fc_norm=`, `stream=`, `shards=`, `dtype=`, `prefix=`) and returns it."""
    from dspark.examples.fabricate import write_draft

    def make(name: str = "draft", **options) -> Path:
        return write_draft(tmp_path / name, **options)

    return make


# A segmented RMSNorm with the engine's signature (x [..., S, th], weight
# [S, th], eps, out=None: tokenspeed_kernel/ops/layernorm/triton.py@5f1e48b5:160-165,
# tokenspeed/runtime/layers/segmented_rmsnorm.py@4b9766f6:35-40), in torch.
TORCH_SEGMENTED_RMSNORM = """
import torch


def segmented_rmsnorm(x, weight, eps, out=None):
    if tuple(x.shape[-2:]) != tuple(weight.shape):
        raise ValueError(f"weight shape {tuple(weight.shape)} does not match input segments {tuple(x.shape[-2:])}")
    x32 = x.float()
    y = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
    if out is None:
        return y
    out.copy_(y)
    return out
"""

# The lines each revision's files carry that tell them apart (the real
# engine's lines, cited in schema/engines/tokenspeed/revisions.py); the rest
# of each file is left out.
_K3_MODEL = {
    "main": "from tokenspeed.runtime.layers.layernorm import RMSNorm\n",
    "pr1016": "from tokenspeed_kernel.ops.layernorm.triton import segmented_rmsnorm\n\n"
              "from tokenspeed.runtime.layers.layernorm import RMSNorm\n",
    "pr1031": "from tokenspeed.runtime.layers.layernorm import RMSNorm\n"
              "from tokenspeed.runtime.layers.segmented_rmsnorm import segmented_rmsnorm\n",
    # the release: 1031's model, the stream handed over by configure_target
    "0.1.1": "from tokenspeed.runtime.layers.layernorm import RMSNorm\n"
             "from tokenspeed.runtime.layers.segmented_rmsnorm import segmented_rmsnorm\n",
}
_K3_MODEL_CLASS = """

class K3DSparkModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.context_norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
"""
_FC_NORM = """        self.fc_norm = (
            nn.ModuleList([RMSNorm(int(config.target_hidden_size)) for _ in range(5)])
            if bool(getattr(config, "fc_norm", False))
            else None
        )
"""
_DRAFTER = {
    "main": "def wire_target(self, target_model):\n    target_model.set_dflash_layers_to_capture(self.target_layer_ids)\n",
    "pr1016": 'import os\n\nAUX_HIDDEN_STREAM_ENV = "TOKENSPEED_DFLASH_AUX_STREAM"\n\n\n'
              "def _resolve_aux_hidden_stream(cfg) -> str:\n"
              "    override = os.environ.get(AUX_HIDDEN_STREAM_ENV)\n"
              "    if override:\n        return override.strip().lower()\n"
              '    return str(getattr(cfg, "aux_hidden_stream", None) or "prefix").lower()\n',
    "pr1031": "def _resolve_aux_hidden_stream(cfg) -> str:\n"
              '    return str(getattr(cfg, "aux_hidden_stream", None) or "prefix").lower()\n',
    "0.1.1": "class DFlashDrafter:\n    def __init__(self, model):\n"
             "        self.target_layer_ids = list(model.target_layer_ids)\n",
}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _dist_info(root: Path, name: str, version: str) -> None:
    _write(root / f"{name}-{version}.dist-info" / "METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def write_tokenspeed(root: Path, revision: str, *, kernel: str | None = TORCH_SEGMENTED_RMSNORM,
                     wheel_kernel: bool = True, model_lines: str | None = None, drafter_lines: str | None = None,
                     version: str = "0.1.0") -> Path:
    """A TokenSpeed install under `root` (a site-packages folder) whose files
    carry `revision`'s fingerprints. `kernel` is the segmented RMSNorm's
    module source (engine-local for pr1031, in tokenspeed_kernel for pr1016;
    None: the module is not there). `wheel_kernel=False` installs a
    tokenspeed_kernel whose layernorm module lacks it."""
    package = root / "tokenspeed"
    _write(package / "__init__.py", "")
    if revision == "0.1.0":
        # the first release: GQA DFlash and EAGLE-3 models, a drafter, no K3 DSpark model
        for name in ("models/dflash.py", "models/llama_eagle3.py", "execution/drafter/dflash.py"):
            _write(package / "runtime" / name, "class DraftModel:\n    pass\n")
        _dist_info(root, "tokenspeed", version)
        return root
    model = (model_lines if model_lines is not None else _K3_MODEL[revision])
    model = "import torch\nfrom torch import nn\n" + model + _K3_MODEL_CLASS
    if revision != "main":
        model += _FC_NORM
    _write(package / "runtime" / "models" / "kimi_k3_dspark.py", model)
    _write(package / "runtime" / "execution" / "drafter" / "dflash.py",
           drafter_lines if drafter_lines is not None else _DRAFTER[revision])
    if revision in ("pr1031", "0.1.1") and kernel is not None:
        _write(package / "runtime" / "layers" / "segmented_rmsnorm.py", kernel)
    if revision == "pr1016":
        wheel = root / "tokenspeed_kernel"
        for folder in (wheel, wheel / "ops", wheel / "ops" / "layernorm"):
            _write(folder / "__init__.py", "")
        body = "def rmsnorm(x, weight, eps):\n    raise NotImplementedError\n"
        if kernel is not None and wheel_kernel:
            body = kernel + "\n\n" + body
        _write(wheel / "ops" / "layernorm" / "triton.py", body)
        _dist_info(root, "tokenspeed_kernel", "0.1.3")
    _dist_info(root, "tokenspeed", version)
    return root


def write_versioned_engine(root: Path, name: str, version: str) -> Path:
    """An engine told by its version (vLLM, SGLang): its package and its metadata."""
    _write(root / name / "__init__.py", "")
    _dist_info(root, name, version)
    return root


@pytest.fixture
def fabricated_engine(tmp_path: Path) -> Callable[..., Path]:
    """`fabricated_engine(revision, **options)` writes a TokenSpeed install
    under a fresh folder of tmp_path (see `write_tokenspeed`) and returns
    the folder."""
    count = iter(range(1000))

    def make(revision: str, **options) -> Path:
        return write_tokenspeed(tmp_path / f"site-{revision}-{next(count)}", revision, **options)

    return make



@pytest.fixture
def versioned_engine(tmp_path: Path) -> Callable[[str, str], Path]:
    """`versioned_engine("vllm", "0.33.0")`: that distribution installed under a fresh folder."""
    return lambda name, version: write_versioned_engine(tmp_path / f"site-{name}-{version}", name, version)


def cached_wheel(name: str, version: str) -> Path | None:
    """The release's wheel in the conformance cache (tests/conformance/
    environments.py fills it), or None: the tests that need it skip."""
    import os

    cache = Path(os.environ.get("DSPARK_CONFORMANCE_CACHE") or Path.home() / ".cache" / "dspark-conformance")
    found = sorted((cache.expanduser() / "wheels" / f"{name}-{version}").glob("*.whl"))
    return found[0] if found else None


def install_release(root: Path, name: str, version: str, *, everything: bool = False,
                    installed_version: str | None = None) -> Path:
    """A site folder holding a released wheel's files, as pip installs them:
    the whole package (`everything`), or the files holding the functions
    dspark's rules cite and those its registry lists are read in
    (converters/engine_lists.py), with the dist-info saying `installed_version` (the
    release's own by default). Skips the test when the cache has no wheel."""
    import zipfile

    from dspark.converters.engine_lists import FOLDERS
    from dspark.converters.fingerprints import split_function
    from dspark.schema.engines.citations import cited_functions

    wheel = cached_wheel(name, version)
    if wheel is None:
        pytest.skip(f"no {name}=={version} wheel in the conformance cache")
    wanted = {split_function(function)[0] for function in cited_functions(name)} | {f"{name}/__init__.py"}
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if member.endswith("/") or ".dist-info/" in member:
                continue
            listed = member.endswith(".py") and member.startswith(tuple(f + "/" for f in FOLDERS[name]))
            if member in wanted or listed or (everything and member.endswith(".py")):
                target = root / member
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(member))
    _dist_info(root, name, installed_version or version)
    return root


@pytest.fixture
def released_engine(tmp_path: Path) -> Callable[..., Path]:
    """`released_engine("vllm", "0.33.0", installed_version=..., everything=...)`:
    that release's files (from its cached wheel) under a fresh site folder."""
    count = iter(range(1000))
    return lambda name, version, **options: install_release(
        tmp_path / f"site-{name}-{version}-{next(count)}", name, version, **options)
