"""Property tests of the name grammar (``vsqs._ids``) and of the per-process id source."""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vsqs
from vsqs import _inotify, _scan
from vsqs._ids import (
    HOLD_TAG,
    MAX_DIGITS,
    MS_LIMIT,
    IdSource,
    Precision,
    State,
    decode_ready,
    encode_ready,
    format_time,
    id_of,
    is_hold,
    parse_decimal,
    parse_id,
    parse_name,
    ready_code,
    ready_code_of_bytes,
    sort_names,
    split_name,
)
from vsqs.testing import ManualClock

# Plausible wall-clock times in µs: from 1973 (10**14) to the year 5138 (10**17), the
# range in which a millisecond id is below MS_LIMIT and so is read on the right scale.
US_TIMES = st.integers(MS_LIMIT, 10**17 - 1)
PRECISIONS = st.sampled_from(list(Precision))
DECIMALS = st.integers(0, 10**MAX_DIGITS - 1).map(str)
NON_ASCII_DIGITS = st.characters(categories=["Nd"]).filter(lambda c: not c.isascii())


def _invalid(text: str) -> bool:
    """Whether *text* is rejected as a decimal, an id and a message name."""
    return parse_decimal(text) is None and parse_id(text) is None and parse_name(text) is None


# -- round trips ----------------------------------------------------------------------


@given(US_TIMES)
def test_microsecond_ids_round_trip(us: int) -> None:
    name = format_time(us, Precision.US)
    assert name == str(us)
    assert parse_id(name) == us
    entry = parse_name(name)
    assert entry is not None
    assert (entry.state, entry.id, entry.key, entry.expires) == (State.READY, name, us, None)


@given(US_TIMES)
def test_millisecond_ids_round_trip_to_the_millisecond(us: int) -> None:
    name = format_time(us, Precision.MS)
    assert name == str(us // 1000)
    assert parse_id(name) == us // 1000 * 1000  # normalised to µs, truncated to the ms


@given(st.integers(0, MS_LIMIT - 1))
def test_every_millisecond_value_is_read_as_milliseconds(ms: int) -> None:
    assert parse_id(str(ms)) == ms * 1000


@given(US_TIMES, US_TIMES, PRECISIONS, PRECISIONS)
def test_held_names_round_trip(created: int, expires: int, p1: Precision, p2: Precision) -> None:
    message_id = format_time(created, p1)
    name = f"{message_id}.{format_time(expires, p2)}"
    entry = parse_name(name)
    assert entry is not None
    assert entry.state is State.HELD
    assert entry.id == message_id
    assert entry.key == parse_id(message_id)
    assert entry.expires == parse_id(format_time(expires, p2))


@given(US_TIMES, st.integers(0, 10**6).map(str))
def test_vsqs03_fractional_expiry_is_tolerated(expires: int, fraction: str) -> None:
    """vsqs 0.3 wrote ``<id>.<expiry>.<fraction>`` for float timeouts; it is still held."""
    entry = parse_name(f"{MS_LIMIT}.{expires}.{fraction}")
    assert entry is not None
    assert entry.state is State.HELD
    assert entry.expires == expires


@given(US_TIMES, PRECISIONS)
def test_new_names_parse(us: int, precision: Precision) -> None:
    message_id = format_time(us, precision)
    entry = parse_name(f"{message_id}.new")
    assert entry is not None
    assert (entry.state, entry.id, entry.key) == (State.NEW, message_id, parse_id(message_id))


@given(DECIMALS.filter(lambda s: s == "0" or s[0] != "0"))
def test_packed_ready_ids_decode_to_their_exact_name(name: str) -> None:
    assert decode_ready(encode_ready(int(name))) == name


# -- one scale ------------------------------------------------------------------------


@given(US_TIMES, US_TIMES, PRECISIONS, PRECISIONS)
def test_ms_and_us_ids_order_on_one_scale(t1: int, t2: int, p1: Precision, p2: Precision) -> None:
    """Two ids made at times a millisecond or more apart sort in time order, whatever
    precision each was written in (a ms id is truncated, so within one ms either may lead).
    """
    if t1 // 1000 == t2 // 1000:
        return
    early, late = sorted((t1, t2))
    a, b = format_time(early, p1), format_time(late, p2)
    key_a, key_b = parse_id(a), parse_id(b)
    assert key_a is not None and key_b is not None
    assert key_a < key_b
    assert encode_ready(int(a)) < encode_ready(int(b))  # the packed form sorts the same way


def test_a_queue_serves_mixed_precision_ids_in_time_order(tmp_path: Path) -> None:
    """A ms id written between two µs ids is served between them."""
    qdir = tmp_path / "q"
    qdir.mkdir()
    (qdir / "1700000000000001").write_bytes(b"first")  # µs
    (qdir / "1700000000001").write_bytes(b"second")  # ms: 1 ms later
    (qdir / "1700000000002000").write_bytes(b"third")  # µs: 2 ms later
    queue = vsqs.Queue(qdir, clock=ManualClock(1_800_000_000))
    bodies = []
    while (message := queue.receive(timeout=0)) is not None:
        bodies.append(message.body)
    assert bodies == [b"first", b"second", b"third"]


# -- rejections -----------------------------------------------------------------------

VALID_IDS = st.integers(1, 10**MAX_DIGITS - 1).map(str)


@given(VALID_IDS, st.sampled_from(["+", "-", " ", "\t", "\n", "\0", "/", "..", "\\"]))
def test_signs_spaces_separators_and_nul_are_rejected_anywhere(text: str, bad: str) -> None:
    for at in range(len(text) + 1):
        mangled = text[:at] + bad + text[at:]
        assert _invalid(mangled), mangled
        # ...also in the expiry half of a held name, and in front of ".new".
        assert parse_name(f"{text}.{mangled}") is None, mangled
        assert parse_name(f"{mangled}.new") is None, mangled


@given(VALID_IDS, NON_ASCII_DIGITS, st.data())
def test_non_ascii_digits_are_rejected(text: str, digit: str, data: st.DataObject) -> None:
    """``"١٢٣".isdigit()`` is true, and ``int()`` would accept it; the grammar must not."""
    at = data.draw(st.integers(0, len(text) - 1))
    mangled = text[:at] + digit + text[at + 1 :]
    assert _invalid(mangled)
    assert parse_name(f"{text}.{mangled}") is None


@given(VALID_IDS)
def test_leading_zeros_are_rejected(text: str) -> None:
    assert _invalid("0" + text)
    assert parse_name(f"{text}.0{text}") is None
    assert parse_decimal("0") == 0  # zero itself is canonical


@given(st.integers(10**MAX_DIGITS, 10**40))
def test_more_than_nineteen_digits_are_rejected(value: int) -> None:
    assert _invalid(str(value))
    assert parse_name(f"{value}.new") is None
    assert parse_name(f"{MS_LIMIT}.{value}") is None


@given(st.integers(max_value=-1))
def test_negative_numbers_are_rejected(value: int) -> None:
    assert _invalid(str(value))


def test_assorted_garbage_is_rejected() -> None:
    for text in ["", ".", "..", ".new", "new", "1.", "1..2", "1.2.", "1.2.x", "1.new.2",
                 "1.NEW", "1e3", "0x10", "1_000", "١", "²", "１２", "1.２", "/etc/passwd",
                 "../1", "1/..", "1.2/3", ".vsqs", ".1", "9" * 20]:  # fmt: skip
        assert parse_name(text) is None, text


def test_a_queue_never_touches_names_outside_the_grammar(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    qdir.mkdir()
    foreign = ["+1", "-1", " 1", "01", "١٢٣", "1..2", "1.x", "1.2.", "9" * 20, "1.new.old", ".1"]
    for name in foreign:
        (qdir / name).write_bytes(b"not a message")
    queue = vsqs.Queue(qdir, clock=ManualClock())
    assert queue.receive(timeout=0) is None
    assert queue.size() == 0
    queue.requeue_expired()
    queue.purge()
    assert queue.clean(older_than=0) == 0
    assert sorted(p.name for p in qdir.iterdir() if p.name != ".vsqs") == sorted(foreign)


# -- every reader of names agrees with parse_name ---------------------------------------

# Names near the grammar: digit runs (leading zeros, too long, non-ASCII digits), the
# separators and suffixes of the grammar, and a little of anything else.
_PIECES = st.one_of(
    DECIMALS,
    st.sampled_from(["0", "00", "017", "9" * 20, ".", ".new", ".0", "new", "17.0"]),
    st.sampled_from(["١٢", "²", "１"]),
    st.text(alphabet="0123456789.new-x ", max_size=4),
    st.text(max_size=3),
)
NAMES = st.lists(_PIECES, min_size=1, max_size=5).map("".join)
GRAMMAR_NAMES = st.one_of(
    DECIMALS,
    st.tuples(US_TIMES, PRECISIONS).map(lambda t: format_time(*t) + ".new"),
    st.tuples(US_TIMES, US_TIMES).map(lambda t: f"{t[0]}.{t[1]}"),
    st.tuples(US_TIMES, US_TIMES).map(lambda t: f"{t[0] // 1000}.{t[1]}{HOLD_TAG}"),
    NAMES,
)


def _expected(name: str) -> tuple[str, object]:
    """Where a listing must put *name*, by parse_name alone."""
    entry = parse_name(name)
    if entry is None:
        return ("other", name)
    if entry.state is State.READY:
        return ("ready", encode_ready(int(name)))
    if entry.state is State.NEW:
        return ("new", (entry.key, name))
    return ("held", (entry.expires, name))


def _sorted(names: list[str]) -> dict[str, list[object]]:
    ready: list[int] = []
    held: list[tuple[int, str]] = []
    new: list[tuple[int, str]] = []
    other: list[str] = []
    sort_names(names, ready, held, new, other)
    return {"ready": list(ready), "held": list(held), "new": list(new), "other": list(other)}


@given(GRAMMAR_NAMES)
def test_the_readers_of_one_name_agree_with_parse_name(name: str) -> None:
    """ready_code, its bytes form (the inotify decoder's) and sort_names (the listing's)
    say what parse_name says, for any string."""
    kind, value = _expected(name)
    code = value if kind == "ready" else None
    assert ready_code(name) == code
    assert ready_code_of_bytes(os.fsencode(name)) == code
    assert _sorted([name]) == {k: [value] if k == kind else [] for k in _sorted([])}
    entry = parse_name(name)
    if entry is not None:
        assert id_of(name) == entry.id
        assert split_name(name)[0] == entry.id
        # As _queue read a hold before: the lease (after the id) ends in the tag.
        lease = name.partition(".")[2]
        assert is_hold(name) == (entry.state is State.HELD and lease.endswith(HOLD_TAG))
        if entry.state is State.READY:
            assert decode_ready(ready_code(name) or 0) == name


@given(st.binary(max_size=24))
def test_the_bytes_reader_agrees_on_any_bytes(raw: bytes) -> None:
    """An event name is whatever bytes a peer chose (not UTF-8, say)."""
    name = os.fsdecode(raw)
    entry = parse_name(name)
    ready = entry is not None and entry.state is State.READY
    assert ready_code_of_bytes(raw) == (encode_ready(int(name)) if ready else None)


def _file_names(names: list[str]) -> list[str]:
    """The distinct names a directory can hold (not empty, no ``/`` or NUL, not ``..``)."""
    ok = {n for n in names if "/" not in n and "\0" not in n and n not in ("", ".", "..")}
    return sorted(n for n in ok if len(os.fsencode(n)) <= 255)


@settings(max_examples=40, deadline=None)
@given(st.lists(GRAMMAR_NAMES, max_size=12))
def test_a_listing_sorts_every_name_as_parse_name_does(names: list[str]) -> None:
    """_scan.scan on a real directory: each file lands where parse_name says."""
    names = _file_names(names)
    with tempfile.TemporaryDirectory() as qdir:
        for name in names:
            Path(qdir, name).write_bytes(b"")
        listing = _scan.scan(qdir)
    expected: dict[str, list[object]] = {"ready": [], "held": [], "new": [], "other": []}
    for name in names:
        kind, value = _expected(name)
        expected[kind].append(value)
    assert listing.ready == sorted(expected["ready"])  # type: ignore[type-var]
    assert sorted(listing.held) == sorted(expected["held"])  # type: ignore[type-var]
    assert sorted(listing.new) == sorted(expected["new"])  # type: ignore[type-var]
    assert listing.pokes == []  # no name here begins with ".wake-"


@pytest.mark.skipif(not _inotify.have_inotify(), reason="needs inotify (Linux)")
@settings(max_examples=40, deadline=None)
@given(st.lists(GRAMMAR_NAMES, max_size=12))
def test_the_inotify_decoder_names_what_parse_name_calls_ready(names: list[str]) -> None:
    """Names moved into a watched directory, as a woken receive decodes them: the packed
    ids of exactly the ready ones, in event order."""
    names = _file_names(names)
    with tempfile.TemporaryDirectory() as qdir, tempfile.TemporaryDirectory() as outside:
        fd = _inotify.init()
        try:
            wd = _inotify.add_watch(fd, qdir)
            for name in names:
                Path(outside, name).write_bytes(b"")
                os.rename(Path(outside, name), Path(qdir, name))
            seen = _inotify.read_events(fd).get(wd, [])
        finally:
            os.close(fd)
    assert seen == [code for code in map(ready_code, names) if code is not None]


# -- the id source --------------------------------------------------------------------


@given(st.lists(st.tuples(US_TIMES, PRECISIONS), min_size=1, max_size=50))
def test_id_source_is_strictly_increasing_per_precision(calls: list[tuple[int, Precision]]) -> None:
    """Even when the clock steps backwards, ids of one precision only ever increase."""
    source = IdSource()
    last = {Precision.MS: -1, Precision.US: -1}
    for now_us, precision in calls:
        value = int(source.next(now_us, precision))
        unit = 1000 if precision is Precision.MS else 1
        assert value > last[precision]
        assert value >= now_us // unit  # never behind the clock
        last[precision] = value


def test_id_source_never_repeats_across_threads() -> None:
    source = IdSource()
    got: list[list[str]] = [[] for _ in range(8)]

    def draw(out: list[str]) -> None:
        out.extend(source.next(1_700_000_000_000_000, Precision.US) for _ in range(2000))

    threads = [threading.Thread(target=draw, args=(out,)) for out in got]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    flat = [value for out in got for value in out]
    assert len(set(flat)) == len(flat) == 16_000
    for out in got:  # each thread's ids increase too
        assert [int(v) for v in out] == sorted(int(v) for v in out)
