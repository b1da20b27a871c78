"""The convert plan: everything `dspark convert` will do, decided before a
byte is written.

`plan_conversion(src, dst, options) -> ConvertPlan` reads the source's
headers and decides every rename, drop, cast and shard, and the config to
write (`schema/normalise.py`); the plan's findings say whether the output
would pass `dspark check` (on every engine asked for). `convert.py`
carries it out.

Why this module is long: a plan is one value built in one pass over the
source (renames, drops, splits, casts, shards, the config and its verdict);
the helpers read that pass's state and nothing else.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from dspark.converters.casting import CASTABLE, output_dtype
from dspark.converters.destination import check_paths
from dspark.converters.engine_verdicts import on_every_engine
from dspark.converters.fused_split import FusedSplit, iter_rows, plan_fused_splits, refuse_fused_beside_parts
from dspark.converters.layouts.hf import CONFIG_NAME
from dspark.converters.layouts.tap_origin import taps_record, trained_taps, write_trained_taps
from dspark.converters.layouts.norm_output import write_norm_output
from dspark.converters.served_layout import config_for_engine
from dspark.converters.readers import Checkpoint, detect_format, open_checkpoint
from dspark.converters.readers.copies import SAME, compare_copies, judge_tied_head, serves_the_same
from dspark.converters.readers.safetensors import resolve_stored_twice
from dspark.converters.source_facts import checkpoint_head, drop_reason, refused_token_map
from dspark.converters.source_facts import tied_copy_of_the_embedding, trained_values
from dspark.converters.writers.safetensors import (
    DEFAULT_MAX_SHARD_SIZE,
    PlannedTensor,
    ShardPlan,
    natural_key,
    parse_size,
    plan_shards,
)
from dspark.schema.dtypes import CAST_TARGETS, TORCH_DTYPE_NAMES, nbytes_of
from dspark.schema.engines import engine_specs
from dspark.schema.errors import CheckpointError, UsageError
from dspark.schema.families import DraftFamily, known_families_text
from dspark.schema.findings import Finding, Severity, report_findings
from dspark.schema.inventory import TensorEntry, has_control_characters, printable_name
from dspark.schema.normalise import normalise_config
from dspark.schema.engines.launch import LaunchContext, judge_launch, launch_for
from dspark.schema.rules import check_contract
from dspark.schema.verdicts import UNMODELLED_FAMILY


@dataclass(frozen=True)
class ConvertOptions:
    """What to convert to. `dtype` is a safetensors code or None (keep)."""

    dtype: str | None = None
    max_shard_size: int = parse_size(DEFAULT_MAX_SHARD_SIZE)
    keep_skipped: bool = False
    config_path: Path | None = None
    force: bool = False
    environ: Mapping[str, str] | None = None  # for the verification; os.environ when None
    # NAME@REV the output is written for; several comma-joined: written for the first, verified for all
    engine: str | None = None
    # The server flags the output is verified under (None: the engine's defaults).
    launch: str | None = None

    @classmethod
    def from_flags(
        cls,
        *,
        dtype: str = "keep",
        max_shard_size: str | int = DEFAULT_MAX_SHARD_SIZE,
        keep_skipped: bool = False,
        config_path: Path | str | None = None,
        force: bool = False,
        environ: Mapping[str, str] | None = None,
        engine: str | None = None,
        launch: str | None = None,
    ) -> "ConvertOptions":
        """Options from the command line's spellings (`bfloat16`, `5GB`)."""
        if dtype != "keep" and dtype not in CAST_TARGETS:
            raise UsageError(
                f"--dtype {dtype!r} is not one of keep, {', '.join(CAST_TARGETS)}.",
                hint="Use --dtype bfloat16 for serving.",
            )
        return cls(
            dtype=None if dtype == "keep" else CAST_TARGETS[dtype],
            max_shard_size=parse_size(max_shard_size),
            keep_skipped=keep_skipped,
            config_path=Path(config_path) if config_path is not None else None,
            force=force,
            environ=environ,
            engine=",".join(profile.spec for profile in engine_specs(engine)) if engine else None,
            launch=launch,
        )


@dataclass(frozen=True)
class TensorPlan:
    """One tensor to write: where it comes from and what it becomes.
    `rows` is set when it is rows [start, stop) of a pre-fused source
    tensor the engine does not take (converters/fused_split.py)."""

    source: TensorEntry
    name: str
    dtype: str
    shard: str
    rows: tuple[int, int] | None = None

    @property
    def renamed(self) -> bool:
        return self.rows is None and self.source.stored_name != self.name

    @property
    def cast(self) -> bool:
        return self.source.dtype != self.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        if self.rows is None:
            return self.source.shape
        return (self.rows[1] - self.rows[0], *self.source.shape[1:])

    @property
    def bytes_read(self) -> int:
        return nbytes_of(self.source.dtype, self.shape)

    @property
    def planned(self) -> PlannedTensor:
        return PlannedTensor(self.name, self.dtype, self.shape)

    def source_chunks(self, reader, chunk_bytes: int) -> Iterator[memoryview]:
        """The source bytes this tensor is written from, in chunks."""
        if self.rows is None:
            return reader.iter_chunks(self.source, chunk_bytes)
        row_bytes = nbytes_of(self.source.dtype, self.source.shape[1:])
        start, stop = self.rows[0] * row_bytes, self.rows[1] * row_bytes
        if self.source.byte_range is not None:
            # read by range (safetensors): read the part's own bytes only
            first = self.source.byte_range[0]
            part = dataclasses.replace(self.source, shape=self.shape, byte_range=(first + start, first + stop))
            return reader.iter_chunks(part, chunk_bytes)
        return iter_rows(reader.iter_chunks(self.source, chunk_bytes), start, stop)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "source": self.source.stored_name,
            "source_file": self.source.file,
            "source_dtype": self.source.dtype,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "shard": self.shard,
            "nbytes": self.planned.nbytes,
        }
        if self.rows is not None:
            out["source_rows"] = list(self.rows)
        return out


@dataclass(frozen=True)
class DroppedTensor:
    stored_name: str
    served_name: str
    reason: str
    dtype: str
    nbytes: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ConvertPlan:
    """Everything `convert` will do, decided before a byte is written."""

    source: str
    destination: str
    source_format: str
    family: str
    options: ConvertOptions
    tensors: list[TensorPlan]
    dropped: list[DroppedTensor]
    shards: list[ShardPlan]
    config: dict[str, Any]
    config_source: str | None
    config_changes: list[str]
    findings: list[Finding]  # the source's notes + the contract on the planned output
    replaces_existing: bool
    checkpoint: Checkpoint = field(repr=False, compare=False, default=None)
    # served name -> what the contract expects of it (roles for the value checks)
    expected: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)
    # The taps the draft was trained on, as the manifest records them (None: unknown)
    trained_taps: dict[str, Any] | None = None
    # engine spec -> the launches the output serves there, in words
    serves_launches: dict[str, str] = field(default_factory=dict)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.ERROR]

    @property
    def renames(self) -> list[tuple[str, str]]:
        return [(t.source.stored_name, t.name) for t in self.tensors if t.renamed]

    @property
    def splits(self) -> list[dict[str, Any]]:
        """Pre-fused source tensors written as their parts."""
        parts: dict[str, list[dict[str, Any]]] = {}
        for t in self.tensors:
            if t.rows is not None:
                parts.setdefault(t.source.stored_name, []).append({"name": t.name, "rows": list(t.rows)})
        return [{"from": name, "to": to} for name, to in parts.items()]

    @property
    def casts(self) -> dict[str, dict[str, int]]:
        """"F32->BF16" -> tensors, bytes in, bytes out."""
        summary: dict[str, dict[str, int]] = {}
        for tensor in self.tensors:
            if tensor.cast:
                row = summary.setdefault(f"{tensor.source.dtype}->{tensor.dtype}", {"tensors": 0, "bytes_in": 0, "bytes_out": 0})
                row["tensors"] += 1
                row["bytes_in"] += tensor.bytes_read
                row["bytes_out"] += tensor.planned.nbytes
        return dict(sorted(summary.items()))

    @property
    def not_cast(self) -> list[str]:
        """Tensors a --dtype left alone (integers, bool, fp8)."""
        if self.options.dtype is None:
            return []
        return [t.name for t in self.tensors if t.source.dtype not in CASTABLE]

    @property
    def bytes_in(self) -> int:
        return sum(t.bytes_read for t in self.tensors)

    @property
    def bytes_out(self) -> int:
        return sum(t.planned.nbytes for t in self.tensors)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "destination": self.destination,
            "source_format": self.source_format,
            "family": self.family,
            "dtype": TORCH_DTYPE_NAMES[self.options.dtype] if self.options.dtype else "keep",
            "max_shard_size": self.options.max_shard_size,
            "keep_skipped": self.options.keep_skipped,
            "replaces_existing": self.replaces_existing,
            "config_source": self.config_source,
            "tensors": [t.to_dict() for t in self.tensors],
            "renames": [{"from": a, "to": b} for a, b in self.renames],
            "splits": self.splits,
            "dropped": [d.to_dict() for d in self.dropped],
            "casts": self.casts,
            "not_cast": self.not_cast,
            "shards": [s.to_dict() for s in self.shards],
            "config_changes": self.config_changes,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "findings": [f.to_dict() for f in self.findings],
            "serves_launches": self.serves_launches,
            "launch": self.options.launch,
            "passed": not self.errors,
        }



def plan_conversion(
    src: Path | str, dst: Path | str, options: ConvertOptions | None = None, *, writing: bool = True
) -> ConvertPlan:
    """Read the source's headers and decide every rename, drop, cast and
    shard. Raises `UsageError` for impossible paths and `CheckpointError`
    for a source that cannot be converted; returns the plan, whose
    `findings` say whether the output would pass `dspark check`.
    `writing=False`: the plan is only shown (`--plan`), so an existing
    destination needs no --force."""
    options = options or ConvertOptions()
    src, dst = Path(src), Path(dst)
    fmt = detect_format(src)
    replaces = check_paths(src, dst, force=options.force, writing=writing)
    checkpoint = open_checkpoint(src, config_path=_config_for(src, fmt, options.config_path))
    # Converting reads every payload: copies of a tensor stored twice that
    # were too large to compare header-only are compared before judging.
    checkpoint.findings = [resolve_stored_twice(finding, checkpoint.reader) for finding in checkpoint.findings]

    _refuse_unconvertible(checkpoint)
    family: DraftFamily = checkpoint.family

    profile = (profiles := engine_specs(options.engine))[0]
    refuse_fused_beside_parts(checkpoint.entries, family, profile.loader_for(family.name), checkpoint.config)
    # Pre-fused tensors the engine's loader refuses are written as their parts.
    splits: dict[str, FusedSplit] = plan_fused_splits(
        checkpoint.entries, family, profile.loader_for(family.name), checkpoint.config
    )
    kept: list[tuple[TensorEntry, str, str, tuple[int, int] | None]] = []
    dropped: list[DroppedTensor] = []
    owners: dict[str, TensorEntry] = {}
    tied_copy = tied_copy_of_the_embedding(checkpoint)
    tied_head = checkpoint_head(checkpoint) if tied_copy else None
    kept_for_launch: list[Finding] = []
    for entry in checkpoint.entries:
        name = entry.served_name
        reason = (_dropped_by_name(family, profile.loader_for(family.name), checkpoint.config, name)
                  or (tied_copy if entry is tied_head else None)
                  or refused_token_map(family, profile.loader_for(family.name), checkpoint.config, name))
        launch = _loaded_under_a_launch(profiles, family, name) if reason else None
        if launch is not None:
            # skipped at the default launch, loaded under another: never dropped
            kept_for_launch.append(Finding(
                "CNV002", f"{entry.stored_name}: kept, though {profile.spec} skips it at its default launch: it "
                f"loads it with {launch} (and refuses a draft without it there).",
                tensor=name, detail={"launch": launch}))
            reason = None
        if reason and not options.keep_skipped:
            dropped.append(DroppedTensor(entry.stored_name, name, reason, entry.dtype, entry.nbytes))
            continue
        split = splits.get(entry.stored_name)
        outputs = [(p.name, (p.start, p.stop)) for p in split.parts] if split else [(name, None)]
        first = owners.get(name)
        comparison = compare_copies(checkpoint.reader, first, entry, limit=None) if (
            first is not None and split is None) else None
        if comparison is not None and serves_the_same(comparison):
            # Two stored names the engine loads into one parameter, with the
            # same values as served (INV006 a warning): one copy is written.
            alike = "a byte-identical copy" if comparison == SAME else "a copy, the same as served,"
            dropped.append(DroppedTensor(entry.stored_name, name, f"{alike} of {first.stored_name}, which is written",
                                         entry.dtype, entry.nbytes))
            continue
        for out_name, rows in outputs:
            _refuse_bad_name(entry, owners.get(out_name), out_name)
            owners[out_name] = entry
            kept.append((entry, out_name, output_dtype(entry.dtype, options.dtype), rows))
    kept.sort(key=lambda item: natural_key(item[1]))

    unsharded = [TensorPlan(entry, name, dtype, "", rows) for entry, name, dtype, rows in kept]
    shards = plan_shards([t.planned for t in unsharded], options.max_shard_size)
    shard_of = {t.name: s.file for s in shards for t in s.tensors}
    tensors = [dataclasses.replace(t, shard=shard_of[t.name]) for t in unsharded]
    source_config, unshifted = config_for_engine(checkpoint, profile.loader_for(family.name))
    config, changes = normalise_config(source_config, family, [t.planned for t in tensors], engine=profile)
    # The ids are written for the engine from the layers the draft was
    # trained on (the source's origin says how its ids were numbered), and
    # those layers are recorded for a later check of the output.
    trained = trained_taps(checkpoint, family, source_config)
    changes += write_trained_taps(trained, config, profile.loader_for(family.name), profile.spec)
    changes += write_norm_output(checkpoint, family, config, profile.loader_for(family.name), profile.spec)
    changes = unshifted + changes
    # A trainer's own config shape was rewritten when it was read (SRC005).
    changes = [f"whole config: {f.detail['trainer']}' shape -> the {family.name} config the engine parses"
               for f in checkpoint.config_findings if f.code == "SRC005"] + trained_values(checkpoint) + changes

    written, changes = _native_config_kept(checkpoint, profile.loader_for(family.name), config, changes)

    planned_entries = [
        TensorEntry(t.name, t.name, t.dtype, t.shape, t.shard) for t in tensors
    ]
    environ = os.environ if options.environ is None else options.environ
    judge = lambda p: check_contract(config, planned_entries, config_file=CONFIG_NAME, environ=environ, engine=p)  # noqa: E731
    contract = judge(profile)
    contract = dataclasses.replace(contract, findings=on_every_engine(profiles, contract.findings, judge))
    # Converting reads every payload: a head shipped beside tie_word_embeddings
    # is compared with the embedding in full (LMH002).
    sources = {t.name: t.source for t in tensors if t.rows is None}
    contract_findings = [judge_tied_head(f, checkpoint.reader, sources, limit=None) for f in contract.findings]
    planned_by_name = {t.name: t for t in tensors}
    contract_findings = [_named_by_its_source(f, planned_by_name) for f in contract_findings]
    source_notes = [f for f in checkpoint.config_findings + checkpoint.findings if f.severity is not Severity.ERROR]
    split_notes = [split.note() for split in splits.values()]
    launch_notes, serves = _launches_served(profiles, family, config, planned_entries, options.launch)
    findings = report_findings(source_notes + split_notes + kept_for_launch + contract_findings + launch_notes)

    return ConvertPlan(
        source=str(src),
        destination=str(dst),
        source_format=checkpoint.format,
        family=family.name,
        options=options,
        tensors=tensors,
        dropped=dropped,
        shards=shards,
        config=written,
        config_source=str(checkpoint.config_path) if checkpoint.config_path else None,
        config_changes=changes,
        findings=findings,
        replaces_existing=replaces,
        checkpoint=checkpoint,
        expected=contract.expected,
        trained_taps=taps_record(trained),
        serves_launches=serves,
    )


def _native_config_kept(checkpoint: Checkpoint, loader, config: dict, changes: list[str]) -> tuple[dict, list[str]]:
    """The config convert writes: the one the engine parses, unless the
    engine reaches the family's class only through its reader of the
    trainer's own config (vLLM's P-EAGLE): then the source's config.json as
    it is, judged as that reader builds it (`config`). A source in any other
    shape cannot be written so: refused."""
    only = loader.native_shape_only if loader is not None else None
    if only is None:
        return config, changes
    trainer = next((f for f in checkpoint.config_findings if f.code == "SRC005"), None)
    cited = loader.sources.get("native config only")
    why = (f"the engine reaches its {loader.family} class only through its reader of {only}' own config "
           f"({cited.cite() if cited else 'its config reader'})")
    if trainer is None or trainer.detail.get("trainer") != only or checkpoint.config_path is None:
        raise CheckpointError(f"{printable_name(str(checkpoint.source))}: {why}, and this draft's config is not in "
                              f"{only}' shape; dspark writes no {only} config. Serve the draft {only} saved.")
    from dspark.converters.json_input import parse_json_object

    original = parse_json_object(Path(checkpoint.config_path))
    # Nothing of the engine's reading is written: every line is the source's.
    return original, [f"whole config: kept as {only} wrote it ({why}); judged as that reader builds it"]


def _launches_served(profiles, family: DraftFamily, config: Mapping[str, Any], entries,
                     launch: str | None) -> tuple[list[Finding], dict[str, str]]:
    """Per engine written for: the launch findings on the planned output
    (under `launch`, or the defaults), and the launches it serves, in words:
    the defaults and every launch no LCH003 warns of, else what to pass."""
    notes: list[Finding] = []
    serves: dict[str, str] = {}
    for profile in profiles:
        parsed = launch_for(profile, launch)
        context = LaunchContext(family=family.name, config=config, config_file=CONFIG_NAME, entries=entries,
                                loader=profile.loader_for(family.name), profile=profile)
        found, _ = judge_launch(profile, parsed, context)
        notes += [f for f in found if f.code != "LCH004"]
        if profile.launch_model is None:
            serves[profile.spec] = "the engine's defaults (dspark models no launch flag of this release)"
            continue
        needs = [f.detail["serve_with"] for f in found if f.code in ("LCH001", "LCH008") and "serve_with" in (f.detail or {})]
        limits = [f.detail.get("setting") for f in found if f.code == "LCH003"]
        said = ("the defaults" if not needs else f"{needs[0]} (or without these flags: the server takes them "
                "from the checkpoint)")
        pipeline = ("pipeline-parallel size 1 only (see the LCH003 findings)" if limits
                    else "every pipeline-parallel size the engine runs this family at")
        serves[profile.spec] = f"{said}; {pipeline}"
    return notes, serves


def _dropped_by_name(family: DraftFamily, loader, config, name: str) -> str | None:
    """Why convert leaves a tensor behind by its name (source_facts.drop_reason),
    unless the engine written for loads it under this config (vLLM's K3 DSpark
    confidence head with enable_confidence_head, dspark_mla.py@vllm==0.33.0:459-464)."""
    reason = drop_reason(family, name)
    if reason is not None and family.is_skipped(name) and loader is not None and loader.skip_rule(name, config) is None:
        return None
    return reason


def _loaded_under_a_launch(profiles, family: DraftFamily, name: str) -> str | None:
    """The launch of an engine written for under which its loader loads a
    name it skips by default (`FamilyLoader.launch_loaded`)."""
    for profile in profiles:
        loader = profile.loader_for(family.name)
        launch = loader.launch_loading(name) if loader is not None else None
        if launch is not None:
            return launch
    return None


def _config_for(src: Path, fmt: str, explicit: Path | None) -> Path | None:
    """safetensors inputs: config.json beside the weights, else in the
    folder above (DCP and .pt readers search upwards themselves)."""
    if explicit is not None or not fmt.startswith("safetensors"):
        return explicit
    root = src if src.is_dir() else src.parent
    if not (root / CONFIG_NAME).is_file() and (root.parent / CONFIG_NAME).is_file():
        return root.parent / CONFIG_NAME
    return None


def _refuse_unconvertible(checkpoint: Checkpoint) -> None:
    if checkpoint.config is None:
        finding = checkpoint.config_findings[0]
        raise CheckpointError(
            f"{checkpoint.source}: cannot convert without the draft's config: {finding.message}",
            code=finding.code,
            path=finding.file,
            hint="Pass --config PATH/config.json, or put config.json beside the weights or in the folder above.",
        )
    if checkpoint.family is None:  # a verdict as in check (ENG007, exit 1): no layout is known to serve it
        config = checkpoint.config
        raise CheckpointError(
            f"{checkpoint.config_display}: model_type {config.get('model_type')!r} / architectures "
            f"{config.get('architectures')!r}: dspark does not model this draft family, so it knows no layout an "
            f"engine serves as trained. dspark models: {known_families_text()}.",
            code=UNMODELLED_FAMILY,
            path=checkpoint.config_display,
            hint="`dspark check` says whether each engine registers the class; convert only families dspark models.",
        )
    # Errors in the input's own files (or a config read from another
    # trainer's shape) refuse the conversion like a broken file.
    errors = [f for f in checkpoint.config_findings + checkpoint.findings if f.severity is Severity.ERROR]
    if errors:
        raise error_from_findings(
            errors,
            f"{checkpoint.source}: the input's files are inconsistent: {{listed}}",
            hint=f"Run `dspark check {checkpoint.source}` for the full report, fix the input, then convert.",
            root=checkpoint.root,
        )


def _named_by_its_source(finding: Finding, planned_by_name: Mapping[str, TensorPlan]) -> Finding:
    """A finding on a tensor of the planned output names the input file the
    tensor comes from: the output file does not exist yet (and, when the
    finding stops the conversion, never will)."""
    plan = planned_by_name.get(finding.tensor) if finding.tensor else None
    if plan is None or finding.file != plan.shard or plan.source.file == plan.shard:
        return finding
    message = finding.message
    if message.startswith(f"{plan.shard}: "):
        stored = f" (stored as {plan.source.stored_name})" if plan.source.stored_name != plan.name else ""
        message = f"{plan.source.file}{stored}: " + message[len(plan.shard) + 2:]
    return dataclasses.replace(finding, file=plan.source.file, message=message)


def error_from_findings(
    errors: list[Finding], template: str, *, hint: str, root: Path | None = None
) -> CheckpointError:
    """One error for a list of error findings: the first five in the message
    (`{listed}` in `template`), all of them in `detail`, the first one's
    code, file and tensor on the error. A finding's file is relative to the
    checkpoint folder `root`; the error names it from there, as `check`
    names a finding's file, so every command points at the same path."""
    listed = "; ".join(f"{f.code} {f.message.rstrip('.')}" for f in errors[:5])
    if len(errors) > 5:
        listed += f" (and {len(errors) - 5} more)"
    return CheckpointError(
        template.replace("{listed}", listed),  # not format(): paths may hold braces
        code=errors[0].code,
        path=str(root / errors[0].file) if root is not None and errors[0].file else errors[0].file,
        tensor=errors[0].tensor,
        detail={"findings": [f.to_dict() for f in errors]},
        hint=hint,
    )


def _refuse_bad_name(entry: TensorEntry, first: TensorEntry | None, name: str) -> None:
    if not name or has_control_characters(name):
        raise CheckpointError(
            f"{entry.file}: tensor name {printable_name(entry.stored_name)!r} is empty or holds control characters.",
            code="SRC004",
            path=entry.file,
            tensor=entry.stored_name,
            hint="Rename the tensor in the training code and re-export.",
        )
    if first is not None:
        raise CheckpointError(
            f"{first.file}: {printable_name(first.stored_name)} and {entry.file}: "
            f"{printable_name(entry.stored_name)} both become {printable_name(name)}; convert cannot write both.",
            code="INV006",
            path=entry.file,
            tensor=name,
            hint="Remove one of them from the input (they differ only in wrapper prefixes, or one is the "
            "pre-fused form of the other).",
        )
