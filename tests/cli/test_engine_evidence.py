"""An installed TokenSpeed's release is told from its files: a file that is
not there is no evidence of any release (main's facts are all absences, so
an empty package would otherwise read as main)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK
from dspark.schema.engines.tokenspeed import revisions as ts


def _empty_tokenspeed(root: Path, fabricated_engine=None) -> Path:
    (root / "tokenspeed").mkdir(parents=True)
    (root / "tokenspeed" / "__init__.py").write_text("")
    return root


def _partial_tokenspeed(root: Path, fabricated_engine) -> Path:
    # main's install with its drafter deleted: the model file alone says "main".
    site = fabricated_engine("main")
    (site / "tokenspeed" / ts.DRAFTER_FILE).unlink()
    return site


def _stub_tokenspeed(root: Path, fabricated_engine=None) -> Path:
    # every file there, each empty: they parse, and say nothing
    for name in ("__init__.py", ts.K3_MODEL_FILE, ts.DRAFTER_FILE):
        (root / "tokenspeed" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "tokenspeed" / name).write_text("")
    return root


@pytest.mark.parametrize("install", [_empty_tokenspeed, _partial_tokenspeed, _stub_tokenspeed],
                         ids=["empty", "partial", "empty-files"])
def test_absent_files_are_no_evidence_of_a_release(dspark, tiny_draft, tmp_path, fabricated_engine, install):
    site = install(tmp_path / "site", fabricated_engine)
    run = dspark("check", tiny_draft(), "--runtime", "--engine-path", site, "--format", "json")
    assert run.exit_code == EXIT_OK
    findings = {f["code"]: f for f in run.json()["findings"]}
    assert "RUN003" not in findings
    identity = findings["RUN004"]["message"]
    assert "TokenSpeed main" not in identity and "@main" not in identity and ts.MAIN[:8] not in identity
    assert "cannot be told" in identity and ts.DRAFTER_FILE in identity
    assert findings["RUN004"]["detail"]["missing"]


def test_doctor_does_not_call_an_empty_package_ok(dspark, tmp_path):
    site = _empty_tokenspeed(tmp_path / "site")
    run = dspark("doctor", "--engine-path", site, "--format", "json")
    assert run.exit_code == EXIT_CHECK_FAILED
    engine = {row["name"]: row for row in json.loads(run.stdout)["rows"]}["serving engine"]
    assert engine["status"] == "problem"
    assert "TokenSpeed main" not in engine["detail"] and "cannot be told" in engine["detail"]


def test_a_whole_main_install_is_still_main(dspark, tiny_draft, fabricated_engine):
    run = dspark("check", tiny_draft(), "--runtime", "--engine-path", fabricated_engine("main"), "--format", "json")
    assert "RUN003" in {f["code"] for f in run.json()["findings"]}
