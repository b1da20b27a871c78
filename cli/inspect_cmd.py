"""`dspark inspect`."""

from __future__ import annotations

import shlex

import typer

from dspark.cli.check import check_report
from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, decide
from dspark.cli.options import (
    CheckpointOrUrlArg,
    ConfigOption,
    EngineOption,
    FormatOption,
    LaunchOption,
    OutputFileOption,
    OutputFormat,
    QuietOption,
    chosen_engine,
    chosen_launch,
)
from dspark.cli.output import configure_output, emit
from dspark.converters.check import inspect_checkpoint
from dspark.converters.writers.overwrite_guard import RunInput


def inspect(
    checkpoint: CheckpointOrUrlArg,
    config: ConfigOption = None,
    engine: EngineOption = None,
    launch: LaunchOption = None,
    output: FormatOption = OutputFormat.human,
    output_file: OutputFileOption = None,
    quiet: QuietOption = False,
) -> None:
    """Show what a checkpoint holds: family, taps, fc_norm, stream, tensors, shards."""
    configure_output("inspect", output.value, output_file, quiet,
                     reads=(RunInput("CKPT", checkpoint), RunInput("--config", config)))
    engine, engine_source = chosen_engine(engine)  # --engine, else the project settings' engine
    launch, _ = chosen_launch(launch)  # --launch, else the project settings' launch
    report = inspect_checkpoint(checkpoint, config_path=config, engine=engine, launch=launch)
    # The page is for reading, but its exit code is check's verdict: a
    # script that runs `dspark inspect` must not take a failing draft for a
    # good one, and the JSON's `passed` says the same.
    code = decide(EXIT_OK if report.passed() else EXIT_CHECK_FAILED)
    page = check_report("inspect", report, code, engine_source=engine_source)
    # The check that gives this page's findings judges what this run judged.
    check_args = [str(checkpoint), *(("--engine", engine) if engine else ()), *(("--config", str(config)) if config else ()),
                  *(("--launch", launch) if launch is not None else ())]
    page.next_command = " ".join(["dspark", "check", *map(shlex.quote, check_args)])
    emit(page)
    raise typer.Exit(code)
