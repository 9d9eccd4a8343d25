"""Settings stored with the queue (``.vsqs/settings.json``): stored once, used by every
bare ``Queue(path)`` in any process, overridable per handle (but capacity), and a
malformed or hostile file is a clear error that changes nothing."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import vsqs
from vsqs import _stored
from vsqs.testing import ManualClock

SETTINGS = Path(".vsqs") / "settings.json"


def child(code: str, *args: str) -> str:
    """Run *code* in a fresh interpreter (a bare process that was told nothing)."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_bare_queue_in_another_process_uses_the_stored_settings(tmp_path: Path) -> None:
    root = vsqs.QueueRoot(tmp_path)
    root.create(
        "orders",
        visibility_timeout=60,
        dead_letter=root.create("orders.dlq").path,
        max_receives=2,
        capacity=7,
        retention=3600,
        dedup_window=10,
        delay=0.5,
    )
    out = child(
        "import sys, json, vsqs; q = vsqs.Queue(sys.argv[1]);"
        "print(json.dumps([q.visibility_timeout, q.dead_letter.path, q.max_receives,"
        " q.config.capacity, q.retention, q.dedup_window, q.config.delay]))",
        str(tmp_path / "orders"),
    )
    assert json.loads(out) == [60.0, str(tmp_path / "orders.dlq"), 2, 7, 3600.0, 10.0, 0.5]


def test_a_stored_dead_letter_queue_catches_poison_from_a_consumer_told_nothing(
    tmp_path: Path,
) -> None:
    """The issue's case: a consumer that forgets ``dead_letter=`` no longer redelivers
    a poison message forever."""
    clock = ManualClock()
    orders = vsqs.Queue(tmp_path / "orders", clock=clock)
    orders.configure(dead_letter=tmp_path / "orders.dlq", max_receives=2, visibility_timeout=1)
    orders.publish(b"poison")
    consumer = vsqs.Queue(tmp_path / "orders", clock=clock)
    for _ in range(2):
        assert consumer.receive(timeout=0) is not None
        clock.advance(2)
    assert consumer.receive(timeout=0) is None
    dead = vsqs.Queue(tmp_path / "orders.dlq", clock=clock).receive(timeout=0)
    assert dead is not None and dead.body == b"poison"


def test_a_stored_capacity_binds_a_producer_that_passes_none_or_a_larger_one(
    tmp_path: Path,
) -> None:
    vsqs.Queue(tmp_path).configure(capacity=2)
    for handle in (vsqs.Queue(tmp_path), vsqs.Queue(tmp_path, capacity=100)):
        assert handle.config.capacity == 2
    loose = vsqs.Queue(tmp_path, capacity=None)
    loose.publish(b"1")
    loose.publish(b"2")
    with pytest.raises(vsqs.QueueFull):
        loose.publish(b"3", timeout=0)
    assert vsqs.Queue(tmp_path, capacity=1).config.capacity == 1  # tighter: its own


def test_constructor_arguments_override_for_that_handle_only(tmp_path: Path) -> None:
    vsqs.Queue(tmp_path / "q").configure(
        visibility_timeout=60, dead_letter=tmp_path / "dlq", max_receives=3, delay=2
    )
    mine = vsqs.Queue(tmp_path / "q", visibility_timeout=5, dead_letter=None, delay=0)
    assert (mine.visibility_timeout, mine.dead_letter, mine.max_receives) == (5.0, None, None)
    other = vsqs.Queue(tmp_path / "q")
    assert (other.visibility_timeout, other.max_receives) == (60.0, 3)
    assert vsqs.Queue(tmp_path / "q").settings()["visibility_timeout"] == 60.0
    # A handle keeps what it was made with, and a pickled one carries it along.
    copy = pickle.loads(pickle.dumps(mine))  # noqa: S301 - our own bytes
    assert copy.visibility_timeout == 5.0 and copy.dead_letter is None


def test_a_bare_dead_letter_name_is_a_queue_beside_this_one(tmp_path: Path) -> None:
    root = vsqs.QueueRoot(tmp_path)
    q = root.create("orders", dead_letter="orders.dlq", max_receives=2)
    assert q.settings() == {"dead_letter": "orders.dlq", "max_receives": 2}
    assert q.dead_letter is not None and q.dead_letter.path == str(tmp_path / "orders.dlq")


def test_configure_keeps_other_settings_and_none_removes_one(tmp_path: Path) -> None:
    q = vsqs.Queue(tmp_path)
    q.configure(visibility_timeout=60, capacity=3)
    assert q.configure(retention=10) == {"visibility_timeout": 60.0, "capacity": 3, "retention": 10}
    assert q.configure(capacity=None) == {"visibility_timeout": 60.0, "retention": 10.0}
    assert vsqs.Queue(tmp_path).config.capacity is None
    assert q.visibility_timeout == 30.0  # an existing handle keeps its options


def test_a_stored_delay_delays_publishes_that_give_none(tmp_path: Path) -> None:
    clock = ManualClock()
    vsqs.Queue(tmp_path).configure(delay=10)
    q = vsqs.Queue(tmp_path, clock=clock)
    q.publish(b"later")
    q.publish_batch([b"later too"])
    assert q.receive(timeout=0) is None
    assert q.counts().delayed == 2
    clock.advance(11)
    assert {m.body for m in q.receive_batch(10, timeout=0)} == {b"later", b"later too"}


def test_queues_without_settings_and_vsqs_03_readers_see_nothing_new(tmp_path: Path) -> None:
    """The file is a dot-entry inside ``.vsqs``: a 0.3 reader lists only messages."""
    q = vsqs.Queue(tmp_path)
    assert q.settings() == {}
    assert not (tmp_path / ".vsqs").exists()  # reading settings creates nothing
    q.configure(visibility_timeout=9)
    q.publish(b"m")
    top = [name for name in os.listdir(tmp_path) if not name.startswith(".")]
    assert len(top) == 1 and top[0].isdigit()  # what vsqs 0.3 lists and parses
    assert q.counts().total == 1


def test_concurrent_configures_from_many_processes_all_land(tmp_path: Path) -> None:
    vsqs.Queue(tmp_path)
    keys = ["visibility_timeout", "delay", "retention", "dedup_window"]
    code = (
        "import sys, vsqs; q = vsqs.Queue(sys.argv[1])\n"
        "for n in range(20): q.configure(**{sys.argv[2]: n + 1})\n"
    )
    workers = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), key]) for key in keys]
    assert [w.wait(timeout=60) for w in workers] == [0] * len(keys)
    assert vsqs.Queue(tmp_path).settings() == dict.fromkeys(keys, 20.0)


def test_queue_root_create_stores_settings_and_keeps_handle_options_per_handle(
    tmp_path: Path,
) -> None:
    root = vsqs.QueueRoot(tmp_path, durable=False)
    q = root.create("jobs", visibility_timeout=45, durable=False)
    assert q.visibility_timeout == 45.0 and not q.durable
    assert json.loads((tmp_path / "jobs" / SETTINGS).read_text()) == {"visibility_timeout": 45.0}
    assert root.get("jobs").visibility_timeout == 45.0


# -- a bad setting given to configure: an error, nothing written ----------------------------


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"visibility_timeout": "60"}, TypeError),
        ({"capacity": 1.5}, TypeError),
        ({"capacity": 0}, ValueError),
        ({"max_receives": 3}, ValueError),  # no dead-letter queue
        ({"retention": float("nan")}, ValueError),
    ],
)
def test_a_bad_configure_raises_and_changes_nothing(
    tmp_path: Path, changes: dict[str, object], error: type[Exception]
) -> None:
    q = vsqs.Queue(tmp_path)
    q.configure(visibility_timeout=60)
    before = (tmp_path / SETTINGS).read_bytes()
    with pytest.raises(error, match=next(iter(changes))):
        q.configure(**changes)  # type: ignore[arg-type]
    assert (tmp_path / SETTINGS).read_bytes() == before


def test_an_unknown_setting_is_refused_by_name(tmp_path: Path) -> None:
    layout = vsqs.Queue(tmp_path).layout
    with pytest.raises(TypeError, match="unknown setting 'colour'"):
        _stored.update(layout, ManualClock(), {"colour": "blue"})


@pytest.mark.parametrize("where", ["/elsewhere/dlq", "sub/dlq"])
def test_a_dead_letter_queue_not_beside_the_queue_cannot_be_stored(
    tmp_path: Path, where: str
) -> None:
    q = vsqs.Queue(tmp_path / "q")
    target = where if where.startswith("/") else str(tmp_path / where)
    with pytest.raises(ValueError, match="beside the queue"):
        q.configure(dead_letter=target)
    with pytest.raises(ValueError, match="own dead-letter"):
        q.configure(dead_letter=q)
    assert not (tmp_path / "q" / SETTINGS).exists()


# -- a malformed or hostile file: InvalidSettings naming file and key, nothing changed ----

HOSTILE = [
    ("not json", b"{visibility_timeout: 60", ""),
    ("truncated", b'{"visibility_timeout": 6', ""),
    ("not utf-8", b'{"delay": "\xff"}', ""),
    ("an array", b"[1, 2]", ""),
    ("wrong type", b'{"capacity": "5"}', "capacity"),
    ("a float count", b'{"max_receives": 2.0, "dead_letter": "d"}', "max_receives"),
    ("a bool", b'{"visibility_timeout": true}', "visibility_timeout"),
    ("negative", b'{"retention": -1}', "retention"),
    ("NaN", b'{"delay": NaN}', ""),
    ("unknown key", b'{"visibility_timeout": 1, "shell": "rm -rf /"}', "shell"),
    ("repeated key", b'{"capacity": 1, "capacity": 1000}', "capacity"),
    ("null", b'{"capacity": null}', "capacity"),
    ("escaping dlq", b'{"dead_letter": "../../etc"}', "dead_letter"),
    ("absolute dlq", b'{"dead_letter": "/tmp/x"}', "dead_letter"),
    ("dot dlq", b'{"dead_letter": ".."}', "dead_letter"),
    ("itself", b'{"dead_letter": "q"}', "dead_letter"),
    ("receives alone", b'{"max_receives": 3}', "max_receives"),
    ("huge", b'{"delay": 1' + b" " * 70_000 + b"}", ""),
]


@pytest.mark.parametrize(("content", "key"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_a_hostile_settings_file_is_refused_naming_file_and_key(
    tmp_path: Path, content: bytes, key: str
) -> None:
    q = vsqs.Queue(tmp_path / "q")
    q.publish(b"kept")
    (tmp_path / "q" / ".vsqs").mkdir(exist_ok=True)
    path = tmp_path / "q" / SETTINGS
    path.write_bytes(content)
    before = sorted(os.listdir(tmp_path)), sorted(os.listdir(tmp_path / "q"))
    with pytest.raises(vsqs.InvalidSettings) as info:
        vsqs.Queue(tmp_path / "q")
    assert info.value.path == str(path) and info.value.key == key
    assert str(path) in str(info.value) and (not key or repr(key) in str(info.value))
    with pytest.raises(vsqs.InvalidSettings):
        q.configure(visibility_timeout=5)
    assert path.read_bytes() == content
    assert (sorted(os.listdir(tmp_path)), sorted(os.listdir(tmp_path / "q"))) == before
    assert q.receive(timeout=0) is not None  # the queue itself works on


def test_a_symlinked_settings_file_is_refused_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text('{"visibility_timeout": 1}')
    q = vsqs.Queue(tmp_path / "q")
    (tmp_path / "q" / ".vsqs").mkdir()
    (tmp_path / "q" / SETTINGS).symlink_to(outside)
    with pytest.raises(vsqs.InvalidSettings, match="not a regular file"):
        vsqs.Queue(tmp_path / "q")
    with pytest.raises(vsqs.InvalidSettings):
        q.configure(visibility_timeout=2)
    assert outside.read_text() == '{"visibility_timeout": 1}'


def test_a_stored_dead_letter_name_planted_as_a_symlink_is_refused(tmp_path: Path) -> None:
    q = vsqs.Queue(tmp_path / "q")
    q.configure(dead_letter=tmp_path / "dlq")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "dlq").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(vsqs.InvalidSettings, match="dead_letter"):
        vsqs.Queue(tmp_path / "q")
    assert os.listdir(tmp_path / "elsewhere") == []


def test_a_directory_in_place_of_the_file_is_refused(tmp_path: Path) -> None:
    vsqs.Queue(tmp_path)
    (tmp_path / SETTINGS).mkdir(parents=True)
    with pytest.raises(vsqs.InvalidSettings, match="not a regular file"):
        vsqs.Queue(tmp_path)
