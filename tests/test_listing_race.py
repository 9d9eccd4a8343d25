"""A directory listing is not a snapshot; FIFO must survive that (one producer, one consumer)."""

from __future__ import annotations

from pathlib import Path

import pytest

import vsqs
from vsqs import _scan


def test_a_listing_that_misses_an_older_message_does_not_break_fifo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A and B become ready (in that order) while the consumer's scandir runs, and the
    kernel returns B but not A, as a hashed directory may. B must not be served first."""
    q = vsqs.Queue(tmp_path / "q", durable=False)
    producer = vsqs.Queue(tmp_path / "q", durable=False)
    real_scan = _scan.scan
    calls = []

    def racing_scan(path: str) -> _scan.Listing:
        calls.append(path)
        if len(calls) > 1:
            return real_scan(path)
        first = producer.publish(b"A")  # both made ready during this listing...
        producer.publish(b"B")
        listing = real_scan(path)
        # ...and the kernel's readdir happened to miss A's new name.
        listing.ready = [code for code in listing.ready if vsqs._ids.decode_ready(code) != first]
        return listing

    monkeypatch.setattr(_scan, "scan", racing_scan)
    message = q.receive(timeout=0)
    assert message is not None and message.body == b"A"
    assert len(calls) == 2  # the second listing confirmed what the first held back
    again = q.receive(timeout=0)
    assert again is not None and again.body == b"B"


def test_messages_from_a_publisher_whose_clock_runs_ahead_are_not_starved(
    tmp_path: Path,
) -> None:
    """Ids in the future (a skewed host) look 'created during the listing' every time;
    they are served by the second listing that sees them."""
    q = vsqs.Queue(tmp_path / "q", durable=False)
    future_us = q.clock.time_us() + 3_600_000_000
    (tmp_path / "q" / str(future_us)).write_bytes(b"from the future")
    message = q.receive(timeout=0)
    assert message is not None and message.body == b"from the future"


def test_a_skewed_publishers_older_message_missed_by_a_listing_is_served_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the state machine: a publisher whose clock runs ahead makes A then B
    ready during a listing that misses A. The next listing confirms B and sees A for the
    first time: A must still come before B (it blocks B until it is confirmed itself)."""
    from vsqs.testing import ManualClock

    q = vsqs.Queue(tmp_path / "q", durable=False)
    ahead = ManualClock(start=q.clock.time_us() / 1e6 + 3600)
    producer = vsqs.Queue(tmp_path / "q", durable=False, clock=ahead)
    real_scan = _scan.scan
    calls = []

    def racing_scan(path: str) -> _scan.Listing:
        calls.append(path)
        if len(calls) > 1:
            return real_scan(path)
        first = producer.publish(b"A")
        producer.publish(b"B")
        listing = real_scan(path)
        listing.ready = [code for code in listing.ready if vsqs._ids.decode_ready(code) != first]
        return listing

    monkeypatch.setattr(_scan, "scan", racing_scan)
    # A call that overlaps the publishes may miss them; none may serve B before A.
    received = [q.receive(timeout=0) for _ in range(4)]
    assert [m.body for m in received if m is not None] == [b"A", b"B"]
