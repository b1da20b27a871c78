"""`dspark convert`."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, decide, output_format
from dspark.cli.options import ConfigOption, FormatOption, OutputFormat
from dspark.cli.render import escape, finding_line, human_bytes, print_report, progress_bar, render_findings, stdout
from dspark.schema.findings import Severity
from dspark.schema.inventory import printable_name

if TYPE_CHECKING:
    from dspark.converters.convert import ConvertPlan, ConvertReport

# The convert machinery (hashing, writers, package metadata) is imported
# when `convert` runs, not when the CLI starts: `dspark check` pays for
# every module this file imports at the top.
DEFAULT_MAX_SHARD_SIZE = "5GB"


class DtypeChoice(str, enum.Enum):
    keep = "keep"
    bfloat16 = "bfloat16"
    float16 = "float16"
    float32 = "float32"


def convert(
    src: Annotated[
        Path,
        typer.Argument(metavar="SRC", help="HF safetensors folder or file, DCP folder (iter_N/, its model/, or the run), or .pt state dict.", show_default=False),
    ],
    dst: Annotated[Path, typer.Argument(metavar="DST", help="Output folder (must not exist unless --force).", show_default=False)],
    dtype: Annotated[
        DtypeChoice, typer.Option("--dtype", help="Cast floating-point weights (round to nearest even), or keep them.")
    ] = DtypeChoice.keep,
    max_shard_size: Annotated[
        str, typer.Option("--max-shard-size", help="Largest shard file: 5GB, 500MB, 2GiB or bytes.")
    ] = DEFAULT_MAX_SHARD_SIZE,
    keep_skipped: Annotated[
        bool, typer.Option("--keep-skipped", help="Keep tensors the server skips (embed_tokens, lm_head, confidence_head, t2d/d2t).")
    ] = False,
    config: ConfigOption = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing DST, once the new one is complete.")] = False,
    plan_only: Annotated[bool, typer.Option("--plan", help="Print the renames, drops, casts and shards; write nothing.")] = False,
    output: FormatOption = OutputFormat.human,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no report on success.")] = False,
) -> None:
    """Convert a TorchSpec checkpoint into the servable layout of its draft family (atomic, verified)."""
    output_format.set(output.value)
    from dspark.converters.convert import ConvertOptions, convert_checkpoint, plan_conversion

    options = ConvertOptions.from_flags(
        dtype=dtype.value, max_shard_size=max_shard_size, keep_skipped=keep_skipped, config_path=config, force=force
    )
    if plan_only:
        plan = plan_conversion(src, dst, options)
        code = decide(EXIT_CHECK_FAILED if plan.errors else EXIT_OK)
        if output is OutputFormat.json:
            print_report(plan.to_dict(), code)
        elif not quiet or plan.errors:
            render_plan(plan)
        raise typer.Exit(code)

    with progress_bar(not quiet and output is OutputFormat.human, "converting") as progress:
        report = convert_checkpoint(src, dst, options, progress=progress)
    # convert raises rather than return a failed report: written and verified is exit 0
    code = decide(EXIT_OK)
    if output is OutputFormat.json:
        print_report(report.to_dict(), code)
    elif not quiet:
        render_report(report)


def _dtype_text(plan: ConvertPlan) -> str:
    if not plan.casts:
        return "keep" if plan.options.dtype is None else "nothing to cast"
    return ", ".join(f"{row['tensors']} x {pair}" for pair, row in plan.casts.items())


def render_plan(plan: ConvertPlan) -> None:
    where = "replaces the existing folder" if plan.replaces_existing else "new folder"
    rows = [
        ("source", f"{plan.source} ({plan.source_format}, {plan.family})"),
        ("destination", f"{plan.destination} ({where})"),
        ("config", plan.config_source or "-"),
        ("casts", _dtype_text(plan)),
        ("bytes", f"{human_bytes(plan.bytes_in)} read -> {human_bytes(plan.bytes_out)} written"),
    ]
    for key, value in rows:
        stdout.print(f"[dim]{key:>12}[/] {escape(value)}")

    stdout.print(f"\n[bold]tensors to write ({len(plan.tensors)})[/]  name, dtype, shape, shard, <- stored name when renamed")
    width = max((len(printable_name(t.name)) for t in plan.tensors), default=0)
    for tensor in plan.tensors:
        dtype = f"{tensor.source.dtype}->{tensor.dtype}" if tensor.cast else tensor.dtype
        renamed = f"  <- {printable_name(tensor.source.stored_name)}" if tensor.renamed else ""
        line = f"  {printable_name(tensor.name):<{width}}  {dtype:<9}  {str(list(tensor.source.shape)):<14}  {tensor.shard}{renamed}"
        stdout.print(escape(line))

    if plan.dropped:
        stdout.print(f"\n[bold]dropped ({len(plan.dropped)})[/]" + ("" if plan.options.keep_skipped else "  (--keep-skipped keeps them)"))
        for dropped in plan.dropped:
            stdout.print(f"  {escape(printable_name(dropped.stored_name))}  {dropped.dtype} {human_bytes(dropped.nbytes)}: {dropped.reason}")
    if plan.not_cast:
        stdout.print(f"\n[bold]not cast[/] (not floating point): {escape(', '.join(plan.not_cast))}")
    stdout.print(f"\n[bold]shards ({len(plan.shards)})[/]  max {human_bytes(plan.options.max_shard_size)}")
    for shard in plan.shards:
        stdout.print(f"  {shard.file}  {len(shard.tensors)} tensors  {human_bytes(shard.file_bytes)}")
    if plan.config_changes:
        stdout.print(f"\n[bold]config.json changes ({len(plan.config_changes)})[/]")
        for change in plan.config_changes:
            stdout.print(f"  {escape(change)}")
    stdout.print("\n[bold]the output, checked before it is written[/]")
    render_findings(plan.findings, show_info=True)
    if plan.errors:
        stdout.print(f"\n[bold red]WOULD FAIL[/]  {len(plan.errors)} error(s); convert would write nothing.")
    else:
        stdout.print(f"\n[bold green]OK[/]  convert would write {len(plan.tensors)} tensors in {len(plan.shards)} shard(s).")


def render_report(report: ConvertReport) -> None:
    plan = report.plan
    stdout.print(f"[bold green]converted[/] {escape(plan.source)} -> {escape(plan.destination)}"
                 + ("  (replaced the previous folder)" if plan.replaces_existing else ""))
    lines = [
        f"{len(plan.tensors)} tensors, {human_bytes(plan.bytes_out)} in {len(plan.shards)} shard(s) ({plan.source_format} -> safetensors, {plan.family})",
        f"casts: {_dtype_text(plan)}",
        f"renamed {len(plan.renames)}, dropped {len(plan.dropped)}"
        + (f" ({', '.join(sorted({d.reason for d in plan.dropped}))})" if plan.dropped else ""),
        f"config.json: {len(plan.config_changes)} change(s)",
        f"verified: every value written was read (no NaN/Inf, no all-zero weights) and dspark check passes; "
        f"dspark-manifest.json written ({report.seconds:.2f} s)",
    ]
    for line in lines:
        stdout.print(f"  {escape(line)}")
    notes = [f for f in plan.findings if f.code.startswith("SRC")] + report.warnings
    for finding in notes:
        if finding.severity is not Severity.ERROR:
            stdout.print("  " + finding_line(finding))
