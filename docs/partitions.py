"""Draw a partitioned queue as an SVG, from what vsqs itself does.

Usage (from the repository root)::

    python docs/partitions.py            # writes docs/_static/partitions.svg
    python docs/partitions.py --check    # exit 1 if the committed picture is stale

The script makes a real queue with ``partitions=4, fifo=True`` in a temporary directory
and draws what it finds: the stored settings file, the partition directories, and the
partition each example group hashes to (``Queue.partition_for``). So if the hash, the
directory names or the stored setting change, ``--check`` (run by the tests) fails until
the picture is drawn again.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from html import escape
from pathlib import Path

import vsqs

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "_static" / "partitions.svg"
PARTITIONS = 4
EMPTY = 1  # the partition drawn empty: its home consumer takes from another one
WIDTH = 1080
COLOURS = ("#1565c0", "#2e7d32", "#8e24aa", "#ef6c00", "#00838f")


@dataclass(frozen=True)
class Facts:
    """What the picture shows, as vsqs does it."""

    queue: str  # the queue directory's name
    settings_file: str  # relative to the queue directory
    settings: str  # the stored partitions/fifo, as JSON
    partition_dirs: tuple[str, ...]  # relative to the queue directory
    groups: tuple[tuple[str, int], ...]  # (group, its partition), in drawing order


def _candidates() -> Iterator[str]:
    n = 1
    while True:
        yield f"customer-{n}"
        n += 1


def facts() -> Facts:
    """Make a queue of 4 partitions with fifo=True and read the picture off it."""
    with tempfile.TemporaryDirectory() as tmp:
        queue = vsqs.Queue(Path(tmp) / "orders", partitions=PARTITIONS, fifo=True)
        base = Path(queue.path)
        settings_path = base / ".vsqs" / "settings.json"
        everything = json.loads(settings_path.read_text(encoding="utf-8"))
        shown = {key: everything[key] for key in ("partitions", "fifo")}
        dirs = tuple(str(Path(q.path).relative_to(base)) for q in queue.partition_queues)
        index = {Path(q.path): i for i, q in enumerate(queue.partition_queues)}
        # Two groups in partition 0 (unrelated groups share a partition), one in each other
        # partition but EMPTY: the first names, in order, that the real hash puts there.
        wanted = {0: 2, **{p: 1 for p in range(1, PARTITIONS) if p != EMPTY}}
        groups: list[tuple[str, int]] = []
        for name in _candidates():
            part = index[Path(queue.partition_for(name).path)]
            if wanted.get(part, 0) > 0:
                wanted[part] -= 1
                groups.append((name, part))
            if not any(wanted.values()):
                break
        return Facts(
            queue=base.name,
            settings_file=str(settings_path.relative_to(base)),
            settings=json.dumps(shown),
            partition_dirs=dirs,
            groups=tuple(sorted(groups, key=lambda g: (g[1], g[0]))),
        )


# ---------------------------------------------------------------- drawing

STYLE = """
    <marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8"
            orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#333"/></marker>
    <style>
      .mono { font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace; }
      .title { font-size: 17px; font-weight: bold; fill: #1a1a1a; }
      .head { font-size: 14px; font-weight: bold; fill: #1a1a1a; }
      .note { font-size: 12px; fill: #555; }
      .chip { font-size: 11px; fill: #fff; }
      .edge { fill: none; stroke: #333; stroke-width: 1.6; marker-end: url(#arrow); }
      .steal { fill: none; stroke: #333; stroke-width: 1.6; stroke-dasharray: 6 4;
               marker-end: url(#arrow); }
    </style>"""

MID_X, MID_W = 330, 430  # the queue directory's box
ROW_Y0, ROW_H, ROW_GAP = 150, 78, 14
CHIP_W, CHIP_H = 62, 22


def _row_y(partition: int) -> int:
    return ROW_Y0 + partition * (ROW_H + ROW_GAP)


def _text(x: float, y: float, text: str, cls: str, anchor: str = "start") -> str:
    return f'<text x="{x}" y="{y}" class="{cls}" text-anchor="{anchor}">{escape(text)}</text>'


def _chips(f: Facts, colour: dict[str, str]) -> Iterator[str]:
    """Each partition's messages, oldest on the right (next to its consumer)."""
    for part in range(len(f.partition_dirs)):
        mine = [g for g, p in f.groups if p == part]
        # interleaved as published: group a #1, group b #1, group a #2...
        queue = [(g, n) for n in (1, 2, 3) for g in mine][:6]
        y = _row_y(part) + 40
        right = MID_X + MID_W - 16
        for slot, (group, n) in enumerate(queue):  # slot 0 is the oldest
            x = right - (slot + 1) * (CHIP_W + 6)
            held = part == 0 and slot == 0
            waits = part == 0 and slot > 0
            style = (
                f'fill="#fff" stroke="{colour[group]}" stroke-width="2" stroke-dasharray="4 3"'
                if held
                else f'fill="{colour[group]}"' + (' opacity="0.45"' if waits else "")
            )
            yield f'<rect x="{x}" y="{y}" width="{CHIP_W}" height="{CHIP_H}" rx="4" {style}/>'
            label = f"{group.removeprefix('customer-')}·{n}" + (" held" if held else "")
            text_cls = "chip" if not held else "note"
            yield _text(x + CHIP_W / 2, y + 15, f"c{label}", text_cls, "middle")
        if not queue:
            yield _text(right - 4, y + 15, "empty", "note", "end")


def draw(f: Facts) -> str:
    """The SVG of *f*."""
    colour = {g: COLOURS[i % len(COLOURS)] for i, (g, _) in enumerate(f.groups)}
    n = len(f.partition_dirs)
    bottom = _row_y(n) - ROW_GAP
    height = bottom + 140
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" '
        "font-family=\"'DejaVu Sans', 'Helvetica Neue', Arial, sans-serif\" font-size=\"13\">",
        "  <title>A partitioned vsqs queue: groups, partitions, consumers</title>",
        "  <desc>A queue directory holds a stored settings file and N partition directories, "
        "each a plain VSQS queue. A message group hashes to one partition; each consumer "
        "claims from its home partition and from the others when its own is empty; with "
        "fifo=True a partition delivers nothing more while one of its messages is held.</desc>",
        f"  <defs>{STYLE}\n  </defs>",
        f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
        _text(
            20,
            30,
            f'vsqs.Queue("{f.queue}", partitions={n}, fifo=True): '
            "one directory, N plain VSQS queues in it",
            "title",
        ),
        # the queue directory, its stored settings, its partitions
        f'<rect x="{MID_X - 14}" y="56" width="{MID_W + 28}" height="{bottom - 56 + 14}" '
        'rx="10" fill="#fafafa" stroke="#607d8b" stroke-width="2"/>',
        _text(MID_X, 80, f"{f.queue}/", "head mono"),
        _text(MID_X + 80, 80, "the queue directory", "note"),
        _text(MID_X, 104, f"{f.settings_file}", "note mono"),
        _text(MID_X + 150, 104, "stored: Queue(path) reopens with them", "note"),
        _text(MID_X, 124, f"{f.settings}", "note mono"),
    ]
    for part, name in enumerate(f.partition_dirs):
        y = _row_y(part)
        out.append(
            f'<rect x="{MID_X}" y="{y}" width="{MID_W}" height="{ROW_H}" rx="8" '
            'fill="#e8f5e9" stroke="#2e7d32" stroke-width="1.5"/>'
        )
        out.append(_text(MID_X + 12, y + 22, f"{f.queue}/{name}/", "head mono"))
        out.append(_text(MID_X + MID_W - 12, y + 22, "a plain VSQS queue", "note", "end"))
    out.extend(_chips(f, colour))
    example = f.groups[0][0].removeprefix("customer-")
    out.append(
        _text(
            MID_X + MID_W - 16,
            bottom + 30,
            f"c{example}·2: {f.groups[0][0]}'s second message; oldest first →",
            "note",
            "end",
        )
    )
    # publishers: each group to the partition its hash names
    out.append(_text(20, 80, 'publish(body, group="…")', "head mono"))
    for i, (group, part) in enumerate(f.groups):
        y = ROW_Y0 + 10 + i * 50
        out.append(f'<rect x="20" y="{y}" width="120" height="26" rx="13" fill="{colour[group]}"/>')
        out.append(_text(80, y + 18, group, "chip mono", "middle"))
        target = _row_y(part) + ROW_H // 2
        out.append(
            f'<path class="edge" d="M 142 {y + 13} C 290 {y + 13}, 250 {target}, '
            f'{MID_X - 4} {target}"/>'
        )
    y = ROW_Y0 + 10 + len(f.groups) * 50 + 10
    out += [
        _text(20, y + 16 * i, line, "note")
        for i, line in enumerate(
            (
                "partition = CRC-32 of the",
                "group's name, mod N: the",
                "same in every process,",
                "host and run, so a group",
                "keeps its order.",
                "No group: the publisher's",
                "sticky partition (a run of",
                "messages, then the next).",
            )
        )
    ]
    # consumers: a home partition each, and the others when it is empty
    cx = MID_X + MID_W + 60
    out.append(_text(cx, 80, "receive()", "head mono"))
    homes = [p for p in range(n) if p != n - 1]  # one partition has no home consumer
    for i, part in enumerate(homes):
        y = _row_y(part) + ROW_H // 2
        out.append(
            f'<rect x="{cx + 40}" y="{y - 18}" width="150" height="36" rx="8" '
            'fill="#fff8e1" stroke="#f9a825" stroke-width="1.5"/>'
        )
        out.append(_text(cx + 115, y - 2, f"consumer {i + 1}", "head", "middle"))
        out.append(_text(cx + 115, y + 13, f"home: {f.partition_dirs[part]}", "note", "middle"))
        out.append(f'<path class="edge" d="M {MID_X + MID_W + 2} {y} L {cx + 36} {y}"/>')
    # the consumer whose home is empty takes from the partition nobody calls home
    src = _row_y(EMPTY) + ROW_H // 2 + 12
    dst = _row_y(n - 1) + ROW_H // 2
    out.append(
        f'<path class="steal" d="M {MID_X + MID_W + 2} {dst} C {cx + 20} {dst}, '
        f'{cx + 60} {dst}, {cx + 60} {src + 10}"/>'
    )
    out.append(_text(cx + 70, dst - 8, "its home empty:", "note"))
    out.append(_text(cx + 70, dst + 8, "takes from another", "note"))
    out.append(_text(cx + 70, dst + 24, "(and now and then", "note"))
    out.append(_text(cx + 70, dst + 40, "looks there first)", "note"))
    # fifo: the held message of partition 0 holds the partition
    out += [
        _text(20, bottom + 60, "fifo=True (SQS FIFO's one in flight per group):", "head"),
        _text(
            20,
            bottom + 80,
            f"{f.partition_dirs[0]}'s oldest message is held by consumer 1, so "
            f"{f.partition_dirs[0]} delivers nothing more (the faded messages wait) until "
            "it is deleted or its lease ends:",
            "note",
        ),
        _text(
            20,
            bottom + 96,
            "a group's next message never overtakes the held one, and unrelated groups in "
            "one partition wait behind each other,",
            "note",
        ),
        _text(
            20,
            bottom + 112,
            "so more partitions than busy groups keeps that rare. Other partitions go on "
            "delivering.",
            "note",
        ),
        "</svg>",
    ]
    return "\n".join(out) + "\n"


def main() -> int:
    picture = draw(facts())
    if "--check" in sys.argv[1:]:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        if current != picture:
            print(f"{OUT} is stale: run python docs/partitions.py")
            return 1
        return 0
    OUT.write_text(picture, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
