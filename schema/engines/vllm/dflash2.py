"""vLLM 0.33.0's loader for DFlash2 drafts (`DFlash2DraftModel` ->
DFlash2Qwen3ForCausalLM, model_executor/models/qwen3_dflash2.py): the GQA
DFlash model (DFlashQwen3ForCausalLM, whose loader, taps, fc and capture it
inherits: `dflash_gqa.LOADER`) with a grouped convolution around each layer's
attention and MLP and a candidate selector. Launched with method "dflash"
(a speculators config's "dflash2" is rewritten to it,
transformers_utils/configs/speculators/base.py:135-136), served by the
DFlash2 speculator (v1/worker/gpu/spec_decode/__init__.py:42-47).

Every DFlash2 field is read from `dflash_config` alone; the attention is
Qwen3's whatever `attention_mode` says; the convolution's block is the
launch's `1 + num_speculative_tokens`, not the checkpoint's block_size
(qwen3_dflash2.py:248-258). 0.30.0 to 0.32.0 load it the same way
(`qwen3_dflash2.py` is unchanged but for 0.30.0's missing Triton kernel,
which only its forward calls).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from dspark.schema.engines.base import FamilyLoader, served_wrong
from dspark.schema.engines.vllm import dflash_gqa
from dspark.schema.engines.vllm.common import at, engine_refusal
from dspark.schema.families.dflash2 import BUILD_FIELDS, SERVE_FIELDS, dflash2_value
from dspark.schema.families.dflash_gqa import gqa_head_dim
from dspark.schema.findings import Finding

DFLASH2 = "vllm/model_executor/models/qwen3_dflash2.py"


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def build_fields(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """`config.dflash_config[key]` for the four build fields, int()ed
    (DFlash2Qwen3DecoderLayer.__init__ qwen3_dflash2.py:248-258;
    DFlash2Qwen3Model.__init__:376-389): absent there, a KeyError at build,
    whatever the top level holds; a group that does not divide hidden_size
    is refused (DFlashGroupedConv.__init__:182-185)."""
    nested = config.get("dflash_config")
    nested = nested if isinstance(nested, Mapping) else {}
    absent = [key for key in BUILD_FIELDS if key not in nested]
    unread = [f"{key} = {nested[key]!r}" for key in BUILD_FIELDS if key in nested and _as_int(nested[key]) is None]
    if absent or unread:
        elsewhere = [key for key in absent if key in config]
        text = ("DFlash2 builds its convolution and selector from dflash_config only: "
                + (f"{', '.join(absent)} absent there" if absent else "")
                + (" (the top level's " + ", ".join(elsewhere) + " is not read)" if elsewhere else "")
                + ("; " if absent and unread else "") + (f"int() cannot read {', '.join(unread)}" if unread else ""))
        source = at("248-258, 376-389 (DFlash2Qwen3Model.__init__)", DFLASH2, "DFlash2Qwen3DecoderLayer.__init__")
        return [engine_refusal(config_file, text, source, "dflash_config",
                               "Write conv_kernel_size, conv_group_size, selector_rank and selector_top_k in "
                               "dflash_config.")]
    group, hidden = _as_int(nested["conv_group_size"]), config.get("hidden_size")
    if group is not None and (group <= 0 or (isinstance(hidden, int) and hidden % group)):
        return [engine_refusal(config_file, f"dflash_config.conv_group_size {group} does not divide hidden_size "
                               f"{hidden}: the grouped convolution raises at build",
                               at("182-185", DFLASH2, "DFlashGroupedConv.__init__"),
                               "dflash_config.conv_group_size", "Write the group size the draft was trained with.")]
    return []


def serve_fields_nested_only(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """input_embedding_scale, output_multiplier and final_logit_softcapping
    are read from dflash_config only (qwen3_dflash2.py:376-379, 400-406): one
    written only at the top level is never read (TokenSpeed's model reads
    input_embedding_scale there too)."""
    nested = config.get("dflash_config")
    nested = nested if isinstance(nested, Mapping) else {}
    neutral = {"input_embedding_scale": 1.0, "output_multiplier": 1.0, "final_logit_softcapping": 0.0}
    findings = []
    for key in SERVE_FIELDS:
        value = config.get(key)
        if key in nested or value is None or value == neutral[key]:
            continue
        findings.append(served_wrong(
            config_file, f"{key} is {value!r} at the top level only; vLLM's DFlash2 reads it from dflash_config "
            "alone and serves the draft without it",
            at("376-379, 400-406 (DFlash2Qwen3ForCausalLM.__init__)", DFLASH2, "DFlash2Qwen3Model.__init__"), key,
            f"Write {key} in dflash_config."))
    return findings


def block_from_launch(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """ENG004 (a note): the convolution's block is the launch's
    `1 + num_speculative_tokens` (qwen3_dflash2.py:253-256); the checkpoint's
    block_size is not read: launch with one fewer speculative token than the
    block the draft was trained on."""
    size = _as_int(dflash2_value(config, "block_size", config.get("block_size")))
    if size is None or size < 2:
        return []
    source = at("253-256", DFLASH2, "DFlash2Qwen3DecoderLayer.__init__")
    return [Finding(
        "ENG004",
        f"{config_file}: block_size = {size}: launch vLLM with --speculative-config '{{\"method\": \"dflash\", "
        f"\"num_speculative_tokens\": {size - 1}, ...}}'; the convolutions run over blocks of 1 + "
        f"num_speculative_tokens positions ({source.cite()}), and another count shifts every position the "
        "kernels were trained on.",
        file=config_file,
        detail={"field": "block_size", "num_speculative_tokens": size - 1, "source": source.cite()},
    )]


_DSPARK_ONLY = (dflash_gqa.dspark_needs_qwen3, dflash_gqa.markov_rank_required)

LOADER: FamilyLoader = dataclasses.replace(
    dflash_gqa.LOADER,
    family="dflash2",
    model_class="DFlash2Qwen3ForCausalLM",
    # DFlashQwen3ForCausalLM.load_weights and its mapper (qwen3_dflash.py:390-410,
    # 851-892): no DSpark confidence head here, so such a name has no destination.
    skips=tuple(rule for rule in dflash_gqa.LOADER.skips if "confidence_head" not in rule.pattern),
    config_limits=(*(limit for limit in dflash_gqa.LOADER.config_limits if limit not in _DSPARK_ONLY),
                   build_fields, serve_fields_nested_only, block_from_launch),
    # DFlash2Qwen3DecoderLayer subclasses DFlashQwen3DecoderLayer (qwen3_dflash2.py:229-246) and
    # nothing reads attention_mode: GQA attention for every draft, so an MLA
    # draft's projections have no destination (and q/k/v none shipped).
    fixed_features={"gqa": True, "mla": False},
    dims={**dflash_gqa.LOADER.dims, "o_head": gqa_head_dim},
    int_coerced_fields=tuple(f"dflash_config.{key}" for key in BUILD_FIELDS),
    sources={
        **{k: v for k, v in dflash_gqa.LOADER.sources.items() if "dspark" not in k},
        "model": at("361-392", DFLASH2, "DFlash2Qwen3Model"),
        "candidates": at("395-413", DFLASH2, "DFlash2Qwen3ForCausalLM"),
        "convolution": at("170-227", DFLASH2, "DFlashGroupedConv"),
        "selector": at("314-358", DFLASH2, "CandidateSelector"),
        "layer": at("229-287", DFLASH2, "DFlash2Qwen3DecoderLayer"),
        "registry": at("666", "vllm/model_executor/models/registry.py", "_SPECULATIVE_DECODING_MODELS"),
        "speculator": at("42-47", "vllm/v1/worker/gpu/spec_decode/__init__.py", "init_speculator"),
    },
)
