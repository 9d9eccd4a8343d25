"""Sphinx configuration for the vsqs documentation."""

from __future__ import annotations

import vsqs

project = "vsqs"
author = "The vsqs developers"
copyright = "2026, The vsqs developers"  # noqa: A001 (Sphinx's name for it)
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
