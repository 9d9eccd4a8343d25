"""The dashboard's HTML: every value that comes from a queue (names, bodies, attributes,
settings, errors) goes through :func:`html.escape`, in one place per kind of cell.

The pages carry no inline script, no inline style and no event handler: the behaviour is
``static/dashboard.js`` and the look ``static/dashboard.css``, both from the package, as
the Content-Security-Policy header demands. Without JavaScript every page still shows
its numbers (as of its loading) and every action works.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any, Final
from urllib.parse import quote

from . import _format
from ._marks import (
    dead_letter_line,
    dead_letters_held,
    flag,
    queue_url,
    setting,
    unknown,
    unreadable,
)
from ._receives import BUCKETS

# (key, heading, kind, title): the overview's columns; the script formats each kind alike.
COLUMNS: Final = (
    ("name", "Queue", "name", "The queue's name under the root"),
    ("ready", "Ready", "count", "Ready to be received"),
    ("held", "Held", "count", "Received and not yet deleted (in flight)"),
    ("delayed", "Delayed", "count", "Published with a delay that has not passed"),
    ("new", "New", "count", "Being written by a publisher (or left by one that crashed)"),
    ("oldest_age", "Oldest", "age", "Age of the oldest ready message"),
    (
        "redelivered",
        "Redelivered",
        "redelivered",
        "Messages now in the queue that were received before and came back without a "
        "delete (receive count 1 or more); read at most once a minute",
    ),
    ("in_rate", "In", "rate", "Messages published per second (last sample interval)"),
    ("out_rate", "Out", "rate", "Messages consumed (deleted) per second (last sample interval)"),
    ("dead_letter", "Dead letters", "dlq", "The dead-letter queue and how many messages it has"),
    ("partitions", "Partitions", "count", "Partitions of the queue (1: not partitioned)"),
    ("fifo", "FIFO", "bool", "One message in flight per group (fifo=True)"),
    ("shutdown", "State", "state", "Shut down: publishes are refused, consumers drain"),
)
STATIC: Final = "/ui/static/"


def _cell(  # noqa: PLR0911 - one return per kind of column reads best
    kind: str, row: Mapping[str, Any], key: str
) -> tuple[str, str]:
    """``(HTML, sort value)`` of one overview cell (the script's ``cell()`` mirrors it)."""
    value: Any = row.get(key)
    error = row.get("error")
    if kind == "name":
        extra = f" {unreadable(error)}" if error else ""
        held = dead_letters_held(row)
        link = f'<a href="{escape(queue_url(value))}">{escape(value)}</a>'
        return link + (f" {held}" if held else "") + extra, value
    if error and kind != "dlq":
        return unknown(f"Unknown: {error}"), "-1"
    if kind == "count":
        return escape(_format.count(value)), str(value if value is not None else -1)
    if kind == "age":
        return escape(_format.age(value)), str(value if value is not None else -1)
    if kind == "rate":
        return escape(_format.rate(value)), str(value if value is not None else -1)
    if kind == "redelivered":
        prefix = "\u2265 " if row.get("redelivered_capped") else ""
        return escape(prefix + _format.count(value)), str(value if value is not None else -1)
    if kind == "dlq":
        if not value:
            return "-", ""
        link = f'<a href="{escape(queue_url(value))}">{escape(value)}</a>'
        depth = row.get("dead_letter_depth")
        if depth is None:
            return f"{link} ({unknown('Unknown: the dead-letter queue was not sampled')})", value
        if depth:
            shown = _format.count(depth)
            return f"{link} {flag(shown, f'{shown} messages in the dead-letter queue')}", value
        return f"{link} (0)", value
    if kind == "bool":
        return ("yes" if value else "no"), ("1" if value else "0")
    if kind == "state":
        return ("shut down" if value else "open"), ("1" if value else "0")
    raise ValueError(kind)  # pragma: no cover - the kinds are ours


def page(title: str, body: str, *, page_kind: str, data: Mapping[str, str] | None = None) -> bytes:
    """A whole HTML document around *body* (already escaped HTML)."""
    attributes = "".join(
        f' data-{escape(key)}="{escape(value)}"' for key, value in (data or {}).items()
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title>"
        f'<link rel="icon" href="{STATIC}favicon.svg" type="image/svg+xml">'
        f'<link rel="stylesheet" href="{STATIC}dashboard.css">'
        f'<script src="{STATIC}dashboard.js" defer></script>'
        f'</head><body data-page="{escape(page_kind)}"{attributes}>'
        '<header><a class="home" href="/ui/">vsqs</a>'
        f" <span>{escape(title)}</span></header>"
        f"<main>{body}</main>"
        "<footer>Numbers are sampled by this server from each queue's <code>stats()</code> "
        "and kept in memory for the last hour (nothing is written to disk; a restarted "
        "server starts its charts afresh).</footer>"
        "</body></html>"
    ).encode()


def overview(
    root: str, document: Mapping[str, Any], *, every: float, admin: bool, user: str | None
) -> bytes:
    """The overview: one row per queue, from the sampler's JSON document."""
    head = "".join(
        f'<th data-key="{key}" data-kind="{kind}" title="{escape(title)}">'
        f'<button type="button">{escape(label)}</button></th>'
        for key, label, kind, title in COLUMNS
    )
    rows = []
    for row in sorted(document["queues"], key=lambda r: r["name"]):
        cells = []
        for key, _, kind, _ in COLUMNS:
            html, sort = _cell(kind, row, key)
            cells.append(f'<td data-sort="{escape(sort)}">{html}</td>')
        rows.append(f'<tr data-name="{escape(row["name"])}">{"".join(cells)}</tr>')
    mode = "admin: actions enabled" if admin else "read-only"
    who = f", signed in as {escape(user)}" if user else ""
    body = (
        f"<h1>Queues under <code>{escape(root)}</code></h1>"
        f'<p class="meta"><span id="count">{len(rows)}</span> queues; sampled every '
        f"{escape(_format.count(every))} s; <span>{mode}{who}</span>; updated "
        f'<span id="updated">{escape(_format.when(document["taken_at"]))}</span>'
        ' <span id="status"></span></p>'
        '<p><label>Filter <input id="filter" type="search" autocomplete="off"></label></p>'
        f'<table id="overview"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    return page(
        f"vsqs: {root}",
        body,
        page_kind="overview",
        data={"api": "/ui/api/overview", "every": str(every)},
    )


def _table(pairs: Iterable[tuple[str, str]], *, css: str = "pairs") -> str:
    """A two-column table of ``(heading, HTML)``: the headings are escaped here."""
    rows = "".join(f"<tr><th>{escape(k)}</th><td>{v}</td></tr>" for k, v in pairs)
    return f'<table class="{css}">{rows}</table>'


def _field(name: str, text: str, unknown: str | None = None) -> str:
    """A number the page refreshes; *unknown*: why it could not be read (then a dash)."""
    if unknown:
        return (
            f'<span data-field="{escape(name)}" class="unknown" title="{escape(unknown)}">'
            f"{_format.UNKNOWN}</span>"
        )
    return f'<span data-field="{escape(name)}">{escape(text)}</span>'


def _stats_table(row: Mapping[str, Any]) -> str:
    error = row.get("error")
    if error:
        why = f"Unknown: {error}"
        return _table(
            [(label, _field(key, "", why)) for key, label in (*_STATS, ("shutdown", "State"))]
        )
    redelivered = _format.count(row.get("redelivered"))
    if row.get("redelivered_capped"):
        redelivered = "\u2265 " + redelivered
    histogram = ", ".join(
        f"{count:,} received {bucket}\u00d7" if bucket != "5+" else f"{count:,} 5 times or more"
        for bucket, count in zip(BUCKETS, row.get("receive_histogram") or (), strict=False)
        if count
    )
    return _table([
        ("Ready", _field("ready", _format.count(row.get("ready")))),
        ("Held (in flight)", _field("held", _format.count(row.get("held")))),
        ("Delayed", _field("delayed", _format.count(row.get("delayed")))),
        ("New (being written)", _field("new", _format.count(row.get("new")))),
        ("Oldest ready message", _field("oldest_age", _format.age(row.get("oldest_age")))),
        ("Redelivered (received before, back without a delete)",
         _field("redelivered", redelivered)),
        ("By receives so far", escape(histogram or "-")),
        ("Published (all time)", _field("produced", _format.count(row.get("produced")))),
        ("Consumed (all time)", _field("consumed", _format.count(row.get("consumed")))),
        ("Published bytes", escape(_format.size(row.get("produced_bytes") or 0))),
        ("Published per second", _field("in_rate", _format.rate(row.get("in_rate")))),
        ("Consumed per second", _field("out_rate", _format.rate(row.get("out_rate")))),
        ("State", _field("shutdown", "shut down" if row.get("shutdown") else "open")),
    ])  # fmt: skip


_STATS: Final = (
    ("ready", "Ready"), ("held", "Held (in flight)"), ("delayed", "Delayed"),
    ("new", "New (being written)"), ("oldest_age", "Oldest ready message"),
    ("redelivered", "Redelivered (received before, back without a delete)"),
    ("produced", "Published (all time)"), ("consumed", "Consumed (all time)"),
    ("in_rate", "Published per second"), ("out_rate", "Consumed per second"),
)  # fmt: skip


def _partitions(parts: Sequence[Mapping[str, Any]]) -> str:
    if not parts:
        return ""
    head = "".join(
        f"<th>{label}</th>" for label in ("Partition", "Ready", "Held", "Delayed", "New", "Oldest")
    )
    rows = "".join(
        f"<tr><td>{i}</td><td>{escape(_format.count(p['ready']))}</td>"
        f"<td>{escape(_format.count(p['held']))}</td>"
        f"<td>{escape(_format.count(p['delayed']))}</td>"
        f"<td>{escape(_format.count(p['new']))}</td>"
        f"<td>{escape(_format.age(p['oldest_age']))}</td></tr>"
        for i, p in enumerate(parts)
    )
    return f'<h2>Partitions</h2><table class="grid"><tr>{head}</tr>{rows}</table>'


def body_preview(body: bytes, limit: int = 256) -> str:
    """The first *limit* bytes of a body as text (escaped), marked when cut or binary."""
    head = body[:limit]
    text = head.decode("utf-8", errors="replace")
    note = ""
    if "\ufffd" in text and b"\xef\xbf\xbd" not in head:
        note = " (not UTF-8 text)"
    if len(body) > limit:
        note += f" ... ({_format.size(len(body))} in all)"
    return f"<pre>{escape(text)}</pre>" + (
        f'<span class="note">{escape(note)}</span>' if note else ""
    )


def _messages(messages: Sequence[Mapping[str, Any]], *, dead_letters: bool, now: float) -> str:
    if not messages:
        return ""
    labels = ["Id", "Age", "Receives", "Attributes", "Body (first bytes)"]
    if dead_letters:
        labels[4:4] = ["Source", "Why", "Dead-lettered"]
    head = "".join(f"<th>{escape(label)}</th>" for label in labels)
    rows = []
    for m in messages:
        attributes = "".join(
            f"<div><b>{escape(k)}</b> = {escape(v)}</div>" for k, v in m["attributes"].items()
        )
        cells = [
            f"<code>{escape(m['id'])}</code>",
            escape(_format.age(max(0.0, now - m["sent_at"]))),
            escape(_format.count(m["receive_count"])),
            attributes or "-",
        ]
        if dead_letters:
            source = m.get("source")
            where = "-"
            if source:
                # A source beside this queue is linked; one elsewhere shows its path.
                named = (
                    escape(source)
                    if "/" in source
                    else (f'<a href="{escape(queue_url(source))}">{escape(source)}</a>')
                )
                where = f"{named} <code>{escape(m.get('source_id') or '')}</code>"
            reason = escape(m.get("reason") or "-")
            cells += [where, reason, escape(_format.when(m.get("dead_lettered")))]
        cells.append(body_preview(m["body"]))
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f'<table class="grid messages"><tr>{head}</tr>{"".join(rows)}</table>'


def _form(name: str, action: str, token: str, label: str, fields: str = "") -> str:
    return (
        f'<form method="post" action="/ui/action/{escape(quote(name, safe=""))}">'
        f'<input type="hidden" name="action" value="{escape(action)}">'
        f'<input type="hidden" name="csrf" value="{escape(token)}">'
        f'{fields}<button type="submit" class="{escape(action)}">{escape(label)}</button></form>'
    )


def _actions(name: str, row: Mapping[str, Any], settings_keys: Sequence[str], token: str) -> str:
    options = "".join(f'<option value="{k}">{k}</option>' for k in settings_keys)
    redrive = _form(
        name, "redrive", token, "Redrive",
        '<label>to <input name="to" placeholder="each message\'s source queue"></label> '
        '<label>at most <input name="limit" inputmode="numeric" placeholder="all"></label> ',
    )  # fmt: skip
    parts = [
        _form(name, "purge", token, "Purge"),
        redrive,
        "" if row.get("shutdown") else _form(name, "shutdown", token, "Shut down"),
        _form(
            name, "configure", token, "Change setting",
            f'<label>setting <select name="key">{options}</select></label> '
            '<label>value <input name="value" placeholder="empty: back to the default">'
            "</label> ",
        ),
    ]  # fmt: skip
    return '<h2>Actions</h2><div class="actions">' + "".join(parts) + "</div>"


def _oldest(
    messages: Sequence[Mapping[str, Any]] | None,
    problem: str | None,
    *,
    dead_letters: bool,
    now: float,
) -> str:
    """The peek at the oldest ready messages (or why there is none to show)."""
    head = "<h2>Oldest messages</h2>"
    if messages is None:
        return f"{head}<p>{unknown(f'Unknown: {problem}')} The messages cannot be read.</p>"
    if not messages:
        return f"{head}<p>No ready messages.</p>"
    what = (
        "The oldest ready message"
        if len(messages) == 1
        else f"The {len(messages)} oldest ready messages"
    )
    dead_letters = dead_letters or any(m.get("source") for m in messages)
    return (
        f'{head}<p class="meta">{what}, read without being received (a peek claims '
        f"nothing).</p>{_messages(messages, dead_letters=dead_letters, now=now)}"
    )


def queue_page(
    name: str,
    row: Mapping[str, Any],
    settings: Mapping[str, object] | None,
    messages: Sequence[Mapping[str, Any]] | None,
    *,
    problem: str | None = None,
    now: float,
    every: float,
    token: str | None,
    settings_keys: Sequence[str],
    sources: Sequence[str],
) -> bytes:
    """One queue: numbers, charts, settings, partitions, the oldest messages, actions.

    *settings* and *messages* are ``None`` when they could not be read (*problem* says
    why): the page shows that, never an empty queue."""
    badges = []
    if (row.get("partitions") or 1) > 1:
        badges.append(f"{row['partitions']} partitions")
    if row.get("fifo"):
        badges.append("FIFO")
    if row.get("shutdown"):
        badges.append("shut down")
    held = dead_letters_held({**row, "sources": sources})
    if sources and not held:
        badges.append("dead-letter queue")
    dead = row.get("dead_letter")
    failed = row.get("dead_letter_depth")
    if dead and failed:  # said at the top too: the line about them is far below
        shown = _format.count(failed)
        held += flag(f"{shown} dead letters in {dead}", f"{shown} messages failed and wait there")
    why = f"Unknown: {problem}"
    if settings is None:
        setting_rows = [("(cannot be read)", unknown(why))]
    else:
        setting_rows = [(k, setting(k, v)) for k, v in settings.items()]
    parts = [
        f"<h1>{escape(name)}</h1>",
        "".join(f'<span class="badge">{escape(b)}</span>' for b in badges) + held,
        f'<p class="meta">sampled every {escape(_format.count(every))} s; updated '
        f'<span id="updated">{escape(_format.when(row.get("sampled_at")))}</span>'
        ' <span id="status"></span></p>',
        f'<p class="error">{escape(row["error"])}</p>' if row.get("error") else "",
        _stats_table(row),
        '<div class="charts">'
        f'<img id="depth-chart" alt="depth over the last hour" '
        f'src="{escape(queue_url(name))}/depth.svg" width="640" height="200">'
        f'<img id="rate-chart" alt="published and consumed per second over the last hour" '
        f'src="{escape(queue_url(name))}/throughput.svg" width="640" height="200"></div>',
        "<h2>Settings</h2>",
        '<p class="meta">Stored with the queue (the defaults apply to the rest); hover '
        "a value for the number stored.</p>",
        _table(setting_rows or [("(none stored)", "-")]),
    ]
    if dead:
        parts.append(dead_letter_line(dead, row.get("dead_letter_depth")))
    if sources:
        links = ", ".join(f'<a href="{escape(queue_url(s))}">{escape(s)}</a>' for s in sources)
        parts.append(f"<p>Dead-letter queue of: {links}.</p>")
    parts.append(_partitions(row.get("parts") or ()))
    parts.append(_oldest(messages, problem, dead_letters=bool(sources), now=now))
    if token is not None:
        parts.append(_actions(name, row, settings_keys, token))
    return page(
        f"vsqs: {name}",
        "".join(parts),
        page_kind="queue",
        data={"api": f"/ui/api/queue/{quote(name, safe='')}", "every": str(every)},
    )


def confirm(name: str, action: str, what: str, fields: Mapping[str, str], token: str) -> bytes:
    """The page that asks before an action: the same form again, with ``confirm=yes``."""
    hidden = "".join(
        f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">'
        for k, v in fields.items()
        if k not in ("action", "csrf", "confirm")
    )
    hidden += '<input type="hidden" name="confirm" value="yes">'
    body = (
        f"<h1>Confirm: {escape(action)} {escape(name)}</h1><p>{escape(what)}</p>"
        + _form(name, action, token, f"Yes, {action} {name}", hidden)
        + f'<p><a href="{escape(queue_url(name))}">No, go back</a></p>'
    )
    return page(f"confirm {action}", body, page_kind="confirm")


def result(name: str, text: str, *, ok: bool) -> bytes:
    """What an action did (or why it failed), with the way back to the queue."""
    css = "done" if ok else "error"
    body = (
        f'<h1>{escape(name)}</h1><p id="result" class="{css}">{escape(text)}</p>'
        f'<p><a href="{escape(queue_url(name))}">Back to {escape(name)}</a> | '
        '<a href="/ui/">All queues</a></p>'
    )
    return page(f"vsqs: {name}", body, page_kind="result")


def error(status: int, text: str) -> bytes:
    return page(
        f"{status}", f'<h1>{status}</h1><p class="error">{escape(text)}</p>', page_kind="error"
    )
