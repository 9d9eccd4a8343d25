"""Deterministic races: the ``_fs`` calls are wrapped with events to force an interleaving.

Every ``Queue`` object below stands for a separate process: they share nothing but the
directory (and the process-wide id source, which the collision tests take over).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _fs
from vsqs._ids import IdSource, Precision
from vsqs.testing import ManualClock, assert_consistent, drain

from .conftest import names

WAIT = 30.0  # seconds an event may take; a guard against hangs, not a speed assertion


class Paused:
    """Holds the first call of an ``_fs`` function matching *match* until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str, match: Callable[..., bool]):
        self.arrived = threading.Event()
        self.release = threading.Event()
        real = getattr(_fs, name)
        lock = threading.Lock()
        taken = False

        def wrapper(*args: Any) -> Any:
            nonlocal taken
            with lock:
                mine = not taken and match(*args)
                taken = taken or mine
            if mine:
                self.arrived.set()
                assert self.release.wait(WAIT), "the test never released the paused call"
            return real(*args)

        monkeypatch.setattr(_fs, name, wrapper)


class Background:
    """Run *call* in a thread; ``result()`` joins it and re-raises what it raised."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._value = call()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
                self._error = exc

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def result(self) -> Any:
        self._thread.join(WAIT)
        assert not self._thread.is_alive(), "the background call never finished"
        if self._error is not None:
            raise self._error
        return self._value


def peer(qdir: Path, clock: ManualClock | None = None, **options: Any) -> vsqs.PlainQueue:
    """Another consumer or producer of the same directory."""
    return vsqs.PlainQueue(qdir, durable=False, clock=clock, **options)


# -- two consumers, one message -------------------------------------------------------


def _claim_race(directory: Path, clock: ManualClock | None, patch: pytest.MonkeyPatch) -> None:
    producer = peer(directory, clock)
    first, second = producer.publish(b"first"), producer.publish(b"second")
    a, b = peer(directory, clock), peer(directory, clock)
    both_there = threading.Barrier(2, timeout=WAIT)
    a_done = threading.Event()
    real = _fs.rename_noreplace

    def claim(src: str, dst: str) -> None:
        if os.path.basename(src) != first or "." not in os.path.basename(dst):
            return real(src, dst)
        both_there.wait()  # both chose `first` and are about to rename it
        if threading.current_thread().name == "B":
            assert a_done.wait(WAIT)
            return real(src, dst)
        try:
            return real(src, dst)
        finally:
            a_done.set()

    results: dict[str, vsqs.Message | None] = {}

    def consumer(queue: vsqs.PlainQueue, name: str) -> None:
        results[name] = queue.receive(timeout=0)

    with patch.context() as patched:
        patched.setattr(_fs, "rename_noreplace", claim)
        threads = [
            threading.Thread(target=consumer, args=(q, name), name=name)
            for q, name in ((a, "A"), (b, "B"))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
    got_a, got_b = results["A"], results["B"]
    assert got_a is not None and got_a.id == first and got_a.body == b"first"
    assert got_b is not None, "the loser gave up although a message was ready"
    assert got_b.id == second and got_b.body == b"second"
    assert sorted(names(directory)) == sorted([got_a.receipt, got_b.receipt])
    assert a.delete(got_a) and b.delete(got_b)


@pytest.mark.parametrize("same_tick", [False, True], ids=["real-clock", "same-expiry"])
def test_two_consumers_claiming_one_message(
    qdir: Path, monkeypatch: pytest.MonkeyPatch, same_tick: bool
) -> None:
    """Both consumers pick the oldest message and reach the claiming rename together;
    exactly one gets it, the other moves on to the next message in the same call.
    With one shared manual clock both even try the very same receipt name.
    """
    for round_ in range(10):  # the loser's next pick must not depend on luck
        _claim_race(qdir / str(round_), ManualClock() if same_tick else None, monkeypatch)


# -- requeue versus delete ------------------------------------------------------------


def _received(qdir: Path, clock: ManualClock) -> tuple[vsqs.PlainQueue, vsqs.Message]:
    owner = peer(qdir, clock, visibility_timeout=30)
    owner.publish(b"job")
    message = owner.receive(timeout=0)
    assert message is not None
    clock.advance(31)  # the lease has expired, nobody has requeued it yet
    return owner, message


REQUEUERS: dict[str, Callable[[vsqs.PlainQueue], object]] = {
    "requeue_expired": lambda q: q.requeue_expired(),
    "receive": lambda q: q.receive(timeout=0),
}


@pytest.mark.parametrize("requeue", REQUEUERS.values(), ids=REQUEUERS.keys())
def test_delete_lands_while_a_requeue_is_under_way(
    qdir: Path, monkeypatch: pytest.MonkeyPatch, requeue: Callable[[vsqs.PlainQueue], object]
) -> None:
    """The owner deletes between another consumer's decision to requeue the expired
    lease and its rename: the message stays deleted (no resurrection) and nobody errs.
    """
    clock = ManualClock()
    owner, message = _received(qdir, clock)
    other = peer(qdir, clock)
    paused = Paused(monkeypatch, "rename_noreplace", lambda src, dst: src.endswith(message.receipt))
    background = Background(lambda: requeue(other))
    assert paused.arrived.wait(WAIT)
    assert owner.delete(message) is True
    paused.release.set()
    assert background.result() in (0, None)  # it requeued nothing, received nothing
    monkeypatch.undo()
    assert names(qdir) == []
    assert peer(qdir, clock).receive(timeout=0) is None
    clock.advance(3600)
    assert peer(qdir, clock).requeue_expired() == 0
    assert_consistent(owner)  # no metadata left behind for a message that is gone


@pytest.mark.parametrize("requeue", REQUEUERS.values(), ids=REQUEUERS.keys())
def test_requeue_lands_before_the_late_delete(
    qdir: Path, requeue: Callable[[vsqs.PlainQueue], object]
) -> None:
    """The expired lease is requeued first; the owner's late delete deletes nothing and
    says so, and the message is delivered again (at least once)."""
    clock = ManualClock()
    owner, message = _received(qdir, clock)
    other = peer(qdir, clock)
    outcome = requeue(other)
    assert owner.delete(message) is False
    # Received again: by the requeuing consumer itself, or by the next one that looks.
    again = [outcome] if isinstance(outcome, vsqs.Message) else drain(other)
    assert [(m.id, m.body, m.receive_count) for m in again] == [(message.id, b"job", 2)]
    other.delete(again[0])
    assert names(qdir) == []


def test_delete_with_an_expired_lease_after_another_consumer_took_the_message(
    qdir: Path,
) -> None:
    """The late owner's delete (and heartbeat) returns False / LeaseLost; the copy now
    held by the other consumer is untouched and remains theirs to delete."""
    clock = ManualClock()
    owner, stale = _received(qdir, clock)
    other = peer(qdir, clock, visibility_timeout=30)
    current = other.receive(timeout=0)
    assert current is not None and current.id == stale.id and current.receipt != stale.receipt
    assert owner.delete(stale) is False
    assert owner.delete(stale.receipt) is False
    with pytest.raises(vsqs.LeaseLost):
        owner.change_visibility(stale, 60)
    with pytest.raises(vsqs.LeaseLost):
        owner.change_visibility(stale, 0)
    assert names(qdir) == [current.receipt]
    assert (qdir / current.receipt).read_bytes() == b"job"
    assert other.delete(current) is True
    assert names(qdir) == []


# -- id collisions --------------------------------------------------------------------


@pytest.fixture
def next_ids(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Ids the process-wide source hands out next, before it falls back to the clock."""
    queued: list[str] = []
    real = IdSource.next

    def next_id(self: IdSource, now_us: int, precision: Precision) -> str:
        return queued.pop(0) if queued else real(self, now_us, precision)

    monkeypatch.setattr(IdSource, "next", next_id)
    return queued


COLLIDING = "1700000000000000"
EXISTING = {
    "ready": COLLIDING,
    "held": f"{COLLIDING}.1700000030000000",
    "being-written": f"{COLLIDING}.new",
    "ms-held": f"{COLLIDING}.1700000030000",
}


def _collision_cases() -> Iterator[Any]:
    for key, existing in EXISTING.items():
        for with_attributes in (False, True):
            label = f"{key}-{'attributes' if with_attributes else 'plain'}"
            yield pytest.param(existing, with_attributes, id=label)


@pytest.mark.parametrize(("existing", "with_attributes"), list(_collision_cases()))
def test_a_publish_colliding_on_an_id_overwrites_nothing(
    qdir: Path, next_ids: list[str], existing: str, with_attributes: bool
) -> None:
    """A peer (a skewed clock, a vsqs 0.3 host) already has a file with the id we draw:
    nothing is overwritten, and both messages are delivered."""
    clock = ManualClock()
    queue = peer(qdir, clock)
    qdir.mkdir(parents=True, exist_ok=True)
    (qdir / existing).write_bytes(b"theirs")
    next_ids.append(COLLIDING)
    attributes = {"k": "v"} if with_attributes else None
    ours = queue.publish(b"ours", attributes=attributes)
    assert (qdir / existing).read_bytes() == b"theirs"
    assert next_ids == []  # the colliding id was really drawn
    if existing.endswith(".new"):
        (qdir / existing).rename(qdir / COLLIDING)  # their publish completes
    clock.advance(3600)  # any held copy expires
    got = drain(queue)
    assert sorted(m.body for m in got) == [b"ours", b"theirs"]
    mine = next(m for m in got if m.body == b"ours")
    assert mine.id == ours
    assert dict(mine.attributes) == (attributes or {})
    assert names(qdir) == []


def test_a_requeue_racing_a_publish_of_the_same_id(
    qdir: Path, monkeypatch: pytest.MonkeyPatch, next_ids: list[str]
) -> None:
    """While an expired message is being requeued, a peer publishes a new message under
    the same id: the new one keeps the id, the requeued one gets a fresh id, its receive
    count goes with it, and nothing is lost or overwritten."""
    clock = ManualClock()
    owner, message = _received(qdir, clock)
    other = peer(qdir, clock)
    paused = Paused(monkeypatch, "rename_noreplace", lambda src, dst: src.endswith(message.receipt))
    background = Background(other.requeue_expired)
    assert paused.arrived.wait(WAIT)
    next_ids.append(message.id)
    assert peer(qdir, clock).publish(b"new") == message.id  # lands between the two steps
    paused.release.set()
    assert background.result() == 1
    monkeypatch.undo()
    assert (qdir / message.id).read_bytes() == b"new"
    got = drain(peer(qdir, clock))
    assert sorted((m.body, m.receive_count) for m in got) == [(b"job", 2), (b"new", 1)]
    requeued = next(m for m in got if m.body == b"job")
    assert requeued.id != message.id
    assert names(qdir) == []
    assert_consistent(owner)
