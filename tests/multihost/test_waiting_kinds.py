"""``wait="auto"``: inotify where this kernel sees every change, polling where other hosts write.

Each kind that can be mounted here is tested on a real mount: sshfs (``fuse.sshfs``)
polls, tmpfs (``/dev/shm``) and the disk use inotify. A receive blocked on one sshfs mount
wakes within the polling interval (plus one listing) of a publish through the other.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import vsqs
from vsqs import _host, _mountinfo

from ._workers import read_report, spawn

POLLING = ["nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs", "fuse.glusterfs",
           "lustre", "beegfs", "gpfs", "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.juicefs",
           "fuse.ceph-fuse", "fuse", "virtiofs", "afs", "ocfs2", "gfs2"]  # fmt: skip
LOCAL = ["ext4", "xfs", "btrfs", "tmpfs", "f2fs", "zfs", "fuseblk", "overlay"]


@pytest.mark.parametrize("fstype", POLLING)
def test_auto_polls_on_every_shared_filesystem(fstype: str) -> None:
    """The documented list: network, cluster and FUSE filesystems poll."""
    assert _mountinfo.polls(fstype)


@pytest.mark.parametrize("fstype", LOCAL)
def test_auto_watches_local_filesystems(fstype: str) -> None:
    assert not _mountinfo.polls(fstype)


def test_sshfs_mount_polls(hosts: tuple[Path, Path, Path]) -> None:
    """On a real sshfs mount the type is detected and a queue's waiter polls."""
    owner, b, _ = hosts
    vsqs.Queue(owner)
    assert _host.filesystem_type(str(b)) == "fuse.sshfs"
    assert vsqs.Queue(b, poll_interval=0.2).waiter().fileno() == -1  # polled: no descriptor
    assert vsqs.Queue(owner).waiter().fileno() >= 0  # the owner's disk: watched


def test_tmpfs_watches() -> None:
    """tmpfs (``/dev/shm``): every change is made by this kernel, inotify sees it."""
    with tempfile.TemporaryDirectory(dir="/dev/shm") as where:
        assert _host.filesystem_type(where) == "tmpfs"
        assert vsqs.Queue(Path(where) / "q").waiter().fileno() >= 0  # watched


def test_blocked_receive_on_one_mount_wakes_on_a_publish_through_another(
    hosts: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """Wakes within poll_interval plus one listing (bounded loosely: a loaded machine)."""
    owner, b, c = hosts
    vsqs.Queue(owner)
    interval, count = 0.2, 3
    waiter = spawn("wake", queue=str(b), report=str(tmp_path / "wake"), count=count,
                   options={"poll_interval": interval}, stdout=subprocess.PIPE)  # fmt: skip
    assert waiter.stdout is not None
    assert waiter.stdout.readline() == b"ready\n"
    publisher = vsqs.Queue(c, durable=False)
    sent = []
    for n in range(count):
        time.sleep(0.5)
        sent.append(time.time())
        publisher.publish(f"m{n}".encode())
    assert waiter.wait(timeout=60) == 0
    waiter.stdout.close()
    woke = read_report(tmp_path / "wake")
    assert [rec[0] for rec in woke] == [f"m{n}" for n in range(count)]
    latencies = [float(rec[1]) - at for rec, at in zip(woke, sent, strict=True)]
    assert max(latencies) < interval + 1.0, latencies
