"""Guarantees of vsqs._sets (``QueueSet``) that ``make mutate`` found unguarded
(docs/reliability.rst, "Mutation testing"): each test fails on the mutants named in its
docstring."""

from __future__ import annotations

from pathlib import Path

import vsqs


def test_a_queue_set_says_its_queues_and_order(tmp_path: Path) -> None:
    """A set's ``repr`` names each of its queues, in order, and its order (mutants:
    ``QueueSet.__repr__`` 1 to 3)."""
    first = vsqs.Queue(tmp_path / "a", durable=False)
    second = vsqs.Queue(tmp_path / "b", durable=False)
    qset = vsqs.QueueSet(first, second, order="priority")
    assert repr(qset) == f"QueueSet({first!r}, {second!r}, order='priority')"
