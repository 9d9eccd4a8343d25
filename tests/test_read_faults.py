"""A fault while reading a claimed message is reported, and the message is not lost."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

import vsqs
from vsqs import _fs


def test_emfile_while_reading_a_claim_raises_and_puts_the_message_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = vsqs.Queue(tmp_path / "q", durable=False)
    message_id = q.publish(b"keep me")
    real = _fs.read_message

    def out_of_descriptors(path: str) -> tuple[bytes, int]:
        raise OSError(errno.EMFILE, "Too many open files", path)

    monkeypatch.setattr(_fs, "read_message", out_of_descriptors)
    with pytest.raises(OSError) as caught:
        q.receive(timeout=0)
    assert caught.value.errno == errno.EMFILE
    assert (tmp_path / "q" / message_id).exists()  # back under its ready name
    monkeypatch.setattr(_fs, "read_message", real)
    message = q.receive(timeout=0)  # the same consumer gets it once the fault is gone
    assert message is not None and message.body == b"keep me"


def test_a_planted_fifo_is_skipped_and_left_in_place(tmp_path: Path) -> None:
    q = vsqs.Queue(tmp_path / "q", durable=False)
    fifo = tmp_path / "q" / "1700000000000000"
    os.mkfifo(fifo)
    real_id = q.publish(b"real")
    message = q.receive(timeout=0)
    assert message is not None and message.id == real_id
    assert fifo.exists() and fifo.is_fifo()


def test_an_ebadf_of_the_descriptor_itself_is_not_read_as_a_removed_file(
    tmp_path: Path,
) -> None:
    """Only a file found gone (``fstat`` of the open descriptor: ``ENOENT``, as JuiceFS
    says of a file another client removed) turns a read's EBADF into "not found"; an
    EBADF of the descriptor itself (here: not open for reading; a double close
    elsewhere is another) is raised unchanged, never hidden as a vanished file."""
    path = tmp_path / "file"
    path.write_bytes(b"body")
    fd = os.open(path, os.O_WRONLY)  # fstat works, read says EBADF
    try:
        with pytest.raises(OSError) as caught:
            _fs.read_opened(fd, str(path))
    finally:
        os.close(fd)
    assert caught.value.errno == errno.EBADF
    assert not isinstance(caught.value, FileNotFoundError)
