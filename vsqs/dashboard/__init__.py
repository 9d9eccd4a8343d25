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
with ``admin: true`` may act, on the queues it may use, with the same limits as
through the SQS API (a dead-letter or redrive target is a queue the key may use).
Basic authentication sends the secret with every request: off loopback, put TLS in
front (a reverse proxy). Every request whose ``Host`` is not a loopback name nor one
of *allow_hosts* is refused (DNS rebinding: a page that rebinds its name to the
server would otherwise read the form token), as by the SQS API
(:class:`vsqs.serve.BrowserPolicy`).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import threading
import time
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from .. import AnyQueue, InvalidName, QueueNotFound, QueueRoot, VsqsError, validate_name
from ..serve import BrowserPolicy, Credential, Credentials, SqsError
from . import _charts, _pages
from ._actions import PEEK, SETTINGS, WHOLE, peek, plan_configure
from ._guard import (
    CSP,
    HTML,
    JSON,
    Refused,
    authenticate,
    parse_form,
    response_headers,
    token,
)
from ._sampler import Sampler

__all__ = ["CSP", "PEEK", "Dashboard", "Response"]

Response = tuple[int, list[tuple[str, str]], bytes]
"""What :meth:`Dashboard.handle` returns: status, headers, body."""

_STATIC: Final = {
    "dashboard.css": "text/css; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}


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
    :param allow_hosts: ``Host`` names accepted beside the loopback ones (as
        ``vsqs serve --allow-host``).
    :raises ValueError: an *allow_hosts* entry that is not a host name.
    """

    def __init__(
        self,
        root: QueueRoot,
        *,
        admin: bool = False,
        credentials: Credentials | None = None,
        sample_every: float = 5.0,
        allow_hosts: Iterable[str] = (),
    ) -> None:
        # No origin is allowed: the actions' forms come from the dashboard's own pages.
        self.policy = BrowserPolicy.of(allow_hosts)
        self.root = root
        self.admin = bool(admin)
        self.credentials = credentials
        self.sampler = Sampler(root, sample_every)
        self.sample_every = self.sampler.every
        self._secret = os.urandom(32)  # CSRF tokens: valid for this process's life
        self._lock = threading.Lock()  # _filtered
        self._filtered: dict[str, tuple[int, bytes]] = {}  # access key -> its overview
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
        """Answer one request for ``/``, ``/ui`` or anything under ``/ui/``.

        Safe from any number of threads at once: a page or refresh reads the latest
        round of samples (a snapshot, never a half-made one); an action is exactly as
        atomic as the queue method it calls (:meth:`~vsqs.Queue.purge`,
        :meth:`~vsqs.Queue.redrive`, :meth:`~vsqs.Queue.shutdown`,
        :meth:`~vsqs.Queue.configure`). Never raises for bad input: a refusal is an
        error page with its status (401, 403, 404, 405, 413, 415 or 400).

        :param method: the request's method (``GET``, ``HEAD``, ``POST``...).
        :param target: the request's path and query string.
        :param headers: the request's headers (any case).
        :param body: the request's body (a POSTed form).
        :returns: ``(status, headers, body)``, or ``None`` for a path that is not the
            dashboard's (the server answers 404).

        >>> import tempfile, vsqs
        >>> from vsqs.dashboard import Dashboard
        >>> with Dashboard(vsqs.QueueRoot(tempfile.mkdtemp())) as dashboard:
        ...     status, headers, body = dashboard.handle("GET", "/ui/api/overview", {}, b"")
        >>> status, body.count(b'"queues":[]')
        (200, 1)
        """
        path = urlsplit(target).path
        if path in ("/", "/ui"):
            path = "/ui/"
        if not path.startswith("/ui/"):
            return None
        lowered = {key.lower(): value for key, value in headers.items()}
        try:
            try:
                self.policy.check(method, lowered, changes=method == "POST")
            except SqsError as refused:
                raise Refused(refused.status, refused.text) from None
            user = authenticate(self.credentials, lowered)
            if method in ("GET", "HEAD"):  # the server sends no body for a HEAD
                return self._get(path, lowered, user)
            if method != "POST":
                raise Refused(  # noqa: TRY301 - one place turns every refusal into a page
                    405, f"{method} is not allowed here", [("Allow", "GET, HEAD, POST")]
                )
            return self._post(path, lowered, body, user)
        except Refused as refused:
            page = _pages.error(refused.status, refused.text)
            return refused.status, response_headers(HTML, *refused.headers), page

    def _can_act(self, user: Credential | None) -> bool:
        return self.admin and (self.credentials is None or (user is not None and user.admin))

    def _visible(self, name: str, user: Credential | None) -> bool:
        return user is None or user.allows(name)

    def _queue_name(self, raw: str, user: Credential | None) -> str:
        """The queue named by a path segment, if it exists and *user* may see it; 404."""
        name = unquote(raw)
        try:
            validate_name(name)
        except InvalidName:
            raise Refused(404, "no such queue") from None
        if name not in self.root or not self._visible(name, user):
            raise Refused(404, f"no queue {name!r} under this root")
        return name

    # -- GET ----------------------------------------------------------------------------

    def _get(self, path: str, headers: Mapping[str, str], user: Credential | None) -> Response:
        if path == "/ui/":
            return self._overview_page(user)
        if path.startswith("/ui/static/"):
            name = path.removeprefix("/ui/static/")
            if name not in _STATIC:
                raise Refused(404, "no such file")
            cached = response_headers(_STATIC[name])
            cached[-1] = ("Cache-Control", "no-cache")
            return 200, cached, self._static[name]
        if path == "/ui/api/overview":
            return self._overview_json(headers, user)
        if path.startswith("/ui/api/queue/"):
            name = self._queue_name(path.removeprefix("/ui/api/queue/"), user)
            return 200, response_headers(JSON), json.dumps(self._row(name)).encode()
        if path.startswith("/ui/queue/"):
            rest = path.removeprefix("/ui/queue/")
            raw, _, chart = rest.partition("/")
            name = self._queue_name(raw, user)
            if not chart:
                return self._queue_page(name, user)
            if chart in ("depth.svg", "throughput.svg"):
                return 200, response_headers("image/svg+xml"), self._chart(name, chart)
        raise Refused(404, "no such page")

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
        return 200, response_headers(HTML), body

    def _overview_json(self, headers: Mapping[str, str], user: Credential | None) -> Response:
        """The latest round as JSON: the bytes the sampler made, sent as they are (a
        filtered copy for a key that may not see every queue); 304 if unchanged."""
        snapshot = self.sampler.wait_first(timeout=30.0)
        etag = f'"{snapshot.version}-{id(self.sampler)}"'
        if headers.get("if-none-match") == etag:
            return 304, response_headers(JSON, ("ETag", etag)), b""
        body = snapshot.body
        if user is not None:  # made once per round and key
            with self._lock:
                cached = self._filtered.get(user.access_key)
            if cached is not None and cached[0] == snapshot.version:
                body = cached[1]
            else:
                document = json.loads(snapshot.body)
                document["queues"] = [q for q in document["queues"] if user.allows(q["name"])]
                body = json.dumps(document, separators=(",", ":")).encode()
                with self._lock:
                    self._filtered[user.access_key] = (snapshot.version, body)
        return 200, response_headers(JSON, ("ETag", etag)), body

    def _row(self, name: str) -> dict[str, Any]:
        self.sampler.wait_first(timeout=30.0)
        detail = self.sampler.detail(name)
        if detail is None:  # made since the last round: sample it now
            self.sampler.refresh_soon(name)
            self.sampler.sample_round()
            detail = self.sampler.detail(name)
        if detail is None:
            raise Refused(404, f"no queue {name!r} under this root")
        return detail

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
        settings: dict[str, object] | None = None
        messages: list[dict[str, Any]] | None = None
        problem = None
        try:
            with self._open(name) as queue:
                settings = dict(queue.settings())
                messages = peek(queue)
        except QueueNotFound:
            raise Refused(404, f"no queue {name!r} under this root") from None
        except (VsqsError, OSError, ValueError) as exc:
            # The page says what cannot be read, and shows the rest: never an empty queue.
            problem = f"{type(exc).__name__}: {exc}"
        body = _pages.queue_page(
            name,
            row,
            settings,
            messages,
            problem=problem,
            now=time.time(),
            every=self.sample_every,
            token=token(self._secret, user) if self._can_act(user) else None,
            settings_keys=list(SETTINGS),
            sources=[s for s in row.get("sources", ()) if self._visible(s, user)],
        )
        return 200, response_headers(HTML), body

    # -- POST: the actions --------------------------------------------------------------

    def _post(
        self, path: str, headers: Mapping[str, str], body: bytes, user: Credential | None
    ) -> Response:
        if not path.startswith("/ui/action/"):
            raise Refused(405, "only the actions take a POST", [("Allow", "GET, HEAD")])
        if not self.admin:
            raise Refused(403, "the dashboard is read-only (start the server with --admin)")
        if not self._can_act(user):
            raise Refused(403, "this access key may not act (its credentials lack admin)")
        form = parse_form(headers, body)
        expected = token(self._secret, user).encode()
        if not hmac.compare_digest(form.get("csrf", "").encode(), expected):
            raise Refused(403, "missing or stale form token: reload the page and try again")
        name = self._queue_name(path.removeprefix("/ui/action/"), user)
        action = form.get("action", "")
        try:
            with contextlib.ExitStack() as opened:
                queue = opened.enter_context(self._open(name))
                what, do = self._plan(queue, name, action, form, user, opened=opened)
                if form.get("confirm") != "yes":
                    page = _pages.confirm(name, action, what, form, token(self._secret, user))
                    return 200, response_headers(HTML), page
                text = do()
        except QueueNotFound:
            raise Refused(404, f"no queue {name!r} under this root") from None
        except (VsqsError, OSError, ValueError, TypeError) as exc:
            return (
                400,
                response_headers(HTML),
                _pages.result(name, f"{action} failed: {exc}", ok=False),
            )
        self.sampler.refresh_soon()
        return 200, response_headers(HTML), _pages.result(name, text, ok=True)

    def _open(self, name: str) -> contextlib.closing[AnyQueue]:
        """A handle of the queue *name* for one request, closed at its end.

        :raises QueueNotFound:"""
        return contextlib.closing(self.root.get(name))

    def _plan(
        self,
        queue: AnyQueue,
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
            return plan_configure(
                queue, name, form, lambda other: self._visible(other, user), self.root.__contains__
            )
        raise Refused(400, f"unknown action {action!r}")

    def _plan_redrive(
        self,
        queue: AnyQueue,
        name: str,
        form: Mapping[str, str],
        user: Credential | None,
        *,
        opened: contextlib.ExitStack,
    ) -> tuple[str, Any]:
        to_name = form.get("to", "").strip()
        target: AnyQueue | None = None
        if to_name:
            to_name = self._queue_name(to_name, user)
            target = opened.enter_context(self._open(to_name))
        raw_limit = form.get("limit", "").strip()
        limit = int(raw_limit) if WHOLE.fullmatch(raw_limit) else None
        if raw_limit and limit is None:
            raise Refused(400, f"limit must be a whole number >= 0, not {raw_limit!r}")
        where = f"to {to_name}" if to_name else "each to the queue it was dead-lettered from"
        count = "every message" if limit is None else f"at most {limit:,} messages"
        what = f"Move {count} of {name} {where} (their receive counts start again)."

        def redrive() -> str:
            moved = queue.redrive(to=target, limit=limit)
            return f"Moved {moved:,} messages from {name} {where}."

        return what, redrive
