"""Real ``vsqs serve`` processes and the real SQS clients the tests point at them.

:class:`Served` starts ``python -m vsqs serve ROOT --port PORT`` (this interpreter, so the
checkout's vsqs) on a free port and waits until it accepts connections; ``kill()`` is a
``kill -9``. The clients live outside ``.venv`` (``tests/setup-sqs-clients.sh``, which
``make test`` runs, installs them): :func:`need` fails a test with one line saying how to
get a missing one. Every client gets dummy credentials from its environment and reads no
``~/.aws``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import pytest

CHECKOUT: Final = Path(__file__).resolve().parents[2]
HERE: Final = Path(__file__).resolve().parent
SETUP: Final = "sh tests/setup-sqs-clients.sh (make test runs it; node and npm need root)"
AWS_CLI: Final = CHECKOUT / ".venv-awscli" / "bin" / "aws"
QUERY_PYTHON: Final = CHECKOUT / ".venv-query" / "bin" / "python"
JS_DIR: Final = HERE / "js"
REGION: Final = "us-east-1"
# Any key signs: on 127.0.0.1 without --credentials the server checks no signature.
ACCESS_KEY: Final = "AKIDEXAMPLE"
SECRET: Final = "dummy"  # noqa: S105 (not a secret: see above)
SERVE: Final = (sys.executable, "-m", "vsqs", "serve")


def need(path: Path | str | None, what: str) -> str:
    """*path* as a string, or fail the test: *what* is missing, and how to install it."""
    if path is None or not os.path.exists(path):
        pytest.fail(f"{what} is not installed ({path}): {SETUP}", pytrace=False)
    return str(path)


def node() -> str:
    """The node that runs the JavaScript SDK, with the SDK installed beside the script."""
    need(JS_DIR / "node_modules" / "@aws-sdk" / "client-sqs", "the JavaScript SDK v3")
    return need(shutil.which("node"), "node")


def client_env(home: Path) -> dict[str, str]:
    """An environment for a client process: dummy credentials, no ``~/.aws`` of anyone's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        HOME=str(home),
        AWS_ACCESS_KEY_ID=ACCESS_KEY,
        AWS_SECRET_ACCESS_KEY=SECRET,
        AWS_DEFAULT_REGION=REGION,
        AWS_CONFIG_FILE=str(home / "no-aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(home / "no-aws-credentials"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


def boto3_client(url: str, *, timeout: float = 30) -> Any:
    """boto3 (in ``.venv``: the JSON protocol) on *url*, dummy credentials, no retries."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
        config=Config(
            retries={"total_max_attempts": 1},
            connect_timeout=timeout,
            read_timeout=timeout,
            max_pool_connections=32,
        ),
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Served:
    """One ``vsqs serve ROOT`` process on 127.0.0.1 and a free port."""

    def __init__(
        self, root: Path, *args: str, env: Mapping[str, str] | None = None, quiet: bool = True
    ) -> None:
        """*quiet*: ``--quiet`` (no access log; a failure's traceback is not printed either)."""
        self.root = root
        self.log = root.parent / f"serve-{id(self)}.log"
        quiet_flag = ["--quiet"] if quiet else []
        for _attempt in range(5):  # another process may take the free port first
            self.port = _free_port()
            with self.log.open("wb") as log:
                self.process = subprocess.Popen(
                    [*SERVE, str(root), "--port", str(self.port), *quiet_flag, "--create", *args],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=dict(env) if env is not None else None,
                )
            if self._listening():
                return
            self.kill()
        raise RuntimeError(f"vsqs serve did not start: {self.log.read_text()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _listening(self) -> bool:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return True
            time.sleep(0.05)
        return False

    def kill(self) -> None:
        """``kill -9``: the server gets no chance to finish anything."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM, as a service manager stops it; SIGKILL if it takes more than 30 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


@contextlib.contextmanager
def served(root: Path, *args: str) -> Iterator[Served]:
    """A running :class:`Served`, stopped whatever happens."""
    server = Served(root, *args)
    try:
        yield server
    finally:
        server.stop()
