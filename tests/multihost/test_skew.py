"""Hosts whose clocks disagree: one host's processes run under ``faketime``.

libfaketime (Debian's ``faketime``) shifts a process's clocks by a fixed offset, as a
host whose clock is off would; the test itself, on the true clock, times what happens.
The rule these tests hold vsqs to (the Shared filesystems guide states it): with clocks
at most *S* apart, a lease taken for *V* seconds is not taken back before ``V - S``
nor kept past ``V + S`` (plus a sweep), FIFO holds per producer, dedup windows shrink
by at most *S*, and nothing is lost.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import vsqs

from ._rig import why_no_faketime
from ._runs import check_exactly_once, run_hosts
from ._workers import read_report, spawn

SKEW = 3.0
LEASE = 5.0


@pytest.fixture(autouse=True)
def _faketime() -> None:
    reason = why_no_faketime()
    if reason is not None:
        pytest.skip(f"cannot skew clocks: {reason}")


def test_skewed_hosts_exactly_once_fifo_and_dedup(
    hosts: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """One host 5 s ahead, one 5 s behind: no error, nothing lost or twice, FIFO, dedup."""
    published, consumed = run_hosts(hosts, tmp_path, 150, skews=(None, "+5s", "-5s"), dedup=True)
    check_exactly_once(published, consumed, 150)


@pytest.mark.parametrize("offset", [f"+{SKEW:g}s", f"-{SKEW:g}s"])
def test_lease_is_kept_within_the_skew_bound(
    hosts: tuple[Path, Path, Path], tmp_path: Path, offset: str
) -> None:
    """A lease of V seconds taken by a skewed host comes back between V - S and V + S."""
    owner, b, _ = hosts
    vsqs.Queue(owner).publish(b"held")
    holder = spawn("hold", faketime=offset, queue=str(b), report=str(tmp_path / "held"),
                   options={"visibility_timeout": LEASE})  # fmt: skip
    assert holder.wait(timeout=60) == 0  # it dies holding the message
    [(body, receipt)] = read_report(tmp_path / "held")
    assert body == "held"
    # When it claimed, on the true clock: its receipt's expiry, less its skew and lease.
    skew = float(offset[:-1])
    claimed_at = int(receipt.partition(".")[2]) / 1e6 - skew - LEASE
    queue = vsqs.Queue(owner, poll_interval=0.05)  # a host with the true time
    message = queue.receive(timeout=LEASE + SKEW + 10)
    back_after = time.time() - claimed_at
    assert message is not None
    assert message.body == b"held"
    assert message.receive_count == 2
    # Back once the lease ended by the holder's clock: V + its skew, plus a poll or so.
    assert LEASE + skew - 0.1 <= back_after <= LEASE + skew + 2.0, back_after
    assert LEASE - SKEW - 0.1 <= back_after <= LEASE + SKEW + 2.0  # the documented bound
