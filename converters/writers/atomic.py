"""Writing a folder so that it is either absent or complete.

`write_atomically(destination, fill)` has `fill` write into a temporary
folder beside the destination, then renames it into place (over an empty
folder too: rename takes the place of one); an error or a terminating
signal (SIGINT, SIGTERM, SIGHUP, ...) removes the temporary folder instead. An empty folder that cannot be
renamed over (a mount point, or one whose parent is not writable) is
written in place: the temporary folder is made inside it and its files are
moved up, the manifest last. A destination that another run filled while
this one was writing is left as it is (`DestinationTaken`). Files are written
exclusively and fsynced (`write_json`, `write_all`), and so is the folder.
`clean_stale_temporaries` removes what a killed run (SIGKILL, power loss)
left behind. Nothing here knows what is written.
"""

from __future__ import annotations

import errno
import glob
import hashlib
import json
import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Any, Callable, TypeVar

from dspark.schema.errors import UsageError

TEMP_MARK = ".dspark-tmp-"
OLD_MARK = ".dspark-old-"
# Room a sibling's name needs beyond the destination's: the dot, a mark and a pid.
_SIBLING_EXTRA = 1 + len(TEMP_MARK) + 10

Result = TypeVar("Result")


def write_atomically(
    destination: Path,
    fill: Callable[[Path], Result],
    *,
    replace: bool,
    before_replace: Callable[[Path], None] | None = None,
    last: tuple[str, ...] = (),
) -> Result:
    """Run `fill(temporary_folder)`, then move the folder to `destination`
    (replacing an existing one only with `replace`, and after
    `before_replace(destination)` has not raised; written in place, the
    files named in `last` are moved last). Returns what `fill` returned."""
    destination = Path(os.path.abspath(destination))
    parent = destination.parent
    parent.mkdir(parents=True, exist_ok=True)
    in_place = writes_in_place(destination)
    clean_stale_temporaries(destination, inside=in_place)
    temporary = (destination if in_place else parent) / f"{sibling_stem(destination)}{TEMP_MARK}{os.getpid()}"
    if temporary.exists():
        shutil.rmtree(temporary)

    def move() -> None:
        if in_place:
            move_up_into(temporary, destination, last)
        else:
            move_into_place(temporary, destination, replace=replace, before_replace=before_replace)

    with InterruptGuard() as guard:
        try:
            temporary.mkdir()
            result = fill(temporary)
            guard.commit(move)
        except BaseException:
            guard.disarm()
            shutil.rmtree(temporary, ignore_errors=True)
            raise
    return result


def write_all(handle, data) -> None:
    """Write every byte of `data` (a raw file's `write` may take fewer)."""
    view = memoryview(data).cast("B")
    while view:
        done = handle.write(view)
        view = view[done:]


def write_json(path: Path, document) -> None:
    """JSON with a stable layout, written exclusively and fsynced."""
    # allow_nan=False: NaN and Infinity are not JSON; no reader of the output should have to accept them
    data = (json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
    with open(path, "xb", buffering=0) as handle:
        write_all(handle, data)
        os.fsync(handle.fileno())


def fsync_dir(folder: Path) -> None:
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return  # platforms without directory handles
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


class DestinationTaken(UsageError):
    """The destination was filled while this run wrote its own output."""

    def __init__(self, destination: Path) -> None:
        super().__init__(
            f"{destination} appeared while converting: another convert (or another program) finished writing "
            "it first. It was left as it is, and this run's output was discarded.",
            path=str(destination),
            hint="Check what is in that folder now; pass --force to replace it with this conversion, or pick "
            "another destination.",
        )


# What rename(2) says when the destination is a folder that is not empty, or no folder.
TAKEN_ERRNOS = {errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR}


def writes_in_place(destination: Path) -> bool:
    """An existing empty folder that cannot be renamed over: a mount point
    (rename cannot cross into it, nor remove it), or one in a folder this
    process may not write (no temporary folder can sit beside it)."""
    if destination.is_symlink() or not destination.is_dir():
        return False
    try:
        if next(os.scandir(destination), None) is not None:
            return False
    except OSError:
        return False
    return os.path.ismount(destination) or not os.access(destination.parent, os.W_OK)


def move_up_into(temporary: Path, destination: Path, last: tuple[str, ...] = ()) -> None:
    """Move the files of `temporary` (inside `destination`) up into
    `destination`, the names in `last` last (a reader that finds the
    manifest finds every file it lists); on an error the ones moved go back.
    Refused when anything else appeared there."""
    if any(entry != temporary.name for entry in os.listdir(destination)):
        raise DestinationTaken(destination)
    moved: list[str] = []
    try:
        for name in sorted(os.listdir(temporary), key=lambda name: name in last):
            os.rename(temporary / name, destination / name)
            moved.append(name)
    except BaseException:
        for name in moved:
            os.rename(destination / name, temporary / name)
        raise
    os.rmdir(temporary)
    fsync_dir(destination)


def _rename_into_place(temporary: Path, destination: Path) -> bool:
    """Rename `temporary` to `destination` where nothing or an empty folder
    is; False when something else is there (another run's output, a file)."""
    try:
        os.rename(temporary, destination)
        return True
    except OSError as error:
        if error.errno not in TAKEN_ERRNOS:
            raise
    # Where rename(2) will not take the place of an empty folder (Windows):
    # remove it, which succeeds only while it is empty, and rename again.
    try:
        os.rmdir(destination)
    except OSError:
        return False
    try:
        os.rename(temporary, destination)
    except OSError as error:
        if error.errno not in TAKEN_ERRNOS:
            raise
        return False
    return True


def move_into_place(
    temporary: Path, destination: Path, *, replace: bool, before_replace: Callable[[Path], None] | None = None
) -> None:
    # One rename, whatever is there: it takes the place of nothing or of an
    # empty folder, and fails on anything else. A check first would leave a
    # moment in which a racing convert could finish between it and the rename.
    if _rename_into_place(temporary, destination):
        fsync_dir(destination.parent)
        return
    if not replace:
        raise DestinationTaken(destination)
    if destination.is_dir() and not destination.is_symlink() and before_replace is not None:
        # Again, now: files may have been put there while writing.
        before_replace(destination)
    old = destination.parent / f"{sibling_stem(destination)}{OLD_MARK}{os.getpid()}"
    os.rename(destination, old)
    try:
        os.rename(temporary, destination)
    except BaseException:
        os.rename(old, destination)
        raise
    fsync_dir(destination.parent)
    if old.is_symlink() or not old.is_dir():
        old.unlink()
    else:
        shutil.rmtree(old, ignore_errors=True)


def name_limit(folder: Path) -> int:
    """The longest file name, in bytes, the filesystem of `folder` takes
    (255 where it will not say, or says there is no limit)."""
    try:
        limit = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return 255
    return limit if limit > 0 else 255


def sibling_stem(destination: Path) -> str:
    """The start of the names of `destination`'s temporary and moved-aside
    siblings: `.<name>`, or, where that would make a name longer than the
    filesystem allows, a shortened name and a digest of the whole one (a
    destination name that is legal must stay usable)."""
    name = destination.name
    limit = name_limit(destination.parent)
    if len(os.fsencode(name)) + _SIBLING_EXTRA <= limit:
        return f".{name}"
    digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:12]
    keep = os.fsencode(name)[: max(0, limit - _SIBLING_EXTRA - len(digest) - 1)].decode("utf-8", "ignore")
    return f".{keep}~{digest}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def clean_stale_temporaries(destination: Path, *, inside: bool = False) -> list[Path]:
    """Remove what a killed convert (SIGKILL, power loss) left beside
    `destination` (`inside` it, for one written in place): its temporary
    folder, and a previous destination it had moved aside (put back if the
    destination is missing)."""
    removed: list[Path] = []
    pattern = glob.escape(sibling_stem(destination))
    folder = destination if inside else destination.parent
    for mark in (TEMP_MARK, OLD_MARK):
        for leftover in sorted(folder.glob(f"{pattern}{mark}*")):
            pid_text = leftover.name.rsplit(mark, 1)[-1]
            if not pid_text.isdigit() or int(pid_text) == os.getpid() or _pid_alive(int(pid_text)):
                continue
            if mark == OLD_MARK and not (destination.exists() or destination.is_symlink()):
                os.rename(leftover, destination)
                continue
            shutil.rmtree(leftover, ignore_errors=True)
            removed.append(leftover)
    return removed


COMPLETED_BEFORE_INTERRUPT = (
    "interrupted while the finished output was being moved into place; the move completed, so the "
    "destination holds the whole new conversion"
)


class _Interrupted(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


# Every signal a process can catch whose default is to end it: a closed
# terminal (SIGHUP), a job scheduler's SIGTERM or SIGUSR1, Ctrl-\ (SIGQUIT)
# must not leave a staging folder as large as the model behind, any more
# than Ctrl-C does. SIGPIPE is not among them: Python ignores it and a
# closed pipe is a BrokenPipeError.
TERMINATING_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM",
                                       "SIGXCPU", "SIGVTALRM", "SIGPROF")
    if hasattr(signal, name)
)


class InterruptGuard:
    """Terminating signals (`TERMINATING_SIGNALS`) raise inside the
    conversion (so the temporary folder is removed) instead of killing it
    midway; they are held back while the result is being moved into place.
    A signal the process was told to ignore (`nohup` ignores SIGHUP) stays
    ignored. On the way out the previous handlers come back and an
    interrupted run re-delivers its signal to them (SIGINT ->
    KeyboardInterrupt; the others -> their default action, which ends the
    process by that signal, so its exit status names it); one held back
    during a move that completed says so. Outside the main thread Python
    cannot install handlers, and the guard does nothing."""

    SIGNALS = TERMINATING_SIGNALS

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}
        self._armed = False
        self._pending: int | None = None
        self._committed = False

    def _handle(self, signum: int, frame: Any) -> None:
        if self._armed:
            self._armed = False
            raise _Interrupted(signum)
        self._pending = self._pending or signum

    def __enter__(self) -> "InterruptGuard":
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    self._previous[signum] = signal.signal(signum, self._handle)
            self._armed = True
        return self

    def disarm(self) -> None:
        """From here on a signal is only noted (cleanup must finish)."""
        self._armed = False

    def commit(self, move: Callable[[], None]) -> None:
        """Run `move` with the signals held back, then hand them back."""
        # Blocking the signals covers this thread only: with another thread
        # alive (convert's hashing thread) the kernel hands the signal to
        # that one, and Python still runs the handler here, between two
        # renames. Disarmed, the handler only notes it.
        self._armed = False
        blocking = hasattr(signal, "pthread_sigmask") and bool(self._previous)
        if blocking:
            signal.pthread_sigmask(signal.SIG_BLOCK, tuple(self._previous))
        try:
            move()
            self._committed = True
        finally:
            if blocking:
                # Unblocked while this guard's handler is still installed: a
                # signal held back here reaches it and is noted, not lost to
                # the handler restored below.
                signal.pthread_sigmask(signal.SIG_UNBLOCK, tuple(self._previous))
        self._restore()

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._armed = False
        self._restore()
        signum = exc.signum if isinstance(exc, _Interrupted) else self._pending
        if signum is None:
            return False
        if signum != signal.SIGINT:
            signal.raise_signal(signum)  # the previous handler decides; by default the process ends here
        if self._committed and exc is None:
            raise KeyboardInterrupt(COMPLETED_BEFORE_INTERRUPT) from None
        raise KeyboardInterrupt from None
