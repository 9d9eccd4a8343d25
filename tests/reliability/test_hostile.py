"""Hostile and bad input is refused with a clear error or ignored, and nothing outside the
queue directory is ever touched (the ``sentinel`` fixture checks a directory beside it)."""

from __future__ import annotations

import os
import stat
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vsqs
from vsqs._ids import State, parse_name
from vsqs.testing import ManualClock, assert_consistent, drain

from . import _faultchild
from .test_faults import bounded, public_dir  # noqa: F401 (a fixture, used by name)

ESCAPES = [
    "..",
    "../x",
    "../sentinel",
    "../sentinel/x",
    "/etc/passwd",
    "../../etc/passwd",
    "1.2/../../x",
    "1.2/../../sentinel/x",
    "1/../../sentinel/1",
    "1\0",
    "1.2\0",
    "/1",
    "1/",
    "./1",
    "",
]
GARBAGE_NAMES = [
    "99999999999999999999999",  # more digits than any timestamp
    "-1",
    "-1.5",
    "+5",
    "1e10",
    "01",
    "1.",
    "1..2",
    "1.-5",
    "1.abc",
    "1.2.x",
    "\u0661\u0662\u0663",  # Arabic-Indic digits: isdigit() says yes
    "\uff11\uff12",  # fullwidth digits
    "1.\u0662",
    " 1",
    "1 ",
]


def test_queue_names_cannot_escape_the_root(tmp_path: Path, sentinel: Path) -> None:
    root = vsqs.QueueRoot(tmp_path / "root")
    for name in [*ESCAPES, "a/b", ".hidden", "a\\b", "x" * 81, "../root2", "..."]:
        for call in (root.get, root.create, root.delete):
            with pytest.raises(vsqs.InvalidName):
                call(name)
        assert name not in root
    assert root.list() == []


@pytest.mark.usefixtures("sentinel")  # a directory beside the queue, kept as it was
@pytest.mark.parametrize("value", ESCAPES)
def test_ids_and_receipts_with_paths_are_refused(q: vsqs.PlainQueue, value: str) -> None:
    q.publish(b"m")
    with pytest.raises(vsqs.InvalidId):
        q.delete(value)
    with pytest.raises(vsqs.InvalidId):
        q.change_visibility(value, 10)
    assert q.counts().ready == 1


@pytest.mark.usefixtures("sentinel")  # a directory beside the queue, kept as it was
def test_forged_messages_cannot_point_outside(q: vsqs.PlainQueue, tmp_path: Path) -> None:
    """A Message rebuilt by hand (or unpickled from elsewhere) is checked like a receipt."""
    q.publish(b"m")
    for receipt in ESCAPES:
        forged = vsqs.Message(id="1", body=b"", receipt=receipt, expires_at=0.0, queue=q.path)
        with pytest.raises(vsqs.InvalidId):
            q.delete(forged)
        with pytest.raises(vsqs.InvalidId):
            q.change_visibility(forged, 10)
    other = vsqs.Message(id="1", body=b"", receipt="1.2", expires_at=0.0, queue="/elsewhere")
    with pytest.raises(vsqs.InvalidId):
        q.delete(other)
    assert q.counts().ready == 1


def _held_name(q: vsqs.PlainQueue, message_id: str, seconds: float) -> str:
    return f"{message_id}.{q.clock.time_us() + round(seconds * 1e6)}"


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
@pytest.mark.parametrize("state", ["ready", "held"])
def test_planted_entries_are_never_followed_or_delivered(
    q: vsqs.PlainQueue, sentinel: Path, kind: str, state: str
) -> None:
    """A symlink, FIFO or directory under a message name: skipped, never blocking."""
    clock = q.clock
    assert isinstance(clock, ManualClock)
    before = q.publish(b"before")
    name = str(q.clock.time_us() - 5_000_000)  # older than every real message: first in line
    if state == "held":
        name = _held_name(q, name, -1)  # an expired lease: requeue will look at it
    planted = Path(q.path) / name
    if kind == "symlink":
        planted.symlink_to(sentinel / "x")
    elif kind == "fifo":
        os.mkfifo(planted)
    else:
        planted.mkdir()
    after = q.publish(b"after")
    got = bounded(lambda: drain(q), 30)
    assert [m.id for m in got] == [before, after]
    assert [m.body for m in got] == [b"before", b"after"]
    assert q.receive(timeout=0) is None
    clock.advance(60)
    assert bounded(lambda: drain(q), 30) == []  # still never delivered, even after requeues
    # Still there under some message name of ours, still what it was.
    left = [p for p in Path(q.path).iterdir() if p.name != ".vsqs"]
    assert len(left) == 1 and left[0].name.partition(".")[0] == name.partition(".")[0]
    mode = left[0].lstat().st_mode
    assert {"symlink": stat.S_ISLNK, "fifo": stat.S_ISFIFO, "directory": stat.S_ISDIR}[kind](mode)
    q.clean(older_than=0)
    q.requeue_expired()


@pytest.mark.usefixtures("sentinel")  # a directory beside the queue, kept as it was
def test_hard_links_only_lose_their_queue_name(q: vsqs.PlainQueue, tmp_path: Path) -> None:
    """Deleting a message unlinks its name in the queue only; other links keep the data."""
    outside = tmp_path / "outside"
    outside.mkdir()
    message_id = q.publish(b"shared inode")
    os.link(Path(q.path) / message_id, outside / "link")
    planted = outside / "planted"
    planted.write_bytes(b"planted from outside")
    os.link(planted, Path(q.path) / str(q.clock.time_us() + 1))
    got = drain(q)
    assert sorted(m.body for m in got) == [b"planted from outside", b"shared inode"]
    assert (outside / "link").read_bytes() == b"shared inode"
    assert planted.read_bytes() == b"planted from outside"
    assert planted.stat().st_nlink == 1
    assert_consistent(q)


@pytest.mark.usefixtures("sentinel")  # a directory beside the queue, kept as it was
def test_garbage_names_are_ignored_and_untouched(q: vsqs.PlainQueue) -> None:
    clock = q.clock
    assert isinstance(clock, ManualClock)
    for name in GARBAGE_NAMES:
        assert parse_name(name) is None, name
        (Path(q.path) / name).write_bytes(name.encode())
    message_id = q.publish(b"real")
    assert q.counts().total == 1
    assert [m.id for m in drain(q, delete=False)] == [message_id]
    clock.advance(3600)
    q.requeue_expired()
    q.clean(older_than=0)
    assert [m.id for m in drain(q)] == [message_id]
    assert q.purge() == 0
    assert_consistent(q)
    for name in GARBAGE_NAMES:
        assert (Path(q.path) / name).read_bytes() == name.encode(), name


@pytest.mark.usefixtures("sentinel")  # a directory beside the queue, kept as it was
@pytest.mark.parametrize("payload", ["text", 42, None, [b"a"], {"a": 1}, 3.5, object()])
def test_non_bytes_payloads_are_refused(q: vsqs.PlainQueue, payload: object) -> None:
    with pytest.raises(vsqs.InvalidPayload) as caught:
        q.publish(payload)  # type: ignore[arg-type]
    assert type(payload).__name__ in str(caught.value)
    with pytest.raises(vsqs.InvalidPayload):
        q.publish_batch([b"ok", payload])  # type: ignore[list-item]
    assert q.counts().total == 0  # a bad batch publishes nothing, not a prefix
    assert_consistent(q)


@pytest.mark.usefixtures("sentinel")  # a directory beside the queue, kept as it was
def test_empty_and_unusual_bytes_like_payloads_work(q: vsqs.PlainQueue) -> None:
    strided = memoryview(b"a-b-c-")[::2]  # not contiguous: copied, not refused
    q.publish(b"")
    q.publish(bytearray(b"ba"))
    q.publish(strided)
    assert [m.body for m in drain(q)] == [b"", b"ba", b"abc"]


def test_a_queue_owned_by_another_user_with_a_restrictive_mode(public_dir: Path) -> None:  # noqa: F811
    """Another user's 0700 queue: PermissionError naming the path, at once, not a loop."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to user nobody")
    q = vsqs.PlainQueue(public_dir / "q")
    q.publish(b"private")
    os.chmod(q.path, 0o700)
    results = _faultchild.run(_faultchild.as_nobody, q.path, str(public_dir / "out.json"))
    for step in ("publish", "receive", "create"):
        assert results[step]["type"] == "PermissionError", results[step]
        assert q.path in results[step]["filename"] or q.path in results[step]["message"]
    assert [m.body for m in drain(q)] == [b"private"]


NAME_ALPHABET = string.digits + ".-/\0e \u0661\uff11" + "new"


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(), st.text(alphabet=NAME_ALPHABET, max_size=45)))
def test_fuzz_parse_name(name: str) -> None:
    """The parser never raises; whatever it accepts is canonical ASCII digits."""
    entry = parse_name(name)
    if entry is None:
        return
    assert entry.name == name
    assert entry.id.isascii() and entry.id.isdigit() and str(int(entry.id)) == entry.id
    assert "/" not in name and "\0" not in name
    assert entry.state is (
        State.NEW if name.endswith(".new") else State.READY if name == entry.id else State.HELD
    )


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    receipt=st.one_of(
        st.text(alphabet=NAME_ALPHABET, max_size=45),
        st.sampled_from(ESCAPES),
        st.builds("{}.{}".format, st.integers(0, 10**20), st.integers(-5, 10**20)),
        st.text(),
    ),
    seconds=st.sampled_from([0, 1, 60]),
)
def test_fuzz_public_api_with_random_receipts(
    q: vsqs.PlainQueue, sentinel: Path, receipt: str, seconds: int
) -> None:
    """Random receipts: only False, InvalidId or LeaseLost; the real message survives."""
    if not q.counts().total:
        q.publish(b"survivor")
    try:
        assert q.delete(receipt) is False
    except vsqs.InvalidId:
        pass
    try:
        q.change_visibility(receipt, seconds)
    except (vsqs.InvalidId, vsqs.LeaseLost):
        pass
    assert [m.body for m in q.browse()] == [b"survivor"]
