"""Hosts on a real distributed filesystem: one JuiceFS volume mounted several times.

A ``redis-server`` on a free loopback port keeps the volume's metadata, a local directory
is its object store (``--storage file``), and each "host" is its own ``juicefs mount``
process with its own cache directory, session and kernel caches: every name, lock and
rename goes through Redis, as it would between machines. Everything lives in one
temporary directory and is torn down at the end; :func:`why_not` says in words why the
rig cannot run here.

``juicefs mount`` runs as a supervisor and a FUSE server it restarts (handing the FUSE
descriptor over); :meth:`JuiceRig.kill` SIGKILLs both, as when a host's client dies.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Final

from ._rig import free_port, fusermount, started

CHECKOUT: Final = Path(__file__).resolve().parents[2]
JUICEFS: Final = CHECKOUT / ".venv-juicefs" / "bin" / "juicefs"
SETUP_HINT: Final = "run tests/multihost/setup-juicefs.sh (make test does; redis needs root)"
# The options of every mount (the JuiceFS guide explains each): a heartbeat of 1 s, so
# that a dead client's session, and the flocks it held, are cleaned within about 5 s;
# no metadata backups and no usage report (nothing leaves the machine). The metadata
# caches keep JuiceFS's defaults (1 s for attributes and entries; listings uncached).
MOUNT_OPTIONS: Final = ("--heartbeat", "1s", "--backup-meta", "0", "--no-usage-report")
GLOBAL: Final = ("--no-agent", "--no-color")  # no pprof listener on :6060, plain logs


def why_not() -> str | None:
    """``None`` if the rig can run here, else what is missing."""
    if os.geteuid() != 0:
        return f"the JuiceFS rig needs root (running as uid {os.geteuid()})"
    missing = [
        tool
        for tool, found in (
            (f"juicefs ({JUICEFS})", JUICEFS.exists()),
            ("redis-server", shutil.which("redis-server")),
            ("fusermount3", fusermount()),
        )
        if not found
    ]
    if missing:
        return f"{', '.join(missing)} not installed; {SETUP_HINT}"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse: this kernel or container has no FUSE"
    return None


def _redis_answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1) as conn:
        conn.sendall(b"PING\r\n")
        return conn.recv(16).startswith(b"+PONG")
    return False


def _mounted(where: Path) -> bool:
    with open("/proc/self/mountinfo", encoding="utf-8") as mounts:
        return any(line.split()[4] == str(where) and " - fuse.juicefs " in line for line in mounts)


class JuiceRig:
    """A Redis server, a JuiceFS volume formatted on it, and the mounts made of it."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.port = 0
        self._redis: subprocess.Popen[bytes] | None = None
        self._mounts: dict[Path, subprocess.Popen[bytes]] = {}

    @property
    def meta_url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/1"

    def start(self) -> None:
        """Start Redis on a free loopback port and format the volume ``vsqs`` on it."""
        for attempt in range(5):  # another process may take the free port first
            self.port = free_port()
            with (self.base / f"redis-{attempt}.log").open("wb") as log:
                self._redis = subprocess.Popen(
                    ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                     "--dir", str(self.base), "--save", "", "--appendonly", "no",
                     "--maxmemory-policy", "noeviction"],
                    stdout=log, stderr=subprocess.STDOUT,
                )  # fmt: skip
            deadline = time.monotonic() + 10
            while self._redis.poll() is None and time.monotonic() < deadline:
                if _redis_answers(self.port):
                    break
                time.sleep(0.05)
            else:
                self._stop_redis()
                continue
            break
        else:
            raise RuntimeError(f"redis-server did not start; see {self.base}/redis-*.log")
        (self.base / "bucket").mkdir()
        subprocess.run(
            [JUICEFS, *GLOBAL, "format", "--storage", "file", "--bucket",
             f"{self.base / 'bucket'}/", "--trash-days", "0", self.meta_url, "vsqs"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip

    def mount(self, name: str, *options: str) -> Path:
        """Mount the volume at ``base/<name>`` (its own client, cache and session)."""
        where = self.base / name
        where.mkdir()
        cache = self.base / f"cache-{name}"
        with (self.base / f"mount-{name}.log").open("wb") as log:
            process = subprocess.Popen(
                [JUICEFS, *GLOBAL, "mount", *MOUNT_OPTIONS, "--cache-dir", str(cache),
                 "--metrics", f"127.0.0.1:{free_port()}", *options, self.meta_url, str(where)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        self._mounts[where] = process
        deadline = time.monotonic() + 60
        while not _mounted(where):
            if process.poll() is not None or time.monotonic() > deadline:
                self.kill(where)
                raise RuntimeError(f"juicefs mount failed; see {self.base}/mount-{name}.log")
            time.sleep(0.05)
        return where

    def kill(self, where: Path) -> None:
        """SIGKILL the client of one mount (supervisor and FUSE server, its session), then
        drop the mount point, which answers ``ENOTCONN`` until then, as ``umount -l`` does."""
        process = self._mounts.pop(where)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
        tool = fusermount()
        assert tool is not None
        subprocess.run([tool, "-uz", str(where)], capture_output=True, timeout=60, check=False)

    def unmount(self, where: Path) -> None:
        """Unmount one view cleanly (its client ends its session and exits); one still
        in use (a descriptor left open) is dropped as :meth:`kill` does."""
        done = subprocess.run([JUICEFS, *GLOBAL, "umount", str(where)], capture_output=True,
                              timeout=60, check=False)  # fmt: skip
        try:
            if done.returncode == 0:
                self._mounts[where].wait(timeout=30)
                del self._mounts[where]
                return
        except subprocess.TimeoutExpired:
            pass
        self.kill(where)

    def close(self) -> None:
        """Unmount everything and stop Redis; never raises (it runs at teardown)."""
        for where in list(self._mounts):
            with contextlib.suppress(Exception):
                self.unmount(where)
        self._stop_redis()

    def _stop_redis(self) -> None:
        if self._redis is not None:
            self._redis.kill()
            self._redis.wait()
            self._redis = None


def juice_rig() -> contextlib.AbstractContextManager[JuiceRig]:
    """A started :class:`JuiceRig` in a temporary directory, torn down whatever happens."""
    return started(JuiceRig, "vsqs-juicefs-")
