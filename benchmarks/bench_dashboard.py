"""What the dashboard costs the server, with many queues and with a deep queue.

Method: a root in a directory on disk (``--dir``, default ``/var/tmp``) holding either
*N* queues of 10 ready 100-byte messages each (one in ten with a dead-letter queue), or
one queue of *M* ready 100-byte messages (non-durable ``publish_batch``). In the same
process, a :class:`vsqs.dashboard.Dashboard` (its thread idle: ``sample_every`` of an
hour) and, timed as the best of 5 calls (interference only adds time), with both the
wall time and the process's CPU time:

* ``first round``: the sampler's first pass (``stats()`` of every queue, its settings,
  and its receive counts, which are read at most once a minute);
* ``round``: a later pass (what the server spends every ``sample_every`` seconds);
* ``overview page``: ``GET /`` (the HTML of every row), then its size;
* ``refresh``: ``GET /ui/api/overview`` (the JSON of the last round, as made by the
  round), and ``refresh 304`` (the browser already has it);
* ``queue page``: ``GET /ui/queue/NAME`` of the largest queue (the peek at its 20 oldest
  messages lists the directory);
* ``browser load``: with ``chromedriver`` on the PATH, headless Chromium opening the
  overview over HTTP: from navigation start to the load event (HTML, CSS, script, the
  rows laid out), the median of 5.

Run it with::

    python -m benchmarks.bench_dashboard [--queues 2000] [--messages 1000000] [--dir /var/tmp]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import vsqs
from benchmarks.report import table
from vsqs.dashboard import Dashboard

TIMES: Final = 5
BATCH: Final = 10_000


def _best(call: Callable[[], object]) -> tuple[float, float]:
    """``(wall, cpu)`` seconds, the best of :data:`TIMES` calls."""
    wall = cpu = float("inf")
    for _ in range(TIMES):
        w, c = time.perf_counter(), time.process_time()
        call()
        wall = min(wall, time.perf_counter() - w)
        cpu = min(cpu, time.process_time() - c)
    return wall, cpu


def _browser_load(dashboard: Dashboard, path: str) -> float | None:
    """Median seconds from navigation start to the load event in headless Chromium."""
    if shutil.which("chromedriver") is None:
        return None
    from tests.browser import start_chromium
    from tests.dashboard_http import serving

    browser = start_chromium()
    try:
        with serving(dashboard) as url:
            times = []
            for _ in range(TIMES):
                browser.get(url + path)
                got = browser.execute_script(
                    "const t = performance.getEntriesByType('navigation')[0];"
                    "return t.loadEventEnd - t.startTime;"
                )
                times.append(float(got) / 1e3)
            return statistics.median(times)
    finally:
        browser.quit()


def measure(root: vsqs.QueueRoot, big: str) -> dict[str, object]:
    got: dict[str, object] = {}
    with Dashboard(root, sample_every=3600) as dashboard:
        dashboard.sampler.wait_first(timeout=3600)
        dashboard.sampler.refresh_soon()  # forget the receive counts: a first round again
        w, c = time.perf_counter(), time.process_time()
        dashboard.sampler.sample_round()
        got["first round"] = (time.perf_counter() - w, time.process_time() - c)

        def every_queue_due() -> None:
            dashboard.sampler._due.clear()  # as when every queue's interval has passed
            dashboard.sampler.sample_round()

        got["round"] = _best(every_queue_due)
        got["overview page"] = _best(lambda: dashboard.handle("GET", "/", {}, b""))
        page = dashboard.handle("GET", "/", {}, b"")
        assert page is not None
        got["page size"] = len(page[2])
        refresh = dashboard.handle("GET", "/ui/api/overview", {}, b"")
        assert refresh is not None
        got["json size"] = len(refresh[2])
        got["refresh"] = _best(lambda: dashboard.handle("GET", "/ui/api/overview", {}, b""))
        etag = dict(refresh[1])["ETag"]
        got["refresh 304"] = _best(
            lambda: dashboard.handle("GET", "/ui/api/overview", {"If-None-Match": etag}, b"")
        )
        got["queue page"] = _best(lambda: dashboard.handle("GET", f"/ui/queue/{big}", {}, b""))
        got["browser load"] = _browser_load(dashboard, "/")
    return got


def _fill(queue: vsqs.Queue, count: int) -> None:
    body = b"x" * 100
    for start in range(0, count, BATCH):
        queue.publish_batch([body] * min(BATCH, count - start))
    queue.close()


def many_queues(base: str, count: int) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="bench-dashboard-", dir=base))
    try:
        root = vsqs.QueueRoot(work, durable=False)
        for i in range(count):
            options = {"dead_letter": f"q{i:05d}.dlq"} if i % 10 == 0 else {}
            if options:
                root.create(f"q{i:05d}.dlq")
            _fill(root.create(f"q{i:05d}", **options), 10)  # type: ignore[arg-type]
        return measure(root, "q00000")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def deep_queue(base: str, count: int) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="bench-dashboard-", dir=base))
    try:
        root = vsqs.QueueRoot(work, durable=False)
        _fill(root.create("deep"), count)
        return measure(root, "deep")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _ms(pair: object) -> str:
    assert isinstance(pair, tuple)
    wall, cpu = pair
    if wall < 1e-3:
        return f"{wall * 1e6:,.1f} / {cpu * 1e6:,.1f} µs"
    return f"{wall * 1e3:,.1f} / {cpu * 1e3:,.1f} ms"


def _int(value: object) -> int:
    assert isinstance(value, int)
    return value


def _load(value: object) -> str:
    return "-" if not isinstance(value, float) else f"{value * 1e3:,.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--dir", default="/var/tmp")
    args = parser.parse_args()
    runs = [
        (f"{args.queues:,} queues × 10 messages", many_queues(args.dir, args.queues)),
        (f"1 queue × {args.messages:,} messages", deep_queue(args.dir, args.messages)),
    ]
    for label, got in runs:
        print(label, got, file=sys.stderr)
    rows = [
        [key, *(_ms(got[key]) for _, got in runs)]
        for key in ("first round", "round", "overview page", "refresh", "refresh 304", "queue page")
    ]
    rows += [
        [key, *(f"{_int(got[key]) / 1024:,.0f} KiB" for _, got in runs)]
        for key in ("page size", "json size")
    ]
    rows.append(["browser load", *(_load(got["browser load"]) for _, got in runs)])
    print("Method: see benchmarks/bench_dashboard.py; wall / CPU time, best of 5; browser: ms,")
    print("median of 5.\n")
    print(table(["", *(label for label, _ in runs)], rows))


if __name__ == "__main__":
    main()
