"""Three hosts share one queue: the owner's directory and two sshfs mounts of it.

Each host runs one publisher and two consumers, all real processes. Through the mounts
vsqs takes its link-then-unlink path (sshfs has no atomic no-replace rename) and sees no
inotify event for the other hosts' work, so this is the run that shows a queue on a
network filesystem is exactly-once per publish and FIFO per producer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import vsqs
from vsqs import _host
from vsqs.testing import assert_consistent

from ._runs import check_exactly_once, run_hosts

PER_HOST = 300


@pytest.mark.parametrize("hosts", ["cache-no", "fine"], indirect=True)
def test_three_hosts_exactly_once_fifo(hosts: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """Publish on every host, consume on every host: 0 errors, 0 lost, 0 twice, FIFO."""
    assert _host.filesystem_type(str(hosts[1])) == "fuse.sshfs"
    published, consumed = run_hosts(hosts, tmp_path, PER_HOST)
    check_exactly_once(published, consumed, PER_HOST)
    assert_consistent(vsqs.Queue(hosts[0]))
    assert sorted(p.name for p in hosts[0].iterdir() if p.name != ".vsqs") == []
    for h in range(3):  # every host saw, and claimed, what the others published
        assert len(consumed[f"h{h}c0"]) + len(consumed[f"h{h}c1"]) > 0


@pytest.mark.stress
@pytest.mark.timeout(3600)
def test_three_hosts_stress(
    hosts: tuple[Path, Path, Path], tmp_path: Path, stress_long: bool
) -> None:
    """make stress: 3 hosts x 4 processes (1 publisher, 3 consumers) x 10,000 messages."""
    if not stress_long:
        pytest.skip("long mode is off: run make stress (or set VSQS_STRESS_LONG=1)")
    published, consumed = run_hosts(hosts, tmp_path, 10_000, consumers=3)
    check_exactly_once(published, consumed, 10_000)
    assert_consistent(vsqs.Queue(hosts[0]))


def test_attributes_cross_hosts(hosts: tuple[Path, Path, Path]) -> None:
    """Attributes published on one host are received on every other (sshfs numbers inodes
    per mount, so vsqs does not match metadata to files by inode there)."""
    owner, b, c = hosts
    vsqs.Queue(owner)
    for source, target in ((b, c), (owner, c), (b, owner), (c, b)):
        vsqs.Queue(source, durable=False).publish(b"x", attributes={"from": source.parent.name})
        queue = vsqs.Queue(target, durable=False)
        message = queue.receive(timeout=0)
        assert message is not None
        assert message.attributes == {"from": source.parent.name}
        assert queue.delete(message)
    assert_consistent(vsqs.Queue(owner))
    assert sorted(p.name for p in owner.iterdir() if p.name != ".vsqs") == []
