"""A stock Celery worker on vsqs next to kombu's own filesystem transport.

Method, for each broker (vsqs durable and not, kombu's ``filesystem://``), on each
filesystem given (tmpfs ``/dev/shm`` and a disk directory), with the app of
``tests/celery_app.py`` (``acks_late``, prefetch multiplier 1, Celery's ``file://``
result backend, which costs both brokers the same):

* **throughput**: one ``celery worker --concurrency 2`` (prefork) already running;
  *N* ``add`` tasks sent from this process, then every result waited for; tasks/s is
  *N* over the time from the first send to the last result;
* **kill**: *K* tasks of 2 s each sent to one worker (concurrency 2, so two run and
  the rest wait); once the first has started, the whole worker (main process and pool)
  is killed with SIGKILL and a second worker started; a task is *lost* when its result
  has not come back 60 s later (vsqs's visibility timeout is 5 s here).

kombu's filesystem transport polls its folder every 50 ms here (its default is 1 s). It
removes a message from its folder when it delivers it, before the task runs: the tasks
a killed worker had received (two: one per pool process, prefetch 1) are gone. vsqs holds each
in a lease until it is acknowledged. Run it with::

    python -m benchmarks.bench_celery [--tasks 1000] [--shm-dir /dev/shm] [--disk-dir /var/tmp]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

from celery.exceptions import TimeoutError as CeleryTimeout

from benchmarks.report import table
from tests.celery_app import make_app
from tests.celery_workers import Worker, celery_env, workers

KILL_TASKS: Final = 6
KILL_SECONDS: Final = 2.0
VT: Final = "5"


def _broker(kind: str, root: Path) -> tuple[str, dict[str, str]]:
    if kind == "filesystem":
        return "filesystem://", {}
    durable = "0" if kind == "vsqs" else "1"
    return f"vsqs://{root}", {"CELERY_TEST_VT": VT, "CELERY_TEST_DURABLE": durable}


def _crash(worker: Worker) -> str:
    """Why a worker died, from its log (Celery logs ``Unrecoverable error: ...``)."""
    for line in worker.log.read_text(errors="replace").splitlines():
        if "Unrecoverable error:" in line:
            return line.split("Unrecoverable error:", 1)[1].strip()
    return f"exit status {worker.process.returncode}"


def throughput(kind: str, root: Path, tasks: int) -> tuple[float | None, str]:
    """Tasks/s, or ``None`` and why if the worker died on the way."""
    broker, extra = _broker(kind, root)
    env = celery_env(broker, root, **extra)
    app = make_app(broker, str(root), vt=float(VT), durable=kind == "vsqs durable")
    try:
        with workers(env, root, "bench", args=("--concurrency", "2")) as (worker,):
            start = time.perf_counter()
            results = [app.send_task("tests.celery_app.add", args=(n, n)) for n in range(tasks)]
            for result in results:
                while True:
                    try:
                        result.get(timeout=1)
                        break
                    except CeleryTimeout:
                        if worker.process.poll() is not None:
                            return None, _crash(worker)
            return tasks / (time.perf_counter() - start), ""
    finally:
        app.pool.force_close_all()


def lost_on_kill(kind: str, root: Path) -> int:
    broker, extra = _broker(kind, root)
    env = celery_env(broker, root, **extra)
    app = make_app(broker, str(root), vt=float(VT), durable=kind == "vsqs durable")
    markers = root / "markers"
    markers.mkdir()
    doomed = Worker(env, root / "doomed.log", "doomed", "--concurrency", "2")
    try:
        doomed.wait_ready()
        results = [
            app.send_task("tests.celery_app.slow", args=(str(markers), KILL_SECONDS))
            for _ in range(KILL_TASKS)
        ]
        while not any(markers.iterdir()):
            time.sleep(0.02)
    finally:
        doomed.kill()
    lost = 0
    with workers(env, root, "rescuer", args=("--concurrency", "2")):
        deadline = time.monotonic() + 60
        for result in results:
            try:
                result.get(timeout=max(0.1, deadline - time.monotonic()))
            except CeleryTimeout:
                lost += 1
    app.pool.force_close_all()
    return lost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--shm-dir", default="/dev/shm")
    parser.add_argument("--disk-dir", default="/var/tmp")
    args = parser.parse_args()
    rows = []
    notes = []
    for fs, base in (("tmpfs", args.shm_dir), ("disk", args.disk_dir)):
        rates: dict[str, float | None] = {}
        for kind in ("vsqs", "vsqs durable", "filesystem"):
            work = Path(tempfile.mkdtemp(prefix="bench-celery-", dir=base))
            try:
                rates[kind], crash = throughput(kind, work / "t", args.tasks)
                lost = lost_on_kill(kind, work / "k")
            finally:
                shutil.rmtree(work, ignore_errors=True)
            rate = rates[kind]
            if rate is None:
                notes.append(f"{fs}, {kind}: the worker died during the throughput run: {crash}")
            shown = f"{rate:,.0f}" if rate is not None else f"worker died [{len(notes)}]"
            rows.append([fs, kind, shown, f"{lost} of {KILL_TASKS}"])
            print(f"{fs} {kind}: {shown} tasks/s, lost {lost}", file=sys.stderr)
        base_rate = rates["filesystem"]
        for row in rows[-3:]:
            rate = rates[row[1]]
            ratio = f"{rate / base_rate:.2f}" if rate is not None and base_rate else "-"
            row.insert(3, ratio)
    print(f"Method: see benchmarks/bench_celery.py; {args.tasks} tasks, {os.cpu_count()} cores.\n")
    print(table(["fs", "broker", "tasks/s", "× filesystem", "lost on SIGKILL"], rows))
    for number, note in enumerate(notes, 1):
        print(f"\n[{number}] {note}")


if __name__ == "__main__":
    main()
