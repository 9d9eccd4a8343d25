"""Three "hosts" on one machine: a directory, and two sshfs mounts of it through a loopback sshd.

The owner's own directory is one host; each sshfs mount is another, with its own kernel
caches, its own sshfs process and an SFTP server between it and the files, so it behaves
as a network filesystem does: no ``renameat2(RENAME_NOREPLACE)`` (vsqs falls back to
link then unlink) and no inotify event for what the other hosts do.

The sshd runs on 127.0.0.1 on a free port, with a configuration, host key and client key
made for it in a temporary directory; nothing of the system's ssh setup is used or
changed. :func:`why_not` says in words why the rig cannot run here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, Protocol, TypeVar

SSHD: Final = "/usr/sbin/sshd"
SETUP_HINT: Final = "run tests/multihost/setup-sshfs.sh as root (make test does)"
# The two mount option sets the Shared filesystems guide recommends: no cache at all,
# or sshfs's caches kept for file data only (names and attributes always asked for).
CACHE_NO: Final = ("cache=no",)
FINE: Final = ("dir_cache=no", "entry_timeout=0", "attr_timeout=0", "negative_timeout=0")
OPTION_SETS: Final = {"cache-no": CACHE_NO, "fine": FINE}


def fusermount() -> str | None:
    return shutil.which("fusermount3") or shutil.which("fusermount")


def why_not() -> str | None:
    """``None`` if the rig can run here, else what is missing."""
    if os.geteuid() != 0:
        return f"the sshfs rig needs root (running as uid {os.geteuid()})"
    missing = [
        tool
        for tool, found in (
            ("sshfs", shutil.which("sshfs")),
            ("sshd (openssh-server)", os.path.exists(SSHD)),
            ("ssh-keygen", shutil.which("ssh-keygen")),
            ("fusermount3", fusermount()),
        )
        if not found
    ]
    if missing:
        return f"{', '.join(missing)} not installed; {SETUP_HINT}"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse: this kernel or container has no FUSE"
    return None


def why_no_faketime() -> str | None:
    if shutil.which("faketime") is None:
        return f"faketime (libfaketime) not installed; {SETUP_HINT}"
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 free right now (another process may take it first)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=60)


class Rig:
    """A loopback sshd exporting :attr:`owner`, and the sshfs mounts made of it."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.owner = base / "owner"
        self.owner.mkdir()
        self.keys = base / "keys"
        self.keys.mkdir(mode=0o700)
        self.port = 0
        self._sshd: subprocess.Popen[bytes] | None = None
        self.mounts: list[Path] = []

    def start(self) -> None:
        """Make throwaway keys and a configuration, and start sshd on a free port."""
        keys = self.keys
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "host"))
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "client"))
        shutil.copy(keys / "client.pub", keys / "authorized_keys")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
        for attempt in range(5):
            self.port = free_port()
            config = keys / "sshd_config"
            config.write_text(
                f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host'}\n"
                f"AuthorizedKeysFile {keys / 'authorized_keys'}\nPidFile {keys / 'sshd.pid'}\n"
                "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
                "MaxStartups 100\nMaxSessions 100\nSubsystem sftp internal-sftp\n"
            )
            with (keys / f"sshd-{attempt}.log").open("wb") as log:
                self._sshd = subprocess.Popen(
                    [SSHD, "-D", "-e", "-f", str(config)], stdout=subprocess.DEVNULL, stderr=log
                )
            if self._listening():
                return
            self._stop_sshd()
        raise RuntimeError(f"sshd did not start; see {keys}/sshd-*.log")

    def _listening(self) -> bool:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            assert self._sshd is not None
            if self._sshd.poll() is not None:
                return False
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return True
            time.sleep(0.05)
        return False

    def mount(self, name: str, options: tuple[str, ...] = CACHE_NO) -> Path:
        """Mount :attr:`owner` at ``base/<name>`` with sshfs and these options."""
        where = self.base / name
        where.mkdir()
        opts = [
            f"IdentityFile={self.keys / 'client'}",
            "StrictHostKeyChecking=no",
            "UserKnownHostsFile=/dev/null",
            "BatchMode=yes",
            "LogLevel=ERROR",
            *options,
        ]
        _run("sshfs", "-p", str(self.port), "-o", ",".join(opts),
             f"root@127.0.0.1:{self.owner}", str(where))  # fmt: skip
        self.mounts.append(where)
        return where

    def unmount(self, where: Path, *, lazy: bool = False) -> None:
        """Unmount one view (``fusermount -uz`` when *lazy*: as when its host dies)."""
        tool = fusermount()
        assert tool is not None
        subprocess.run([tool, "-uz" if lazy else "-u", str(where)], capture_output=True,
                       timeout=60, check=False)  # fmt: skip
        if where in self.mounts:
            self.mounts.remove(where)

    def close(self) -> None:
        """Unmount everything and stop sshd; never raises (it runs at teardown)."""
        for where in list(self.mounts):
            self.unmount(where, lazy=True)
        self._stop_sshd()

    def _stop_sshd(self) -> None:
        if self._sshd is not None:
            self._sshd.kill()
            self._sshd.wait()
            self._sshd = None


class _Rig(Protocol):
    def start(self) -> None: ...
    def close(self) -> None: ...


_R = TypeVar("_R", bound=_Rig)


@contextlib.contextmanager
def started(make: Callable[[Path], _R], prefix: str) -> Iterator[_R]:
    """``make(base)`` on a fresh temporary directory *base*, started; closed and its
    directory removed whatever happens."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    made = make(base)
    try:
        made.start()
        yield made
    finally:
        made.close()
        shutil.rmtree(base, ignore_errors=True)


def rig() -> contextlib.AbstractContextManager[Rig]:
    """A started :class:`Rig` in a temporary directory, torn down whatever happens."""
    return started(Rig, "vsqs-multihost-")
