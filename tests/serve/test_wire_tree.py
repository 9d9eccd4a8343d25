"""The query protocol's parameter names (:func:`vsqs.serve._wire.parse`): split once
and kept for the next request, within a bound, and read the same whichever order
their numbers come in."""

from __future__ import annotations

from vsqs.serve._wire import _MAX_KEPT_NAME, _MAX_PARTS, _PARTS, _unquote_short, parse


def _form(*fields: str) -> bytes:
    return "&".join(("Action=SendMessageBatch", "QueueUrl=q", *fields)).encode()


def test_the_kept_name_parts_stay_within_their_bound() -> None:
    """A client sending ever new names (or very long ones) cannot grow the server's
    memory: at most ``_MAX_PARTS`` names are kept, none longer than ``_MAX_KEPT_NAME``,
    and the names past the bound are still read."""
    long_name = "SendMessageBatchRequestEntry.1." + "x" * (_MAX_KEPT_NAME + 1)
    parse("POST", {}, "", _form(f"{long_name}=v"))
    assert long_name not in _PARTS
    for start in range(0, _MAX_PARTS + 1000, 500):
        fields = [f"Tag.{n}.Key=k{n}&Tag.{n}.Value=v" for n in range(start + 1, start + 501)]
        params = parse("POST", {}, "", _form(*fields)).params
        assert len(params["Tags"]) == 500
    assert len(_PARTS) <= _MAX_PARTS
    assert max(map(len, _PARTS)) <= _MAX_KEPT_NAME


def test_entries_read_the_same_in_order_out_of_order_and_with_gaps() -> None:
    in_order = _form(
        "SendMessageBatchRequestEntry.1.Id=a",
        "SendMessageBatchRequestEntry.1.MessageBody=first",
        "SendMessageBatchRequestEntry.2.Id=b",
        "SendMessageBatchRequestEntry.2.MessageBody=second",
    )
    reversed_ = _form(
        "SendMessageBatchRequestEntry.2.Id=b",
        "SendMessageBatchRequestEntry.2.MessageBody=second",
        "SendMessageBatchRequestEntry.1.Id=a",
        "SendMessageBatchRequestEntry.1.MessageBody=first",
    )
    expected = [{"Id": "a", "MessageBody": "first"}, {"Id": "b", "MessageBody": "second"}]
    assert parse("POST", {}, "", in_order).params["Entries"] == expected
    assert parse("POST", {}, "", reversed_).params["Entries"] == expected
    gaps = _form(
        "SendMessageBatchRequestEntry.7.Id=b",
        "SendMessageBatchRequestEntry.7.MessageBody=second",
        "SendMessageBatchRequestEntry.3.Id=a",
        "SendMessageBatchRequestEntry.3.MessageBody=first",
    )
    assert parse("POST", {}, "", gaps).params["Entries"] == expected


def test_a_message_body_is_never_kept_only_names_and_queue_urls() -> None:
    """Quoted names and a client's ``QueueUrl`` are unquoted once and kept (they repeat);
    a message's text is unquoted each time and never kept by the server."""
    _unquote_short.cache_clear()
    url = "http%3A%2F%2Flocalhost%3A9324%2F000000000000%2Forders"
    body = "MessageBody=secret%20pay%20alice"
    params = parse("POST", {}, "", f"Action=SendMessage&QueueUrl={url}&{body}".encode()).params
    assert params["MessageBody"] == "secret pay alice"
    assert params["QueueUrl"] == "http://localhost:9324/000000000000/orders"
    assert _unquote_short.cache_info().currsize == 1  # the URL alone
    attribute = (
        "MessageAttribute.1.Name=note&MessageAttribute.1.Value.DataType=String"
        "&MessageAttribute.1.Value.StringValue=secret%21"
    )
    parse("POST", {}, "", f"Action=SendMessage&QueueUrl=q&MessageBody=b&{attribute}".encode())
    assert _unquote_short.cache_info().currsize == 1


def test_batch_entries_of_texts_alone_read_as_entries_with_more_do() -> None:
    """An entry of texts alone is taken as it is; one with a number, a list or a map of
    its own is read as every other part of the tree (a number is an int, a map a dict)."""
    params = parse(
        "POST",
        {},
        "",
        _form(
            "SendMessageBatchRequestEntry.1.Id=plain",
            "SendMessageBatchRequestEntry.1.MessageBody=hello",
            "SendMessageBatchRequestEntry.2.Id=late",
            "SendMessageBatchRequestEntry.2.MessageBody=later",
            "SendMessageBatchRequestEntry.2.DelaySeconds=5",
            "SendMessageBatchRequestEntry.3.Id=tagged",
            "SendMessageBatchRequestEntry.3.MessageBody=with",
            "SendMessageBatchRequestEntry.3.MessageAttribute.1.Name=color",
            "SendMessageBatchRequestEntry.3.MessageAttribute.1.Value.DataType=String",
            "SendMessageBatchRequestEntry.3.MessageAttribute.1.Value.StringValue=red",
            "SendMessageBatchRequestEntry.4.Id=odd",
            "SendMessageBatchRequestEntry.4.MessageBody=x",
            "SendMessageBatchRequestEntry.4.Custom.DelaySeconds=7",
        ),
    ).params
    assert params["Entries"] == [
        {"Id": "plain", "MessageBody": "hello"},
        {"Id": "late", "MessageBody": "later", "DelaySeconds": 5},
        {
            "Id": "tagged",
            "MessageBody": "with",
            "MessageAttributes": {"color": {"DataType": "String", "StringValue": "red"}},
        },
        {"Id": "odd", "MessageBody": "x", "Custom": {"DelaySeconds": 7}},
    ]
