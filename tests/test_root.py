"""A root of named queues: create, get, list, delete, and names that cannot escape it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import vsqs

BAD_NAMES: list[object] = [
    "..", ".", "/x", "a/b", "a\\b", "a\0b", ".hidden", ".vsqs", "x" * 81, "", "a..b",
    "../root", "..\\x", "a b", "é", "a/", " ", 5, None, b"bytes",
]  # fmt: skip


def tree(path: Path) -> list[str]:
    """Every path below *path* (relative), sorted: a full picture of what exists."""
    return sorted(
        os.path.relpath(os.path.join(base, name), path)
        for base, dirs, files in os.walk(path)
        for name in dirs + files
    )


@pytest.fixture
def parent(tmp_path: Path) -> Path:
    """A directory holding the root, with a neighbour the root must never touch."""
    (tmp_path / "neighbour").mkdir()
    (tmp_path / "neighbour" / "keep").write_bytes(b"mine")
    (tmp_path / "file").write_bytes(b"mine")
    return tmp_path


def test_create_get_list_delete(parent: Path) -> None:
    root = vsqs.QueueRoot(parent / "root", durable=False)
    assert root.list() == []
    orders = root.create("orders")
    assert isinstance(orders, vsqs.PlainQueue) and orders.path == str(parent / "root" / "orders")
    root.create("orders.dlq").publish(b"dead")
    root.create("a-b_C9")
    assert root.list() == ["a-b_C9", "orders", "orders.dlq"]
    assert "orders" in root and "missing" not in root and "../x" not in root
    orders.publish(b"m")
    assert root.get("orders").receive(timeout=0) is not None
    assert root.create("orders").size() == 1  # create opens an existing queue
    root.delete("orders")
    assert root.list() == ["a-b_C9", "orders.dlq"]
    with pytest.raises(vsqs.QueueNotFound) as info:
        root.get("orders")
    assert (info.value.name, info.value.root) == ("orders", root.path)
    with pytest.raises(vsqs.QueueNotFound):
        root.delete("orders")
    assert root.get("orders.dlq").size() == 1


def test_foreign_entries_of_the_root_are_not_listed_or_deleted(parent: Path) -> None:
    root = vsqs.QueueRoot(parent / "root")
    (parent / "root" / ".hidden").mkdir()
    (parent / "root" / "a file").write_bytes(b"x")
    (parent / "root" / "link").symlink_to(parent / "neighbour")
    assert root.list() == []
    with pytest.raises(vsqs.QueueNotFound):
        root.delete("link")  # a symlink to elsewhere is not a queue to remove
    assert (parent / "neighbour" / "keep").read_bytes() == b"mine"


def test_a_root_that_is_a_file_is_refused(parent: Path) -> None:
    with pytest.raises(vsqs.NotAQueue):
        vsqs.QueueRoot(parent / "file")
    assert (parent / "file").read_bytes() == b"mine"


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_invalid_names_create_and_delete_nothing_anywhere(parent: Path, name: object) -> None:
    root = vsqs.QueueRoot(parent / "root")
    root.create("victim").publish(b"m")
    before = tree(parent)
    for operation in (root.create, root.get, root.delete):
        with pytest.raises(vsqs.InvalidName):
            operation(name)  # type: ignore[arg-type]
    with pytest.raises(vsqs.InvalidName):
        vsqs.validate_name(name)
    assert name not in root
    assert tree(parent) == before


@given(st.text(max_size=100))
def test_valid_names_stay_directly_inside_the_root(name: str) -> None:
    """Whatever the name, a valid one is a single path component, not hidden."""
    try:
        checked = vsqs.validate_name(name)
    except vsqs.InvalidName:
        return
    assert checked == name
    assert 1 <= len(name) <= 80
    assert not name.startswith(".") and ".." not in name
    assert os.path.basename(name) == name and os.sep not in name and "\0" not in name
    assert os.path.normpath(os.path.join("/root", name)) == f"/root/{name}"


def test_names_of_eighty_characters_are_fine(parent: Path) -> None:
    root = vsqs.QueueRoot(parent / "root")
    root.create("x" * 80)
    assert root.list() == ["x" * 80]
