"""`dspark check`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, decide, output_format
from dspark.cli.options import CheckpointArg, ConfigOption, EngineOption, FormatOption, OutputFormat
from dspark.cli.render import print_report, progress_bar, render_check
from dspark.converters.check import check_checkpoint


def check(
    checkpoint: CheckpointArg,
    target: Annotated[
        Optional[Path],
        typer.Option("--target", help="Target model folder or its config.json: check what it can honour."),
    ] = None,
    deep: Annotated[
        bool, typer.Option("--deep", help="Also stream every payload: NaN/Inf, zero norms, identity fc_norm.")
    ] = False,
    verify: Annotated[
        bool, typer.Option("--verify", help="Verify payload hashes against dspark-manifest.json.")
    ] = False,
    strict: Annotated[bool, typer.Option("--strict", help="Warnings fail the check too.")] = False,
    config: ConfigOption = None,
    engine: EngineOption = None,
    contents: Annotated[
        bool,
        typer.Option(
            "--contents",
            help="Judge only what is inside (training-time CI): a layout the engine cannot open as it is "
            "(SRV001) is a note, not a failure. The default judges the folder as the engine will open it.",
        ),
    ] = False,
    output: FormatOption = OutputFormat.human,
) -> None:
    """Check a draft checkpoint against the serving contract (headers only unless --deep)."""
    output_format.set(output.value)
    with progress_bar(deep and output is OutputFormat.human, "scanning") as progress:
        report = check_checkpoint(
            checkpoint, target=target, deep=deep, verify_hashes=verify, config_path=config, progress=progress,
            engine=engine, verdict="contents" if contents else "served",
        )
    code = decide(EXIT_OK if report.passed(strict) else EXIT_CHECK_FAILED)
    if output is OutputFormat.json:
        print_report(report.to_dict(strict=strict), code)
    else:
        render_check(report, strict=strict)
    raise typer.Exit(code)
