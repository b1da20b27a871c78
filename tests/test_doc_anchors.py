"""Every pointer to a section of the README or a docs page, in the code
(hints, help texts) and in the documents' own links, names a heading that
exists: `README.md#finding-codes`, `docs/check.md#remote-checkpoints`."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE = [p for folder in ("cli", "converters", "schema", "kernels", "examples") for p in (ROOT / folder).rglob("*.py")]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

REFERENCE = re.compile(r"((?:docs/)?[\w-]+\.md)#([\w-]+)")
LINK = re.compile(r"\]\(((?:[\w./-]+\.md)?)#([\w-]+)\)")
# the old spelling, which named no heading: "the README (section dspark gate)"
SECTION_WORDS = re.compile(r"README[^\n\"]{0,40}\(section [^)]*\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@functools.lru_cache(maxsize=None)
def anchors(document: Path) -> set[str]:
    """Headings' slugs and explicit anchors (`<a id="CFG001"></a>`)."""
    text = re.sub(r"^```.*?^```", "", document.read_text(encoding="utf-8"), flags=re.S | re.M)
    explicit = set(re.findall(r"<a (?:id|name)=\"([^\"]+)\"", text))
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*#*$", re.sub(r"<a [^>]*></a>", "", text), flags=re.M)
    return explicit | {slug(m) for m in headings}


def _resolve(name: str, relative_to: Path) -> Path:
    """The document `name` means, read from a file in `relative_to` ("" is that file's own)."""
    return (relative_to / name).resolve() if name else relative_to


def references() -> list[tuple[str, Path, str]]:
    found = []
    for path in CODE:
        for name, anchor in REFERENCE.findall(path.read_text(encoding="utf-8")):
            found.append((str(path.relative_to(ROOT)), _resolve(name, ROOT), anchor))
    for document in DOCUMENTS:
        for name, anchor in LINK.findall(document.read_text(encoding="utf-8")):
            found.append((str(document.relative_to(ROOT)), _resolve(name, document.parent) if name else document,
                          anchor))
    # a page that links its own codes a hundred times is one test per link target, not per link
    return list(dict.fromkeys(found))


def test_there_are_references_to_check():
    assert any(where.startswith("schema") for where, _, _ in references())


@pytest.mark.parametrize("where,document,anchor", [
    pytest.param(*row, id=f"{row[0]}->{row[1].name}#{row[2]}") for row in references()
])
def test_every_section_reference_names_a_heading_that_exists(where, document, anchor):
    from dspark.schema.findings import FINDING_CODES

    assert document.is_file(), f"{where} points to {document}, which does not exist"
    # `docs/codes.md#CODE` stands for every code's link
    wanted = sorted(FINDING_CODES) if anchor == "CODE" else [anchor]
    missing = [name for name in wanted if name not in anchors(document)]
    assert not missing, f"{where} points to {document.name}#{missing[0]}: no such heading"


def test_no_hint_names_a_section_by_words():
    for path in CODE:
        for match in SECTION_WORDS.findall(path.read_text(encoding="utf-8")):
            pytest.fail(f"{path.relative_to(ROOT)}: {match!r}: point to README.md#anchor instead")
