"""Reads at a file offset, for every platform dspark installs on.

The readers, the `--deep` scan, `--verify` and `convert` read payloads at
an offset without moving a shared file position (`os.pread`/`os.preadv`),
so the scan's threads can read one file at once. Windows has neither call:
there a read takes a lock held per file descriptor, seeks, and reads, which
gives the same bytes (threads reading the same descriptor wait for each
other; those reading different files do not). `HAVE_PREAD` picks the path
once; tests set it False to run the fallback on Linux.
"""

from __future__ import annotations

import os
import threading

HAVE_PREAD = hasattr(os, "pread") and hasattr(os, "preadv")

_locks: dict[int, threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock_for(fd: int) -> threading.Lock:
    with _locks_guard:
        lock = _locks.get(fd)
        if lock is None:
            lock = _locks[fd] = threading.Lock()
        return lock


def pread(fd: int, size: int, offset: int) -> bytes:
    """Up to `size` bytes at `offset` (fewer at the end of the file)."""
    if HAVE_PREAD:
        return os.pread(fd, size, offset)
    with _lock_for(fd):
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, size)


def pread_into(fd: int, target: memoryview, offset: int) -> int:
    """Read up to len(target) bytes at `offset` into `target`; the count
    read (0 at the end of the file)."""
    if HAVE_PREAD:
        return os.preadv(fd, [target], offset)
    with _lock_for(fd):
        os.lseek(fd, offset, os.SEEK_SET)
        data = os.read(fd, len(target))  # no readv on Windows: one copy
    target[: len(data)] = data
    return len(data)
