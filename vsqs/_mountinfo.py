"""Which filesystem holds a path, read from ``/proc/self/mountinfo``; what that implies.

Five questions depend on it: whether ``wait="auto"`` can rely on inotify (not where
other hosts write, see :data:`NETWORK_FILESYSTEMS`), whether inode numbers name a file
for every host (not on FUSE, where the daemon may number files itself: sshfs numbers
each name apart, and each mount differently), and whether one ``syncfs`` makes a batch
of files durable, or an ``fsync`` a new file's name (only where :data:`SYNCFS_FILESYSTEMS`
and :data:`NAMES_KEPT_BY_FSYNC` say so), and whether a flush has anything to reach at all
(not on :data:`MEMORY_FILESYSTEMS`). Pure: :mod:`vsqs._host` reads the file and
asks (``_host.filesystem_type``, ``_host.stable_inode``).
"""

from __future__ import annotations

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


# Filesystems held in memory alone: no storage behind them, so nothing of theirs survives a
# power loss or a reboot whatever is flushed, and their fsync and syncfs write nothing (the
# kernel's fsync there is `noop_fsync`). vsqs makes no flush system call on them. Only
# these two: zram or a loop device on tmpfs are block devices (ext4...), flushed as disks.
MEMORY_FILESYSTEMS: Final = frozenset({"tmpfs", "ramfs"})


# Filesystems whose kernel driver renames without replacing (``renameat2`` with
# ``RENAME_NOREPLACE``: ext4 and tmpfs since Linux 3.15, XFS 4.0, btrfs 3.17, f2fs 4.0):
# vsqs never falls back to a link then an unlink there, so no removal of a name can be
# the end of a move that made a message ready unseen (see ``_inotify.read_events``).
NOREPLACE_FILESYSTEMS: Final = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "f2fs"})


def renames_without_replacing(fstype: str) -> bool:
    """Whether a filesystem of this type moves names atomically without replacing
    (above); where it may not, a move may be a link then an unlink."""
    return fstype in NOREPLACE_FILESYSTEMS


def fsync_keeps_names(fstype: str) -> bool:
    """Whether fsync of a new file keeps its name on a filesystem of this type (above)."""
    return fstype in NAMES_KEPT_BY_FSYNC


def in_memory(fstype: str) -> bool:
    """Whether a filesystem of this type is held in memory alone (above): a flush there
    reaches nothing. An unknown type (``""``) is not."""
    return fstype in MEMORY_FILESYSTEMS


def syncfs_flushes(fstype: str) -> bool:
    """Whether one ``syncfs`` flushes every file on a filesystem of this type (above)."""
    return fstype in SYNCFS_FILESYSTEMS


def polls(fstype: str) -> bool:
    """Whether ``wait="auto"`` polls on a filesystem of this type (see the list above)."""
    return fstype in NETWORK_FILESYSTEMS or fstype.startswith("fuse.")


def filesystem_type_in(lines: list[str], real: str, device: str) -> str:
    """The type of the filesystem holding the resolved path *real* (``"ext4"``,
    ``"fuse.sshfs"``...), or ``""``, by the lines of ``/proc/self/mountinfo``: the mount
    of *device* (``"major:minor"``; ``""`` if the path does not exist yet), else (btrfs
    subvolumes report other devices) the innermost mount point above the path.
    """
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


def mount_type_in(lines: list[str], device: str) -> str:
    """The type of the last mount of *device* (``"major:minor"``) in *lines*, or ``""``."""
    found = ""
    for line in lines:
        fields, _, rest = line.partition(" - ")
        before = fields.split()
        if len(before) > 2 and before[2] == device and rest.split():
            found = rest.split()[0]
    return found


def stable(fstype: str) -> bool:
    """Whether inode numbers on a filesystem of this type name a file for every host
    (not on FUSE: see the module docstring)."""
    return not fstype.startswith("fuse")
