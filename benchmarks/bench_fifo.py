"""Strict FIFO under contention: 1 to 8 consumer processes on one backlog.

Method: one producer publishes a backlog of N messages (non-durable) into a fresh queue;
then C consumer processes (C = 1, 2, 4, 8) receive and delete until the queue is
empty. Each consumer reports the bodies in the order it received them, its failed claims
(renames that found the message taken) and its time. Printed per C and per policy:

* ``msg/s``: N divided by the wall time from the first consumer's start to the last one's
  end;
* ``failed/msg``: failed claims of all consumers divided by N;
* ``inversions``: pairs of consecutive deliveries to one consumer where the later one
  was published first (strict FIFO means 0);
* ``busiest``: the largest share of N that one consumer took (load balance).

Two policies run side by side, in the same run and on the same machine:
``strict`` is vsqs as it is (after a lost claim, the next candidate); ``jump`` is the
policy of 1.0.0.dev0, patched in for comparison (after a lost claim, skip a random
number of candidates, up to 1024). Run it with::

    python -m benchmarks.bench_fifo [--messages 20000] [--dir /dev/shm]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

CONSUMERS: Final = (1, 2, 4, 8)
POLICIES: Final = ("jump", "strict")
_MAX_JUMP: Final = 1024  # the jump window of 1.0.0.dev0


def _patch_jump() -> None:
    """Reinstate 1.0.0.dev0's random jump after a lost claim (for comparison only)."""
    from vsqs import _consumer

    def miss(self: Any) -> None:
        with self._lock:
            self.claim_misses += 1
            codes = self._codes
            if len(codes) > 1:
                for _ in range(random.randrange(min(len(codes), _MAX_JUMP))):
                    codes.popleft()

    _consumer.Consumer.miss = miss  # type: ignore[method-assign]


def _consumer(path: str, policy: str, start_at: float) -> None:
    """Child: receive and delete until empty; print one JSON line."""
    if policy == "jump":
        _patch_jump()
    import vsqs

    queue = vsqs.Queue(path, durable=False)
    while time.time() < start_at:  # start together
        time.sleep(0.0005)
    began = time.perf_counter()
    got: list[int] = []
    while (message := queue.receive(timeout=0)) is not None:
        got.append(int(message.body))
        queue.delete(message)
    elapsed = time.perf_counter() - began
    misses = queue.claim_misses
    print(json.dumps({"got": got, "misses": misses, "elapsed": elapsed}))


def run_once(base: Path, messages: int, consumers: int, policy: str) -> dict[str, Any]:
    import vsqs

    path = base / f"q-{policy}-{consumers}"
    vsqs.Queue(path, durable=False).publish_batch([str(n).encode() for n in range(messages)])
    start_at = time.time() + 0.5 + 0.1 * consumers
    code = "import sys; from benchmarks.bench_fifo import _consumer; _consumer(*sys.argv[1:3], float(sys.argv[3]))"  # noqa: E501
    children = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(path), policy, repr(start_at)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(consumers)
    ]
    reports = []
    for child in children:
        out, _ = child.communicate(timeout=600)
        if child.returncode != 0:
            raise RuntimeError(f"a consumer failed with exit status {child.returncode}")
        reports.append(json.loads(out))
    wall = max(r["elapsed"] for r in reports)
    delivered = sorted(n for r in reports for n in r["got"])
    if delivered != list(range(messages)):
        raise RuntimeError("a message was lost or delivered twice")
    shutil.rmtree(path)
    return {
        "policy": policy,
        "consumers": consumers,
        "msg_s": messages / wall,
        "failed_per_msg": sum(r["misses"] for r in reports) / messages,
        "inversions": sum(
            sum(1 for a, b in itertools.pairwise(r["got"]) if b < a) for r in reports
        ),
        "busiest": max(len(r["got"]) for r in reports) / messages,
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = ("consumers", "policy", "msg/s", "failed/msg", "inversions", "busiest")
    lines = ["  ".join(f"{h:>10}" for h in head)]
    lines += [
        f"{r['consumers']:>10}  {r['policy']:>10}  {r['msg_s']:>10,.0f}  "
        f"{r['failed_per_msg']:>10.3f}  {r['inversions']:>10}  {r['busiest']:>10.0%}"
        for r in rows
    ]
    rule = "  ".join("=" * 10 for _ in head)
    return "\n".join([rule, lines[0], rule, *lines[1:], rule])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--dir", default="/dev/shm", help="where the queues live")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        # Side by side: the same backlog for each policy, one run after the other.
        rows = [
            run_once(Path(tmp), args.messages, consumers, policy)
            for consumers in CONSUMERS
            for policy in POLICIES
        ]
    print(f"{args.messages:,} messages on {args.dir}")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
