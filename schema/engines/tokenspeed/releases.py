"""TokenSpeed's releases on PyPI, each the delta over the snapshot it grew
from: only the rules that differ, each cited to the release's own files
(paths inside the wheel, `tokenspeed/runtime/...@tokenspeed==VERSION`).

* 0.1.0 (tag v0.1.0) serves main's GQA DFlash and EAGLE-3 models and no K3
  DSpark draft at all: its wheel has no `models/kimi_k3_dspark.py` (nor a
  Kimi-K3 target) and registers no `DSparkDraftModel`, `K3DSparkModel` or
  DFlash2 (each `models/*.py` `EntryClass`): a K3 DSpark draft is ENG006,
  a GQA DSpark draft names no class it registers (ENG002).

  Its EAGLE-3 MLA layer passes the draft's rope_scaling to the attention
  unfiltered, which turns any truthy one into DeepSeek YaRN and reads its
  `factor` and `original_max_position_embeddings`
  (`models/deepseek_v3.py::Eagle3MlaDecoderLayer.__init__`:1802, 1816;
  `DeepseekV3AttentionMLA.__init__`:513-514, 597-599;
  `layers/rotary_embedding.py::get_rope`:1435-1437). transformers 5.12.0,
  which 0.1.0 pins, fills a plain-RoPE config's rope_scaling with
  `{"rope_type": "default"}`: a draft without YaRN scaling fails to build
  (KeyError), where main and 0.1.1 build plain RoPE (`eagle3_mla_loader_0_1_0`).

* 0.1.1 (`pip install tokenspeed`, October 2026) carries pull request
  1031's K3 DSpark model, with two changes that move a verdict:
  - the stream: the K3 config class takes `aux_hidden_stream` as a top-level
    argument and the model hands that to the target
    (`configs/kimi_k3_dspark_config.py::KimiK3DSparkConfig.__init__`:79,
    113; `models/kimi_k3_dspark.py::K3DSparkModel.configure_target`:429,
    436); no code reads `dflash_config.aux_hidden_stream` for K3 any more
    (1031's drafter read it first). A stream declared only there is served
    the prefix stream without a word.
  - startup compares the draft with the loaded target:
    `configure_target` runs `validate_k3_dspark_config(config,
    target_config)` (`models/kimi_k3_dspark.py`:421-423,
    `configs/kimi_k3_dspark_config.py::validate_k3_dspark_config`:285-309,
    called from `execution/factory.py::configure_draft_target`:161-190): a
    target_hidden_size, target_num_hidden_layers (93 when absent) or
    vocab_size other than the target's stops the server.
  - DFlash2 (`models/dflash2.py`, `execution/drafter/dflash2.py`), new:
    `dflash2.py` beside this module, over the GQA loader below.
  GQA DFlash/DSpark drafts resolve their stream as 1031's drafter did, now
  in the model (`models/dflash.py::DFlashDraftModel._checkpoint_capture_field`
  :316-319, `aux_hidden_stream`:331-336, `configure_target`:338-358):
  nested first when truthy, handed to the target, which refuses a stream it
  cannot supply; EAGLE-3 as on main.
  A new startup check refuses a draft whose layers carry a sliding window
  when the drafter's attention backend ignores per-layer windows
  (`execution/drafter/dflash.py::DFlash._validate_draft_attention_window`
  :172, 187-222). It moves no verdict of a family dspark models: the
  drafter's backend is --drafter-attention-backend, else --attention-backend
  mirrored (`utils/server_args.py::ServerArgs.resolve_speculative_decoding`
  :1123-1129), else the architecture's default, `mha` for a GQA draft
  (`layers/attention/registry.py::_get_backend_cls`:573-591), and every
  backend registered for MHA applies the windows (`mha`, `fa3`, `fa4`,
  `triton`, `flashinfer`: `layers/attention/backends/paged/mha.py`:53-59,
  104, 434-435; `trtllm`: `paged/trtllm.py`:102, 552; `qsa` subclasses
  MHA's); the backends without them (`flashmla`, `trtllm_mla`, `dsa`, `msa`)
  build MLA, DSA and MSA attention only, and the K3 DSpark draft's layers
  carry no window (`models/kimi_k3_dspark.py` sets no
  `sliding_window_size`). So a GQA draft's sliding layers are served with
  their windows under every launch that builds it.
"""

from __future__ import annotations

import dataclasses

from dspark.schema.engines.base import (
    ArchitectureResolution,
    FamilyLoader,
    Source,
    StreamResolution,
    served_wrong,
)
from dspark.schema.engines.tokenspeed.common import ARCHITECTURES as MAIN_ARCHITECTURES
from dspark.schema.families.base import block_size_launch_note, block_size_the_drafter_reads
from dspark.schema.findings import Finding

MAIN_REGISTERED = MAIN_ARCHITECTURES.registered

RELEASE_0_1_1 = "tokenspeed==0.1.1"
RELEASE_0_1_0 = "tokenspeed==0.1.0"
_RUNTIME = "tokenspeed/runtime/"
K3_MODEL = _RUNTIME + "models/kimi_k3_dspark.py"
K3_CONFIG = _RUNTIME + "configs/kimi_k3_dspark_config.py"
GQA_MODEL = _RUNTIME + "models/dflash.py"


def at_0_1_1(lines: str, path: str, qualname: str = "") -> Source:
    return Source(path, lines, RELEASE_0_1_1, qualname)


# The classes each release registers (each models/*.py `EntryClass`), as
# what it adds to and drops from main's (common.py): 0.1.1 adds DFlash2
# (models/dflash2.py::EntryClass@tokenspeed==0.1.1:566, judged by dflash2.py)
# and drops the MiniMax-M2 target and
# its EAGLE-3 rewrite; 0.1.0 has no Kimi-K3 target, K3 DSpark, GQA DSpark nor
# DeepSeek-V3.2.
_REGISTERED_0_1_1 = (MAIN_REGISTERED | {
    "DFlash2DraftModel", "DeepseekV41ForCausalLM", "DeepseekV41ForCausalLMDSpark",
    "Glm53FlashForConditionalGeneration", "Glm53FlashForConditionalGenerationNextN", "NemotronHForCausalLM",
    "NemotronHForCausalLMNextN", "Qwen4ExpForCausalLM", "Qwen4ExpForCausalLMNextN", "Qwen4ExpForConditionalGeneration",
}) - {"MiniMaxM2ForCausalLM"}
_REGISTERED_0_1_0 = MAIN_REGISTERED - {
    "DSparkDraftModel", "DeepseekV32ForCausalLM", "DeepseekV32ForCausalLMNextN", "DeepseekV4ForCausalLMDSpark",
    "K3DSparkModel", "KimiK3ForConditionalGeneration", "KimiK3ForConditionalGenerationNextN", "Qwen3_5MoeForCausalLM",
    "Qwen3_5MoeForCausalLMNextN",
}

ARCHITECTURES_0_1_1 = ArchitectureResolution(
    registered=_REGISTERED_0_1_1,
    # get_config(is_draft_worker=True) rewrites the first entry only, then the
    # registry returns the first registered entry
    # (utils/hf_transformers_utils.py::get_config:442-478; models/registry.py::resolve_model_cls:86-97).
    first_entry_prefix_rewrites=(("Qwen3DSparkModel", "DSparkDraftModel"),),
    first_entry_exact_rewrites={},
    keep_substrings=("NextN", "MTP", "Eagle", "DFlash", "DSpark"),
    appended_suffix="NextN",
    # KimiK3DSparkConfig fills architectures when absent, [] or null
    # (configs/kimi_k3_dspark_config.py::KimiK3DSparkConfig.__init__:121-126).
    default_architectures={"k3_dspark": ("K3DSparkModel",)},
    source=at_0_1_1("442-478 (rewrite); models/registry.py:86-97 (first registered wins)",
                    _RUNTIME + "utils/hf_transformers_utils.py", "get_config"),
)


def architectures_0_1_0(base: ArchitectureResolution) -> ArchitectureResolution:
    """main's resolution (the MiniMax-M2 EAGLE-3 rewrite included,
    utils/hf_transformers_utils.py::get_config@tokenspeed==0.1.0:266-278)
    over 0.1.0's registry."""
    return dataclasses.replace(
        base, registered=_REGISTERED_0_1_0, default_architectures={},
        source=Source(_RUNTIME + "utils/hf_transformers_utils.py",
                      "266-278 (rewrite); models/registry.py (first registered wins)", RELEASE_0_1_0,
                      qualname="get_config"))


# 0.1.1 ties the block size to the launch's widths per algorithm
# (utils/spec_block_geometry.py): judged with the launch (tokenspeed/launch.py),
# in place of 1031's and main's drafter rule.
_BLOCK_SIZE_RULES_BEFORE_0_1_1 = (block_size_the_drafter_reads, block_size_launch_note)


def _without_old_block_rule(base: FamilyLoader) -> tuple:
    return tuple(rule for rule in base.config_limits if rule not in _BLOCK_SIZE_RULES_BEFORE_0_1_1)


def k3_loader_0_1_1(base: FamilyLoader) -> FamilyLoader:
    """Pull request 1031's K3 DSpark loader (`base`) as 0.1.1 ships it."""
    return dataclasses.replace(
        base,
        config_limits=_without_old_block_rule(base),
        stream=StreamResolution(
            nested_truthy_wins=False,
            validates_top_level=True,
            fixed_stream=None,
            source=at_0_1_1("79, 113 (KimiK3DSparkConfig.__init__); models/kimi_k3_dspark.py:429, 436 "
                            "(K3DSparkModel.configure_target)", K3_CONFIG, "KimiK3DSparkConfig.__init__"),
        ),
        # the model reads its taps and stream from the config class, built from
        # the top level (K3DSparkModel.__init__:340; configure_target:429-436);
        # the drafter still takes dflash_config's mask token first
        # (execution/drafter/dflash.py::DFlashDrafter.__init__:151-160)
        nested_overrides=("mask_token_id",),
        # the last pipeline stage builds and loads its own embedding
        # (K3DSparkModel.__init__:402-416; load_weights:633-637 skips a
        # skipped prefix only when it is no parameter; 697-703 refuses one missing)
        launch_loaded={r"^embed_tokens\.weight$": "--pipeline-parallel-size > 1"},
        startup_target_checks=at_0_1_1("285-309 (validate_k3_dspark_config, from K3DSparkModel.configure_target "
                                       "at models/kimi_k3_dspark.py:421-423)", K3_CONFIG, "validate_k3_dspark_config"),
        sources={**base.sources, "config": at_0_1_1("56-127, 194-309 (validate_k3_dspark_config)",
                                                    K3_CONFIG, "KimiK3DSparkConfig.__init__"),
                 "stream vs target": at_0_1_1("421-437", K3_MODEL, "K3DSparkModel.configure_target")},
    )


# Why the drafter's window check never refuses a GQA draft (module docstring).
SLIDING_WINDOW_BACKENDS = at_0_1_1(
    "187-222, 172 (DFlash.__init__); layers/attention/registry.py:573-591 "
    "(_get_backend_cls: mha by default); layers/attention/backends/paged/mha.py:53-59, 104, 434-435 and "
    "paged/trtllm.py:102 (every MHA backend applies per-layer windows)",
    _RUNTIME + "execution/drafter/dflash.py", "DFlash._validate_draft_attention_window")


def gqa_loader_0_1_1(base: FamilyLoader) -> FamilyLoader:
    """1031's GQA resolution (`base`), read where 0.1.1 keeps it: the model."""
    return dataclasses.replace(
        base,
        config_limits=_without_old_block_rule(base),
        sources={**base.sources, "sliding window backend": SLIDING_WINDOW_BACKENDS},
        stream=dataclasses.replace(base.stream, source=at_0_1_1(
            "316-319, 331-358 (DFlashDraftModel._checkpoint_capture_field, aux_hidden_stream, configure_target)",
            GQA_MODEL, "DFlashDraftModel._checkpoint_capture_field")),
    )


_EAGLE3_MLA_ROPE_0_1_0 = Source(_RUNTIME + "models/deepseek_v3.py",
                                "1802, 1816; 513-514, 597-599 (DeepseekV3AttentionMLA.__init__); "
                                "layers/rotary_embedding.py:1435-1437 (get_rope)",
                                RELEASE_0_1_0, "Eagle3MlaDecoderLayer.__init__")


def mla_rope_needs_yarn_0_1_0(config, config_file: str) -> list[Finding]:
    """0.1.0's EAGLE-3 MLA layer builds DeepSeek YaRN from any rope_scaling
    the config class holds, reading `factor` and
    `original_max_position_embeddings` (module docstring). transformers
    5.12.0 gives every config a rope_scaling (`{"rope_type": "default"}`
    when none is written) and fills the original length for `yarn` only."""
    block = next((config.get(field) for field in ("rope_scaling", "rope_parameters")
                  if isinstance(config.get(field), dict)), None) or {}
    kind = block.get("rope_type", block.get("type"))
    if "factor" in block and (kind == "yarn" or "original_max_position_embeddings" in block):
        if kind in ("yarn", "deepseek_yarn"):
            return []
        return [served_wrong(config_file, f"rope_scaling declares rope type {kind!r}, which tokenspeed 0.1.0's "
                             "EAGLE-3 MLA layer builds as DeepSeek YaRN", _EAGLE3_MLA_ROPE_0_1_0, "rope_scaling")]
    missing = "factor" if "factor" not in block else "original_max_position_embeddings"
    return [Finding(
        "CFG003",
        f"{config_file}: the rope scaling ({kind or 'none, read as default'}) has no {missing}: "
        "tokenspeed 0.1.0's EAGLE-3 MLA layer builds every draft's RoPE as DeepSeek YaRN and fails to build "
        f"this one (KeyError '{missing}'). Write the target's YaRN rope_scaling in the draft's config, or serve "
        "it on tokenspeed 0.1.1, which builds plain RoPE.",
        file=config_file,
        detail={"field": "rope_scaling", "validator": "engine", "source": _EAGLE3_MLA_ROPE_0_1_0.cite()},
    )]


def eagle3_mla_loader_0_1_0(base: FamilyLoader) -> FamilyLoader:
    """main's EAGLE-3 MLA loader with 0.1.0's RoPE build in place of main's
    (which keeps YaRN and builds plain RoPE for anything else)."""
    from dspark.schema.engines.tokenspeed.eagle3_mla import mla_rope_only_yarn

    limits = tuple(mla_rope_needs_yarn_0_1_0 if rule is mla_rope_only_yarn else rule for rule in base.config_limits)
    return dataclasses.replace(base, config_limits=limits,
                               sources={**base.sources, "rope": _EAGLE3_MLA_ROPE_0_1_0})
