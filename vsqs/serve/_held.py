"""A connection's transport that writes an answer's pieces together (see :class:`Held`)."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["Held"]


class Held(asyncio.Transport):
    """A connection's transport as uvicorn's protocol sees it: while an answer is being
    written (:meth:`hold` to :meth:`release`), its pieces (status line and header
    fields, body) are kept and written together, in one system call and one TCP
    segment, not one each (on loopback a write costs as much as parsing the request).
    Everything else passes through; :meth:`close` writes what is kept first, and
    :meth:`abort` drops it. Runs on the event loop only."""

    def __init__(self, transport: asyncio.Transport) -> None:
        super().__init__()
        self._transport = transport
        self._kept: list[bytes] | None = None  # None: not holding

    def hold(self) -> None:
        if self._kept is None:
            self._kept = []

    def release(self) -> None:
        kept, self._kept = self._kept, None
        if kept and not self._transport.is_closing():
            self._transport.write(b"".join(kept))

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._kept is None:
            self._transport.write(data)
        elif data:
            self._kept.append(bytes(data))

    def close(self) -> None:
        self.release()
        self._transport.close()

    def abort(self) -> None:
        self._kept = None
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def get_write_buffer_size(self) -> int:
        kept = sum(len(piece) for piece in self._kept or ())
        return self._transport.get_write_buffer_size() + kept

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()
