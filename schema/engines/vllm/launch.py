"""What vLLM 0.33.0's launch flags change in a verdict, read from the wheel
(`vllm/...@vllm==0.33.0`).

* `--speculative-config JSON` (`-sc`): its `num_speculative_tokens`, for a
  DSpark draft (`method: dspark`), defaults to the draft config's
  top-level `block_size`, then `dspark_block_size`; with neither, the
  config refuses the draft ("A speculative model was provided, but
  `num_speculative_tokens` was not provided":
  config/speculative.py::SpeculativeConfig.__post_init__:1593-1618). Any
  other value is accepted: no rule ties it to the checkpoint's block size
  for the draft families dspark models (the one check, 167-201, is
  Qwen3-Omni DSpark's, a target class dspark does not model). Its `method`
  is the one ENG004 names.
* `--pipeline-parallel-size` (`-pp`): read, not modelled. At a size above
  1 the proposer shares no embedding with the target
  (v1/spec_decode/llm_base_proposer.py::_maybe_share_embeddings:1418-1424),
  so a draft that ships none keeps the one it was built with; dspark does
  not yet judge what each family then serves, and says so (LCH004).
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
from dspark.schema.findings import Finding

RELEASE = "vllm==0.33.0"
SPEC_CONFIG = "--speculative-config"
PP = "--pipeline-parallel-size"

FLAGS = (
    FlagSpec(SPEC_CONFIG, JSON_OBJECT, "num_speculative_tokens (a DSpark draft's default is its block size)",
             aliases=("-sc",)),
    FlagSpec(PP, INT, "read, not modelled: the proposer shares no embedding at a size above 1", aliases=("-pp",),
             minimum=1),
)


def _method(launch: Launch, ctx: LaunchContext) -> str | None:
    spec = launch.get(SPEC_CONFIG) or {}
    return spec.get("method")


def judge(launch: Launch | None, ctx: LaunchContext) -> tuple[list[Finding], Callable[[Finding], Finding]]:
    if launch is None:
        return [], keep
    findings = [ignored_note(launch, FLAGS)]
    spec = launch.get(SPEC_CONFIG)
    if spec is not None and spec.get("method") == "dspark" and spec.get("num_speculative_tokens") is None:
        config: Mapping[str, Any] = ctx.config
        size = config.get("block_size")
        size = config.get("dspark_block_size") if size is None else size
        cite = Source("vllm/config/speculative.py", "1593-1618 (SpeculativeConfig.__post_init__)", RELEASE).cite()
        if size is None:
            findings.append(Finding(
                "LCH001", f"{ctx.config_file}: the launch's --speculative-config gives no num_speculative_tokens, "
                "and the draft's config has no top-level block_size or dspark_block_size to take it from: vLLM "
                f"refuses the draft ({cite}). Add num_speculative_tokens (the block size the draft was trained "
                "at) to --speculative-config, or write block_size in config.json.",
                file=ctx.config_file, detail={"launch": launch.text}))
        else:
            findings.append(Finding(
                "LCH005", f"{ctx.config_file}: num_speculative_tokens is taken from the draft's block size, "
                f"{size!r} ({cite}).", file=ctx.config_file, detail={"num_speculative_tokens": size}))
    if launch.get(PP, 1) > 1:
        cite = Source("vllm/v1/spec_decode/llm_base_proposer.py", "1418-1424 (_maybe_share_embeddings)",
                      RELEASE).cite()
        findings.append(Finding(
            "LCH004", f"--launch: {PP} {launch.get(PP)} on vllm@0.33.0 is read but not modelled: the proposer "
            f"shares no embedding with the target there ({cite}), and dspark judges the draft as at size 1.",
            detail={"launch": launch.text, "not_modelled": [PP]}))
    return findings, keep


MODEL = LaunchModel(flags=FLAGS, judge=judge,
                    summary="--speculative-config's num_speculative_tokens for a DSpark draft; the pipeline size "
                            "is read and named as not modelled")
