"""The documentation pages made from data are current, and the README
links them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dspark.cli import docs
from dspark.schema.findings import FINDING_CODES

ROOT = Path(__file__).resolve().parents[1]
REGENERATE = "python -m dspark.cli.docs"


@pytest.mark.parametrize("path", sorted(docs.pages(ROOT)))
def test_generated_pages_are_current(path):
    expected = docs.pages(ROOT)[path]
    committed = (ROOT / path).read_text(encoding="utf-8") if (ROOT / path).is_file() else None
    assert committed == expected, f"{path} is not current with schema/: run `{REGENERATE}` and commit the result"


def test_codes_page_documents_every_code_with_its_severity_and_anchor():
    page = (ROOT / "docs" / "codes.md").read_text(encoding="utf-8")
    documented = dict(re.findall(r"^\| `([A-Z]{3}\d{3})` \| (\w+) \|", page, flags=re.M))
    assert documented == {code: spec.severity.value for code, spec in FINDING_CODES.items()}
    for code in FINDING_CODES:  # the anchor SARIF's helpUri and `dspark explain` point at
        assert f'<a id="{code}"></a>' in page


def test_a_family_page_keeps_its_hand_written_text():
    family = docs.FAMILIES[0]
    current = f"# title\n\nintro by hand\n\n{docs.BEGIN}\nstale\n{docs.END}\n\n## Contract\n\nby hand too\n"
    page = docs.family_page(family, current)
    assert page.startswith("# title\n\nintro by hand\n\n" + docs.BEGIN)
    assert page.endswith(docs.END + "\n\n## Contract\n\nby hand too\n")
    assert "stale" not in page and f"`{family.tensors[0].name}`" in page


def test_every_family_and_engine_has_its_place():
    index = (ROOT / "docs" / "families" / "index.md").read_text(encoding="utf-8")
    for family in docs.FAMILIES:
        assert f"[`{family.name}`]({family.name}.md)" in index
    for engine in docs.all_profiles():
        assert f"`{engine.spec}`" in index


def test_check_mode_names_a_stale_page_and_the_command(tmp_path, capsys, monkeypatch):
    (tmp_path / "docs").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    monkeypatch.setattr(docs, "ROOT", tmp_path)
    assert docs.main(["--check"]) == 1
    assert f"docs/codes.md is not current: run {REGENERATE}" in capsys.readouterr().err
    assert docs.main([]) == 0
    assert docs.main(["--check"]) == 0


def test_the_readme_links_the_pages():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for page in ("docs/codes.md", "docs/families/index.md", "docs/families/k3_dspark.md"):
        assert f"]({page}" in readme, page


def test_the_contract_page_has_a_family_by_engine_table():
    page = (ROOT / "docs" / "contract.md").read_text(encoding="utf-8")
    block = page.split(docs.BEGIN, 1)[1].split(docs.END, 1)[0]
    for family in docs.FAMILIES:
        assert f"[`{family.name}`](families/{family.name}.md)" in block
    for engine in docs.all_profiles():
        assert f"`{engine.spec}`" in block
    assert "not honoured: `fc_norm`" in block  # tokenspeed@main's K3 model
    fresh = docs.contract_page("# t\n\nintro\n\n## Next\n\ntext\n")
    assert fresh.startswith("# t\n\nintro\n\n## Family x engine\n\n" + docs.BEGIN) and fresh.endswith("## Next\n\ntext\n")
