"""What SGLang 0.5.23's launch flags change in a verdict, read from the
wheel (`sglang/srt/...@sglang==0.5.23`).

* `--pp-size` (`--pipeline-parallel-size`): a DFLASH draft is refused at
  any size but 1 (arg_groups/speculative_hook.py::_handle_dflash:319-322);
  a DSPARK draft runs a pipeline only on a prefill server
  (`--disaggregation-mode prefill`, _handle_dspark:713-717). EAGLE-3 at a
  size above 1 is not modelled (named so, LCH004).
* `--speculative-num-draft-tokens`: a DFLASH drafter's block size. Left
  out, it is the draft config's (`dflash_config.block_size` when the key
  is there, else the top level's; 16 when neither: _handle_dflash:389-424,
  speculative/dflash_utils.py::parse_dflash_draft_config:608-617). Given
  and different from the checkpoint's, the worker logs a warning and
  drafts at the launch's size, not the trained one
  (speculative/dflash_worker_v2.py::DFlashWorkerV2.__init__:507-522).
* `--speculative-num-steps`: "DFLASH does not use EAGLE-style
  num_steps/topk" (_handle_dflash:329-330); for EAGLE-3 it sets the chain
  length, which changes no verdict: ignored.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from dspark.schema.engines.base import Source
from dspark.schema.engines.launch import (
    INT,
    TEXT,
    FlagSpec,
    Launch,
    LaunchContext,
    LaunchModel,
    ignored_note,
    keep,
)
from dspark.schema.findings import Finding

RELEASE = "sglang==0.5.23"
HOOK = "sglang/srt/arg_groups/speculative_hook.py"
PP = "--pp-size"
DRAFT_TOKENS = "--speculative-num-draft-tokens"
STEPS = "--speculative-num-steps"
DISAGGREGATION = "--disaggregation-mode"

FLAGS = (
    FlagSpec(PP, INT, "a DFlash draft serves only at 1; a DSpark draft needs a prefill server above 1",
             aliases=("--pipeline-parallel-size",), minimum=1),
    FlagSpec(DRAFT_TOKENS, INT, "a DFlash drafter's block size", minimum=1),
    FlagSpec(STEPS, INT, "read: no verdict of a DFlash or EAGLE-3 draft depends on it"),
    FlagSpec(DISAGGREGATION, TEXT, "a DSpark pipeline needs a prefill server"),
)


def _algorithm(ctx: LaunchContext) -> str:
    if ctx.family != "dflash_gqa":
        return "EAGLE3"
    names = " ".join(str(a) for a in ctx.config.get("architectures") or []) + " " + str(ctx.config.get("model_type"))
    return "DSPARK" if "dspark" in names.lower() else "DFLASH"


def _block_size(config: Mapping[str, Any]) -> Any:
    nested = config.get("dflash_config") if isinstance(config.get("dflash_config"), Mapping) else {}
    return nested["block_size"] if "block_size" in nested else config.get("block_size")


def judge(launch: Launch | None, ctx: LaunchContext) -> tuple[list[Finding], Callable[[Finding], Finding]]:
    algorithm = _algorithm(ctx)
    cf = ctx.config_file
    findings: list[Finding] = []
    if launch is not None:
        findings.append(ignored_note(launch, FLAGS))
    if algorithm == "DFLASH":
        size = _block_size(ctx.config)
        trained = size if isinstance(size, int) and not isinstance(size, bool) and size >= 1 else None
        worker = Source("sglang/srt/speculative/dflash_worker_v2.py", "507-522 (DFlashWorkerV2.__init__)",
                        RELEASE).cite()
        given = launch.get(DRAFT_TOKENS) if launch is not None else None
        if trained is not None and given is None and launch is None:
            findings.append(Finding(
                "LCH008", f"{cf}: block_size = {trained}: the verdict depends on the launch. Without "
                f"{DRAFT_TOKENS}, or with {DRAFT_TOKENS} {trained}, SGLang 0.5.23 drafts blocks of {trained} as "
                f"trained; any other value is served (a log warning) at that size, not the trained one "
                f"({worker}). Serve with {DRAFT_TOKENS} {trained}; pass --launch to judge your flags.",
                file=cf, detail={"setting": DRAFT_TOKENS, "block_size": trained,
                                 "serve_with": f"{DRAFT_TOKENS} {trained}",
                                 "verdicts": {str(trained): "loads", "other": "served wrong"}}))
        elif trained is not None and given is not None and given != trained:
            findings.append(Finding(
                "LCH002", f"{cf}: block_size = {trained}, and the launch's {DRAFT_TOKENS} {given}: SGLang 0.5.23 "
                f"logs a warning and drafts blocks of {given}, not the {trained} the draft was trained at "
                f"({worker}). Serve with {DRAFT_TOKENS} {trained}, or leave it out.",
                file=cf, detail={"block_size": trained, "launch": launch.text}))
    pp = launch.get(PP, 1) if launch is not None else 1
    if pp > 1:
        if algorithm == "DFLASH":
            findings.append(Finding(
                "LCH001", f"{cf}: at {PP} {pp} SGLang 0.5.23 refuses a DFLASH draft: \"Currently DFLASH "
                f"speculative decoding only supports pp_size == 1\" ({Source(HOOK, '319-322 (_handle_dflash)', RELEASE).cite()}). "
                f"Serve it at {PP} 1.", file=cf, detail={"pp_size": pp}))
        elif algorithm == "DSPARK" and str(launch.get(DISAGGREGATION, "null")).lower() != "prefill":
            findings.append(Finding(
                "LCH001", f"{cf}: at {PP} {pp} SGLang 0.5.23 runs a DSpark draft only on a prefill server "
                f"({DISAGGREGATION} prefill): as given it stops "
                f"({Source(HOOK, '713-717 (_handle_dspark)', RELEASE).cite()}).", file=cf, detail={"pp_size": pp}))
        else:
            findings.append(Finding(
                "LCH004", f"--launch: {PP} {pp} for a {ctx.family} draft on sglang@0.5.23 is read but not "
                "modelled: dspark judges the draft as at size 1.", detail={"launch": launch.text,
                                                                          "not_modelled": [PP]}))
    return findings, keep


MODEL = LaunchModel(flags=FLAGS, judge=judge,
                    summary="--speculative-num-draft-tokens against a DFlash draft's block size; --pp-size "
                            "(DFlash refused above 1, DSpark only on a prefill server)")
