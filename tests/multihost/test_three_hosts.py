"""Three hosts share one queue: the owner's directory and two sshfs mounts of it.

Each host runs one publisher and two consumers, all real processes. Through the mounts
vsqs takes its link-then-unlink path (sshfs has no atomic no-replace rename) and sees no
inotify event for the other hosts' work, so this is the run that shows a queue on a
network filesystem is exactly-once per publish and FIFO per producer.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest

import vsqs
from vsqs import _wait
from vsqs.testing import assert_consistent

from ._workers import read_report, spawn

PER_HOST = 300
HOLD = 0.01  # each consumer works 10 ms per message: a backlog builds, every host claims
OPTIONS = {"durable": False, "visibility_timeout": 60, "poll_interval": 0.05}


def run_hosts(
    paths: tuple[Path, ...], tmp: Path, per_host: int, consumers: int = 2
) -> tuple[dict[str, list[list[object]]], dict[str, list[list[object]]]]:
    """One publisher and *consumers* consumers per host; their reports once all ended."""
    vsqs.Queue(paths[0])  # created by the owner, before the others look
    stop = tmp / "stop"
    procs = [
        spawn(
            "consume",
            queue=str(path),
            name=f"h{h}c{c}",
            report=str(tmp / f"c-h{h}c{c}"),
            stop=str(stop),
            options=OPTIONS,
            hold=HOLD,
        )
        for h, path in enumerate(paths)
        for c in range(consumers)
    ]
    publishers = [
        spawn(
            "publish",
            queue=str(path),
            name=f"h{h}",
            count=per_host,
            report=str(tmp / f"p-h{h}"),
            options=OPTIONS,
        )
        for h, path in enumerate(paths)
    ]
    for proc in publishers:
        assert proc.wait(timeout=240) == 0
    stop.touch()
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    published = {f"h{h}": read_report(tmp / f"p-h{h}") for h in range(len(paths))}
    consumed = {
        f"h{h}c{c}": read_report(tmp / f"c-h{h}c{c}")
        for h in range(len(paths))
        for c in range(consumers)
    }
    return published, consumed


def check_exactly_once(
    published: dict[str, list[list[object]]], consumed: dict[str, list[list[object]]], per: int
) -> None:
    """No publish error, nothing lost, nothing twice, FIFO per producer in each consumer."""
    errors = [rec for recs in published.values() for rec in recs if str(rec[1]).startswith("error")]
    assert errors == []
    bodies = Counter(str(rec[0]) for recs in consumed.values() for rec in recs)
    expected = {f"{p}:{n}" for p in published for n in range(per)}
    assert set(bodies) == expected, f"lost: {sorted(expected - set(bodies))[:10]}"
    assert [b for b, k in bodies.items() if k > 1] == []
    for consumer, recs in consumed.items():
        last: dict[str, int] = defaultdict(lambda: -1)
        for rec in recs:
            producer, _, n = str(rec[0]).partition(":")
            assert int(n) > last[producer], (
                f"{consumer} got {rec[0]} after {producer}:{last[producer]}"
            )
            last[producer] = int(n)


@pytest.mark.parametrize("hosts", ["cache-no", "fine"], indirect=True)
def test_three_hosts_exactly_once_fifo(hosts: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """Publish on every host, consume on every host: 0 errors, 0 lost, 0 twice, FIFO."""
    assert _wait.filesystem_type(str(hosts[1])) == "fuse.sshfs"
    published, consumed = run_hosts(hosts, tmp_path, PER_HOST)
    check_exactly_once(published, consumed, PER_HOST)
    assert_consistent(vsqs.Queue(hosts[0]))
    assert sorted(p.name for p in hosts[0].iterdir() if p.name != ".vsqs") == []
    for h in range(3):  # every host saw, and claimed, what the others published
        assert len(consumed[f"h{h}c0"]) + len(consumed[f"h{h}c1"]) > 0
