"""``vsqs serve ROOT``: the SQS API over HTTP (see :mod:`vsqs.serve`)."""

from __future__ import annotations

import logging
import threading

import click

from .. import QueueRoot, _userfiles
from ..dashboard import Dashboard
from ..serve import MAX_CONNECTIONS, load_credentials, make_server
from ._common import CliError, Stopped


@click.command()
@click.argument("root", type=click.Path(file_okay=False))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=9324, show_default=True)
@click.option(
    "--credentials",
    "credentials_file",
    type=click.Path(dir_okay=False, exists=True),
    help="JSON file of access keys: every request must then be signed (SigV4) by one. "
    "Required on any address but a loopback one.",
)
@click.option("--quiet", is_flag=True, help="No access log on stderr.")
@click.option("--admin", is_flag=True, help="Let the dashboard change queues (purge, redrive...).")
@click.option(
    "--max-connections",
    type=click.IntRange(1),
    default=MAX_CONNECTIONS,
    show_default=True,
    help="Connections served at once; more are answered 503 (SDKs retry).",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="A Host name clients use beside localhost/127.0.0.1/[::1] (any port; repeat "
    "for more). Any other Host is refused (DNS rebinding).",
)
@click.option(
    "--allow-origin",
    "allow_origins",
    multiple=True,
    metavar="URL",
    help="The origin (scheme://host:port) of a web app that may change queues from a "
    "browser; CORS is answered for it alone (repeat for more).",
)
@click.option("--create", is_flag=True, help="Make ROOT if it does not exist.")
def serve(
    root: str,
    *,
    host: str,
    port: int,
    credentials_file: str | None,
    quiet: bool,
    admin: bool,
    max_connections: int,
    allow_hosts: tuple[str, ...],
    allow_origins: tuple[str, ...],
    create: bool,
) -> None:
    """Serve the queues under ROOT over the SQS API (JSON and query protocols).

    Point any SQS client at http://HOST:PORT (boto3: endpoint_url). Each directory
    under ROOT is a queue. --port 0 picks a free port (printed). SIGTERM or Ctrl-C
    stops it gracefully: requests in flight finish, long polls return empty. Runs on
    uvicorn (the serve extra); a client that stalls is cut off by deadlines (see the
    guide, "The SQS API").
    """
    if quiet:  # uvicorn's own warnings too (a malformed request refused, say)
        logging.getLogger("uvicorn").setLevel(logging.ERROR)
    credentials = None if credentials_file is None else load_credentials(credentials_file)
    if not create and not _userfiles.is_dir(root):  # a typo would serve an empty new root
        raise CliError(f"no directory {root!r} to serve (give --create to make it)")
    queue_root = QueueRoot(root)
    # The dashboard at / and /ui/ (read-only unless --admin); its sampler thread stops
    # with the server.
    try:
        dashboard = Dashboard(
            queue_root, admin=admin, credentials=credentials, allow_hosts=allow_hosts
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    try:
        server = make_server(
            queue_root,
            host,
            port,
            credentials=credentials,
            quiet=quiet,
            pages=dashboard.handle,
            max_connections=max_connections,
            allow_hosts=allow_hosts,
            allow_origins=allow_origins,
        )
    except (ValueError, ModuleNotFoundError) as exc:  # a bad allow-list; no serve extra
        dashboard.close()
        raise CliError(str(exc)) from None
    except OSError as exc:  # EADDRINUSE, EACCES (a port below 1024), EADDRNOTAVAIL
        dashboard.close()
        if isinstance(exc, PermissionError) and not exc.errno:
            raise CliError(str(exc)) from None  # UnsafeAddress: no credentials off loopback
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    click.echo(f"vsqs serve: {queue_root.path} at {server.url}", err=True)
    thread = threading.Thread(target=server.serve_forever, name="vsqs-serve", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(1.0)
    except (KeyboardInterrupt, Stopped):
        click.echo("vsqs serve: stopping (requests in flight finish)", err=True)
    finally:
        server.shutdown()
        dashboard.close()
    click.echo("vsqs serve: stopped", err=True)
