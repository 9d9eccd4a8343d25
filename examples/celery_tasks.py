"""A Celery app on vsqs: no Redis, no RabbitMQ, a directory is the broker.

Run it (after ``pip install '.[celery]'`` in a clone of vsqs)::

    python examples/celery_tasks.py

It makes a root directory, starts a stock ``celery worker`` on it in a subprocess,
sends ten tasks, prints their results, stops the worker and removes the directory.
The worker imports this same module (``-A celery_tasks``), which finds the root in
``$VSQS_CELERY_ROOT``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

from celery import Celery

import vsqs.kombu  # noqa: F401 -- registers the vsqs:// URL scheme with kombu

ROOT = os.environ.get("VSQS_CELERY_ROOT") or tempfile.mkdtemp(prefix="vsqs-celery-")

app = Celery("celery_tasks", broker=f"vsqs://{ROOT}", backend=f"file://{ROOT}/results")
app.conf.task_acks_late = True  # a task whose worker dies runs again elsewhere
app.conf.broker_transport_options = {"visibility_timeout": 30}


@app.task
def add(x: int, y: int) -> int:
    return x + y


def main() -> None:
    os.makedirs(os.path.join(ROOT, "results"), exist_ok=True)
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_tasks", "worker", "--pool", "solo",
         "--loglevel", "WARNING"],
        cwd=os.path.dirname(os.path.abspath(__file__)),
        env={**os.environ, "VSQS_CELERY_ROOT": ROOT},
    )  # fmt: skip
    try:
        started = time.monotonic()
        results = [add.delay(n, n) for n in range(10)]
        print([result.get(timeout=120) for result in results])
        print(f"10 tasks in {time.monotonic() - started:.1f} s (worker start-up included)")
    finally:
        worker.terminate()  # a warm shutdown: unacknowledged tasks are released
        worker.wait()
        app.pool.force_close_all()
        shutil.rmtree(ROOT)


if __name__ == "__main__":
    main()
