"""TokenSpeed (lightseekorg/tokenspeed): what its loaders do with each draft
family, read from its code. One module per family, `common.py` for what
they share.

Three revisions are modelled:

* `main` at f4d8ec6e: the GQA DFlash/DSpark drafts (`models/dflash.py`,
  `models/dspark.py`) and, for K3 DSpark, the loader before the serving
  change (no fc_norm, the prefix stream only).
* `pr1031` at 4b9766f6, the head of pull request 1031 ("serve DSpark drafts:
  fc_norm + AttnRes tap"): the K3 DSpark loader with fc_norm and
  aux_hidden_stream. The same drafter serves GQA DFlash/DSpark drafts and
  hands the target the stream they declare too (their models as on main);
  EAGLE-3 as on main.
* `pr1016` at 5f1e48b5, the head of pull request 1016, the first version of
  that change: the same K3 DSpark loader, but its drafter lets
  TOKENSPEED_DFLASH_AUX_STREAM override the checkpoint's stream, and its model
  imports the segmented RMSNorm from the `tokenspeed_kernel` wheel at module
  top (what that needs installed is judged by `check --runtime`). The same
  drafter serves GQA DFlash/DSpark drafts, so theirs is read (variable first,
  then the declaration) and handed to the target too; EAGLE-3 as on main.

`revisions.py` holds the commits and the fingerprints an installed engine is
recognised by.

No revision serves EAGLE-3 with a Qwen3 layer (`eagle3_qwen3.py` says why):
such a draft gets ENG006.

`current` is what a deploy gate should assume today: the engine with the
K3 DSpark serving change (1031), whose drafter also picks a GQA
DFlash/DSpark draft's stream; main's code for everything that change leaves
as it was.

Where DESIGN.md and this code disagree, this code wins (see docs/contract.md).
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import Callable, Iterator, Mapping

from dspark.schema.engines.base import EngineProfile, FamilyLoader
from dspark.schema.engines.tokenspeed.common import MAIN, NAME, PR1016, PR1031, PROFILE_FACTS


class _Loaders(Mapping[str, FamilyLoader]):
    """family -> loader, each family's module imported when its loader is
    first asked for: a check of a K3 draft imports `k3_dspark.py` and no
    other family's (`dspark families` and `explain`, which walk every
    loader, import them all)."""

    def __init__(self, build: Mapping[str, Callable[[], FamilyLoader]]) -> None:
        self._build = dict(build)
        self._built: dict[str, FamilyLoader] = {}

    def __getitem__(self, family: str) -> FamilyLoader:
        if family not in self._built:
            self._built[family] = self._build[family]()
        return self._built[family]

    def __iter__(self) -> Iterator[str]:
        return iter(self._build)

    def __len__(self) -> int:
        return len(self._build)

    def __repr__(self) -> str:
        return repr(dict(self.items()))


def _module(family: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{family}")


@functools.cache
def _main_loader(family: str) -> FamilyLoader:
    # One loader object per family, shared by every revision that serves it as main does.
    return _module(family).LOADER


def _k3(**options: bool) -> Callable[[], FamilyLoader]:
    return lambda: _module("k3_dspark").loader(**options)


def _loaders(k3: Callable[[], FamilyLoader], *, added: Mapping[str, Callable[[], FamilyLoader]] | None = None,
             **own: Callable[[], FamilyLoader]) -> _Loaders:
    """K3's loader and, for each other family, its own (`own`) or main's;
    `added`: families main does not serve."""
    others = ("dflash_gqa", "eagle3_llama", "eagle3_mla")
    return _Loaders({"k3_dspark": k3, **{family: own.get(family, functools.partial(_main_loader, family))
                                         for family in others}, **(added or {})})

CURRENT = EngineProfile(
    name=NAME,
    revision="current",
    commit=f"{PR1031} (k3_dspark, dflash_gqa's stream), {MAIN} (others)",
    description="TokenSpeed with the K3 DSpark serving change (pull request 1031) for k3_dspark and the stream "
    "of GQA DFlash/DSpark drafts; main for the rest",
    loaders=_loaders(_k3(serving_change=True), dflash_gqa=lambda: _module("dflash_gqa").loader_pr1031()),
    **PROFILE_FACTS,
)

PR_1031 = EngineProfile(
    name=NAME,
    revision="pr1031",
    commit=PR1031,
    description="TokenSpeed pull request 1031 head (K3 DSpark: fc_norm + AttnRes tap; the declared stream "
    "handed to the target, K3 and GQA DFlash/DSpark)",
    loaders=_loaders(_k3(serving_change=True), dflash_gqa=lambda: _module("dflash_gqa").loader_pr1031()),
    **PROFILE_FACTS,
)

PR_1016 = EngineProfile(
    name=NAME,
    revision="pr1016",
    commit=PR1016,
    description="TokenSpeed pull request 1016 head (K3 DSpark: fc_norm via tokenspeed_kernel; the stream, "
    "K3 and GQA DFlash/DSpark, overridable by TOKENSPEED_DFLASH_AUX_STREAM)",
    loaders=_loaders(lambda: _module("k3_dspark").loader_pr1016(),
                     dflash_gqa=lambda: _module("dflash_gqa").loader_pr1016()),
    **{**PROFILE_FACTS, "ignored_env_vars": ()},
)

MAIN_PROFILE = EngineProfile(
    name=NAME,
    revision="main",
    commit=MAIN,
    description="TokenSpeed main: K3 DSpark without fc_norm or the AttnRes stream",
    loaders=_loaders(_k3(serving_change=False)),
    **PROFILE_FACTS,
)

def _releases() -> ModuleType:
    return importlib.import_module(f"{__name__}.releases")


def _release(module: str, name: str) -> Callable[[], FamilyLoader]:
    """A family loader of a release: its delta (releases.py) over 1031's."""
    def build() -> FamilyLoader:
        base = {"k3_dspark": lambda: _module("k3_dspark").loader(serving_change=True),
                "dflash_gqa": lambda: _module("dflash_gqa").loader_pr1031()}[module]()
        return getattr(_releases(), name)(base)

    return build


RELEASE_0_1_1 = EngineProfile(
    name=NAME,
    revision="0.1.1",
    commit="tokenspeed==0.1.1 (PyPI)",
    description="TokenSpeed 0.1.1, the release `pip install tokenspeed` gives: pull request 1031's K3 DSpark "
    "model with the stream read at the top level only and the draft compared with the loaded target at startup",
    loaders=_loaders(_release("k3_dspark", "k3_loader_0_1_1"),
                     dflash_gqa=_release("dflash_gqa", "gqa_loader_0_1_1"),
                     # DFlash2 is new in 0.1.1: its model over the GQA DFlash one (dflash2.py).
                     added={"dflash2": lambda: _module("dflash2").loader_0_1_1(
                         _release("dflash_gqa", "gqa_loader_0_1_1")())}),
    **{**PROFILE_FACTS, "architectures": _releases().ARCHITECTURES_0_1_1,
       "launch_model": importlib.import_module(f"{__name__}.launch").MODEL},
)

RELEASE_0_1_0 = EngineProfile(
    name=NAME,
    revision="0.1.0",
    commit="tokenspeed==0.1.0 (PyPI)",
    description="TokenSpeed 0.1.0, the first PyPI release: main's GQA DFlash and EAGLE-3 models; no K3 DSpark, "
    "no GQA DSpark, no DFlash2",
    loaders=_Loaders({**{family: functools.partial(_main_loader, family) for family in ("dflash_gqa", "eagle3_llama")},
                      "eagle3_mla": lambda: _releases().eagle3_mla_loader_0_1_0(_main_loader("eagle3_mla"))}),
    **{**PROFILE_FACTS, "architectures": _releases().architectures_0_1_0(PROFILE_FACTS["architectures"]),
       "launch_model": importlib.import_module(f"{__name__}.launch").MODEL_0_1_0},
)

# The first is what a bare `tokenspeed` means: the newest release; the git
# snapshots stay for what was read before it.
PROFILES = (RELEASE_0_1_1, RELEASE_0_1_0, CURRENT, PR_1031, PR_1016, MAIN_PROFILE)
DEFAULT = RELEASE_0_1_1
