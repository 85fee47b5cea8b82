"""Every relative link of the README and of the pages under docs/ leads to a file of the repository (a moved or
renamed page breaks this test, not a reader's click)."""

from __future__ import annotations

import re

from fedpub.simulations.tools.docs_reference import ROOT, pages

LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_every_relative_link_of_the_docs_leads_to_a_file():
    broken = []
    for page in pages():
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
        for target in LINK.findall(text):
            if target.startswith(("http://", "https://", "mailto:", "#")):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, "broken links: " + "; ".join(broken)
