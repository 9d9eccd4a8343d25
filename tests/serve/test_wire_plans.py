"""The query protocol's fields read by a plan kept per shape of names
(:class:`vsqs.serve._shapes.Plans`): the same parameters, or the same error, as the
field-by-field reading, for any shape; the plans kept stay within their bound."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from vsqs.serve import SqsError
from vsqs.serve._shapes import MAX_NAME, MAX_SHAPES
from vsqs.serve._wire import _PLANS, _form, _from_query, _tree, parse

NAMES = st.sampled_from([
    "QueueUrl", "MessageBody", "Version", "X-Amz-Date", "DelaySeconds", "Entries", "",
    "Attribute", "AttributeName.1", "Tag.1.Key", "Tag.1.Value", "X-Amz-A.1.B",
    *(f"SendMessageBatchRequestEntry.{n}.{key}" for n in ("1", "2", "3", "01", "0")
      for key in ("Id", "MessageBody", "DelaySeconds", "", "MessageAttribute")),
    "SendMessageBatchRequestEntry.1", "SendMessageBatchRequestEntry.1.MessageAttribute.1.Name",
    "DeleteMessageBatchRequestEntry.1.Id", "DeleteMessageBatchRequestEntry.1.ReceiptHandle",
    "DeleteMessageBatchRequestEntry.2.Id", "SendMessageBatchRequestEntry",
])  # fmt: skip
FORMS = st.lists(st.tuples(NAMES, st.sampled_from(["v", "7", "x y"])), max_size=8)


def _outcome(read: Any, pairs: list[tuple[str, str]]) -> tuple[str, Any]:
    try:
        return "ok", read(pairs)
    except SqsError as exc:
        return "refused", exc.code


def _field_by_field(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    return _from_query(_tree(pairs))


def _parsed(pairs: list[tuple[str, str]]) -> tuple[str, Any]:
    body = "&".join(["Action=SendMessageBatch", *(f"{n}={v}" for n, v in pairs)])
    return _outcome(lambda _: parse("POST", {}, "", body.encode()).params, pairs)


@settings(max_examples=3000)
@given(FORMS)
def test_a_planned_shape_reads_as_field_by_field(pairs: list[tuple[str, str]]) -> None:
    expected = _outcome(_field_by_field, _form("&".join(f"{n}={v}" for n, v in pairs)))
    first = _parsed(pairs)
    assert first == expected
    assert _parsed(pairs) == expected  # again, from the plan kept
    if expected[0] == "ok":  # the parameters' order too (a first unknown one is named)
        assert list(first[1]) == list(expected[1])


def test_the_kept_plans_stay_within_their_bound() -> None:
    """Ever new shapes (and very long names) cannot grow what the server keeps; the
    requests past the bound are still read."""
    _PLANS._plans.clear()
    long_name = "L" * (MAX_NAME + 1)
    assert parse("POST", {}, "", f"Action=SendMessage&{long_name}=v".encode()).params == {
        long_name: "v"
    }
    assert not any(long_name in shape for shape in _PLANS._plans)
    for n in range(MAX_SHAPES + 100):
        body = f"Action=SendMessage&QueueUrl=q&Name{n}=v".encode()
        assert parse("POST", {}, "", body).params == {"QueueUrl": "q", f"Name{n}": "v"}
    assert len(_PLANS._plans) <= MAX_SHAPES
