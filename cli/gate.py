"""`dspark gate`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Optional

import typer

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, decide
from dspark.cli.formats import Report
from dspark.cli.options import (
    EngineOption,
    EnginePathOption,
    FormatOption,
    LaunchOption,
    OutputFileOption,
    OutputFormat,
    QuietOption,
    TargetOption,
    local_path,
    named_path,
)
from dspark.cli.output import configure_output, emit
from dspark.cli.terminal import progress_bar
from dspark.converters.writers.overwrite_guard import RunInput


def gate(
    draft: Annotated[Path, typer.Argument(metavar="DRAFT", help="The draft folder to deploy.", show_default=False, parser=local_path)],
    target: TargetOption = None,
    policy: Annotated[
        Optional[Path],
        typer.Option("--policy", metavar="FILE", help="The policy file (default: dspark.toml or pyproject.toml "
                      "[tool.dspark], found from the working directory upward).", parser=named_path),
    ] = None,
    engine: EngineOption = None,
    launch: LaunchOption = None,
    verify: Annotated[
        bool, typer.Option("--verify", help="Require a dspark-manifest.json and check the hashes against it "
                           "(MAN005 without one). Without --verify the hashes are checked only when there is one.")
    ] = False,
    strict: Annotated[bool, typer.Option("--strict", help="Every warning fails the gate too (unless the policy waives it).")] = False,
    runtime: Annotated[
        bool,
        typer.Option("--runtime", help="Judge the draft with the serving engine installed here, as "
                     "`check --runtime` does (the policy's `runtime = true`)."),
    ] = False,
    engine_path: EnginePathOption = None,
    output: FormatOption = OutputFormat.human,
    output_file: OutputFileOption = None,
    quiet: QuietOption = False,
) -> None:
    """The pre-deploy gate: deep check, manifest, smoke on a GPU; one summary, one exit code.

    By default: every value is read and judged (check --deep); the hashes are
    checked when the folder has a dspark-manifest.json (--verify: it must);
    smoke runs when torch and a GPU are here (skipped otherwise); errors fail,
    warnings do not (--strict, or the policy's fail_on_warnings: they do);
    the engine installed here judges the draft only with --runtime (or the
    policy's runtime = true), and its own kernel joins the smoke when it is here.
    """
    settings = configure_output("gate", output.value, output_file, quiet, reads=(
        RunInput("DRAFT", draft), RunInput("--target", target), RunInput("--policy", policy)))
    from dspark.converters.gate import run_gate
    from dspark.converters.policy import load_policy
    from dspark.converters.runtime import probe_runtime

    rules = load_policy(policy)
    if runtime:
        rules = dataclasses.replace(rules, runtime=True)
    installed = probe_runtime(engine_path)
    runner, reason = _smoke_runner(installed)
    with progress_bar(settings.format == "human" and not quiet, "checking") as progress:
        report = run_gate(draft, target=target, policy=rules, engine=engine, launch=launch, smoke=runner,
                          no_smoke_reason=reason, verify=verify, strict=strict, progress=progress,
                          runtime=installed)
    code = decide(EXIT_OK if report.passed else EXIT_CHECK_FAILED)
    emit(Report(command="gate", exit_code=code, document=report.to_dict(), findings=report.judged,
                subject=report.checkpoint, data=report))
    raise typer.Exit(code)


# Where a GPU torch could use shows itself without torch: the NVIDIA
# driver's per-GPU folders and device nodes, ROCm's compute node (torch.cuda
# runs on ROCm too), and, where there is no /proc (Windows), nvidia-smi,
# which the driver installs. Module-level so that a test can point them
# elsewhere.
GPU_FOLDERS = (Path("/proc/driver/nvidia/gpus"),)
GPU_DEVICE_NODES = (Path("/dev/nvidia0"), Path("/dev/kfd"))
GPU_TOOLS = ("nvidia-smi", "rocm-smi")


def _no_gpu_reason() -> str | None:
    """Why this machine has no GPU for torch, found without importing torch
    (about 2 s); None when one may be there (torch then decides)."""
    import os
    import shutil

    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip() in ("", "-1"):
        return f"not run: CUDA_VISIBLE_DEVICES={hidden!r} hides every GPU"
    if any(folder.is_dir() and any(folder.iterdir()) for folder in GPU_FOLDERS):
        return None
    if any(node.exists() for node in GPU_DEVICE_NODES):
        return None
    if any(shutil.which(tool) for tool in GPU_TOOLS):
        return None
    return "not run: no GPU here (the smoke runs on a GPU; `dspark smoke --device cpu` runs it slowly)"


def _smoke_runner(runtime):
    """The smoke test on this machine's GPU, or why there is none. Where a
    serving engine is installed, its own segmented RMSNorm runs beside
    dspark's (a warning says why where it cannot). torch is imported only
    where a GPU may be there: the gate on a CPU machine (a CI runner) does
    not pay for it."""
    from importlib.util import find_spec

    if find_spec("torch") is None:
        return None, "not run: torch is not installed (pip install 'dspark[torch]')"
    reason = _no_gpu_reason()
    if reason is not None:
        return None, reason
    from dspark.schema.errors import import_torch_or_why

    torch, why, broken = import_torch_or_why()
    if torch is None:
        return None, f"not run: {why}" + ("" if broken else " (pip install 'dspark[torch]')")

    if not torch.cuda.is_available():
        return None, "not run: no GPU here (the smoke runs on a GPU; `dspark smoke --device cpu` runs it slowly)"
    from dspark.kernels.smoke_checkpoint import smoke_checkpoint

    kernel = "both" if runtime.kernel is not None else "dspark"

    def run(path, smoke_policy):
        return smoke_checkpoint(path, device="cuda", tokens=smoke_policy.tokens, tolerance=smoke_policy.tolerance,
                                kernel=kernel, runtime=runtime, engine_required=False)

    return run, ""
