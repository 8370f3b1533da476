"""The comments of memctl/ say why, not when: a dated measurement is cited by its heading in
bench/README.md ("Cited measurements"), where its date and conditions are kept (issue 32, item 6)."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "memctl"
BENCH = PACKAGE.parent / "bench" / "README.md"
# A calendar date, not one inside a quoted example ("2023-06-01") or a timestamp (2026-02-08T12:00:00Z).
DATE = re.compile(r'(?<!["\d-])20\d\d-[01]\d-[0-3]\d(?![T\d])')
CITATION = re.compile(r'bench/README\.md,?\s*(?:#\s*)?"([^"]+)"')


def test_no_comment_in_the_package_is_dated():
    dated = [f"{path.relative_to(PACKAGE.parent)}:{number}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1) if DATE.search(line)]
    assert dated == []


def test_every_heading_the_package_cites_is_in_bench_readme():
    text = BENCH.read_text()
    headings = {line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")}
    headings |= set(re.findall(r"^\*\*(.+?)\.?\*\*", text, re.M))  # a paragraph's bold name
    cited = {" ".join(match.replace("#", " ").split())
             for path in PACKAGE.rglob("*.py") for match in CITATION.findall(path.read_text())}
    assert "Cited measurements" in cited
    assert {heading for heading in cited if not any(heading in h for h in headings)} == set()
