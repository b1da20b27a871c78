"""The conformance table in docs/contract.md is the one the recorded
results make (runs in the default suite: no download, only the files)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import report  # noqa: E402


def test_the_contract_page_holds_the_table_the_results_make():
    current = report.PAGE.read_text(encoding="utf-8")
    assert report.page(current, report.load_results()) == current, (
        "docs/contract.md's conformance table is stale: run `python tests/conformance/report.py --write`")


def test_a_stale_table_is_replaced_and_the_text_around_it_kept(tmp_path):
    result = {"engine": "vllm@0.33.0", "cases": [
        {"case": "fabricated/eagle3_llama/good", "family": "eagle3_llama", "origin": "dspark-fabricator",
         "comparison": "agree", "known": None, "engine": {"status": "loaded"}, "dspark": {"exit": 0}},
        {"case": "trainers/speculators/x", "family": None, "origin": "speculators@0.9.0",
         "comparison": "false_pass", "known": None, "engine": {"status": "refused"}, "dspark": {"exit": 0}},
    ]}
    before = f"# title\n\nby hand\n\n{report.BEGIN}\nstale\n{report.END}\n\nafter\n"
    made = report.page(before, [result])
    assert made.startswith("# title\n\nby hand\n\n" + report.BEGIN) and made.endswith(report.END + "\n\nafter\n")
    assert "stale" not in made
    assert "| `vllm@0.33.0` | eagle3_llama | 1 (1 / 0 / 0) | 1 | 0 | 0 | 0 | 0 |" in made
    assert "| `vllm@0.33.0` | other | 1 (0 / 1 / 0) | 0 | 0 | 1 | 0 | 0 |" in made
    assert "`trainers/speculators/x` (false pass): not yet explained: engine refused, dspark exit 0" in made
