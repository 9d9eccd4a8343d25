"""Runs of several "hosts" (paths onto one queue) with real publisher and consumer processes."""

from __future__ import annotations

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
