"""vLLM 0.33.0's loaders for P-EAGLE drafts (`PeagleLlamaForCausalLM`,
`PeagleQwen3ForCausalLM`): its EAGLE-3 classes, built and loaded as for an
EAGLE-3 draft (eagle3_llama.py, eagle3_qwen3.py) except where parallel
drafting changes them.

What parallel drafting changes, read in the wheel:

* The registry maps both names to the EAGLE-3 classes
  (model_executor/models/registry.py:698-706). speculators' `peagle` config
  is read into them by its layer's model_type, with `mask_token_id` as
  `pard_token` and `norm_before_residual` false when absent
  (transformers_utils/configs/speculators/algos.py::update_peagle:53-87),
  and launched as method eagle3 with parallel_drafting
  (base.py::SpeculatorsConfig.build_vllm_speculative_config:97-137).
* With parallel_drafting the class registers a `mask_hidden` buffer of
  [1, taps x target_hidden_size] and `load_weights` copies a shipped
  `mask_hidden` into it viewed flat, and raises when none is shipped
  (llama_eagle3.py:347-354, 431-441, 450-455; qwen3_eagle3.py:326-333,
  409-420, 428-433). The proposer reads the mask token from the config
  (dflash_config's, then mask_token_id, then pard_token, ...) and refuses
  a config with none (v1/spec_decode/llm_base_proposer.py::
  SpecDecodeBaseProposer._init_parallel_drafting_params:355-384), and feeds
  `mask_hidden` through fc to every parallel position (1403-1416).
* Model Runner V2 has no parallel drafting for EAGLE: the server falls
  back to the V1 runner (config/vllm.py::VllmConfig.
  _get_v2_model_runner_unsupported_features:3070-3077, use_v2_model_runner:
  758-765), which captures the top-level tap list, else eagle_config's,
  else dflash_config's (each + 1), else the target's defaults
  (v1/worker/gpu_model_runner.py::GPUModelRunner.
  _get_eagle3_aux_layers_from_config:5190-5224).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from dspark.schema.engines.base import FIRST_TRUTHY, FamilyLoader, FeatureSupport, Source, TapPaths
from dspark.schema.engines.vllm import eagle3_llama, eagle3_qwen3
from dspark.schema.engines.vllm.common import (
    LAYER_OUTPUT_NUMBERING,
    LLAMA_EAGLE3,
    QWEN3_EAGLE3,
    VLLM_CONFIG,
    at,
    silu_only,
    SILU_ONLY_SOURCES,
    SPECULATORS_ALGOS,
    tap_agreement,
    tap_order,
    target_hidden_size_not_null,
)
from dspark.schema.families.eagle3_common import TAP_IDS_FIELD
from dspark.schema.findings import Finding

V1_RUNNER = "vllm/v1/worker/gpu_model_runner.py"
PROPOSER = "vllm/v1/spec_decode/llm_base_proposer.py"
SPECULATORS_BASE = "vllm/transformers_utils/configs/speculators/base.py"

V1_TARGET_TAPS = TapPaths(paths=(TAP_IDS_FIELD, f"eagle_config.{TAP_IDS_FIELD}", "dflash_config.target_layer_ids"),
                          pick=FIRST_TRUTHY)
V1_TARGET_TAPS_SOURCE = at("5190-5224", V1_RUNNER, "GPUModelRunner._get_eagle3_aux_layers_from_config")
RUNNER_FALLBACK = at("3070-3077", VLLM_CONFIG, "VllmConfig._get_v2_model_runner_unsupported_features")
RUNNER_CHOICE = at("758-765", VLLM_CONFIG, "VllmConfig.use_v2_model_runner")
MASK_TOKEN_SOURCE = at("355-384", PROPOSER, "SpecDecodeBaseProposer._init_parallel_drafting_params")
LAUNCH_SOURCE = at("97-137", SPECULATORS_BASE, "SpeculatorsConfig.build_vllm_speculative_config")
# A plain config launched as eagle3 goes through EAGLEConfig, which prefixes
# "Eagle3" to every architecture that neither starts nor ends with it:
# PeagleLlamaForCausalLM becomes Eagle3PeagleLlamaForCausalLM, which the
# registry does not hold, and the config is refused
# (transformers_utils/configs/eagle.py::EAGLEConfig.__init__:55-63). Only the
# speculators reader, which builds the config without EAGLEConfig, reaches
# the P-EAGLE names.
EAGLE3_RENAME_SOURCE = at("55-63", "vllm/transformers_utils/configs/eagle.py", "EAGLEConfig.__init__")


# update_peagle copies draft_vocab_size, target_hidden_size,
# norm_before_residual, norm_before_fc, the mask token and the tap list into
# the config it builds, never fc_norm or norm_output (update_eagle3 does):
# the class reads both as false (llama_eagle3.py:231-240, 252), so fc_norm
# weights have no destination.
READER_DROPS = at("53-87", SPECULATORS_ALGOS, "update_peagle")


# norm_output only picks the state the class returns for the next drafting
# step (llama_eagle3.py:285-288); parallel drafting runs one forward pass a
# step (v1/spec_decode/llm_base_proposer.py:628-636), so nothing is fed back
# and the dropped flag changes nothing served: no finding.
NORM_OUTPUT_DROPPED = FeatureSupport(
    supported=False, source=READER_DROPS,
    when_unsupported="its reader of speculators' P-EAGLE config never copies norm_output; the returned state it "
    "picks is never fed back in parallel drafting's one forward pass")


def _reader_drops(base: FamilyLoader) -> dict:
    return {
        **base.features,
        "fc_norm": FeatureSupport(
            supported=False, source=READER_DROPS,
            when_unsupported="vLLM's reader of speculators' P-EAGLE config never copies fc_norm, so the class is "
            "built without the per-tap norms and shipped fc_norm weights have no destination, which fails the load"),
        "norm_output": NORM_OUTPUT_DROPPED,
    }


def _v1_taps(base: FamilyLoader):
    return dataclasses.replace(base.taps, target=V1_TARGET_TAPS, source=V1_TARGET_TAPS_SOURCE,
                               path_numbering={"dflash_config.target_layer_ids": LAYER_OUTPUT_NUMBERING})


def parallel_launch(skipped: Source):
    """A config rule, ENG004 (a note): the launch a P-EAGLE draft needs.
    Without parallel_drafting vLLM drafts it one token at a time, drops
    mask_hidden with a log line (`skipped`) and never reads the mask token,
    which is not how the draft was trained to draft."""

    def rule(config: Mapping[str, Any], config_file: str) -> list[Finding]:
        return [Finding(
            "ENG004",
            f"{config_file}: launch vLLM with --speculative-config '{{\"method\": \"eagle3\", "
            f"\"parallel_drafting\": true, ...}}': a P-EAGLE draft drafts every token of a step at once, and vLLM "
            f"reads that only from the launch (its speculators reader sets it for a folder in speculators' format, "
            f"{LAUNCH_SOURCE.cite()}); without it the draft is run one token at a time and its mask_hidden is "
            f"dropped ({skipped.cite()}). The server runs it on Model Runner V1 ({RUNNER_FALLBACK.cite()}; "
            f"{RUNNER_CHOICE.cite()}).",
            file=config_file,
            detail={"method": "eagle3", "parallel_drafting": True, "source": LAUNCH_SOURCE.cite()},
        )]

    return rule


def _limits(taps, draft_text: str, draft_source, silu, width_source, skipped) -> tuple:
    return (parallel_launch(skipped), silu_only(silu), target_hidden_size_not_null(width_source), tap_order(V1_TARGET_TAPS),
            tap_agreement(taps, draft_text, draft_source))


def _peagle_loader(base: FamilyLoader, family: str, model_class: str, path: str, buffer: str, load: str,
                   refusal: str, limits: tuple) -> FamilyLoader:
    taps = _v1_taps(base)
    return dataclasses.replace(
        base,
        family=family,
        model_class=model_class,
        # mask_hidden is loaded, no longer skipped.
        skips=tuple(s for s in base.skips if s.pattern != "mask_hidden"),
        missing_checked=(r"^mask_hidden$",),
        taps=taps,
        features=_reader_drops(base),
        dims={**base.dims, "S": taps.draft_count},
        config_limits=limits(taps),
        sources={**base.sources,
                 "mask_hidden": at(f"{load}, {refusal}", path, f"{model_class}.load_weights"),
                 "mask_hidden buffer": at(buffer, path, f"{model_class}.__init__"),
                 "mask token": MASK_TOKEN_SOURCE,
                 "taps (target)": V1_TARGET_TAPS_SOURCE,
                 "runner": RUNNER_FALLBACK,
                 "runner choice": RUNNER_CHOICE,
                 "native config only": EAGLE3_RENAME_SOURCE},
        mask_token_fallback="",
        native_shape_only="speculators",
    )


LLAMA_LOADER = _peagle_loader(
    eagle3_llama.LOADER, "peagle_llama", "Eagle3LlamaForCausalLM", LLAMA_EAGLE3, "347-354", "431-441", "450-455",
    lambda taps: _limits(taps, "num_aux_hidden_states, else eagle_config's list, else 3",
                         at("209-216", LLAMA_EAGLE3, "LlamaModel.__init__"), SILU_ONLY_SOURCES["llama"],
                         at("218-221", LLAMA_EAGLE3, "LlamaModel.__init__"),
                         at("431-438", LLAMA_EAGLE3, "Eagle3LlamaForCausalLM.load_weights")))

QWEN3_LOADER = _peagle_loader(
    eagle3_qwen3.LOADER, "peagle_qwen3", "Eagle3Qwen3ForCausalLM", QWEN3_EAGLE3, "326-333", "409-420", "428-433",
    lambda taps: _limits(taps, "num_aux_layers, else num_aux_hidden_states, else the top-level "
                         "list, else eagle_config's, else 3", at("201-210", QWEN3_EAGLE3, "Qwen3Eagle3Model.__init__"),
                         SILU_ONLY_SOURCES["qwen"], at("211-214", QWEN3_EAGLE3, "Qwen3Eagle3Model.__init__"),
                         at("409-416", QWEN3_EAGLE3, "Eagle3Qwen3ForCausalLM.load_weights")))
