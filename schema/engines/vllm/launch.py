"""What vLLM's launch flags change in a verdict, per release, read from
each wheel (`vllm/...@vllm==X`).

* `--speculative-config JSON` (`-sc`): without `num_speculative_tokens`,
  `SpeculativeConfig.__post_init__` takes it, for a DSpark draft (`method:
  dspark`), from the draft config's top-level `block_size`, then
  `dspark_block_size` (0.31.0 on: speculative.py:1592-1618@0.33.0,
  1481-1507@0.32.0, 1475-1501@0.31.0); for any other method, and for
  every method on 0.30.0 (which has no DSpark default), from the config's
  `n_predict` (1473-1492@0.30.0). With none, the config refuses the draft
  ("A speculative model was provided, but `num_speculative_tokens` was not
  provided"). Any value given is accepted: no rule ties it to the
  checkpoint's block size for the families dspark models (the one check is
  Qwen3-Omni DSpark's, a target class dspark does not model). Its `method`
  is the one ENG004 names.
* `--speculative-config`'s `max_model_len`: the draft's ModelConfig is
  built with it, and refuses it above the length derived from the draft's
  config (speculative.py::SpeculativeConfig.__post_init__:1423@0.33.0,
  config/model.py::_get_and_verify_max_len); then
  `_maybe_override_draft_max_model_len` refuses it above the server's
  length and keeps it as the draft's max_model_len (1762-1804@0.33.0,
  1613-1656@0.30.0). Through 0.32.0 no runner reads that length (no
  verdict moves). 0.33.0's Model Runner V2 lowers the server's length to
  it for a draft whose RoPE is not raised to the target's
  (config/vllm.py::VllmConfig._limit_max_model_len_to_draft): ROP004.
* `--max-model-len`: the served length the draft's max_position_embeddings
  is judged against (positions.py), else the target's derived one.
* `--pipeline-parallel-size` (`-pp`): Model Runner V2 relays an EAGLE-3,
  DFlash or DSpark draft's taps across the stages only for a target whose
  decoder declares it, and refuses any other (pipeline.py). A P-EAGLE
  draft (the V1 runner) at a pipeline is read and named as not modelled.
  At a size above 1 the proposer also shares no embedding with the target
  (v1/spec_decode/llm_base_proposer.py::_maybe_share_embeddings:1418-1424@0.33.0),
  so a draft that ships none keeps the one it was built with; dspark does
  not judge that part, and says so (LCH004).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from dspark.schema.engines.base import Source
from dspark.schema.engines.launch import (
    INT,
    JSON_OBJECT,
    FlagSpec,
    Launch,
    LaunchContext,
    LaunchModel,
    ignored_note,
    keep,
)
from dspark.schema.engines.vllm import pipeline, positions
from dspark.schema.findings import Finding

SPEC_CONFIG = "--speculative-config"
PP = "--pipeline-parallel-size"
MAX_MODEL_LEN = "--max-model-len"
SPECULATIVE = "vllm/config/speculative.py"
PROPOSER = "vllm/v1/spec_decode/llm_base_proposer.py"

FLAGS = (
    FlagSpec(SPEC_CONFIG, JSON_OBJECT, "num_speculative_tokens (a DSpark draft's default is its block size); "
             "max_model_len against the draft's and the served length",
             aliases=("-sc",)),
    FlagSpec(MAX_MODEL_LEN, INT, "the served length the draft's max_position_embeddings must reach", minimum=1),
    FlagSpec(PP, INT, "above 1, a target whose decoder relays no captured state across the stages is refused",
             aliases=("-pp",), minimum=1),
)

# Per release: where the draft's ModelConfig is built with the
# --speculative-config max_model_len, and
# _maybe_override_draft_max_model_len (its lines, its call in __post_init__).
_DRAFT_LENGTH = {
    "0.33.0": ("1423", "1762-1804", "1687"),
    "0.32.0": ("1306", "1632-1674", "1557"),
    "0.31.0": ("1300", "1626-1668", "1551"),
    "0.30.0": ("1286", "1613-1656", "1542"),
}


# Per release: where __post_init__ defaults num_speculative_tokens (and
# refuses without one), whether it has the DSpark block-size default, and
# _maybe_share_embeddings.
_DEFAULTS = {
    "0.33.0": ("1592-1618", True, "1418-1424"),
    "0.32.0": ("1481-1507", True, "1416-1422"),
    "0.31.0": ("1475-1501", True, "1416-1422"),
    "0.30.0": ("1473-1492", False, "1424-1430"),
}


def default_speculative_tokens(version: str, method: str | None, config: Mapping[str, Any]) -> tuple[Any, str]:
    """The num_speculative_tokens SpeculativeConfig takes when the launch
    gives none, and the config key it came from (None: refused)."""
    if method == "dspark" and _DEFAULTS[version][1]:
        for key in ("block_size", "dspark_block_size"):
            if config.get(key) is not None:
                return config[key], key
        return None, ""
    if config.get("n_predict") is not None:
        return config["n_predict"], "n_predict"
    return None, ""


def model(version: str) -> LaunchModel:
    """vLLM `version`'s launch model."""
    lines, dspark_default, share_lines = _DEFAULTS[version]
    release = f"vllm=={version}"
    defaults = Source(SPECULATIVE, lines, release, "SpeculativeConfig.__post_init__")
    shares = Source(PROPOSER, f"{share_lines} (_maybe_share_embeddings)", release,
                    "SpecDecodeBaseProposer._maybe_share_embeddings")
    position_sources = positions.sources(version)
    pipeline_sources = pipeline.sources(version)
    draft_config_line, helper_lines, helper_call = _DRAFT_LENGTH[version]
    draft_length_sources = {
        "draft config": Source(SPECULATIVE, draft_config_line, release, "SpeculativeConfig.__post_init__"),
        "draft length": Source(SPECULATIVE, f"{helper_lines} (called from SpeculativeConfig.__post_init__:"
                               f"{helper_call})", release, "SpeculativeConfig._maybe_override_draft_max_model_len"),
    }

    def draft_length(spec: Mapping[str, Any] | None, ctx: LaunchContext, served: int | None
                     ) -> tuple[list[Finding], int | None]:
        """The --speculative-config max_model_len against the draft's derived
        length and the served one: (findings, the value vLLM keeps as the
        draft's max_model_len, None where not given or refused)."""
        value = spec.get("max_model_len") if spec is not None else None
        if value is None:
            return [], None
        cf = ctx.config_file
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return [Finding(
                "LCH001", f"--launch: --speculative-config max_model_len {value!r}: vLLM {version}'s "
                f"SpeculativeConfig takes an integer of 1 or more and refuses the launch "
                f"({draft_length_sources['draft length'].cite()}).", file=cf, detail={"max_model_len": value})], None
        own = ctx.config.get("max_position_embeddings")
        derived = positions.derived_length(own, positions.rope_blocks(ctx.config))
        ceiling = ctx.config.get("model_max_length")
        if derived is not None and value > derived and not (isinstance(ceiling, int) and value <= ceiling):
            return [Finding(
                "LCH001", f"{cf}: the launch's --speculative-config max_model_len {value} is above the draft's "
                f"derived length, {derived} (max_position_embeddings {own}): vLLM {version} builds the draft's "
                f"config with it and refuses, \"User-specified max_model_len ({value}) is greater than the derived "
                f"max_model_len\" ({draft_length_sources['draft config'].cite()}; "
                f"{position_sources['derive'].cite()}). Give {derived} or less, or leave it out.", file=cf,
                detail={"max_model_len": value, "derived": derived})], None
        if served is not None and value > served:
            return [Finding(
                "LCH001", f"{cf}: the launch's --speculative-config max_model_len {value} is above the server's, "
                f"{served}: vLLM {version} refuses, \"speculative_max_model_len={value} cannot be larger than "
                f"target_max_model_len={served}\" ({draft_length_sources['draft length'].cite()}). Give {served} or "
                "less, or leave it out.", file=cf, detail={"max_model_len": value, "served_length": served})], None
        if version != "0.33.0" or served is None or value >= served:
            return [], value
        kinds = sorted({positions.rope_type(b) for b in positions.rope_blocks(ctx.config)})
        if all(k in positions.CACHE_ONLY for k in kinds):
            return [], value
        if isinstance(own, int) and not isinstance(own, bool) and own < served:
            return [], value  # positions.judge names the lowering, to this value
        return [Finding(
            "ROP004", f"{cf}: the launch's --speculative-config max_model_len {value} is below the served length "
            f"{served}; the draft's {'/'.join(kinds)} RoPE is not one whose length vLLM {version} raises to the "
            f"target's, so Model Runner V2 lowers the server's max_model_len to {value} "
            f"({position_sources['limit'].cite()}): served as trained, on a shorter context than asked for, with a "
            "warning in the server's log only. Leave max_model_len out of --speculative-config to serve the full "
            "length.", file=cf, detail={"max_model_len": value, "served_length": value, "requested_length": served})
        ], value

    def judge(launch: Launch | None, ctx: LaunchContext) -> tuple[list[Finding], Callable[[Finding], Finding]]:
        launched = launch.get(MAX_MODEL_LEN) if launch is not None else None
        spec = launch.get(SPEC_CONFIG) if launch is not None else None
        length_findings, kept = draft_length(spec, ctx, positions.served_length(ctx.target, launched)[0])
        findings = positions.judge(version, ctx.family, ctx.config, ctx.config_file, ctx.target, launched,
                                   position_sources, draft_max_model_len=kept) + length_findings
        if launch is None:
            return findings, keep
        findings.insert(0, ignored_note(launch, FLAGS))
        method = spec.get("method") if spec is not None else None
        if spec is not None and method in ("dspark", "dflash", "eagle3", "eagle") \
                and spec.get("num_speculative_tokens") is None:
            size, key = default_speculative_tokens(version, method, ctx.config)
            cite = defaults.cite()
            keys = ("top-level block_size or dspark_block_size" if method == "dspark" and dspark_default
                    else "n_predict")
            if size is None:
                findings.append(Finding(
                    "LCH001", f"{ctx.config_file}: the launch's --speculative-config gives no "
                    f"num_speculative_tokens, and the draft's config has no {keys} to take it from: vLLM {version} "
                    f"refuses the draft ({cite}). Add num_speculative_tokens (the block size the draft was trained "
                    "at) to --speculative-config" + (", or write block_size in config.json." if keys != "n_predict"
                                                     else "."),
                    file=ctx.config_file, detail={"launch": launch.text}))
            else:
                findings.append(Finding(
                    "LCH005", f"{ctx.config_file}: num_speculative_tokens is taken from the draft's {key}, "
                    f"{size!r} ({cite}).", file=ctx.config_file, detail={"num_speculative_tokens": size}))
        pp = launch.get(PP, 1)
        if pp > 1:
            parallel_drafting = ctx.family.startswith("peagle")
            if not parallel_drafting:
                run_as = method or positions.draft_method(ctx.family, ctx.config)
                findings += pipeline.judge(version, run_as, pp, ctx, pipeline_sources, launch.text)
            not_modelled = "a P-EAGLE draft (the V1 runner) at a pipeline, and " if parallel_drafting else ""
            findings.append(Finding(
                "LCH004", f"--launch: {PP} {pp} on vllm@{version}: {not_modelled}what a draft that ships no "
                f"embedding serves when the proposer shares none with the target there ({shares.cite()}) is not "
                "modelled.", detail={"launch": launch.text, "not_modelled": [PP]}))
        return findings, keep

    return LaunchModel(flags=FLAGS, judge=judge,
                       summary="--speculative-config's num_speculative_tokens (a DSpark draft's default is its "
                               "block size, from 0.31.0) and max_model_len; --max-model-len against the draft's "
                               "max_position_embeddings; the pipeline size against the target's relay of the "
                               "captured taps across stages")


MODEL = model("0.33.0")
