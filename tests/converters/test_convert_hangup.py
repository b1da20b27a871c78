"""Every terminating signal cleans up as SIGINT does: a closed terminal
(SIGHUP) mid-convert leaves no staging folder as large as the model, and
the process ends by that signal, so its exit status names it. A signal
that lands after the run finished says so instead of ending it silently."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

# The same medium source and the freeze-then-signal steps as SIGINT's tests.
from test_convert_signals import freeze_mid_write, interrupt, leftovers, source, start  # noqa: E402,F401

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="needs POSIX signals")


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGUSR1], ids=["SIGHUP", "SIGUSR1"])
def test_a_terminating_signal_mid_convert_removes_the_staging_folder(source: Path, tmp_path: Path, signum) -> None:
    destination = tmp_path / "out"
    process = start(source, destination)
    freeze_mid_write(process, destination)
    code, stderr = interrupt(process, signum)
    assert code == -signum, stderr  # ended by that signal, as unhandled: the shell reports 128 + it
    assert "Traceback" not in stderr
    assert not destination.exists()
    assert leftovers(destination) == []


def test_a_late_ctrl_c_after_the_verdict_says_so(tmp_path: Path) -> None:
    from dspark.examples.fabricate import write_draft

    draft = write_draft(tmp_path / "draft")
    # The interrupt lands in Python's own exit, after the report is out.
    late = ("import atexit, os, signal, time\n"
            "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(5)))\n"
            "from dspark.cli.main import main\nmain()\n")
    done = subprocess.run([sys.executable, "-c", late, "check", str(draft)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "NO_COLOR": "1"})
    assert "PASS" in done.stdout
    assert done.returncode == 128 + signal.SIGINT
    assert done.stderr == "interrupted (SIGINT) after the run had finished (exit 0); its report stands\n"
