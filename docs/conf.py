"""Sphinx configuration for the vsqs documentation.

Conventions for authors of pages (checked by ``tests/test_docs.py``):

* ``.. code-block:: python`` blocks are executed by the test suite: the blocks of one page
  run in order as one script, in a fresh temporary directory (string literals starting
  with ``/tmp/`` are redirected there). Write them self-contained and runnable.
* A python block that must not run is preceded by ``.. skip-test: <reason>`` (it is still
  compiled). Shell sessions use ``console``, other text uses ``text``.
* ``>>>`` examples go in ``.. doctest::`` blocks; they run under ``sphinx-build -b doctest``.
* Every ``guides/*.rst`` is picked up by a glob. The top-level pages in ``OPTIONAL_PAGES``
  are listed in the index only when their file exists, so the build never warns about a
  page that is still being written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import vsqs

project = "vsqs"
author = "The vsqs developers"
copyright = "2026, The vsqs developers"
release = vsqs.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.doctest",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "sphinx_autodoc_typehints",
]
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
typehints_fully_qualified = False
always_document_param_types = False
nitpicky = False
intersphinx_mapping: dict[str, tuple[str, None]] = {}
html_theme = "furo"
html_title = "vsqs"
html_static_path = ["_static"]
exclude_patterns = ["_build", "dev"]
# Plain ">>>" blocks (outside a doctest directive) are tested too.
doctest_test_doctest_blocks = "default"

OPTIONAL_PAGES = ("sqs-mapping", "benchmarks", "reliability")
"""Top-level pages written separately; the index lists each one that exists."""
_PLACEHOLDER = "   @optional-pages@\n"


def _list_optional_pages(app: Any, docname: str, source: list[str]) -> None:
    """Replace the index's placeholder toctree entry with the optional pages present."""
    if docname != "index":
        return
    present = [page for page in OPTIONAL_PAGES if (Path(app.srcdir) / f"{page}.rst").exists()]
    source[0] = source[0].replace(_PLACEHOLDER, "".join(f"   {page}\n" for page in present))


def _always_reread_index(app: Any, env: Any, added: Any, changed: Any, removed: Any) -> list[str]:
    # An optional page may have appeared since the last build: the index must list it.
    return ["index"]


def setup(app: Any) -> dict[str, Any]:
    app.connect("source-read", _list_optional_pages)
    app.connect("env-get-outdated", _always_reread_index)
    return {"parallel_read_safe": True}
