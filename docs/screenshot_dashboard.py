"""Take the screenshot of the dashboard's overview shown in the docs.

Usage (from the repository root, with ``chromedriver`` on the PATH: as root,
``sh tests/setup-browser.sh`` installs Debian's chromium and chromium-driver)::

    python docs/screenshot_dashboard.py     # writes docs/_static/dashboard.png
    python docs/screenshot_dashboard.py --out elsewhere.png

A few queues are made in a temporary directory (orders with its dead-letter queue and
a message that went there, emails that was shut down, a busy events queue with a
producer and a consumer running), served by a :class:`vsqs.dashboard.Dashboard`
sampling every second, and headless Chromium takes the picture once the page has
refreshed with the rates of the running traffic.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import vsqs  # noqa: E402 - the checkout's, after the path is set
from tests.browser import start_chromium  # noqa: E402
from tests.dashboard_http import serving  # noqa: E402
from vsqs.dashboard import Dashboard  # noqa: E402

OUT = ROOT / "docs" / "_static" / "dashboard.png"


def _traffic(queue: vsqs.Queue, stop: threading.Event) -> None:
    """A producer ahead of its consumer: about 200 in and 150 out per second."""
    while not stop.wait(0.05):
        queue.publish_batch([b'{"event": "click"}'] * 10)
        for message in queue.receive_batch(8, timeout=0):
            queue.delete(message)


def build(root: vsqs.QueueRoot) -> vsqs.Queue:
    dlq = root.create("orders.dlq")
    orders = root.create("orders", dead_letter="orders.dlq", max_receives=1)
    orders.publish_batch([b'{"order": %d}' % i for i in range(3)])
    poison = orders.receive(timeout=0)
    assert poison is not None
    orders.change_visibility(poison, 0)
    orders.requeue_expired()
    orders.publish_batch([b'{"order": %d}' % i for i in range(4, 1204)])
    assert dlq.counts().ready == 1
    emails = root.create("emails")
    emails.publish_batch([b"to: someone"] * 12)
    emails.shutdown()
    root.create("reports").publish(b"monthly", delay=3600)
    return root.create("events")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    out = parser.parse_args().out
    with tempfile.TemporaryDirectory() as tmp:
        root = vsqs.QueueRoot(Path(tmp) / "queues", durable=False)
        events = build(root)
        stop = threading.Event()
        producer = threading.Thread(target=_traffic, args=(events, stop), daemon=True)
        producer.start()
        browser = start_chromium()
        browser.set_window_size(1280, 560)
        try:
            with Dashboard(root, sample_every=1.0) as dashboard, serving(dashboard) as url:
                time.sleep(2.5)  # two samples: the rates have something to compare
                browser.get(url + "/")
                time.sleep(2.5)  # and a live refresh of the open page
                stop.set()
                browser.save_screenshot(str(out))
        finally:
            stop.set()
            producer.join()
            browser.quit()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
