"""Numbers in human units, as the pages show them (``static/dashboard.js`` formats the
live refreshes the same way)."""

from __future__ import annotations

import time
from typing import Final

_BYTES: Final = ("B", "KiB", "MiB", "GiB", "TiB")


def count(value: float | None) -> str:
    """``1,234,567``; a fraction keeps one decimal; ``-`` for ``None``."""
    if value is None:
        return "-"
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.1f}"


def age(seconds: float | None) -> str:
    """``42 s``, ``3.5 min``, ``2.0 h``, ``1.5 d``; ``-`` for ``None``."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def size(nbytes: int) -> str:
    """``512 B``, ``1.5 KiB``, ``3.2 MiB``..."""
    value = float(nbytes)
    for unit in _BYTES:
        if value < 1024 or unit == _BYTES[-1]:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def rate(value: float | None) -> str:
    """``12/s``, ``0.5/s``; ``-`` for ``None``."""
    if value is None:
        return "-"
    if value >= 10 or value == int(value):
        return f"{value:,.0f}/s"
    return f"{value:.1f}/s"


def when(unix: float | None) -> str:
    """A UTC time, ``2026-11-26 10:02:03 UTC``; ``-`` for ``None``."""
    if unix is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix))
