"""Charts of the last hour, drawn by hand as SVG (no library): a depth chart and a
throughput chart (published and consumed per second).

The pages show them as ``<img>`` (an image never runs a script, whatever it holds);
every number is formatted here and every label is escaped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from html import escape
from typing import Final

from ._format import count, rate

WIDTH: Final = 640
HEIGHT: Final = 200
_LEFT: Final = 64
_RIGHT: Final = 12
_TOP: Final = 22
_BOTTOM: Final = 26
_COLOURS: Final = ("#2563eb", "#dc2626")


def _nice_max(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^n at least *value* (a round axis top)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if value <= step * power:
            return float(step * power)
    return float(10 * power)  # pragma: no cover - the loop ends at 10


def svg(
    title: str,
    points: Sequence[Sequence[float]],
    columns: Sequence[tuple[int, str]],
    now: float | None = None,
    *,
    per_second: bool = False,
) -> bytes:
    """An SVG line chart of the last hour.

    :param points: rows of ``[time, ...values]``.
    :param columns: ``(index into a row, label)`` of each line drawn (at most two).
    :param now: the right edge (unix seconds; the current time if ``None``).
    """
    now = time.time() if now is None else now
    start = now - 3600.0
    inner_w = WIDTH - _LEFT - _RIGHT
    inner_h = HEIGHT - _TOP - _BOTTOM
    shown = [p for p in points if p[0] >= start]
    top = _nice_max(max((p[i] for p in shown for i, _ in columns), default=0.0))

    def x(t: float) -> float:
        return _LEFT + (t - start) / 3600.0 * inner_w

    def y(v: float) -> float:
        return _TOP + inner_h - v / top * inner_h

    label = rate if per_second else count
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11" role="img">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        f'<text x="{_LEFT}" y="14" font-size="12" font-weight="bold">{escape(title)}</text>',
    ]
    for fraction in (0.0, 0.5, 1.0):
        yy = y(top * fraction)
        out.append(
            f'<line x1="{_LEFT}" y1="{yy:.1f}" x2="{WIDTH - _RIGHT}" y2="{yy:.1f}" '
            f'stroke="#e5e7eb"/>'
            f'<text x="{_LEFT - 6}" y="{yy + 4:.1f}" text-anchor="end">'
            f"{escape(label(top * fraction))}</text>"
        )
    for minutes in (60, 45, 30, 15, 0):
        xx = x(now - minutes * 60)
        text = "now" if minutes == 0 else f"-{minutes} min"
        out.append(
            f'<text x="{xx:.1f}" y="{HEIGHT - 8}" text-anchor="middle" fill="#6b7280">{text}</text>'
        )
    legend_x = WIDTH - _RIGHT
    drawn = list(zip(columns, _COLOURS[: len(columns)], strict=True))
    for (_, name), colour in reversed(drawn):
        out.append(
            f'<text x="{legend_x}" y="14" text-anchor="end" fill="{colour}">{escape(name)}</text>'
        )
        legend_x -= 8 * len(name) + 16
    for (index, _), colour in drawn:
        coords = " ".join(f"{x(p[0]):.1f},{y(p[index]):.1f}" for p in shown)
        if len(shown) == 1:
            px, py = x(shown[0][0]), y(shown[0][index])
            out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.5" fill="{colour}"/>')
        elif shown:
            out.append(
                f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="1.6"/>'
            )
    if not shown:
        out.append(
            f'<text x="{_LEFT + inner_w / 2:.0f}" y="{_TOP + inner_h / 2:.0f}" '
            f'text-anchor="middle" fill="#6b7280">no samples yet</text>'
        )
    out.append("</svg>")
    return "".join(out).encode()
