"""The query protocol's form reader (:func:`vsqs.serve._wire._form`) reads every form
as the standard library's ``parse_qsl`` reads it, strictly (the reader it replaced)."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qsl

from hypothesis import given, settings
from hypothesis import strategies as st

from vsqs.serve._wire import _MAX_FIELDS, _form

PIECES = [
    "a",
    "B",
    "=",
    "==",
    "&",
    "+",
    "%25",
    "%41",
    "%2B",
    "ü",
    "%C3%A9",
    "%FF",
    "%z",
    "%",
    "%2",
    ";",
    " ",
]


def _read(
    reader: Callable[[str], list[tuple[str, str]]], text: str
) -> tuple[str, list[tuple[str, str]]]:
    try:
        return "ok", reader(text)
    except ValueError:
        return "refused", []


def _stdlib(text: str) -> list[tuple[str, str]]:
    return parse_qsl(
        text, keep_blank_values=True, strict_parsing=bool(text), max_num_fields=_MAX_FIELDS
    )


@settings(max_examples=3000)
@given(st.lists(st.sampled_from(PIECES), max_size=16).map("".join))
def test_a_form_reads_as_parse_qsl_reads_it(text: str) -> None:
    assert _read(_form, text) == _read(_stdlib, text)


def test_too_many_fields_are_refused_as_parse_qsl_refuses_them() -> None:
    most = "&".join(["a=b"] * _MAX_FIELDS)
    assert _read(_form, most) == _read(_stdlib, most) == ("ok", [("a", "b")] * _MAX_FIELDS)
    assert _read(_form, most + "&c=d") == _read(_stdlib, most + "&c=d") == ("refused", [])
