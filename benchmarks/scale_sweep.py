"""Issue 27's sweep: K consumer (or producer) processes on one directory, on K
directories, on vsqs ``partitions=1`` and ``partitions=K``, for K up to ``--max-k``.

``python -m benchmarks.bench_scale --sweep`` runs it.

Method, on each filesystem asked for, for K = 1, 2, 4, ...
up to ``max(os.cpu_count(), 8)``, four columns side by side in one run:

* ``bare, 1 dir``: the bare strict-FIFO rename consumer, all K on one directory: each
  lists the directory once, then for each name, oldest first, ``rename`` ``<id>`` to
  ``<id>.<expiry>`` (a lost race, ``ENOENT``, moves it to the next name), ``open``,
  ``read``, ``close``, ``unlink``. The bare producer: ``open(<id>.new, O_CREAT|O_EXCL)``,
  ``write``, ``close``, ``rename`` to ``<id>``, with ids known in advance (producer i of
  K writes the ids that are i modulo K);
* ``bare, K dirs``: the same, process i on directory i of K (the backlog split evenly);
* ``vsqs, p=1``: ``vsqs.Queue(path)``, the unpartitioned queue: ``receive(timeout=0)`` and
  ``delete`` until ``receive`` returns ``None``, or ``publish`` one message at a time;
* ``vsqs, p=K``: the same calls on ``vsqs.Queue(path, partitions=K)``: consumers find their
  own home partitions, producers publish without a group (each spreads its messages by
  itself).

Consumers drain a backlog of N small messages (100 bytes each; N is ``--messages`` on
tmpfs, ``--disk-messages`` on the disk, where 100,000 files take minutes on a shared
machine) made beforehand (untimed), written straight into the (partition) directories as
ready files, in id order spread evenly over the directories. Producers publish N
messages in total, N/K each, into empty directories. Before each run the filesystem's
dirty data is written back (``syncfs``, untimed), so a run does not pay for the backlog
or the run before it. Every process of a run is started first (spawned, imports done,
queue opened) and then released by one barrier; a run's throughput is N
divided by the wall time from the earliest release to the last process's end. Each run
checks its result: every message delivered once (the counts add up to N and no message
file is left) or, for producers, N ready files. vsqs handles are ``durable=False``, like
the bare rows (no ``fsync``).

Each cell is the median of ``--rounds`` rounds (the order of the columns rotates from one
round to the next), ``±`` half the spread between the slowest and the fastest round in
percent of the median, and in brackets the ratio to K=1 of the same column. The last two
columns divide vsqs by its bare floor: ``p=1 / 1 dir`` and ``p=K / K dirs``.

Last, the per-message cost of ONE consumer (and one producer) on a queue of 2, 4 and 8
partitions against the unpartitioned queue, the same backlog (or N published), the same
rounds: µs per message and the ratio to partitions=1.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from benchmarks.scale_runs import Job, rst, run_once

COLUMNS: Final = ("bare, 1 dir", "bare, K dirs", "vsqs, p=1", "vsqs, p=K")
SINGLE_PARTITIONS: Final = (1, 2, 4, 8)


def make_job(role: str, column: str, base: Path, *, k: int, messages: int, tag: str) -> Job:
    path = base / f"{role}-{column.replace(', ', '-').replace('=', '')}-{k}-{tag}"
    if column == "bare, 1 dir":
        return Job(role, "bare", (str(path),), k, 1, messages)
    if column == "bare, K dirs":
        return Job(role, "bare", tuple(f"{path}/{i}" for i in range(k)), k, 1, messages)
    partitions = 1 if column == "vsqs, p=1" else k
    return Job(role, "vsqs", (str(path),), k, partitions, messages)


def partitions_supported() -> bool:
    try:
        import vsqs
    except ImportError:  # pragma: no cover - the benchmarks run from the repository
        return False
    return hasattr(vsqs, "PartitionedQueue")


# ---------------------------------------------------------------- tables


def k_values(max_k: int) -> list[int]:
    ks, k = [], 1
    while k <= max_k:
        ks.append(k)
        k *= 2
    return ks


def _rate(value: float) -> str:
    return f"{value / 1000:.1f}k"


def _cell(samples: Sequence[float], first: Sequence[float] | None) -> str:
    mid = statistics.median(samples)
    spread = (max(samples) - min(samples)) / 2 / mid
    ratio = mid / statistics.median(first) if first else 1.0
    return f"{_rate(mid)} ±{spread:.0%} ({ratio:.2f}x)"


def scaling_table(samples: dict[tuple[str, int], list[float]], ks: Sequence[int]) -> str:
    """One filesystem and role: K down, the columns across, msg/s."""
    columns = [c for c in COLUMNS if (c, 1) in samples]
    head = ["K", *columns]
    if "vsqs, p=1" in columns:
        head.append("p=1 / 1 dir")
    if "vsqs, p=K" in columns:
        head.append("p=K / K dirs")
    rows = []
    for k in ks:
        row = [str(k)] + [_cell(samples[(c, k)], samples[(c, 1)]) for c in columns]
        for vsqs_col, bare_col in (("vsqs, p=1", "bare, 1 dir"), ("vsqs, p=K", "bare, K dirs")):
            if vsqs_col in columns:
                ratio = statistics.median(samples[(vsqs_col, k)]) / statistics.median(
                    samples[(bare_col, k)]
                )
                row.append(f"{ratio:.2f}")
        rows.append(row)
    return rst(head, rows)


def single_table(samples: dict[int, list[float]]) -> str:
    """One process on P partitions: µs per message against P=1."""
    base = statistics.median(samples[1])
    rows = []
    for partitions, rates in sorted(samples.items()):
        us = [1e6 / r for r in rates]
        mid = statistics.median(us)
        spread = (max(us) - min(us)) / 2 / mid
        rows.append(
            [str(partitions), f"{mid:.1f} ±{spread:.0%}", f"{base / statistics.median(rates):.2f}"]
        )
    return rst(["partitions", "µs per message", "× partitions=1"], rows)


def floors(found: dict[str, Any]) -> list[str]:
    """The issue's floors for this 2-core machine, each with its measured figure."""
    lines = []
    for fs, by_role in found.items():
        for role, runs in by_role.items():
            scaling = runs["scaling"]
            if ("vsqs, p=K", 2) not in scaling:
                continue
            two = statistics.median(scaling[("vsqs, p=K", 2)])
            one = statistics.median(scaling[("vsqs, p=K", 1)])
            bare = statistics.median(scaling[("bare, K dirs", 2)])
            lines.append(
                f"{fs}, {role}: 2 on p=2 / 1 = {two / one:.2f}x (floor 1.6x), "
                f"/ bare 2 dirs = {two / bare:.2f}x (floor 0.9x)"
            )
            single = runs.get("single")
            if single and 2 in single:
                cost = statistics.median(single[1]) / statistics.median(single[2])
                lines.append(f"{fs}, one of {role} on p=2: {cost:.2f}x per message (ceiling 1.1x)")
    return lines


# ---------------------------------------------------------------- the run


def measure(
    fs: str,
    root: str,
    *,
    roles: Sequence[str],
    ks: Sequence[int],
    columns: Sequence[str],
    messages: int,
    rounds: int,
) -> dict[str, Any]:
    """Every sample of one filesystem: {role: {"scaling": ..., "single": ...}}."""
    found: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="vsqs-scale-", dir=root) as tmp:
        base = Path(tmp)
        for role in roles:
            scaling: dict[tuple[str, int], list[float]] = {}
            single: dict[int, list[float]] = {}
            for rnd in range(rounds):
                order = list(columns[rnd % len(columns) :]) + list(columns[: rnd % len(columns)])
                for k in ks:
                    for column in order:
                        job = make_job(role, column, base, k=k, messages=messages, tag=f"r{rnd}")
                        rate = run_once(job)
                        scaling.setdefault((column, k), []).append(rate)
                        shutil.rmtree(base / Path(job.dirs[0]).relative_to(base).parts[0])
                        print(f"  {fs} {role} K={k} {column}: {rate:,.0f} msg/s", flush=True)
                if "vsqs, p=K" in columns:
                    for partitions in SINGLE_PARTITIONS:
                        path = base / f"single-{role}-{partitions}-r{rnd}"
                        job = Job(role, "vsqs", (str(path),), 1, partitions, messages)
                        rate = run_once(job)
                        single.setdefault(partitions, []).append(rate)
                        shutil.rmtree(path)
                        print(f"  {fs} one of {role}, p={partitions}: {1e6 / rate:.1f} µs/msg")
            found[role] = {"scaling": scaling, "single": single}
    return found


def report(
    found: dict[str, Any], ks: Sequence[int], names: dict[str, str], messages: dict[str, int]
) -> None:
    """Print the sweep's tables and the issue's floors (*names*: each filesystem's)."""
    for fs, by_role in found.items():
        for role, runs in by_role.items():
            print(
                f".. rubric:: {role.capitalize()}, on {names[fs]}, "
                f"{messages[fs]:,} messages: msg/s\n"
            )
            print(scaling_table(runs["scaling"], ks), end="\n\n")
            if runs["single"]:
                print(f".. rubric:: One of the {role}, on {names[fs]}\n")
                print(single_table(runs["single"]), end="\n\n")
    for line in floors(found):
        print(line)


def as_json(found: dict[str, Any]) -> dict[str, Any]:
    """Every sample, with string keys."""
    return {
        fs: {
            role: {
                "scaling": {f"{c} K={k}": v for (c, k), v in r["scaling"].items()},
                "single": r["single"],
            }
            for role, r in by_role.items()
        }
        for fs, by_role in found.items()
    }
