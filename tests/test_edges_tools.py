"""The testing helpers find what they promise to find, and the CLI turns an interrupt
into one line and its exit status."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

import vsqs
from vsqs.cli import cli
from vsqs.testing import assert_consistent, drain


def test_assert_consistent_names_every_problem(q: vsqs.PlainQueue, qdir: Path) -> None:
    q.publish(b"x", attributes={"a": "b"})
    assert_consistent(q)
    (qdir / "1700000000000001").mkdir()  # a directory under a message name
    meta = Path(q.layout.meta_dir)
    (meta / "1600000000000000").write_text("{}")  # metadata of no message
    (meta / ".tmp-1600000000000001").write_text("{}")  # a writer's leftover
    with pytest.raises(AssertionError) as raised:
        assert_consistent(q)
    text = str(raised.value)
    assert "1700000000000001 is not a regular file" in text
    assert "metadata of 1600000000000000, which no longer exists" in text
    assert "temporary file .tmp-1600000000000001 left in metadata" in text


def test_assert_consistent_refuses_metadata_that_is_not_a_directory(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    qdir.mkdir()
    (qdir / ".vsqs").write_text("planted")
    with pytest.raises(AssertionError, match=r"\.vsqs is not a directory"):
        assert_consistent(vsqs.PlainQueue(qdir))


def test_drain_with_a_limit_and_without_deleting(q: vsqs.PlainQueue) -> None:
    q.publish_batch([b"1", b"2", b"3"])
    got = drain(q, delete=False, limit=2)
    assert [m.body for m in got] == [b"1", b"2"]
    assert q.counts().held == 2 and q.counts().ready == 1


class _Interrupting(io.BytesIO):
    """A stdin whose reader presses Ctrl-C after the first line."""

    def __init__(self) -> None:
        super().__init__(b"one\n")
        self.lines = 0

    def readline(self, size: int | None = -1) -> bytes:
        self.lines += 1
        if self.lines > 1:
            raise KeyboardInterrupt
        return super().readline(size)

    def __iter__(self) -> _Interrupting:
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line


def test_an_interrupt_is_one_line_and_exit_status_130(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    result = CliRunner().invoke(cli, ["publish", str(qdir), "-"], input=_Interrupting())
    assert result.exit_code == 130, result.output
    assert "vsqs: interrupted" in result.output
    # The line read before the interrupt is published, whole; nothing is left half-made.
    assert [m.body for m in drain(vsqs.PlainQueue(qdir))] == [b"one"]
    assert not [n for n in os.listdir(qdir) if n.endswith(".new")]


def test_exec_whose_message_is_taken_while_it_runs_says_it_will_come_again(
    tmp_path: Path,
) -> None:
    """CMD outlives its lease while someone else takes the message: the heartbeat finds the
    lease lost and stops renewing; at exit vsqs deletes nothing and says so."""
    qdir = tmp_path / "q"
    with vsqs.PlainQueue(qdir) as queue:
        queue.publish(b"job")
    # CMD: wait past the first heartbeat, then rename the held file away, as a consumer
    # that took it over would, then outlive the next heartbeat.
    command = f'sleep 0.3; cd {qdir} && for f in [0-9]*.[0-9]*; do mv "$f" taken; done; sleep 0.6'
    result = CliRunner().invoke(
        cli, ["receive", str(qdir), "--exec", command, "--visibility-timeout", "0.6"]
    )
    assert result.exit_code == 5  # EXEC_FAILED
    assert "ended while CMD ran; it will be delivered again" in result.output
    assert (qdir / "taken").read_bytes() == b"job"
