"""Which requests run on the event loop itself, without the hop to a pool thread.

The hop costs more than the action it carries for the short ones (a send, a delete: a
few system calls answered from memory): waking a pool thread, handing the GIL over and
back, waking the loop (measured: a fifth of the server's CPU per request, and most of
its latency under many clients). The rule, so that the loop never waits on a disk, a
network or another process:

* only the actions of :data:`ACTIONS` (send, delete, change visibility: each a few
  renames, writes or unlinks, never a wait: the server publishes with ``timeout=0``);
* only on a queue whose handle this server already holds (opening one reads and may
  lock its settings) and whose directory is on a memory filesystem (``tmpfs``,
  ``ramfs``: :data:`MEMORY_FILESYSTEMS`, decided once per device), where every such
  call is answered from memory (a durable write makes no flush there at all);
* everything else (a receive, which may move a message to a dead-letter queue on
  another filesystem or wait for a FIFO claim lock; the queue-level actions, which
  take locks) runs in the pool, as does a request the rule cannot clear before it
  changes anything.

A request is first run on the loop under :func:`on_loop`; the first check it fails
raises :class:`Offload` (a :class:`BaseException`, so that no ``except Exception``
turns it into an answer) before anything is changed, and the request runs again, whole,
in the pool. Neither check reads a file.
"""

from __future__ import annotations

import contextvars
from typing import Final

from .. import _userfiles
from .._userfiles import MEMORY_FILESYSTEMS

__all__ = [
    "ACTIONS",
    "MEMORY_FILESYSTEMS",
    "Offload",
    "check_action",
    "in_memory",
    "memory_backed",
    "on_loop",
    "running_on_loop",
]

ACTIONS: Final = frozenset({
    "SendMessage", "SendMessageBatch", "DeleteMessage", "DeleteMessageBatch",
    "ChangeMessageVisibility", "ChangeMessageVisibilityBatch",
})  # fmt: skip
"""The actions that may run on the event loop (on a memory filesystem)."""

_ON_LOOP: contextvars.ContextVar[bool] = contextvars.ContextVar("vsqs_serve_loop", default=False)
_memory: dict[int, bool] = {}  # by device: on a memory filesystem


class Offload(BaseException):
    """This request may not run on the event loop: run it in the pool (nothing was
    changed yet)."""


class on_loop:  # noqa: N801 - used as a function: ``with on_loop():``
    """Run the block as a request on the event loop: the checks below raise
    :class:`Offload` where the rule does not allow it. (A class, not a generator: a
    request pays for it, and a generator's context manager costs several times more.)"""

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        self._token = _ON_LOOP.set(True)

    def __exit__(self, *exc: object) -> None:
        _ON_LOOP.reset(self._token)


def running_on_loop() -> bool:
    """Whether the current request runs on the event loop (under :func:`on_loop`)."""
    return _ON_LOOP.get()


def check_action(action: str) -> None:
    """On the loop, refuse an action not in :data:`ACTIONS` (:class:`Offload`)."""
    if action not in ACTIONS and _ON_LOOP.get():
        raise Offload


def in_memory(path: str) -> bool:
    """Whether the directory *path* is on a memory filesystem (``False`` if it cannot
    be told)."""
    try:
        return memory_backed(_userfiles.status(path).st_dev, path)
    except OSError:
        return False


def check_handle(*, in_memory: bool) -> None:
    """On the loop, refuse a step on a queue not known to be on a memory filesystem
    (:class:`Offload`): not even a ``stat`` of it is made here."""
    if not in_memory and _ON_LOOP.get():
        raise Offload


def memory_backed(device: int, path: str) -> bool:
    """Whether *path*, on *device* (its ``st_dev``), is on a memory filesystem; looked
    up once per device (``/proc/self/mountinfo``)."""
    found = _memory.get(device)
    if found is None:
        # RACE: another pool thread may look the same device up at once: same answer.
        found = _memory[device] = _userfiles.filesystem_type(path) in MEMORY_FILESYSTEMS
    return found
