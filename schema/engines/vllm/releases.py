"""vLLM's releases before 0.33.0, each the delta over its newer neighbour:
the rules that differ, each cited to both releases
(`vllm/<path>:<lines>@vllm==X`), and where the code every other rule cites
sits in the older wheel (`MOVED`): the older profile cites its own lines.

* 0.32.0 (under 0.33.0):
  - EAGLE-3 `eagle_config.use_aux_hidden_state: false`: 0.33.0's runner asks
    the draft whether it reads the taps
    (`v1/worker/gpu/spec_decode/eagle/eagle3_utils.py::requires_aux_hidden_states`
    :15-22, from `v1/worker/gpu/model_runner.py`:306-308@0.33.0); 0.32.0's
    captures them for every eagle3 draft (`model_runner.py`:300-307@0.32.0)
    and hands their concatenation to a Llama/Qwen3 draft built without fc,
    whose forward asserts the width (`llama_eagle3.py::LlamaModel.forward`
    :270-273): refused (CFG003), a pass on 0.33.0.
  - targets: GraniteMoe, GraniteMoeShared and GraniteMoeSWA gain
    SupportsEagle3 in 0.33.0 (`granitemoe.py`:391, `granitemoeshared.py`:227);
    0.32.0's runner raises "Model does not support EAGLE3 interface" at
    startup for them (`eagle3_utils.py::set_eagle3_aux_hidden_state_layers`
    :19-20@0.32.0), for every family (TGT006).
  - registry: 0.33.0 adds DFlash2Beam, Qwen3XPress, MuseSparkDSpark,
    ParseAuxMTP, Step5MTP and drops MedusaModel
    (`registry.py::_SPECULATIVE_DECODING_MODELS` 655-745@0.33.0,
    625-707@0.32.0): a Medusa draft loads unjudged on 0.32.0 (ENG007).
* 0.31.0 (under 0.32.0): Granite and GraniteSWA (and GPT-NeoX, Glm5Next,
  Jais2, Phi, SeedOss, MiniCPM-V 4.6, Qwen3-ASR) targets gain SupportsEagle3
  in 0.32.0 (`granite.py::GraniteForCausalLM`:411-413@0.32.0, 396@0.31.0).
* 0.30.0 (under 0.31.0):
  - K3 DSpark's `confidence_head` is always dropped by the mapper and never
    built (`dspark_mla.py::K3DSparkForCausalLM.hf_to_vllm_mapper`
    :417-431@0.30.0); 0.31.0 builds and loads it when
    `enable_confidence_head` (194-205, 459-464@0.31.0): a head of another
    shape than 0.31.0 builds fails its load (INV003) and is dropped by 0.30.0.
  - DFlash/DSpark `dflash_config.attention_value_scale` is unread in 0.30.0;
    0.31.0 scales every value by it (`qwen3_dflash.py`:299-300, 349,
    696-698@0.31.0): a draft trained with it is served wrong on 0.30.0.
  - a DFlash draft's `has_own_lm_head` is unread in 0.30.0: the target's
    head replaces the draft's unless one is shipped
    (`v1/worker/gpu/spec_decode/dflash/utils.py`:61-68@0.30.0); 0.31.0 keeps
    the draft's own head when the flag is set, loaded or not (64-70@0.31.0),
    so a draft that declares it and ships none is served an uninitialised
    head there (INV001) and the target's head on 0.30.0.
  - LiLiCorrDraftModel is registered from 0.31.0 (`registry.py`:626-708@0.31.0,
    627-708@0.30.0); Cohere2Moe, MiMoV2Omni and the NemotronH omni/VL targets
    gain SupportsEagle3 in 0.31.0.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Mapping

from dspark.schema.engines.base import ArchitectureResolution, FamilyLoader, SkipRule, Source
from dspark.schema.engines.vllm.common import (
    ARCHITECTURES,
    DFLASH_SHARING as DFLASH_SHARING_PATH,
    EAGLE3_UTILS,
    K3_DSPARK,
    LLAMA_EAGLE3,
    PIN,
    QWEN3_DFLASH,
    QWEN3_EAGLE3,
    REGISTRY,
    UNMODELLED_DRAFT_CLASSES,
    at,
    engine_refusal,
    served_wrong,
)
from dspark.schema.findings import Finding

RELEASES = ("0.32.0", "0.31.0", "0.30.0")  # newest first, each under the one before (0.33.0 first)
MODEL_RUNNER = "vllm/v1/worker/gpu/model_runner.py"


def at_release(version: str, lines: str, path: str, qualname: str = "") -> Source:
    return Source(path, lines, f"vllm=={version}", qualname)


# Where a 0.33.0 citation's lines sit in each older wheel, path under vllm/:
# "0.33.0 lines>that release's lines"; a range not listed is where 0.33.0 has
# it (read by aligning each cited file of the two wheels line by line).
MOVED: dict[str, dict[str, str]] = {
    "0.32.0": {
        "config/model.py": "680-693>669-682",
        "config/speculative.py": "1433-1509>1322-1398 1535-1566>1424-1453",
        "model_executor/model_loader/default_loader.py": "503-523>498-518 525-572>520-567",
        "model_executor/model_loader/weight_utils.py": "590-616>585-611 1529-1543>1476-1490",
        "model_executor/models/interfaces.py": "1616-1617>1577-1578 1640-1650>1601-1611 1751-1770>1712-1731",
        "model_executor/models/qwen3_dflash.py": "59-73>58,84-97 84-93>108-117 96-157>120-181 390-410>416-432 "
                                                 "403-410>425-432 412-495>434-513 736-775>771-810 851-892>886-927",
        "model_executor/models/registry.py": "655-713>625-673 1420-1470>1376-1426 666>636",
        "v1/worker/gpu/spec_decode/__init__.py": "42-47>34-39",
        "models/kimi_k3/nvidia/model.py": "275-286>272-283 1068-1106>1242-1280 1145-1189>1319-1363",
        "transformers_utils/config.py": "340-420>294-374 1258-1272>1195-1209",
        "transformers_utils/model_arch_config_convertor.py": "241-291>263-311",
        "v1/worker/gpu/spec_decode/dflash/speculator.py": "79-88>76-85",
        "v1/worker/gpu/spec_decode/eagle/eagle3_utils.py": "28-29>19-20 113-150>100-137 121-140>108-127",
        "v1/worker/gpu/spec_decode/eagle/utils.py": "18-34>15-31 45-77>42-74",
        "config/vllm.py": "758-765>730-737 3070-3077>2936-2943",
        "v1/spec_decode/llm_base_proposer.py": "355-384>356-385",
        "v1/worker/gpu_model_runner.py": "5190-5224>5251-5285",
    },
    "0.31.0": {
        "config/model.py": "680-693>635-648",
        "config/speculative.py": "1433-1509>1316-1392 1535-1566>1418-1447",
        "model_executor/model_loader/default_loader.py": "503-523>481-499 525-572>501-524",
        "model_executor/model_loader/weight_utils.py": "590-616>576-602 1529-1543>1412-1426",
        "model_executor/models/deepseek_v2.py": "1546-1587>1545-1586",
        "model_executor/models/interfaces.py": "1616-1617>1568-1569 1640-1650>1592-1602 1751-1770>1703-1722",
        "model_executor/models/qwen3.py": "100>99 115-121>114-120 153-169>151-167 209>206",
        "model_executor/models/qwen3_dflash.py": "59-73>58,84-97 84-93>108-117 96-157>120-181 390-410>398-414 "
                                                 "403-410>407-414 412-495>416-495 736-775>762-801 851-892>877-918",
        "model_executor/models/registry.py": "655-713>626-674 1420-1470>1366-1416 666>637",
        "v1/worker/gpu/spec_decode/__init__.py": "42-47>24-29",
        "model_executor/models/utils.py": "425-448>409-432 457-458>441-442 471>455",
        "models/kimi_k3/nvidia/model.py": "275-286>257-268 1068-1106>1234-1272 1145-1189>1311-1355",
        "transformers_utils/config.py": "340-420>322-407 1258-1272>1228-1242",
        "transformers_utils/model_arch_config_convertor.py": "241-291>260-308",
        "v1/worker/gpu/spec_decode/dflash/speculator.py": "79-88>76-85",
        "v1/worker/gpu/spec_decode/dspark/utils.py": "130-150>115-135",
        "v1/worker/gpu/spec_decode/eagle/eagle3_utils.py": "28-29>19-20 113-150>100-137 121-140>108-127",
        "v1/worker/gpu/spec_decode/eagle/utils.py": "18-34>15-27 45-77>38-70",
        "v1/worker/gpu/spec_decode/utils.py": "92-115>73-96",
        "config/vllm.py": "758-765>752-759 3070-3077>3085-3092",
        "v1/spec_decode/llm_base_proposer.py": "355-384>356-385",
        "v1/worker/gpu_model_runner.py": "5190-5224>5456-5490",
    },
    "0.30.0": {
        "config/model.py": "680-693>628-641",
        "config/speculative.py": "1433-1509>1302-1378 1535-1566>1404-1441",
        "model_executor/model_loader/default_loader.py": "503-523>427-445 525-572>447-470",
        "model_executor/model_loader/weight_utils.py": "590-616>610-636 1529-1543>1244-1258",
        "model_executor/models/deepseek_eagle3.py": "57-83>58-84 74>75 101-118>102-119 152-226>153-227 "
                                                    "189-194>190-195 196-209>197-210 196-199>197-200 211-220>212-221 "
                                                    "222-256>223-257 259-266>260-267 282-314>283-315 298-306>299-307 "
                                                    "307-314>308-315 357-368>358-369 370-398>371-399",
        "model_executor/models/deepseek_v2.py": "1546-1587>1542-1583",
        "model_executor/models/interfaces.py": "1616-1617>1577-1578 1640-1650>1601-1611 1751-1770>1712-1731",
        "model_executor/models/qwen3.py": "100>99 115-121>114-120 153-169>150-166 209>205",
        "model_executor/models/qwen3_dflash.py": "59-73>56-68 84-93>79-87 96-157>90-151 390-410>363-379 "
                                                 "403-410>372-379 412-495>381-455 736-775>698-730 851-892>806-847",
        "model_executor/models/qwen3_dspark.py": "312-372>310-370",
        "model_executor/models/qwen3_eagle3.py": "175-179>173-177 190-200>188-198 201-210>199-208 211-243>209-240 "
                                                 "211-214>209-212 215-222>212-219 224-233>221-230 245>242 "
                                                 "273-276>270-273 291-295>286-290 307-316>302-311 317-324>312-319 "
                                                 "389-394>384-389 398-446>393-441 404-405>399-400 409-420>404-415 "
                                                 "409-416>404-411 326-333>321-328 428-433>423-428",
        "model_executor/models/registry.py": "655-713>627-674 1420-1470>1371-1421 666>637",
        "v1/worker/gpu/spec_decode/__init__.py": "42-47>18-23",
        # 0.30.0 has no Triton kernel for the convolution (its forward's, 0.33.0 lines 14-15, 25-143).
        "model_executor/models/qwen3_dflash2.py": "170-227>46-102 182-185>57-60 229-246>104-121 229-287>104-161 "
                                                  "248-258>123-132 253-256>128-131 314-358>188-232 361-392>235-266 395-413>269-287 "
                                                  "376-379>250-253 376-389>250-263 400-406>274-280",
        "model_executor/models/utils.py": "233-240>217-224 425-448>394-417 457-458>426-427 471>440",
        "models/kimi_k3/nvidia/dspark_mla.py": "39-58>36-55 134-208>131-193 150-157>147-154 433-452>413-432 "
                                               "437-452>417-432 437-464>417-444 446-451>426-431 530-537>497-504",
        "models/kimi_k3/nvidia/model.py": "275-286>288-299 1068-1106>1273-1311 1145-1189>1350-1394",
        "transformers_utils/config.py": "340-420>263-314 1258-1272>1138-1152",
        "transformers_utils/model_arch_config_convertor.py": "241-291>260-308",
        "v1/worker/gpu/spec_decode/dflash/speculator.py": "79-88>70-79",
        "v1/worker/gpu/spec_decode/dflash/utils.py": "60-73>59-68",
        "v1/worker/gpu/spec_decode/dspark/utils.py": "130-150>114-134",
        "v1/worker/gpu/spec_decode/eagle/eagle3_utils.py": "28-29>19-20 113-150>100-137 121-140>108-127",
        "v1/worker/gpu/spec_decode/eagle/utils.py": "18-34>14-27 45-77>38-70",
        "v1/worker/gpu/spec_decode/utils.py": "92-115>73-96",
        "config/vllm.py": "758-765>714-721 3070-3077>2852-2859",
        "v1/spec_decode/llm_base_proposer.py": "355-384>359-388",
        "v1/worker/gpu_model_runner.py": "5190-5224>5518-5551",
        "transformers_utils/configs/speculators/base.py": "97-137>99-139",
        "transformers_utils/configs/speculators/algos.py": "53-87>55-90",
    },
}


def _moved_lines(version: str, path: str, lines: str) -> str:
    def segment(text: str, default_path: str) -> str:
        own = re.match(r"(vllm/[\w/]+\.py):(.*)", text)
        where, rest = (own.group(1), own.group(2)) if own else (default_path, text)
        rows = dict(pair.split(">") for pair in MOVED[version].get(where.removeprefix("vllm/"), "").split())
        mapped = re.sub(r"\b\d+(?:-\d+)?\b(?![^(]*\))", lambda m: rows.get(m.group(0), m.group(0)), rest)
        return f"{where}:{mapped}" if own else mapped

    return "; ".join(segment(part, path) for part in lines.split("; "))


def recite(version: str, source: Source) -> Source:
    """A 0.33.0 citation as the older release's own lines."""
    if source.commit != PIN:
        return source
    return at_release(version, _moved_lines(version, source.path, source.lines), source.path, source.qualname)


_CITED = re.compile(r"(vllm/[\w/.]+?\.py)(?:::([\w.]+))?@" + re.escape(PIN) + r":([0-9][0-9, \-]*[0-9]|[0-9])")


def _recite_text(version: str, text: str) -> str:
    return _CITED.sub(lambda m: recite(version, Source(m.group(1), m.group(3), PIN, m.group(2) or "")).cite(), text)


def _recite_value(version: str, value: Any) -> Any:
    if isinstance(value, str):
        return _recite_text(version, value)
    if isinstance(value, dict):
        return {k: _recite_value(version, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_recite_value(version, v) for v in value]
    return value


def _recited_rule(version: str, rule: Callable[[Mapping[str, Any], str], list]) -> Callable:
    """A config rule whose findings cite the older release (the rules build
    their citations when they run)."""

    def recited(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        return [dataclasses.replace(f, message=_recite_text(version, f.message),
                                    detail=_recite_value(version, f.detail)) for f in rule(config, config_file)]

    return recited


def recited(version: str, value: Any) -> Any:
    """Every Source in a loader (or any record, tuple or mapping of them)
    re-cited to `version`; config rules wrapped to re-cite their findings."""
    if isinstance(value, Source):
        return recite(version, value)
    if isinstance(value, FamilyLoader):
        changes = {f.name: recited(version, getattr(value, f.name)) for f in dataclasses.fields(value)
                   if f.name not in ("config_limits", "dims")}
        changes["config_limits"] = tuple(_recited_rule(version, r) for r in value.config_limits)
        return dataclasses.replace(value, **changes)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: recited(version, getattr(value, f.name))
                                             for f in dataclasses.fields(value) if f.init})
    if isinstance(value, tuple):
        return tuple(recited(version, v) for v in value)
    if isinstance(value, Mapping):
        return {k: recited(version, v) for k, v in value.items()}
    return value


# Registry ------------------------------------------------------------------

# _SPECULATIVE_DECODING_MODELS: the draft classes each release adds
# (+) or drops (-) under its newer neighbour, and where the dict sits.
_REGISTRY_DELTA = {
    "0.32.0": ("625-707", frozenset({"MedusaModel"}),
               frozenset({"DFlash2BeamDraftModel", "DFlashQwen3XPressModel", "MuseSparkDSparkModel",
                          "ParseAuxMTPModel", "Qwen3XPressModel", "Step5MTP"})),
    "0.31.0": ("626-708", frozenset(), frozenset()),
    "0.30.0": ("627-708", frozenset(), frozenset({"LiLiCorrDraftModel"})),
}


def architectures(version: str) -> ArchitectureResolution:
    unmodelled = UNMODELLED_DRAFT_CLASSES
    for release in RELEASES[:RELEASES.index(version) + 1]:
        _, added, dropped = _REGISTRY_DELTA[release]
        unmodelled = (unmodelled - dropped) | added
    modelled = ARCHITECTURES.registered - UNMODELLED_DRAFT_CLASSES
    lines = _REGISTRY_DELTA[version][0]
    base = recited(version, ARCHITECTURES)
    return dataclasses.replace(base, registered=modelled | unmodelled, source=at_release(
        version, f"{base.source.lines.split(';')[0]}; {lines} (draft classes: _SPECULATIVE_DECODING_MODELS, "
        f"{REGISTRY}:655-745@{PIN})", REGISTRY, base.source.qualname))


# Targets -------------------------------------------------------------------

# Registered target classes that gain SupportsEagle3 in the newer neighbour:
# in this release the runner raises at startup for them (eagle3_utils.py:19-20).
_CAPTURE_GAINED_NEXT = {
    "0.32.0": ("granitemoe.py:391, granitemoeshared.py:227@vllm==0.33.0",
               frozenset({"GraniteMoeForCausalLM", "GraniteMoeSharedForCausalLM", "GraniteMoeSWAForCausalLM"})),
    "0.31.0": ("granite.py:411-413@vllm==0.32.0 and the classes' own files",
               frozenset({"GPTNeoXForCausalLM", "Glm5NextForCausalLM", "Glm5NextForConditionalGeneration",
                          "GraniteForCausalLM", "GraniteSWAForCausalLM", "Jais2ForCausalLM",
                          "MiniCPMV4_6ForConditionalGeneration", "PhiForCausalLM",
                          "Qwen3ASRForConditionalGeneration", "SeedOssForCausalLM"})),
    "0.30.0": ("the classes' own files @vllm==0.31.0",
               frozenset({"Cohere2MoeForCausalLM", "MiMoV2OmniForCausalLM", "NemotronH_Nano_Omni_Reasoning_V3",
                          "NemotronH_Nano_VL_V2", "NemotronH_Omni_Reasoning_V3",
                          "NemotronH_Super_Omni_Reasoning_V3"})),
}


def _without_capture(version: str) -> tuple[frozenset[str], Source]:
    classes: frozenset[str] = frozenset()
    gained = []
    for release in RELEASES[:RELEASES.index(version) + 1]:
        classes |= _CAPTURE_GAINED_NEXT[release][1]
        gained.insert(0, _CAPTURE_GAINED_NEXT[release][0])
    return classes, at_release(version, f"19-20 (set_eagle3_aux_hidden_state_layers raises 'Model does not "
                               f"support EAGLE3 interface' at startup; SupportsEagle3 gained later: "
                               f"{'; '.join(gained)})", EAGLE3_UTILS,
                               "set_eagle3_aux_hidden_state_layers")


# EAGLE-3 use_aux_hidden_state (0.32.0 and older) ------------------------------

_ALWAYS_CAPTURES = {"0.32.0": "300-307", "0.31.0": "276-283", "0.30.0": "281-288"}


def taps_always_captured(version: str, family: str) -> Callable[[Mapping[str, Any], str], list[Finding]]:
    """A config rule: a Llama/Qwen3 EAGLE-3 draft with
    eagle_config.use_aux_hidden_state false builds no fc, but this release's
    runner captures the taps for every eagle3 draft and feeds their
    concatenation to it."""
    runner = at_release(version, _ALWAYS_CAPTURES[version], MODEL_RUNNER, "GPUModelRunner.__init__")
    asserts = (at_release(version, "270-273", LLAMA_EAGLE3, "LlamaModel.forward") if family == "eagle3_llama"
               else at_release(version, "260" if version == "0.30.0" else "263", QWEN3_EAGLE3,
                               "Qwen3Eagle3Model.forward"))
    asked = at("15-22 (requires_aux_hidden_states, from vllm/v1/worker/gpu/model_runner.py:306-308)", EAGLE3_UTILS,
               "requires_aux_hidden_states")

    def rule(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        nested = config.get("eagle_config")
        if not isinstance(nested, Mapping) or "use_aux_hidden_state" not in nested \
                or nested["use_aux_hidden_state"]:
            return []
        return [engine_refusal(
            config_file, f"eagle_config.use_aux_hidden_state is false, so the draft builds no fc and reads one "
            f"hidden state, but vLLM {version}'s runner captures the target's taps for every eagle3 draft and "
            f"hands their concatenation to it; the draft's forward asserts the width ({asserts.cite()}) and the "
            f"server fails. vLLM 0.33.0 asks the draft first ({asked.cite()}); here", runner,
            "eagle_config.use_aux_hidden_state", "Serve it on vLLM 0.33.0 or later.")]

    return rule


# K3 DSpark confidence head (0.30.0) --------------------------------------------

CONFIDENCE_HEAD_0_30_0 = SkipRule(
    r"confidence_head",
    "training-only: always dropped (vLLM 0.31.0 loads it when enable_confidence_head, "
    f"{K3_DSPARK}:194-205, 459-464@vllm==0.31.0)",
    at_release("0.30.0", "417-431 (K3DSparkForCausalLM.hf_to_vllm_mapper)", K3_DSPARK,
               "K3DSparkForCausalLM.hf_to_vllm_mapper"),
)


# DFlash attention_value_scale (0.30.0) -------------------------------------------

def value_scale_unread(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """vLLM 0.30.0's DFlash attention never reads
    dflash_config.attention_value_scale; 0.31.0 scales every value by it."""
    nested = config.get("dflash_config")
    scale = nested.get("attention_value_scale") if isinstance(nested, Mapping) else None
    if scale is None or scale == 1:
        return []
    read = at_release("0.31.0", "299-300, 349, 696-698", QWEN3_DFLASH, "DFlashQwen3Attention.forward")
    return [served_wrong(
        config_file, f"dflash_config.attention_value_scale is {scale!r}; vLLM 0.30.0's DFlash attention never "
        f"reads it (0.31.0 multiplies every value by it, {read.cite()}), so the draft is served unscaled values",
        at_release("0.30.0", "244-267 (DFlashQwen3Attention.forward), 540-559 (the context values): no value "
                   "scale", QWEN3_DFLASH, "DFlashQwen3Attention.forward"),
        "dflash_config.attention_value_scale", "Serve it on vLLM 0.31.0 or later.")]


# Profiles --------------------------------------------------------------------

def loader(version: str, base: FamilyLoader) -> FamilyLoader:
    """0.33.0's loader for a family (`base`) as release `version` has it:
    its own lines, then each delta from 0.32.0 down to `version`."""
    out = recited(version, base)
    without, source = _without_capture(version)
    out = dataclasses.replace(out, targets_without_capture=out.targets_without_capture | without,
                              sources={**out.sources, "targets without capture": source})
    if base.family in ("eagle3_llama", "eagle3_qwen3"):
        always = taps_always_captured(version, base.family)
        out = dataclasses.replace(out, config_limits=out.config_limits + (always,))
    if version == "0.30.0" and base.family == "k3_dspark":
        out = dataclasses.replace(out, skips=tuple(CONFIDENCE_HEAD_0_30_0 if s.pattern == "confidence_head" else s
                                                   for s in out.skips))
    if version == "0.30.0" and base.family in ("dflash_gqa", "dflash2"):
        out = dataclasses.replace(out, config_limits=out.config_limits + (value_scale_unread,))
        # has_own_lm_head is unread: the target's head replaces the draft's
        # unless one is shipped (dflash/utils.py@vllm==0.30.0:61-68;
        # 0.31.0 reads the flag, 64-70)
        out = dataclasses.replace(out, head_from_target="not_shipped",
                                  sources={**out.sources, "embedding / lm_head (dflash)": at_release(
                                      "0.30.0", "61-68 (has_own_lm_head unread)", DFLASH_SHARING_PATH,
                                      "load_dflash_model")})
    return out


def profile_facts(version: str, facts: Mapping[str, Any]) -> dict[str, Any]:
    return {**{k: recited(version, v) for k, v in facts.items()}, "architectures": architectures(version)}
