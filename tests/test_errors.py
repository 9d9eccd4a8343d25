"""The error hierarchy: builtin bases, pickling, clear messages, OSErrors passed through."""

from __future__ import annotations

import errno
import io
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import vsqs
from vsqs import _fs

from . import procs
from .fixtures_core import children

BUILTIN_OF: dict[type[vsqs.VsqsError], type[BaseException]] = {
    vsqs.QueueFull: TimeoutError,
    vsqs.LockTimeout: TimeoutError,
    vsqs.InvalidId: ValueError,
    vsqs.InvalidName: ValueError,
    vsqs.InvalidAttributes: ValueError,
    vsqs.InvalidPayload: TypeError,
    vsqs.InvalidSettings: ValueError,
    vsqs.LeaseLost: LookupError,
    vsqs.QueueNotFound: LookupError,
    vsqs.NotAQueue: NotADirectoryError,
    vsqs.QueueDrained: EOFError,
    vsqs.DurabilityError: OSError,
    vsqs.UnsafeEntry: OSError,
}

SAMPLES: list[vsqs.VsqsError] = [
    vsqs.VsqsError("plain"),
    vsqs.QueueFull("/q", 7),
    vsqs.LockTimeout("/q/.vsqs/settings.lock", 10.0),
    vsqs.QueueClosed("/q"),
    vsqs.QueueDrained("/q"),
    vsqs.InvalidId("../x", "path separators"),
    vsqs.InvalidName("a/b", "no slashes"),
    vsqs.InvalidAttributes("too many"),
    vsqs.InvalidPayload("str"),
    vsqs.InvalidSettings("/q/.vsqs/settings.json", "capacity", "must be an int"),
    vsqs.LeaseLost("1.2"),
    vsqs.QueueNotFound("orders", "/root"),
    vsqs.NotAQueue("/etc/passwd"),
    vsqs.DurabilityError(["1732257000123456"], errno.EIO, "Input/output error"),
]  # vsqs.UnsafeEntry keeps its data as an OSError's: tests/test_error_tree.py


@pytest.mark.parametrize(("error", "builtin"), BUILTIN_OF.items(), ids=lambda v: v.__name__)
def test_each_error_subclasses_vsqserror_and_its_builtin(
    error: type[vsqs.VsqsError], builtin: type[BaseException]
) -> None:
    assert issubclass(error, vsqs.VsqsError)
    assert issubclass(error, builtin)


def test_drained_is_a_kind_of_closed() -> None:
    assert issubclass(vsqs.QueueDrained, vsqs.QueueClosed)
    assert issubclass(vsqs.QueueClosed, vsqs.VsqsError)


def test_every_exported_error_is_in_the_hierarchy() -> None:
    exported = {
        obj for obj in vars(vsqs).values() if isinstance(obj, type) and issubclass(obj, Exception)
    }
    assert exported == {*BUILTIN_OF, vsqs.VsqsError, vsqs.QueueClosed}


@pytest.mark.parametrize("error", SAMPLES, ids=lambda e: type(e).__name__)
def test_errors_survive_a_pickle_round_trip(error: vsqs.VsqsError) -> None:
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes, just made
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert copy.args == error.args
    public = {k: v for k, v in vars(error).items() if not k.startswith("_")}
    assert public or type(error) is vsqs.VsqsError  # the others carry their data...
    assert {k: v for k, v in vars(copy).items() if not k.startswith("_")} == public


def test_not_a_queue_keeps_the_oserror_fields_through_pickle() -> None:
    copy = pickle.loads(pickle.dumps(vsqs.NotAQueue("/etc/passwd")))  # noqa: S301 - ours
    assert (copy.errno, copy.filename, copy.path) == (errno.ENOTDIR, "/etc/passwd", "/etc/passwd")


def test_durability_error_keeps_its_ids_and_errno_through_pickle() -> None:
    error = vsqs.DurabilityError(["1", "2"], errno.ENOSPC, os.strerror(errno.ENOSPC))
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - ours
    assert (copy.ids, copy.errno, copy.strerror) == (["1", "2"], errno.ENOSPC, error.strerror)
    assert "2 message(s) became visible" in str(copy)


# -- clear messages -------------------------------------------------------------------


@pytest.mark.parametrize("body", ["text", 42, None, [b"a"], 1.5], ids=repr)
def test_a_body_that_is_not_bytes_like_is_refused_clearly(tmp_path: Path, body: object) -> None:
    queue = vsqs.Queue(tmp_path / "q", durable=False)
    bounded = vsqs.Queue(tmp_path / "b", durable=False, capacity=3)
    calls: list[Callable[[], object]] = [
        lambda: queue.publish(body),  # type: ignore[arg-type]
        lambda: queue.publish(body, delay=5),  # type: ignore[arg-type]
        lambda: queue.publish_batch([b"ok", body]),  # type: ignore[list-item]
        lambda: bounded.publish(body),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(vsqs.InvalidPayload) as info:
            call()
        assert type(body).__name__ in str(info.value)
        assert "bytes-like" in str(info.value)
        assert info.value.value_type == type(body).__name__
    assert queue.size() == bounded.size() == 0  # nothing half-published, not even b"ok"
    assert [p.name for p in (tmp_path / "q").iterdir() if p.name != ".vsqs"] == []


def test_a_str_body_is_told_to_encode() -> None:
    assert "encode" in str(vsqs.InvalidPayload("str"))


def test_a_queue_path_that_is_a_file(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"mine")
    for where in (path, path / "below"):
        with pytest.raises(vsqs.NotAQueue) as info:
            vsqs.Queue(where)
        assert isinstance(info.value, NotADirectoryError)
        assert info.value.errno == errno.ENOTDIR
        assert str(path) in str(info.value)
        assert "not a directory" in str(info.value)
    assert path.read_bytes() == b"mine"


BAD_RECEIPTS = ["../x", "/etc/passwd", "1.2/3", "abc", "1.new", "", "1..2", "-1", "1.2.", "1\0"]


@pytest.mark.parametrize("receipt", BAD_RECEIPTS, ids=repr)
def test_invalid_receipts_are_refused_and_touch_nothing(tmp_path: Path, receipt: str) -> None:
    queue = vsqs.Queue(tmp_path / "q", durable=False)
    message_id = queue.publish(b"keep")
    (tmp_path / "x").write_bytes(b"outside")
    forged = vsqs.Message(id="1", body=b"", receipt=receipt, expires_at=0.0, queue=queue.path)
    calls: list[Callable[[], object]] = [
        lambda: queue.delete(receipt),
        lambda: queue.change_visibility(receipt, 10),
        lambda: queue.change_visibility(receipt, 0),
        # A Message can be made (or unpickled) by hand: its receipt is checked too.
        lambda: queue.delete(forged),
        lambda: queue.change_visibility(forged, 0),
    ]
    for call in calls:
        with pytest.raises(vsqs.InvalidId) as info:
            call()
        assert repr(receipt) in str(info.value)
        assert info.value.value == receipt
    assert (tmp_path / "x").read_bytes() == b"outside"
    assert (tmp_path / "q" / message_id).read_bytes() == b"keep"


@pytest.mark.parametrize("value", [5, None, b"1.2", 1.5], ids=repr)
def test_a_receipt_that_is_not_a_str_is_refused(tmp_path: Path, value: object) -> None:
    queue = vsqs.Queue(tmp_path / "q", durable=False)
    with pytest.raises(vsqs.InvalidId):
        queue.delete(value)  # type: ignore[arg-type]
    with pytest.raises(vsqs.InvalidId):
        queue.change_visibility(value, 1)  # type: ignore[arg-type]


def test_a_message_of_another_queue_is_refused(tmp_path: Path) -> None:
    first = vsqs.Queue(tmp_path / "a", durable=False)
    second = vsqs.Queue(tmp_path / "b", durable=False)
    first.publish(b"m")
    message = first.receive(timeout=0)
    assert message is not None
    with pytest.raises(vsqs.InvalidId, match="belongs to"):
        second.delete(message)
    with pytest.raises(vsqs.InvalidId, match="belongs to"):
        second.change_visibility(message, 0)
    assert first.delete(message)


@pytest.mark.parametrize("name", ["..", "/x", "a/b", "a\0b", ".hidden", "x" * 81, ""], ids=repr)
def test_invalid_names_are_refused_clearly(tmp_path: Path, name: str) -> None:
    with pytest.raises(vsqs.InvalidName) as info:
        vsqs.QueueRoot(tmp_path).create(name)
    assert repr(name) in str(info.value)
    assert info.value.name == name and info.value.reason


def test_invalid_attributes_are_refused_clearly(tmp_path: Path) -> None:
    queue = vsqs.Queue(tmp_path / "q", durable=False)
    with pytest.raises(vsqs.InvalidAttributes, match="must be str"):
        queue.publish(b"m", attributes={"n": 1})  # type: ignore[dict-item]
    assert queue.size() == 0


# -- permission denied and other OSErrors ---------------------------------------------


@pytest.fixture
def locked_dir() -> Iterator[Path]:
    """A root-owned directory (0755) under /tmp that user ``nobody`` can read, not write,
    holding a queue ``q`` with one ready message, and a report directory ``nobody`` can
    write. (pytest's ``tmp_path`` is private to root, so ``nobody`` could not even enter.)
    """
    base = Path(tempfile.mkdtemp(prefix="vsqs-perm-"))
    try:
        base.chmod(0o755)
        vsqs.Queue(base / "locked" / "q", durable=False)
        (base / "locked" / "q" / "1700000000000000").write_bytes(b"m")
        (base / "locked").chmod(0o755)
        (base / "locked" / "q").chmod(0o755)
        (base / "reports").mkdir(mode=0o777)
        (base / "reports").chmod(0o777)
        yield base
    finally:
        shutil.rmtree(base)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to user nobody")
def test_permission_denied_is_clear_and_passes_through(locked_dir: Path) -> None:
    """Root bypasses permission checks, so the queue is used by a child process that
    gives up root for ``nobody`` (``os.setuid``): it gets a real ``EACCES``.

    Creating a queue where one may not says so with the path; any other permission
    error is the unchanged ``PermissionError`` of the syscall, with errno and filename.
    """
    report = str(locked_dir / "reports" / "permissions.json")
    locked = str(locked_dir / "locked")
    with children() as kids:
        kids.join(kids.start(procs.permission_probe, locked, report))
    result = procs.load(report)
    create = result["create"]
    assert create["type"] == "PermissionError" and create["errno"] == errno.EACCES
    assert "permission denied" in create["text"] and f"{locked}/new-queue" in create["text"]
    for operation in ("publish", "receive", "delete"):
        outcome = result[operation]
        assert outcome["type"] == "PermissionError", (operation, outcome)
        assert outcome["errno"] == errno.EACCES
        assert not outcome["vsqs"]  # not re-wrapped
        assert outcome["filename"].startswith(f"{locked}/q/")
    assert (locked_dir / "locked" / "q" / "1700000000000000").read_bytes() == b"m"
    assert not (locked_dir / "locked" / "new-queue").exists()


def test_other_oserrors_pass_through_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk while writing, an I/O error while claiming: the very same exception
    object reaches the caller, and no half-written ``.new`` is left behind."""
    queue = vsqs.Queue(tmp_path / "q", durable=False)
    full = OSError(errno.ENOSPC, "No space left on device", "somewhere")

    def no_space(fd: int, data: memoryview) -> None:
        raise full

    with monkeypatch.context() as patch:
        patch.setattr(_fs, "write_all", no_space)
        for call in (lambda: queue.publish(b"m"), lambda: queue.publish_batch([b"a", b"b"])):
            with pytest.raises(OSError) as info:
                call()
            assert info.value is full
    assert list((tmp_path / "q").glob("*.new")) == []

    queue.publish(b"m")
    broken = OSError(errno.EIO, "Input/output error")

    def io_error(src: str, dst: str) -> None:
        raise broken

    with monkeypatch.context() as patch:
        patch.setattr(_fs, "rename_noreplace", io_error)
        with pytest.raises(OSError) as info:
            queue.receive(timeout=0)
        assert info.value is broken
    message = queue.receive(timeout=0)  # nothing was lost on the way
    assert message is not None and message.body == b"m"


@pytest.mark.parametrize("path", ["publish", "publish_batch", "publish_file", "publish_stream"])
def test_a_publish_cut_short_between_create_and_commit_leaves_no_new_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """The body is created, then the deduplication marker cannot be (an I/O error),
    before the commit: each of the four publish paths removes its ``<id>.new`` (never
    visible), the error reaches the caller as it was, and a retry publishes."""
    queue = vsqs.Queue(tmp_path / "q", durable=False)
    source = tmp_path / "file"
    source.write_bytes(b"f")
    calls: dict[str, Callable[[], object]] = {
        "publish": lambda: queue.publish(b"m", dedup_id="k"),
        "publish_batch": lambda: queue.publish_batch([b"a", b"b"], dedup_ids=["k1", "k2"]),
        "publish_file": lambda: queue.publish_file(source, dedup_id="k"),
        "publish_stream": lambda: queue.publish_stream(io.BytesIO(b"s"), dedup_id="k"),
    }
    broken = OSError(errno.EIO, "Input/output error")

    def io_error(*args: object, **kwargs: object) -> int:
        raise broken

    with monkeypatch.context() as patch:
        patch.setattr(_fs, "create_at", io_error)  # the marker's create, not the body's
        with pytest.raises(OSError) as info:
            calls[path]()
        assert info.value is broken
    assert [name for name in os.listdir(tmp_path / "q") if name != ".vsqs"] == []
    assert source.read_bytes() == b"f"  # publish_file: the source is left as it was
    calls[path]()
    assert queue.counts().ready >= 1
