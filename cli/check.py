"""`dspark check`."""

# Without `from __future__ import annotations`: typer reads the parameters'
# annotations, which are then objects built at import, not strings it must
# compile one by one at each start (docs/check.md).

from typing import Annotated

import typer

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, decide
from dspark.cli.formats import Report, judged
from dspark.cli.options import (
    CheckpointOrUrlArg,
    ConfigOption,
    EngineOption,
    EnginePathOption,
    FormatOption,
    LaunchOption,
    OutputFileOption,
    OutputFormat,
    QuietOption,
    TargetOption,
    chosen_engine,
    chosen_launch,
)
from dspark.cli.output import configure_output, emit
from dspark.cli.terminal import progress_bar
from dspark.converters.check import CheckReport, check_checkpoint
from dspark.converters.writers.overwrite_guard import RunInput
from dspark.schema.errors import UsageError


def check(
    checkpoint: CheckpointOrUrlArg,
    target: TargetOption = None,
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
    runtime: Annotated[
        bool,
        typer.Option(
            "--runtime",
            help="Judge the draft with the serving engine installed here: its revision is read from its files "
            "(RUN003) and judges as --engine would; an engine that cannot import its kernel fails (RUN001).",
        ),
    ] = False,
    engine_path: EnginePathOption = None,
    launch: LaunchOption = None,
    output: FormatOption = OutputFormat.human,
    output_file: OutputFileOption = None,
    quiet: QuietOption = False,
) -> None:
    """Check a draft checkpoint against the serving contract (headers only unless --deep)."""
    settings = configure_output("check", output.value, output_file, quiet, reads=(
        RunInput("CKPT", checkpoint), RunInput("--target", target), RunInput("--config", config)))
    if engine_path is not None and not runtime:
        raise UsageError("--engine-path names where the serving engine is installed; it needs --runtime.",
                         hint=f"Run `dspark check {checkpoint} --runtime --engine-path {engine_path}`.")
    named_by = "--engine" if engine else "the project settings' engine"
    engine, engine_source = chosen_engine(engine)  # --engine, else the project settings' engine
    launch, _ = chosen_launch(launch)  # --launch, else the project settings' launch
    with progress_bar(deep and settings.format == "human" and not quiet, "scanning") as progress:
        options = dict(target=target, deep=deep, verify_hashes=verify, config_path=config, progress=progress,
                       verdict="contents" if contents else "served", launch=launch)
        if runtime:
            from dspark.converters.runtime import check_with_runtime

            report = check_with_runtime(checkpoint, engine=engine, engine_path=engine_path, named_by=named_by,
                                            **options)
        else:
            report = check_checkpoint(checkpoint, engine=engine, **options)
    if runtime:
        engine_source = "the engine installed here (--runtime)"
    code = decide(EXIT_OK if report.passed(strict) else EXIT_CHECK_FAILED)
    emit(check_report("check", report, code, strict=strict, engine_source=engine_source))
    raise typer.Exit(code)


def check_report(command: str, report: CheckReport, code: int, *, strict: bool = False,
                 engine_source: str | None = None) -> Report:
    return Report(
        command=command,
        exit_code=code,
        document=report.to_dict(strict=strict),
        findings=judged(report.findings, strict=strict),
        subject=report.checkpoint,
        data=report,
        engine_source=engine_source,
    )
