"""Cost per operation on top of a backlog: the depth-scaling figures.

For each depth, a backlog is built for the raw floor and kept; then each backend in turn gets
its own backlog, and its windows are interleaved with the floor's (floor, backend; repeated
``reps`` times; the fsync floor joins beside vsqs durable), so a ratio compares windows taken
seconds apart on the same disk.
Each window runs publish, receive+delete, batch publish and batch receive+delete, in that order,
so the depth stays within one window of the target.
"""

from __future__ import annotations

import enum
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from benchmarks.backends import (
    BATCH,
    FLOOR,
    FLOOR_FSYNC,
    VSQS_DURABLE,
    Adapter,
    RawFloor,
    Spec,
    body,
)

TMPFS_BYTES_PER_FILE: Final = 8192
"""A small file on tmpfs costs a page plus its inode and dentry."""


class Metric(str, enum.Enum):
    PUBLISH = "publish"
    RECEIVE = "receive+delete"
    BATCH_PUBLISH = "batch publish"
    BATCH_RECEIVE = "batch receive+delete"


@dataclass(frozen=True)
class Plan:
    depths: tuple[int, ...]
    window: int
    """Messages per timed window."""
    reps: int
    window_cap_s: float
    """A window stops early after this long (at least 2 operations or 1 batch are timed)."""
    build_cap_s: float
    """A backlog built through a peer's API stops after this long; the cell is flagged capped."""
    op_limit_s: float
    """A backend whose first receive at a depth takes longer than this is skipped there."""


@dataclass
class Cell:
    """One backend at one depth on one filesystem."""

    backend: str
    fs: str
    depth: int
    built: int = 0
    capped: bool = False
    skipped: str | None = None
    cold_receive_s: float | None = None
    build_s: float = 0.0
    samples: dict[str, list[float]] = field(default_factory=dict)

    def add(self, metric: Metric, per_op: float | None) -> None:
        if per_op is not None:
            self.samples.setdefault(metric.value, []).append(per_op)

    def best(self, metric: Metric) -> float | None:
        """The fastest window: interference on a shared machine only ever adds time."""
        values = self.samples.get(metric.value)
        return min(values) if values else None

    def flag(self) -> str:
        if self.skipped:
            return self.skipped
        return f"capped at {self.built:,}" if self.capped else ""


def _timed(op: Callable[[], bool], count: int, cap_s: float, least: int = 2) -> float | None:
    """Run *op* up to *count* times (at least *least* unless it runs dry, fewer after *cap_s*).

    Return seconds per operation, or None when not one ran.
    """
    done = 0
    start = time.perf_counter()
    deadline = start + cap_s
    now = start
    while done < count:
        if not op():
            break
        done += 1
        now = time.perf_counter()
        if now > deadline and done >= least:
            break
    return (now - start) / done if done else None


def run_window(adapter: Adapter, cell: Cell, plan: Plan, payloads: Sequence[bytes]) -> None:
    """Time the four operations once each, adding one sample per metric to *cell*."""
    it = iter(range(len(payloads)))

    def publish() -> bool:
        adapter.publish(payloads[next(it) % len(payloads)])
        return True

    def consume() -> bool:
        return adapter.consume() is not None

    batch = list(payloads[:BATCH])

    def publish_batch() -> bool:
        adapter.publish_batch(batch)
        return True

    def consume_batch() -> bool:
        return adapter.consume_batch(BATCH) > 0

    batches = max(1, plan.window // BATCH)
    cap = plan.window_cap_s
    single_publish = _timed(publish, plan.window, cap)
    single_receive = _timed(consume, plan.window, cap)
    cell.add(Metric.PUBLISH, single_publish)
    cell.add(Metric.RECEIVE, single_receive)
    # A batch window runs at least one whole batch: where single operations already show
    # that one batch would take ten windows (vsqs 0.3 at a deep backlog), leave it out.
    for metric, single, op in (
        (Metric.BATCH_PUBLISH, single_publish, publish_batch),
        (Metric.BATCH_RECEIVE, single_receive, consume_batch),
    ):
        if single is not None and single * BATCH > 10 * cap:
            continue  # shown as "-" in the tables
        per_batch = _timed(op, batches, cap, least=1)
        cell.add(metric, None if per_batch is None else per_batch / BATCH)


def build(spec: Spec, path: Path, depth: int, cap_s: float) -> tuple[int, bool, float]:
    """Build a backlog of *depth* messages; return (built, capped, seconds)."""
    start = time.perf_counter()
    if depth == 0:
        path.mkdir(parents=True, exist_ok=True)
        return 0, False, 0.0
    if spec.prefill is not None:
        spec.prefill(path, depth)
        return depth, False, time.perf_counter() - start
    adapter = spec.open(path)
    deadline = start + cap_s
    data = body()
    built = 0
    try:
        while built < depth and time.perf_counter() < deadline:
            for _ in range(min(1000, depth - built)):
                adapter.publish(data)
            built += min(1000, depth - built)
    finally:
        adapter.close()
    return built, built < depth, time.perf_counter() - start


def fits(path: Path, files: int) -> bool:
    """Whether the filesystem at *path* has inodes and space for *files* more small files."""
    st = os.statvfs(path)
    inodes_ok = st.f_files == 0 or st.f_favail > files * 1.2 + 10_000
    return inodes_ok and st.f_bavail * st.f_frsize > files * TMPFS_BYTES_PER_FILE * 1.2


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def measure_depth(
    specs: Sequence[Spec],
    *,
    fs: str,
    root: Path,
    depth: int,
    plan: Plan,
    log: Callable[[str], None],
) -> list[Cell]:
    """Measure every backend at one depth on one filesystem."""
    payloads = [body(i) for i in range(max(plan.window, BATCH))]
    floor_cell = Cell(FLOOR, fs, depth)
    fsync_cell = Cell(FLOOR_FSYNC, fs, depth)
    floor_dir = root / f"floor-{depth}"
    floor_cell.built, _, floor_cell.build_s = build(_floor_spec(specs), floor_dir, depth, 0)
    fsync_cell.built = floor_cell.built
    floor = RawFloor(floor_dir)
    floor_fsync = floor.durable()
    cells = [floor_cell, fsync_cell]
    others = [s for s in specs if s.name not in (FLOOR, FLOOR_FSYNC)]
    # Keep the floor's backlog beside each backend's, unless the filesystem cannot hold two
    # (1M files on a small tmpfs): then the floor is measured alone, first.
    interleave = bool(others) and fits(root, depth)
    partners: list[tuple[Adapter, Cell]] = [(floor, floor_cell), (floor_fsync, fsync_cell)]
    try:
        if not interleave:
            for _ in range(plan.reps):
                for adapter, cell in partners:
                    run_window(adapter, cell, plan, payloads)
            for adapter, _ in partners:
                adapter.close()
            shutil.rmtree(floor_dir, ignore_errors=True)
        for spec in others:
            cell = Cell(spec.name, fs, depth)
            cells.append(cell)
            _measure_one(
                spec,
                cell=cell,
                path=root / _slug(spec.name),
                plan=plan,
                payloads=payloads,
                log=log,
                partners=_partners_for(spec, others, partners) if interleave else [],
            )
    finally:
        if interleave:
            for adapter, _ in partners:
                adapter.close()
        shutil.rmtree(floor_dir, ignore_errors=True)
    return cells


def _partners_for(
    spec: Spec, others: Sequence[Spec], partners: list[tuple[Adapter, Cell]]
) -> list[tuple[Adapter, Cell]]:
    """The floor runs beside every backend; the fsync floor only beside vsqs durable, its
    ratio's partner (or the first backend when vsqs is absent): on a disk it is the slow one."""
    durable = next((s for s in others if s.name == VSQS_DURABLE), others[0])
    return partners if spec is durable else partners[:1]


def _floor_spec(specs: Sequence[Spec]) -> Spec:
    return next(s for s in specs if s.name == FLOOR)


def _measure_one(
    spec: Spec,
    *,
    cell: Cell,
    path: Path,
    plan: Plan,
    payloads: Sequence[bytes],
    log: Callable[[str], None],
    partners: list[tuple[Adapter, Cell]],
) -> None:
    try:
        cell.built, cell.capped, cell.build_s = build(spec, path, cell.depth, plan.build_cap_s)
        adapter = spec.open(path)
        try:
            start = time.perf_counter()
            got = adapter.consume()  # cold: includes any first listing of the backlog
            cell.cold_receive_s = time.perf_counter() - start
            if got is not None:
                adapter.publish(payloads[0])  # keep the depth
            if cell.cold_receive_s > plan.op_limit_s:
                cell.skipped = "skipped (too slow)"
            else:
                for _ in range(plan.reps):
                    for partner, partner_cell in partners:
                        run_window(partner, partner_cell, plan, payloads)
                    run_window(adapter, cell, plan, payloads)
        finally:
            adapter.close()
    finally:
        shutil.rmtree(path, ignore_errors=True)
    pub, rec = cell.best(Metric.PUBLISH), cell.best(Metric.RECEIVE)
    log(
        f"  {cell.fs:4} {cell.depth:>9,} {cell.backend:26} "
        f"pub {_us(pub):>10} rcv {_us(rec):>10} cold {_us(cell.cold_receive_s):>10} "
        f"built {cell.built:,} in {cell.build_s:.1f}s {cell.flag()}"
    )


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:,.1f}us"
