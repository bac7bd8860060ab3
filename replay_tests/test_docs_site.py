"""The documentation site builds with warnings as errors (ADR 0032): a broken link or anchor, or a
page in no table of contents, fails the build, and the API reference covers every public name.

The site is built by ``scripts/docs`` itself, into ``tmp_path`` (``LOOM_DOCS_SITE``): other tests
read the source tree while these run, so nothing is written into it. The negative control builds
its own small set of pages with the same configuration and flags.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# Looked up, not imported: importing Sphinx and its theme here cost every worker's collection
# (the quick run's too, which deselects this module) about 4% of its time.
if any(importlib.util.find_spec(tool) is None for tool in ("sphinx", "myst_parser", "furo")):
    pytest.skip(
        "the docs extra is not installed: pip install -e '.[docs]'", allow_module_level=True
    )

# One xdist worker runs the module, so the site (a module fixture) is built once, not per worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("docs-site")]

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PACKAGES = ("loom_runtime", "loom_memory", "loom_knowledge")


SPHINX_FLAGS = ["-E", "-W", "--keep-going", "-b", "html"]
"""The flags scripts/docs passes: every warning fails, no page's warning is hidden by a cache."""


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site scripts/docs builds from the repository's docs/, with not one warning."""
    out = tmp_path_factory.mktemp("docs") / "site"
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "docs")],
        env={**os.environ, "LOOM_VENV": sys.prefix, "LOOM_DOCS_SITE": str(out)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert not re.search(r"WARNING|ERROR|CRITICAL", output), output
    return out


def test_the_home_page_is_the_readme_and_every_page_is_in_the_navigation(site: Path) -> None:
    """The README is the home page, its links rewritten to the site's pages; every guide and
    decision record is a page linked from the navigation."""
    home = (site / "index.html").read_text(encoding="utf-8")
    assert "An event-sourced replay engine for AI-agent executions." in home
    assert 'href="guides/reproduce-an-incident.html"' in home
    pages = [*(DOCS / "guides").glob("*.md"), *(DOCS / "adr").glob("[0-9]*.md")]
    assert len(pages) > 30
    for page in pages:
        url = f"{page.parent.name}/{page.stem}.html"
        assert (site / url).is_file(), url
        assert f'href="{url}"' in home, f"{url} is not in the navigation"


@pytest.mark.parametrize("package", PACKAGES)
def test_the_api_reference_documents_every_public_name(site: Path, package: str) -> None:
    """Each name of the package's ``__all__`` has an entry on its reference page."""
    page = (site / "reference" / f"{package}.html").read_text(encoding="utf-8")
    anchors = set(re.findall(rf'id="{package}\.(\w+)"', page))
    missing = [n for n in importlib.import_module(package).__all__ if n not in anchors]
    assert not missing, f"add these to docs/reference/{package}.md: {missing}"


@pytest.mark.parametrize("package", PACKAGES)
def test_an_api_page_s_contents_list_its_public_names_not_their_members(
    site: Path, package: str
) -> None:
    """A reference page's "on this page" list names each public name (a nested class too),
    not every method and attribute: docs/conf.py takes those out, which also spares the
    build copying them into every page's navigation (a fifth of its time)."""
    page = (site / "reference" / f"{package}.html").read_text(encoding="utf-8")
    contents = page[page.index('class="toc-tree"') :]  # furo's "on this page"
    listed = set(re.findall(rf'href="#{package}\.([\w.]+)"', contents))
    module = importlib.import_module(package)
    assert set(module.__all__) <= listed
    for name in listed - set(module.__all__):
        target: object = module
        for part in name.split("."):
            target = getattr(target, part)
        assert isinstance(target, type), f"{package}.{name} is a member, not a public name"


def test_a_broken_link_or_anchor_or_a_stray_page_fails_the_build(tmp_path: Path) -> None:
    """The negative control: with the site's configuration, a link to a missing page, a link to
    a missing heading and a page in no table of contents are each reported, and fail; a link to
    a heading that exists is not reported."""
    source = tmp_path / "source"
    source.mkdir()
    pages = {
        "index.md": "# Home\n\n```{toctree}\ntarget\nbroken\n```\n",
        "target.md": "# Target\n\n## A section\n\nText.\n",
        "broken.md": "# Broken\n\n[a page](no-such-page.md), [a section](target.md#no-such-section)"
        " and [the section](target.md#a-section).\n",
        "stray.md": "# Stray\n\nIn no table of contents.\n",
    }
    for name, text in pages.items():
        (source / name).write_text(text, encoding="utf-8")

    assert " ".join(SPHINX_FLAGS) in (ROOT / "scripts" / "docs").read_text(encoding="utf-8")
    command = [sys.executable, "-m", "sphinx", *SPHINX_FLAGS, "-c", str(DOCS)]
    command += [str(source), str(tmp_path / "site")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)

    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert re.search(r"broken\.md.*no-such-page\.md", output), output
    assert re.search(r"broken\.md.*no-such-section", output), output
    assert re.search(r"stray\.md.*toctree", output), output
    assert "build finished with problems, 3 warnings" in output, output
