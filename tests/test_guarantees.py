"""A test per guarantee: the table in ``docs/reliability.rst`` names, for every sentence of
the docs that promises a behaviour, the test that checks it. This file checks the table
(every test it names exists, every row names one or says why none can), and holds the
tests of the guarantees that had none elsewhere."""

from __future__ import annotations

import ast
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import vsqs
from vsqs import _fs
from vsqs.testing import ManualClock

from ._lifecycle_workers import forkserver, killed_after_publishing

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reliability.rst"
SECTION = "A test per guarantee"
NODE = re.compile(r"``(tests/[\w/]+\.py)::(\w+)(?:\[[^\]`]*\])?``")
UNTESTED = "not tested here"


def _section() -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(f"\n{SECTION}\n")
    rest = text[start + len(SECTION) + 2 :]
    following = re.search(r"\n[^\n]+\n-{3,}\n", rest[rest.index("\n") + 1 :])
    return rest if following is None else rest[: rest.index("\n") + 1 + following.start()]


def _rows(section: str) -> Iterator[list[str]]:
    """The rows of the section's list-table after its header: each a list of cells."""
    rows = re.split(r"\n   \* - ", section)[2:]  # [0]: before the table, [1]: the header
    for row in rows:
        yield [" ".join(cell.split()) for cell in re.split(r"\n     - ", row)]


def _defined(path: Path) -> set[str]:
    """The top-level test names of a test module: functions, classes and assignments."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def test_every_test_the_guarantee_table_names_exists() -> None:
    """Each node id in the table (``tests/<file>.py::<name>``) names a test that exists:
    renaming or removing a test that checks a documented guarantee fails here."""
    found = NODE.findall(_section())
    assert len(found) >= 60, "the table names fewer tests than it did"
    missing = []
    cache: dict[str, set[str]] = {}
    for file, name in found:
        path = ROOT / file
        if file not in cache:
            cache[file] = _defined(path) if path.is_file() else set()
        if name not in cache[file]:
            missing.append(f"{file}::{name}")
    assert not missing, f"named in docs/reliability.rst but not found: {missing}"


def test_every_guarantee_names_a_test_or_says_why_none() -> None:
    """Each row has four cells, and its test cell names a test or says why there is none."""
    rows = list(_rows(_section()))
    assert len(rows) >= 50
    for cells in rows:
        assert len(cells) == 4, cells
        test = cells[2]
        assert NODE.search(test) or test.startswith(UNTESTED), cells


def test_the_table_parser_reads_node_ids_rows_and_stops_at_the_next_section() -> None:
    """The parser itself: node ids with parameters, and nothing from the next section."""
    assert NODE.findall("``tests/a/b.py::test_x[1-2]`` and ``tests/c.py::TestM``") == [
        ("tests/a/b.py", "test_x"),
        ("tests/c.py", "TestM"),
    ]
    section = _section()
    assert "Stated in" in section
    assert "\nFilesystems\n" not in section and "\nCrash injection\n" not in section


# -- guarantees that had no test -------------------------------------------------------


def test_purge_leaves_a_message_being_written_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``purge``: "Messages being written (``.new``) are left alone: a concurrent publish
    is never cut short". A publish stopped between its body and its rename survives a
    purge and is published whole."""
    q = vsqs.Queue(tmp_path / "q", durable=False)
    q.publish(b"old")
    reached, go = threading.Event(), threading.Event()
    real = _fs.rename_noreplace

    def gated(src: str, dst: str) -> None:
        if threading.current_thread().name == "publisher" and not reached.is_set():
            reached.set()
            assert go.wait(60)
        real(src, dst)

    monkeypatch.setattr(_fs, "rename_noreplace", gated)
    out: list[str] = []
    publisher = threading.Thread(
        target=lambda: out.append(q.publish(b"being written")), name="publisher", daemon=True
    )
    publisher.start()
    assert reached.wait(60)
    assert q.purge() == 1  # the ready one only
    go.set()
    publisher.join(60)
    (message,) = q.receive_batch(10, timeout=0)
    assert (message.id, message.body) == (out[0], b"being written")


def test_a_killed_process_loses_at_most_the_counts_since_its_last_flush(tmp_path: Path) -> None:
    """``stats``: "A process killed with SIGKILL loses at most the counts of its last flush
    interval". A child publishes one message (its first count is written at once), then
    two more within the interval, and dies without any clean-up: the first is counted,
    and nothing is ever counted that did not happen."""
    qdir = tmp_path / "q"
    vsqs.Queue(qdir, durable=False)
    child = forkserver().Process(target=killed_after_publishing, args=(str(qdir), 3))
    child.start()
    child.join(120)
    assert child.exitcode == 137
    stats = vsqs.Queue(qdir, durable=False).stats()
    assert 1 <= stats.produced_messages <= 3
    assert stats.ready == 3


def test_a_crashed_publishers_new_counts_against_the_capacity_for_a_minute_only(
    tmp_path: Path,
) -> None:
    """Bounded queues: "A crashed publisher's ``.new`` file counts for a minute, then no
    longer". A ``.new`` left 59 s ago fills a queue of capacity 1; at 61 s it does not."""
    clock = ManualClock()
    q = vsqs.Queue(tmp_path / "q", durable=False, clock=clock, capacity=1)
    (tmp_path / "q" / f"{clock.time_us() - 59_000_000}.new").write_bytes(b"dead")
    with pytest.raises(vsqs.QueueFull):
        q.publish(b"x", timeout=0)
    clock.advance(2)
    q.publish(b"x", timeout=0)
    assert q.counts().ready == 1
