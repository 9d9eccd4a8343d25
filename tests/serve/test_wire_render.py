"""The query protocol's XML answers (:func:`vsqs.serve._wire.render`): a list of dicts
of texts (a batch's answers) is written from a template kept per shape, exactly as
each dict would be written on its own, escapes included; the templates kept stay
within their bound."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from vsqs.serve._shapes import _ROWS, MAX_SHAPES
from vsqs.serve._wire import _xml

KEYS = st.sampled_from(["Id", "MessageId", "MD5OfMessageBody", "Code", "Message", "a%s", "b"])
TEXTS = st.text(alphabet=st.sampled_from("ab1-&<>\"'\r\n%s{}"), max_size=6)
VALUES = st.one_of(TEXTS, TEXTS, TEXTS, st.booleans(), st.none(), st.lists(TEXTS, max_size=2))
ROWS = st.lists(st.dictionaries(KEYS, VALUES, max_size=4), max_size=4)


def _written(name: str, value: object) -> str:
    out: list[str] = []
    _xml(name, value, out, "SendMessageBatch")
    return "".join(out)


def _each_alone(item: str, rows: list[Any]) -> str:
    """What the list is written as, one element at a time (never from a template)."""
    return "".join(_written(item, row) for row in rows)


@settings(max_examples=2000)
@given(ROWS, st.sampled_from(["Successful", "Failed", "Messages", "Other%"]))
def test_a_list_reads_as_its_elements_written_one_by_one(rows: list[Any], name: str) -> None:
    item = {
        "Successful": "SendMessageBatchResultEntry",
        "Failed": "BatchResultErrorEntry",
        "Messages": "Message",
    }.get(name, name)
    assert _written(name, rows) == _each_alone(item, rows)
    assert _written(name, rows) == _each_alone(item, rows)  # again, from what was kept


def test_the_kept_templates_stay_within_their_bound() -> None:
    """Answers of ever new shapes (other keys, other sizes) cannot grow what the server
    keeps, and are still written right past the bound."""
    for n in range(MAX_SHAPES + 50):
        rows = [{"Id": "1", f"K{n}": "<v>"}] * (1 + n % 3)
        assert _written("Successful", rows) == _each_alone("SendMessageBatchResultEntry", rows)
    assert len(_ROWS) <= MAX_SHAPES
