"""Child processes for fault tests that must not run in the test process itself.

Dropping to another user and lowering the descriptor limit cannot be undone in the test
process, so they happen in a child forked from the forkserver. Each step's outcome is
recorded as a small dict (``ok`` / the exception's type, errno, filename and message) and
written as JSON for the parent to check.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Callable
from typing import Any, Final

import vsqs
from vsqs.testing import ManualClock

from ..users import run_as
from ._harness import forkserver

NOBODY: Final = 65534
Outcome = dict[str, Any]


def outcome(step: Callable[[], object]) -> Outcome:
    """Run one step; describe how it ended."""
    try:
        value = step()
    except Exception as exc:  # noqa: BLE001 (every failure is data for the parent)
        return {
            "ok": False,
            "type": type(exc).__name__,
            "errno": getattr(exc, "errno", None),
            "filename": getattr(exc, "filename", None),
            "message": str(exc),
            "is_vsqs": isinstance(exc, vsqs.VsqsError),
        }
    return {"ok": True, "value": value if isinstance(value, (str, int, bool)) else repr(value)}


def as_nobody(path: str, out: str) -> None:
    """As user ``nobody``: open, publish, receive on a queue owned by root."""

    def steps() -> None:
        attempts = {
            "open": lambda: vsqs.Queue(path) is not None,
            "publish": lambda: vsqs.Queue(path).publish(b"from nobody"),
            "receive": lambda: _body(vsqs.Queue(path).receive(timeout=0)),
            "create": lambda: vsqs.Queue(os.path.join(path, "inner")) is not None,
        }
        _write(out, {name: outcome(step) for name, step in attempts.items()})

    run_as(NOBODY, NOBODY, steps)


def few_descriptors(path: str, out: str) -> None:
    """Exhaust a low descriptor limit, try publish/receive, then free descriptors again."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    q = vsqs.Queue(path)
    q.publish(b"before")
    hoard = []
    try:
        while True:
            hoard.append(os.open("/dev/null", os.O_RDONLY))
    except OSError:
        pass  # EMFILE: the limit is reached, as intended
    results = {
        "publish": outcome(lambda: q.publish(b"during")),
        "receive": outcome(lambda: _body(vsqs.Queue(path).receive(timeout=0))),
    }
    for fd in hoard:
        os.close(fd)
    results["publish_after"] = outcome(lambda: q.publish(b"after"))
    results["receive_after"] = outcome(lambda: _body(vsqs.Queue(path).receive(timeout=0)))
    _write(out, results)


def _body(message: vsqs.Message | None) -> str:
    return "" if message is None else message.body.decode()


def _write(out: str, results: dict[str, Outcome]) -> None:
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(results, handle)


class SkewedClock(ManualClock):
    """The real wall clock plus a fixed offset: a host whose clock is wrong."""

    def __init__(self, offset: float) -> None:
        super().__init__()
        self.offset = offset

    def time_us(self) -> int:
        return round((time.time() + self.offset) * 1e6)

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


def publish_skewed(path: str, out: str, offset: float) -> None:
    """Publish 100 messages from a host whose clock is *offset* seconds off."""
    q = vsqs.Queue(path, clock=SkewedClock(offset))
    ids = [q.publish(b"%+d:%d" % (offset, n)) for n in range(100)]
    _write(out, {"ids": {"ok": True, "value": " ".join(ids)}})


def run(target: Callable[..., None], path: str, out: str, *extra: object) -> dict[str, Outcome]:
    """Run *target* in a child; fail if it hangs (a retry loop that never ends)."""
    # Created here, writable by all: the child may have dropped to another user.
    with open(out, "w", encoding="utf-8"):
        pass
    os.chmod(out, 0o666)  # noqa: S103 (the child may run as nobody and must write it)
    process = forkserver().Process(target=target, args=(path, out, *extra), daemon=True)
    process.start()
    process.join(timeout=60)
    if process.exitcode is None:
        process.kill()
        raise AssertionError(f"{target.__name__} hung: an error turned into an endless loop")
    assert process.exitcode == 0, f"{target.__name__} exited with {process.exitcode}"
    with open(out, encoding="utf-8") as handle:
        results: dict[str, Outcome] = json.load(handle)
    return results
