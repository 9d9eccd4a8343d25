"""Sphinx configuration for the vsqs documentation.

Conventions for authors of pages (checked by ``tests/test_docs.py``):

* ``.. code-block:: python`` blocks are executed by the test suite, each on its own (as
  a reader who copies one block runs it), in a fresh temporary directory, twice in a row.
  A block that needs what the block before it defined says so on its first line,
  ``# Continues the example above.``, and then runs after that one. Make queues in
  :mod:`tempfile` directories, never at a fixed path; write blocks self-contained (imports
  included), runnable and ``mypy --strict`` clean.
* A python block that must not run is preceded by ``.. skip-test: <reason>`` (it is still
  compiled). Shell sessions use ``console``, other text uses ``text``.
* ``>>>`` examples go in ``.. doctest::`` blocks; they run under ``sphinx-build -b doctest``.
* Every ``guides/*.rst`` is picked up by a glob.
"""

from __future__ import annotations

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
exclude_patterns = ["_build"]
# Plain ">>>" blocks (outside a doctest directive) are tested too.
doctest_test_doctest_blocks = "default"


def _no_type_docstring(
    _app: object, what: str, _name: str, obj: object, _options: object, lines: list[str]
) -> None:
    """A constant (``vsqs.MAX_DURATION``) shows the text api.rst gives it, never the
    docstring of its type (``int``'s), which autodoc falls back on."""
    if what == "data" and lines and type(obj).__doc__ == obj.__doc__:
        lines.clear()


def setup(app: Any) -> None:
    app.connect("autodoc-process-docstring", _no_type_docstring)
