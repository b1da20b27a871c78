"""`dspark smoke`."""

from __future__ import annotations

import enum
import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, decide, output_format
from dspark.cli.options import CheckpointArg, ConfigOption, FormatOption, OutputFormat
from dspark.cli.render import escape, print_report, render_findings, stdout
from dspark.schema.errors import require_torch


class Device(str, enum.Enum):
    cuda = "cuda"
    cpu = "cpu"


def smoke(
    checkpoint: CheckpointArg,
    device: Annotated[
        Optional[Device],
        typer.Option("--device", help="cuda (default when a GPU is visible) or cpu (the kernel under Triton's interpreter)."),
    ] = None,
    tokens: Annotated[
        Optional[int],
        typer.Option("--tokens", min=1, help="Rows of synthetic taps (default 8192 on cuda, 8 on cpu)."),
    ] = None,
    taps: Annotated[
        Optional[Path],
        typer.Option("--taps", help="Captured taps: safetensors with tap.{i} [T, th] per tap, or one [T, S*th] tensor."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the synthetic taps.")] = 0,
    config: ConfigOption = None,
    output: FormatOption = OutputFormat.human,
) -> None:
    """Run the draft's context projection through the fused Triton kernel and compare with fp32."""
    output_format.set(output.value)
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
    )
    code = decide(EXIT_OK if report.passed else EXIT_CHECK_FAILED)
    if output is OutputFormat.json:
        print_report(report.to_dict(), code)
    else:
        _render(report)
    raise typer.Exit(code)


def _render(report) -> None:
    r = report.result
    rows = [
        ("checkpoint", report.checkpoint),
        ("family", report.family),
        ("device", f"{report.device} ({r.kernel_backend})"),
        ("taps", f"{report.tokens} x {r.num_segments} x {r.target_hidden} {str(r.dtype).removeprefix('torch.')}, {report.taps_source}"),
        ("fc_norm", "on" if r.has_fc_norm else "off"),
    ]
    for key, value in rows:
        stdout.print(f"[dim]{key:>11}[/] {escape(value)}")
    stdout.print()
    stdout.print(f"[dim]{'path':<12} {'rel RMS err':>12} {'max abs err':>12} {'cosine':>10}  within tolerance[/]")
    for check in (r.fused, r.incremental, r.folded):
        ok = "[green]yes[/]" if check.within_tolerance else "[red]no[/]"
        stdout.print(
            f"{check.name:<12} {check.rel_rms_error:>12.3e} {check.max_abs_error:>12.3e} "
            f"{check.cosine_similarity:>10.6f}  {ok} (<= {check.tolerance:.0e})"
        )
    stdout.print()
    render_findings(report.findings)
    verdict = "[bold green]PASS[/]" if report.passed else "[bold red]FAIL[/]"
    stdout.print(f"\n{verdict}")
