"""A report that cannot be written is exit 2, naming where: never the
verdict it could not deliver (0 or 1), never a bug (3), never a traceback.
Real refusals from the system: /dev/full, a closed descriptor, a file size
limit."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys

import pytest

from dspark.cli.errors import EXIT_USAGE

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")


def run_dspark(*args, stdout=subprocess.PIPE, preexec=None) -> tuple[int, str]:
    environment = {k: v for k, v in os.environ.items() if k != "DSPARK_DEBUG"}
    environment.update(COLUMNS="100", NO_COLOR="1")
    done = subprocess.run(
        [sys.executable, "-c", "from dspark.cli.main import main; main()", *map(str, args)],
        stdout=stdout, stderr=subprocess.PIPE, env=environment, preexec_fn=preexec, timeout=120,
    )
    return done.returncode, done.stderr.decode("utf-8", "replace")


def _close_stdout() -> None:
    os.close(1)


def _no_file_may_grow() -> None:
    # A full disk, as the kernel tells it to a writer: every write that
    # would grow a file is refused (EFBIG, with SIGXFSZ ignored).
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))


@pytest.mark.parametrize("command", ["check", "gate"])
@pytest.mark.parametrize("output", ["human", "json", "sarif", "junit", "github"])
def test_a_report_to_a_full_stdout_is_exit_2_naming_stdout(tiny_draft, command, output):
    draft = tiny_draft()
    with open("/dev/full", "w") as full:
        code, err = run_dspark(command, draft, "--format", output, stdout=full)
    assert code == EXIT_USAGE
    assert err == "error: cannot write the report to stdout: No space left on device\n"


def test_a_closed_stdout_is_refused_before_any_work(tiny_draft, tmp_path):
    draft = tiny_draft()
    code, err = run_dspark("convert", draft, tmp_path / "out", "--format", "json", preexec=_close_stdout)
    assert code == EXIT_USAGE
    assert err.startswith("error: cannot write the report to stdout: it is closed")
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_report_file_on_a_device_that_refuses_it_is_exit_2_naming_it(tiny_draft, tmp_path):
    # Through a link: a writer that replaced the named file instead of
    # writing into it would replace the link, never the machine's /dev/full.
    draft, report = tiny_draft(), tmp_path / "report.json"
    report.symlink_to("/dev/full")
    code, err = run_dspark("check", draft, "--format", "json", "--output", report)
    assert code == EXIT_USAGE
    assert err == f"error: cannot write the report to {report}: No space left on device\n"
    assert report.is_symlink() and report.is_char_device()  # written into, never replaced by a file


def test_a_report_file_with_no_room_stops_convert_before_it_writes(tiny_draft, tmp_path):
    draft, report = tiny_draft(), tmp_path / "reports" / "convert.json"
    report.parent.mkdir()
    code, err = run_dspark("convert", draft, tmp_path / "out", "--output", report, preexec=_no_file_may_grow)
    assert code == EXIT_USAGE
    assert err.splitlines()[0].startswith(f"error: --output {report}: cannot be written (File too large)")
    assert not (tmp_path / "out").exists()
    assert list(report.parent.iterdir()) == []
