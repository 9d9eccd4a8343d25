"""What an optional part of vsqs says when its extra is not installed.

``vsqs.spark``, ``vsqs.kombu`` and ``vsqs.metrics`` import third-party packages that
``pip install vsqs`` does not bring; without them the import fails with a
:class:`ModuleNotFoundError` that says which extra to install (as the ``vsqs`` command
does for the ``cli`` extra), not a bare ``No module named 'kombu'``. Pure: no I/O.
"""

from __future__ import annotations

from typing import Final

__all__ = ["EXTRAS", "missing_extra"]

EXTRAS: Final = {
    "cli": frozenset({"click", "rich"}),
    "spark": frozenset({"pyspark", "pyarrow"}),
    "celery": frozenset({"kombu", "celery"}),
    "metrics": frozenset({"prometheus_client", "opentelemetry"}),
    "serve": frozenset({"uvicorn", "httptools"}),
}
"""Each extra and the top-level modules it installs (pyproject's optional dependencies)."""


def missing_extra(error: ModuleNotFoundError, extra: str, part: str) -> ModuleNotFoundError:
    """The error to raise when importing *part* (``"vsqs.kombu"``) failed with *error*.

    A module of *extra* missing: a :class:`ModuleNotFoundError` (so ``except ImportError``
    still works) naming the extra and how to install it, with the same :attr:`name`.
    Anything else (a broken install of vsqs itself): *error*, unchanged.
    """
    # The top-level package of a module name (not a queue name: _ids has no say here).
    top = (error.name or "").split(sep=".", maxsplit=1)[0]
    if top not in EXTRAS[extra]:
        return error
    return ModuleNotFoundError(
        f"{part} needs the {extra!r} extra (no module named {top!r}); install it from a"
        f" clone of vsqs with pip install '.[{extra}]' (the 'vsqs' on PyPI is the"
        " unrelated release 0.3)",
        name=error.name,
    )
