"""Spark rows to vsqs messages: bodies, deduplication ids and batches.

Pure of Spark: the callers (``vsqs.spark`` and the data source writers) read the
``TaskContext`` and hand in the deduplication prefix, so this module can be tested and
reasoned about without a running Spark.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ._queue import Queue

DEFAULT_BATCH_SIZE: Final = 500
"""Messages per ``publish_batch``: one filesystem sync and one directory fsync each."""


@dataclass(frozen=True)
class RowFormat:
    """How a row becomes a message.

    :param column: the column holding the body (``binary`` or ``string``).
    :param json_rows: publish the whole row as a JSON object instead of *column*.
    :param key_column: a column whose value identifies the row; its value (not the
        row's position) becomes the deduplication id.
    :param attributes_column: a ``map<string,string>`` column merged over *attributes*.
    :param attributes: attributes given to every message.
    """

    column: str = "body"
    json_rows: bool = False
    key_column: str | None = None
    attributes_column: str | None = None
    attributes: Mapping[str, str] | None = None


def field(row: Any, name: str) -> Any:
    """The value of column *name* of a Spark ``Row`` (or a mapping)."""
    try:
        return row[name]
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        # Row raises ValueError for an unknown name, tuples TypeError for a str index.
        raise KeyError(f"the row has no column {name!r}") from exc


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
        if extra:
            merged.update(extra)
    return merged


def publish_rows(
    queue: Queue,
    rows: Iterable[Any],
    fmt: RowFormat,
    dedup_prefix: str,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> int:
    """Publish *rows* in batches; return how many rows were handed to the queue.

    The deduplication id of a row is ``dedup_prefix`` followed by its key (with
    ``fmt.key_column``) or by its position in *rows*. Consecutive rows with equal
    attributes share a batch, because ``publish_batch`` takes one attribute mapping.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, not {batch_size!r}")
    count = 0
    bodies: list[bytes] = []
    dedup_ids: list[str | None] = []
    current: dict[str, str] = {}

    def flush() -> None:
        queue.publish_batch(bodies, attributes=current or None, dedup_ids=dedup_ids)
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
            dedup_id = f"{dedup_prefix}{key}"
        else:
            dedup_id = f"{dedup_prefix}{index}"
        attributes = _attributes(row, fmt)
        if bodies and (len(bodies) >= batch_size or attributes != current):
            flush()
        current = attributes
        bodies.append(body)
        dedup_ids.append(dedup_id)
        count += 1
    if bodies:
        flush()
    return count
