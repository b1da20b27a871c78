"""`dspark inspect`."""

from __future__ import annotations

import typer

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, decide, output_format
from dspark.cli.options import CheckpointArg, ConfigOption, EngineOption, FormatOption, OutputFormat
from dspark.cli.render import print_report, render_inspect
from dspark.converters.check import inspect_checkpoint


def inspect(
    checkpoint: CheckpointArg,
    config: ConfigOption = None,
    engine: EngineOption = None,
    output: FormatOption = OutputFormat.human,
) -> None:
    """Show what a checkpoint holds: family, taps, fc_norm, stream, tensors, shards."""
    output_format.set(output.value)
    report = inspect_checkpoint(checkpoint, config_path=config, engine=engine)
    # The page is for reading, but its exit code is check's verdict: a
    # script that runs `dspark inspect` must not take a failing draft for a
    # good one, and the JSON's `passed` says the same.
    code = decide(EXIT_OK if report.passed() else EXIT_CHECK_FAILED)
    if output is OutputFormat.json:
        print_report(report.to_dict(), code)
    else:
        render_inspect(report)
    raise typer.Exit(code)
