"""The TokenSpeed commits dspark's rules were read (and run) at, and how an
installed TokenSpeed says which of them it is.

All three revisions install as `tokenspeed` 0.1.0 (python/pyproject.toml:27
at each), so the version cannot tell them apart: the code does. Each
`Fingerprint` is one fact of the engine's own files, with the value it has at
each known revision and where it was read. `converters/engine_install.py`
reads the installed files (never imports them) and matches the facts here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from dspark.schema.engines.base import Source

# The commits (main, PR 1016, PR 1031) live in commits.py, which a check imports without this module.
from dspark.schema.engines.tokenspeed.commits import MAIN, PR1016, PR1031, REPOSITORY, STREAM_ENV_VAR  # noqa: F401

# Paths inside the installed `tokenspeed` package (the repository's python/tokenspeed/).
K3_MODEL_FILE = "runtime/models/kimi_k3_dspark.py"
DRAFTER_FILE = "runtime/execution/drafter/dflash.py"
LOCAL_KERNEL_FILE = "runtime/layers/segmented_rmsnorm.py"
REGISTRY_FILE = "runtime/models/registry.py"
REPO_PREFIX = "python/tokenspeed/"

KERNEL_FUNCTION = "segmented_rmsnorm"
# The kernel package the 1016 K3 model imports from, and its module.
KERNEL_PACKAGE = "tokenspeed_kernel"
KERNEL_WHEEL_MODULE = "tokenspeed_kernel.ops.layernorm.triton"
LOCAL_KERNEL_MODULE = "tokenspeed.runtime.layers.segmented_rmsnorm"


def _at(path: str, lines: str, commit: str, qualname: str = "") -> Source:
    return Source(REPO_PREFIX + path, lines, commit, qualname)


# The PyPI release, read from its wheel (paths inside the installed package).
RELEASE_0_1_1 = "tokenspeed==0.1.1"


def _in_wheel(path: str, lines: str, qualname: str = "") -> Source:
    return Source("tokenspeed/" + path, lines, RELEASE_0_1_1, qualname)


@dataclass(frozen=True)
class Fingerprint:
    """One fact read from an installed engine's files.

    `name` is what `converters/engine_install.py` reads (one reader per
    name); `values` is the fact at each known revision; `sources` where it
    was read there. None as a value: the fact is absent (no such import, no
    such definition)."""

    name: str
    file: str
    what: str
    values: Mapping[str, object]
    sources: Mapping[str, Source]

    def cite(self, revision: str) -> str:
        return self.sources[revision].cite()


# Where the K3 DSpark model's module-top `segmented_rmsnorm` comes from.
KERNEL_IMPORT = Fingerprint(
    name="kernel_import",
    file=K3_MODEL_FILE,
    what=f"the module its K3 DSpark model imports {KERNEL_FUNCTION} from",
    values={"main": None, "pr1016": KERNEL_WHEEL_MODULE, "pr1031": LOCAL_KERNEL_MODULE,
            "0.1.1": LOCAL_KERNEL_MODULE},
    sources={
        "0.1.1": _in_wheel(K3_MODEL_FILE, "62"),
        "main": _at(K3_MODEL_FILE, "37-66 (no such import)", MAIN),
        "pr1016": _at(K3_MODEL_FILE, "43", PR1016),
        "pr1031": _at(K3_MODEL_FILE, "59", PR1031),
    },
)

# `self.fc_norm = ...` in K3DSparkModel.__init__: the per-tap norms are built.
FC_NORM_BUILT = Fingerprint(
    name="fc_norm_built",
    file=K3_MODEL_FILE,
    what="whether its K3 DSpark model builds fc_norm",
    values={"main": False, "pr1016": True, "pr1031": True, "0.1.1": True},
    sources={
        "0.1.1": _in_wheel(K3_MODEL_FILE, "367", "K3DSparkModel.__init__"),
        "main": _at(K3_MODEL_FILE, "289-345 (no fc_norm)", MAIN, qualname="K3DSparkModel"),
        "pr1016": _at(K3_MODEL_FILE, "312-322", PR1016, qualname="K3DSparkModel.__init__"),
        "pr1031": _at(K3_MODEL_FILE, "319-329", PR1031, qualname="K3DSparkModel.__init__"),
    },
)

# `_resolve_aux_hidden_stream` in the drafter: the draft picks the stream
# (prefix or attn_res); without it the target captures the prefix stream only.
STREAM_RESOLVER = Fingerprint(
    name="stream_resolver",
    file=DRAFTER_FILE,
    what="whether its drafter resolves aux_hidden_stream (prefix or attn_res)",
    # 0.1.1 resolves it in the model instead (K3DSparkModel.configure_target)
    values={"main": False, "pr1016": True, "pr1031": True, "0.1.1": False},
    sources={
        "0.1.1": _in_wheel(DRAFTER_FILE, "(not defined; models/kimi_k3_dspark.py:421-436 hands the top level's)"),
        "main": _at(DRAFTER_FILE, "227-250 (wire_target: prefix capture only)", MAIN, qualname="DFlash"),
        "pr1016": _at(DRAFTER_FILE, "56-65, 264-277 (DFlash.wire_target, DFlash._wire_aux_hidden_stream)", PR1016,
                     qualname="_resolve_aux_hidden_stream"),
        "pr1031": _at(DRAFTER_FILE, "52-58, 258-271 (DFlash.wire_target, DFlash._wire_aux_hidden_stream)", PR1031,
                     qualname="_resolve_aux_hidden_stream"),
    },
)

# The drafter reads TOKENSPEED_DFLASH_AUX_STREAM, which wins over the checkpoint.
STREAM_ENV_READ = Fingerprint(
    name="stream_env_read",
    file=DRAFTER_FILE,
    what=f"whether its drafter reads {STREAM_ENV_VAR}",
    values={"main": False, "pr1016": True, "pr1031": False, "0.1.1": False},
    sources={
        "0.1.1": _in_wheel(DRAFTER_FILE, "(not read)"),
        "main": _at(DRAFTER_FILE, "(not read)", MAIN),
        "pr1016": _at(DRAFTER_FILE, "53, 58-60 (_resolve_aux_hidden_stream)", PR1016, qualname="AUX_HIDDEN_STREAM_ENV"),
        "pr1031": _at(DRAFTER_FILE, "52-58 (not read)", PR1031, qualname="_resolve_aux_hidden_stream"),
    },
)

# TokenSpeed 0.1.0, the first release, has no K3 DSpark model (no fact above
# applies). It and 0.1.1 are told by their version and the fingerprints of
# the functions the rules cite (schema/engines/tokenspeed/fingerprints.py);
# the git snapshots install as 0.1.0 too and are told by the facts above.
RELEASE_WITHOUT_K3 = "0.1.0"

FINGERPRINTS: tuple[Fingerprint, ...] = (KERNEL_IMPORT, FC_NORM_BUILT, STREAM_RESOLVER, STREAM_ENV_READ)
# Known revisions, newest first: a tie in likeness goes to the earlier entry.
REVISIONS: tuple[str, ...] = ("0.1.1", "pr1031", "pr1016", "main")
COMMITS: Mapping[str, str] = {"main": MAIN, "pr1016": PR1016, "pr1031": PR1031, "0.1.1": RELEASE_0_1_1}


@dataclass(frozen=True)
class KernelCall:
    """How the engine calls its segmented RMSNorm, read from the function's
    definition at the revision: the taps as ``[..., S, th]`` (contiguous),
    the stacked fc_norm weights ``[S, th]``, eps as a float, optional `out`."""

    module: str
    parameters: tuple[str, ...]
    segments_axis: bool  # x carries the segment axis: [..., S, th], not [..., S*th]
    needs_cuda: bool  # the function refuses tensors that are not on a GPU
    source: Source
    # What must be installed beside the engine for the import to succeed.
    package: str | None = None


KERNEL_CALLS: Mapping[str, KernelCall] = {
    "0.1.1": KernelCall(
        module=LOCAL_KERNEL_MODULE,
        parameters=("x", "weight", "eps", "out"),
        segments_axis=True,
        needs_cuda=True,
        source=_in_wheel(LOCAL_KERNEL_FILE, "35-76", "segmented_rmsnorm"),
    ),
    "pr1016": KernelCall(
        module=KERNEL_WHEEL_MODULE,
        parameters=("x", "weight", "eps", "out"),
        segments_axis=True,
        needs_cuda=False,
        source=Source("tokenspeed-kernel/python/tokenspeed_kernel/ops/layernorm/triton.py", "160-211", PR1016,
                      qualname="segmented_rmsnorm"),
        package=KERNEL_PACKAGE,
    ),
    "pr1031": KernelCall(
        module=LOCAL_KERNEL_MODULE,
        parameters=("x", "weight", "eps", "out"),
        segments_axis=True,
        needs_cuda=True,
        source=_at(LOCAL_KERNEL_FILE, "35-76", PR1031, qualname="segmented_rmsnorm"),
    ),
}
# The K3 model calls it with the taps unflattened to [..., S, th].
KERNEL_CALL_SITES: Mapping[str, Source] = {
    "0.1.1": _in_wheel(K3_MODEL_FILE, "466-471", "K3DSparkModel.project_target_hidden"),
    "pr1016": _at(K3_MODEL_FILE, "367-373", PR1016, qualname="K3DSparkModel.project_target_hidden"),
    "pr1031": _at(K3_MODEL_FILE, "369-375", PR1031, qualname="K3DSparkModel.project_target_hidden"),
}

# The engine imports every module of tokenspeed.runtime.models when it
# starts and stops on the first that fails to import, whatever model it
# serves: a K3 DSpark model whose module-top import fails keeps the whole
# engine from starting.
MODEL_IMPORT_SOURCE = _at(REGISTRY_FILE, "90-101, 123 (ModelRegistry)", PR1016, qualname="import_model_classes")
