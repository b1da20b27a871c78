"""What TokenSpeed 0.1.1's launch flags change in a verdict, read from the
wheel (`tokenspeed/runtime/...@tokenspeed==0.1.1`).

* Block size: a DSpark or DFlash drafter's widths come from the
  checkpoint. `read_checkpoint_block_size` reads `dflash_config`, then
  `dspark_config` (`dspark_block_size`, then `block_size`), then the top
  level, and int()s it (utils/spec_block_geometry.py::
  read_checkpoint_block_size:56-83). When the launch gives the widths
  (`--speculative-num-steps` other than its default 3, or
  `--speculative-num-draft-tokens`, or `num_speculative_tokens` in
  `--speculative-config`: utils/server_args.py::ServerArgs.
  resolve_config_aliases:672-750) they must be DSpark `steps ==
  block_size`, DFlash `steps + 1 == block_size`, and `draft tokens == steps
  + 1`, or the server stops (validate_block_widths:110-141, from
  configs/model_config.py::_apply_block_spec_widths:369-401 and the
  drafter, execution/drafter/dflash.py::_resolve_block_geometry:69-101);
  left out, they are taken from the checkpoint. A block size that drafts
  nothing stops it whatever the flags (resolve_block_widths:86-107).
* Pipeline parallelism (`--pipeline-parallel-size` > 1): only DSPARK and
  MTP drafters run on a pipeline (utils/server_args.py::
  PIPELINE_SPEC_ALGORITHMS:104, resolve_disaggregation:1489-1508), only on
  a prefill server (1462-1499), and a DSPARK model must produce context
  across stages (execution/model_executor.py::
  select_dspark_context_producer:242-260): K3 DSpark alone of the families
  dspark models. Its last stage builds and loads its own `embed_tokens`
  (models/kimi_k3_dspark.py::K3DSparkModel.__init__:402-416; load_weights:
  633-637 skips it only when it is no parameter, 697-703 refuses it
  missing; VocabParallelEmbedding.weight_loader asserts its rows and
  copy_()s, casting any dtype: layers/vocab_parallel_embedding.py:472-515),
  refuses a quantized draft (:333-334), and loads only the `fc_norm.N` of
  taps a stage owns (checkpoint_weight_name_filter:594-603), so an extra
  index the single-stage loader refuses (:655-658, `local_tap_indices.index`
  raises) is dropped.
  Which stage owns a tap (`_context_tap_owner_layer`:77-91, :342-352)
  changes no verdict: every tap id below target_num_hidden_layers (which
  startup checks) has an owner.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Mapping

from dspark.schema.engines.base import Source
from dspark.schema.engines.launch import (
    INT,
    JSON_OBJECT,
    TEXT,
    FlagSpec,
    Launch,
    LaunchContext,
    LaunchModel,
    ignored_note,
    keep,
)
from dspark.schema.findings import Finding, Severity

RELEASE = "tokenspeed==0.1.1"
_RUNTIME = "tokenspeed/runtime/"
GEOMETRY = _RUNTIME + "utils/spec_block_geometry.py"
SERVER_ARGS = _RUNTIME + "utils/server_args.py"
MODEL_CONFIG = _RUNTIME + "configs/model_config.py"
K3_MODEL = _RUNTIME + "models/kimi_k3_dspark.py"
EXECUTOR = _RUNTIME + "execution/model_executor.py"


def _at(path: str, lines: str, qualname: str = "") -> str:
    # cited inside tokenspeed/runtime/ (the module docstring says so), so a
    # citation stays one short word on a narrow terminal
    return Source(path.removeprefix(_RUNTIME), lines, RELEASE, qualname).cite()


PP = "--pipeline-parallel-size"
STEPS = "--speculative-num-steps"
DRAFT_TOKENS = "--speculative-num-draft-tokens"
ALGORITHM = "--speculative-algorithm"
SPEC_CONFIG = "--speculative-config"
DISAGGREGATION = "--disaggregation-mode"

FLAGS = (
    FlagSpec(PP, INT, "which families start, and what K3 DSpark's last stage loads", minimum=1),
    FlagSpec(STEPS, INT, "the drafted-token count the checkpoint's block size must match"),
    FlagSpec(DRAFT_TOKENS, INT, "the verify width, steps + 1"),
    FlagSpec(ALGORITHM, TEXT, "which block-size convention (DSPARK: steps, DFLASH: steps + 1)"),
    FlagSpec(SPEC_CONFIG, JSON_OBJECT, "method and num_speculative_tokens, as the flags above",
             aliases=("--speculative_config",)),
    FlagSpec(DISAGGREGATION, TEXT, "a pipeline needs a prefill server", choices=("NULL", "PREFILL", "DECODE", "ENCODE")),
)

# ServerArgs' defaults (utils/server_args.py:381, 495-497).
DEFAULT_STEPS = 3
BLOCK_ALGORITHMS = ("DFLASH", "DSPARK")
PIPELINE_ALGORITHMS = ("DSPARK", "MTP")
# Rows a checkpoint's block size counts beyond the drafted tokens (spec_block_geometry.py:53).
STEP_OFFSET = {"DSPARK": 0, "DFLASH": 1}
_BLOCK_SIZE_KEYS = ("dspark_block_size", "block_size")
_NESTED = ("dflash_config", "dspark_config")


def family_algorithm(family: str, config: Mapping[str, Any]) -> str:
    """The --speculative-algorithm a family is served with on TokenSpeed."""
    if family == "k3_dspark":
        return "DSPARK"
    if family == "dflash_gqa":
        names = " ".join(str(a) for a in config.get("architectures") or []) + " " + str(config.get("model_type", ""))
        return "DSPARK" if "dspark" in names.lower() else "DFLASH"
    return "EAGLE3"


def checkpoint_block_size(config: Mapping[str, Any]) -> tuple[Any, str | None]:
    """(value, where) as read_checkpoint_block_size finds it: the first not
    null of each nested section's keys, then the top level's."""
    for section in _NESTED:
        nested = config.get(section)
        if isinstance(nested, Mapping):
            for key in _BLOCK_SIZE_KEYS:
                if nested.get(key) is not None:
                    return nested[key], f"{section}.{key}"
    for key in _BLOCK_SIZE_KEYS:
        if config.get(key) is not None:
            return config[key], key
    return None, None


@dataclasses.dataclass
class Widths:
    """The speculative widths ServerArgs ends with, before the checkpoint."""

    algorithm: str
    steps: int
    draft_tokens: int
    explicit: bool
    stops: str = ""  # the launch alone stops the server, in words


def launch_widths(launch: Launch | None, family_alg: str) -> Widths:
    """resolve_config_aliases (672-750) then resolve_speculative_decoding
    (1146-1158), for a draft given by its own path (not the target's)."""
    launch = launch or Launch(engine="tokenspeed", text="")
    steps = launch.get(STEPS, DEFAULT_STEPS)
    draft_tokens = launch.get(DRAFT_TOKENS)
    algorithm = launch.get(ALGORITHM)
    explicit = steps != DEFAULT_STEPS or draft_tokens is not None
    spec = launch.get(SPEC_CONFIG) or {}
    if spec.get("method") is not None and algorithm is None:
        algorithm = str(spec["method"])
    algorithm = (algorithm or family_alg).upper()
    n = spec.get("num_speculative_tokens")
    if n is not None:
        try:
            n = int(n)
        except (TypeError, ValueError):
            return Widths(algorithm, steps, draft_tokens or steps + 1, True,
                          f"{SPEC_CONFIG} num_speculative_tokens {n!r} is not an integer: int() fails")
        explicit = True
        if algorithm in BLOCK_ALGORITHMS:
            draft_tokens = n if draft_tokens is None else draft_tokens
            steps = max(n - 1, 0)
        else:
            steps = n
    if draft_tokens is None:
        draft_tokens = steps + 1
    stops = ""
    if algorithm in BLOCK_ALGORITHMS:
        expected = max(int(draft_tokens) - 1, 0)
        if steps == DEFAULT_STEPS:
            steps = expected
        elif steps != expected:
            stops = (f"{algorithm} requires {STEPS} to equal {DRAFT_TOKENS} - 1; the launch gives {steps} and "
                     f"{draft_tokens} ({_at(SERVER_ARGS, '1146-1158 (ServerArgs.resolve_speculative_decoding)', qualname='ServerArgs.resolve_speculative_decoding')})")
    return Widths(algorithm, steps, draft_tokens, explicit, stops)


def _finding(code: str, text: str, config_file: str, **detail: Any) -> Finding:
    return Finding(code, text, file=config_file, detail=detail)


def _serve_flags(algorithm: str, steps: int) -> str:
    return f"{ALGORITHM} {algorithm} {STEPS} {steps} {DRAFT_TOKENS} {steps + 1}"


def _geometry(launch: Launch | None, ctx: LaunchContext, widths: Widths) -> list[Finding]:
    """The block size against the launch's widths (module docstring)."""
    where_read = _at(GEOMETRY, "56-83 (read_checkpoint_block_size)", qualname="read_checkpoint_block_size")
    raw, where = checkpoint_block_size(ctx.config)
    cf = ctx.config_file
    if widths.algorithm not in BLOCK_ALGORITHMS:
        return []
    if raw is None:
        if launch is None:
            return []  # the defaults: 3 steps, as the engine has always drafted such a draft
        return [_finding(
            "LCH005",
            f"{cf}: no block size (dflash_config/dspark_config/top-level dspark_block_size or block_size): "
            f"TokenSpeed 0.1.1 drafts {widths.steps} tokens a step, the launch's {STEPS} ({where_read}). "
            "Write the block size the draft was trained with so the server checks the launch against it.",
            cf, steps=widths.steps)]
    try:
        size = int(raw)
    except (TypeError, ValueError, OverflowError):
        return [_finding("CFG003", f"{cf}: {where} = {raw!r}, which TokenSpeed 0.1.1's int() cannot read: the "
                         f"server stops at startup ({where_read}). Write the block size as an integer.",
                         cf, field=where, value=raw)]
    needed = size - STEP_OFFSET[widths.algorithm]
    convention = ("block_size == --speculative-num-steps" if widths.algorithm == "DSPARK"
                  else "block_size == --speculative-num-steps + 1")
    if needed < 1:
        return [_finding("CFG003", f"{cf}: {where} = {raw!r}: a {widths.algorithm} checkpoint stores {convention}, "
                         f"so it implies {STEPS} {needed}, which drafts nothing: the server stops whatever the launch "
                         f"({_at(GEOMETRY, '86-107 (resolve_block_widths)', qualname='resolve_block_widths')}). Write the block size the draft was "
                         "trained with.", cf, field=where, value=raw)]
    flags = _serve_flags(widths.algorithm, needed)
    cite = (f"{_at(GEOMETRY, '110-141 (validate_block_widths)', qualname='validate_block_widths')}, "
            f"{_at(MODEL_CONFIG, '369-401 (_apply_block_spec_widths)', qualname='_apply_block_spec_widths')}")
    detail = dict(block_size=size, algorithm=widths.algorithm, steps=needed, num_draft_tokens=needed + 1,
                  serve_with=flags)
    if launch is None or not widths.explicit:
        if launch is None:
            # A note, not a warning: the engine's defaults serve it as trained
            # (absent widths follow the checkpoint) and no draft can satisfy
            # every --speculative-num-steps; a warning would fail every strict gate.
            return [_finding(
                "LCH008",
                f"{cf}: {where} = {size} ({widths.algorithm}: {convention}): the verdict depends on the launch. "
                f"Without {STEPS}/{DRAFT_TOKENS}, or with {STEPS} {needed} and {DRAFT_TOKENS} {needed + 1}, "
                f"TokenSpeed 0.1.1 loads it and drafts {needed} tokens as trained; any other {STEPS} or "
                f"{DRAFT_TOKENS} stops the server ({cite}). Serve with {flags}; pass --launch to judge your "
                "flags.", cf, setting=STEPS, verdicts={str(needed): "loads", "other": "refused"}, **detail)]
        return [_finding("LCH005", f"{cf}: {where} = {size}: the launch leaves the widths to the checkpoint; "
                         f"TokenSpeed 0.1.1 drafts {needed} tokens as trained ({cite}).", cf, **detail)]
    if (widths.steps, widths.draft_tokens) == (needed, needed + 1):
        return [_finding("LCH005", f"{cf}: {where} = {size}: the launch's {STEPS} {widths.steps} and "
                         f"{DRAFT_TOKENS} {widths.draft_tokens} are the widths it was trained at ({cite}).",
                         cf, **detail)]
    return [_finding(
        "LCH001",
        f"{cf}: {where} = {size}: a {widths.algorithm} checkpoint stores {convention}, so TokenSpeed 0.1.1 needs "
        f"{STEPS} {needed} and {DRAFT_TOKENS} {needed + 1}; this launch gives {widths.steps} and "
        f"{widths.draft_tokens}, and the server stops at startup ({cite}). Serve with {flags}, or leave both "
        "out (the server then takes them from the checkpoint).", cf, launch=launch.text, **detail)]


_FC_NORM = re.compile(r"^fc_norm\.(-?\d+)\.")


def _served(ctx: LaunchContext) -> dict[str, Any]:
    loader = ctx.loader
    return {(loader.engine_name(e.served_name) if loader is not None else e.served_name): e for e in ctx.entries}


def _k3_pipeline(ctx: LaunchContext) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """What K3 DSpark's stages do at --pipeline-parallel-size > 1:
    (refusals and served-wrong, each (code, text)), and the extra fc_norm
    names dropped there (served name -> why)."""
    config, cf = ctx.config, ctx.config_file
    served = _served(ctx)
    problems: list[tuple[str, str]] = []
    quantized = [key for key in getattr(ctx.profile, "quantization_keys", ()) if config.get(key)]
    if quantized:
        problems.append(("LCH001", f"{cf}: {quantized[0]} makes the draft quantized, and a pipeline stage refuses "
                         f"a quantized K3 DSpark draft ({_at(K3_MODEL, '333-334 (K3DSparkModel.__init__)', qualname='K3DSparkModel.__init__')})"))
    embed = served.get("embed_tokens.weight")
    load_cite = _at(K3_MODEL, "402-416 (K3DSparkModel.__init__), 633-637, 697-703 (load_weights)",
                    qualname="K3DSparkModel.__init__")
    vocab, hidden = config.get("vocab_size"), config.get("hidden_size")
    if embed is None:
        problems.append(("LCH001", f"{cf}: the draft ships no embed_tokens.weight, which the last pipeline stage "
                         f"builds and loads, and the load fails as missing ({load_cite}). Ship the frozen copy of "
                         "the target's embedding the draft was trained with (`dspark convert` keeps it)"))
    else:
        plain = [isinstance(v, int) and not isinstance(v, bool) for v in (vocab, hidden)]
        want = (vocab, hidden) if all(plain) else None
        if want is not None and tuple(embed.shape) != want:
            problems.append(("LCH001", f"{cf}: embed_tokens.weight is {list(embed.shape)}, and the last pipeline "
                             f"stage's embedding is [vocab_size, hidden_size] = {list(want)}: its weight loader "
                             f"refuses it ({load_cite}; {_at(_RUNTIME + 'layers/vocab_parallel_embedding.py', '472-515', qualname='VocabParallelEmbedding.weight_loader')})"))
        elif not str(embed.dtype).upper().startswith(("F", "BF")):
            problems.append(("LCH002", f"{cf}: embed_tokens.weight is {embed.dtype}: the last pipeline stage "
                             "copies it into its floating-point embedding without a word, and drafts from those "
                             f"numbers, not the trained embedding ({load_cite}). Ship it in the draft's dtype"))
    taps = config.get("target_layer_ids")
    count = len(taps) if isinstance(taps, list) else config.get("num_target_layers")
    dropped = {}
    if isinstance(count, int):
        for name in served:
            match = _FC_NORM.match(name)
            if match and not 0 <= int(match.group(1)) < count:
                dropped[name] = (f"at {PP} > 1 each stage loads only the fc_norm of the taps it owns, and drops "
                                 f"{name} without a word ({_at(K3_MODEL, '594-603 (checkpoint_weight_name_filter)', qualname='K3DSparkModel.checkpoint_weight_name_filter')})")
    return problems, dropped


def _pipeline_family_refusal(ctx: LaunchContext, algorithm: str) -> str | None:
    if algorithm not in PIPELINE_ALGORITHMS:
        return (f"TokenSpeed 0.1.1 runs only {', '.join(PIPELINE_ALGORITHMS)} drafters on a pipeline, and this "
                f"{ctx.family} draft is {algorithm}: the server stops at startup "
                f"({_at(SERVER_ARGS, '104, 1489-1508 (ServerArgs.resolve_disaggregation)', qualname='PIPELINE_SPEC_ALGORITHMS')})")
    if ctx.family != "k3_dspark":
        return (f"a {ctx.family} DSPARK model cannot produce its draft context across pipeline stages: the server "
                f"stops at startup ({_at(EXECUTOR, '242-260 (select_dspark_context_producer)', qualname='select_dspark_context_producer')})")
    return None


def judge(launch: Launch | None, ctx: LaunchContext) -> tuple[list[Finding], Callable[[Finding], Finding]]:
    cf = ctx.config_file
    widths = launch_widths(launch, family_algorithm(ctx.family, ctx.config))
    findings: list[Finding] = []
    if launch is not None:
        findings.append(ignored_note(launch, FLAGS))
        if widths.stops:
            findings.append(_finding("LCH001", f"--launch: {widths.stops}: the server stops whatever the draft.",
                                     cf, launch=launch.text))
    findings += _geometry(launch, ctx, widths)
    pp = launch.get(PP, 1) if launch is not None else 1
    replace = keep
    if pp > 1:
        if launch.get(DISAGGREGATION, "null").lower() != "prefill":
            findings.append(_finding(
                "LCH006",
                f"--launch: TokenSpeed 0.1.1 runs {PP} > 1 with a draft only on a prefill server "
                f"({DISAGGREGATION} prefill); as given the server stops whatever the draft "
                f"({_at(SERVER_ARGS, '1462-1499 (ServerArgs.resolve_disaggregation)', qualname='ServerArgs.resolve_disaggregation')}). The draft is judged as "
                f"served by a prefill server at {PP} {pp}.", cf, launch=launch.text))
        refusal = _pipeline_family_refusal(ctx, widths.algorithm)
        if refusal is not None:
            findings.append(_finding("LCH001", f"{cf}: at {PP} {pp}, {refusal}. Serve it at {PP} 1.", cf,
                                     pipeline_parallel_size=pp))
            return findings, replace
        if ctx.family == "k3_dspark":
            problems, dropped = _k3_pipeline(ctx)
            findings += [_finding(code, f"{text}: at {PP} {pp} " +
                                  ("the server stops." if code == "LCH001" else "it is served wrong."),
                                  cf, pipeline_parallel_size=pp) for code, text in problems]
            replace = _dropped_under_pipeline(dropped)
        return findings, replace
    if launch is None and ctx.family == "k3_dspark":
        # A launch given is the whole launch (a flag left out is its default):
        # only the defaults judged for want of one warn of other launches.
        problems, dropped = _k3_pipeline(ctx)
        for code, text in problems:
            verdict = "does not start" if code == "LCH001" else "is served wrong"
            findings.append(_finding(
                "LCH003",
                f"{text}. The verdict depends on the launch: at {PP} 1 (judged here) the last stage's embedding "
                f"and stage checks do not apply; at {PP} > 1 this draft {verdict}. Serve it at {PP} 1, or fix "
                "the draft for a pipeline.", cf, setting=PP, only_fails_there=True,
                verdicts={"1": "as judged", ">1": "refused" if code == "LCH001" else "served wrong"}))
        for name, why in dropped.items():
            findings.append(_finding(
                "LCH003",
                f"{cf}: {name}: the verdict depends on the launch: at {PP} 1 the loader refuses it (its index is "
                f"no tap's: {_at(K3_MODEL, '655-658 (load_weights)', qualname='K3DSparkModel.load_weights')}); {why}, and the draft loads. Remove {name} "
                "from the folder.",
                cf, setting=PP, tensor=name, verdicts={"1": "refused", ">1": "dropped"}))
    return findings, replace


def _dropped_under_pipeline(dropped: Mapping[str, str]) -> Callable[[Finding], Finding]:
    """The single-stage refusals of extra fc_norm names, as a pipeline
    launch has them: dropped, the draft loads (LCH007)."""
    def replace(finding: Finding) -> Finding:
        if finding.severity is Severity.ERROR and finding.tensor in dropped:
            return Finding("LCH007", f"{finding.tensor}: {dropped[finding.tensor]}; the launch serves the draft "
                           f"without it. (At {PP} 1: {finding.code}, refused.)", file=finding.file,
                           tensor=finding.tensor, detail={"replaces": finding.code})
        return finding

    return replace


MODEL = LaunchModel(
    flags=FLAGS, judge=judge,
    summary="block size against the speculative widths (DFlash, DSpark, K3 DSpark); pipeline parallelism "
            "(which families start, K3 DSpark's last-stage embed_tokens, quantized drafts, extra fc_norm)")


# 0.1.0 -----------------------------------------------------------------------
# 0.1.0's server has no --pipeline-parallel-size (0.1.1 adds it with the
# prefill pipeline, server_args.py:2292-2298@0.1.1) and parses with
# allow_abbrev=False, so no other spelling reaches it: a launch that gives
# it exits at argument parsing, whatever its value and whatever the draft.
# The other flags 0.1.1's rules read exist in 0.1.0 and change no verdict
# dspark models there (its block size is judged at the defaults).
_PARSER_0_1_0 = (Source(SERVER_ARGS, "739-1915", "tokenspeed==0.1.0", "ServerArgs.add_cli_args"),
                 Source(SERVER_ARGS, "1968-1982", "tokenspeed==0.1.0", "prepare_server_args"))
FLAGS_0_1_0 = (FlagSpec(PP, INT, "not a flag of 0.1.0: the server exits at its argument parsing", minimum=1),)


def judge_0_1_0(launch: Launch | None, ctx: LaunchContext) -> tuple[list[Finding], Callable[[Finding], Finding]]:
    if launch is None:
        return [], keep
    findings = [ignored_note(launch, FLAGS_0_1_0)]
    if launch.has(PP):
        where = "; ".join(source.cite() for source in _PARSER_0_1_0)
        findings.append(_finding(
            "LCH001",
            f"--launch: TokenSpeed 0.1.0 has no {PP} flag (0.1.1 adds it): its argument parser refuses the "
            f"launch and the server exits before it loads anything ({where}). Drop the flag, or serve on 0.1.1.",
            ctx.config_file, launch=launch.text, flag=PP))
    return findings, keep


MODEL_0_1_0 = LaunchModel(
    flags=FLAGS_0_1_0, judge=judge_0_1_0,
    summary="flags 0.1.0's server does not have (--pipeline-parallel-size, added in 0.1.1): it exits at its "
            "argument parsing")
