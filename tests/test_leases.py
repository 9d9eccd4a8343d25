"""Self-renewing leases (issue 16, part 1): ``Queue.lease`` and ``Queue.consume_leases``.

Real clocks and short visibility timeouts where time is the point (a renewal that comes
late shows up as a second delivery), real processes for kills and pauses. Nothing here
asserts how fast anything is.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import vsqs
from vsqs import _fs, _scan

from . import _lease_workers as workers
from . import procs
from .fixtures_core import children, wait_until

RENEWER = "vsqs-lease-renewer"


def renewer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(RENEWER) and t.is_alive()]


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "q")


@pytest.fixture
def short_lease_queue(path: str) -> Iterator[vsqs.PlainQueue]:
    q = vsqs.PlainQueue(path, visibility_timeout=0.3, durable=False)
    yield q
    q.close()


def received(queue: vsqs.PlainQueue, body: bytes = b"job") -> vsqs.Message:
    queue.publish(body)
    message = queue.receive(timeout=0)
    assert message is not None
    return message


# -- the guarantees of the issue --------------------------------------------------------


def test_a_3s_job_under_a_half_second_timeout_is_never_delivered_twice(
    path: str, tmp_path: Path
) -> None:
    """The *extend* arrow on a timer: while a 3 s job runs under a 0.5 s visibility
    timeout, a consumer in another process polls all along and gets nothing."""
    started, go, stop, report = (str(tmp_path / n) for n in ("started", "go", "stop", "report"))
    queue = vsqs.PlainQueue(path, visibility_timeout=0.5, durable=False)
    queue.publish(b"slow job")
    with children() as kids:
        poller = kids.start(workers.poll_until_stopped, path, started, go, stop, report)
        wait_until(lambda: os.path.exists(started), "the poller to start")
        message = queue.receive(timeout=0)
        assert message is not None
        with queue.lease(message) as lease:
            procs.dump(go, True)  # the poller starts polling now
            time.sleep(3)
        procs.dump(stop, True)
        kids.join(poller)
    assert procs.load(report) == []
    assert lease.renewals >= 5  # about one per 1/3 s; at least what 3 s cannot do without
    assert queue.counts().total == 0  # and leaving the block deleted it


def test_a_killed_workers_message_comes_back_after_the_timeout(path: str, tmp_path: Path) -> None:
    """A worker killed with SIGKILL renews no more: its lease runs out and the message
    is delivered again (receive count 2). While it lived, nobody else got it."""
    holding = str(tmp_path / "holding")
    queue = vsqs.PlainQueue(path, visibility_timeout=0.5, durable=False)
    queue.publish(b"job")
    with children() as kids:
        worker = kids.start(workers.lease_and_hang, path, holding)
        wait_until(lambda: os.path.exists(holding), "the worker to take its lease")
        deadline = time.monotonic() + 1.5  # three timeouts: renewals must have happened
        while time.monotonic() < deadline:
            assert queue.receive(timeout=0) is None
            time.sleep(0.02)
        assert worker.pid is not None
        os.kill(worker.pid, signal.SIGKILL)
        worker.join()
    again = queue.receive(timeout=10)
    assert again is not None
    assert (again.body, again.receive_count) == (b"job", 2)
    assert again.receipt != procs.load(holding)


def test_an_exception_releases_at_once_and_counts_a_receive(path: str, tmp_path: Path) -> None:
    """The *extend* then *ready* arrows (a release): leaving the block by an exception
    puts the message back now (not after the 30 s timeout), counted, so max_receives
    dead-letters it."""
    dlq = vsqs.PlainQueue(tmp_path / "dlq", durable=False)
    queue = vsqs.PlainQueue(
        path, visibility_timeout=30, durable=False, dead_letter=dlq, max_receives=2
    )
    message = received(queue, b"poison")
    with pytest.raises(RuntimeError, match="boom"), queue.lease(message):
        raise RuntimeError("boom")
    again = queue.receive(timeout=0)
    assert again is not None and again.receive_count == 2
    with pytest.raises(KeyError), queue.lease(again) as lease:
        raise KeyError("again")
    assert lease.ended and lease.message.queue == dlq.path  # dead-lettered, not lost
    assert queue.receive(timeout=0) is None
    dead = dlq.receive(timeout=0)
    assert dead is not None and dead.body == b"poison"
    queue.close()


def test_a_lease_lost_while_the_process_was_stopped_raises_and_deletes_nothing(
    path: str, tmp_path: Path
) -> None:
    """A worker paused (SIGSTOP, as a long GC or a hung NFS would) past its lease: the
    test receives the message meanwhile; when the worker resumes, its renewal finds the
    lease lost and leaving the block raises LeaseLost; the test's copy is untouched."""
    holding, report = str(tmp_path / "holding"), str(tmp_path / "report")
    queue = vsqs.PlainQueue(path, visibility_timeout=0.5, durable=False)
    queue.publish(b"job")
    with children() as kids:
        worker = kids.start(workers.lease_through_a_pause, path, holding, report)
        wait_until(lambda: os.path.exists(holding), "the worker to take its lease")
        assert worker.pid is not None
        os.kill(worker.pid, signal.SIGSTOP)
        try:
            theirs = queue.receive(timeout=10)  # once the stopped worker's lease ran out
        finally:
            os.kill(worker.pid, signal.SIGCONT)
        assert theirs is not None and theirs.receive_count == 2
        kids.join(worker)
    outcome = procs.load(report)
    assert outcome["raised"] == "LeaseLost"
    assert outcome["reason"] == "expired"
    assert queue.delete(theirs)  # still held by the test: the worker deleted nothing


def test_past_max_duration_the_lease_runs_out_and_leaving_raises(
    short_lease_queue: vsqs.PlainQueue, path: str
) -> None:
    """Renewals stop at max_duration: another consumer gets the message; leaving the
    block raises LeaseLost("expired") and does not delete the other consumer's copy."""
    other = vsqs.PlainQueue(path, visibility_timeout=30, durable=False)
    message = received(short_lease_queue)
    with (
        pytest.raises(vsqs.LeaseLost) as raised,
        short_lease_queue.lease(message, max_duration=0.6) as lease,
    ):
        got = other.receive(timeout=10)  # once renewals stopped and the lease ran out
    assert raised.value.reason == "expired" and lease.lost is raised.value
    assert lease.renewals >= 1
    assert lease.message.expires_at < lease.deadline + 0.05  # not renewed past it
    assert got is not None and got.receive_count == 2
    assert other.delete(got)


# -- threads: one per handle, never two actors on one lease -----------------------------


def test_many_leases_on_one_handle_share_one_thread_that_ends_with_them(
    short_lease_queue: vsqs.PlainQueue,
) -> None:
    """Fifty leases, one renewal thread; it ends when the last lease does."""
    assert renewer_threads() == []
    for n in range(50):
        short_lease_queue.publish(b"%d" % n)
    leases = [short_lease_queue.lease(m) for m in short_lease_queue.receive_batch(50)]
    assert len(leases) == 50
    wait_until(lambda: all(lease.renewals >= 2 for lease in leases), "two renewals each")
    assert len(renewer_threads()) == 1
    for lease in leases[:-1]:
        lease.delete()
    assert len(renewer_threads()) == 1  # one lease is still open
    with leases[-1]:
        pass
    wait_until(lambda: renewer_threads() == [], "the renewal thread to end")
    assert short_lease_queue.counts().total == 0


def test_close_stops_renewing_and_a_later_lease_starts_again(
    short_lease_queue: vsqs.PlainQueue,
) -> None:
    lease = short_lease_queue.lease(received(short_lease_queue))
    wait_until(lambda: lease.renewals >= 1, "a renewal")
    short_lease_queue.close()
    assert renewer_threads() == []
    renewals = lease.renewals
    time.sleep(0.5)
    assert lease.renewals == renewals  # no longer renewed: it runs out
    later = short_lease_queue.lease(received(short_lease_queue, b"later"))
    wait_until(lambda: later.renewals >= 1, "a renewal after close")
    later.delete()


def test_the_renewal_and_the_user_never_act_on_one_lease_at_once(
    short_lease_queue: vsqs.PlainQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the renewal thread is inside its rename, a delete from the user's thread
    waits for it, then deletes the renewed lease (no LeaseLost, nothing left)."""
    inside, go = threading.Event(), threading.Event()
    real = _fs.rename_noreplace

    def rename(src: str, dst: str) -> None:
        if threading.current_thread().name.startswith(RENEWER):
            inside.set()
            assert go.wait(30)
        real(src, dst)

    monkeypatch.setattr(_fs, "rename_noreplace", rename)
    lease = short_lease_queue.lease(received(short_lease_queue))
    assert inside.wait(10)
    deleting = threading.Thread(target=lease.delete)
    deleting.start()
    deleting.join(0.3)
    assert deleting.is_alive()  # blocked behind the renewal
    go.set()
    deleting.join(10)
    assert not deleting.is_alive()
    assert lease.lost is None and lease.renewals >= 1  # (another may follow before it)
    assert short_lease_queue.counts().total == 0


def test_a_renewal_costs_one_rename_and_nothing_else(
    short_lease_queue: vsqs.PlainQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every filesystem call the renewal thread makes goes through _fs (or lists the
    directory through _scan): trace them all; renewals are one rename_noreplace each."""
    calls: Counter[str] = Counter()

    def traced(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread().name.startswith(RENEWER):
                calls[name] += 1
            return function(*args, **kwargs)

        return call

    for module in (_fs, _scan):
        for name, function in vars(module).items():
            if isinstance(function, types.FunctionType) and not name.startswith("_"):
                monkeypatch.setattr(module, name, traced(f"{module.__name__}.{name}", function))
    leases = [short_lease_queue.lease(received(short_lease_queue, b"%d" % n)) for n in range(3)]
    wait_until(lambda: all(lease.renewals >= 3 for lease in leases), "three renewals each")
    for lease in leases:
        lease.delete()  # under the lease's lock: no renewal is half done
    assert calls == {"vsqs._fs.rename_noreplace": sum(lease.renewals for lease in leases)}


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_starts_its_own_renewal_thread(short_lease_queue: vsqs.PlainQueue) -> None:
    """The child inherits no renewal thread (it did not survive the fork) and no leases
    (they are the parent's): its own first lease starts a thread of its own."""
    parents = short_lease_queue.lease(received(short_lease_queue, b"parent's"))
    wait_until(lambda: parents.renewals >= 1, "the parent's renewal thread")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        status = 1
        try:
            assert renewer_threads() == []
            mine = short_lease_queue.lease(received(short_lease_queue, b"child's"))
            wait_until(lambda: mine.renewals >= 1, "the child's renewal", timeout=10)
            mine.delete()
            status = 0
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert parents.lost is None
    parents.delete()  # still the parent's, renewed all along
    assert short_lease_queue.counts().total == 0


# -- the user's controls ------------------------------------------------------------------


def test_release_with_a_delay_is_a_backoff(short_lease_queue: vsqs.PlainQueue) -> None:
    with short_lease_queue.lease(received(short_lease_queue)) as lease:
        lease.release(delay=0.4)
        lease.release()  # ended: nothing more happens
    assert lease.ended and lease.lost is None
    assert short_lease_queue.receive(timeout=0) is None  # not yet
    again = short_lease_queue.receive(timeout=10)
    assert again is not None and again.receive_count == 2


def test_delete_inside_the_block_ends_it(short_lease_queue: vsqs.PlainQueue) -> None:
    with short_lease_queue.lease(received(short_lease_queue)) as lease:
        lease.delete()
        lease.delete()  # idempotent
    assert repr(lease).endswith("ended, 0 renewals>")
    assert short_lease_queue.counts().total == 0


def test_the_message_follows_the_renewals(short_lease_queue: vsqs.PlainQueue) -> None:
    message = received(short_lease_queue)
    with short_lease_queue.lease(message, visibility_timeout=0.3) as lease:
        wait_until(lambda: lease.renewals >= 1, "a renewal")
        assert lease.message.receipt != message.receipt
        assert lease.message.expires_at > message.expires_at
        assert lease.message.body == message.body


def test_consume_leases_yields_leases_until_the_timeout(short_lease_queue: vsqs.PlainQueue) -> None:
    short_lease_queue.publish_batch([b"a", b"b"])
    bodies = []
    for lease in short_lease_queue.consume_leases(timeout=0):
        with lease:
            bodies.append(lease.message.body)
    assert bodies == [b"a", b"b"]
    assert short_lease_queue.counts().total == 0


def test_bad_arguments_are_refused(short_lease_queue: vsqs.PlainQueue, tmp_path: Path) -> None:
    message = received(short_lease_queue)
    with pytest.raises(ValueError, match="max_duration"):
        short_lease_queue.lease(message, max_duration=-1)
    with pytest.raises(ValueError, match="visibility_timeout"):
        short_lease_queue.lease(message, visibility_timeout=0)
    with pytest.raises(vsqs.InvalidId):
        short_lease_queue.lease(message.receipt)  # type: ignore[arg-type]
    with pytest.raises(vsqs.InvalidId):
        vsqs.PlainQueue(tmp_path / "other").lease(message)
    assert renewer_threads() == []  # no lease was made


def test_a_null_queue_has_the_lease_methods_and_holds_nothing() -> None:
    null = vsqs.NullQueue()
    assert list(null.consume_leases(timeout=0)) == []
    with pytest.raises(vsqs.LeaseLost):
        null.lease(vsqs.Message("1", b"", "1.2", 0.0))


def test_a_stale_receipt_of_a_long_lease_that_was_released_is_not_superseded(
    fast_tmp_path: Path,
) -> None:
    """A lease extended past the requeue hold's length and then released: its receipt,
    used again, says "expired" (returned), never "superseded" with another consumer's
    lease as ``current`` (which a caller would then act on)."""
    queue = vsqs.PlainQueue(fast_tmp_path / "q", visibility_timeout=30)
    queue.publish(b"x")
    first = queue.receive(timeout=0)
    assert first is not None
    extended = queue.change_visibility(first, 3600)
    queue.change_visibility(extended, 0)  # released: back to the queue
    other = vsqs.PlainQueue(queue.path)
    again = other.receive(timeout=0)
    assert again is not None and again.receive_count == 2
    with pytest.raises(vsqs.LeaseLost) as lost:
        vsqs.PlainQueue(queue.path).change_visibility(extended.receipt, 10)
    assert lost.value.reason == "expired"
    assert other.delete(again)  # the other consumer's lease was never touched
