"""The ``vsqs`` console script and ``python -m vsqs``: the command line, or one line
saying how to install it.

The script is installed with the core package, but the command line needs the ``cli``
extra (click and rich). Without it, ``vsqs`` says so and exits 1, instead of a
``ModuleNotFoundError`` traceback. This module imports nothing outside the standard
library until the extra is known to be there.
"""

from __future__ import annotations

import sys
from typing import Final

__all__ = ["MISSING_EXTRA", "main"]

_EXTRA: Final = frozenset({"click", "rich"})
MISSING_EXTRA: Final = (
    "vsqs: the command line needs the 'cli' extra; install it from a clone of vsqs with"
    " pip install '.[cli]' (the 'vsqs' on PyPI is the unrelated release 0.3)"
)


def main(argv: list[str] | None = None, prog_name: str | None = "vsqs") -> None:
    """Run the command line, or say how to install the ``cli`` extra and exit 1."""
    try:
        from .cli import main as run  # noqa: PLC0415 -- the import is the check
    except ModuleNotFoundError as exc:
        if exc.name not in _EXTRA:
            raise  # a broken install of vsqs itself: the traceback is the useful part
        print(MISSING_EXTRA, file=sys.stderr)
        raise SystemExit(1) from None
    run(argv, prog_name=prog_name)


if __name__ == "__main__":
    main(prog_name="python -m vsqs")
