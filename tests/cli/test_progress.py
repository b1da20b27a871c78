"""Progress off a terminal: a long convert in a CI log writes a line on
stderr per GiB (here: per the step the test sets) and one at the end; on
a terminal the rich bar stays. Sizes are printed in binary units."""

from __future__ import annotations

import io

import pytest

from dspark.cli import terminal
from dspark.cli.terminal import human_bytes, progress_lines


def test_one_line_per_step_and_one_at_the_end():
    out = io.StringIO()
    advance = progress_lines("converting", 5 * 2**29, out)  # 2.5 GiB, in 2 MiB chunks
    for _ in range(5 * 2**29 // 2**21):
        advance(2**21)
    assert out.getvalue().splitlines() == [
        "converting: 1.00 GiB of 2.50 GiB (40%)",
        "converting: 2.00 GiB of 2.50 GiB (80%)",
        "converting: 2.50 GiB of 2.50 GiB (100%)",
    ]


def test_a_long_convert_off_a_terminal_says_how_far_it_is_on_stderr(dspark, tiny_draft, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setattr(terminal, "PROGRESS_MIN_BYTES", 1)
    monkeypatch.setattr(terminal, "PROGRESS_LINE_BYTES", 16 * 1024)
    run = dspark("convert", tiny_draft(), tmp_path / "out")
    assert run.exit_code == 0, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) >= 3 and all(line.startswith("converting: ") for line in lines)
    assert " KiB of " in lines[0] and not lines[0].endswith("(100%)") and lines[-1].endswith("(100%)")
    assert "converting:" not in run.stdout
    quiet = dspark("convert", tiny_draft("d2"), tmp_path / "out2", "-q")
    assert quiet.exit_code == 0 and quiet.stderr == ""


def test_sizes_of_bytes_are_binary_units():
    assert [human_bytes(n) for n in (512, 1536, 5 * 10**9)] == ["512 B", "1.50 KiB", "4.66 GiB"]
