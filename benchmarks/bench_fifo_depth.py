"""``fifo=True`` receive+delete at depth: a claim step's cost against the backlog.

Method: one ``fifo=True`` queue of one partition (non-durable, all messages in one
directory) holds a backlog of N messages (N = 1,000, 25,000, 100,000) in 10 groups,
published round-robin. A trial is one process that opens the queue and receives with
``receive_batch(10)``, deleting each message, until it has taken 1,000 (100 claim
steps, the first of which lists the directory); msg/s is 1,000 over that time. Before
each trial the backlog is topped up to N + 1,000, so a trial runs from N + 1,000 down
to N. Trials of the two trees alternate, ``before`` then ``after``, for *rounds*
rounds; the table gives the min and the median. ``before`` and ``after`` are two
checkouts of vsqs (``--before`` and ``--after``, each put first on ``PYTHONPATH`` of
its trials), so the figures compare code, on the same machine, seconds apart. Run it
with::

    python -m benchmarks.bench_fifo_depth --before /work/wt/base [--rounds 3] [--dir /dev/shm]
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
BATCH: Final = 10

_CHILD: Final = """
import sys, time, vsqs
queue = vsqs.Queue(sys.argv[1], fifo=True, partitions=1, durable=False)
began = time.perf_counter()
taken = 0
while taken < int(sys.argv[2]):
    batch = queue.receive_batch(10, timeout=0)
    if not batch:
        raise SystemExit("the backlog ran out")
    for message in batch:
        if not queue.delete(message):
            raise SystemExit("a delete found its message gone")
    taken += len(batch)
print(taken / (time.perf_counter() - began))
"""


def _fill(path: Path, messages: int) -> None:
    """Publish *messages* more, round-robin over the groups."""
    import vsqs

    queue = vsqs.Queue(path, fifo=True, partitions=1, durable=False)
    for n in range(messages):
        queue.publish(b"%d" % n, group=f"g{n % GROUPS}")


def _trial(tree: str, path: Path) -> float:
    env = {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(TAKEN)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"a trial of {tree} failed: {done.stderr.strip()[-500:]}")
    return float(done.stdout)


def table(rows: list[tuple[int, str, list[float]]]) -> str:
    head = ("backlog", "tree", "min msg/s", "median msg/s")
    rule = "  ".join("=" * 12 for _ in head)
    lines = [rule, "  ".join(f"{h:>12}" for h in head), rule]
    lines += [
        f"{backlog:>12,}  {tree:>12}  {min(rates):>12,.0f}  {statistics.median(rates):>12,.0f}"
        for backlog, tree, rates in rows
    ]
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
    rows: list[tuple[int, str, list[float]]] = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for backlog in (int(b) for b in args.backlogs.split(",")):
            path = Path(tmp) / f"q-{backlog}"
            _fill(path, backlog)
            rates: dict[str, list[float]] = {name: [] for name in trees}
            for _ in range(args.rounds):
                for name, tree in trees.items():
                    _fill(path, TAKEN)
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
