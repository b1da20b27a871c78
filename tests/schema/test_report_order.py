"""Root causes first: the order every report holds its findings in."""

from __future__ import annotations

import json

from dspark.converters import check_checkpoint
from dspark.schema.findings import FINDING_CODES, REPORT_STAGES, Finding, report_findings, report_order


def _hidden_size_true(tiny_draft):
    draft = tiny_draft()
    config = json.loads((draft / "config.json").read_text())
    config["hidden_size"] = True
    (draft / "config.json").write_text(json.dumps(config))
    return draft


def test_every_code_has_a_stage():
    staged = {prefix for stage in REPORT_STAGES for prefix in stage}
    assert {code[:3] for code in FINDING_CODES} <= staged


def test_config_and_engine_findings_come_before_the_inventory_they_explain():
    found = [
        Finding("INV003", "shape one", tensor="a"),
        Finding("PAY005", "payloads not read"),
        Finding("INV003", "shape two", tensor="b"),
        Finding("ENG003", "hidden_size = True is read as 1"),
        Finding("IDX002", "shard missing"),
        Finding("CFG009", "draft_vocab_size"),
        Finding("INV001", "missing", tensor="c"),
    ]
    assert [(f.code, f.message) for f in report_order(found)] == [
        ("ENG003", "hidden_size = True is read as 1"),
        ("CFG009", "draft_vocab_size"),
        ("IDX002", "shard missing"),
        ("INV003", "shape one"),
        ("INV003", "shape two"),
        ("INV001", "missing"),
        ("PAY005", "payloads not read"),
    ]


def test_grouping_happens_after_ordering():
    found = [Finding("INV003", f"shape {i}", tensor=f"t{i}") for i in range(25)] + [Finding("ENG003", "cause")]
    codes = [f.code for f in report_findings(found)]
    assert codes == ["ENG003", "INV003"]


def test_hidden_size_true_reports_the_engine_coercion_before_the_shapes(tiny_draft):
    report = check_checkpoint(_hidden_size_true(tiny_draft))
    codes = [f.code for f in report.findings]
    assert codes.count("INV003") == 19
    assert codes.index("ENG003") < codes.index("INV003")
    assert codes[-1] == "PAY005"
