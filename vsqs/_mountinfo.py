"""Which filesystem holds a path, read from ``/proc/self/mountinfo``; what that implies.

Three questions depend on it: whether ``wait="auto"`` can rely on inotify (not where
other hosts write, see :data:`NETWORK_FILESYSTEMS`), whether inode numbers name a file
for every host (not on FUSE, where the daemon may number files itself: sshfs numbers
each name apart, and each mount differently), and whether one ``syncfs`` makes a batch
of files durable (only where :data:`SYNCFS_FILESYSTEMS` says so). Reading only; no queue
is changed here.
"""

from __future__ import annotations

import os
from typing import Final

# Filesystems on which other hosts (or a hypervisor's host) write: inotify sees only what
# this kernel did, so `wait="auto"` polls there. Every FUSE filesystem (`fuse.<name>`:
# sshfs, s3fs, gcsfuse, JuiceFS, ceph-fuse, GlusterFS...) polls too, since FUSE cannot
# report a change made behind the daemon; block-device FUSE (`fuseblk`: ntfs-3g) is local.
NETWORK_FILESYSTEMS: Final = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs", "lustre", "beegfs",
     "gpfs", "afs", "ocfs2", "gfs2", "virtiofs", "fuse"}
)  # fmt: skip


# Filesystems on which syncfs(2) is a proven barrier for every file's data and every
# directory entry: local block filesystems that write back all dirty pages, then commit
# their journal (or super block) and flush the device cache; and memory filesystems,
# where there is nothing to flush. Everywhere else (FUSE: sshfs, JuiceFS, ceph-fuse...;
# NFS, SMB, overlay, anything unknown) syncfs may return without reaching the storage:
# FUSE never forwards it to its server. There each file is fsynced instead.
SYNCFS_FILESYSTEMS: Final = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs"})


# Filesystems on which fsync of a newly created file also makes its name durable: one
# journal commits the create with the inode (ext3/4, XFS), btrfs logs a new inode's name
# with it; memory filesystems lose everything anyway. Elsewhere (POSIX's rule, and
# FUSE, NFS...) a new name is durable only once its directory is fsynced.
NAMES_KEPT_BY_FSYNC: Final = frozenset({"ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs"})


def fsync_keeps_names(fstype: str) -> bool:
    """Whether fsync of a new file keeps its name on a filesystem of this type (above)."""
    return fstype in NAMES_KEPT_BY_FSYNC


def syncfs_flushes(fstype: str) -> bool:
    """Whether one ``syncfs`` flushes every file on a filesystem of this type (above)."""
    return fstype in SYNCFS_FILESYSTEMS


def polls(fstype: str) -> bool:
    """Whether ``wait="auto"`` polls on a filesystem of this type (see the list above)."""
    return fstype in NETWORK_FILESYSTEMS or fstype.startswith("fuse.")


def filesystem_type(path: str) -> str:
    """The type of the filesystem holding *path* (``"ext4"``, ``"fuse.sshfs"``...), or ``""``.

    Read from ``/proc/self/mountinfo``: the mount whose device is the path's own, else
    (btrfs subvolumes report other devices) the innermost mount point above the path.
    """
    real, lines = os.path.realpath(path), []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
            lines = mounts.read().splitlines()
        dev = os.stat(real).st_dev
        device = f"{os.major(dev)}:{os.minor(dev)}"
    except OSError:
        if not lines:
            return ""
        device = ""  # the path does not exist (yet): its innermost mount point decides
    by_device, best, best_type = "", "", ""
    for line in lines:
        fields, _, rest = line.partition(" - ")
        before, after = fields.split(), rest.split()
        if len(before) < 5 or not after:
            continue
        point = before[4].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
        if real != point and not real.startswith(point.rstrip("/") + "/"):
            continue
        if before[2] == device:
            by_device = after[0]  # a later mount over the same place wins
        if len(point) >= len(best):
            best, best_type = point, after[0]
    return by_device or best_type


_stable: dict[int, bool] = {}  # by device: whether its inode numbers hold across hosts


def stable_inode(info: os.stat_result) -> int:
    """The inode number of a stat result, or 0 (unknown) where it means nothing to other
    hosts: a FUSE filesystem (see the module docstring). Looked up once per device."""
    stable = _stable.get(info.st_dev)
    if stable is None:
        fstype = _mount_type(f"{os.major(info.st_dev)}:{os.minor(info.st_dev)}")
        stable = _stable[info.st_dev] = not fstype.startswith("fuse")
    return info.st_ino if stable else 0


def _mount_type(device: str) -> str:
    """The type of the last mount of *device* (``"major:minor"``), or ``""``."""
    found = ""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                fields, _, rest = line.partition(" - ")
                before = fields.split()
                if len(before) > 2 and before[2] == device and rest.split():
                    found = rest.split()[0]
    except OSError:
        return ""
    return found
