"""The defects a new user met in the first hour (issue 13, items 1 to 6), one test each.

Each test failed on vsqs 1.0.0.dev0 as first released.
"""

from __future__ import annotations

import itertools
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import vsqs
from vsqs.testing import ManualClock

from . import procs
from .fixtures_core import children

VSQS = str(Path(sys.executable).with_name("vsqs"))  # the installed command

# -- 1. strict FIFO with several consumers ----------------------------------------------


def test_every_consumer_receives_one_producers_messages_in_order(tmp_path: Path) -> None:
    """Four consumer processes share a 20k backlog of one producer: each one receives
    the messages in publish order (no consumer ever gets n+k before n), and together
    they receive each message exactly once."""
    path = str(tmp_path / "q")
    total = 20_000
    queue = vsqs.Queue(path, durable=False)
    queue.publish_batch([str(n).encode() for n in range(total)])
    reports = [str(tmp_path / f"consumer-{n}.json") for n in range(4)]
    with children() as kids:
        for report in reports:
            kids.start(procs.consume_in_order, path, report)
        kids.join_all(timeout=120)
    sequences = [procs.load(report) for report in reports]
    for sequence in sequences:
        inversions = sum(1 for a, b in itertools.pairwise(sequence) if b < a)
        assert inversions == 0, f"a consumer received {inversions} messages out of order"
    delivered = sorted(n for sequence in sequences for n in sequence)
    assert delivered == list(range(total))


# -- 2. capacity counts the messages already there ---------------------------------------


def test_capacity_holds_on_a_queue_that_already_has_messages(tmp_path: Path) -> None:
    path = tmp_path / "q"
    unbounded = vsqs.Queue(path, durable=False)
    unbounded.publish_batch([b"old"] * 10)
    bounded = vsqs.Queue(path, durable=False, capacity=5)
    with pytest.raises(vsqs.QueueFull):
        bounded.publish(b"x", timeout=0)
    assert bounded.size() == 10


def test_a_stale_counter_is_checked_against_a_listing(tmp_path: Path) -> None:
    """Messages published without a capacity (or by vsqs 0.3) after the counter was
    written are counted once the counter has not been checked for a while."""
    clock = ManualClock()
    path = tmp_path / "q"
    bounded = vsqs.Queue(path, durable=False, capacity=5, clock=clock)
    bounded.publish(b"a", timeout=0)
    vsqs.Queue(path, durable=False, clock=clock).publish_batch([b"other"] * 4)
    clock.advance(2)  # more than VERIFY_INTERVAL since this producer last listed
    with pytest.raises(vsqs.QueueFull):
        bounded.publish(b"b", timeout=0)
    assert bounded.size() == 5


def test_cli_publish_with_capacity_counts_existing_messages(tmp_path: Path) -> None:
    queue = str(tmp_path / "q")
    vsqs_cli = [VSQS]
    subprocess.run([*vsqs_cli, "publish", "-q", queue, "a", "b", "c"], check=True, timeout=60)
    full = subprocess.run(
        [*vsqs_cli, "publish", "--capacity", "2", "--timeout", "0", queue, "d", "e"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert full.returncode == 3, full.stderr
    assert vsqs.Queue(queue).size() == 3


# -- 3. close() releases this handle; shutdown() ends the stream ------------------------------


def test_close_releases_only_this_handle(tmp_path: Path) -> None:
    path = tmp_path / "q"
    with vsqs.Queue(path, durable=False) as first:
        first.publish(b"a")
    first.close()
    assert not first.is_shutdown
    other = vsqs.Queue(path, durable=False)
    other.publish(b"b")  # the queue goes on for everybody, and for the closed handle too
    first.publish(b"c")
    assert [m.body for m in vsqs.testing.drain(other)] == [b"a", b"b", b"c"]


def test_shutdown_ends_the_stream_in_every_process(tmp_path: Path) -> None:
    path = str(tmp_path / "q")
    vsqs.Queue(path, durable=False).shutdown()
    report = str(tmp_path / "publish.json")
    with children() as kids:
        kids.join(kids.start(procs.publish_when_closed, path, report))
    assert procs.load(report) == {"closed": True, "error": "QueueClosed", "path": path}


# -- 4. "shut down and drained" is known at once -------------------------------------------


def _shut_down_seconds_ago(path: Path, seconds: float, *, old_format: bool = False) -> None:
    """Shut a queue down, then date its marker *seconds* into the past (as if it had been
    shut down then): its text, or, for a pre-1.0 empty marker, its modification time."""
    vsqs.Queue(path, durable=False).shutdown()
    marker = path / ".vsqs" / "closed"
    past = vsqs.SystemClock().time_us() - round(seconds * 1e6)
    if old_format:
        marker.write_bytes(b"")
        os.utime(marker, ns=(past * 1000, past * 1000))
    else:
        marker.write_bytes(str(past).encode())


@pytest.mark.parametrize("old_format", [False, True])
def test_a_fresh_handle_knows_at_once_that_an_old_shutdown_drained(
    tmp_path: Path, old_format: bool
) -> None:
    path = tmp_path / "q"
    _shut_down_seconds_ago(path, 5, old_format=old_format)
    with pytest.raises(vsqs.QueueDrained):
        vsqs.Queue(path, durable=False).receive(timeout=0)
    with pytest.raises(vsqs.QueueDrained):
        vsqs.Queue(path, durable=False).receive(timeout=0.05)


def test_a_recent_shutdown_still_waits_the_grace(tmp_path: Path) -> None:
    """Within the grace, a message may still arrive: an empty listing proves nothing."""
    path = tmp_path / "q"
    vsqs.Queue(path, durable=False).shutdown()
    assert vsqs.Queue(path, durable=False).receive(timeout=0) is None
    with pytest.raises(vsqs.QueueDrained):
        vsqs.Queue(path, durable=False).receive(timeout=1)


def test_cli_receive_on_a_drained_queue_exits_4(tmp_path: Path) -> None:
    path = tmp_path / "q"
    _shut_down_seconds_ago(path, 5)
    result = subprocess.run(
        [VSQS, "receive", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 4, result.stderr


# -- 5. heartbeats act on the current lease ------------------------------------------------


def test_delete_with_the_receipt_before_a_heartbeat_deletes(tmp_path: Path) -> None:
    clock = ManualClock()
    q = vsqs.Queue(tmp_path / "q", visibility_timeout=30, clock=clock)
    q.publish(b"job")
    first = q.receive(timeout=0)
    assert first is not None
    second = q.change_visibility(first, 30)
    third = q.change_visibility(first, 60)  # the first receipt still works here
    assert third.receipt != second.receipt
    assert q.delete(first) is True
    assert q.counts().total == 0
    assert q.delete(second) is False  # deleted already: not an error, nothing deleted
    clock.advance(120)
    assert q.receive(timeout=0) is None  # it never comes back


def test_lease_lost_says_what_happened(tmp_path: Path) -> None:
    clock = ManualClock()
    path = tmp_path / "q"
    q = vsqs.Queue(path, visibility_timeout=30, clock=clock)
    other = vsqs.Queue(path, visibility_timeout=30, clock=clock)
    q.publish(b"expires")
    expired = q.receive(timeout=0)
    assert expired is not None
    clock.advance(31)
    assert q.requeue_expired() == 1
    with pytest.raises(vsqs.LeaseLost) as lost:
        other.change_visibility(expired, 10)
    assert lost.value.reason == "expired"
    assert "visibility timeout expired" in str(lost.value)

    again = q.receive(timeout=0)
    assert again is not None
    assert q.delete(again)
    with pytest.raises(vsqs.LeaseLost) as lost:
        other.change_visibility(again, 10)
    assert lost.value.reason == "deleted"

    q.publish(b"extended")
    held = q.receive(timeout=0)
    assert held is not None
    newer = q.change_visibility(held, 60)
    with pytest.raises(vsqs.LeaseLost) as lost:
        other.change_visibility(held, 10)  # another handle: the receipt was superseded
    assert (lost.value.reason, lost.value.current) == ("superseded", newer.receipt)


def test_lease_lost_pickles_with_its_reason() -> None:
    error = vsqs.LeaseLost("1.2", reason="superseded", current="1.3")
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes, just made
    assert (copy.reason, copy.current, str(copy)) == ("superseded", "1.3", str(error))


# -- 6. a queue object is always true ------------------------------------------------------


def test_an_empty_queue_and_its_dead_letter_queue_are_true(tmp_path: Path) -> None:
    q = vsqs.Queue(tmp_path / "q", dead_letter=tmp_path / "dlq", max_receives=3)
    assert len(q) == 0
    assert bool(q) is True
    assert q.dead_letter
    assert vsqs.NullQueue()


def test_close_releases_the_descriptors_of_dot_vsqs(tmp_path: Path) -> None:
    """Metadata is reached through descriptors of .vsqs and its directories; close()
    releases them, as it releases a file, and the handle opens them again when used."""

    def open_under_vsqs() -> list[str]:
        found = []
        for name in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{name}")
            except FileNotFoundError:
                continue  # RACE: the listing's own descriptor, closed meanwhile
            if target.startswith(f"{tmp_path / 'q'}/.vsqs"):  # not other tests' queues
                found.append(target)
        return found

    q = vsqs.Queue(tmp_path / "q", durable=False)
    q.publish(b"m", attributes={"k": "v"})
    assert open_under_vsqs()
    q.close()
    assert open_under_vsqs() == []
    message = q.receive(timeout=0)
    assert message is not None and dict(message.attributes) == {"k": "v"}
    q.close()
    assert open_under_vsqs() == []
