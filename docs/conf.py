"""Sphinx configuration of the documentation site (ADR 0032): ``scripts/docs`` builds it.

The pages are the repository's Markdown (read by MyST), the README included as the home page;
the API reference is autodoc over the three packages' ``__all__``, whose docstrings are
reStructuredText with Sphinx roles. ``scripts/docs`` passes ``-W``: a warning (a broken link or
anchor, a page in no table of contents, a docstring that does not parse) fails the build.
Nothing here reaches the network: no intersphinx, a theme that ships its assets.

The navigation's toctrees (``docs/index.md``) are ``:titlesonly:``: furo's sidebar shows page
titles only anyway, and without it Sphinx copied every page's whole section tree into every
page's navigation before dropping the sections: an eighth of the build, the same HTML.
"""

import importlib

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx

project = "loom"
author = "the loom authors"
extensions = ["myst_parser", "sphinx.ext.autodoc"]
# The home page includes ../README.md; docs/adr/README.md is the records' index page.
exclude_patterns = ["examples"]

# Links to a heading (`cli.md#loom-replay`) are checked like links to a page.
myst_heading_anchors = 4

# The public surface is each package's __all__ (autodoc follows it), constants included.
autodoc_default_options = {"members": True, "undoc-members": True}
autodoc_member_order = "groupwise"

# autodoc finds a module's members with dir(), which lists a lazy public name only once it is
# loaded (ADR 0022: a dir() that imported would make every tool walking it import everything).
# The reference documents all of them, so load them all first.
for _package in ("loom_runtime", "loom_memory", "loom_knowledge"):
    _module = importlib.import_module(_package)
    for _name in _module.__all__:
        getattr(_module, _name)

html_theme = "furo"
html_title = "loom"
# The Markdown sources are in the repository; the site need not serve them again.
html_copy_source = False

_MEMBERS = frozenset({"method", "classmethod", "staticmethod", "attribute", "property"})
"""The object types whose entries leave a reference page's contents (:func:`setup`)."""


def _members_out_of_the_contents(app: Sphinx, doctree: nodes.document) -> None:
    """Keep a reference page's "on this page" list to the public names (classes, functions,
    data), as if each member's directive said ``:no-contents-entry:``, which autodoc cannot pass.

    With every method and attribute listed (about 470 entries), Sphinx copied them all into
    every page's navigation before furo kept only the page titles: a fifth of the build's CPU.
    Each member keeps its anchor and its entry in the index.
    """
    for desc in doctree.findall(addnodes.desc):
        if desc.get("objtype") in _MEMBERS:
            desc["no-contents-entry"] = True


def setup(app: Sphinx) -> None:
    # Before Sphinx's own doctree-read handler (priority 500) collects the page's contents.
    app.connect("doctree-read", _members_out_of_the_contents, priority=400)
