"""A real ``vsqs serve`` in a thread, and boto3 clients on it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

import vsqs
from vsqs.serve import Credentials, Server, make_server


def client(url: str, access_key: str = "AKIATEST", secret_key: str = "secret") -> Any:  # noqa: S107 - a test key
    """A boto3 SQS client (the JSON protocol) on *url*, no retries."""
    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        config=Config(retries={"max_attempts": 1}, read_timeout=30, connect_timeout=5),
    )


Start = Callable[..., Server]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    """``start(root=None, credentials=None, pages=None)``: a server serving in a thread."""
    servers: list[tuple[Server, threading.Thread]] = []

    def run(
        root: str | Path | vsqs.QueueRoot | None = None,
        *,
        credentials: Credentials | None = None,
        **options: Any,
    ) -> Server:
        server = make_server(
            tmp_path / "root" if root is None else root,
            port=0,
            credentials=credentials,
            quiet=options.pop("quiet", True),
            **options,
        )
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append((server, thread))
        return server

    yield run
    for server, thread in servers:
        server.shutdown()
        thread.join(10)
        assert not thread.is_alive()


@pytest.fixture
def server(start: Start) -> Server:
    return start()


@pytest.fixture
def sqs(server: Server) -> Any:
    return client(server.url)


@pytest.fixture
def root(server: Server) -> vsqs.QueueRoot:
    return server.service.root
