"""The one error family of dspark.

Every failure a user can cause or meet raises a subclass of `DsparkError`.
Only the CLI turns these into exit codes (`dspark.cli.errors`); library code
raises and returns, it never exits.
"""

from __future__ import annotations


class DsparkError(Exception):
    """Base of every error dspark raises on purpose.

    `hint` tells the user what to do about it; `path` and `tensor` name what
    it is about, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        path: str | None = None,
        tensor: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.path = path
        self.tensor = tensor

    def __str__(self) -> str:
        return self.message


class UsageError(DsparkError):
    """The command was asked for something that cannot be done as asked:
    no such path, not a checkpoint at all, an output that already exists."""


class UnsupportedFamilyError(UsageError):
    """The config names a draft family dspark does not model: not a broken
    checkpoint, a checkpoint dspark cannot judge (exit 2)."""


class CheckpointError(DsparkError):
    """The checkpoint itself is broken: a corrupt or inconsistent file, a
    tensor that cannot be read. Carries a finding `code` for reports."""

    def __init__(self, message: str, *, code: str, detail: dict | None = None, **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.code = code
        self.detail = dict(detail or {})

    def with_reason(self, reason: str) -> "CheckpointError":
        """Tag the error with a machine-readable reason (kept in `detail`)."""
        self.detail["reason"] = reason
        return self


class MissingDependencyError(DsparkError):
    """An optional dependency (torch, triton) is needed and absent."""


class DeviceUnavailableError(DsparkError):
    """A device was asked for (`--device cuda`) that this machine lacks."""


class UnsafeInputError(CheckpointError):
    """Input that would need arbitrary code execution to load (a pickle
    with a code payload). Refused, never run."""


def require_torch(feature: str):
    """Import torch for `feature`, or say which extra brings it."""
    try:
        import torch  # noqa: PLC0415 - torch is optional and slow to import
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise _torch_broken(feature, exc) from exc
        raise MissingDependencyError(
            f"{feature} needs PyTorch, which is not installed.",
            hint="Install the extra: pip install 'dspark[torch]'.",
        ) from exc
    except (ImportError, OSError) as exc:  # a missing shared library is an OSError
        raise _torch_broken(feature, exc) from exc
    return torch


def import_torch_or_why() -> tuple[object | None, str | None, bool]:
    """(torch, None, False) when it imports; else (None, why in words,
    broken): broken when torch is installed but its import fails, which a
    report must not call "not installed"."""
    try:
        import torch  # noqa: PLC0415 - torch is optional and slow to import
    except ModuleNotFoundError as exc:
        if exc.name == "torch":
            return None, "torch is not installed", False
        return None, f"torch is installed but does not import here ({type(exc).__name__}: {first_line(exc)})", True
    except (ImportError, OSError) as exc:
        return None, f"torch is installed but does not import here ({type(exc).__name__}: {first_line(exc)})", True
    return torch, None, False


def _torch_broken(feature: str, error: BaseException) -> MissingDependencyError:
    """torch is there but does not import (a CUDA library or one of its own
    dependencies missing): saying "not installed" would send the user to
    install what they have."""
    return MissingDependencyError(
        f"{feature} needs PyTorch, which is installed but does not import here: "
        f"{type(error).__name__}: {first_line(error)}",
        hint="Run python -c 'import torch' to see the whole error; reinstall torch for this machine's "
             "accelerator (or its missing dependency) and try again.",
    )


def first_line(error: BaseException, limit: int = 200) -> str:
    """The first line of an exception's text (its type's name when it has
    none), cut to `limit` characters: what a message quoting another
    library's error needs, without its traceback-length detail."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:limit]
