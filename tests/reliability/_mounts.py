"""Mounting real filesystems for the tests: tmpfs, ramfs, and loop-mounted ext4, xfs and btrfs.

Everything here needs root; :func:`why_not_mountable` says in words why a test cannot run
otherwise, so the skip reason is visible in the test report.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Final

# Loop images are sparse; these are the smallest sizes each mkfs accepts comfortably.
IMAGE_MB: Final = {"ext4": 64, "xfs": 300, "btrfs": 128}
MKFS: Final = {
    "ext4": ["mkfs.ext4", "-q", "-F"],
    "xfs": ["mkfs.xfs", "-q", "-f"],
    "btrfs": ["mkfs.btrfs", "-q", "-f"],
}
SETUP_HINT: Final = "run tests/reliability/setup-filesystems.sh as root (make test does)"


def is_root() -> bool:
    return os.geteuid() == 0


def why_not_mountable(fstype: str) -> str | None:  # noqa: PLR0911 (one return per reason)
    """``None`` if *fstype* can be mounted here, else the reason it cannot."""
    if not is_root():
        return f"mounting {fstype} needs root (running as uid {os.geteuid()})"
    if fstype in ("tmpfs", "ramfs"):
        return None
    tool = MKFS[fstype][0]
    if shutil.which(tool) is None:
        return f"{tool} is not installed; {SETUP_HINT}"
    if shutil.which("losetup") is None:
        return f"losetup is not installed; {SETUP_HINT}"
    if not Path("/dev/loop-control").exists():
        return "no /dev/loop-control: this kernel or container has no loop devices"
    with open("/proc/filesystems", encoding="ascii") as known:
        if not any(line.split()[-1] == fstype for line in known if line.strip()):
            return f"the kernel does not support {fstype} (not in /proc/filesystems)"
    return None


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=120)


def unmount(mountpoint: Path) -> None:
    """Unmount, lazily if something still holds the mount (a killed child's cwd)."""
    try:
        _run("umount", str(mountpoint))
    except subprocess.CalledProcessError:
        _run("umount", "-l", str(mountpoint))


@contextlib.contextmanager
def mounted(fstype: str, where: Path, *, size_kb: int | None = None) -> Iterator[Path]:
    """Mount a fresh *fstype* at ``where/mnt`` for the duration of the block.

    tmpfs is mounted directly (``size_kb`` bounds it), as ramfs (unbounded); the others
    are made on a sparse image file in *where* and loop-mounted. Unmounts and removes the
    image on exit.
    """
    mountpoint = where / f"mnt-{fstype}"
    mountpoint.mkdir(parents=True)
    image = where / f"{fstype}.img"
    if fstype == "tmpfs":
        _run("mount", "-t", "tmpfs", "-o", f"size={size_kb or 65536}k,mode=0755", "tmpfs",
             str(mountpoint))  # fmt: skip
    elif fstype == "ramfs":
        _run("mount", "-t", "ramfs", "-o", "mode=0755", "ramfs", str(mountpoint))
    else:
        with open(image, "wb") as handle:
            handle.truncate(IMAGE_MB[fstype] << 20)
        _run(*MKFS[fstype], str(image))
        _run("mount", "-t", fstype, "-o", "loop", str(image), str(mountpoint))
    try:
        yield mountpoint
    finally:
        try:
            unmount(mountpoint)
        finally:
            image.unlink(missing_ok=True)


def remount(mountpoint: Path, option: str) -> None:
    """``mount -o remount,<option>`` (``ro`` / ``rw``)."""
    _run("mount", "-o", f"remount,{option}", str(mountpoint))


def filesystem_of(path: Path) -> str:
    """The filesystem type name of *path*, as ``/proc/self/mounts`` says."""
    from vsqs import _host

    return _host.filesystem_type(str(path))
