"""A hypothesis state machine: one ``Queue`` against an in-memory model, on a manual clock.

The model knows, for each message, whether it is ready, held (until an expiry) or
delayed (until a due time), and how often it was received. Expired leases and due
delays are *eligible*: the next receive must requeue and serve them, oldest id first.
After every step the directory itself is compared with the model, message by message.

The manual clock runs the queue's real algorithm, so the machine also drives the two
rules that guard strict FIFO and a clean end of stream:

* listings are not snapshots: a rule publishes messages *while* the consumer's listing
  runs and hides the oldest of them from that listing (as a hashed directory may), so
  serving a newer one first would fail the FIFO check;
* a shutdown by another process: the marker appears (with its time), publishes must be
  refused once the close grace has passed, and ``QueueDrained`` must come exactly when
  the queue is empty and the grace is over, never while a message remains.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    multiple,
    precondition,
    rule,
)

import vsqs
from vsqs import _scan
from vsqs._ids import MS_LIMIT, Precision, State, decode_ready, format_time, parse_id, parse_name
from vsqs._shutdown import CLOSE_GRACE, DRAIN_SKEW
from vsqs.testing import ManualClock

VT = 30.0
VISIBILITY = st.sampled_from([None, 0.25, 0.5, 1.5, 2.0, 30.0, 0.001])
ADVANCE = st.sampled_from([0.001, 0.1, 0.25, 0.5, 1.0, 2.0, 31.0])
DELAY = st.sampled_from([0.25, 0.5, 1.0, 2.5])
HEARTBEAT = st.sampled_from([0.0, 0.25, 1.0, 10.0])


@dataclass
class Model:
    body: bytes
    key: int
    state: str  # "ready", "held" or "delayed"
    due: int = 0  # µs: the lease's expiry (held) or the delay's end (delayed)
    name: str = ""  # the file name while held or delayed
    receives: int = 0


class QueueMachine(RuleBasedStateMachine):
    precision = Precision.US
    leases = Bundle("leases")

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="vsqs-model-")
        self.clock = ManualClock()
        self.queue = vsqs.Queue(
            self.dir, visibility_timeout=VT, durable=False, clock=self.clock,
            precision=self.precision,
        )  # fmt: skip
        # Another process's handle on the same queue (its own trust of "open", no view).
        self.producer = vsqs.Queue(
            self.dir, visibility_timeout=VT, durable=False, clock=self.clock,
            precision=self.precision,
        )  # fmt: skip
        self.model: dict[str, Model] = {}
        self.serial = 0
        # Receipts this handle superseded by extending them -> the next receipt: the
        # queue acts on the current lease when given one of them (heartbeats).
        self.superseded: dict[str, str] = {}
        # Messages to publish during the next listing, and what that listing hid.
        self.racing: int = 0
        self.raced: list[str] = []
        self.real_scan = _scan.scan
        _scan.scan = self._scan
        # The shutdown, as the model knows it (monotonic and wall time of the marker).
        self.shut_mono: float | None = None
        self.shut_us = 0
        self.grace_end: float | None = None

    def teardown(self) -> None:
        _scan.scan = self.real_scan
        # Closed first: a handle's counters are otherwise flushed by the flusher thread
        # up to a second later, which may write `.vsqs/stats/` while it is being removed.
        self.queue.close()
        self.producer.close()
        shutil.rmtree(self.dir)

    def _scan(self, path: str) -> _scan.Listing:
        """A listing during which messages become ready, the oldest of them unseen."""
        if not self.racing or path != self.dir:
            return self.real_scan(path)
        count, self.racing = self.racing, 0
        for _ in range(count):
            body = self._body()
            message_id = self.producer.publish(body)
            self._add(message_id, body)
            self.raced.append(message_id)
        listing = self.real_scan(path)
        hidden = self.raced[0]
        listing.ready = [code for code in listing.ready if decode_ready(code) != hidden]
        return listing

    def _add(self, message_id: str, body: bytes) -> None:
        assert message_id not in self.model
        key = parse_id(message_id)
        assert key is not None
        self.model[message_id] = Model(body, key, "ready")

    # -- helpers ------------------------------------------------------------------------

    def _expiry(self, seconds: float) -> int:
        """The µs expiry the queue writes for a lease or delay of *seconds* from now."""
        exact = self.clock.time_us() + round(seconds * 1e6)
        return parse_id(format_time(exact, self.precision)) or 0

    def _eligible(self) -> list[tuple[int, str]]:
        now = self.clock.time_us()
        return sorted(
            (m.key, message_id)
            for message_id, m in self.model.items()
            if m.state == "ready" or m.due <= now
        )

    def _on_disk(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for name in os.listdir(self.dir):
            entry = parse_name(name)
            if entry is not None:
                found.setdefault(entry.id, []).append(name)
        return found

    def _current(self, receipt: str) -> str:
        while receipt in self.superseded:
            receipt = self.superseded[receipt]
        return receipt

    def _body(self) -> bytes:
        self.serial += 1
        return f"m{self.serial}".encode()

    def _check_received(self, message: vsqs.Message, seconds: float) -> None:
        eligible = self._eligible()
        message_key = parse_id(message.id)
        assert message_key is not None
        assert (message_key, message.id) in eligible, "served a message that was not eligible"
        older = [message_id for key, message_id in eligible if key < message_key]
        assert not older, f"served {message.id} before the older eligible {older} (FIFO)"
        model = self.model[message.id]
        assert message.body == model.body
        model.receives += 1
        assert message.receive_count == model.receives
        model.state, model.name, model.due = "held", message.receipt, self._expiry(seconds)
        entry = parse_name(message.receipt)
        assert entry is not None and entry.state is State.HELD and entry.id == message.id
        assert entry.expires == model.due
        self.superseded.pop(message.receipt, None)

    # -- rules --------------------------------------------------------------------------

    def _must_refuse(self) -> bool:
        """Whether a publish must be refused: the marker is older than the close grace."""
        return self.shut_mono is not None and self.clock.monotonic() >= self.shut_mono + CLOSE_GRACE

    def _see_marker(self) -> None:
        """A receive found nothing: the queue looks at the marker (first sight starts
        the drain grace, unless the marker says the grace is over already)."""
        if self.shut_mono is None or self.grace_end is not None:
            return
        now = self.clock.monotonic()
        old = self.clock.time_us() - self.shut_us > round((CLOSE_GRACE + DRAIN_SKEW) * 1e6)
        self.grace_end = now if old else now + CLOSE_GRACE

    def _expect_drained(self) -> bool:
        return (
            not self.model
            and self.grace_end is not None
            and self.clock.monotonic() >= self.grace_end
        )

    @rule()
    def publish(self) -> None:
        body = self._body()
        try:
            message_id = self.queue.publish(body)
        except vsqs.QueueClosed:
            assert self.shut_mono is not None, "refused a publish to an open queue"
            return
        assert not self._must_refuse(), "published after the close grace"
        self._add(message_id, body)

    @rule(delay=DELAY)
    def publish_delayed(self, delay: float) -> None:
        body = self._body()
        try:
            message_id = self.queue.publish(body, delay=delay)
        except vsqs.QueueClosed:
            assert self.shut_mono is not None, "refused a publish to an open queue"
            return
        assert not self._must_refuse(), "published after the close grace"
        key = parse_id(message_id)
        assert key is not None
        due = self._expiry(delay)
        name = f"{message_id}.{format_time(due, self.precision)}"
        self.model[message_id] = Model(body, key, "delayed", due, name)

    def _drained(self) -> None:
        """The queue said it is shut down and drained: it must be, by the model."""
        self._see_marker()
        assert self.shut_mono is not None, "QueueDrained from a queue never shut down"
        assert not self.model, f"QueueDrained while {len(self.model)} messages remain"
        assert self._expect_drained(), "QueueDrained before the close grace was over"

    def _nothing(self) -> None:
        """A receive found nothing: unless the grace still runs, it had to say drained."""
        self._see_marker()
        assert not self._expect_drained(), "an empty, shut-down queue did not say drained"

    @rule(target=leases, visibility=VISIBILITY)
    def receive(self, visibility: float | None) -> object:
        eligible = self._eligible()
        try:
            message = self.queue.receive(visibility_timeout=visibility, timeout=0)
        except vsqs.QueueDrained:
            self._drained()
            return multiple()
        if not eligible:
            assert message is None, "a message was served while none was eligible"
            self._nothing()
            return multiple()
        assert message is not None, f"nothing served while {eligible[0][1]} was eligible"
        self._check_received(message, VT if visibility is None else visibility)
        return message

    @rule(target=leases, count=st.integers(1, 4))
    def receive_batch(self, count: int) -> object:
        eligible = self._eligible()
        try:
            got = self.queue.receive_batch(count, timeout=0)
        except vsqs.QueueDrained:
            self._drained()
            return multiple()
        assert len(got) == min(count, len(eligible))
        if not got:
            self._nothing()
        for message in got:
            self._check_received(message, VT)
        return multiple(*got)

    @precondition(lambda self: self.shut_mono is None)
    @rule(target=leases, count=st.integers(1, 3))
    def receive_while_others_publish(self, count: int) -> object:
        """Messages become ready during the receive's listing; the oldest is unlisted."""
        self.racing, self.raced = count, []
        try:
            message = self.queue.receive(timeout=0)
        finally:
            unused, self.racing = self.racing, 0
        for _ in range(unused):  # the receive listed nothing (its view was fresh)
            body = self._body()
            self._add(self.producer.publish(body), body)
        if message is None:
            # Messages that became ready during the call may be missed by it (the call
            # may be ordered before them); nothing older may.
            missed = [message_id for _, message_id in self._eligible()]
            assert set(missed) <= set(self.raced), "nothing served while a message was eligible"
            return multiple()
        self._check_received(message, VT)
        return message

    @precondition(lambda self: self.shut_mono is None)
    @rule(age=st.sampled_from([0.0, 0.05, 2.0]))
    def shutdown_elsewhere(self, age: float) -> None:
        """Another process shuts the queue down (its marker says *age* seconds ago)."""
        marker = Path(self.dir, ".vsqs", "closed")
        marker.parent.mkdir(exist_ok=True)
        # The drain believes the marker's own time: once it is more than CLOSE_GRACE +
        # DRAIN_SKEW old, the grace is over at first sight, whatever the age it started at
        # (a marker 0.05 s old when it appeared is proven over 1.05 s later, not 1.1 s).
        self.shut_us = self.clock.time_us() - round(age * 1e6)
        marker.write_text(str(self.shut_us))
        self.shut_mono = self.clock.monotonic()

    @rule(message=consumes(leases))
    def delete(self, message: vsqs.Message) -> None:
        model = self.model.get(message.id)
        receipt = self._current(message.receipt)
        live = model is not None and model.name == receipt
        if live and model is not None and model.due > self.clock.time_us():
            # The lease has not expired: the held file must still be there.
            assert os.path.exists(os.path.join(self.dir, receipt))
        present = os.path.exists(os.path.join(self.dir, receipt))
        deleted = self.queue.delete(message)
        assert deleted == present, "delete must report whether it removed the held file"
        if deleted:
            assert live, "deleted a file the model did not hold under that receipt"
            del self.model[message.id]

    @rule(message=consumes(leases))
    def delete_by_receipt_string(self, message: vsqs.Message) -> None:
        present = os.path.exists(os.path.join(self.dir, self._current(message.receipt)))
        assert self.queue.delete(message.receipt) == present
        if present:
            del self.model[message.id]

    @rule(target=leases, message=consumes(leases), seconds=HEARTBEAT)
    def change_visibility(self, message: vsqs.Message, seconds: float) -> object:
        receipt = self._current(message.receipt)
        present = os.path.exists(os.path.join(self.dir, receipt))
        if not present:
            with pytest.raises(vsqs.LeaseLost):
                self.queue.change_visibility(message, seconds)
            return multiple()
        model = self.model[message.id]
        assert model.name == receipt
        updated = self.queue.change_visibility(message, seconds)
        if seconds == 0:
            model.state, model.name, model.due = "ready", "", 0
            return multiple()
        model.due = self._expiry(seconds)
        model.state, model.name = "held", updated.receipt
        if updated.receipt != receipt:
            self.superseded[receipt] = updated.receipt
            self.superseded.pop(updated.receipt, None)
        assert updated.id == message.id
        entry = parse_name(updated.receipt)
        assert entry is not None and entry.expires == model.due
        return updated

    @rule(seconds=ADVANCE)
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @precondition(lambda self: bool(self.model))
    @rule()
    def requeue_expired(self) -> None:
        now = self.clock.time_us()
        on_disk = self._on_disk()
        expected = sum(
            1
            for message_id, m in self.model.items()
            if m.state != "ready" and m.due <= now and on_disk[message_id] == [m.name]
        )
        assert self.queue.requeue_expired() == expected
        for m in self.model.values():
            if m.state != "ready" and m.due <= now:
                m.state, m.name, m.due = "ready", "", 0

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def directory_matches_the_model(self) -> None:
        now = self.clock.time_us()
        on_disk = self._on_disk()
        assert set(on_disk) == set(self.model), "lost or resurrected messages"
        ready = held = delayed = 0
        for message_id, files in on_disk.items():
            assert len(files) == 1, f"{message_id} exists under several names: {files}"
            name, model = files[0], self.model[message_id]
            if model.state == "ready" or (model.due <= now and name == message_id):
                # Ready, or its expiry passed and a consumer already requeued it.
                assert name == message_id
                ready += 1
            else:
                assert name == model.name
                held += model.state == "held"
                delayed += model.state == "delayed"
            with open(os.path.join(self.dir, name), "rb") as handle:
                assert handle.read() == model.body
        counts = self.queue.counts()
        assert counts.new == 0
        assert counts.ready == ready
        assert counts.held + counts.delayed == held + delayed
        assert counts.delayed <= delayed  # a delay that came due may already be requeued
        assert self.queue.size() == len(self.model)


class MillisecondQueueMachine(QueueMachine):
    precision = Precision.MS


SETTINGS = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestQueueModel = QueueMachine.TestCase
TestQueueModel.settings = SETTINGS
TestMillisecondQueueModel = MillisecondQueueMachine.TestCase
TestMillisecondQueueModel.settings = SETTINGS


# -- regressions the machine found ----------------------------------------------------


def test_a_delay_that_came_due_is_served_before_newer_ready_messages(tmp_path: Path) -> None:
    """Found by the machine: a listing requeued due messages but did not re-sort them."""
    clock = ManualClock()
    queue = vsqs.Queue(tmp_path / "q", durable=False, clock=clock)
    delayed = queue.publish(b"delayed", delay=0.25)
    queue.publish(b"newer")
    clock.advance(0.25)
    message = queue.receive(timeout=0)
    assert message is not None and message.id == delayed


def test_an_extended_lease_that_expired_is_served_first(tmp_path: Path) -> None:
    clock = ManualClock()
    queue = vsqs.Queue(tmp_path / "q", durable=False, clock=clock, visibility_timeout=30)
    first = queue.publish(b"first")
    queue.publish(b"second")
    message = queue.receive(timeout=0)
    assert message is not None and message.id == first
    queue.change_visibility(message, 0.25)
    clock.advance(0.25)
    again = queue.receive(timeout=0)
    assert again is not None and again.id == first


def test_a_short_lease_behind_a_long_one_is_served_when_it_expires(tmp_path: Path) -> None:
    clock = ManualClock()
    queue = vsqs.Queue(tmp_path / "q", durable=False, clock=clock, visibility_timeout=30)
    queue.publish(b"long")
    short = queue.publish(b"short")
    queue.publish(b"newest")
    assert queue.receive(timeout=0) is not None  # held for 30 s
    message = queue.receive(visibility_timeout=0.25, timeout=0)
    assert message is not None and message.id == short
    clock.advance(0.25)
    again = queue.receive(timeout=0)
    assert again is not None and again.id == short


def test_the_model_speaks_the_queue_grammar() -> None:
    assert parse_name(format_time(MS_LIMIT, Precision.US)) is not None
    entry = parse_name(f"{MS_LIMIT}.{MS_LIMIT}")
    assert entry is not None and entry.state is State.HELD


def test_a_delay_that_ends_never_passes_an_older_message_listed_as_it_was_made() -> None:
    """Found by the model above: in milliseconds, a message published in the same
    millisecond as a listing is held back until a second listing confirms it; a delayed
    message that became due meanwhile was served before it (FIFO broken)."""
    clock = ManualClock()
    with tempfile.TemporaryDirectory() as path:
        queue = vsqs.Queue(path, durable=False, clock=clock, precision=Precision.MS)
        queue.publish(b"m1")
        queue.publish(b"m2")
        clock.advance(0.001)
        queue.publish(b"m3", delay=0.25)
        first = queue.receive(timeout=0)
        assert first is not None and first.body == b"m1"
        clock.advance(0.25)
        served = [queue.receive(timeout=0) for _ in range(2)]
        assert [m.body for m in served if m] == [b"m2", b"m3"]
