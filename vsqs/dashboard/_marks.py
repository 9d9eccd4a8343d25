"""What an operator should notice on the dashboard's pages, as small pieces of HTML: a
number that could not be read (an em dash, the reason on hover), a flag (a dead-letter
queue holding messages), a stored setting in human units. ``static/dashboard.js``
mirrors the pieces the live refreshes redraw. Every value is escaped here.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any, Final
from urllib.parse import quote

from . import _format


def queue_url(name: str) -> str:
    """The dashboard's page of the queue *name*."""
    return "/ui/queue/" + quote(name, safe="")


def unknown(reason: str) -> str:
    """A number that could not be read: an em dash, the reason on hover."""
    return f'<span class="unknown" title="{escape(reason)}">{_format.UNKNOWN}</span>'


def unreadable(error: str) -> str:
    """A queue that could not be sampled: the kind of error, all of it on hover."""
    kind = error.split(":", 1)[0]
    return f'<span class="error" title="{escape(error)}">cannot be read ({escape(kind)})</span>'


def flag(text: str, title: str) -> str:
    """Something an operator should look at (a dead-letter queue holding messages)."""
    return f'<span class="flag" title="{escape(title)}">{escape(text)}</span>'


def dead_letters_held(row: Mapping[str, Any]) -> str:
    """The flag of a dead-letter queue (a queue others dead-letter into) that holds
    messages; empty otherwise."""
    depth = row.get("depth")
    sources = row.get("sources") or ()
    if not sources or not depth:
        return ""
    return flag(
        f"{_format.count(depth)} dead letters",
        f"Dead-letter queue of {', '.join(sources)}: {_format.count(depth)} messages "
        "failed there and wait to be looked at (redrive them, or purge)",
    )


_SECONDS: Final = ("visibility_timeout", "delay", "retention", "dedup_window")


def setting(key: str, value: object) -> str:
    """A stored setting in human units (HTML), its stored value on hover."""
    if key in _SECONDS and isinstance(value, (int, float)) and not isinstance(value, bool):
        shown = _format.duration(float(value))
    elif key == "capacity" and isinstance(value, int):
        shown = f"{_format.count(value)} messages"
    elif key == "max_receives" and isinstance(value, int):
        shown = f"{_format.count(value)} receive{'s' if value != 1 else ''}"
    elif key == "dead_letter" and isinstance(value, str):
        return f'<a href="{escape(queue_url(value))}">{escape(value)}</a>'
    elif isinstance(value, bool):
        shown = "yes" if value else "no"
    else:
        return escape(str(value))
    return f'<span title="{escape(f"{key} = {value!r}")}">{escape(shown)}</span>'


def dead_letter_line(dead: str, depth: int | None) -> str:
    """Where a queue's dead letters go, flagged when some are there."""
    where = f'<a href="{escape(queue_url(dead))}">{escape(dead)}</a>'
    if depth is None:
        held_there = unknown("Unknown: the dead-letter queue was not sampled")
        return f"<p>Dead letters go to {where} ({held_there} messages).</p>"
    if depth:
        shown = _format.count(depth)
        there = flag(f"{shown} messages", f"{shown} messages failed and wait there")
        return f"<p>Dead letters go to {where}: {there} there now.</p>"
    return f"<p>Dead letters go to {where} (none there now).</p>"
