"""Human output fits the terminal: engine rows cite the deciding codes (the
findings are printed in full above them), and `explain CODE` pages wrap at
the terminal's width."""

from __future__ import annotations

import re

import pytest

from dspark.cli.errors import EXIT_CHECK_FAILED
from dspark.cli.explain import explain_page
from dspark.schema.findings import FINDING_CODES

CODE = re.compile(r"^[A-Z]{3}\d{3}$")


def _engine_rows(page: str, engines: list[str]) -> list[str]:
    return [line for line in page.splitlines() if line.strip().split("  ")[0] in engines]


def test_engine_rows_cite_codes_not_whole_findings(dspark, tiny_draft):
    draft = tiny_draft(defect="unexpected-tensor")
    verdicts = dspark("check", draft, "--engine", "all", "--format", "json").json()["engine_verdicts"]
    run = dspark("check", draft, "--engine", "all")
    assert run.exit_code == EXIT_CHECK_FAILED
    rows = _engine_rows(run.stdout, [v["engine"] for v in verdicts])
    assert len(rows) == len(verdicts)
    for row, verdict in zip(rows, verdicts):
        assert len(row) <= 80, row
        assert verdict["outcome_text"].upper() in row
        cited = row.split(verdict["outcome_text"].upper(), 1)[1].strip()
        assert cited.split(", ") == list(dict.fromkeys(w["code"] for w in verdict["why"]))
        assert all(CODE.match(code) for code in cited.split(", "))
        assert "not servable" not in row


@pytest.mark.parametrize("width", [80, 60])
def test_every_explain_page_fits_the_width(width):
    for code in FINDING_CODES:
        over = [line for line in explain_page(code, width).splitlines() if len(line) > width]
        assert not over, (code, over)


def test_explain_wraps_at_the_terminals_width(dspark_process):
    run = dspark_process("explain", "CFG005", env={"COLUMNS": "80"})
    assert run.exit_code == 0
    assert max(len(line) for line in run.stdout.splitlines()) <= 80
    assert "spec_aux_hidden_state.py" in run.stdout  # a long path is broken at a `/`, not lost
