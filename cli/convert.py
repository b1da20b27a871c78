"""`dspark convert`."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, decide
from dspark.cli.formats import Report, judged
from dspark.cli.options import (
    ConfigOption,
    EngineOption,
    FormatOption,
    LaunchOption,
    OutputFileOption,
    OutputFormat,
    QuietOption,
    chosen_launch,
    local_path,
)
from dspark.cli.output import configure_output, emit
from dspark.cli.terminal import progress_bar
from dspark.converters.writers.overwrite_guard import RunInput

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
        typer.Argument(metavar="SRC", help="HF safetensors folder or file, DCP folder (iter_N/, its model/, or the run), or .pt state dict.", show_default=False, parser=local_path),
    ],
    dst: Annotated[Path, typer.Argument(metavar="DST", help="Output folder: a new or an empty one (an existing one only with --force).", show_default=False, parser=local_path)],
    dtype: Annotated[
        DtypeChoice, typer.Option("--dtype", help="Cast floating-point weights (round to nearest even), or keep them.")
    ] = DtypeChoice.keep,
    max_shard_size: Annotated[
        str, typer.Option("--max-shard-size", metavar="SIZE", help="Largest shard file: 5GB, 500MB, 2GiB or bytes.")
    ] = DEFAULT_MAX_SHARD_SIZE,
    keep_skipped: Annotated[
        bool, typer.Option("--keep-skipped", help="Keep tensors the server skips (embed_tokens, lm_head, confidence_head, t2d/d2t).")
    ] = False,
    config: ConfigOption = None,
    engine: EngineOption = None,
    launch: LaunchOption = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing DST, once the new one is complete.")] = False,
    plan_only: Annotated[bool, typer.Option("--plan", help="Print the renames, drops, casts and shards; write nothing (so no --force needed).")] = False,
    output: FormatOption = OutputFormat.human,
    output_file: OutputFileOption = None,
    quiet: QuietOption = False,
) -> None:
    """Convert a TorchSpec checkpoint into the servable layout of its draft family (atomic, verified)."""
    settings = configure_output("convert", output.value, output_file, quiet,
                                reads=(RunInput("SRC", src), RunInput("--config", config)), writes_into=dst)
    from dspark.converters.convert import ConvertOptions, convert_checkpoint, plan_conversion
    from dspark.converters.policy import settings_engine

    engine = settings_engine(engine)  # --engine, else the project settings' engine
    launch, _ = chosen_launch(launch)  # --launch, else the project settings' launch

    options = ConvertOptions.from_flags(
        dtype=dtype.value, max_shard_size=max_shard_size, keep_skipped=keep_skipped, config_path=config, force=force,
        engine=engine, launch=launch,
    )
    if plan_only:
        plan = plan_conversion(src, dst, options, writing=False)
        code = decide(EXIT_CHECK_FAILED if plan.errors else EXIT_OK)
        emit(Report(
            command="convert", kind="plan", exit_code=code, document={"plan": True, **plan.to_dict()},
            findings=judged(plan.findings), subject=plan.source, data=plan,
        ))
        raise typer.Exit(code)

    with progress_bar(not quiet and settings.format == "human", "converting", lines_off_terminal=True) as progress:
        report = convert_checkpoint(src, dst, options, progress=progress)
    # convert raises rather than return a failed report: written and verified is exit 0
    code = decide(EXIT_OK)
    document = {"plan": False, **report.to_dict()}
    notes = [f for f in report.plan.findings if f.code.startswith("SRC")]
    emit(Report(
        command="convert", exit_code=code, document=document,
        findings=judged(notes + report.verification.findings), subject=report.plan.destination, data=report,
    ))
