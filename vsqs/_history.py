"""The decisions about a message after its first lease: receive counts, dead letters,
retention, redrive records, and what counts as debris. The queue performs each move
(``Queue._return``, ``Queue._transfer``...); this module only says what to record.

Receive counts are kept off the hot path: a receive only renames. When a lease *ends
without a delete* (it expires, or the consumer releases it), the process that returns
the message first takes it out of everybody's reach with one more no-replace rename, to
a short *requeue hold* ``<id>.<now + hold>.0`` that only it owns; then it records one more
completed receive in the metadata, tagged with that hold; then it makes the message
ready (or dead-letters it). The next receive reports ``completed + 1``.

Exactness. Two processes that see the same expired lease race for the first rename;
the loser stops before touching the metadata, so no receive is counted twice and none
is lost. A requeuer that dies after its rename leaves ``<id>.<hold>.0``, an
ordinary lease that expires in turn; the tag tells the next requeuer whether the dead one had
counted already, so the count stays exact across that crash too. What can still make
it inexact:

* a consumer that crashes *while claiming* never returns a lease: its receive is
  counted when the lease expires, like any other, so nothing is lost there;
* a requeuer that stalls for longer than the hold (``max(visibility_timeout, 30 s)``)
  between its rename and its metadata write may overwrite a newer count with an older
  one (an undercount by the receives that happened meanwhile);
* a vsqs 0.3 peer requeues without counting; a directory written by it counts from
  the first receive vsqs itself sees.

Dead-lettering is decided by the requeuer that holds the message, from the metadata,
so a poison message reaches the dead-letter queue after exactly ``max_receives``
receives, once, however many consumers race.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Any, Final

from ._ids import Entry, parse_name, to_us
from ._layout import DELAYED, META, STATS, Layout
from ._meta import Meta, MetaStore, report_once

if TYPE_CHECKING:
    from ._reports import History

REQUEUE_HOLD_US: Final = 30_000_000
"""The shortest requeue hold: a stalled requeuer keeps sole ownership at least this long."""


def hold_until(now_us: int, vt_us: int) -> int:
    """The expiry of a requeue hold taken at *now_us* (see the module doc)."""
    return now_us + max(vt_us, REQUEUE_HOLD_US)


def count_ended_lease(
    meta: Meta, message_id: str, lease: str, hold: str, *, released: bool, now_us: int, vt_us: int
) -> None:
    """Record in *meta* the receive whose lease *lease* ended, unless it was counted.

    A lease that is a requeue hold tagged in *meta* (a requeuer that died after counting)
    is not counted again. *hold* becomes the tag.
    """
    if meta.lease != lease:
        meta.receive_count += 1
        meta.ended = lease
        entry = parse_name(f"{message_id}.{lease}")
        if entry is not None and entry.expires is not None:
            # The lease began one visibility timeout before it ended (an estimate when
            # the consumer chose another timeout; released leases end early).
            meta.last_received_us = now_us if released else entry.expires - vt_us
    meta.lease = hold


def exhausted(meta: Meta, max_receives: int | None) -> bool:
    """Whether a message with *meta* has used up its receives (goes to dead letters)."""
    return max_receives is not None and meta.receive_count >= max_receives


def dead_letter_record(
    meta: Meta, *, source: str, message_id: str, now_us: int, reason: str
) -> Meta:
    """The metadata a message takes into the dead-letter queue: its attributes and past."""
    first_sent = meta.history.get("first_sent_us")
    history: dict[str, Any] = {
        "source": source,
        "source_id": message_id,
        "first_sent_us": first_sent if isinstance(first_sent, int) else to_us(int(message_id)),
        "last_received_us": meta.last_received_us,
        "receive_count": meta.receive_count,
        "dead_lettered_us": now_us,
        "reason": reason,
    }
    return Meta(attributes=meta.attributes, history=history)


def redrive_record(meta: Meta) -> Meta:
    """The metadata a redriven message starts again with: attributes and first-sent time."""
    first_sent = meta.history.get("first_sent_us")
    return Meta(
        attributes=meta.attributes,
        history={"first_sent_us": first_sent} if isinstance(first_sent, int) else {},
    )


def redrive_source(meta: Meta) -> str | None:
    """The queue a dead letter came from, if its history records one."""
    source = meta.history.get("source")
    return source if isinstance(source, str) and source else None


def expired_split(codes: list[int], now_us: int, retention: float) -> int:
    """How many of the sorted ready *codes* are older than *retention* (strictly).

    A message's age is read from its id, that is by its publisher's clock: none younger
    than the retention is dropped, unless that publisher's clock ran behind.
    """
    cutoff = (now_us - round(retention * 1e6)) << 1
    return bisect.bisect_left(codes, cutoff)


def history_of(meta: Meta, entry: Entry) -> History:
    """The :class:`History` recorded in *meta* for the message *entry*."""
    from ._reports import History  # noqa: PLC0415 -- a report's dataclass, made when asked

    past = meta.history

    def seconds(key: str) -> float | None:
        value = past.get(key)
        return value / 1e6 if isinstance(value, int) and value else None

    source = past.get("source")
    source_id = past.get("source_id")
    reason = past.get("reason")
    count = past.get("receive_count")
    last = past.get("last_received_us") or meta.last_received_us
    return History(
        receive_count=count if isinstance(count, int) else meta.receive_count,
        first_sent=seconds("first_sent_us") or entry.key / 1e6,
        last_received=last / 1e6 if isinstance(last, int) and last else None,
        source=source if isinstance(source, str) else None,
        source_id=source_id if isinstance(source_id, str) else None,
        dead_lettered=seconds("dead_lettered_us"),
        reason=reason if isinstance(reason, str) else None,
    )


def remove_orphans(layout: Layout, store: MetaStore, live: set[str], wall_cutoff: float) -> int:
    """Remove metadata, delayed markers and temporary files that no message needs.

    Only what is older than *wall_cutoff* (unix seconds, by modification time) and not
    about an id in *live* (every message file listed, ``.new`` included). Planted entries
    that cannot be removed (directories) are left, and reported once.
    """
    removed = 0
    for sub, ids in ((META, store.meta_ids()), (DELAYED, list(store.delayed_ids()))):
        for message_id in ids:
            if message_id not in live and layout.mtime(sub, message_id) < wall_cutoff:
                removed += _remove(layout, sub, message_id)
    for sub in (META, DELAYED, STATS):
        for name in _names(layout, sub):
            if name.startswith(".tmp-") and layout.mtime(sub, name) < wall_cutoff:
                removed += _remove(layout, sub, name)
    return removed


def _names(layout: Layout, sub: str) -> list[str]:
    try:
        return layout.names(sub)
    except OSError:
        return []  # `.vsqs` or the directory is planted: never followed, nothing to clean


def _remove(layout: Layout, sub: str, name: str) -> int:
    try:
        return int(layout.remove(sub, name))
    except OSError as exc:
        report_once(layout.path, "debris that cannot be removed", f"{sub}/{name}: {exc}")
        return 0
