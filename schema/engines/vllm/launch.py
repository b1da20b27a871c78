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
    FlagSpec(SPEC_CONFIG, JSON_OBJECT, "num_speculative_tokens (a DSpark draft's default is its block size)",
             aliases=("-sc",)),
    FlagSpec(MAX_MODEL_LEN, INT, "the served length the draft's max_position_embeddings must reach", minimum=1),
    FlagSpec(PP, INT, "above 1, a target whose decoder relays no captured state across the stages is refused",
             aliases=("-pp",), minimum=1),
)

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

    def judge(launch: Launch | None, ctx: LaunchContext) -> tuple[list[Finding], Callable[[Finding], Finding]]:
        launched = launch.get(MAX_MODEL_LEN) if launch is not None else None
        findings = positions.judge(version, ctx.family, ctx.config, ctx.config_file, ctx.target, launched,
                                   position_sources)
        if launch is None:
            return findings, keep
        findings.insert(0, ignored_note(launch, FLAGS))
        spec = launch.get(SPEC_CONFIG)
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
                               "block size, from 0.31.0); --max-model-len against the draft's "
                               "max_position_embeddings; the pipeline size against the target's relay of the "
                               "captured taps across stages")


MODEL = model("0.33.0")
