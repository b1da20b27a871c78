"""`dspark doctor`."""

from __future__ import annotations

import importlib.util
import os

import typer

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, decide
from dspark.cli.formats import Report
from dspark.cli.options import EnginePathOption, FormatOption, OutputFileOption, OutputFormat, QuietOption
from dspark.cli.output import configure_output, emit
from dspark.schema.errors import UsageError


def doctor(
    engine_path: EnginePathOption = None,
    output: FormatOption = OutputFormat.human,
    output_file: OutputFileOption = None,
    quiet: QuietOption = False,
) -> None:
    """Say what is installed here: versions, the GPU, whether the Triton kernel compiles and matches, the serving engine and its kernel."""
    settings = configure_output("doctor", output.value, output_file, quiet)
    if "sarif" in (settings.format, settings.terminal):
        # SARIF holds results about files to scan; doctor's checks are about
        # this machine, and would be an empty log that says nothing was wrong.
        raise UsageError("doctor has no SARIF form: its checks are about this machine, not a file in the "
                         "repository.", hint="Use --format json, junit or github.")
    from dspark.converters.doctor import NOT_RUN, PROBLEM, DoctorReport, DoctorRow, environment_rows, serving_engine_rows
    from dspark.schema.errors import import_torch_or_why
    from dspark.converters.runtime import probe_runtime

    runtime = probe_runtime(engine_path)
    rows = environment_rows()
    torch, why, broken = import_torch_or_why()
    if torch is None:
        if broken:  # installed and failing is a problem with this machine, not an absent extra
            rows.append(DoctorRow("torch import", PROBLEM, why + "; run python -c 'import torch' to see why"))
        rows.append(DoctorRow("gpu", NOT_RUN, f"not probed: {why}"))
        rows.append(DoctorRow("triton kernel", NOT_RUN, f"not run: {why}"))
        rows += serving_engine_rows(runtime)
        rows.append(DoctorRow("engine kernel", NOT_RUN, f"not run: {why}"))
    else:
        if not torch.cuda.is_available() and _installed("triton"):
            # Without a GPU the kernel can only run in Triton's interpreter,
            # which Triton reads when the kernel module is imported.
            os.environ.setdefault("TRITON_INTERPRET", "1")
        from dspark.kernels.selftest import gpu_row, kernel_row
        from dspark.kernels.smoke_engine import engine_kernel_row

        rows += [gpu_row(), kernel_row(), *serving_engine_rows(runtime), engine_kernel_row(runtime)]
    report = DoctorReport(rows)
    code = decide(EXIT_OK if report.passed else EXIT_CHECK_FAILED)
    emit(Report(command="doctor", exit_code=code, document=report.to_dict(), data=report))
    raise typer.Exit(code)


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # hidden (None in sys.modules) or broken
        return False
