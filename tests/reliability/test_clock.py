"""Clock trouble: publishers behind the consumers, clock steps, skew between hosts."""

from __future__ import annotations

import time
from pathlib import Path

import vsqs
from vsqs.testing import ManualClock, assert_consistent, drain, fresh_ids

from . import _faultchild

T0 = 1_700_000_000.0


def test_a_publisher_behind_collides_and_is_re_ided(tmp_path: Path) -> None:
    """Its ids hit existing ready and held messages: nothing is overwritten, nothing lost.

    A ready name that exists makes the publisher draw a fresh id. A held ``<id>.<expiry>``
    does not block the ready name ``<id>``; the two coexist until the lease ends, and
    then the requeue (which never replaces either) gives the returning message a fresh id.
    """
    clock = ManualClock(T0)
    ahead = vsqs.Queue(tmp_path / "q", visibility_timeout=30, clock=clock)
    existing = [ahead.publish(b"a%d" % n) for n in range(3)]
    held = ahead.receive(timeout=0)
    assert held is not None and held.id == existing[0]
    with fresh_ids(clock):  # the other host draws the same ids again
        behind = vsqs.Queue(tmp_path / "q", clock=clock)
        mine = [behind.publish(b"b%d" % n) for n in range(5)]
        assert not set(mine) & set(existing[1:])  # ready ids are never reused
        assert (tmp_path / "q" / existing[1]).read_bytes() == b"a1"
        clock.advance(31)  # the held one returns and meets the same-id ready message
        bodies = sorted(m.body for m in drain(ahead))
    assert bodies == [b"a0", b"a1", b"a2", b"b0", b"b1", b"b2", b"b3", b"b4"]
    assert_consistent(ahead)


def test_processes_with_skewed_clocks_lose_nothing(tmp_path: Path) -> None:
    """Real processes an hour behind and ahead: all delivered; FIFO follows their clocks."""
    path = str(tmp_path / "q")
    q = vsqs.Queue(path)
    own = [q.publish(b"own:%d" % n) for n in range(100)]
    ids: dict[float, list[str]] = {}
    for offset in (-3600.0, 3600.0):
        result = _faultchild.run(
            _faultchild.publish_skewed, path, str(tmp_path / f"{offset}.json"), offset
        )
        ids[offset] = result["ids"]["value"].split()
    got = [m.id for m in drain(q)]
    assert sorted(got) == sorted(own + ids[-3600.0] + ids[3600.0])
    # Ordering is by the publisher's clock: the slow host's messages jump the queue.
    assert got == ids[-3600.0] + own + ids[3600.0]


def test_a_clock_step_backwards_lengthens_a_lease_by_the_step(tmp_path: Path) -> None:
    """Stepped back 100 s after a receive, the lease ends 100 s later; never stranded."""
    clock = ManualClock(T0)
    q = vsqs.Queue(tmp_path / "q", visibility_timeout=30, clock=clock)
    q.publish(b"m")
    assert q.receive(timeout=0) is not None
    clock.set(T0 - 100)
    clock.advance(129)
    assert q.receive(timeout=0) is None  # 129 s passed, but the clock says T0 + 29
    clock.advance(1)
    again = q.receive(timeout=0)
    assert again is not None and again.body == b"m" and again.receive_count == 2
    assert q.delete(again)


def test_a_consumer_ahead_takes_over_a_lease_early(tmp_path: Path) -> None:
    """Skew between consumers shortens a lease by the skew: at least once, never lost."""
    slow = vsqs.Queue(tmp_path / "q", visibility_timeout=30, clock=ManualClock(T0))
    fast = vsqs.Queue(tmp_path / "q", visibility_timeout=30, clock=ManualClock(T0 + 31))
    slow.publish(b"m")
    first = slow.receive(timeout=0)
    second = fast.receive(timeout=0)  # its clock says the lease already ended
    assert first is not None and second is not None and second.id == first.id
    assert slow.delete(first) is False  # the slow consumer learns it lost the lease
    assert fast.delete(second) is True
    assert_consistent(slow)


def test_clean_spares_a_young_new_of_a_publisher_behind(tmp_path: Path) -> None:
    """A `.new` with an old id but a fresh mtime is still being written: not debris."""
    q = vsqs.Queue(tmp_path / "q", clock=ManualClock(time.time()))
    (tmp_path / "q" / f"{round((time.time() - 7200) * 1e6)}.new").write_bytes(b"writing")
    assert q.clean(older_than=3600) == 0
    assert q.counts().new == 1
