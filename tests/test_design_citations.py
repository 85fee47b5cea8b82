"""The design is in the repository (issue 46, item 5): every "design.md §n" a module, test or page cites is a section
of ``docs/design.md`` (a subsection ``§n.m`` an item of that section's numbered list), and no file cites a design
document outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
SOURCES = [p for folder in ("fedpub", "strategies", "clients", "simulations", "tests", "docs")
           for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".md")] + [ROOT / "README.md"]
CITATION = re.compile(r"design\.md §\s?(\d+(?:\.\d+)?(?:[–-]§?\d+)?(?:,\s*§?\d+(?:\.\d+)?)*)")


def _sections() -> dict[str, set[str]]:
    """The design's sections by number, each with the numbers of its list's items."""
    sections: dict[str, set[str]] = {}
    current = None
    for line in DESIGN.read_text().splitlines():
        heading = re.match(r"## (\d+)\. ", line)
        if heading:
            current = heading.group(1)
            sections[current] = set()
        elif current is not None and (item := re.match(r"(\d+)\. ", line)):
            sections[current].add(item.group(1))
    return sections


def _cited(text: str) -> list[str]:
    return [n for match in CITATION.finditer(text) for n in re.findall(r"\d+(?:\.\d+)?", match.group(1))]


def test_every_design_citation_is_a_section_of_docs_design_md():
    sections = _sections()
    assert len(sections) >= 9
    missing = []
    for path in SOURCES:
        for number in _cited(path.read_text(errors="replace")):
            section, _, item = number.partition(".")
            if section not in sections or (item and item not in sections[section]):
                missing.append(f"{path.relative_to(ROOT)}: §{number}")
    assert missing == []


def test_no_file_cites_a_design_document_outside_the_repository():
    outside = [str(p.relative_to(ROOT)) for p in SOURCES
               if re.search(r"DESIGN\.md|shared folder|\.\./shared", p.read_text(errors="replace"))
               and p != Path(__file__).resolve()]
    assert outside == []


def test_the_citation_reader_finds_ranges_and_lists():
    assert _cited("(docs/design.md §3–§4)") == ["3", "4"] and _cited("design.md §2.8, §5") == ["2.8", "5"]
