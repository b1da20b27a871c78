"""Findings: what a check found, as data.

A finding has a stable `code` (documented in docs/codes.md and never reused for
another meaning), a severity, a message that names the file and tensor and
says what to do, and a machine-readable `detail`. Library code returns
findings; only the CLI turns them into an exit code.
"""

from __future__ import annotations

import enum
from dataclasses import field
from typing import Any

from dspark.schema.records import record


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@record
class FindingCode:
    """A finding code: its stable id, default severity and one-line title."""

    code: str
    severity: Severity
    title: str


def _codes(*rows: tuple[str, Severity, str]) -> dict[str, FindingCode]:
    return {code: FindingCode(code, severity, title) for code, severity, title in rows}


E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO

# The vocabulary. Order is docs/codes.md's order; codes are stable.
FINDING_CODES: dict[str, FindingCode] = _codes(
    # config.json
    ("CFG001", E, "config.json is missing beside the weights"),
    ("CFG002", E, "config.json is not a JSON object"),
    ("CFG003", E, "config field violates the draft config schema"),
    ("CFG004", E, "draft family not recognised from model_type / architectures"),
    ("CFG005", E, "target_layer_ids count differs from num_target_layers"),
    ("CFG006", E, "target_layer_ids not strictly ascending (order or duplicates)"),
    ("CFG007", E, "target layer id outside [0, target_num_hidden_layers)"),
    ("CFG008", E, "mask_token_id missing or outside [0, vocab_size)"),
    ("CFG009", W, "draft_vocab_size differs from vocab_size (the engine does not read it)"),
    ("CFG010", E, "config.json holds NaN or Infinity, which is not JSON"),
    ("CFG011", E, "config.json has a text_config the engine's config loader refuses"),
    # fc_norm
    ("FCN001", E, "fc_norm declared true but no fc_norm weights shipped"),
    ("FCN002", E, "fc_norm weights shipped but fc_norm not declared true"),
    ("FCN003", E, "fc_norm weight count or index does not match the taps"),
    ("FCN004", E, "fc_norm weight shape is not [target_hidden_size]"),
    ("FCN005", E, "fc_norm weight dtype is not floating point"),
    ("FCN006", W, "fc_norm weight is exactly all ones (an identity norm)"),
    ("CTX001", E, "context projection width is not taps x target_hidden_size"),
    # norm_before_fc (EAGLE-3 Llama: input_norm over the concatenated taps)
    ("FEA001", E, "norm_before_fc declared true but no input_norm weight shipped"),
    ("FEA002", E, "input_norm weight shipped but norm_before_fc not declared true"),
    # EAGLE-3 taps: what the draft builds fc for against what the target captures
    ("TAP001", E, "the draft's tap count differs from the number of taps the target captures"),
    ("TAP002", W, "a tap list the target does not read (it captures another, or its defaults)"),
    ("TAP003", I, "no tap ids: the engine assumes 3 taps at the target's defaults"),
    ("TAP004", I, "the tap numbering the draft was trained with, inferred from where the folder comes from"),
    ("TAP005", W, "the tap numbering the draft was trained with is unknown: both readings given"),
    ("TAP006", E, "the engine captures other target layers than the draft was trained on"),
    ("TAP007", W, "the engines asked for capture different target layers for this draft"),
    # the draft's own head and its token map (EAGLE-3)
    ("LMH001", W, "lm_head shipped but not served (tied, or replaced by the target's head)"),
    ("LMH002", E, "tie_word_embeddings is true but the shipped lm_head is not the embedding: a trained head dropped"),
    ("VOC001", E, "d2t missing while the head has fewer rows than the vocabulary"),
    ("VOC002", E, "d2t is not an integer table of draft_vocab_size entries (a warning when it is only longer)"),
    ("VOC003", E, "d2t sends a draft token outside the target vocabulary"),
    # aux_hidden_stream
    ("STR001", E, "aux_hidden_stream is not 'prefix' or 'attn_res'"),
    ("STR002", I, "resolved aux_hidden_stream and where it came from"),
    ("STR003", E, "TOKENSPEED_DFLASH_AUX_STREAM holds an invalid value"),
    ("STR004", W, "TOKENSPEED_DFLASH_AUX_STREAM is set; the engine ignores it (the stream served is named)"),
    ("STR005", W, "attn_res stream not verified against a target"),
    ("STR006", E, "target cannot supply the attn_res stream"),
    ("STR007", E, "TOKENSPEED_DFLASH_AUX_STREAM overrides the checkpoint's stream with another (engines that read it)"),
    ("STR008", W, "dflash_config.aux_hidden_stream is never read by the engine; the top level's stream is served"),
    # --target
    ("TGT001", E, "target config is unreadable or lacks a needed field"),
    ("TGT002", E, "target_hidden_size differs from the target's hidden_size"),
    ("TGT003", W, "target_num_hidden_layers differs from the target's layer count (the engine never compares them)"),
    ("TGT004", E, "vocab_size differs from the target's vocab_size (a warning when the draft's is smaller, or larger "
               "with a d2t that keeps every proposal inside the target's)"),
    ("TGT005", E, "a tap is outside the target's layers"),
    ("TGT006", E, "the target's model never captures the hidden states the draft reads"),
    ("TGT007", E, "the target's model class cannot host the draft's drafter"),
    ("TGT008", W, "the target reads EAGLE-3 tap ids one-based (Kimi-K3)"),
    ("TGT009", E, "a tap (or a default tap) is not captured from the target layer count the config states"),
    # the serving engine (--engine): how it opens, resolves and coerces
    ("SRV001", E, "not servable as it is: the engine cannot open this layout; convert it first"),
    ("ENG001", E, "the engine does not honour a feature the draft declares or ships"),
    ("ENG002", E, "the engine resolves architectures to another model class"),
    ("ENG003", W, "the engine coerces or ignores a config value"),
    ("ENG004", I, "a launch setting the draft needs"),
    ("ENG005", E, "the config declares quantization the draft's tensors do not carry"),
    ("ENG006", E, "the engine does not serve this draft family at all"),
    ("ENG007", E, "dspark does not model this draft's family: it cannot vouch for how the engine serves it"),
    ("ENG008", E, "the trainer and the engine read a config key with different meanings (norm_output)"),
    ("OVR001", E, "dflash_config overrides a top-level value with a different one"),
    ("ROP001", E, "RoPE scaling lacks a key the engine needs"),
    ("ROP002", W, "RoPE parameters the engine fills in or replaces silently"),
    ("ROP003", E, "the draft's rotary embedding does not reach the positions the server feeds it as trained"),
    ("ROP004", W, "the server's context is lowered to the draft's max_position_embeddings"),
    ("ROP005", I, "the engine raises the draft's max_position_embeddings to the served length; rotation unchanged"),
    ("SWA001", E, "sliding-window layers without a sliding_window size"),
    # the launch (--launch, or the settings' launch): server flags a verdict depends on
    ("LCH001", E, "at the launch given, the engine refuses the draft (or the launch itself)"),
    ("LCH002", E, "at the launch given, the engine serves the draft wrong without a word"),
    ("LCH003", W, "the verdict depends on the launch: another launch than the defaults judged gives another"),
    ("LCH004", I, "the launch flags read, and those no verdict dspark models depends on"),
    ("LCH005", I, "the launch serves the draft as trained (the widths its block size needs)"),
    ("LCH006", W, "the launch as given stops the server whatever the draft; judged as the server it asks for"),
    ("LCH007", I, "a tensor refused at the default launch is dropped at the launch given, and the draft loads"),
    ("LCH008", I, "the speculative flags that serve the draft as trained (the engine's defaults do; others may not)"),
    # tensor inventory
    ("INV001", E, "expected tensor missing"),
    ("INV002", E, "unexpected tensor (the serving loader has no destination)"),
    ("INV003", E, "tensor shape differs from the one the config implies"),
    ("INV004", E, "tensor dtype is not floating point"),
    ("INV005", I, "tensor skipped by the serving loader"),
    ("INV006", E, "two stored tensors map to the same served name"),
    ("INV007", W, "weights stored in float32 (twice the bytes of bf16)"),
    ("INV008", E, "a pre-fused tensor shipped beside its parts: the engine serves whichever it reads last"),
    # files: safetensors headers and sharded indexes
    ("STF001", E, "safetensors file is corrupt or malformed"),
    ("IDX001", E, "sharded index is not valid"),
    ("IDX002", E, "shard named in the index is missing"),
    ("IDX003", E, "tensor listed in the index is absent from its shard"),
    ("IDX004", E, "tensor the index does not list, or in a file it does not name"),
    ("IDX005", E, "tensor present in more than one shard"),
    ("IDX006", E, "index total_size differs from the tensor bytes"),
    ("IDX007", E, "shard name is not a plain file name inside the checkpoint"),
    # payloads: read by --deep, --verify and convert; PAY005-PAY007 are header-only
    ("PAY001", E, "tensor holds NaN or Inf"),
    ("PAY002", E, "norm weight is all zeros"),
    ("PAY003", E, "tensor payload could not be read"),
    ("PAY004", E, "weight matrix is all zeros"),
    ("PAY005", I, "payloads not read: header-only check; run with --deep"),
    ("PAY006", E, "weight file is mostly a hole on disk (sparse): its payload was never written"),
    ("PAY007", I, "weight file is a hole on purpose: a header-only fixture that says so in its metadata"),
    # dspark-manifest.json
    ("MAN001", E, "dspark-manifest.json is not valid"),
    ("MAN002", E, "tensor differs from the manifest (name, file, dtype, shape or bytes)"),
    ("MAN003", E, "tensor payload hash differs from the manifest"),
    ("MAN004", I, "manifest verified"),
    ("MAN005", E, "--verify without a dspark-manifest.json: nothing to verify against"),
    ("MAN006", E, "weight file in the folder that the manifest does not list"),
    # `dspark convert`: values it refuses to write
    ("CNV001", E, "the cast to the output dtype turns finite values into Inf"),
    ("CNV002", I, "a tensor the engine skips at its default launch, kept because another launch loads it"),
    # training outputs read by `dspark convert` (DCP folders, .pt state dicts)
    ("SRC001", I, "training run folder: the newest iteration was read"),
    ("SRC002", I, "entries that are not draft weights (optimizer state, counters) left behind"),
    ("SRC003", E, "pickle needs more than weights-only loading (code execution); refused"),
    ("SRC004", E, "DCP or .pt checkpoint is corrupt or inconsistent"),
    ("SRC005", I, "config.json in another trainer's shape (speculators), read as the config convert writes"),
    ("SRC006", I, "a pre-fused tensor the engine's loader does not take, written by convert as its parts"),
    ("SRC007", I, "a config value taken from what the trainer used (the run's config.yaml, the trainer's defaults)"),
    # `dspark smoke`: the context projection run on real weights
    ("SMK001", E, "projection weights or output hold NaN or Inf"),
    ("SMK002", E, "fused projection differs from the fp32 reference beyond tolerance"),
    ("SMK003", I, "how far the incremental fast path (no fc_norm) lands from the correct output"),
    ("SMK004", I, "folded incremental path (fc_norm folded into the columns) within tolerance"),
    ("SMK005", W, "folded incremental path outside tolerance"),
    ("SMK006", W, "the Triton kernel did not run; the torch reference computed the norm"),
    ("SMK007", I, "GPU timings of the norm and the whole projection"),
    ("SMK008", E, "projection weights or output are all zeros: nothing to compare"),
    ("SMK009", E, "the installed engine's segmented_rmsnorm differs from the fp32 reference beyond tolerance"),
    ("SMK010", I, "the installed engine's segmented_rmsnorm beside dspark's: errors and times"),
    ("SMK011", W, "the installed engine's segmented_rmsnorm did not run here (why)"),
    ("SMK012", I, "the draft has no fc_norm: no engine kernel runs on its context projection, dspark's alone was tested"),
    # `check --runtime`: the serving engine installed where the check runs
    ("RUN001", E, "the engine installed here will not start: its K3 DSpark model cannot import its segmented_rmsnorm"),
    ("RUN002", I, "the segmented_rmsnorm the installed engine serves with, and where it comes from"),
    ("RUN003", I, "the serving engine installed here, its revision and the files that say so"),
    ("RUN004", W, "the installed engine's revision is unknown (judged by the nearest) or not modelled"),
    ("RUN005", W, "no serving engine installed here: judged with the default profile"),
    ("RUN006", I, "an installed release dspark does not model: every cited function is the nearest modelled release's"),
    ("RUN007", W, "the installed engine's cited functions differ from the release it is judged as (the gate fails)"),
    ("RUN008", I, "the installed engine registers other draft classes or capturing targets than the modelled release"),
)


@record
class Finding:
    """One thing a check found.

    `file` is relative to the checkpoint folder where possible; `tensor` is
    the served name (or the stored one, when it has none yet).
    """

    code: str
    message: str
    file: str | None = None
    tensor: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    severity: Severity | None = None

    def __post_init__(self) -> None:
        if self.code not in FINDING_CODES:
            raise ValueError(f"unknown finding code {self.code!r}")
        if self.severity is None:
            object.__setattr__(self, "severity", FINDING_CODES[self.code].severity)

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity.value,
            "message": self.message,
            "file": self.file,
            "tensor": self.tensor,
            "detail": self.detail,
        }


def count_by_severity(findings) -> dict[str, int]:
    """Findings per severity; a grouped finding counts as the findings it stands for."""
    counts = {s.value: 0 for s in Severity}
    for finding in findings:
        counts[finding.severity.value] += finding.detail.get(GROUPED_COUNT, 1)
    return counts


# Report order: root causes first. A config value the engine misreads
# (`"hidden_size": true`, ENG003) explains the shape errors that follow from
# it (INV003), so a reader meets the cause before its consequences. Stages
# by the code's three letters; a code not listed sorts last. Within a stage
# the order the rules found things in is kept.
REPORT_STAGES: tuple[tuple[str, ...], ...] = (
    ("SRC", "SRV"),                 # what was read, and whether the engine can open it at all
    ("CFG", "OVR", "ENG", "ROP", "SWA", "LCH"),  # the config, how the engine reads it, the launch
    ("STR", "TGT", "TAP"),          # the stream and the target
    ("STF", "IDX"),                 # files: a corrupt or missing shard explains missing tensors
    ("FCN", "FEA", "CTX", "LMH", "VOC"),  # declared features against what is shipped
    ("INV",),                       # the tensor inventory the config implies
    ("PAY", "MAN", "CNV"),          # payload values, the manifest, convert's casts
    ("SMK", "RUN"),                 # the smoke run, the serving kernels installed
)
_STAGE = {prefix: rank for rank, prefixes in enumerate(REPORT_STAGES) for prefix in prefixes}


def report_order(findings: list[Finding]) -> list[Finding]:
    """`findings` with root causes first (`REPORT_STAGES`), stable within a stage."""
    return sorted(findings, key=lambda f: _STAGE.get(f.code[:3], len(REPORT_STAGES)))


def report_findings(findings: list[Finding]) -> list[Finding]:
    """The findings a report carries: in report order, crowded codes grouped.
    Every report builder calls this, so the order is decided once."""
    return group_findings(report_order(findings))


# More findings of one code than this become one finding: a checkpoint with
# 100,000 stray tensors gets a report a person can read and a CI log can
# hold, not 100,000 lines that all say the same thing.
GROUP_THRESHOLD = 20
# How many of the grouped findings' names the one finding lists.
GROUP_EXAMPLES = 5
# `detail` key of a grouped finding: how many findings it stands for.
GROUPED_COUNT = "grouped_count"


def group_findings(findings: list[Finding], *, threshold: int = GROUP_THRESHOLD) -> list[Finding]:
    """Findings with every code and severity that occur together more than
    `threshold` times replaced, where the first of them stood, by one
    finding of that code and severity that gives the count, the first
    finding's message and the first few tensor (or file) names. Order is
    kept otherwise. Grouping by severity too keeps an error from being
    folded into a warning of the same code (IDX005 is either)."""
    by_kind: dict[tuple[str, Severity], list[Finding]] = {}
    for finding in findings:
        by_kind.setdefault((finding.code, finding.severity), []).append(finding)
    crowded = {kind for kind, group in by_kind.items() if len(group) > threshold}
    if not crowded:
        return list(findings)
    result: list[Finding] = []
    for finding in findings:
        kind = (finding.code, finding.severity)
        if kind not in crowded:
            result.append(finding)
        elif finding is by_kind[kind][0]:
            result.append(_grouped(by_kind[kind]))
    return result


def _grouped(group: list[Finding]) -> Finding:
    first = group[0]
    names = [f.tensor or f.file for f in group if (f.tensor or f.file)]
    shown = names[:GROUP_EXAMPLES]
    others = len(group) - len(shown)
    title = FINDING_CODES[first.code].title
    listed = f": {', '.join(shown)}" + (f" and {others:,} more" if others else "") if shown else ""
    return Finding(
        first.code,
        f"{len(group):,} findings: {title}{listed}. The first: {first.message}",
        file=first.file,
        tensor=first.tensor,
        detail={
            GROUPED_COUNT: len(group),
            "examples": shown,
            "files": sorted({f.file for f in group if f.file})[:GROUP_EXAMPLES],
            "first": first.detail,
        },
        severity=first.severity,
    )


@record
class JudgedFinding:
    """A finding and what the run made of it (`dspark check` judges by
    severity alone, `dspark gate` by its policy, schema/policy.py)."""

    finding: Finding
    fails: bool
    waived: str | None = None  # the policy's reason, when a waiver covers it
