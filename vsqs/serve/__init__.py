"""``vsqs serve``: the SQS API over HTTP on a vsqs root (issue 28).

Every SQS client (boto3, the aws cli, the Java/JS/Go SDKs) can use the queues of a
:class:`~vsqs.QueueRoot` through this server: each directory of the root is a queue,
its URL ``http://HOST:PORT/000000000000/NAME``. Both wire protocols (AWS JSON 1.0 and
query) are answered on one port. The server keeps no state of its own beyond short
caches, so any number of servers, on any hosts, may serve one root; a message sent
through one is received through another, or through the library.

>>> server = make_server("/var/lib/queues", port=0)  # doctest: +SKIP
>>> server.serve_forever()  # doctest: +SKIP

Only the standard library is used.
"""

from __future__ import annotations

from ._credentials import Credential, Credentials, CredentialsError, load_credentials
from ._errors import SqsError
from ._server import Pages, Server, UnsafeAddress, make_server

__all__ = [
    "Credential",
    "Credentials",
    "CredentialsError",
    "Pages",
    "Server",
    "SqsError",
    "UnsafeAddress",
    "load_credentials",
    "make_server",
]
