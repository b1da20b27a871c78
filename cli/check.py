"""`dspark check`."""

from __future__ import annotations

from typing import Annotated

import typer

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, decide
from dspark.cli.formats import Report, judged
from dspark.cli.options import (
    CheckpointOrUrlArg,
    ConfigOption,
    EngineOption,
    FormatOption,
    OutputFileOption,
    OutputFormat,
    QuietOption,
    TargetOption,
)
from dspark.cli.output import configure_output, emit
from dspark.cli.terminal import progress_bar
from dspark.converters.check import CheckReport, check_checkpoint
from dspark.converters.writers.overwrite_guard import RunInput


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
            help="Also judge the serving kernels installed here: a draft with fc_norm needs "
            "segmented_rmsnorm in the installed serving kernel package (RUN001).",
        ),
    ] = False,
    output: FormatOption = OutputFormat.human,
    output_file: OutputFileOption = None,
    quiet: QuietOption = False,
) -> None:
    """Check a draft checkpoint against the serving contract (headers only unless --deep)."""
    settings = configure_output("check", output.value, output_file, quiet, reads=(
        RunInput("CKPT", checkpoint), RunInput("--target", target), RunInput("--config", config)))
    from dspark.converters.policy import settings_engine

    engine = settings_engine(engine)  # --engine, else the project settings' engine
    with progress_bar(deep and settings.format == "human" and not quiet, "scanning") as progress:
        report = check_checkpoint(
            checkpoint, target=target, deep=deep, verify_hashes=verify, config_path=config, progress=progress,
            engine=engine, verdict="contents" if contents else "served",
        )
    if runtime:
        from dspark.converters.runtime import with_runtime_findings

        report = with_runtime_findings(report)
    code = decide(EXIT_OK if report.passed(strict) else EXIT_CHECK_FAILED)
    emit(check_report("check", report, code, strict=strict))
    raise typer.Exit(code)


def check_report(command: str, report: CheckReport, code: int, *, strict: bool = False) -> Report:
    return Report(
        command=command,
        exit_code=code,
        document=report.to_dict(strict=strict),
        findings=judged(report.findings, strict=strict),
        subject=report.checkpoint,
        data=report,
    )
