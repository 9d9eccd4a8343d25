"""What the query protocol keeps per shape of a request or an answer, to read and write
the next one alike at less cost: a client sends the same field names request after
request (``SendMessageBatchRequestEntry.3.Id``...), and a batch's answers have the same
keys, entry after entry.

* :class:`Plans`: a request's parameters straight from its fields, by a plan made once
  per sequence of field names (each value's place in the parameters), for the plain
  shapes only: fields of texts, and one list of batch entries whose fields are texts.
  Anything else (a number, a map, a nested list, a name given twice, entries not
  numbered 1, 2, 3...) has no plan and is read field by field, as before.
* :func:`header_name`: a header's name as text in lower case, decoded once.
* :func:`rows`: the XML of a list of dicts of texts (a batch's answers) from one ``%``
  template per shape (the item's name and each dict's keys), with one search for what
  to escape in all of its texts.

Each keeps at most 256 shapes, never a value (a message's body is never kept), and
none of a client's names longer than 128 characters: a client sending ever new shapes
costs the server no memory, only the field-by-field reading it would do anyway. Pure
functions and dicts: no I/O. Shared by the threads of a server: a shape stored twice at
once is stored equal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final
from xml.sax.saxutils import escape

__all__ = ["HEADER_NAMES", "TO_ESCAPE", "XML_ESCAPES", "Plans", "header_name", "rows"]

XML_ESCAPES: Final = {'"': "&quot;", "\r": "&#xD;"}
TO_ESCAPE: Final = re.compile(r'[&<>"\r]')
"""What ``escape(text, XML_ESCAPES)`` changes."""
MAX_SHAPES: Final = 256
MAX_FIELDS: Final = 64  # a batch of 10 entries of 2 or 3 fields, and the request's own
MAX_NAME: Final = 128  # SQS's longest field name is 60-odd characters
_INDEX: Final = re.compile(r"[1-9][0-9]{0,5}")
_DOT: Final = re.compile(r"\.")

# A field's place in the parameters: None (a field of the protocol's own, left out),
# (None, key) (a parameter), (i, key) (a field of entry i), (-2 - i, key) (the first
# field of the entries, of entry i: the list of entries goes in the parameters there,
# where field-by-field reading puts it).
_Slot = tuple[int | None, str] | None


class _Plan:
    __slots__ = ("count", "slots", "target")

    def __init__(self, slots: tuple[_Slot, ...], count: int, target: str) -> None:
        self.slots = slots
        self.count = count  # entries
        self.target = target  # their parameter's name ("Entries")

    def apply(self, pairs: list[tuple[str, str]]) -> dict[str, Any]:
        params: dict[str, Any] = {}
        entries: list[dict[str, str]] = [{} for _ in range(self.count)]
        for (_, value), slot in zip(pairs, self.slots, strict=True):
            if slot is None:
                continue
            where, key = slot
            if where is None:
                params[key] = value
            elif where >= 0:
                entries[where][key] = value
            else:
                params[self.target] = entries
                entries[-2 - where][key] = value
        return params


_UNKNOWN: Final = _Plan((), 0, "")  # a shape not seen yet


class Plans:
    """The plans of one reading of the query protocol (its field tables given once).

    :param skip: the protocol's own fields (``Action``, ``Version``...), left out.
    :param not_plain: names read as something other than a text (lists, maps, numbers).
    :param entries: a batch's entries field (``SendMessageBatchRequestEntry``) -> its
        parameter (``Entries``).
    """

    def __init__(
        self, skip: Iterable[str], not_plain: Iterable[str], entries: Mapping[str, str]
    ) -> None:
        self._skip = frozenset(skip)
        self._not_plain = frozenset(not_plain)
        self._entries = dict(entries)
        self._plans: dict[tuple[str, ...], _Plan | None] = {}

    def params(self, pairs: list[tuple[str, str]]) -> dict[str, Any] | None:
        """The parameters of *pairs* (the fields, in order) by their shape's plan;
        ``None`` when the shape has none (the caller reads them field by field)."""
        names = tuple([name for name, _ in pairs])
        plan = self._plans.get(names, _UNKNOWN)  # one look-up: a tuple's hash is not kept
        if plan is _UNKNOWN:
            if len(self._plans) >= MAX_SHAPES:
                return None  # the shapes kept are full: read as any other
            plan = self._plan(names)
            if len(names) <= MAX_FIELDS and all(len(name) <= MAX_NAME for name in names):
                self._plans[names] = plan  # RACE: another thread may store it too: equal
        return None if plan is None else plan.apply(pairs)

    def _plan(self, names: tuple[str, ...]) -> _Plan | None:
        """The plan of one shape, or ``None`` for a shape that is not plain."""
        if len(set(names)) != len(names):
            return None  # a field given twice: an error, said field by field
        slots: list[_Slot] = []
        field: str | None = None  # the entries' field (SendMessageBatchRequestEntry)
        numbers: set[int] = set()
        for name in names:
            if "." not in name:
                if name in self._skip or name.startswith("X-Amz-"):
                    slots.append(None)
                elif name in self._not_plain:
                    return None
                else:
                    slots.append((None, name))
                continue
            dotted = self._entry_field(name)
            if dotted is None or (field is not None and dotted[0] != field):
                return None  # not plain; or two lists of entries in one request
            field, index, key = dotted
            slots.append((index if numbers else -2 - index, key))
            numbers.add(index)
        target = "" if field is None else self._entries[field]
        if numbers != set(range(len(numbers))):
            return None  # entries not numbered 1, 2, 3...: sorted field by field
        return _Plan(tuple(slots), len(numbers), target)

    def _entry_field(self, name: str) -> tuple[str, int, str] | None:
        """``(entries' field, index from 0, key)`` of a batch entry's text field
        (``SendMessageBatchRequestEntry.3.Id``); ``None`` for any other dotted name."""
        parts = _DOT.split(name, 3)  # a parameter's name, never a message's
        if (
            len(parts) != 3
            or parts[0] not in self._entries
            or parts[2] in self._not_plain
            or not _INDEX.fullmatch(parts[1])
        ):
            return None
        return parts[0], int(parts[1]) - 1, parts[2]


_ROWS: Final[dict[tuple[object, ...], str]] = {}


def rows(item: str, elements: list[Any]) -> str | None:
    """The XML of *elements*, dicts of texts alone, each as ``<item><key>text</key>...
    </item>``; ``None`` for any other list (not dicts, a value not a text) or a shape
    not kept (the caller writes it element by element)."""
    try:
        values = [text for element in elements for text in element.values()]
        joined = "".join(values)  # raises unless every value is a text
    except (AttributeError, TypeError):
        return None
    shape = (item, *map(tuple, elements))
    template = _ROWS.get(shape)
    if template is None:
        if len(_ROWS) >= MAX_SHAPES or "%" in item or "%" in "".join(map("".join, shape[1:])):
            return None
        opening, closing = f"<{item}>", f"</{item}>"
        template = _ROWS[shape] = "".join(
            opening + "".join(f"<{key}>%s</{key}>" for key in element) + closing
            for element in elements
        )  # RACE: another thread may make the same shape's at once: equal templates
    if TO_ESCAPE.search(joined) is not None:
        values = [escape(text, XML_ESCAPES) for text in values]
    return template % tuple(values)


HEADER_NAMES: Final[dict[bytes, str]] = {}
"""Header names as received -> as the application reads them (see :func:`header_name`)."""
MAX_HEADER_NAME: Final = 64  # the longest a client sends is 20-odd bytes


def header_name(raw: bytes) -> str:
    """A header's name as the application reads it (text, lower case); kept in
    :data:`HEADER_NAMES` (the first 256 short ones: a server's clients send the same
    names request after request; ``HEADER_NAMES.get(raw)`` first)."""
    name = raw.decode("latin-1").lower()
    if len(HEADER_NAMES) < MAX_SHAPES and len(raw) <= MAX_HEADER_NAME:
        HEADER_NAMES[raw] = name  # RACE: another thread may store the same name: equal
    return name
