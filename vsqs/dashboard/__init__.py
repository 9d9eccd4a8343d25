"""A dashboard in the browser for the queues of a root, served by ``vsqs serve``.

``vsqs serve ROOT`` shows it at ``/`` (and ``/ui/``) on the port of the SQS API: an
overview of every queue (ready, held, delayed, new, the oldest message's age, how many
came back after a receive, the dead-letter queue and its depth, partitions, FIFO, shut
down), refreshed every few seconds, and a page per queue with charts of the last hour,
its settings, its partitions and a peek at its oldest messages. With ``--admin`` the
queue pages also purge, redrive, shut down and change a setting.

The server never imports this package: it is given :meth:`Dashboard.handle` as its
``pages`` callback (see :func:`vsqs.serve.make_server`). Used on its own::

    dashboard = Dashboard(vsqs.QueueRoot("/srv/queues"), admin=True)
    status, headers, body = dashboard.handle("GET", "/ui/api/overview", {}, b"")
    dashboard.close()

Safety, by construction: every value from a queue is escaped; the pages have no inline
script, style or event handler, and every response carries a strict
Content-Security-Policy; the dashboard is read-only unless ``admin=True``; each action
is a POST that carries a token only the dashboard's own pages have (CSRF), is refused
from another origin, and asks for a confirmation first. With *credentials* (a server
that listens beyond loopback), every request needs HTTP Basic authentication (user:
access key, password: secret key), a key sees only the queues it may use, and only a key
with ``admin: true`` may act. Basic authentication sends the secret with every request:
off loopback, put TLS in front (a reverse proxy).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import os
import re
import time
from collections.abc import Mapping
from importlib import resources
from itertools import islice
from typing import Any, Final
from urllib.parse import parse_qs, unquote, urlsplit

from .. import InvalidName, Queue, QueueNotFound, QueueRoot, VsqsError, validate_name
from ..serve import Credential, Credentials
from . import _charts, _pages
from ._sampler import Sampler

__all__ = ["CSP", "PEEK", "Dashboard", "Response"]

Response = tuple[int, list[tuple[str, str]], bytes]
"""What :meth:`Dashboard.handle` returns: status, headers, body."""

CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
"""The Content-Security-Policy of every response: only the package's own script, style
and images run or load; no inline script or style, no framing, forms post only here."""
PEEK: Final = 20
"""Messages shown on a queue page (the oldest ready ones)."""
_MAX_FORM: Final = 64 << 10
_WHOLE: Final = re.compile(r"[0-9]{1,18}")
_SETTINGS: Final = {
    "visibility_timeout": float,
    "delay": float,
    "capacity": int,
    "dead_letter": str,
    "max_receives": int,
    "retention": float,
    "dedup_window": float,
}
_STATIC: Final = {
    "dashboard.css": "text/css; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}


class _Refused(Exception):
    """A request answered with an error page (status, text, extra headers)."""

    def __init__(self, status: int, text: str, headers: list[tuple[str, str]] | None = None):
        super().__init__(text)
        self.status = status
        self.text = text
        self.headers = headers or []


def _headers(content_type: str, *extra: tuple[str, str]) -> list[tuple[str, str]]:
    return [
        ("Content-Type", content_type),
        ("Content-Security-Policy", CSP),
        ("X-Content-Type-Options", "nosniff"),
        ("X-Frame-Options", "DENY"),
        ("Referrer-Policy", "same-origin"),  # no-referrer would make a form's Origin "null"
        ("Cache-Control", "no-store"),
        *extra,
    ]


_HTML: Final = "text/html; charset=utf-8"
_JSON: Final = "application/json"


class Dashboard:
    """The dashboard of the queues of *root*; :meth:`handle` is ``vsqs serve``'s
    ``pages`` callback.

    Starts one daemon thread that samples every queue every *sample_every* seconds
    (:meth:`close` stops it). Thread-safe: the server may call :meth:`handle` from any
    number of threads at once; pages read the latest round of samples, and an action
    changes a queue through its own atomic operation (purge, redrive, shutdown,
    configure), whose guarantee it keeps.

    :param root: the queues shown.
    :param admin: allow the actions (purge, redrive, shut down, change a setting).
    :param credentials: require HTTP Basic authentication with these keys (and
        ``admin: true`` for an action); ``None`` on loopback.
    :param sample_every: seconds between two samples of a queue (and between two
        refreshes of an open page).
    """

    def __init__(
        self,
        root: QueueRoot,
        *,
        admin: bool = False,
        credentials: Credentials | None = None,
        sample_every: float = 5.0,
    ) -> None:
        self.root = root
        self.admin = bool(admin)
        self.credentials = credentials
        self.sampler = Sampler(root, sample_every)
        self.sample_every = self.sampler.every
        self._secret = os.urandom(32)  # CSRF tokens: valid for this process's life
        package = resources.files(__name__) / "static"
        self._static = {name: (package / name).read_bytes() for name in _STATIC}
        self.sampler.start()

    def close(self) -> None:
        """Stop the sampler thread and close the queue handles it kept."""
        self.sampler.close()

    def __enter__(self) -> Dashboard:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the callback -------------------------------------------------------------------

    def handle(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes
    ) -> Response | None:
        """Answer one request for ``/``, ``/ui`` or anything under ``/ui/``; ``None``
        for any other path (the server answers 404)."""
        path = urlsplit(target).path
        if path in ("/", "/ui"):
            path = "/ui/"
        if not path.startswith("/ui/"):
            return None
        lowered = {key.lower(): value for key, value in headers.items()}
        try:
            user = self._authenticate(lowered)
            if method in ("GET", "HEAD"):  # the server sends no body for a HEAD
                return self._get(path, lowered, user)
            if method != "POST":
                raise _Refused(  # noqa: TRY301 - one place turns every refusal into a page
                    405, f"{method} is not allowed here", [("Allow", "GET, HEAD, POST")]
                )
            return self._post(path, lowered, body, user)
        except _Refused as refused:
            page = _pages.error(refused.status, refused.text)
            return refused.status, _headers(_HTML, *refused.headers), page

    def _authenticate(self, headers: Mapping[str, str]) -> Credential | None:
        """The key of the request (``None`` without credentials); 401 if none is valid."""
        if self.credentials is None:
            return None
        challenge = [("WWW-Authenticate", 'Basic realm="vsqs dashboard", charset="UTF-8"')]
        scheme, _, encoded = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            raise _Refused(401, "sign in with an access key and its secret key", challenge)
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise _Refused(401, "malformed credentials", challenge) from None
        access_key, _, secret = decoded.partition(":")
        key = self.credentials.lookup(access_key)
        expected = key.secret_key if key is not None else "\0"  # compare anyway: same time
        matches = hmac.compare_digest(secret.encode(), expected.encode())
        if key is None or not matches:
            raise _Refused(401, "unknown access key or wrong secret key", challenge)
        return key

    def _can_act(self, user: Credential | None) -> bool:
        return self.admin and (self.credentials is None or (user is not None and user.admin))

    def _token(self, user: Credential | None) -> str:
        who = b"" if user is None else user.access_key.encode()
        return hmac.new(self._secret, b"csrf\0" + who, hashlib.sha256).hexdigest()

    def _visible(self, name: str, user: Credential | None) -> bool:
        return user is None or user.allows(name)

    def _queue_name(self, raw: str, user: Credential | None) -> str:
        """The queue named by a path segment, if it exists and *user* may see it; 404."""
        name = unquote(raw)
        try:
            validate_name(name)
        except InvalidName:
            raise _Refused(404, "no such queue") from None
        if name not in self.root or not self._visible(name, user):
            raise _Refused(404, f"no queue {name!r} under this root")
        return name

    # -- GET ----------------------------------------------------------------------------

    def _get(self, path: str, headers: Mapping[str, str], user: Credential | None) -> Response:
        if path == "/ui/":
            return self._overview_page(user)
        if path.startswith("/ui/static/"):
            name = path.removeprefix("/ui/static/")
            if name not in _STATIC:
                raise _Refused(404, "no such file")
            cached = _headers(_STATIC[name])
            cached[-1] = ("Cache-Control", "no-cache")
            return 200, cached, self._static[name]
        if path == "/ui/api/overview":
            return self._overview_json(headers, user)
        if path.startswith("/ui/api/queue/"):
            name = self._queue_name(path.removeprefix("/ui/api/queue/"), user)
            return 200, _headers(_JSON), json.dumps(self._row(name)).encode()
        if path.startswith("/ui/queue/"):
            rest = path.removeprefix("/ui/queue/")
            raw, _, chart = rest.partition("/")
            name = self._queue_name(raw, user)
            if not chart:
                return self._queue_page(name, user)
            if chart in ("depth.svg", "throughput.svg"):
                return 200, _headers("image/svg+xml"), self._chart(name, chart)
        raise _Refused(404, "no such page")

    def _document(self, user: Credential | None) -> dict[str, Any]:
        snapshot = self.sampler.wait_first(timeout=30.0)
        document: dict[str, Any] = json.loads(snapshot.body)
        if user is not None:
            document["queues"] = [q for q in document["queues"] if user.allows(q["name"])]
        return document

    def _overview_page(self, user: Credential | None) -> Response:
        body = _pages.overview(
            self.root.path,
            self._document(user),
            every=self.sample_every,
            admin=self._can_act(user),
            user=None if user is None else user.access_key,
        )
        return 200, _headers(_HTML), body

    def _overview_json(self, headers: Mapping[str, str], user: Credential | None) -> Response:
        """The latest round as JSON: the bytes the sampler made, sent as they are (a
        filtered copy for a key that may not see every queue); 304 if unchanged."""
        snapshot = self.sampler.wait_first(timeout=30.0)
        etag = f'"{snapshot.version}-{id(self.sampler)}"'
        if headers.get("if-none-match") == etag:
            return 304, _headers(_JSON, ("ETag", etag)), b""
        body = snapshot.body
        if user is not None:
            body = json.dumps(self._document(user), separators=(",", ":")).encode()
        return 200, _headers(_JSON, ("ETag", etag)), body

    def _row(self, name: str) -> dict[str, Any]:
        for row in self._document(None)["queues"]:
            if row["name"] == name:
                return dict(row)
        self.sampler.refresh_soon(name)  # made since the last round: sample it now
        for row in json.loads(self.sampler.sample_round().body)["queues"]:
            if row["name"] == name:
                return dict(row)
        raise _Refused(404, f"no queue {name!r} under this root")

    def _chart(self, name: str, which: str) -> bytes:
        points = self.sampler.chart(name)
        if which == "depth.svg":
            return _charts.svg(f"{name}: messages", points, [(1, "depth")])
        return _charts.svg(
            f"{name}: messages per second",
            points,
            [(2, "published"), (3, "consumed")],
            per_second=True,
        )

    def _queue_page(self, name: str, user: Credential | None) -> Response:
        row = self._row(name)
        try:
            with self._open(name) as queue:
                settings = dict(queue.settings())
                messages = _peek(queue)
        except QueueNotFound:
            raise _Refused(404, f"no queue {name!r} under this root") from None
        except (VsqsError, OSError, ValueError) as exc:
            raise _Refused(500, f"{name}: {type(exc).__name__}: {exc}") from None
        body = _pages.queue_page(
            name,
            row,
            settings,
            messages,
            now=time.time(),
            every=self.sample_every,
            token=self._token(user) if self._can_act(user) else None,
            settings_keys=list(_SETTINGS),
            sources=[s for s in row.get("sources", ()) if self._visible(s, user)],
        )
        return 200, _headers(_HTML), body

    # -- POST: the actions --------------------------------------------------------------

    def _post(
        self, path: str, headers: Mapping[str, str], body: bytes, user: Credential | None
    ) -> Response:
        if not path.startswith("/ui/action/"):
            raise _Refused(405, "only the actions take a POST", [("Allow", "GET, HEAD")])
        if not self.admin:
            raise _Refused(403, "the dashboard is read-only (start the server with --admin)")
        if not self._can_act(user):
            raise _Refused(403, "this access key may not act (its credentials lack admin)")
        _same_origin(headers)
        form = _form(headers, body)
        if not hmac.compare_digest(form.get("csrf", "").encode(), self._token(user).encode()):
            raise _Refused(403, "missing or stale form token: reload the page and try again")
        name = self._queue_name(path.removeprefix("/ui/action/"), user)
        action = form.get("action", "")
        try:
            with contextlib.ExitStack() as opened:
                queue = opened.enter_context(self._open(name))
                what, do = self._plan(queue, name, action, form, user, opened=opened)
                if form.get("confirm") != "yes":
                    page = _pages.confirm(name, action, what, form, self._token(user))
                    return 200, _headers(_HTML), page
                text = do()
        except QueueNotFound:
            raise _Refused(404, f"no queue {name!r} under this root") from None
        except (VsqsError, OSError, ValueError, TypeError) as exc:
            return 400, _headers(_HTML), _pages.result(name, f"{action} failed: {exc}", ok=False)
        self.sampler.refresh_soon()
        return 200, _headers(_HTML), _pages.result(name, text, ok=True)

    def _open(self, name: str) -> contextlib.closing[Queue]:
        """A handle of the queue *name* for one request, closed at its end.

        :raises QueueNotFound:"""
        return contextlib.closing(self.root.get(name))

    def _plan(
        self,
        queue: Queue,
        name: str,
        action: str,
        form: Mapping[str, str],
        user: Credential | None,
        *,
        opened: contextlib.ExitStack,
    ) -> tuple[str, Any]:
        """What *action* will do (said on the confirmation page) and a function doing it."""
        if action == "purge":
            depth = queue.counts()
            what = (
                f"Delete every ready, held and delayed message of {name} "
                f"(now {depth.ready + depth.held + depth.delayed:,}). This cannot be undone."
            )
            return what, lambda: f"Purged {queue.purge():,} messages from {name}."
        if action == "shutdown":
            what = (
                f"Shut {name} down for every process: publishes are refused from now on and "
                "consumers receive what is left. vsqs cannot reopen it."
            )

            def shut() -> str:
                queue.shutdown()
                return f"{name} is shut down."

            return what, shut
        if action == "redrive":
            return self._plan_redrive(queue, name, form, user, opened=opened)
        if action == "configure":
            return _plan_configure(queue, name, form)
        raise _Refused(400, f"unknown action {action!r}")

    def _plan_redrive(
        self,
        queue: Queue,
        name: str,
        form: Mapping[str, str],
        user: Credential | None,
        *,
        opened: contextlib.ExitStack,
    ) -> tuple[str, Any]:
        to_name = form.get("to", "").strip()
        target: Queue | None = None
        if to_name:
            to_name = self._queue_name(to_name, user)
            target = opened.enter_context(self._open(to_name))
        raw_limit = form.get("limit", "").strip()
        limit = int(raw_limit) if _WHOLE.fullmatch(raw_limit) else None
        if raw_limit and limit is None:
            raise _Refused(400, f"limit must be a whole number >= 0, not {raw_limit!r}")
        where = f"to {to_name}" if to_name else "each to the queue it was dead-lettered from"
        count = "every message" if limit is None else f"at most {limit:,} messages"
        what = f"Move {count} of {name} {where} (their receive counts start again)."

        def redrive() -> str:
            moved = queue.redrive(to=target, limit=limit)
            return f"Moved {moved:,} messages from {name} {where}."

        return what, redrive


def _plan_configure(queue: Queue, name: str, form: Mapping[str, str]) -> tuple[str, Any]:
    key = form.get("key", "")
    if key not in _SETTINGS:
        raise _Refused(400, f"unknown setting {key!r}; known: {', '.join(_SETTINGS)}")
    raw = form.get("value", "").strip()
    value: object = None
    if raw:
        try:
            value = _SETTINGS[key](raw)
        except ValueError:
            kind = "a whole number" if _SETTINGS[key] is int else "a number of seconds"
            raise _Refused(400, f"{key} must be {kind}, not {raw!r}") from None
    shown = "the default (removed)" if value is None else repr(value)
    what = f"Store {key} = {shown} with {name}; handles opened from now on use it."

    def configure() -> str:
        stored = queue.configure(**{key: value})  # type: ignore[arg-type]  # checked above
        return f"{name}: {key} is now {shown}. Stored settings: {json.dumps(stored)}"

    return what, configure


def _same_origin(headers: Mapping[str, str]) -> None:
    """Refuse a POST that a browser says comes from another site (a second guard
    beside the form token)."""
    if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        raise _Refused(403, "a cross-site form is refused")
    origin = headers.get("origin")
    if origin is not None and origin != "null":
        if urlsplit(origin).netloc != headers.get("host", ""):
            raise _Refused(403, "a form from another origin is refused")
    elif origin == "null":
        raise _Refused(403, "a form from an opaque origin is refused")


def _form(headers: Mapping[str, str], body: bytes) -> dict[str, str]:
    kind = headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise _Refused(415, "an action is a form (application/x-www-form-urlencoded)")
    if len(body) > _MAX_FORM:
        raise _Refused(413, "form too large")
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=32)
    except (UnicodeDecodeError, ValueError):
        raise _Refused(400, "malformed form") from None
    return {key: values[-1] for key, values in fields.items()}


def _peek(queue: Queue) -> list[dict[str, Any]]:
    """The oldest ready messages (never claimed), with their dead-letter history."""
    out = []
    for message in islice(queue.browse(), PEEK):
        entry: dict[str, Any] = {
            "id": message.id,
            "sent_at": message.sent_at,
            "receive_count": message.receive_count,
            "attributes": dict(message.attributes),
            "body": message.body,
        }
        part = _partition_of(queue, message.queue)
        try:
            history = part.history(message.id)
        except (VsqsError, OSError):
            history = None  # RACE: received and deleted since the browse
        if history is not None and history.source is not None:
            entry.update(
                source=_source_name(queue, history.source),
                source_id=history.source_id,
                reason=history.reason,
                dead_lettered=history.dead_lettered,
                receive_count=max(message.receive_count, history.receive_count),
            )
        out.append(entry)
    return out


def _partition_of(queue: Queue, directory: str) -> Queue:
    """The partition of *queue* whose directory is *directory* (the queue itself if it
    is not partitioned)."""
    for part in queue.partition_queues:
        if part.path == directory:
            return part
    return queue


def _source_name(queue: Queue, source: str) -> str:
    """The name of the queue a dead letter came from: its directory's name when it is
    beside *queue* (or a partition of a queue beside it); the path as recorded otherwise."""
    root = os.path.dirname(queue.path)
    if source.startswith(root + os.sep):
        return source[len(root) + 1 :].partition(os.sep)[0]
    return source
