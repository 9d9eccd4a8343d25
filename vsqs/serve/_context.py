"""What the action modules are given: who asks (:class:`Caller`) and the service they
act for (:class:`Context`, the part of :class:`~vsqs.serve._service.Service` they use),
so that they never import the service module that imports them."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final, Protocol

from .. import AnyQueue, QueueRoot
from ._credentials import Credential

__all__ = ["AttemptCache", "Caller", "Context"]


@dataclass(frozen=True)
class Caller:
    """Who asks: the key that signed the request (``None`` without credentials), the
    region it signed for, and the ``host[:port]`` its queue URLs should name."""

    key: Credential | None
    region: str
    host: str


class AttemptCache:
    """ReceiveRequestAttemptId -> the answer it got, for five minutes (in memory)."""

    TTL: Final = 300.0
    SIZE: Final = 10_000

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[str, str], tuple[float, list[dict[str, Any]]]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()

    def get(self, queue: str, attempt: str) -> list[dict[str, Any]] | None:
        now = time.monotonic()
        with self._lock:
            found = self._entries.get((queue, attempt))
            if found is None or now - found[0] > self.TTL:
                return None
            return found[1]

    def put(self, queue: str, attempt: str, messages: list[dict[str, Any]]) -> None:
        with self._lock:
            self._entries[(queue, attempt)] = (time.monotonic(), messages)
            while len(self._entries) > self.SIZE:
                self._entries.popitem(last=False)


class Context(Protocol):
    """The service as the actions see it (implemented by :class:`~vsqs.serve._service.Service`)."""

    root: QueueRoot
    stopping: threading.Event
    attempts: AttemptCache

    def url(self, caller: Caller, name: str) -> str: ...
    def arn(self, caller: Caller, name: str) -> str: ...
    def name_of_arn(self, value: object, parameter: str) -> str: ...
    def allow(self, caller: Caller, name: str) -> None: ...
    def open(self, name: str) -> AnyQueue: ...
    def names(self, caller: Caller) -> list[str]: ...
