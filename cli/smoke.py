"""`dspark smoke`."""

from __future__ import annotations

import enum
import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, decide
from dspark.cli.formats import Report, judged
from dspark.cli.options import (
    CheckpointArg,
    ConfigOption,
    EnginePathOption,
    FormatOption,
    OutputFileOption,
    OutputFormat,
    QuietOption,
    named_path,
)
from dspark.cli.output import configure_output, emit
from dspark.converters.writers.overwrite_guard import RunInput
from dspark.schema.errors import UsageError, require_torch


class Device(str, enum.Enum):
    cuda = "cuda"
    cpu = "cpu"


class Kernel(str, enum.Enum):
    dspark = "dspark"
    engine = "engine"
    both = "both"


def smoke(
    checkpoint: CheckpointArg,
    device: Annotated[
        Optional[Device],
        typer.Option("--device", help="cuda (default when a GPU is visible) or cpu (the kernel under Triton's interpreter)."),
    ] = None,
    tokens: Annotated[
        Optional[int],
        typer.Option("--tokens", min=1, metavar="N", help="Rows of synthetic taps (default 8192 on cuda, 8 on cpu)."),
    ] = None,
    taps: Annotated[
        Optional[Path],
        typer.Option("--taps", metavar="FILE", help="Captured taps: safetensors with tap.{i} [T, th] per tap, or one [T, S*th] tensor.",
                     parser=named_path),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", metavar="N", help="Seed of the synthetic taps.")] = 0,
    kernel: Annotated[
        Kernel,
        typer.Option("--kernel", help="Whose segmented RMSNorm is judged: dspark's, the installed serving "
                     "engine's (run beside dspark's), or both. Exit 2 when the engine's cannot run here."),
    ] = Kernel.dspark,
    engine_path: EnginePathOption = None,
    config: ConfigOption = None,
    output: FormatOption = OutputFormat.human,
    output_file: OutputFileOption = None,
    quiet: QuietOption = False,
) -> None:
    """Run the draft's context projection through the fused Triton kernel (and the serving engine's) and compare with fp32."""
    configure_output("smoke", output.value, output_file, quiet,
                     reads=(RunInput("CKPT", checkpoint), RunInput("--taps", taps), RunInput("--config", config)))
    if engine_path is not None and kernel is Kernel.dspark:
        raise UsageError("--engine-path names where the serving engine is installed; it needs --kernel engine or both.",
                         hint=f"Run `dspark smoke {checkpoint} --kernel both --engine-path {engine_path}`.")
    torch = require_torch("dspark smoke")
    if device is Device.cpu or (device is None and not torch.cuda.is_available()):
        # Triton reads this when the kernel module is imported: on the CPU the
        # kernel can only run under the interpreter.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from dspark.kernels.smoke_checkpoint import smoke_checkpoint

    report = smoke_checkpoint(
        checkpoint,
        device=device.value if device else None,
        tokens=tokens,
        taps_file=taps,
        seed=seed,
        config_path=config,
        kernel=kernel.value,
        engine_path=engine_path,
    )
    code = decide(EXIT_OK if report.passed else EXIT_CHECK_FAILED)
    emit(smoke_report(report, code))
    raise typer.Exit(code)


def smoke_report(report, code: int) -> Report:
    return Report(
        command="smoke", exit_code=code, document=report.to_dict(), findings=judged(report.findings),
        subject=report.checkpoint, data=report,
    )
