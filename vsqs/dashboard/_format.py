"""Numbers in human units, as the pages show them (``static/dashboard.js`` formats the
live refreshes the same way)."""

from __future__ import annotations

# The same units as the command line's: one module formats them (vsqs._units).
from .._units import UNKNOWN, age, count, duration, rate, size, when

__all__ = ["UNKNOWN", "age", "count", "duration", "rate", "size", "when"]
