"""What SGLang's launch flags change in a verdict, per release, read from
each wheel (`sglang/srt/...@sglang==X`) and run through its own
`prepare_server_args` and drafting workers by the conformance suite.

* `--pp-size` (`--pipeline-parallel-size`):
  - a DFLASH draft is refused at any size but 1
    (arg_groups/speculative_hook.py::_handle_dflash@0.5.23:319-322, in
    every release);
  - a DSPARK draft runs a pipeline only on a prefill server
    (`--disaggregation-mode prefill`, ::_handle_dspark@0.5.23:713-717,
    since 0.5.21); 0.5.20 refuses it at any size but 1 (565-568);
  - an EAGLE-3 draft runs on the last pipeline stage
    (speculative/eagle_worker_v2.py::EAGLEWorkerV2.__init__@0.5.23:1334),
    whose target forward walks only that stage's layers
    (models/llama.py::LlamaModel.forward@0.5.23:486-497; the others hand
    on the residual, not what they captured) and sets the capture there
    only (::LlamaForCausalLM.set_eagle3_layers_to_capture@0.5.23:929-941).
    The stages split the layers evenly, the extra ones to the last
    (distributed/utils.py::get_pp_indices@0.5.23:110-150): the last stage
    holds layers N - ceil(N / P) .. N - 1, and a tap on the output of a
    layer before N - ceil(N / P) - 1 is never captured, without a word. fc
    then reads fewer taps than it was built for (the first request fails,
    or with one tap left and the widths meeting fc is skipped and the draft
    served wrong). `SGLANG_PP_LAYER_PARTITION` moves the split; dspark
    judges the default one and says so.
* `--speculative-num-draft-tokens`: a DFLASH drafter's block size. Left
  out, it is the draft config's (`dflash_config.block_size` when the key
  is there, else the top level's; 16 when neither: ::_handle_dflash@0.5.23:
  389-424, speculative/dflash_utils.py::parse_dflash_draft_config:608-617).
  Given and different from the checkpoint's, the worker logs a warning and
  drafts at the launch's size, not the trained one
  (speculative/dflash_worker_v2.py::DFlashWorkerV2.__init__@0.5.23:507-522).
  `--speculative-dflash-block-size` sets the same size; given with a
  different `--speculative-num-draft-tokens` the server stops
  (::_handle_dflash@0.5.23:368-387). For a DSPARK draft the launch's count
  must be gamma + 1, gamma being the config's `dspark_block_size` or else
  its DFlash block size, or the server stops (::_handle_dspark@0.5.23:
  807-839; speculative/dspark_components/dspark_config.py::
  parse_dspark_draft_config).
* `--speculative-dspark-block-size`: a DSPARK draft's gamma, taken over the
  checkpoint's (::_handle_dspark@0.5.23:807-813, 643-649@0.5.20); the
  server sets `--speculative-num-draft-tokens` to it + 1, and stops when
  that flag is given otherwise (::_handle_dspark@0.5.23:825-839). The
  worker takes gamma from that count and, when the checkpoint declares
  another, logs a warning and drafts at the launch's gamma, not the trained
  one (speculative/dspark_components/dspark_config.py::
  resolve_runtime_config@0.5.23:84-134, the same in 0.5.20-0.5.22).
* `--speculative-num-steps`: "DFLASH does not use EAGLE-style
  num_steps/topk" (::_handle_dflash@0.5.23:329-330, overridden to 1); for
  EAGLE-3 it sets the chain length, which changes no verdict: read, no rule.
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
from dspark.schema.families.base import is_int
from dspark.schema.families.eagle3_common import default_taps
from dspark.schema.findings import Finding
from dspark.schema.records import record

HOOK = "sglang/srt/arg_groups/speculative_hook.py"
WORKER = "sglang/srt/speculative/dflash_worker_v2.py"
EAGLE_WORKER = "sglang/srt/speculative/eagle_worker_v2.py"
PP_SPLIT = "sglang/srt/distributed/utils.py"
LLAMA = "sglang/srt/models/llama.py"
PP = "--pp-size"
DRAFT_TOKENS = "--speculative-num-draft-tokens"
DFLASH_BLOCK = "--speculative-dflash-block-size"
DSPARK_BLOCK = "--speculative-dspark-block-size"
DSPARK_CONFIG = "sglang/srt/speculative/dspark_components/dspark_config.py"
STEPS = "--speculative-num-steps"
DISAGGREGATION = "--disaggregation-mode"

FLAGS = (
    FlagSpec(PP, INT, "a DFlash draft serves only at 1; a DSpark draft needs a prefill server above 1; an "
             "EAGLE-3 draft's taps must lie on the last stage", aliases=("--pipeline-parallel-size",), minimum=1),
    FlagSpec(DRAFT_TOKENS, INT, "a DFlash drafter's block size; a DSpark draft's gamma + 1", minimum=1),
    FlagSpec(DFLASH_BLOCK, INT, "a DFlash drafter's block size", minimum=1),
    FlagSpec(DSPARK_BLOCK, INT, "a DSpark drafter's gamma, over the checkpoint's", minimum=1),
    FlagSpec(STEPS, INT, "read: no verdict of a DFlash or EAGLE-3 draft depends on it"),
    FlagSpec(DISAGGREGATION, TEXT, "a DSpark pipeline needs a prefill server"),
)


@record
class Rules:
    """Where one release's launch rules sit in its wheel."""

    version: str
    dflash_pp: Source
    dflash_sizes: Source  # both size flags given and differing: the server stops
    dflash_block: Source  # the block size left out: the draft config's
    worker: Source  # given: the worker drafts at it, with a warning
    dspark_pp: Source
    dspark_pp_needs_prefill: bool  # False: refused at any pp size above 1
    dspark_gamma: Source
    dspark_worker: Source  # gamma from the draft-token count; another in the checkpoint: a warning
    eagle_stage: Source  # the EAGLE-3 draft runs on the last stage
    pp_split: Source
    stage_capture: Source


def _at(version: str, path: str, lines: str, qualname: str) -> Source:
    return Source(path, lines, f"sglang=={version}", qualname)


# (dflash pp, dflash both sizes, dflash default, worker, dspark pp, dspark gamma,
#  EAGLE-3 last stage, get_pp_indices, the last stage's loop and setter)
_LINES = {
    "0.5.23": ("319-322", "368-387", "389-424", "507-522", "713-717", "807-839", "1334", "110-150",
               "486-497, 929-941"),
    "0.5.22": ("302-305", "351-370", "372-407", "488-503", "652-656", "732-764", "1268", "110-150",
               "479-490, 922-934"),
    "0.5.21": ("280-283", "329-348", "350-385", "476-491", "629-633", "709-741", "1228", "105-145",
               "439-451, 889-901"),
    "0.5.20": ("216-219", "265-284", "286-321", "456-471", "565-568", "643-675", "1183", "95-135",
               "440-452, 890-902"),
}


def rules(version: str) -> Rules:
    dflash_pp, sizes, block, worker, dspark_pp, gamma, stage, split, capture = _LINES[version]
    return Rules(
        version=version,
        dflash_pp=_at(version, HOOK, dflash_pp, "_handle_dflash"),
        dflash_sizes=_at(version, HOOK, sizes, "_handle_dflash"),
        dflash_block=_at(version, HOOK, block, "_handle_dflash"),
        worker=_at(version, WORKER, worker, "DFlashWorkerV2.__init__"),
        dspark_pp=_at(version, HOOK, dspark_pp, "_handle_dspark"),
        dspark_pp_needs_prefill=version != "0.5.20",
        dspark_gamma=_at(version, HOOK, gamma, "_handle_dspark"),
        dspark_worker=_at(version, DSPARK_CONFIG, "84-134", "resolve_runtime_config"),
        eagle_stage=_at(version, EAGLE_WORKER, stage, "EAGLEWorkerV2.__init__"),
        pp_split=_at(version, PP_SPLIT, split, "get_pp_indices"),
        stage_capture=_at(version, LLAMA, capture, "LlamaModel.forward"),
    )


def _algorithm(ctx: LaunchContext) -> str:
    if ctx.family not in ("dflash_gqa", "dflash2"):
        return "EAGLE3"
    names = " ".join(str(a) for a in ctx.config.get("architectures") or []) + " " + str(ctx.config.get("model_type"))
    return "DSPARK" if "dspark" in names.lower() else "DFLASH"


def _positive(value: Any) -> int | None:
    return value if is_int(value) and value >= 1 else None


def _block_size(config: Mapping[str, Any]) -> Any:
    nested = config.get("dflash_config") if isinstance(config.get("dflash_config"), Mapping) else {}
    return nested["block_size"] if "block_size" in nested else config.get("block_size")


def _gamma(config: Mapping[str, Any]) -> int | None:
    """A DSpark draft's gamma as the parser reads it: the top-level
    `dspark_block_size`, else its DFlash block size."""
    if config.get("dspark_block_size") is not None:
        return _positive(config["dspark_block_size"])
    return _positive(_block_size(config))


def last_stage_start(layers: int, pp_size: int) -> int:
    """The first layer of the last pipeline stage at the default split."""
    return layers - -(-layers // pp_size)


def _dflash(launch: Launch | None, ctx: LaunchContext, r: Rules) -> list[Finding]:
    cf, release = ctx.config_file, f"SGLang {r.version}"
    trained = _positive(_block_size(ctx.config))
    tokens = launch.get(DRAFT_TOKENS) if launch is not None else None
    block = launch.get(DFLASH_BLOCK) if launch is not None else None
    if tokens is not None and block is not None and tokens != block:
        return [Finding(
            "LCH001", f"{cf}: the launch gives {DRAFT_TOKENS} {tokens} and {DFLASH_BLOCK} {block}: {release} stops, "
            f"\"For DFLASH they must match\" ({r.dflash_sizes.cite()}). Give one of them, at the draft's block "
            f"size{f' {trained}' if trained else ''}.", file=cf, detail={"launch": launch.text})]
    given = block if block is not None else tokens
    if trained is not None and given is None and launch is None:
        return [Finding(
            "LCH008", f"{cf}: block_size = {trained}: the verdict depends on the launch. Without {DRAFT_TOKENS}, or "
            f"with {DRAFT_TOKENS} {trained}, {release} drafts blocks of {trained} as trained "
            f"({r.dflash_block.cite()}); any other value is served (a log warning) at that size, not the trained "
            f"one ({r.worker.cite()}). Serve with {DRAFT_TOKENS} {trained}; pass --launch to judge your flags.",
            file=cf, detail={"setting": DRAFT_TOKENS, "block_size": trained,
                             "serve_with": f"{DRAFT_TOKENS} {trained}",
                             "verdicts": {str(trained): "loads", "other": "served wrong"}})]
    if trained is not None and given is not None and given != trained:
        flag = DFLASH_BLOCK if block is not None else DRAFT_TOKENS
        return [Finding(
            "LCH002", f"{cf}: block_size = {trained}, and the launch's {flag} {given}: {release} logs a warning and "
            f"drafts blocks of {given}, not the {trained} the draft was trained at ({r.worker.cite()}). Serve with "
            f"{DRAFT_TOKENS} {trained}, or leave it out.", file=cf, detail={"block_size": trained,
                                                                          "launch": launch.text})]
    return []


def _dspark(launch: Launch | None, ctx: LaunchContext, r: Rules) -> list[Finding]:
    cf, release = ctx.config_file, f"SGLang {r.version}"
    gamma = _gamma(ctx.config)
    tokens = launch.get(DRAFT_TOKENS) if launch is not None else None
    block = launch.get(DSPARK_BLOCK) if launch is not None else None
    if block is not None:
        if tokens is not None and tokens != block + 1:
            return [Finding(
                "LCH001", f"{cf}: the launch gives {DSPARK_BLOCK} {block} and {DRAFT_TOKENS} {tokens}: {release} "
                f"stops, \"DSpark speculative_num_draft_tokens must equal gamma + 1\" (= {block + 1}, the block "
                f"size flag being gamma: {r.dspark_gamma.cite()}). Give {DSPARK_BLOCK} alone"
                f"{f', at the draft gamma {gamma}' if gamma else ''}.", file=cf,
                detail={"dspark_block_size": block, "launch": launch.text})]
        if gamma is not None and block != gamma:
            return [Finding(
                "LCH002", f"{cf}: the draft's gamma (its block size) is {gamma}, and the launch's {DSPARK_BLOCK} "
                f"{block}: {release} takes the launch's ({r.dspark_gamma.cite()}), logs a warning and drafts "
                f"blocks of {block}, not the {gamma} the draft was trained at ({r.dspark_worker.cite()}). Serve "
                f"with {DSPARK_BLOCK} {gamma}, or leave it out.", file=cf,
                detail={"gamma": gamma, "dspark_block_size": block, "launch": launch.text})]
        return []
    if gamma is None or tokens is None or tokens == gamma + 1:
        return []
    return [Finding(
        "LCH001", f"{cf}: the draft's gamma (its block size) is {gamma}, and the launch's {DRAFT_TOKENS} {tokens}: "
        f"{release} stops, \"DSpark speculative_num_draft_tokens must equal gamma + 1\" "
        f"({r.dspark_gamma.cite()}). Serve with {DRAFT_TOKENS} {gamma + 1}, or leave it out.", file=cf,
        detail={"gamma": gamma, "launch": launch.text})]


def _eagle3_taps(ctx: LaunchContext) -> tuple[list[int] | None, int | None]:
    """The target layers whose outputs the draft's taps are (as the target
    reads them), and the target's layer count; None where not known."""
    layers = getattr(ctx.target, "num_hidden_layers", None) if ctx.target is not None else None
    layers = layers if is_int(layers) and layers > 0 else None
    taps = getattr(ctx.loader, "taps", None)
    if taps is None:
        return None, layers
    ids, path = taps.target_ids(ctx.config)
    if ids is None and path is None:
        ids = default_taps(layers) if layers else None
    if not isinstance(ids, list) or not ids or not all(is_int(i) for i in ids):
        return None, layers
    architectures = getattr(ctx.target, "architectures", ()) if ctx.target is not None else ()
    return taps.numbering.layer_outputs(ids, architectures[0] if architectures else None), layers


def _eagle3_pipeline(launch: Launch, pp: int, ctx: LaunchContext, r: Rules) -> list[Finding]:
    cf, release = ctx.config_file, f"SGLang {r.version}"
    outputs, layers = _eagle3_taps(ctx)
    why = (f"the draft runs on the last pipeline stage ({r.eagle_stage.cite()}), whose target forward walks and "
           f"captures only that stage's layers ({r.stage_capture.cite()}), split evenly with the extra layers "
           f"last ({r.pp_split.cite()}; SGLANG_PP_LAYER_PARTITION unset)")
    if outputs is None:
        return [Finding(
            "LCH003", f"{cf}: at {PP} {pp} {why}: which taps it captures depends on the target's layer count and the "
            f"draft's taps, which dspark cannot read here. Pass --target to judge it.", file=cf,
            detail={"setting": PP, "verdicts": {"1": "loads", str(pp): "depends on the target"}})]
    # A tap on the output of layer L is captured entering layer L + 1; the
    # fewest layers a target capturing every tap can have is max(L) + 2.
    fewest = layers or max(outputs) + 2
    first = last_stage_start(fewest, pp)
    lost = sorted({layer for layer in outputs if layer + 1 < first})
    if not lost:
        if layers is None:
            return [Finding(
                "LCH003", f"{cf}: at {PP} {pp} {why}: with a target of {fewest} layers every tap "
                f"({sorted(set(outputs))}) is there, with a deeper one some may not be. Pass --target to judge it.",
                file=cf, detail={"setting": PP, "verdicts": {"1": "loads", str(pp): "depends on the target"}})]
        return []
    stage = f"layers {first}-{fewest - 1} of {fewest}" if layers else f"at most layers {first} onwards"
    return [Finding(
        "LCH002", f"{cf}: at {PP} {pp} {release} never captures the taps on the outputs of layers {lost}: {why}, "
        f"here {stage}. fc reads fewer taps than it was built for: the first request fails, or the draft is served "
        f"wrong. Serve it at {PP} 1, or train on taps of the last stage.", file=cf,
        detail={"pp_size": pp, "lost_taps": lost, "last_stage_first_layer": first})]


def judge_with(r: Rules) -> Callable[[Launch | None, LaunchContext], tuple[list[Finding], Callable]]:
    def judge(launch: Launch | None, ctx: LaunchContext) -> tuple[list[Finding], Callable[[Finding], Finding]]:
        algorithm = _algorithm(ctx)
        cf, release = ctx.config_file, f"SGLang {r.version}"
        findings: list[Finding] = []
        if launch is not None:
            findings.append(ignored_note(launch, FLAGS))
        if algorithm == "DFLASH":
            findings += _dflash(launch, ctx, r)
        elif algorithm == "DSPARK":
            findings += _dspark(launch, ctx, r)
        pp = launch.get(PP, 1) if launch is not None else 1
        if pp <= 1:
            return findings, keep
        if algorithm == "DFLASH":
            findings.append(Finding(
                "LCH001", f"{cf}: at {PP} {pp} {release} refuses a DFLASH draft: \"Currently DFLASH speculative "
                f"decoding only supports pp_size == 1\" ({r.dflash_pp.cite()}). Serve it at {PP} 1.", file=cf,
                detail={"pp_size": pp}))
        elif algorithm == "DSPARK" and not r.dspark_pp_needs_prefill:
            findings.append(Finding(
                "LCH001", f"{cf}: at {PP} {pp} {release} refuses a DSpark draft: \"Currently DSpark speculative "
                f"decoding only supports pp_size == 1\" ({r.dspark_pp.cite()}; 0.5.21 runs it on a prefill "
                f"server). Serve it at {PP} 1.", file=cf, detail={"pp_size": pp}))
        elif algorithm == "DSPARK" and str(launch.get(DISAGGREGATION, "null")).lower() != "prefill":
            findings.append(Finding(
                "LCH001", f"{cf}: at {PP} {pp} {release} runs a DSpark draft only on a prefill server "
                f"({DISAGGREGATION} prefill): as given it stops ({r.dspark_pp.cite()}).", file=cf,
                detail={"pp_size": pp}))
        elif algorithm == "EAGLE3":
            findings += _eagle3_pipeline(launch, pp, ctx, r)
        return findings, keep

    return judge


def model(version: str) -> LaunchModel:
    return LaunchModel(flags=FLAGS, judge=judge_with(rules(version)),
                       summary="--speculative-num-draft-tokens / --speculative-dflash-block-size against a DFlash "
                               "draft's block size, --speculative-num-draft-tokens / --speculative-dspark-block-size "
                               "against a DSpark draft's gamma; --pp-size (DFlash refused above 1, "
                               "DSpark only on a prefill server" + (", refused above 1 on 0.5.20" if version ==
                                                                     "0.5.20" else "")
                               + ", EAGLE-3 taps only on the last stage)")


MODEL = model("0.5.23")
