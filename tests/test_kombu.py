"""The kombu transport (vsqs.kombu) through kombu's own API: what ack, reject and close do
to the vsqs queue underneath, the name mapping, and bad configuration."""

from __future__ import annotations

import base64
import json
import logging
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Iterator
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
from vsqs.kombu._envelope import EXPIRES, NotKombu, overdue, parse
from vsqs.kombu._names import Binding, Bindings, vsqs_name

from .fixtures_core import wait_until

TASKS = KombuQueue("tasks", Exchange("tasks", "direct"), routing_key="tasks")


@pytest.fixture
def root_path(tmp_path: Path) -> Path:
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


def _tasks(root: Path) -> vsqs.AnyQueue:
    return vsqs.QueueRoot(root).get("tasks")


def test_ack_deletes_the_held_message(root_path: Path) -> None:
    with _connect(root_path) as conn:
        _publish(conn, "a")
        message = next(_get(conn))
        assert message.payload == "a"
        assert _tasks(root_path).counts().held == 1  # held in a lease, not moved out
        message.ack()
        assert _tasks(root_path).counts().total == 0
    assert _tasks(root_path).stats().consumed_messages == 1  # the channel's close flushed it


def test_reject_with_requeue_releases_it_at_once(root_path: Path) -> None:
    with _connect(root_path) as conn:
        _publish(conn, "a")
        first = next(_get(conn))
        assert not first.delivery_info["redelivered"]
        first.reject(requeue=True)
        assert _tasks(root_path).counts().ready == 1  # released, not copied
        again = next(_get(conn))
        assert again.payload == "a" and again.delivery_info["redelivered"]
        again.ack()
    assert _tasks(root_path).counts().total == 0


def test_reject_without_requeue_dead_letters_when_configured(root_path: Path) -> None:
    with _connect(root_path, dead_letter_queue="tasks.dead") as conn:
        _publish(conn, "poison", "fine")
        poison, fine = _get(conn)
        poison.reject(requeue=False)
        fine.ack()
    dead = vsqs.QueueRoot(root_path).get("tasks.dead")
    kept = dead.receive(timeout=0)
    assert kept is not None and kept.attributes == {"source": "tasks"}
    assert base64.b64decode(json.loads(kept.body)["body"]) == b"poison"  # kombu's payload
    assert _tasks(root_path).counts().total == 0


def test_reject_without_requeue_and_no_dead_letter_queue_drops_it(root_path: Path) -> None:
    with _connect(root_path) as conn:
        _publish(conn, "a")
        next(_get(conn)).reject(requeue=False)
    assert _tasks(root_path).counts().total == 0
    assert vsqs.QueueRoot(root_path).list() == ["tasks"]


def test_max_receives_moves_a_message_that_keeps_coming_back(root_path: Path) -> None:
    with _connect(root_path, dead_letter_queue="dead", max_receives=2) as conn:
        _publish(conn, "crashes the worker")
        for _ in range(2):
            next(_get(conn)).reject(requeue=True)
        assert list(_get(conn)) == []
    assert vsqs.QueueRoot(root_path).get("dead").counts().ready == 1


def test_closing_with_unacknowledged_messages_releases_them_once(root_path: Path) -> None:
    with _connect(root_path) as conn:
        _publish(conn, "a", "b")
        messages = _get(conn)
        next(messages)
        next(messages)
        assert _tasks(root_path).counts().held == 2
    counts = _tasks(root_path).counts()
    assert (counts.ready, counts.held) == (2, 0)  # back, and not duplicated


def test_queue_declare_purge_and_delete(root_path: Path) -> None:
    with _connect(root_path) as conn:
        channel = conn.default_channel
        _publish(conn, "a", "b")
        assert channel.queue_declare("tasks", passive=True).message_count == 2
        assert channel.queue_purge("tasks") == 2
        channel.queue_delete("tasks")
        with pytest.raises(Exception, match="NOT_FOUND"):
            channel.queue_declare("never-made", passive=True)
        assert Bindings(str(root_path)).table("tasks") == []


def test_bindings_are_shared_and_collapse_repeats(root_path: Path) -> None:
    one, two = Bindings(str(root_path)), Bindings(str(root_path))
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


def test_the_transport_says_what_it_is(root_path: Path) -> None:
    with _connect(root_path) as conn:
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


def test_basic_get_with_and_without_acknowledgement(root_path: Path) -> None:
    with _connect(root_path) as conn:
        _publish(conn, "a", "b")
        channel = conn.default_channel
        auto = channel.basic_get("tasks", no_ack=True)
        assert auto.payload == "a"
        assert _tasks(root_path).counts().total == 1  # deleted on delivery, as AMQP's no_ack
        manual = channel.basic_get("tasks")
        assert manual.payload == "b" and _tasks(root_path).counts().held == 1
        manual.ack()
        assert channel.basic_get("tasks") is None
    assert _tasks(root_path).counts().total == 0


def test_an_unknown_delivery_tag_is_ignored(root_path: Path) -> None:
    with _connect(root_path) as conn:
        conn.default_channel.basic_ack("no-such-tag")
        conn.default_channel.basic_reject("no-such-tag", requeue=True)


def test_an_ack_after_the_lease_ran_out_deletes_nothing(
    root_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """max_lease 0: no renewal, so the lease runs out after the visibility timeout and
    another consumer takes the message; the late ack must not delete its copy."""
    with (
        _connect(root_path, visibility_timeout=0.2, max_lease=0) as slow,
        _connect(root_path) as fast,
    ):
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
        assert _tasks(root_path).counts().held == 1  # the second consumer still holds it
        again.ack()
    assert _tasks(root_path).counts().total == 0


def test_fanout_gives_every_bound_queue_one_copy(root_path: Path) -> None:
    everyone = Exchange("everyone", "fanout")
    queues = [KombuQueue(f"listener-{n}", everyone) for n in range(3)]
    with _connect(root_path) as conn:
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


def test_drain_events_without_consumers_times_out(root_path: Path) -> None:
    with _connect(root_path) as conn, pytest.raises(TimeoutError):
        conn.drain_events(timeout=0.1)


def test_a_stray_message_in_a_binding_table_is_ignored(root_path: Path) -> None:
    bindings = Bindings(str(root_path))
    bindings.bind("ex", Binding("k", "", "q"))
    table = vsqs.QueueRoot(root_path / ".kombu-bindings").get("ex")
    table.publish(b"not json")
    assert bindings.table("ex") == [Binding("k", "", "q")]
    assert table.counts().ready == 2  # left as it is: not ours to delete


def test_max_receives_without_a_dead_letter_queue_is_refused(root_path: Path) -> None:
    with (
        _connect(root_path, max_receives=3) as conn,
        pytest.raises(ValueError, match="max_receives"),
    ):
        conn.default_channel  # noqa: B018 -- creating the channel is what fails


def test_a_binding_made_by_one_connection_routes_for_another(root_path: Path) -> None:
    """Bindings are on disk: a publisher that never declared the binding (another
    process, here another connection with its own broker state) routes by it."""
    logs = Exchange("logs", "topic")
    errors = KombuQueue("errors", logs, routing_key="*.error")
    with _connect(root_path) as binder:
        errors(binder.default_channel).declare()
    vsqs.kombu.Transport.states.clear()  # as a fresh process: nothing known in memory
    with _connect(root_path) as publisher:
        with publisher.Producer() as producer:
            producer.publish("disk full", exchange=logs, routing_key="db.error")
            producer.publish("all fine", exchange=logs, routing_key="db.info")
        got = errors(publisher.default_channel).get(no_ack=True)
        assert got is not None and got.payload == "disk full"
        assert errors(publisher.default_channel).get() is None


def test_a_publish_to_any_consumed_queue_wakes_a_blocked_drain(root_path: Path) -> None:
    """With the periodic re-check an hour away, only the watching threads (inotify)
    can end the wait: a publish from another process to the *second* queue does."""
    first = KombuQueue("first", Exchange("first", "direct"), routing_key="first")
    second = KombuQueue("second", Exchange("second", "direct"), routing_key="second")
    got: list[str] = []
    consumer_of_both = {"callbacks": [lambda body, _message: got.append(body)]}
    with (
        _connect(root_path, polling_interval=3600) as conn,
        conn.Consumer([first, second], **consumer_of_both),
    ):
        publisher = subprocess.Popen(
            [sys.executable, "-c",
             "import sys, time, vsqs.kombu; from kombu.connection import Connection;"
             "time.sleep(0.5); c = Connection(sys.argv[1]);"
             "c.default_channel.basic_publish("
             "c.default_channel.prepare_message('late'), '', 'second'); c.close()",
             f"vsqs://{root_path}"],
        )  # fmt: skip
        conn.drain_events(timeout=120)
        assert publisher.wait(30) == 0
        # No thread per queue: the drain waited on one waiter, in this thread.
        assert not [t.name for t in threading.enumerate() if t.name.startswith("vsqs-kombu")]
    assert got == ["late"]


def test_a_consumer_drained_by_kombus_event_loop_gets_a_later_publish(root_path: Path) -> None:
    """The transport is asynchronous, as kombu's own event-loop test wants: a consumer
    drained by kombu's ``Hub`` (``conn.register_with_event_loop(hub)``, then the hub's
    loop) receives a message published after the loop started. With the periodic
    re-check an hour away, only the waiter's descriptor, registered with the hub, can
    deliver it; closing the connection takes it off the hub again (a clean stop)."""
    hub = Hub()
    got: list[str] = []
    with _connect(root_path, polling_interval=3600) as conn:
        assert conn.transport.implements.asynchronous
        conn.register_with_event_loop(hub)
        with conn.Consumer(TASKS, callbacks=[lambda body, message: got.append(body)]):

            def publish() -> None:  # from inside the running loop
                assert got == []
                with _connect(root_path) as publisher:
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
    counts = _tasks(root_path).counts()
    assert (counts.ready, counts.held) == (1, 0)  # unacknowledged: released once on close
    hub.close()


def test_the_transport_class_and_a_root_option_work_without_a_url(root_path: Path) -> None:
    """The form the guide gives for code that cannot import vsqs.kombu first."""
    options = {"root": str(root_path), "durable": False}
    with Connection(transport="vsqs.kombu:Transport", transport_options=options) as conn:
        _publish(conn, "a")
        assert next(_get(conn)).payload == "a"


# -- poison messages (issue 26, item 1) --------------------------------------------------

POISON = [
    pytest.param(b"garbage", id="not-json"),
    pytest.param(b"[1,2]", id="a-json-list"),
    pytest.param(b'{"hello": 1}', id="an-object-without-kombus-fields"),
    pytest.param(b"\xff\xfe{}", id="invalid-utf-8"),
    pytest.param(b'{"body": "abc", "properties": {"body_encoding": "base64"}}', id="bad-base64"),
    pytest.param(b'{"body": "abc", "properties": {"body_encoding": "rot13"}}', id="no-such-codec"),
    pytest.param(b'{"body": "", "properties": {}, "headers": [1]}', id="headers-not-an-object"),
    pytest.param(b'{"body": "", "properties": {"delivery_info": 1}}', id="bad-delivery-info"),
]


def _plant(root: Path, body: bytes) -> None:
    """A message that no kombu producer wrote, as anyone who can write to the root can."""
    vsqs.QueueRoot(root).create("tasks").publish(body)


def _ack_all(conn: Connection) -> list[Any]:
    """The payloads of every message delivered from TASKS, each acknowledged."""
    payloads = []
    for message in _get(conn):
        payloads.append(message.payload)
        message.ack()
    return payloads


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("poison", POISON)
def test_a_poison_message_is_kept_aside_and_the_next_one_delivered(
    root_path: Path, poison: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """Without a dead-letter queue the poison goes to the kombu queue ``tasks.poison``,
    untouched, and one ERROR line names it; the consumer goes on to the next message."""
    with _connect(root_path) as conn:
        _plant(root_path, poison)
        _publish(conn, "fine")
        assert _ack_all(conn) == ["fine"]
    aside = vsqs.QueueRoot(root_path).get("tasks.poison")
    kept = aside.receive(timeout=0)
    assert kept is not None and kept.body == poison
    assert kept.attributes["source"] == "tasks"
    assert kept.attributes["reason"].startswith("not a kombu message")
    (error,) = _errors(caplog)
    assert aside.path in error and kept.id in error
    assert _tasks(root_path).counts().total == 0


@pytest.mark.parametrize("where", ["transport-option", "stored-setting"])
def test_a_poison_message_goes_to_the_dead_letter_queue_when_there_is_one(
    root_path: Path, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    options = {"dead_letter_queue": "tasks-dead"} if where == "transport-option" else {}
    if where == "stored-setting":
        vsqs.QueueRoot(root_path).create("tasks", dead_letter="tasks-dead")
    with _connect(root_path, **options) as conn:
        _plant(root_path, b"garbage")
        _publish(conn, "fine")
        assert _ack_all(conn) == ["fine"]
    assert _tasks(root_path).counts().total == 0
    dead = vsqs.QueueRoot(root_path).get("tasks-dead")
    kept = dead.receive(timeout=0)
    assert kept is not None and kept.body == b"garbage"
    assert "tasks.poison" not in vsqs.QueueRoot(root_path)
    (error,) = _errors(caplog)
    assert dead.path in error


def test_a_poison_message_is_never_delivered_to_basic_get(root_path: Path) -> None:
    with _connect(root_path) as conn:
        _plant(root_path, b"[1,2]")
        assert conn.default_channel.basic_get("tasks") is None
    assert vsqs.QueueRoot(root_path).get("tasks.poison").counts().ready == 1


# -- per-message expiry (issue 26, item 18) ----------------------------------------------


def _publish_expiring(conn: Connection, body: str, expiration: float) -> None:
    with conn.Producer() as producer:
        producer.publish(
            body, exchange=TASKS.exchange, routing_key="tasks", declare=[TASKS],
            expiration=expiration,
        )  # fmt: skip


def test_an_expired_message_is_dropped_counted_and_never_delivered(
    root_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """kombu's expiration 0 (what Celery sends for an ``expires`` in the past) is
    expired by the time any consumer looks."""
    caplog.set_level(logging.INFO, "vsqs.kombu")
    with _connect(root_path) as conn:
        _publish_expiring(conn, "too late", 0)
        _publish(conn, "fine")
        assert _ack_all(conn) == ["fine"]
        assert conn.default_channel.expired == {"tasks": 1}
    tasks = _tasks(root_path)
    assert tasks.counts().total == 0
    assert tasks.stats().consumed_messages == 2  # the expired one is counted as consumed
    assert any("dropped" in r.getMessage() and "expired" in r.getMessage() for r in caplog.records)


def test_an_expired_message_goes_to_the_dead_letter_queue_when_there_is_one(
    root_path: Path,
) -> None:
    with _connect(root_path, dead_letter_queue="tasks-dead") as conn:
        _publish_expiring(conn, "too late", 0)
        assert list(_get(conn)) == []
        assert conn.default_channel.expired == {}
    kept = vsqs.QueueRoot(root_path).get("tasks-dead").receive(timeout=0)
    assert kept is not None and kept.attributes["reason"].startswith("expired")
    assert base64.b64decode(json.loads(kept.body)["body"]) == b"too late"


def test_a_message_is_delivered_before_its_expiry_which_is_stored_with_it(root_path: Path) -> None:
    with _connect(root_path) as conn:
        before = time.time()
        _publish_expiring(conn, "in time", 3600)
        stored = _tasks(root_path).peek()
        assert stored is not None
        expires = float(stored.attributes[EXPIRES])
        assert before + 3600 <= expires <= time.time() + 3600
        message = next(_get(conn))
        assert message.payload == "in time"
        assert message.properties["expiration"] == "3600000"  # kombu's, untouched
        message.reject(requeue=True)
        released = _tasks(root_path).peek()
        assert released is not None and released.attributes[EXPIRES] == repr(expires)
        next(_get(conn)).ack()


def test_an_expiry_is_due_until_its_instant() -> None:
    attributes = {EXPIRES: "100.5"}
    assert overdue(attributes, 100.4) is None
    assert overdue(attributes, 100.5) == 0.0
    assert overdue(attributes, 102.0) == 1.5
    assert overdue({}, 1e12) is None
    assert overdue({EXPIRES: "soon"}, 1e12) is None  # not ours: delivered, never lost


@pytest.mark.parametrize("bad", ["-1", "soon", "nan", "inf", None])
def test_a_bad_expiration_is_refused_at_publish(root_path: Path, bad: str | None) -> None:
    with _connect(root_path) as conn:
        channel = conn.default_channel
        message = channel.prepare_message("x", properties={"expiration": bad or []})
        with pytest.raises(ValueError, match="milliseconds"):
            channel.basic_publish(message, "", "tasks")


# -- Producer(on_return=...) (issue 26, item 17) -----------------------------------------


def test_on_return_gets_a_mandatory_message_that_no_queue_takes(root_path: Path) -> None:
    returned: list[tuple[Any, str, str, Message]] = []
    nowhere = Exchange("nowhere", "direct")
    with _connect(root_path) as conn:
        producer = conn.Producer(on_return=lambda *args: returned.append(args))
        producer.publish("lost", exchange=nowhere, routing_key="k", declare=[nowhere],
                         mandatory=True)  # fmt: skip
        producer.publish("dropped quietly", exchange=nowhere, routing_key="k")
        producer.publish("routed", exchange=TASKS.exchange, routing_key="tasks",
                         declare=[TASKS], mandatory=True)  # fmt: skip
        assert [m.payload for m in _get(conn)] == ["routed"]
    ((error, exchange, routing_key, message),) = returned
    assert (exchange, routing_key, message.payload) == ("nowhere", "k", "lost")
    assert error.reply_code == 312 and "NO_ROUTE" in str(error)


def test_a_channel_has_events_as_kombu_expects(root_path: Path) -> None:
    with _connect(root_path) as conn:
        callback = print
        producer = conn.Producer(conn.default_channel, on_return=callback)
        assert callback in producer.channel.events["basic_return"]


def test_a_poison_message_with_all_the_attributes_it_may_have_is_still_kept(
    root_path: Path,
) -> None:
    full = {f"a{n}": "x" for n in range(10)}  # the most a message may carry
    vsqs.QueueRoot(root_path).create("tasks").publish(b"garbage", attributes=full)
    with _connect(root_path) as conn:
        assert list(_get(conn)) == []
    kept = vsqs.QueueRoot(root_path).get("tasks.poison").receive(timeout=0)
    assert kept is not None and kept.body == b"garbage"
    assert set(kept.attributes) == {"source", "reason"}  # why it is there wins


def test_a_poison_message_taken_back_during_its_move_is_kept_twice_never_lost(
    root_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The lease runs out while the message is copied aside (a paused worker) and
    another consumer takes it: the late delete removes nothing, a warning says so."""
    _plant(root_path, b"garbage")
    publish = vsqs.PlainQueue.publish
    stolen: list[vsqs.Message] = []

    def publish_after_the_lease_ran_out(self: vsqs.PlainQueue, data: Any, **kwargs: Any) -> str:
        other = vsqs.QueueRoot(root_path).get("tasks")
        while self.path.endswith("poison") and not stolen:  # the lease lasts a millisecond
            stolen.extend(filter(None, [other.receive(timeout=0)]))
        return publish(self, data, **kwargs)

    monkeypatch.setattr(vsqs.PlainQueue, "publish", publish_after_the_lease_ran_out)
    with _connect(root_path, visibility_timeout=0.001, max_lease=0) as conn:
        assert list(_get(conn)) == []
    monkeypatch.undo()
    assert stolen[0].body == b"garbage" and _tasks(root_path).counts().held == 1
    assert vsqs.QueueRoot(root_path).get("tasks.poison").counts().ready == 1
    assert "taken back while moved" in caplog.text


def test_an_expired_message_taken_back_before_its_delete_is_not_counted(
    root_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its lease runs out between the claim and the drop, and another consumer takes it:
    the late delete removes nothing and the channel counts nothing."""
    delete = vsqs.PlainQueue.delete
    stolen: list[vsqs.Message] = []

    def delete_after_the_lease_ran_out(self: vsqs.PlainQueue, message: Any) -> bool:
        other = vsqs.QueueRoot(root_path).get("tasks")
        while not stolen:  # the lease lasts a millisecond
            stolen.extend(filter(None, [other.receive(timeout=0)]))
        return delete(self, message)

    with _connect(root_path, visibility_timeout=0.001, max_lease=0) as conn:
        _publish_expiring(conn, "too late", 0)
        monkeypatch.setattr(vsqs.PlainQueue, "delete", delete_after_the_lease_ran_out)
        assert list(_get(conn)) == []
        monkeypatch.undo()
        assert conn.default_channel.expired == {}
    assert len(stolen) == 1 and _tasks(root_path).counts().held == 1


def test_the_envelope_check_accepts_what_kombu_accepts() -> None:
    decode = Connection("memory://").default_channel.decode_body
    empty = parse(b'{"body": "", "properties": {"body_encoding": "base64"}}', decode)
    assert empty["body"] == ""  # nothing to decode, as kombu's Message
    plain = parse(b'{"body": "hi", "properties": {}, "headers": null}', decode)
    assert plain["body"] == "hi"  # no body_encoding: kombu reads it as it is


def test_not_kombu_pickles_with_its_reason() -> None:
    error = pickle.loads(pickle.dumps(NotKombu("x" * 300)))  # noqa: S301 - our own bytes
    assert isinstance(error, NotKombu) and error.reason == "x" * 200


def test_the_event_loop_yields_the_descriptor_to_a_thread_reading_it(
    root_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread of the worker's process blocked in a sync ``receive`` holds the reader's
    seat of the shared descriptor when a message comes: the loop stops watching the
    descriptor (it would spin on it) until that thread has read the events, then
    delivers the message."""
    hub = Hub()
    got: list[str] = []
    instance = _inotify_hub.process_instance()
    other = vsqs.PlainQueue(tmp_path / "other", durable=False, poll_interval=3600)
    real_read = _inotify.read_events
    with _connect(root_path, polling_interval=3600) as conn:
        transport = conn.transport
        conn.register_with_event_loop(hub)

        def read_after_the_loop_paused(
            fd: int, exact: Collection[int] = ()
        ) -> dict[int, list[int] | None]:
            if threading.current_thread() is blocked and not got:  # the loop saw them too
                wait_until(lambda: transport.watch.paused, "the loop to stop watching")
            return real_read(fd, exact)

        monkeypatch.setattr(_inotify, "read_events", read_after_the_loop_paused)
        blocked = threading.Thread(target=lambda: other.receive(timeout=60))

        def publish_while_a_thread_reads() -> None:
            blocked.start()
            wait_until(lambda: instance.reader, "the thread to take the reader's seat")
            with _connect(root_path) as publisher:
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
