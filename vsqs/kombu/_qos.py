"""kombu's prefetch accounting for the vsqs transport (see :mod:`vsqs.kombu`), with each
unacknowledged message held in a :class:`~vsqs.Lease` until it is settled."""

from __future__ import annotations

import logging
from typing import Any, Final

from kombu.transport import virtual

from .. import Lease, LeaseLost

_log = logging.getLogger("vsqs.kombu")
ACK: Final = "ack"
RELEASE: Final = "release"
REJECT: Final = "reject"


class QoS(virtual.QoS):
    """kombu's prefetch accounting, with each unacknowledged message held in a lease.

    An ack deletes the held file (one unlink), a requeue releases it (one rename), and
    the messages still unacknowledged when the channel closes are released, not copied
    back as kombu's default restore does: a message is never in the queue twice.
    """

    def __init__(self, channel: Any, prefetch_count: int = 0) -> None:
        super().__init__(channel, prefetch_count)
        self.leases: dict[str, tuple[Lease, str]] = {}

    def ack(self, delivery_tag: str) -> None:
        """Delete the held message (one unlink, under its lease's lock; any thread)."""
        self._settle(delivery_tag, ACK)
        super().ack(delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        """Release the held message now (one rename), or dead-letter or delete it."""
        self._settle(delivery_tag, RELEASE if requeue else REJECT)
        super().ack(delivery_tag)  # forget it: the base class would publish a copy

    def restore_unacked(self) -> list[tuple[BaseException, Any]]:
        """Release every unacknowledged message (kombu calls this when the channel closes)."""
        self._flush()
        errors: list[tuple[BaseException, Any]] = []
        for tag, message in list(self._delivered.items()):
            try:
                self._settle(tag, RELEASE)
            except OSError as exc:  # pragma: no cover -- EIO, ESTALE: cannot be caused here
                # Its lease runs out instead: the message still comes back.
                errors.append((exc, message))
        self._delivered.clear()
        return errors

    def _settle(self, delivery_tag: str, how: str) -> None:
        held = self.leases.pop(delivery_tag, None)
        if held is None:
            return  # settled already (or delivered without acknowledgement)
        lease, queue = held
        try:
            if how == RELEASE:
                lease.release()
                return
            if how == REJECT:
                self.channel.dead_letter(queue, lease.message.body)
            lease.delete()
        except LeaseLost as exc:
            # RACE: the lease ran out (a paused worker) and the message went back or to
            # another consumer, whose copy is never touched: it will run again.
            _log.warning("vsqs: %s of a message from %r came too late: %s", how, queue, exc)
