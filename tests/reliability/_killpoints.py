"""The child side of the deterministic kill tests: run one transition, die at call *k*.

``vsqs._fs`` is the one module that makes the system calls that change a queue. The
child wraps each of its public functions so that the process ends with ``os._exit(137)``
(no cleanup, no ``finally``: as a SIGKILL would) right before or right after the *k*-th
call. With ``k = 0`` it only records the calls, which the parent uses to enumerate every
kill point and to know which call makes a message visible.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import vsqs
from vsqs import _flush, _fs
from vsqs.testing import ManualClock

BODY: Final = b"kill-point body " * 64
BATCH: Final = (b"batch-0 " * 100, b"batch-1 " * 100, b"batch-2 " * 100)
VT: Final = 30.0
KILLED: Final = 137


def open_queue(root: Path, scenario: str, now: float) -> vsqs.PlainQueue:
    """The queue a scenario works on, as parent and child both open it."""
    options: dict[str, Any] = {"visibility_timeout": VT, "clock": ManualClock(now)}
    if scenario == "dead_letter":
        options |= {"dead_letter": root / "dlq", "max_receives": 1}
    if scenario == "publish_nondurable":
        options["durable"] = False
    return vsqs.PlainQueue(root / "q", **options)


def _receive(q: vsqs.PlainQueue, receipt: str) -> None:
    q.receive(timeout=0)


ACTIONS: Final[dict[str, Callable[[vsqs.PlainQueue, str], object]]] = {
    "publish": lambda q, _: q.publish(BODY),
    "publish_nondurable": lambda q, _: q.publish(BODY),
    "publish_attributes": lambda q, _: q.publish(BODY, attributes={"k": "v"}),
    "publish_delayed": lambda q, _: q.publish(BODY, delay=5),
    "publish_batch": lambda q, _: q.publish_batch(BATCH),
    "dedup_publish": lambda q, _: q.publish(BODY, dedup_id="once"),
    # One marker for the batch; the parent retries it (after `clean`, for the second).
    "chunk_publish": lambda q, _: q.publish_batch(BATCH, batch_dedup_id="chunk"),
    "chunk_publish_clean": lambda q, _: q.publish_batch(BATCH, batch_dedup_id="chunk"),
    "receive": _receive,
    "delete": lambda q, receipt: q.delete(receipt),
    "change_visibility": lambda q, receipt: q.change_visibility(receipt, 100),
    "release": lambda q, receipt: q.change_visibility(receipt, 0),
    "requeue": lambda q, _: q.requeue_expired(),
    "dead_letter": lambda q, _: q.requeue_expired(),
}
# Requeue and dead-letter run on a clock past the lease the parent took.
LATER: Final = {"requeue": VT + 1, "dead_letter": VT + 1}


def _public_functions() -> list[str]:
    return [
        name
        for name, value in vars(_fs).items()
        if not name.startswith("_")
        and inspect.isfunction(value)
        and value.__module__ in (_fs.__name__, _flush.__name__)  # _fs re-exports _flush
    ]


def child(scenario: str, root: str, now: float, receipt: str, *, k: int, after: bool) -> None:
    """Run *scenario*, dying before (or *after*) the *k*-th ``_fs`` call; record the calls."""
    q = open_queue(Path(root), scenario, now + LATER.get(scenario, 0))
    calls: list[list[str]] = []

    def wrap(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(real)
        def traced(*args: Any, **kwargs: Any) -> Any:
            calls.append([name, *(a.replace(root, "") for a in args if isinstance(a, str))])
            index = len(calls)
            if index == k and not after:
                os._exit(KILLED)
            try:
                return real(*args, **kwargs)
            finally:
                if index == k and after:
                    os._exit(KILLED)

        return traced

    for name in _public_functions():
        setattr(_fs, name, wrap(name, getattr(_fs, name)))
    ACTIONS[scenario](q, receipt)
    with open(os.path.join(root, "trace.json"), "w", encoding="utf-8") as handle:
        json.dump(calls, handle)
