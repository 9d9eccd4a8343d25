"""``fifo=True`` receive+delete at depth: a claim step's cost against the backlog.

Method: one ``fifo=True`` queue of one partition (non-durable, all messages in one
directory) holds a backlog of N messages (N = 1,000, 25,000, 100,000) in 10 groups,
published round-robin. A trial is one process that opens the queue and receives with
``receive_batch(10)``, deleting each message, until it has taken 1,000 (100 claim
steps) after a first, untimed receive (whose listing every handle makes once: its
time is the ``first ms`` column); msg/s is 1,000 over that time, which includes every
listing a step makes after the first. Before each trial the backlog is topped up to
N + 1,010, so a trial runs from N + 1,010 down to N. Trials of the two trees
alternate, ``before`` then ``after``, for *rounds* rounds; the table gives the min and
the median. ``before`` and ``after`` are two checkouts of vsqs (``--before`` and
``--after``), each trial run in its own (first on ``sys.path``; the module it imported
is checked), so the figures compare code, on the same machine, seconds apart. Run it
with::

    python -m benchmarks.bench_fifo_depth --before BEFORE [--rounds 3] [--dir /dev/shm]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

BACKLOGS: Final = (1_000, 25_000, 100_000)
GROUPS: Final = 10
TAKEN: Final = 1_000  # messages a trial receives and deletes
BATCH: Final = 10  # messages a receive asks for

_CHILD: Final = """
import json, sys, time, vsqs
queue = vsqs.Queue(sys.argv[1], fifo=True, partitions=1, durable=False)
def step():
    batch = queue.receive_batch(10, timeout=0)
    if not batch:
        raise SystemExit("the backlog ran out")
    for message in batch:
        if not queue.delete(message):
            raise SystemExit("a delete found its message gone")
    return len(batch)
began = time.perf_counter()
step()
first = time.perf_counter() - began
began = time.perf_counter()
taken = 0
while taken < int(sys.argv[2]):
    taken += step()
print(json.dumps([taken / (time.perf_counter() - began), first * 1e3, vsqs.__file__]))
"""


def _fill(path: Path, messages: int) -> None:
    """Publish *messages* more, round-robin over the groups."""
    import vsqs

    queue = vsqs.Queue(path, fifo=True, partitions=1, durable=False)
    for n in range(messages):
        queue.publish(b"%d" % n, group=f"g{n % GROUPS}")


def _trial(tree: str, path: Path) -> tuple[float, float]:
    """One trial of the checkout *tree*: (msg/s after the first receive, the first
    receive's ms)."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(TAKEN)],
        env={**os.environ, "PYTHONPATH": tree},
        cwd=tree,  # ``-c`` puts the working directory first on sys.path
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"a trial of {tree} failed: {done.stderr.strip()[-500:]}")
    rate, first, module = json.loads(done.stdout)
    if not Path(module).is_relative_to(Path(tree).resolve()):
        raise RuntimeError(f"a trial of {tree} imported {module}")
    return rate, first


def table(rows: list[tuple[int, str, list[tuple[float, float]]]]) -> str:
    head = ("backlog", "tree", "min msg/s", "median msg/s", "first ms")
    rule = "  ".join("=" * 12 for _ in head)
    lines = [rule, "  ".join(f"{h:>12}" for h in head), rule]
    for backlog, tree, trials in rows:
        rates = [rate for rate, _ in trials]
        first = statistics.median(ms for _, ms in trials)
        lines.append(
            f"{backlog:>12,}  {tree:>12}  {min(rates):>12,.0f}  "
            f"{statistics.median(rates):>12,.0f}  {first:>12,.1f}"
        )
    return "\n".join([*lines, rule])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="a checkout of vsqs to compare with")
    parser.add_argument("--after", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default="/dev/shm", help="where the queues live")
    parser.add_argument("--backlogs", default=",".join(map(str, BACKLOGS)))
    args = parser.parse_args(argv)
    trees = {"before": args.before, "after": args.after}
    rows: list[tuple[int, str, list[tuple[float, float]]]] = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for backlog in (int(b) for b in args.backlogs.split(",")):
            path = Path(tmp) / f"q-{backlog}"
            _fill(path, backlog)
            rates: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
            for _ in range(args.rounds):
                for name, tree in trees.items():
                    _fill(path, TAKEN + BATCH)
                    rates[name].append(_trial(tree, path))
            rows += [(backlog, name, rates[name]) for name in trees]
            print(json.dumps({"backlog": backlog, **rates}), file=sys.stderr)
    print(
        f"fifo=True receive_batch({BATCH}) + delete, {TAKEN:,} messages a trial, "
        f"{GROUPS} groups, one partition, on {args.dir}, {args.rounds} rounds"
    )
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
