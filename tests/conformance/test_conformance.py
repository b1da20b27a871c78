"""The conformance suite under pytest: `pytest -m conformance`.

Outside the default run (it downloads each release's wheel and builds an
environment for it: hundreds of MB, minutes on a 2-core machine). Each
release passes when every case agrees with dspark (or carries a recorded
reason that judges dspark right).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parent / "run.py"
RELEASES = ["tokenspeed@0.1.1", "vllm@0.33.0", "sglang@0.5.23"]


@pytest.mark.conformance
@pytest.mark.parametrize("release", RELEASES)
def test_dspark_gives_the_release_s_own_verdict(release, tmp_path):
    result = subprocess.run([sys.executable, str(RUN), "--engine", release, "--workdir", str(tmp_path)],
                            capture_output=True, text=True, timeout=3600)
    lines = result.stdout.strip().splitlines()
    assert lines and " cases agree (" in lines[-1], result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, result.stdout[-6000:]
