"""reStructuredText tables, the results JSON and the depth plot, from one run's results."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from benchmarks.backends import FLOOR, FLOOR_FSYNC, VSQS, VSQS_DURABLE
from benchmarks.depth import Cell, Metric
from benchmarks.peers import VSQS03

# The floors of issue 3: (label, numerator backend, its metric, denominator backend, its metric).
Ratio = tuple[str, str, Metric, str, Metric]
RATIOS: Final[tuple[tuple[Ratio, str], ...]] = (
    (("publish / floor", VSQS, Metric.PUBLISH, FLOOR, Metric.PUBLISH), "≤ 1.5"),
    (("receive+delete / floor", VSQS, Metric.RECEIVE, FLOOR, Metric.RECEIVE), "≤ 2"),
    (
        (
            "durable publish / floor+fsync",
            VSQS_DURABLE,
            Metric.PUBLISH,
            FLOOR_FSYNC,
            Metric.PUBLISH,
        ),
        "≤ 1.2",
    ),
    (
        (
            "durable batch / durable single",
            VSQS_DURABLE,
            Metric.BATCH_PUBLISH,
            VSQS_DURABLE,
            Metric.PUBLISH,
        ),
        "≤ 0.3",
    ),
    (("vsqs 0.3 publish / publish", VSQS03, Metric.PUBLISH, VSQS, Metric.PUBLISH), "≥ 50 at 10k"),
    (("vsqs 0.3 receive / receive", VSQS03, Metric.RECEIVE, VSQS, Metric.RECEIVE), "≥ 50 at 10k"),
)


def depth_label(depth: int) -> str:
    if depth >= 1_000_000:
        return f"{depth // 1_000_000}M"
    return f"{depth // 1000}k" if depth >= 1000 else str(depth)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A reST simple table."""
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=True)]
    rule = "  ".join("=" * w for w in widths)
    lines = [rule, "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)), rule]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.append(rule)
    return "\n".join(line.rstrip() for line in lines)


def heading(text: str, char: str = "-") -> str:
    return f"{text}\n{char * len(text)}\n"


def _lookup(cells: Sequence[Cell]) -> dict[tuple[str, str, int], Cell]:
    return {(c.fs, c.backend, c.depth): c for c in cells}


def _fmt_us(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    us = seconds * 1e6
    return f"{us:,.0f}" if us >= 100 else f"{us:.1f}"


def ratio(cells: dict[tuple[str, str, int], Cell], fs: str, depth: int, r: Ratio) -> float | None:
    _, num, num_metric, den, den_metric = r
    a, b = cells.get((fs, num, depth)), cells.get((fs, den, depth))
    if a is None or b is None or a.skipped or b.skipped:
        return None
    x, y = a.best(num_metric), b.best(den_metric)
    return None if x is None or not y else x / y


def depth_tables(cells: Sequence[Cell], fss: Sequence[str], depths: Sequence[int]) -> str:
    """One table per filesystem and metric: µs per message, backends by depths."""
    by = _lookup(cells)
    backends = list(dict.fromkeys(c.backend for c in cells))
    out = []
    for fs in fss:
        for metric in Metric:
            rows = []
            for backend in backends:
                row = [backend]
                for depth in depths:
                    cell = by.get((fs, backend, depth))
                    if cell is None:
                        row.append("")
                        continue
                    text = _fmt_us(cell.best(metric))
                    flag = cell.flag()
                    row.append(f"{text} ({flag})" if flag else text)
                rows.append(row)
            title = f"{metric.value}, µs per message, {fs}"
            out.append(heading(title, "~"))
            out.append(table(["backend", *map(depth_label, depths)], rows) + "\n")
    return "\n".join(out)


def ratio_tables(cells: Sequence[Cell], fss: Sequence[str], depths: Sequence[int]) -> str:
    by = _lookup(cells)
    out = []
    for fs in fss:
        rows = []
        for r, target in RATIOS:
            values = [ratio(by, fs, d, r) for d in depths]
            rows.append([r[0], *("-" if v is None else f"{v:.2f}" for v in values), target])
        if 0 in depths and 100_000 in depths:
            at = depths.index(100_000)
            for backend in (VSQS, VSQS_DURABLE):
                for metric in (Metric.PUBLISH, Metric.RECEIVE):
                    growth = _growth(by, fs, backend, metric)
                    row = [f"{backend} {metric.value}: cost at 100k / at 0"] + [""] * len(depths)
                    row[1 + at] = "-" if growth is None else f"{growth:.2f}"
                    rows.append([*row, "≤ 1.5"])
        rows.append(["fastest peer / vsqs, receive+delete", *_peer_ratio(by, fs, depths), "> 1"])
        out.append(heading(f"Ratios from the same run, {fs}", "~"))
        out.append(table(["ratio", *map(depth_label, depths), "target"], rows) + "\n")
    return "\n".join(out)


def _growth(
    by: dict[tuple[str, str, int], Cell],
    fs: str,
    backend: str,
    metric: Metric,
) -> float | None:
    a, b = by.get((fs, backend, 100_000)), by.get((fs, backend, 0))
    x = a.best(metric) if a else None
    y = b.best(metric) if b else None
    return None if x is None or not y else x / y


def _peer_ratio(by: dict[tuple[str, str, int], Cell], fs: str, depths: Sequence[int]) -> list[str]:
    out = []
    ours = {FLOOR, FLOOR_FSYNC, VSQS, VSQS_DURABLE}
    for depth in depths:
        mine = by.get((fs, VSQS, depth))
        peers = [
            c.best(Metric.RECEIVE)
            for (f, b, d), c in by.items()
            if f == fs and d == depth and b not in ours and not c.skipped
        ]
        values = [p for p in peers if p is not None]
        me = mine.best(Metric.RECEIVE) if mine else None
        out.append(f"{min(values) / me:.1f}" if values and me else "-")
    return out


def method(meta: dict[str, Any]) -> str:
    lines = [heading("Method")]
    for key, value in meta["method"].items():
        lines.append(f":{key}: {value}")
    return "\n".join(lines) + "\n"


def procs_tables(results: dict[str, Any]) -> str:
    out = []
    if rss := results.get("rss"):
        rows = [
            [r["backend"], f"{r.get('depth', 0):,}", str(r["ops"]), f"{r['maxrss_kb'] / 1024:.1f}"]
            for r in rss
        ]
        out += [heading("Peak RSS of one consumer process", "~")]
        out += [table(["consumer", "backlog", "receives", "peak RSS, MB"], rows) + "\n"]
    if mp := results.get("mp"):
        rows = [
            [
                f"{r['backend']} ({r['fs']})",
                f"{r['delivered']:,}/{r['expected']:,}",
                f"{r['msgs_per_s']:,.0f}",
                "-" if r["claim_misses"] is None else f"{r['claim_misses'] / r['delivered']:.3f}",
            ]
            for r in mp
        ]
        out += [heading("2 producer + 2 consumer processes", "~")]
        out += [table(["backend", "delivered", "msgs/s", "failed claims/msg"], rows) + "\n"]
    if lat := results.get("latency"):
        rows = [
            [f"{b} ({fs})", str(v["n"]), f"{v['p50_ms']:.2f}", f"{v['p99_ms']:.2f}"]
            for fs, per in lat.items()
            for b, v in per.items()
        ]
        out += [heading("Wake-up latency: raw publish every 50 ms → blocked receive", "~")]
        out += [table(["consumer", "samples", "p50, ms", "p99, ms"], rows) + "\n"]
    if idle := results.get("idle_cpu"):
        rows = [[b, f"{v * 100:.2f}"] for b, v in idle.items()]
        out += [heading("CPU of a consumer blocked on an empty queue", "~")]
        out += [table(["consumer", "CPU, % of one core"], rows) + "\n"]
    if bnd := results.get("bounded"):
        rows = [
            [
                r["backend"],
                str(r["capacity"]),
                f"{r['work_ms']:.1f}",
                f"{r['msgs_per_s']:,.0f}",
                f"{r['ceiling_per_s']:,.0f}",
            ]
            for r in bnd
        ]
        out += [heading("Bounded queue: fast producer, slow consumer", "~")]
        out += [
            table(["backend", "capacity", "work/msg, ms", "msgs/s", "unbounded, alone"], rows)
            + "\n"
        ]
    return "\n".join(out)


def plot(cells: Sequence[Cell], fss: Sequence[str], depths: Sequence[int], dest: Path) -> bool:
    """Depth scaling, log scale; False when matplotlib is not installed."""
    try:
        import matplotlib as mpl

        mpl.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    metrics = (Metric.PUBLISH, Metric.RECEIVE)
    fig, axes = plt.subplots(
        len(fss), len(metrics), figsize=(11, 4.2 * len(fss)), squeeze=False, sharex=True
    )
    by = _lookup(cells)
    backends = list(dict.fromkeys(c.backend for c in cells))
    xs = list(range(len(depths)))
    for i, fs in enumerate(fss):
        for j, metric in enumerate(metrics):
            ax = axes[i][j]
            for backend in backends:
                points = [
                    (x, m * 1e6)
                    for x, d in zip(xs, depths, strict=True)
                    if (c := by.get((fs, backend, d))) and (m := c.best(metric)) is not None
                ]
                if points:
                    style = "--" if backend in (FLOOR, FLOOR_FSYNC) else "-"
                    ax.plot(*zip(*points, strict=True), style, marker="o", label=backend)
            ax.set_yscale("log")
            ax.set_title(f"{metric.value} ({fs})")
            ax.set_ylabel("µs per message")
            ax.set_xticks(xs, [depth_label(d) for d in depths])
            ax.set_xlabel("backlog (messages)")
            ax.grid(visible=True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.tight_layout()
    dest.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(dest)
    plt.close(fig)
    return True


def summary_medians(cells: Sequence[Cell]) -> list[dict[str, Any]]:
    """Cells as JSON rows: every sample plus its median."""
    return [
        {
            "backend": c.backend,
            "fs": c.fs,
            "depth": c.depth,
            "built": c.built,
            "capped": c.capped,
            "skipped": c.skipped,
            "build_s": c.build_s,
            "cold_receive_s": c.cold_receive_s,
            "per_op_s": {
                k: {"median": statistics.median(v), "min": min(v), "samples": v}
                for k, v in c.samples.items()
            },
        }
        for c in cells
    ]
