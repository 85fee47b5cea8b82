"""MkDocs hooks of the documentation site (``mkdocs.yml``; fedpub issue 46).

- The site's home page is the README, made at build time (never a copy kept in ``docs/``).
- Every page's generated blocks are made again from the code (:mod:`fedpub.simulations.tools.docs_reference`), so
  the site always shows what the registry and the config models hold; ``tests/test_docs_generated.py`` separately
  fails where a committed page is stale.
- A relative link is written for the repository (it works on GitHub and ``tests/test_docs_links.py`` checks its
  target): one into ``docs/`` becomes the site's page, one to a file outside ``docs/`` (a config, an example app)
  becomes its repository path as code, since the site does not hold it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

from fedpub.simulations.tools import docs_reference

LINK = re.compile(r"(?P<bang>!?)\[(?P<text>[^\]\n]*)\]\((?P<target>[^)\s]+)\)")
HOME = "index.md"


def _source(page_uri: str) -> str:
    """The page's path in the repository (the home page is the README)."""
    return "README.md" if page_uri == HOME else f"docs/{page_uri}"


def site_links(markdown: str, page_uri: str) -> str:
    """``markdown`` of the page at ``page_uri`` (its path under ``docs/``) with its relative links made for the site:
    a link into ``docs/`` relative to the page, a link outside it as its repository path in code."""
    source_dir = posixpath.dirname(_source(page_uri))

    def fix(match: re.Match[str]) -> str:
        target = match["target"]
        if re.match(r"[a-z]+:|#", target):
            return match.group(0)
        path, _, anchor = target.partition("#")
        in_repo = posixpath.normpath(posixpath.join(source_dir, path))
        if in_repo.startswith("docs/"):
            relative = posixpath.relpath(in_repo[len("docs/"):], posixpath.dirname(page_uri) or ".")
            relative += "/" if path.endswith("/") else ""
            return f"{match['bang']}[{match['text']}]({relative}{'#' + anchor if anchor else ''})"
        shown = in_repo + ("/" if path.endswith("/") else "")
        text = match["text"].strip("`")
        return f"`{shown}`" if text == shown else f"{match['text']} (`{shown}`)"

    return LINK.sub(fix, markdown)


def on_files(files: Files, config: Any) -> Files:
    """Adds the home page, made from the README."""
    readme = Path(config["config_file_path"]).parent / "README.md"
    files.append(File.generated(config, HOME, content=readme.read_text(encoding="utf-8")))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """The page's generated blocks made from the code, its relative links made for the site."""
    markdown = docs_reference.regenerated(markdown, Path(_source(page.file.src_uri)))
    return site_links(markdown, page.file.src_uri)
