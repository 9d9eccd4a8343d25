"""The kombu transport (vsqs.kombu) through kombu's own API: what ack, reject and close do
to the vsqs queue underneath, the name mapping, and bad configuration."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kombu.asynchronous import Hub
from kombu.connection import Connection
from kombu.entity import Exchange
from kombu.entity import Queue as KombuQueue
from kombu.message import Message

import vsqs
import vsqs.kombu
from vsqs import _inotify, _inotify_hub
from vsqs.kombu._names import Binding, Bindings, vsqs_name

from .fixtures_core import wait_until

TASKS = KombuQueue("tasks", Exchange("tasks", "direct"), routing_key="tasks")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "root"


def _connect(root: Path, **options: Any) -> Connection:
    return Connection(f"vsqs://{root}", transport_options={"durable": False, **options})


def _publish(conn: Connection, *bodies: str) -> None:
    with conn.Producer() as producer:
        for body in bodies:
            producer.publish(body, exchange=TASKS.exchange, routing_key="tasks", declare=[TASKS])


def _get(conn: Connection) -> Iterator[Message]:
    """Messages of TASKS, one drain_events at a time (unacknowledged)."""
    got: list[Message] = []
    with conn.Consumer(TASKS, callbacks=[lambda _body, message: got.append(message)]):
        while True:
            try:
                conn.drain_events(timeout=0.2)
            except TimeoutError:
                return
            yield got.pop()


def _tasks(root: Path) -> vsqs.Queue:
    return vsqs.QueueRoot(root).get("tasks")


def test_ack_deletes_the_held_message(root: Path) -> None:
    with _connect(root) as conn:
        _publish(conn, "a")
        message = next(_get(conn))
        assert message.payload == "a"
        assert _tasks(root).counts().held == 1  # held in a lease, not moved out
        message.ack()
        assert _tasks(root).counts().total == 0
    assert _tasks(root).stats().consumed_messages == 1  # the channel's close flushed it


def test_reject_with_requeue_releases_it_at_once(root: Path) -> None:
    with _connect(root) as conn:
        _publish(conn, "a")
        first = next(_get(conn))
        assert not first.delivery_info["redelivered"]
        first.reject(requeue=True)
        assert _tasks(root).counts().ready == 1  # released, not copied
        again = next(_get(conn))
        assert again.payload == "a" and again.delivery_info["redelivered"]
        again.ack()
    assert _tasks(root).counts().total == 0


def test_reject_without_requeue_dead_letters_when_configured(root: Path) -> None:
    with _connect(root, dead_letter_queue="tasks.dead") as conn:
        _publish(conn, "poison", "fine")
        poison, fine = _get(conn)
        poison.reject(requeue=False)
        fine.ack()
    dead = vsqs.QueueRoot(root).get("tasks.dead")
    kept = dead.receive(timeout=0)
    assert kept is not None and kept.attributes == {"source": "tasks"}
    assert base64.b64decode(json.loads(kept.body)["body"]) == b"poison"  # kombu's payload
    assert _tasks(root).counts().total == 0


def test_reject_without_requeue_and_no_dead_letter_queue_drops_it(root: Path) -> None:
    with _connect(root) as conn:
        _publish(conn, "a")
        next(_get(conn)).reject(requeue=False)
    assert _tasks(root).counts().total == 0
    assert vsqs.QueueRoot(root).list() == ["tasks"]


def test_max_receives_moves_a_message_that_keeps_coming_back(root: Path) -> None:
    with _connect(root, dead_letter_queue="dead", max_receives=2) as conn:
        _publish(conn, "crashes the worker")
        for _ in range(2):
            next(_get(conn)).reject(requeue=True)
        assert list(_get(conn)) == []
    assert vsqs.QueueRoot(root).get("dead").counts().ready == 1


def test_closing_with_unacknowledged_messages_releases_them_once(root: Path) -> None:
    with _connect(root) as conn:
        _publish(conn, "a", "b")
        messages = _get(conn)
        next(messages)
        next(messages)
        assert _tasks(root).counts().held == 2
    counts = _tasks(root).counts()
    assert (counts.ready, counts.held) == (2, 0)  # back, and not duplicated


def test_queue_declare_purge_and_delete(root: Path) -> None:
    with _connect(root) as conn:
        channel = conn.default_channel
        _publish(conn, "a", "b")
        assert channel.queue_declare("tasks", passive=True).message_count == 2
        assert channel.queue_purge("tasks") == 2
        channel.queue_delete("tasks")
        with pytest.raises(Exception, match="NOT_FOUND"):
            channel.queue_declare("never-made", passive=True)
        assert Bindings(str(root)).table("tasks") == []


def test_bindings_are_shared_and_collapse_repeats(root: Path) -> None:
    one, two = Bindings(str(root)), Bindings(str(root))
    row = Binding("key", "", "q1")
    one.bind("ex", row)
    two.bind("ex", row)
    two.bind("ex", Binding("key", "", "q2"))
    assert one.table("ex") == [row, Binding("key", "", "q2")]
    one.unbind("ex", "q1")
    assert two.table("ex") == [Binding("key", "", "q2")]


def test_a_connection_without_a_root_is_refused() -> None:
    with Connection("vsqs://") as conn, pytest.raises(ValueError, match="no root directory"):
        conn.default_channel  # noqa: B018 -- creating the channel is what fails


def test_the_transport_says_what_it_is(root: Path) -> None:
    with _connect(root) as conn:
        assert conn.transport.driver_version() == vsqs.__version__
        assert conn.transport_cls == "vsqs"


@given(st.text(min_size=1, max_size=120))
def test_every_kombu_name_maps_to_a_valid_queue_name(name: str) -> None:
    assert vsqs.validate_name(vsqs_name(name))


@given(st.text(min_size=1, max_size=30), st.text(min_size=1, max_size=30))
def test_distinct_kombu_names_map_to_distinct_queue_names(a: str, b: str) -> None:
    assert (vsqs_name(a) == vsqs_name(b)) == (a == b)


def test_a_kombu_name_must_be_a_string() -> None:
    with pytest.raises(ValueError, match="non-empty str"):
        vsqs_name("")


def test_basic_get_with_and_without_acknowledgement(root: Path) -> None:
    with _connect(root) as conn:
        _publish(conn, "a", "b")
        channel = conn.default_channel
        auto = channel.basic_get("tasks", no_ack=True)
        assert auto.payload == "a"
        assert _tasks(root).counts().total == 1  # deleted on delivery, as AMQP's no_ack
        manual = channel.basic_get("tasks")
        assert manual.payload == "b" and _tasks(root).counts().held == 1
        manual.ack()
        assert channel.basic_get("tasks") is None
    assert _tasks(root).counts().total == 0


def test_an_unknown_delivery_tag_is_ignored(root: Path) -> None:
    with _connect(root) as conn:
        conn.default_channel.basic_ack("no-such-tag")
        conn.default_channel.basic_reject("no-such-tag", requeue=True)


def test_an_ack_after_the_lease_ran_out_deletes_nothing(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """max_lease 0: no renewal, so the lease runs out after the visibility timeout and
    another consumer takes the message; the late ack must not delete its copy."""
    with _connect(root, visibility_timeout=0.2, max_lease=0) as slow, _connect(root) as fast:
        _publish(slow, "a")
        late = slow.default_channel.basic_get("tasks")
        assert late is not None
        again = None
        for _ in range(100):  # the lease ends 0.2 s after the delivery
            again = fast.default_channel.basic_get("tasks")
            if again is not None:
                break
            time.sleep(0.02)
        assert again is not None and again.delivery_info["redelivered"]
        late.ack()
        assert "came too late" in caplog.text
        assert _tasks(root).counts().held == 1  # the second consumer still holds it
        again.ack()
    assert _tasks(root).counts().total == 0


def test_fanout_gives_every_bound_queue_one_copy(root: Path) -> None:
    everyone = Exchange("everyone", "fanout")
    queues = [KombuQueue(f"listener-{n}", everyone) for n in range(3)]
    with _connect(root) as conn:
        channel = conn.default_channel
        for queue in queues:
            queue(channel).declare()
        with conn.Producer() as producer:
            producer.publish("hello", exchange=everyone, declare=[everyone])
        for queue in queues:
            got = queue(channel).get(no_ack=True)
            assert got is not None and got.payload == "hello"
            assert queue(channel).get() is None
        queues[0](channel).unbind_from(everyone)
        with conn.Producer() as producer:
            producer.publish("again", exchange=everyone)
        assert queues[0](channel).get() is None
        assert queues[1](channel).get(no_ack=True).payload == "again"


def test_drain_events_without_consumers_times_out(root: Path) -> None:
    with _connect(root) as conn, pytest.raises(TimeoutError):
        conn.drain_events(timeout=0.1)


def test_a_stray_message_in_a_binding_table_is_ignored(root: Path) -> None:
    bindings = Bindings(str(root))
    bindings.bind("ex", Binding("k", "", "q"))
    table = vsqs.QueueRoot(root / ".kombu-bindings").get("ex")
    table.publish(b"not json")
    assert bindings.table("ex") == [Binding("k", "", "q")]
    assert table.counts().ready == 2  # left as it is: not ours to delete


def test_max_receives_without_a_dead_letter_queue_is_refused(root: Path) -> None:
    with _connect(root, max_receives=3) as conn, pytest.raises(ValueError, match="max_receives"):
        conn.default_channel  # noqa: B018 -- creating the channel is what fails


def test_a_binding_made_by_one_connection_routes_for_another(root: Path) -> None:
    """Bindings are on disk: a publisher that never declared the binding (another
    process, here another connection with its own broker state) routes by it."""
    logs = Exchange("logs", "topic")
    errors = KombuQueue("errors", logs, routing_key="*.error")
    with _connect(root) as binder:
        errors(binder.default_channel).declare()
    vsqs.kombu.Transport.states.clear()  # as a fresh process: nothing known in memory
    with _connect(root) as publisher:
        with publisher.Producer() as producer:
            producer.publish("disk full", exchange=logs, routing_key="db.error")
            producer.publish("all fine", exchange=logs, routing_key="db.info")
        got = errors(publisher.default_channel).get(no_ack=True)
        assert got is not None and got.payload == "disk full"
        assert errors(publisher.default_channel).get() is None


def test_a_publish_to_any_consumed_queue_wakes_a_blocked_drain(root: Path) -> None:
    """With the periodic re-check an hour away, only the watching threads (inotify)
    can end the wait: a publish from another process to the *second* queue does."""
    first = KombuQueue("first", Exchange("first", "direct"), routing_key="first")
    second = KombuQueue("second", Exchange("second", "direct"), routing_key="second")
    got: list[str] = []
    consumer_of_both = {"callbacks": [lambda body, _message: got.append(body)]}
    with (
        _connect(root, polling_interval=3600) as conn,
        conn.Consumer([first, second], **consumer_of_both),
    ):
        publisher = subprocess.Popen(
            [sys.executable, "-c",
             "import sys, time, vsqs.kombu; from kombu.connection import Connection;"
             "time.sleep(0.5); c = Connection(sys.argv[1]);"
             "c.default_channel.basic_publish("
             "c.default_channel.prepare_message('late'), '', 'second'); c.close()",
             f"vsqs://{root}"],
        )  # fmt: skip
        conn.drain_events(timeout=120)
        assert publisher.wait(30) == 0
        # No thread per queue: the drain waited on one waiter, in this thread.
        assert not [t.name for t in threading.enumerate() if t.name.startswith("vsqs-kombu")]
    assert got == ["late"]


def test_a_consumer_drained_by_kombus_event_loop_gets_a_later_publish(root: Path) -> None:
    """The transport is asynchronous, as kombu's own event-loop test wants: a consumer
    drained by kombu's ``Hub`` (``conn.register_with_event_loop(hub)``, then the hub's
    loop) receives a message published after the loop started. With the periodic
    re-check an hour away, only the waiter's descriptor, registered with the hub, can
    deliver it; closing the connection takes it off the hub again (a clean stop)."""
    hub = Hub()
    got: list[str] = []
    with _connect(root, polling_interval=3600) as conn:
        assert conn.transport.implements.asynchronous
        conn.register_with_event_loop(hub)
        with conn.Consumer(TASKS, callbacks=[lambda body, message: got.append(body)]):

            def publish() -> None:  # from inside the running loop
                assert got == []
                with _connect(root) as publisher:
                    _publish(publisher, "late")

            hub.call_later(0.3, publish)
            conn.transport.on_readable(conn.connection, hub)  # spurious: delivers nothing
            loop = hub.create_loop()
            deadline = time.monotonic() + 30
            while not got and time.monotonic() < deadline:
                next(loop)
            assert got == ["late"]
            fd = conn.transport.watch.waiter.fileno()
            assert fd in hub.readers
        assert not [t.name for t in threading.enumerate() if t.name.startswith("vsqs-kombu")]
    assert fd not in hub.readers  # closed: the loop no longer polls the descriptor
    counts = _tasks(root).counts()
    assert (counts.ready, counts.held) == (1, 0)  # unacknowledged: released once on close
    hub.close()


def test_the_transport_class_and_a_root_option_work_without_a_url(root: Path) -> None:
    """The form the guide gives for code that cannot import vsqs.kombu first."""
    options = {"root": str(root), "durable": False}
    with Connection(transport="vsqs.kombu:Transport", transport_options=options) as conn:
        _publish(conn, "a")
        assert next(_get(conn)).payload == "a"


def test_the_event_loop_yields_the_descriptor_to_a_thread_reading_it(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread of the worker's process blocked in a sync ``receive`` holds the reader's
    seat of the shared descriptor when a message comes: the loop stops watching the
    descriptor (it would spin on it) until that thread has read the events, then
    delivers the message."""
    hub = Hub()
    got: list[str] = []
    instance = _inotify_hub.process_instance()
    other = vsqs.Queue(tmp_path / "other", durable=False, poll_interval=3600)
    real_read = _inotify.read_events
    with _connect(root, polling_interval=3600) as conn:
        transport = conn.transport
        conn.register_with_event_loop(hub)

        def read_after_the_loop_paused(fd: int) -> dict[int, list[int] | None]:
            if threading.current_thread() is blocked and not got:  # the loop saw them too
                wait_until(lambda: transport.watch.paused, "the loop to stop watching")
            return real_read(fd)

        monkeypatch.setattr(_inotify, "read_events", read_after_the_loop_paused)
        blocked = threading.Thread(target=lambda: other.receive(timeout=60))

        def publish_while_a_thread_reads() -> None:
            blocked.start()
            wait_until(lambda: instance.reader, "the thread to take the reader's seat")
            with _connect(root) as publisher:
                _publish(publisher, "late")

        try:
            with conn.Consumer(TASKS, callbacks=[lambda body, message: got.append(body)]):
                hub.call_later(0.05, publish_while_a_thread_reads)
                loop = hub.create_loop()
                deadline = time.monotonic() + 30
                while not got and time.monotonic() < deadline:
                    next(loop)
                assert got == ["late"]
                # The claim made events too, which the thread may read first again.
                while transport.watch.paused and time.monotonic() < deadline:
                    next(loop)
                fd = transport.watch.waiter.fileno()
                assert fd in hub.readers  # watched again
                transport.unregister_from_event_loop(conn.connection, hub)
                assert fd not in hub.readers and not hub.on_tick
        finally:
            other.publish(b"done")  # ends the thread's receive
            blocked.join(30)
            hub.close()
