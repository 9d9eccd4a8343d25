"""Spark rows to vsqs messages: which columns, bodies, deduplication ids and batches.

Pure of Spark: the callers (``vsqs.spark`` and the data source writers) read the
``TaskContext`` and the schema and hand in names and the deduplication prefix, so this
module can be tested and reasoned about without a running Spark.

Column conventions (Spark's Kafka sink's): the body is ``value``, else ``body``, else
the only column of a one-column DataFrame; ``key`` gives the deduplication id;
``attributes`` (or Kafka's ``headers``) gives the attributes. Explicit names override.
A group column (named explicitly, never guessed) gives each message its group, the way
Kafka's ``key`` picks a partition: a group's rows keep their order in the queue.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .. import AnyQueue

DEFAULT_BATCH_SIZE: Final = 500
"""Messages per ``publish_batch``: one filesystem sync and one directory fsync each."""

BODY_COLUMNS: Final = ("value", "body")
ATTRIBUTE_COLUMNS: Final = ("attributes", "headers")


@dataclass(frozen=True)
class RowFormat:
    """How a row becomes a message.

    :param column: the column holding the body (``binary`` or ``string``).
    :param json_rows: publish the whole row as a JSON object instead of *column*.
    :param key_column: a column whose value identifies the row; its value (not the
        row's position) becomes the deduplication id.
    :param attributes_column: a ``map<string,string>`` column (or Kafka's ``headers``,
        ``array<struct<key,value>>``) merged over *attributes*.
    :param attributes: attributes given to every message.
    :param group_column: a column whose value is each message's group
        (``publish(group=...)``); a null cell publishes that row without one.
    """

    column: str = "body"
    json_rows: bool = False
    key_column: str | None = None
    attributes_column: str | None = None
    attributes: Mapping[str, str] | None = None
    group_column: str | None = None


def resolve_format(
    names: Sequence[str],
    types: Mapping[str, str] | None = None,
    *,
    column: str | None = None,
    json_rows: bool = False,
    key_column: str | None = None,
    attributes_column: str | None = None,
    attributes: Mapping[str, str] | None = None,
    group_column: str | None = None,
) -> RowFormat:
    """The :class:`RowFormat` for rows with columns *names* (Spark's conventions).

    :param types: each column's Spark type (``simpleString``), to check them before
        any row is published; ``None`` when only the names are known.
    :raises ValueError: a named column is missing, no body column can be chosen, or a
        column has a type vsqs cannot publish.
    """
    present = list(names)

    def need(name: str, role: str) -> str:
        if name not in present:
            raise ValueError(f"the {role} column {name!r} is not among the columns {present}")
        return name

    if json_rows:
        body = ""
    elif column is not None:
        body = need(column, "body")
    else:
        bodies = [name for name in BODY_COLUMNS if name in present]
        if len(bodies) == 2:
            raise ValueError(
                "both 'value' and 'body' columns: say which is the message body with"
                " column=... (or drop one)"
            )
        if bodies:
            body = bodies[0]
        elif len(present) == 1:
            body = present[0]
        else:
            raise ValueError(
                "publishing needs a 'value' or 'body' column (binary or string), or a"
                f" one-column DataFrame, or json_rows=True; the columns are {present}"
            )
    key = need(key_column, "key") if key_column is not None else None
    if key is None and "key" in present and body != "key":
        key = "key"
    attrs = need(attributes_column, "attributes") if attributes_column is not None else None
    if attrs is None:
        found = [name for name in ATTRIBUTE_COLUMNS if name in present]
        if len(found) == 2:
            raise ValueError("both 'attributes' and 'headers' columns: drop one")
        attrs = found[0] if found else None
    group = need(group_column, "group") if group_column is not None else None
    if types is not None:
        _check_types(types, body, key, attrs)
        if group is not None and types[group] not in _GROUP_TYPES:
            raise ValueError(
                f"the group column {group!r} must be a string (or an integer), not {types[group]}"
            )
    return RowFormat(body or "body", json_rows, key, attrs, attributes, group)


_GROUP_TYPES: Final = frozenset({"string", "tinyint", "smallint", "int", "bigint"})


def _check_types(types: Mapping[str, str], body: str, key: str | None, attrs: str | None) -> None:
    if body and types[body] not in ("binary", "string"):
        raise ValueError(
            f"the body column {body!r} must be binary or string, not {types[body]}"
            " (cast it, or publish whole rows with json_rows=True)"
        )
    if key is not None and types[key].startswith(("array", "map", "struct")):
        raise ValueError(f"the key column {key!r} must be a simple type, not {types[key]}")
    if attrs is not None:
        kind = types[attrs]
        kafka = kind.startswith("array<struct<key:string,value:") and kind.endswith(">>")
        if kind != "map<string,string>" and not kafka:
            raise ValueError(
                f"the attributes column {attrs!r} must be map<string,string> (or Kafka's"
                f" headers, array<struct<key:string,value:binary>>), not {kind}"
            )


def field(row: Any, name: str) -> Any:
    """The value of column *name* of a Spark ``Row`` (or a mapping)."""
    try:
        return row[name]
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        # Row raises ValueError for an unknown name, tuples TypeError for a str index.
        raise KeyError(f"the row has no column {name!r}") from exc


def row_names(row: Any) -> list[str]:
    """The column names of a ``Row`` (or the keys of a mapping)."""
    if hasattr(row, "__fields__"):
        return list(row.__fields__)
    return list(row.keys())


def encode_body(value: object, column: str) -> bytes:
    """A body from a ``binary`` or ``string`` cell."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise TypeError(
        f"column {column!r} must be binary or string, not {type(value).__name__}"
        " (or publish whole rows with json_rows=True)"
    )


def row_json(row: Any) -> bytes:
    """The row as a compact JSON object; dates, decimals and the like as strings."""
    data = row.asDict(recursive=True) if hasattr(row, "asDict") else dict(row)
    return json.dumps(data, default=str, separators=(",", ":"), ensure_ascii=False).encode()


def _attributes(row: Any, fmt: RowFormat) -> dict[str, str]:
    merged = dict(fmt.attributes or {})
    if fmt.attributes_column is not None:
        extra = field(row, fmt.attributes_column)
        if isinstance(extra, list):  # Kafka's headers: [(key, value bytes), ...]
            extra = {
                str(k): v.decode() if isinstance(v, bytes | bytearray) else str(v) for k, v in extra
            }
        if extra:
            merged.update(extra)
    return merged


def publish_rows(
    queue: AnyQueue,
    rows: Iterable[Any],
    fmt: RowFormat,
    dedup_prefix: str,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> int:
    """Publish *rows* in batches; return how many rows were handed to the queue.

    With ``fmt.key_column``, each message's deduplication id is ``dedup_prefix`` and
    its key (one marker per row). Otherwise the rows' positions identify them, and each
    batch is published under one id, ``dedup_prefix`` and ``<first index>+<count>``
    (``publish_batch(batch_dedup_id=...)``: one marker per batch, all or nothing under
    crashes). Consecutive rows with equal attributes and equal groups share a batch,
    because ``publish_batch`` takes one attribute mapping and one group; the batches
    depend only on the rows and *batch_size*, so a retry sees the same ones.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, not {batch_size!r}")
    if is_plain(fmt):
        return _publish_bodies(queue, rows, fmt, dedup_prefix, batch_size)
    count = 0
    start = 0
    bodies: list[bytes] = []
    dedup_ids: list[str | None] = []
    current: dict[str, str] = {}
    group: str | None = None

    def flush() -> None:
        if fmt.key_column is not None:
            queue.publish_batch(
                bodies, attributes=current or None, dedup_ids=dedup_ids, group=group
            )
        else:
            batch_id = f"{dedup_prefix}{start}+{len(bodies)}"
            queue.publish_batch(
                bodies, attributes=current or None, batch_dedup_id=batch_id, group=group
            )
        bodies.clear()
        dedup_ids.clear()

    for index, row in enumerate(rows):
        if fmt.json_rows:
            body = row_json(row)
        else:
            value = field(row, fmt.column)
            if value is None:
                raise ValueError(f"row {index} has a null {fmt.column!r} column")
            body = encode_body(value, fmt.column)
        if fmt.key_column is not None:
            key = field(row, fmt.key_column)
            if key is None:
                raise ValueError(f"row {index} has a null key column {fmt.key_column!r}")
            dedup_id: str | None = f"{dedup_prefix}{key}"
        else:
            dedup_id = None
        attributes = _attributes(row, fmt)
        row_group = _group(row, fmt.group_column)
        if bodies and (len(bodies) >= batch_size or attributes != current or row_group != group):
            flush()
            start = index
        current = attributes
        group = row_group
        bodies.append(body)
        dedup_ids.append(dedup_id)
        count += 1
    if bodies:
        flush()
    return count


def _group(row: Any, column: str | None) -> str | None:
    """The group of *row*: its *column* as text (``None``: a null cell, or no column)."""
    if column is None:
        return None
    value = field(row, column)
    return None if value is None else str(value)


_BINARY: Final = (bytes, bytearray)


def _publish_bodies(
    queue: AnyQueue, rows: Iterable[Any], fmt: RowFormat, dedup_prefix: str, batch_size: int
) -> int:
    """:func:`publish_rows` of one body column, without keys or attribute columns: the
    common case, kept to one list comprehension per batch (no per-row calls)."""
    iterator = iter(rows)
    first = next(iterator, None)
    if first is None:
        return 0
    name = fmt.column
    names = row_names(first)
    if name not in names:
        field(first, name)  # raises the KeyError naming the column
    # A Row is a tuple: reading by position skips its lookup of the name.
    position = names.index(name) if isinstance(first, tuple) else name
    attributes = dict(fmt.attributes) if fmt.attributes else None
    chunk = [first, *itertools.islice(iterator, batch_size - 1)]
    start = 0
    while chunk:
        values = [row[position] for row in chunk]
        bodies = [
            v if type(v) in _BINARY else _body(v, name, start + i) for i, v in enumerate(values)
        ]
        queue.publish_batch(
            bodies, attributes=attributes, batch_dedup_id=f"{dedup_prefix}{start}+{len(bodies)}"
        )
        start += len(bodies)
        chunk = list(itertools.islice(iterator, batch_size))
    return start


def _body(value: object, column: str, index: int) -> bytes:
    if value is None:
        raise ValueError(f"row {index} has a null {column!r} column")
    return encode_body(value, column)


def is_plain(fmt: RowFormat) -> bool:
    """Whether *fmt* publishes one body column as it is (no key, attribute column or
    JSON): the case that Arrow record batches serve without a Python object per row."""
    return (
        not fmt.json_rows
        and fmt.key_column is None
        and fmt.attributes_column is None
        and fmt.group_column is None
    )


def publish_arrow(
    queue: AnyQueue,
    batches: Iterable[Any],
    fmt: RowFormat,
    dedup_prefix: str,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> int:
    """:func:`publish_rows` of Arrow record batches, for a plain *fmt* (:func:`is_plain`).

    The body column of each record batch is converted whole; the batches published, and
    their deduplication ids, are those :func:`publish_rows` makes of the same rows,
    whatever the sizes of the record batches.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, not {batch_size!r}")
    name = fmt.column
    attributes = dict(fmt.attributes) if fmt.attributes else None
    pending: list[Any] = []
    start = 0

    def publish(count: int) -> None:
        nonlocal start
        bodies = [
            v if type(v) in _BINARY else _body(v, name, start + i)
            for i, v in enumerate(pending[:count])
        ]
        queue.publish_batch(
            bodies, attributes=attributes, batch_dedup_id=f"{dedup_prefix}{start}+{count}"
        )
        del pending[:count]
        start += count

    for batch in batches:
        index = batch.schema.get_field_index(name)
        if index < 0:
            raise KeyError(f"the row has no column {name!r}")
        pending.extend(batch.column(index).to_pylist())
        while len(pending) >= batch_size:
            publish(batch_size)
    if pending:
        publish(len(pending))
    return start
