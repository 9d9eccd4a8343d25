"""Another host, acting at one chosen moment of an sshfs mount's SFTP session.

sshfs runs this instead of ``ssh`` (``-o ssh_command=<python> <this file> <control>``);
it runs the real ``ssh`` with the arguments sshfs gave, and passes every SFTP packet
through unchanged. Armed (the test writes ``create`` or ``link`` to ``<control>/arm``),
it stages, once, the race in which sshfs answers ``EPERM`` for a name that is gone by
the time the client looks:

* ``create``: at the next exclusive open (``SSH_FXF_EXCL``) of a ``<id>.new``, it
  creates that file itself (body ``theirs``) before passing the request on, so the
  server's exclusive open fails; before passing the failure back, it renames the file to
  ``<id>``: another host's publish of the same id, committed;
* ``link``: at the next ``hardlink@openssh.com`` request, it creates the new name itself,
  then, once the server's link failed, renames it to ``<name>.claimed``: another host's
  message on that name, claimed by a consumer.

Every exclusive open and link it sees, and each reply to one, is logged as a JSON line
in ``<control>/log``. Nothing is faked: the files, the server's answers, sshfs and the
kernel are the real ones; only the moment of the other host's calls is chosen.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import IO, Final

INIT: Final = 1
VERSION: Final = 2
OPEN: Final = 3
EXTENDED: Final = 200
EXCL: Final = 0x20
HARDLINK: Final = b"hardlink@openssh.com"
THEIRS: Final = b"theirs"


class Session:
    """The two directions of one SFTP session and the actions due on replies."""

    def __init__(self, control: str) -> None:
        self.control = control
        self.lock = threading.Lock()
        self.on_reply: dict[int, Callable[[int], None]] = {}

    def log(self, **record: object) -> None:
        with self.lock, open(os.path.join(self.control, "log"), "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")

    def armed(self, kind: str) -> bool:
        """Whether the test armed *kind*; disarms it (each arming stages one race)."""
        arm = os.path.join(self.control, "arm")
        try:
            with open(arm, encoding="utf-8") as f:
                if f.read().strip() != kind:
                    return False
        except FileNotFoundError:
            return False
        os.unlink(arm)
        return True

    def request(self, packet: bytes) -> None:
        """Look at one client packet before it is passed on."""
        kind = packet[0]
        if kind == OPEN:
            (rid,) = struct.unpack(">I", packet[1:5])
            path, rest = _string(packet[5:])
            (flags,) = struct.unpack(">I", rest[:4])
            if flags & EXCL:
                self.log(op="open-excl", id=rid, path=path.decode())
                if path.endswith(b".new") and self.armed("create"):
                    self._race(rid, path, path[: -len(".new")])
        elif kind == EXTENDED:
            (rid,) = struct.unpack(">I", packet[1:5])
            name, rest = _string(packet[5:])
            if name == HARDLINK:
                src, rest = _string(rest)
                dst, _ = _string(rest)
                self.log(op="link", id=rid, src=src.decode(), dst=dst.decode())
                if self.armed("link"):
                    self._race(rid, dst, dst + b".claimed")

    def _race(self, rid: int, name: bytes, then: bytes) -> None:
        """Make *name* now (the other host wins it); rename it to *then* when the
        server has answered request *rid* (before the client hears the answer)."""
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, THEIRS)
        os.close(fd)

        def moved(status: int) -> None:
            os.rename(name, then)
            self.log(op="raced", id=rid, status=status, made=name.decode(), now=then.decode())

        with self.lock:
            self.on_reply[rid] = moved

    def reply(self, packet: bytes) -> None:
        """Look at one server packet before it is passed back."""
        if packet[0] in (INIT, VERSION) or len(packet) < 5:
            return
        (rid,) = struct.unpack(">I", packet[1:5])
        with self.lock:
            action = self.on_reply.pop(rid, None)
        if action is not None:
            status = struct.unpack(">I", packet[5:9])[0] if len(packet) >= 9 else -1
            action(status)


def _string(data: bytes) -> tuple[bytes, bytes]:
    (size,) = struct.unpack(">I", data[:4])
    return data[4 : 4 + size], data[4 + size :]


def _read_exact(stream: IO[bytes], size: int) -> bytes | None:
    chunks, got = [], 0
    while got < size:
        chunk = stream.read(size - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def relay(source: IO[bytes], sink: IO[bytes], look: Callable[[bytes], None]) -> None:
    """Pass SFTP packets from *source* to *sink*, each shown to *look* first."""
    while True:
        header = _read_exact(source, 4)
        if header is None:
            break
        body = _read_exact(source, struct.unpack(">I", header)[0])
        if body is None:
            break
        look(body)
        sink.write(header + body)
        sink.flush()
    sink.close()


def main() -> None:
    control, ssh_args = sys.argv[1], sys.argv[2:]
    session = Session(control)
    ssh = subprocess.Popen(["ssh", *ssh_args], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert ssh.stdin is not None
    assert ssh.stdout is not None
    back = threading.Thread(
        target=relay, args=(ssh.stdout, sys.stdout.buffer, session.reply), daemon=True
    )
    back.start()
    relay(sys.stdin.buffer, ssh.stdin, session.request)
    ssh.wait()
    back.join(5)


if __name__ == "__main__":
    main()
