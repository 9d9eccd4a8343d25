"""Runs of several "hosts" (paths onto one queue) with real publisher and consumer processes."""

from __future__ import annotations

import subprocess
import time
from collections import Counter, defaultdict
from pathlib import Path

import vsqs

from ._workers import read_report, spawn

HOLD = 0.01  # each consumer works 10 ms per message: a backlog builds, every host claims
OPTIONS = {"durable": False, "visibility_timeout": 60, "poll_interval": 0.05}


def run_hosts(
    paths: tuple[Path, ...],
    tmp: Path,
    per_host: int,
    *,
    consumers: int = 2,
    skews: tuple[str | None, ...] = (None, None, None),
    dedup: bool = False,
) -> tuple[dict[str, list[list[object]]], dict[str, list[list[object]]]]:
    """One publisher and *consumers* consumers per host; their reports once all ended.

    Host *h*'s processes run under ``faketime`` with offset ``skews[h]`` if it is set.
    With *dedup*, every message has a dedup id, and each publisher then publishes its
    first 20 again with the same ids: they must come back as the ids already published.
    """
    vsqs.Queue(paths[0])  # created by the owner, before the others look
    stop = tmp / "stop"
    procs = [
        spawn(
            "consume",
            faketime=skews[h],
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
            faketime=skews[h],
            dedup=dedup,
            queue=str(path),
            name=f"h{h}",
            count=per_host,
            report=str(tmp / f"p-h{h}"),
            options=OPTIONS,
        )
        for h, path in enumerate(paths)
    ]
    for proc in publishers:
        assert proc.wait(timeout=3600) == 0
    if dedup:
        again = [
            spawn(
                "publish",
                faketime=skews[h],
                dedup=True,
                queue=str(path),
                name=f"h{h}",
                count=20,
                report=str(tmp / f"again-h{h}"),
                options=OPTIONS,
            )
            for h, path in enumerate(paths)
        ]
        for h, proc in enumerate(again):
            assert proc.wait(timeout=120) == 0
            first = read_report(tmp / f"p-h{h}")[:20]
            assert read_report(tmp / f"again-h{h}") == first, "a dedup id published twice"
    stop.touch()
    for proc in procs:
        assert proc.wait(timeout=600) == 0
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
    assert errors == [], errors
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


def start_dying_host(path: Path, tmp: Path, lease: float) -> list[subprocess.Popen[bytes]]:
    """Host D on *path*: a publisher of ``d:<n>`` (report ``p-d``, one every 20 ms, until
    killed) and two consumers (``c-d0``, ``c-d1``) that hold what they get, on a lease of
    *lease* seconds, until killed."""
    options = {"durable": False, "visibility_timeout": lease, "poll_interval": 0.05}
    return [
        spawn("publish", queue=str(path), name="d", count=100_000,
              report=str(tmp / "p-d"), options=options, pause=0.02),
        *(spawn("consume", queue=str(path), name=f"d{k}", report=str(tmp / f"c-d{k}"),
                stop=str(tmp / "never"), options=options, hold=60) for k in range(2)),
    ]  # fmt: skip


def wait_until_dying_host_holds(tmp: Path, *, published: int = 0, timeout: float = 30) -> None:
    """Until each consumer of host D holds a message and its publisher published
    *published* (or *timeout* seconds passed: the test's checks then say what is missing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (
        all(read_report(tmp / f"c-d{k}") for k in range(2))
        and len(read_report(tmp / "p-d")) >= published
    ):
        time.sleep(0.05)


def finish_survivors(
    publishers: list[subprocess.Popen[bytes]], consumers: list[subprocess.Popen[bytes]], stop: Path
) -> None:
    """Wait for the survivors' publishers (the others never stall), then stop and wait for
    their consumers; each must exit 0."""
    for proc in publishers:
        assert proc.wait(timeout=120) == 0
    stop.touch()
    for proc in consumers:
        assert proc.wait(timeout=120) == 0


def start_survivors(
    survivors: list[tuple[str, Path]], tmp: Path, stop: Path, lease: float
) -> tuple[list[subprocess.Popen[bytes]], list[subprocess.Popen[bytes]]]:
    """On each surviving host (name, path): a publisher of 200 messages and two consumers
    that go on until *stop* exists and they waited past host D's *lease*."""
    options = {"durable": False, "visibility_timeout": 60, "poll_interval": 0.05}
    publishers = [
        spawn("publish", queue=str(path), name=h, count=200, report=str(tmp / f"p-{h}"),
              options=options, pause=0.01)
        for h, path in survivors
    ]  # fmt: skip
    consumers = [
        spawn("consume", queue=str(path), name=f"{h}{k}", report=str(tmp / f"c-{h}{k}"),
              stop=str(stop), options=options, idle=lease + 2, hold=0.02)
        for h, path in survivors
        for k in range(2)
    ]  # fmt: skip
    return publishers, consumers


def check_after_death(tmp: Path, survivors: str) -> tuple[list[list[object]], list[str]]:
    """What host D was told it published and what its consumers held, once the
    survivors (their one-letter names) ended: none of theirs failed; each message was
    received once by them, but what D held, which came back once; nothing told lost."""
    published = {h: read_report(tmp / f"p-{h}") for h in survivors + "d"}
    errors = [r for h in survivors for r in published[h] if str(r[1]).startswith("error")]
    assert errors == []
    told = [r for r in published["d"] if not str(r[1]).startswith("error")]
    live = [r for h in survivors for k in range(2) for r in read_report(tmp / f"c-{h}{k}")]
    dead = sorted(str(r[0]) for k in range(2) for r in read_report(tmp / f"c-d{k}"))
    got = Counter(str(r[0]) for r in live)
    assert [body for body, n in got.items() if n > 1] == []  # once to the living
    expected = {f"{h}:{n}" for h in survivors for n in range(200)} | {f"d:{r[0]}" for r in told}
    assert expected <= set(got) | set(dead), f"lost: {sorted(expected - set(got))[:10]}"
    # Each dead consumer held its one message when killed: it came back, to one living
    # consumer, once, and is the only message received twice.
    assert sorted(str(r[0]) for r in live if int(r[2]) > 1) == dead
    return told, dead
