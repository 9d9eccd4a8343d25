"""The Celery app that the Celery tests (and benchmarks/bench_celery.py) run real workers of.

Configured from the environment, so a stock ``celery -A tests.celery_app worker`` finds
it: ``CELERY_TEST_BROKER`` (``vsqs:///root`` or kombu's ``filesystem://``),
``CELERY_TEST_ROOT`` (the root directory; results go to its ``results`` folder through
Celery's file-system result backend), ``CELERY_TEST_VT`` (the visibility timeout,
seconds) and ``CELERY_TEST_DURABLE`` (``0``: no fsync).
"""

from __future__ import annotations

import os
import time
from typing import Any

from celery import Celery
from celery.worker.control import control_command

import vsqs.kombu  # noqa: F401 -- registers the vsqs:// scheme with kombu


def make_app(broker: str, root: str, vt: float = 30.0, durable: bool = True) -> Celery:
    """An app on *broker* (``vsqs:///root`` or ``filesystem://`` with folders in *root*)."""
    if broker.startswith("vsqs:"):
        options: dict[str, Any] = {"visibility_timeout": vt, "durable": durable}
    else:  # kombu's filesystem transport: one folder in and out, one for exchange files
        for sub in ("data", "control"):
            os.makedirs(os.path.join(root, sub), exist_ok=True)
        options = {
            "data_folder_in": os.path.join(root, "data"),
            "data_folder_out": os.path.join(root, "data"),
            "control_folder": os.path.join(root, "control"),
            "polling_interval": 0.05,
        }
    made = Celery("tests.celery_app", broker=broker)
    made.conf.update(
        broker_transport_options=options,
        result_backend="file://" + os.path.join(root, "results"),
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    return made


_ROOT = os.environ.get("CELERY_TEST_ROOT", "/tmp/vsqs-celery")
app = make_app(
    os.environ.get("CELERY_TEST_BROKER", f"vsqs://{_ROOT}"),
    _ROOT,
    vt=float(os.environ.get("CELERY_TEST_VT", "30")),
    durable=os.environ.get("CELERY_TEST_DURABLE", "1") == "1",
)


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task
def slow(marker_dir: str, seconds: float) -> int:
    """Note this start (``<marker_dir>/start-<pid>``), work *seconds*, return the pid."""
    with open(os.path.join(marker_dir, f"start-{os.getpid()}"), "w", encoding="utf-8"):
        pass
    time.sleep(seconds)
    return os.getpid()


@control_command(args=[("path", str)], signature="<path>")
def touch(state: Any, path: str) -> dict[str, str]:
    """A broadcast command: create ``<path>/<worker hostname>``."""
    hostname = state.consumer.hostname
    with open(os.path.join(path, hostname), "w", encoding="utf-8"):
        pass
    return {"ok": hostname}


@app.task
def record(path: str, line: str, seconds: float = 0.0) -> None:
    """Work *seconds*, then append *line* to the file *path* (one ``O_APPEND`` write)."""
    time.sleep(seconds)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)
