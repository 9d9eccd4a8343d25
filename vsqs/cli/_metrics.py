"""``vsqs stats --format prometheus`` and ``vsqs metrics serve`` (the ``metrics`` extra).

Both print what :class:`vsqs.metrics.QueueCollector` collects, in the Prometheus text
exposition format written by ``prometheus_client`` itself: for node_exporter's textfile
collector (``vsqs stats ... --format prometheus > /var/lib/node_exporter/vsqs.prom``,
written to a temporary name and renamed, as its documentation asks) or for scraping.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Final

import click

from .. import QueueRoot, _userfiles
from ._common import CliError, open_queue

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from .. import AnyQueue

MISSING: Final = (
    "this needs the 'metrics' extra; install it from a clone of vsqs with pip install '.[metrics]'"
)


def prometheus_text(queues: Iterable[tuple[str, AnyQueue]]) -> str:
    """The text exposition of one sample of each ``(label, queue)``."""
    try:
        from prometheus_client import CollectorRegistry, generate_latest  # noqa: PLC0415
        from prometheus_client.registry import Collector  # noqa: PLC0415

        from ..metrics import families, samples  # noqa: PLC0415 -- needs prometheus_client
    except ImportError:
        raise CliError(f"--format prometheus: {MISSING}") from None

    class _Once(Collector):
        def collect(self) -> Iterator[Metric]:
            return families(samples(queues))

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Once())
    return generate_latest(registry).decode()


@click.group()
def metrics() -> None:
    """Export queue metrics (Prometheus text format; see the metrics guide)."""


@metrics.command()
@click.argument("queues", nargs=-1, type=click.Path())
@click.option(
    "--root",
    "roots",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Also every queue under this root, labelled by name (repeatable).",
)
@click.option("--port", type=click.IntRange(0, 65535), default=9464, show_default=True)
@click.option("--addr", default="127.0.0.1", show_default=True, help="Address to listen on.")
def serve(queues: tuple[str, ...], roots: tuple[str, ...], port: int, addr: str) -> None:
    """Serve the metrics of QUEUES (and --root) at http://ADDR:PORT/metrics.

    Each scrape reads each queue's counters and lists its directory; it never reads a
    message body and changes nothing. --port 0 picks a free port (printed). Runs until
    interrupted.
    """
    try:
        from prometheus_client import CollectorRegistry, start_http_server  # noqa: PLC0415

        from ..metrics import QueueCollector, Source  # noqa: PLC0415
    except ImportError:
        raise CliError(MISSING) from None
    if not queues and not roots:
        raise click.UsageError("name at least one QUEUE or --root")
    sources: list[Source] = [(name, open_queue(name)) for name in queues]
    for root in roots:
        if not _userfiles.is_dir(root):  # a typo must not create an empty root
            raise CliError(f"no queue root at {root}")
        sources.append(QueueRoot(root))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(*sources))
    try:
        server, thread = start_http_server(port, addr, registry)
    except OSError as exc:  # EADDRINUSE, EACCES (a port below 1024), EADDRNOTAVAIL
        raise CliError(f"cannot listen on {addr}:{port}: {exc.strerror or exc}") from None
    bound = server.server_address[1]
    click.echo(f"serving http://{addr}:{bound}/metrics", err=True)
    try:
        thread.join()
    finally:
        server.shutdown()
