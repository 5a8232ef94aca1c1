"""The README is the front door and ``docs/`` the reference, built as a site by mkdocs.

``mkdocs build --strict`` (``mkdocs.yml``: ``strict: true`` and every ``validation`` check
at ``warn``) fails on a link to a page or an anchor that does not exist and on a page left
out of the nav; the README stays short and starts with the two set-up commands; every
page of ``docs/`` is in the nav.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

#: The README's first lines, byte for byte: the title and the two set-up commands (the
#: main job, then the tests).
README_START = "\n".join([
    "# ShopOps crash harness",
    "",
    "```bash",
    "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/shopops-chaos run",
    "python3 -m venv .venv && .venv/bin/pip install -e '.[test,langgraph,dbos]'"
    " && .venv/bin/pytest -n auto",
    "```",
    "",
])


def _nav_pages(nav: Any) -> list[str]:
    """Every page a mkdocs nav names (``- Title: page.md``, nested sections, bare paths)."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for entry in nav for page in _nav_pages(entry)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return []


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "--site-dir", str(site)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (site / "index.html").is_file()


@pytest.mark.pure
def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250, "README.md is the front door: at most 250 lines"
    assert text.startswith(README_START), text[:len(README_START) + 200]


@pytest.mark.pure
def test_every_docs_page_is_in_the_nav() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config.get("strict") is True and config.get("docs_dir", "docs") == "docs"
    nav = _nav_pages(config["nav"])
    pages = sorted(p.relative_to(ROOT / "docs").as_posix()
                   for p in (ROOT / "docs").rglob("*.md"))
    assert sorted(set(nav)) == pages, {"not in the nav": sorted(set(pages) - set(nav)),
                                       "in the nav, no such page": sorted(set(nav) - set(pages))}
    assert len(nav) == len(set(nav)), "a page is in the nav twice"
