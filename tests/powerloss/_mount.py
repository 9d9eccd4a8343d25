"""Mounting the power-loss filesystem (:mod:`tests.powerloss.lazyfs`) for a test.

:func:`why_not` says in words why it cannot be mounted here (not root, no ``/dev/fuse``,
no ``fusermount3``, no ``mfusepy``): the tests skip with that reason. :func:`lazy_mount`
runs the daemon as its own process and unmounts it at the end.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[2]
SETUP_HINT: Final = "run tests/reliability/setup-filesystems.sh as root (make test does)"


def why_not() -> str | None:
    """``None`` if the power-loss filesystem can be mounted here, else why not."""
    if os.geteuid() != 0:
        return f"mounting a FUSE filesystem here needs root (running as uid {os.geteuid()})"
    if not Path("/dev/fuse").exists():
        return "no /dev/fuse: this kernel or container has no FUSE"
    if shutil.which("fusermount3") is None:
        return f"fusermount3 is not installed (Debian's fuse3); {SETUP_HINT}"
    if importlib.util.find_spec("mfusepy") is None:
        return "mfusepy is not installed (the test extra: pip install -e '.[test]')"
    return None


@dataclass
class LazyMount:
    """A mounted power-loss filesystem: write at :attr:`mountpoint`; after a
    :meth:`crash`, :attr:`backing` holds what survived."""

    mountpoint: Path
    backing: Path
    daemon: subprocess.Popen[bytes]

    def command(self, text: str) -> None:
        """Send a command (see the daemon's docstring); done when this returns."""
        fd = os.open(self.mountpoint / ".lazyfs", os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def crash(self) -> None:
        """The power fails: unsynced data is lost, every later operation fails."""
        self.command("crash")


def _mounted(mountpoint: Path) -> bool:
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
        return any(line.split()[4] == str(mountpoint) for line in mounts)


def _unmount(mountpoint: Path) -> None:
    if _mounted(mountpoint):
        done = subprocess.run(["fusermount3", "-u", str(mountpoint)], check=False,
                              capture_output=True)  # fmt: skip
        if done.returncode and _mounted(mountpoint):  # busy: detach it now, free it later
            subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=True,
                           capture_output=True)  # fmt: skip


@contextlib.contextmanager
def lazy_mount(
    where: Path, backing: Path | None = None, *, roll_back_directories: bool = False
) -> Iterator[LazyMount]:
    """Mount the power-loss filesystem over *backing* (a fresh ``where/backing`` if not
    given) at ``where/mnt-lazy...``; unmount it and end its daemon on exit.
    *roll_back_directories*: a crash also undoes directory operations not fsynced."""
    if backing is None:
        backing = where / "backing"
        backing.mkdir()
    mountpoint = where / f"mnt-lazy-{os.urandom(3).hex()}"
    mountpoint.mkdir()
    log = open(where / f"{mountpoint.name}.log", "wb")  # noqa: SIM115 - closed below
    daemon = subprocess.Popen(
        [sys.executable, "-m", "tests.powerloss.lazyfs", str(backing), str(mountpoint)]
        + (["--roll-back-directories"] if roll_back_directories else []),
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while not _mounted(mountpoint):
            if daemon.poll() is not None or time.monotonic() > deadline:
                log.flush()
                raise RuntimeError(
                    f"lazyfs did not mount (exit {daemon.poll()}): "
                    + (where / f"{mountpoint.name}.log").read_text(errors="replace")
                )
            time.sleep(0.01)
        yield LazyMount(mountpoint, backing, daemon)
    finally:
        _unmount(mountpoint)
        try:
            daemon.wait(timeout=5)
        except subprocess.TimeoutExpired:
            # Detached lazily (a descriptor still open in this process): the daemon
            # would serve it until it is closed. Nothing is left to serve.
            daemon.kill()
            daemon.wait()
        log.close()
