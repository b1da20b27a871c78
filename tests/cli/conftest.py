"""Running the `dspark` command line in tests.

`dspark` runs the real entry point (`dspark.cli.main:main`) in this process,
with its output captured; `dspark_process` runs the installed command in a
child process, for what only a real process shows (the exact bytes on a
pipe, the modules a run imports)."""

from __future__ import annotations

import contextvars
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Callable

import pytest

from dspark.cli.main import main


@dataclass
class Run:
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def _exit_code(exit: SystemExit) -> int:
    if exit.code is None:
        return 0
    return exit.code if isinstance(exit.code, int) else 1


@pytest.fixture
def dspark(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Run]:
    """`dspark("check", path, "--strict", env={...})` -> Run."""

    def run(*args, env: dict[str, str] | None = None) -> Run:
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("COLUMNS", "100")
        monkeypatch.setattr(sys, "argv", ["dspark", *map(str, args)])
        capsys.readouterr()
        try:
            # A fresh context: what one run sets (the --format it asked
            # for) must not leak into the next.
            contextvars.Context().run(main)
            code = 0
        except SystemExit as exit:
            code = _exit_code(exit)
        out, err = capsys.readouterr()
        return Run(code, out, err)

    return run


@pytest.fixture
def dspark_process() -> Callable[..., Run]:
    """`dspark_process("check", path, env={...}, cwd=...)` -> Run, from a
    child process with stdout and stderr on pipes."""

    def run(*args, env: dict[str, str] | None = None, cwd=None) -> Run:
        environment = {k: v for k, v in os.environ.items() if k not in ("DSPARK_DEBUG", "FORCE_COLOR")}
        environment.update({"COLUMNS": "100", "NO_COLOR": "1"}, **(env or {}))
        done = subprocess.run(
            [sys.executable, "-c", "from dspark.cli.main import main; main()", *map(str, args)],
            capture_output=True,
            env=environment,
            cwd=cwd,
            timeout=120,
        )
        return Run(done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace"))

    return run


@pytest.fixture
def dspark_tty() -> Callable[..., Run]:
    """`dspark_tty("check", path, columns=80)` -> Run, from a child process
    whose stdout and stderr are a real terminal (a pseudo-terminal) of
    `columns` columns; stdout holds both streams."""
    import pty

    def run(*args, columns: int = 80, env: dict[str, str] | None = None) -> Run:
        environment = {k: v for k, v in os.environ.items() if k not in ("DSPARK_DEBUG", "FORCE_COLOR")}
        environment.update({"COLUMNS": str(columns), "NO_COLOR": "1"}, **(env or {}))
        leader, follower = pty.openpty()
        child = subprocess.Popen(
            [sys.executable, "-c", "from dspark.cli.main import main; main()", *map(str, args)],
            stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=environment,
        )
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(leader)
        code = child.wait(timeout=120)
        return Run(code, b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n"), "")

    return run
