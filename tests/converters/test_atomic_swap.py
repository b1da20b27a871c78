"""A signal that lands while `write_atomically` swaps the finished folder
into place, with a second thread alive as convert's hashing thread is: the
kernel may hand it to that thread, and Python then runs the handler in the
main thread between the two renames. The swap must still complete."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from dspark.converters.writers import atomic

pytestmark = pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="needs POSIX signals")

SWAP_UNDER_SIGNAL = textwrap.dedent("""
    import os, signal, sys, threading, time
    from pathlib import Path
    from dspark.converters.writers import atomic

    signum = getattr(signal, sys.argv[2])
    destination = Path(sys.argv[1])
    if sys.argv[3] == "two-threads":
        other = threading.Event()
        threading.Thread(target=other.wait, daemon=True).start()
    real_rename = os.rename

    def rename(source, target):
        real_rename(source, target)
        if atomic.OLD_MARK in str(target):  # the previous folder was just moved aside
            os.kill(os.getpid(), signum)
            time.sleep(0.2)

    atomic.os.rename = rename

    def fill(folder):
        (folder / "new.txt").write_text("new")

    atomic.write_atomically(destination, fill, replace=True)
    print("returned")
""")


def previous_output(tmp_path: Path) -> Path:
    destination = tmp_path / "out"
    destination.mkdir()
    (destination / "old.txt").write_text("previous conversion")
    return destination


@pytest.mark.parametrize("threads", ["one-thread", "two-threads"])
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_signal_during_the_swap_waits_for_it_to_complete(tmp_path: Path, signame: str, threads: str) -> None:
    destination = previous_output(tmp_path)
    run = subprocess.run([sys.executable, "-c", SWAP_UNDER_SIGNAL, str(destination), signame, threads],
                         capture_output=True, text=True, timeout=60)
    # the run ends as interrupted, after the swap: never in the middle of it
    if signame == "SIGTERM":
        assert run.returncode == -signal.SIGTERM, run.stderr
    else:
        assert "KeyboardInterrupt" in run.stderr and atomic.COMPLETED_BEFORE_INTERRUPT in run.stderr
    assert "returned" not in run.stdout
    assert sorted(p.name for p in destination.iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing moved aside or left half-deleted


def test_a_signal_before_the_swap_still_removes_the_temporary_folder(tmp_path: Path) -> None:
    destination = previous_output(tmp_path)
    helper = threading.Event()
    threading.Thread(target=helper.wait, daemon=True).start()

    def fill(folder: Path) -> None:
        (folder / "new.txt").write_text("new")
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)  # the handler raises in here

    try:
        with pytest.raises(KeyboardInterrupt) as raised:
            atomic.write_atomically(destination, fill, replace=True)
    finally:
        helper.set()
    assert str(raised.value) == ""  # a plain interrupt: nothing was moved
    assert sorted(p.name for p in destination.iterdir()) == ["old.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
