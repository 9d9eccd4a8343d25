"""A kombu transport on vsqs queues, so that Celery runs without a broker (``celery`` extra).

``import vsqs.kombu`` registers the ``vsqs`` URL scheme with kombu, then::

    app = Celery("tasks", broker="vsqs:///srv/queues")

(or ``Connection(transport="vsqs.kombu:Transport", transport_options={"root": ...})``).
Built on :mod:`kombu.transport.virtual`, as kombu's own filesystem transport, with
vsqs's guarantees underneath:

* each kombu queue is a vsqs queue under the root (named by
  :func:`~vsqs.kombu.vsqs_name`); a publish is one atomic :meth:`Queue.publish`;
* a delivered message is *held*, in a self-renewing :class:`~vsqs.Lease`, until it is
  acknowledged (deleted), rejected with ``requeue=True`` (released at once) or rejected
  without (moved to the ``dead_letter_queue`` if one is set, deleted otherwise); a worker
  that dies holds nothing: its messages come back after ``visibility_timeout``;
* a message that is not kombu's JSON envelope (*poison*: ``garbage``, ``[1,2]``) is
  never delivered, it would stop the worker: it moves to the dead-letter queue, else to
  the kombu queue ``<queue>.poison``; an expired one (kombu's ``expiration``, Celery's
  ``expires``) to the dead-letter queue, else it is deleted (:mod:`vsqs.kombu._envelope`);
* bindings live on disk (``<root>/.kombu-bindings/``), so direct replies and
  fanout broadcasts reach queues bound by any process or host sharing the root;
* the transport is asynchronous: a Celery worker delivers in kombu's event loop, which
  watches every consumed queue through one :class:`~vsqs.MultiWaiter` (its descriptor is
  the process's one inotify descriptor; no thread), and looks again every
  ``polling_interval`` seconds in any case; ``drain_events`` blocks on the same waiter.

Transport options (``broker_transport_options`` in Celery): ``root``,
``visibility_timeout`` (30), ``max_lease`` (3600: renewals stop then),
``durable`` (True: fsync each message), ``dead_letter_queue`` and ``max_receives``
(a message received that often without an ack moves there), ``polling_interval`` (1.0).

Message groups, as kombu's SQS transport has them for FIFO queues: a message published
with the property ``MessageGroupId`` (``producer.publish(body, MessageGroupId="g")``,
Celery's ``apply_async(..., MessageGroupId="g")``) is published with that ``group``;
``MessageDeduplicationId`` is its ``dedup_id``. A partitioned queue (made beforehand:
``vsqs create NAME --partitions 8 [--fifo]`` or :meth:`QueueRoot.create`) is opened with
its stored settings and watched in every partition.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from queue import Empty
from typing import Any, ClassVar, Final, cast

from .._extras import missing_extra

try:
    import kombu.transport
    from kombu.exceptions import ChannelError
    from kombu.transport import virtual
    from kombu.utils.json import dumps
except ModuleNotFoundError as error:
    raise missing_extra(error, "celery", "vsqs.kombu") from None

from .. import AnyQueue, Message, MultiWaiter, QueueDrained, QueueRoot, __version__
from ._envelope import NotKombu, expiry_attributes, move, overdue, parse
from ._names import Binding, Bindings, vsqs_name
from ._qos import QoS
from ._watch import Watch

__all__ = ["Channel", "QoS", "Transport", "vsqs_name"]

_log = logging.getLogger("vsqs.kombu")
NO_ROUTE: Final = 312  # AMQP's reply code for a mandatory message that no queue gets
POISON_SUFFIX: Final = ".poison"  # queue q's poison goes to q.poison, if no dead-letter queue
GROUP_PROPERTY: Final = "MessageGroupId"  # the property's name in kombu's SQS transport
DEDUP_PROPERTY: Final = "MessageDeduplicationId"  # the same

kombu.transport.TRANSPORT_ALIASES.setdefault("vsqs", "vsqs.kombu:Transport")


def root_of(client: Any) -> str:
    """The root directory of a kombu connection: ``transport_options["root"]``, or the
    path of a ``vsqs:///path`` URL."""
    root = client.transport_options.get("root")
    if root is None and client.virtual_host not in (None, "", "/"):
        root = "/" + client.virtual_host.lstrip("/")  # vsqs:///srv/queues
    if not root:
        raise ValueError(
            "vsqs transport: no root directory; use vsqs:///path/to/root "
            "or transport_options={'root': path}"
        )
    return str(root)


class Channel(virtual.Channel):
    """A kombu channel whose queues are vsqs queues under one root."""

    QoS = QoS
    supports_fanout = True
    from_transport_options = (  # type: ignore[assignment]  # kombu types it as a pair
        *virtual.Channel.from_transport_options,
        "visibility_timeout",
        "max_lease",
        "durable",
        "dead_letter_queue",
        "max_receives",
    )
    visibility_timeout: float = 30.0
    max_lease: float = 3600.0
    durable: bool = True
    dead_letter_queue: str | None = None
    max_receives: int | None = None

    def __init__(self, connection: Any, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        root = root_of(connection.client)
        if self.max_receives is not None and self.dead_letter_queue is None:
            raise ValueError("vsqs transport: max_receives needs a dead_letter_queue")
        self.root = QueueRoot(root, visibility_timeout=self.visibility_timeout)
        self.bindings = Bindings(self.root.path)
        self._queues: dict[str, AnyQueue] = {}
        self._no_ack: set[str] = set()
        # Callbacks by event name, as py-amqp's: Producer(on_return=) adds "basic_return".
        self.events: defaultdict[str, set[Callable[..., Any]]] = defaultdict(set)
        self.expired: Counter[str] = Counter()
        """Expired messages this channel dropped, by kombu queue (none with a dead-letter
        queue: they go there)."""

    def close(self) -> None:
        """Close the channel (unacknowledged messages are released), then every queue
        handle it opened, which flushes their produced and consumed counters."""
        super().close()
        for queue in self._queues.values():
            queue.close()
        self._queues.clear()

    # -- queues -------------------------------------------------------------------------

    def queue(self, name: str) -> AnyQueue:
        """The vsqs queue of the kombu queue *name* (created if missing)."""
        found = self._queues.get(name)
        if found is None:
            dead = self.dead_letter_queue
            if dead is not None and self.max_receives is not None and name != dead:
                found = self.root.create(
                    vsqs_name(name),
                    durable=self.durable,
                    dead_letter=self.queue(dead).path,
                    max_receives=self.max_receives,
                )
            else:
                found = self.root.create(vsqs_name(name), durable=self.durable)
            self._queues[name] = found
        return found

    def dead_letter_target(self, queue: str) -> AnyQueue | None:
        """Where a message of *queue* that must not run goes: the ``dead_letter_queue``
        transport option, else the vsqs queue's own dead-letter queue (its stored
        settings), else ``None``."""
        if self.dead_letter_queue is not None and queue != self.dead_letter_queue:
            return self.queue(self.dead_letter_queue)
        return cast("AnyQueue | None", self.queue(queue).dead_letter)

    def dead_letter(self, queue: str, body: bytes) -> None:
        """Keep a rejected message: publish it to the dead-letter queue, if one is set.

        Not atomic with the delete that follows: a crash in between leaves the message
        in both queues (at least once, never lost).
        """
        if self.dead_letter_queue is not None and queue != self.dead_letter_queue:
            self.queue(self.dead_letter_queue).publish(body, attributes={"source": queue})

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        self.queue(queue)

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        return vsqs_name(queue) in self.root

    def _size(self, queue: str) -> int:
        return self.queue(queue).counts().ready

    def _purge(self, queue: str) -> int:
        return self.queue(queue).purge()

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        exchange = args[0] if args else None
        if exchange:
            self.bindings.unbind(exchange, queue)
        self._purge(queue)

    # -- publishing and routing ---------------------------------------------------------

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        """Publish kombu's message (JSON) to *queue*: atomic, one rename (priority unused),
        with the expiry its ``expiration`` gives, if any (:mod:`vsqs.kombu._envelope`).

        The message properties that kombu's SQS transport sends to a FIFO queue are
        honoured the same way: ``MessageGroupId`` is the message's ``group`` (a group
        keeps its order, in one partition of a partitioned queue; one in flight at a
        time with ``fifo=True``), ``MessageDeduplicationId`` its ``dedup_id``.

        :raises ValueError: ``expiration`` is not a number of milliseconds >= 0, or the
            group is not 1-128 printable ASCII characters."""
        target = self.queue(queue)
        now = target.clock.time_us() / 1e6
        properties = message.get("properties") or {}
        attributes = expiry_attributes(properties, now)
        target.publish(
            dumps(message).encode(),
            attributes=attributes,
            group=properties.get(GROUP_PROPERTY),
            dedup_id=properties.get(DEDUP_PROPERTY),
        )

    def basic_publish(
        self, message: dict[str, Any], exchange: str, routing_key: str, **kwargs: Any
    ) -> Any:
        """Publish; a ``mandatory`` message that no queue would get is returned instead, as
        AMQP does: each ``basic_return`` callback (``Producer(on_return=)``) is called at
        once with ``(exception, exchange, routing_key, message)`` (``NO_ROUTE``, 312)."""
        handlers = list(self.events.get("basic_return", ()))
        if not (handlers and kwargs.get("mandatory") and exchange) or self._lookup(
            exchange, routing_key
        ):
            return super().basic_publish(message, exchange, routing_key, **kwargs)
        self._inplace_augment_message(message, exchange, routing_key)
        returned = self.Message(message, channel=self)
        text = f"NO_ROUTE: no queue is bound to {exchange!r} with {routing_key!r}"
        for callback in handlers:
            callback(ChannelError(text, reply_code=NO_ROUTE), exchange, routing_key, returned)
        return None

    def _put_fanout(
        self, exchange: str, message: dict[str, Any], routing_key: str, **kwargs: Any
    ) -> None:
        """One publish to each queue bound to *exchange*, by any process: each publish is
        atomic, the fanout is not (a crash midway has reached some of the queues)."""
        for row in self.bindings.table(exchange):
            self._put(row.queue, message)

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        kind = self.typeof(exchange).type
        self.bindings.bind(exchange, Binding(routing_key or "", pattern or "", queue), kind)

    def typeof(self, exchange: str, default: str = "direct") -> Any:
        """The exchange type: as declared in this process, or else as bound on disk."""
        if exchange in self.state.exchanges:
            return super().typeof(exchange, default)
        kind = self.bindings.kind(exchange) if exchange else None
        return self.exchange_types[kind or default]

    def queue_bind(
        self,
        queue: str,
        exchange: str | None = None,
        routing_key: str = "",
        arguments: Any = None,
        **kwargs: Any,
    ) -> None:
        """Bind, on disk as well even when this process bound it before: another process
        may have unbound it since (kombu's own check looks at this process only)."""
        exchange = exchange or "amq.direct"
        known = self.state.has_binding(queue, exchange, routing_key)
        super().queue_bind(queue, exchange, routing_key, arguments, **kwargs)
        if known:
            meta = self.typeof(exchange).prepare_bind(queue, exchange, routing_key, arguments)
            self._queue_bind(exchange, *meta)

    def queue_unbind(
        self,
        queue: str,
        exchange: str | None = None,
        routing_key: str = "",
        arguments: Any = None,
        **kwargs: Any,
    ) -> None:
        super().queue_unbind(queue, exchange, routing_key, arguments, **kwargs)
        if exchange:
            self.bindings.unbind(exchange, queue)

    def get_table(self, exchange: str) -> list[Binding]:
        return self.bindings.table(exchange)

    # -- consuming ----------------------------------------------------------------------

    def basic_consume(self, queue: str, no_ack: bool, *args: Any, **kwargs: Any) -> Any:
        if no_ack:
            self._no_ack.add(queue)
        else:
            self._no_ack.discard(queue)
        return super().basic_consume(queue, no_ack, *args, **kwargs)

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        if no_ack:
            self._no_ack.add(queue)
        try:
            return super().basic_get(queue, no_ack, **kwargs)
        finally:
            self._no_ack.discard(queue)

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        """Claim the oldest message of *queue* (one rename), held until it is settled; one
        that must not run (:meth:`_screen`) is settled here and the next one claimed."""
        source = self.queue(queue)
        while True:
            try:
                message = source.receive(timeout=0)
            except QueueDrained:
                raise Empty from None
            if message is None:
                raise Empty
            payload = self._screen(queue, source, message)
            if payload is not None:
                break
        tag = uuid.uuid4().hex
        properties = payload.setdefault("properties", {})
        properties["delivery_tag"] = tag
        properties.setdefault("delivery_info", {})["redelivered"] = message.receive_count > 1
        payload["redelivered"] = message.receive_count > 1
        if queue in self._no_ack:
            source.delete(message)  # auto-acknowledged on delivery, as AMQP's no_ack
        else:
            lease = source.lease(message, max_duration=self.max_lease)
            self.qos.leases[tag] = (lease, queue)
        return payload

    def _screen(self, queue: str, source: AnyQueue, message: Message) -> dict[str, Any] | None:
        """kombu's envelope of a claimed *message*, or ``None`` if it must not run.

        An expired message goes to the dead-letter queue (:meth:`dead_letter_target`),
        or else is deleted (counted in :attr:`expired` and the queue's
        ``consumed_messages``). A poison message (not kombu's envelope) goes to the
        dead-letter queue, or else to the kombu queue ``<queue>.poison``, never deleted.
        Each is logged (INFO if expired, ERROR if poison) naming where it went.
        """
        late = overdue(message.attributes, source.clock.time_us() / 1e6)
        if late is None:
            try:
                return parse(message.body, self.decode_body)
            except NotKombu as exc:
                aside = self.dead_letter_target(queue) or self.queue(queue + POISON_SUFFIX)
                reason = f"not a kombu message: {exc.reason}"
                move(source, message, aside, queue=queue, reason=reason, level=logging.ERROR)
                return None
        target = self.dead_letter_target(queue)
        if target is None:
            if source.delete(message):  # RACE: False if its lease ran out (a paused worker)
                self.expired[queue] += 1
                _log.info(
                    "vsqs: dropped message %s of %r: expired %.3f s ago", message.id, queue, late
                )
        else:
            reason = f"expired {late:.3f} s ago"
            move(source, message, target, queue=queue, reason=reason, level=logging.INFO)
        return None

    def consumed(self) -> list[AnyQueue]:
        """The vsqs queues this channel consumes from."""
        return [self.queue(name) for name in self._active_queues]


class Transport(virtual.Transport):
    """The ``vsqs`` kombu transport (see the module's documentation)."""

    Channel = Channel
    default_port = 0  # type: ignore[assignment]  # kombu declares None
    driver_type = "vsqs"
    driver_name = "vsqs"
    polling_interval = 1.0
    implements = virtual.Transport.implements.extend(
        asynchronous=True, exchange_type=frozenset({"direct", "topic", "fanout"})
    )
    # The exchanges declared in this process, per root (bindings themselves are on disk).
    states: ClassVar[dict[str, virtual.BrokerState]] = {}

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        try:
            self.state = self.states.setdefault(root_of(client), virtual.BrokerState())
        except ValueError:
            pass  # no root: the channel says so when it is made
        # polling_interval=0 (kombu: "never sleep") still needs a positive re-check.
        interval = self.polling_interval or MultiWaiter.DEFAULT_POLL_INTERVAL
        self.watch = Watch(self._consumed, self._deliver_one, interval)
        """How this transport waits for its consumed queues (no thread)."""

    def close_connection(self, connection: Any) -> None:
        """Close every channel, and stop waiting for their queues (the loop first)."""
        self.watch.close()
        super().close_connection(connection)

    def driver_version(self) -> str:
        return __version__

    @property
    def default_connection_params(self) -> dict[str, Any]:
        return {"port": 0}  # no host: the root is a path (kombu warns about a default host)

    def drain_events(self, connection: Any, timeout: float | None = None, **kwargs: Any) -> None:
        """Deliver one message, blocking up to *timeout* seconds for one: every consumed
        queue is waited on at once, in this thread (:meth:`Watch.drain
        <vsqs.kombu._watch.Watch.drain>`).

        :raises socket.timeout: nothing came within *timeout*.
        """
        self.watch.drain(timeout)

    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        """Deliver in kombu's event loop *loop*, as kombu's redis transport does: the
        waiter's descriptor is registered with ``loop.add_reader`` (:meth:`Watch.register
        <vsqs.kombu._watch.Watch.register>`)."""
        self.watch.register(loop)

    def unregister_from_event_loop(self, connection: Any, loop: Any) -> None:
        self.watch.unregister(loop)

    def on_readable(self, connection: Any, loop: Any) -> None:
        """The waiter's descriptor is readable: read the events, deliver what is ready."""
        self.watch.on_readable()

    def _consumed(self) -> list[AnyQueue]:
        return [queue for channel in self.channels for queue in channel.consumed()]

    def _deliver_one(self) -> bool:
        assert self.cycle is not None  # made by virtual.Transport.__init__
        try:
            self.cycle.get(self._deliver, timeout=0)
        except Empty:
            return False
        return True
