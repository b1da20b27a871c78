"""How a case is classified and summed up (default run: no engine code)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import AGREE, FALSE_FAIL, FALSE_PASS, NO_VERDICT, DsparkVerdict, classify  # noqa: E402
from known import KnownDisagreement  # noqa: E402
from outcomes import Case, Outcome, read_cases, write_cases  # noqa: E402
from run import summary, summary_line  # noqa: E402


@pytest.mark.parametrize(("engine", "exit_code", "expected"), [
    ("loaded", 0, AGREE),
    ("refused", 1, AGREE),
    ("served_wrong", 1, AGREE),
    ("served_wrong", 0, FALSE_PASS),
    ("refused", 0, FALSE_PASS),
    ("loaded", 1, FALSE_FAIL),
    ("loaded", 2, NO_VERDICT),
    ("no_run", 0, NO_VERDICT),
])
def test_a_case_is_classified_by_both_sides(engine, exit_code, expected):
    assert classify(Outcome(engine), DsparkVerdict(exit_code)) == expected


def test_an_unknown_status_is_refused():
    with pytest.raises(ValueError, match="unknown outcome status"):
        Outcome("maybe")


def test_cases_round_trip_through_json(tmp_path):
    cases = [Case("fabricated/k3_dspark/good", "/d", "dspark-fabricator", trained_layers=[1, 4])]
    write_cases(cases, tmp_path / "cases.json")
    assert read_cases(tmp_path / "cases.json") == cases


def test_the_summary_line_counts_each_kind():
    rows = [{"comparison": c, "known": k} for c, k in [
        (AGREE, None), ("agree_by_reason", {"judged_right": "dspark"}), (FALSE_PASS, None),
        (FALSE_FAIL, {"judged_right": "engine"}), (NO_VERDICT, None)]]
    assert summary_line(summary(rows)) == ("2/5 cases agree (1 by a recorded reason; false passes 1, "
                                           "false fails 1, no verdict 1); 1 disagreements carry a recorded reason")


def test_a_known_disagreement_matches_a_release_or_the_whole_engine():
    entry = KnownDisagreement("vllm", "fabricated/eagle3_*/*", "dspark", "why")
    assert entry.matches("vllm@0.32.0", "fabricated/eagle3_llama/good")
    assert not entry.matches("sglang@0.5.23", "fabricated/eagle3_llama/good")
    assert not KnownDisagreement("vllm@0.33.0", "*", "dspark", "why").matches("vllm@0.32.0", "x")


def test_a_disagreement_of_the_folder_itself_matches_every_engine():
    entry = KnownDisagreement("*", "trainers/*", "engine", "why")
    assert entry.matches("vllm@0.33.0", "trainers/x") and entry.matches("tokenspeed@0.1.1", "trainers/x")
    assert not entry.matches("vllm@0.33.0", "fabricated/x")
