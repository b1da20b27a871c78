"""`dspark smoke` as a library call: a checkpoint in, a `SmokeReport` out.

Reads only the projection's tensors (`fc_norm.*`, the context projection and
its norm) from any format dspark reads, builds taps (seeded synthetic ones,
or captured ones from a safetensors file), runs
:func:`dspark.kernels.smoke.smoke_projection` and turns its numbers into
findings. Needs torch: the caller checks for it before importing this module.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from dspark.converters.readers import Checkpoint, open_checkpoint
from dspark.converters.sources.local import why_not_a_file
from dspark.schema.dtypes import TORCH_DTYPE_NAMES
from dspark.schema.engines import default_engine
from dspark.schema.errors import (
    CheckpointError,
    DeviceUnavailableError,
    UnsupportedFamilyError,
    UsageError,
    first_line,
)
from dspark.schema.families import known_families_text
from dspark.schema.findings import Finding, Severity

from dspark.converters.runtime import Runtime, probe_runtime

from .smoke import PROJECTION_OVERHEAD_GOAL, ProjectionSmokeResult, smoke_projection
from .smoke_engine import load_engine_kernel

DEFAULT_TOKENS = {"cuda": 8192, "cpu": 8}
# --kernel: whose segmented RMSNorm is judged. `engine` judges the installed
# serving engine's (dspark's runs beside it, for comparison); `both` judges both.
KERNELS = ("dspark", "engine", "both")


@dataclasses.dataclass
class SmokeReport:
    checkpoint: str
    family: str
    device: str
    tokens: int
    taps_source: str
    result: ProjectionSmokeResult
    findings: list[Finding]
    kernel: str = "dspark"
    # the installed engine's kernel as loaded (or why not), when asked for
    engine_kernel: Any = None

    @property
    def passed(self) -> bool:
        return not any(f.severity is Severity.ERROR for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        r = self.result

        def path(check) -> dict[str, Any]:
            return {
                "max_abs_error": check.max_abs_error,
                "rel_rms_error": check.rel_rms_error,
                "cosine_similarity": check.cosine_similarity,
                "tolerance": check.tolerance,
                "within_tolerance": check.within_tolerance,
                "nonfinite": check.nonfinite,
            }

        timings = None
        if r.timings is not None:
            timings = {
                "tokens": r.timings.tokens,
                "norm_ms": r.timings.norm_ms,
                "gemm_ms": r.timings.gemm_ms,
                "projection_ms": r.timings.projection_ms,
                "projection_over_gemm": r.timings.overhead_ratio,
                "goal": PROJECTION_OVERHEAD_GOAL,
            }
        return {
            "checkpoint": self.checkpoint,
            "family": self.family,
            "passed": self.passed,
            "device": self.device,
            "tokens": self.tokens,
            "taps": self.taps_source,
            "dtype": str(r.dtype).removeprefix("torch."),
            "fc_norm": r.has_fc_norm,
            "cast_order": r.cast_order,
            "kernel_backend": r.kernel_backend,
            "kernel_fallback_reason": r.kernel_fallback_reason,
            "paths": {"fused": path(r.fused), "incremental": path(r.incremental), "folded": path(r.folded)},
            "nonfinite_weights": list(r.nonfinite_weights),
            "zero_weights": list(r.zero_weights),
            "zero_output": r.zero_output,
            "timings": timings,
            "kernel": self.kernel,
            "engine_kernel": self._engine_dict(path),
            "findings": [f.to_dict() for f in self.findings],
        }

    def _engine_dict(self, path) -> dict[str, Any] | None:
        if self.engine_kernel is None:
            return None
        check = self.result.engine
        loaded = self.engine_kernel.to_dict()
        if check is None or not check.ran:
            return {**loaded, "ran": False, "reason": check.reason if check is not None else loaded["reason"]}
        return {
            **loaded, "ran": True, "reason": None,
            "paths": {"dspark_norm": path(check.dspark_norm), "engine_norm": path(check.engine_norm),
                      "engine_projection": path(check.engine_projection)},
            "timings": {"dspark_ms": check.dspark_ms, "engine_ms": check.engine_ms, "copy_ms": check.copy_ms},
        }


def resolve_device(device: str | None) -> str:
    """`cuda` when asked for or available, else `cpu`; `cuda` without a GPU
    is a usage error (exit 2), never a silent fall back to the CPU."""
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise DeviceUnavailableError(
            "--device cuda: no CUDA GPU is visible to torch on this machine.",
            hint="Run on a GPU machine, or pass --device cpu to run the kernel under Triton's interpreter.",
        )
    if device not in ("cuda", "cpu"):
        raise UsageError(f"--device {device!r}: use cuda or cpu.")
    return device


def smoke_checkpoint(
    path: Path | str,
    *,
    device: str | None = None,
    tokens: int | None = None,
    taps_file: Path | str | None = None,
    seed: int = 0,
    config_path: Path | str | None = None,
    cast_order: str = "fp32",
    tolerance: float | None = None,
    kernel: str = "dspark",
    runtime: Runtime | None = None,
    engine_path: Path | str | None = None,
    engine_required: bool = True,
) -> SmokeReport:
    """Run the checkpoint's context projection through the fused kernel and
    compare it with an fp32 reference (see :mod:`dspark.kernels.smoke`).
    `tolerance` replaces the working dtype's relative RMS bound. `kernel`
    "engine" or "both" also runs the installed serving engine's segmented
    RMSNorm (`runtime`, else found here or under `engine_path`) beside
    dspark's; where it cannot run, a `UsageError` says why when
    `engine_required` (the user asked for it), else a warning does."""
    if kernel not in KERNELS:
        raise UsageError(f"--kernel {kernel!r}: use one of {', '.join(KERNELS)}.")
    device = resolve_device(device)
    if not 0 <= seed <= _LARGEST_SEED:
        raise UsageError(f"--seed {seed}: a seed is a whole number from 0 to {_LARGEST_SEED}.")
    checkpoint = open_checkpoint(path, config_path=config_path)
    family, num_segments, target_hidden, eps = _projection_shape(checkpoint)
    weights = _load_projection_weights(checkpoint, num_segments)
    engine_kernel = None
    # Without fc_norm the engine projects the taps with fc and a plain
    # RMSNorm (GQA DFlash and DFlash2: models/dflash.py::DFlashDraftModel.
    # project_target_hidden@tokenspeed==0.1.1:397-398): no engine kernel to
    # put beside dspark's, so `both` tests dspark's alone and says so (SMK012),
    # needing no engine installed; `engine` alone still refuses below.
    engine_step_absent = kernel == "both" and "fc_norm.0.weight" not in weights
    if kernel != "dspark" and not engine_step_absent:
        engine_kernel = load_engine_kernel(probe_runtime(engine_path) if runtime is None else runtime)
        why = engine_kernel.reason
        if why is None and "fc_norm.0.weight" not in weights:
            why = "the draft has no fc_norm: the engine runs no segmented RMSNorm for it"
            if not engine_required:  # nothing of the engine's to test, and nothing wrong
                engine_kernel = None
        if why is not None and engine_required:
            raise EngineKernelUnavailable(
                f"--kernel {kernel}: the engine's segmented_rmsnorm cannot run here: {why}.",
                hint="Run where the engine is installed (--engine-path DIR names it) and its kernel can run, "
                     "or use --kernel dspark.",
            )

    if taps_file is not None:
        taps = load_taps(Path(taps_file), num_segments, target_hidden)
        taps_source = str(taps_file)
    else:
        taps = None
        tokens_given = tokens is not None
        tokens = DEFAULT_TOKENS[device] if tokens is None else tokens
        if tokens < 1:
            raise UsageError(f"--tokens {tokens}: need at least one token row.")
        taps_source = f"synthetic (seed {seed}; per-tap RMS from 0.1 to 100)"

    try:
        result = smoke_projection(
            weights,
            rms_norm_eps=eps,
            num_segments=num_segments,
            target_hidden=target_hidden,
            tokens=tokens or 0,
            seed=seed,
            device=device,
            taps=taps,
            cast_order=cast_order,
            tolerance=tolerance,
            engine_norm=engine_kernel.run if engine_kernel is not None else None,
            engine_name=engine_kernel.engine if engine_kernel is not None else "engine",
        )
    except RuntimeError as error:
        if not _out_of_memory(error):
            raise
        if taps is not None:
            what, hint = f"--taps {taps_file}", "Capture fewer token rows into the taps file."
        else:
            what = f"--tokens {tokens}" if tokens_given else f"{tokens} rows (the default on {device})"
            hint = "Use fewer rows (--tokens): a few thousand are enough to test the kernel."
        rows = taps.shape[0] if taps is not None else tokens
        raise UsageError(
            f"{what}: the projection of {rows} rows of {num_segments} x {target_hidden} taps does not fit in "
            f"{device} memory ({first_line(error)}).",
            hint=hint,
        ) from None
    except ValueError as error:
        raise CheckpointError(
            f"{checkpoint.source}: {error}.",
            code="INV003",
            hint=f"Run `dspark check {checkpoint.source}` for the full report.",
        ) from None
    if engine_kernel is not None and engine_kernel.available and engine_required and not result.engine.ran:
        raise EngineKernelUnavailable(
            f"--kernel {kernel}: the engine's segmented_rmsnorm ({engine_kernel.module}) did not run on {device}: "
            f"{result.engine.reason}.",
            hint="Run on the machine the engine serves from (its kernel may need a GPU), or use --kernel dspark.",
        )
    return SmokeReport(
        checkpoint=str(checkpoint.source),
        family=family.name,
        device=device,
        tokens=result.tokens,
        taps_source=taps_source,
        result=result,
        findings=smoke_findings(result, kernel=kernel, engine_kernel=engine_kernel) + ([Finding(
            "SMK012",
            f"--kernel both: the {family.name} draft has no fc_norm, so the engine runs no segmented RMSNorm on its "
            "context projection (fc, then an ordinary RMSNorm): dspark's kernel alone was tested against the fp32 "
            "reference.",
            detail={"family": family.name},
        )] if engine_step_absent else []),
        kernel=kernel,
        engine_kernel=engine_kernel,
    )


class EngineKernelUnavailable(UsageError):
    """`--kernel engine` was asked for and the engine's kernel cannot run here (exit 2)."""


# torch.manual_seed takes up to 2**64 - 1; a seed is kept to what every
# generator (and the JSON report) holds as a signed 64-bit integer.
_LARGEST_SEED = 2**63 - 1


def _out_of_memory(error: RuntimeError) -> bool:
    """torch's allocators: OutOfMemoryError on CUDA, a RuntimeError from
    the CPU allocator saying it "can't allocate memory"."""
    out_of_memory = getattr(torch, "OutOfMemoryError", None)
    return (out_of_memory is not None and isinstance(error, out_of_memory)) or (
        "DefaultCPUAllocator: can't allocate memory" in str(error))


def _projection_shape(checkpoint: Checkpoint):
    damaged = [f for f in checkpoint.findings if f.severity is Severity.ERROR]
    if damaged:
        # A corrupt file would otherwise surface as a "missing" tensor.
        raise CheckpointError(
            f"{checkpoint.source}: cannot smoke-test a damaged checkpoint: {damaged[0].message}",
            code=damaged[0].code,
            path=damaged[0].file,
            tensor=damaged[0].tensor,
            hint=f"Run `dspark check {checkpoint.source}` for every problem, and fix the files first.",
        )
    config, family = checkpoint.config, checkpoint.family
    if config is not None and family is None and not checkpoint.config_findings:
        # As check and convert: a family dspark does not model is input it
        # cannot judge (exit 2), not a broken draft.
        raise UnsupportedFamilyError(
            f"{checkpoint.source}: cannot smoke-test: model_type {config.get('model_type')!r} / architectures "
            f"{config.get('architectures')!r} is not a known draft family. Known: {known_families_text()}.",
            path=checkpoint.config_display,
            hint="Fix model_type/architectures in the config (k3_dspark / K3DSparkModel for a K3 draft).",
        )
    if config is None or family is None:
        problem = checkpoint.config_findings[0].message if checkpoint.config_findings else (
            "its config names no known draft family")
        raise CheckpointError(
            f"{checkpoint.source}: cannot smoke-test: {problem}",
            code=checkpoint.config_findings[0].code if checkpoint.config_findings else "CFG001",
            hint=f"Run `dspark check {checkpoint.source}` and fix what it reports first.",
        )
    dims = _engine_dims(family, config)
    eps = config.get("rms_norm_eps")
    if "S" not in dims or "th" not in dims or not isinstance(eps, (int, float)) or isinstance(eps, bool) or eps <= 0:
        raise CheckpointError(
            f"{checkpoint.config_display}: needs the tap count, target_hidden_size and a positive rms_norm_eps "
            "to run the projection.",
            code="CFG003",
            path=checkpoint.config_display,
            hint=f"Run `dspark check {checkpoint.source}` and fix what it reports first.",
        )
    return family, dims["S"], dims["th"], float(eps)


def _load_projection_weights(checkpoint: Checkpoint, num_segments: int) -> dict[str, torch.Tensor]:
    family = checkpoint.family
    _refuse_unmodelled_features(checkpoint)
    wanted = {
        "context_proj.weight": family.name_for_role("context_proj"),
        "context_norm.weight": family.name_for_role("context_norm"),
    }
    declared = checkpoint.config.get("fc_norm") is True
    shipped = sorted(e.served_name for e in checkpoint.entries if e.served_name.startswith("fc_norm."))
    if shipped and not declared:
        raise CheckpointError(
            f"{checkpoint.source}: fc_norm weights are shipped but config.json does not declare fc_norm: true; "
            "a server would skip them, so there is no single projection to test.",
            code="FCN002",
            tensor=shipped[0],
            hint=f"Run `dspark check {checkpoint.source}`.",
        )
    if declared:
        wanted.update({f"fc_norm.{i}.weight": f"fc_norm.{i}.weight" for i in range(num_segments)})

    weights = {}
    for smoke_name, served_name in wanted.items():
        entry = checkpoint.entry(served_name)
        if entry is None:
            raise CheckpointError(
                f"{checkpoint.source}: {served_name} is missing; the projection cannot run without it.",
                code="FCN001" if served_name.startswith("fc_norm.") else "INV001",
                tensor=served_name,
                hint=f"Run `dspark check {checkpoint.source}`.",
            )
        if entry.dtype not in TORCH_DTYPE_NAMES or entry.dtype in ("BOOL",) or entry.dtype.startswith(("I", "U")):
            raise CheckpointError(
                f"{entry.file}: {served_name} has dtype {entry.dtype}; the projection needs floating-point weights.",
                code="INV004",
                path=entry.file,
                tensor=served_name,
            )
        raw = checkpoint.reader.read_raw(entry)
        dtype = getattr(torch, TORCH_DTYPE_NAMES[entry.dtype])
        tensor = torch.frombuffer(bytearray(raw), dtype=dtype) if entry.numel else torch.empty(0, dtype=dtype)
        weights[smoke_name] = tensor.reshape(entry.shape)
    return weights


def _refuse_unmodelled_features(checkpoint: Checkpoint) -> None:
    """The smoke runs fc_norm -> context projection -> its norm. A draft
    that adds another step to the context path (norm_before_fc: an RMSNorm
    over the concatenated taps before fc) is not what it tests: say so
    rather than pass a projection the engine does not run."""
    family = checkpoint.family
    expected, _ = family.expected_tensors(_engine_dims(family, checkpoint.config), None)
    for feature in family.declared_features:
        if feature == "fc_norm":
            continue
        shipped = [e.served_name for e in checkpoint.entries
                   if expected.get(e.served_name) is not None and expected[e.served_name].rule.when == feature]
        if checkpoint.config.get(feature) is True or shipped:
            raise UsageError(
                f"{checkpoint.source}: smoke does not apply to a {family.name} draft with {feature}: it tests "
                "fc_norm -> context projection -> norm, and this draft's context path has another step "
                f"({feature}). Nothing was run.",
                hint=f"Run `dspark check {checkpoint.source}`; the projection smoke covers fc_norm drafts.",
            )


def load_taps(path: Path, num_segments: int, target_hidden: int) -> torch.Tensor:
    """Captured taps from a safetensors file: `tap.{i}` of `[T, th]` for every
    tap, or a single `[T, S*th]` tensor. Returns `[T, S*th]`."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise UsageError(f"--taps {path}: {why_not_a_file(path)}.", hint="Pass a safetensors file of captured taps.")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as error:
        raise UsageError(f"--taps {path}: not a readable safetensors file ({error}).") from None
    width = num_segments * target_hidden
    integral = sorted(name for name, tensor in tensors.items() if not tensor.is_floating_point())
    if integral:
        raise UsageError(f"--taps {path}: {integral[0]} is {tensors[integral[0]].dtype}; captured taps are hidden states, floating point.")
    tap_names = [f"tap.{i}" for i in range(num_segments)]
    if all(name in tensors for name in tap_names):
        parts = [tensors[name] for name in tap_names]
        for name, part in zip(tap_names, parts):
            if part.dim() != 2 or part.shape[1] != target_hidden or part.shape[0] != parts[0].shape[0]:
                raise UsageError(
                    f"--taps {path}: {name} is {list(part.shape)}; every tap must be [T, {target_hidden}] "
                    "with the same T.",
                )
        return _with_rows(path, tap_names[0], torch.cat(parts, dim=1))
    if len(tensors) == 1:
        (name, single), = tensors.items()
        if single.dim() == 2 and single.shape[1] == width:
            return _with_rows(path, name, single)
        raise UsageError(f"--taps {path}: {name} is {list(single.shape)}; expected [T, {width}] (taps x target_hidden_size).")
    raise UsageError(
        f"--taps {path}: expected tensors {', '.join(tap_names)} or one [T, {width}] tensor; found "
        f"{', '.join(sorted(tensors)[:6])}.",
    )


def _with_rows(path: Path, name: str, taps: torch.Tensor) -> torch.Tensor:
    # Zero rows would compare nothing and pass.
    if taps.shape[0] == 0:
        raise UsageError(
            f"--taps {path}: {name} has no token rows (T = 0); there is nothing to compare.",
            hint="Capture at least one token's taps.",
        )
    return taps


def smoke_findings(result: ProjectionSmokeResult, *, kernel: str = "dspark", engine_kernel=None) -> list[Finding]:
    findings: list[Finding] = []
    fused, incremental, folded = result.fused, result.incremental, result.folded
    if result.nonfinite_weights or result.nonfinite_output:
        where = ", ".join(result.nonfinite_weights) or "the projection output"
        findings.append(Finding(
            "SMK001",
            f"NaN or Inf in {where}; a server would emit garbage context. Do not deploy this draft.",
            tensor=result.nonfinite_weights[0] if result.nonfinite_weights else None,
            detail={"nonfinite_weights": list(result.nonfinite_weights)},
        ))
    if result.zero_weights or result.zero_output:
        what = [f"{name} is all zeros" for name in result.zero_weights]
        if result.zero_output:
            what.append("the fp32 reference output is all zeros")
        findings.append(Finding(
            "SMK008",
            f"{'; '.join(what)}: the projection computes nothing, and zeros agreeing with zeros "
            "prove nothing. The weights were lost in export or never trained; do not deploy this draft.",
            tensor=result.zero_weights[0] if result.zero_weights else None,
            detail={"zero_weights": list(result.zero_weights), "zero_output": result.zero_output},
        ))
    if kernel != "engine" and not fused.within_tolerance and not fused.nonfinite and not result.zero_output:
        findings.append(Finding(
            "SMK002",
            f"the fused projection is off the fp32 reference by relative RMS {fused.rel_rms_error:.3e} "
            f"(tolerance {fused.tolerance:.0e}, max abs {fused.max_abs_error:.3e}, cosine "
            f"{fused.cosine_similarity:.6f}).",
            detail={"rel_rms_error": fused.rel_rms_error, "tolerance": fused.tolerance},
        ))
    if result.has_fc_norm:
        verdict = ("within tolerance, so the fc_norm scales are close to uniform" if incremental.within_tolerance
                   else "so the fast path must stand down for this draft")
    else:
        verdict = "within tolerance, as expected without fc_norm" if incremental.within_tolerance else (
            "outside tolerance even without fc_norm")
    findings.append(Finding(
        "SMK003",
        f"incremental fast path (pre-split columns, no fc_norm): relative RMS error "
        f"{incremental.rel_rms_error:.3e}, cosine {incremental.cosine_similarity:.6f}, {verdict}.",
        detail={"rel_rms_error": incremental.rel_rms_error, "within_tolerance": incremental.within_tolerance},
    ))
    if result.has_fc_norm:
        code = "SMK004" if folded.within_tolerance else "SMK005"
        findings.append(Finding(
            code,
            f"folded incremental path (fc_norm folded into the columns): relative RMS error "
            f"{folded.rel_rms_error:.3e} against tolerance {folded.tolerance:.0e}; "
            + ("the fast path could stay on with folded columns." if folded.within_tolerance
               else "folding is not accurate enough here to keep the fast path on."),
            detail={"rel_rms_error": folded.rel_rms_error, "tolerance": folded.tolerance},
        ))
    if result.kernel_backend == "torch-reference":
        findings.append(Finding(
            "SMK006",
            f"the Triton kernel did not run ({result.kernel_fallback_reason}); the torch reference "
            "computed the norms, so the kernel itself is untested here.",
            detail={"reason": result.kernel_fallback_reason},
        ))
    if result.timings is not None:
        t = result.timings
        findings.append(Finding(
            "SMK007",
            f"T={t.tokens}: segmented norm {t.norm_ms * 1e3:.1f} µs, GEMM {t.gemm_ms * 1e3:.1f} µs, whole "
            f"projection {t.projection_ms * 1e3:.1f} µs = {t.overhead_ratio:.3f}x the GEMM "
            f"(goal <= {PROJECTION_OVERHEAD_GOAL}x: {'met' if t.meets_goal else 'missed'}).",
            detail={"norm_ms": t.norm_ms, "gemm_ms": t.gemm_ms, "projection_ms": t.projection_ms,
                    "ratio": t.overhead_ratio, "goal": PROJECTION_OVERHEAD_GOAL},
        ))
    if engine_kernel is not None:
        findings += _engine_findings(result, kernel, engine_kernel)
    return findings


def _engine_findings(result: ProjectionSmokeResult, kernel: str, engine_kernel) -> list[Finding]:
    check = result.engine
    name = engine_kernel.engine
    if check is None or not check.ran:
        why = check.reason if check is not None else engine_kernel.reason
        return [Finding(
            "SMK011",
            f"{name}'s segmented_rmsnorm did not run here: {why}; only dspark's kernel was tested.",
            detail=engine_kernel.to_dict() | {"reason": why},
        )]
    findings = []
    compiled = f", compiled by {engine_kernel.triton}" if engine_kernel.triton else ""
    why_alone = engine_kernel.loaded_alone_why
    alone = (f" (its package did not import here: {why_alone.split('; ')[0].removeprefix('importing ')}"
             f"; the kernel's file was loaded alone)" if why_alone else "")
    if engine_kernel.in_child:
        alone += " in a child process (timed there)"
    side = (f"{name}'s segmented_rmsnorm ({engine_kernel.module}{compiled}){alone} beside dspark's on the fc_norm "
            f"step: relative RMS "
            f"error {check.engine_norm.rel_rms_error:.3e} against dspark's {check.dspark_norm.rel_rms_error:.3e}; "
            f"the projection through it {check.engine_projection.rel_rms_error:.3e} (tolerance "
            f"{check.engine_norm.tolerance:.0e})")
    detail = {"engine": name, "module": engine_kernel.module, "call": engine_kernel.call_source,
              "triton": engine_kernel.triton, "loaded_alone": why_alone,
              "in_child": engine_kernel.in_child,
              "engine_norm_rel_rms": check.engine_norm.rel_rms_error,
              "dspark_norm_rel_rms": check.dspark_norm.rel_rms_error,
              "engine_projection_rel_rms": check.engine_projection.rel_rms_error,
              "dspark_ms": check.dspark_ms, "engine_ms": check.engine_ms, "copy_ms": check.copy_ms}
    if check.engine_ms is not None:
        side += (f"; T={result.tokens}: dspark {check.dspark_ms * 1e3:.1f} µs, engine {check.engine_ms * 1e3:.1f} µs "
                 f"({check.dspark_ms / check.engine_ms:.2f}x the engine's), copy of the same bytes "
                 f"{check.copy_ms * 1e3:.1f} µs")
    findings.append(Finding("SMK010", side + ".", detail=detail))
    if not check.within_tolerance and kernel in ("engine", "both"):
        off = check.engine_norm if not check.engine_norm.within_tolerance else check.engine_projection
        findings.append(Finding(
            "SMK009",
            f"{name}'s segmented_rmsnorm is off the fp32 reference: {off.name} relative RMS "
            f"{off.rel_rms_error:.3e} (tolerance {off.tolerance:.0e}, max abs {off.max_abs_error:.3e}); the engine "
            "would serve this draft's context wrong. Do not deploy on this engine install.",
            detail=detail,
        ))
    return findings

def _engine_dims(family, config) -> dict[str, int]:
    """The draft's dimensions as the engine whose kernel smoke tests (the
    default one) builds them: its loader may size taps otherwise than the
    trainer wrote (`FamilyLoader.dims`)."""
    loader = default_engine().loader_for(family.name)
    return family.resolve_dims(config, loader.dims if loader is not None else None)
