"""Names and shared bindings for the kombu transport (see :mod:`vsqs.kombu`).

kombu names queues and exchanges freely (``celery@host.celery.pidbox``, uuids, spaces);
a vsqs queue name is letters, digits, ``-``, ``_`` and single inner dots, up to 80
characters. :func:`vsqs_name` maps one to the other, one to one:

* letters, digits, ``-`` and the dots that a queue name allows stay as they are;
* every other character (``_`` itself included) becomes ``_`` and two lowercase hex
  digits per UTF-8 byte: ``celery@w1`` is ``celery_40w1``;
* a result longer than 80 characters keeps its first 60 and ends with ``_h`` and 16 hex
  digits of the SHA-256 of the kombu name (``h`` is not a hex digit, so it never reads
  as an escape).

Bindings are shared by every process on the root, so that a worker can route a reply to
a queue that a client bound a moment ago, and a broadcast reaches every worker's queue.
The binding table of an exchange is itself a vsqs queue, ``<root>/.kombu-bindings/<name>``,
whose ready messages are the bindings (JSON ``[routing_key, pattern, queue]``, the
exchange's type in the attribute ``type``); they are browsed, never received. Binding is
one atomic publish; unbinding deletes by id.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Final, NamedTuple

from .. import AnyQueue, QueueRoot

BINDINGS_DIR: Final = ".kombu-bindings"
_KEEP: Final = re.compile(r"[A-Za-z0-9-]")
_MAX: Final = 80


def vsqs_name(name: str) -> str:
    """The vsqs queue name for the kombu queue or exchange *name* (one to one).

    >>> from vsqs.kombu import vsqs_name
    >>> vsqs_name("celery"), vsqs_name("celery@w1.celery.pidbox"), vsqs_name("a_b")
    ('celery', 'celery_40w1.celery.pidbox', 'a_5fb')
    >>> vsqs_name(".x..y")
    '_2ex._2ey'
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a kombu queue or exchange name must be a non-empty str, not {name!r}")
    out: list[str] = []
    for char in name:
        # A dot is kept only where a queue name allows one: not first, not after a dot.
        keep = _KEEP.fullmatch(char) or (char == "." and out and not out[-1].endswith("."))
        out.append(char if keep else "".join(f"_{byte:02x}" for byte in char.encode()))
    result = "".join(out)
    if len(result) > _MAX:
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        result = f"{result[:60].rstrip('.')}_h{digest}"
    return result


class Binding(NamedTuple):
    """One row of an exchange's table, as kombu's ``exchange_queue_t``."""

    routing_key: str
    pattern: str
    queue: str


class Bindings:
    """The shared binding tables of every exchange under one root.

    Concurrency: binding is one publish and unbinding one delete by id, each atomic;
    two processes binding the same row at once may store it twice, which reading
    collapses (a table is a set) and unbinding removes whole.
    """

    def __init__(self, root: str) -> None:
        self._tables = QueueRoot(os.path.join(root, BINDINGS_DIR), durable=False)
        self._cache: dict[str, AnyQueue] = {}

    def _table(self, exchange: str) -> AnyQueue:
        table = self._cache.get(exchange)
        if table is None:
            table = self._cache[exchange] = self._tables.create(vsqs_name(exchange))
        return table

    def _rows(self, exchange: str) -> list[tuple[str, Binding, str]]:
        rows = []
        for message in self._table(exchange).browse():
            try:
                key, pattern, queue = json.loads(message.body)
            except ValueError:
                continue  # not one of ours: a stray message never breaks routing
            kind = message.attributes.get("type", "")
            rows.append((message.id, Binding(str(key), str(pattern), str(queue)), kind))
        return rows

    def kind(self, exchange: str) -> str | None:
        """The type (``direct``, ``topic``, ``fanout``) *exchange* was bound as, if any:
        what a process that never declared it routes by."""
        return next((kind for _, _, kind in self._rows(exchange) if kind), None)

    def table(self, exchange: str) -> list[Binding]:
        """Every binding of *exchange*, by any process, oldest first, without repeats.

        One listing and one read per binding (bindings are few: a queue per worker).
        """
        return list(dict.fromkeys(row for _, row, _ in self._rows(exchange)))

    def bind(self, exchange: str, binding: Binding, kind: str = "direct") -> None:
        """Add *binding* to the table of *exchange*, of type *kind* (nothing if it is
        there already)."""
        if binding in self.table(exchange):
            return
        # RACE: another process may bind the same row between our look and publish;
        # table() collapses the repeat and unbind() removes every copy.
        body = json.dumps(list(binding)).encode()
        self._table(exchange).publish(body, attributes={"type": kind})

    def unbind(self, exchange: str, queue: str) -> None:
        """Remove every binding of *queue* from the table of *exchange*."""
        table = self._table(exchange)
        for message_id, row, _ in self._rows(exchange):
            if row.queue == queue:
                table.delete(message_id)  # RACE: False if another process unbound it first
