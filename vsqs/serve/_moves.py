"""Message move tasks (StartMessageMoveTask and friends) on :meth:`vsqs.Queue.redrive`.

A task moves the messages of a dead-letter queue back, to each message's source queue
(no ``DestinationArn``) or to one queue, at most ``MaxNumberOfMessagesPerSecond`` a
second (default 500), in a daemon thread of the server that started it. Its state is
kept in the dead-letter queue's SQS record (:mod:`vsqs.serve._sidecar`), so any
server lists it and any server cancels it: the running thread reads the record between
two batches and stops at a ``CANCELLING``. A task whose thread has not written for a
minute (its server stopped) is shown ``FAILED``. The last ten tasks are kept.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Final

from . import _sidecar
from ._errors import SqsError, invalid, missing

if TYPE_CHECKING:
    from .. import AnyQueue
    from ._context import Caller, Context

__all__ = ["cancel", "list_tasks", "start"]

DEFAULT_RATE: Final = 500
KEPT: Final = 10
STALE: Final = 60.0


def _shown(task: dict[str, Any], now: float) -> str:
    status = str(task.get("status"))
    if status in ("RUNNING", "CANCELLING") and now - float(task.get("beat", 0)) > STALE:
        return "FAILED"
    return status


def _task_of(record: dict[str, Any], task_id: str) -> dict[str, Any] | None:
    return next((t for t in record.get("tasks", []) if t.get("id") == task_id), None)


def start(service: Context, caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
    if "SourceArn" not in params:
        raise missing("SourceArn")
    source = service.name_of_arn(params["SourceArn"], "SourceArn")
    service.allow(caller, source)
    if source not in service.root:
        raise SqsError(
            "ResourceNotFoundException",
            "The resource that you specified for the SourceArn parameter doesn't exist.",
        )
    destination = None
    if params.get("DestinationArn"):
        destination = service.name_of_arn(params["DestinationArn"], "DestinationArn")
        service.allow(caller, destination)
        if destination not in service.root:
            raise SqsError("ResourceNotFoundException", "The DestinationArn queue does not exist.")
    rate = params.get("MaxNumberOfMessagesPerSecond")
    if rate is not None and (
        isinstance(rate, bool) or not isinstance(rate, int) or not 1 <= rate <= 500
    ):
        raise invalid("MaxNumberOfMessagesPerSecond", rate, "must be from 1 to 500.")
    from ._queue_attrs import dead_letter_of  # noqa: PLC0415 - a cycle through _service

    if not any(dead_letter_of(service, n) == source for n in service.root.list()):
        raise invalid(
            "SourceArn",
            params["SourceArn"],
            "Source queue must be configured as a Dead Letter Queue.",
        )
    queue = service.open(source)
    task_id = uuid.uuid4().hex
    now = time.time()
    task = {
        "id": task_id,
        "status": "RUNNING",
        "source": source,
        "destination": destination,
        "rate": rate,
        "moved": 0,
        "to_move": queue.counts().ready,
        "started": now,
        "beat": now,
    }

    def add(record: dict[str, Any]) -> None:
        tasks = record.setdefault("tasks", [])
        if any(_shown(t, now) in ("RUNNING", "CANCELLING") for t in tasks):
            raise invalid(
                "SourceArn", params["SourceArn"], "There is already a task running for this source."
            )
        tasks.append(task)
        del tasks[:-KEPT]

    _sidecar.update(queue.path, add)
    handle = base64.urlsafe_b64encode(json.dumps({"id": task_id, "source": source}).encode())
    threading.Thread(
        target=_run, args=(service, queue, task_id, destination, rate or DEFAULT_RATE),
        name=f"vsqs-move-{source}", daemon=True,
    ).start()  # fmt: skip
    return {"TaskHandle": handle.decode()}


def _run(
    service: Context, queue: AnyQueue, task_id: str, destination: str | None, rate: int
) -> None:
    """Move up to *rate* messages a second until none is left or the task is cancelled."""
    status, reason = "COMPLETED", None
    try:
        target = None if destination is None else service.root.get(destination)
    except Exception as exc:  # noqa: BLE001 - the task fails, the server goes on
        status, reason = "FAILED", f"{type(exc).__name__}: {exc}"  # RACE: deleted meanwhile
    while status == "COMPLETED":
        began = time.monotonic()
        try:
            moved = queue.redrive(target, limit=rate)
        except Exception as exc:  # noqa: BLE001 - the task fails, the server goes on
            status, reason = "FAILED", f"{type(exc).__name__}: {exc}"
            moved = 0
        cancelled = False

        def progress(record: dict[str, Any], count: int = moved) -> None:
            nonlocal cancelled
            task = _task_of(record, task_id)
            if task is None:
                return
            task["moved"] = int(task.get("moved", 0)) + count
            task["beat"] = time.time()
            cancelled = task.get("status") == "CANCELLING"

        try:
            _sidecar.update(queue.path, progress)
        except FileNotFoundError:
            return  # RACE: the source queue was deleted, its tasks' record with it
        if cancelled:
            status = "CANCELLED"
        if status != "COMPLETED" or moved < rate or cancelled:
            break
        if service.stopping.wait(max(0.0, 1.0 - (time.monotonic() - began))):
            status, reason = "FAILED", "the server stopped"
            break

    def finish(record: dict[str, Any]) -> None:
        task = _task_of(record, task_id)
        if task is not None:
            task["status"] = status
            task["beat"] = time.time()
            if reason:
                task["reason"] = reason

    try:
        _sidecar.update(queue.path, finish)
    except FileNotFoundError:
        pass  # RACE: the source queue was deleted, its tasks' record with it


def list_tasks(service: Context, caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
    if "SourceArn" not in params:
        raise missing("SourceArn")
    source = service.name_of_arn(params["SourceArn"], "SourceArn")
    service.allow(caller, source)
    limit = params.get("MaxResults", 1)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10:
        raise invalid("MaxResults", limit, "must be from 1 to 10.")
    if source not in service.root:
        raise SqsError(
            "ResourceNotFoundException",
            "The resource that you specified for the SourceArn parameter doesn't exist.",
        )
    record = _sidecar.read(service.open(source).path)
    now = time.time()
    results = []
    for task in reversed(record.get("tasks", [])[-limit:]):
        status = _shown(task, now)
        entry: dict[str, Any] = {
            "Status": status,
            "SourceArn": service.arn(caller, source),
            "ApproximateNumberOfMessagesMoved": int(task.get("moved", 0)),
            "ApproximateNumberOfMessagesToMove": int(task.get("to_move", 0)),
            "StartedTimestamp": int(float(task.get("started", 0)) * 1000),
        }
        if status in ("RUNNING", "CANCELLING"):
            entry["TaskHandle"] = base64.urlsafe_b64encode(
                json.dumps({"id": task["id"], "source": source}).encode()
            ).decode()
        if task.get("destination"):
            entry["DestinationArn"] = service.arn(caller, task["destination"])
        if task.get("rate"):
            entry["MaxNumberOfMessagesPerSecond"] = int(task["rate"])
        if status == "FAILED":
            entry["FailureReason"] = task.get("reason", "the server running the task stopped")
        results.append(entry)
    return {"Results": results}


def cancel(service: Context, caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
    handle = params.get("TaskHandle")
    if handle is None:
        raise missing("TaskHandle")
    try:
        decoded = json.loads(base64.urlsafe_b64decode(str(handle).encode()))
        task_id, source = str(decoded["id"]), str(decoded["source"])
    except (ValueError, binascii.Error, KeyError, TypeError):
        raise SqsError("ResourceNotFoundException", "The task handle is not valid.") from None
    service.allow(caller, source)
    if source not in service.root:
        raise SqsError("ResourceNotFoundException", "The task's source queue does not exist.")
    moved = 0

    def change(record: dict[str, Any]) -> None:
        nonlocal moved
        task = _task_of(record, task_id)
        if task is None or _shown(task, time.time()) != "RUNNING":
            raise SqsError("ResourceNotFoundException", "Only a running task can be cancelled.")
        task["status"] = "CANCELLING"
        moved = int(task.get("moved", 0))

    _sidecar.update(service.open(source).path, change)
    return {"ApproximateNumberOfMessagesMoved": moved}
