"""``vsqs serve``: the SQS API over HTTP on a vsqs root (issue 28).

Every SQS client (boto3, the aws cli, the Java/JS/Go SDKs) can use the queues of a
:class:`~vsqs.QueueRoot` through this server: each directory of the root is a queue,
its URL ``http://HOST:PORT/000000000000/NAME``. Both wire protocols (AWS JSON 1.0 and
query) are answered on one port. The server keeps no state of its own beyond short
caches, so any number of servers, on any hosts, may serve one root; a message sent
through one is received through another, or through the library.

>>> server = make_server("/var/lib/queues", port=0)  # doctest: +SKIP
>>> server.serve_forever()  # doctest: +SKIP

``vsqs serve`` runs on uvicorn (the ``serve`` extra); the ASGI application
(:func:`asgi_app`) runs under any ASGI server.

**Differences from SQS**, each stated where it is made:

* ``MessageId`` is a UUID that holds the vsqs id's digits; the account id
  in URLs and ARNs is ``000000000000`` (any is accepted), the region the one a request
  was signed for (``us-east-1`` unsigned).
* FIFO queues: the ``ReceiveRequestAttemptId`` answer is kept by the server that gave
  it, in memory, for five minutes.
* A message keeps at most 10 stored attributes of at most 8 KiB in all: 10 message
  attributes *and* an explicit deduplication id or a trace header are refused.
* ``Policy``, ``RedriveAllowPolicy``, ``FifoThroughputLimit``, the KMS attributes and
  the permissions of ``AddPermission`` are recorded and listed, never enforced (access
  is the credentials file's business).
* No 60-second wait before a deleted queue's name is free again, no 60-second limit
  between two purges.
* ``SenderId`` is the key that signed the *receive* (senders are not recorded);
  ``ApproximateFirstReceiveTimestamp`` of a message received more than once is its
  last counted receive.
* A queue the library made without a retention keeps its messages for ever and shows
  ``MessageRetentionPeriod`` 1209600; one made through the API gets SQS's 4 days.
* A receipt handle of an earlier receive never deletes or changes a later delivery of
  its message (SQS lets it).
* ``MaximumMessageSize`` is 1 MiB by default and at most, as SQS; a request body up to
  8 MiB is read.
"""

from __future__ import annotations

from ._asgi import THREADS, ASGIApp, Deadlines, asgi_app
from ._credentials import Credential, Credentials, CredentialsError, load_credentials
from ._errors import SqsError
from ._origin import BrowserPolicy
from ._server import MAX_CONNECTIONS, Pages, Server, UnsafeAddress, make_server

__all__ = [
    "MAX_CONNECTIONS",
    "THREADS",
    "ASGIApp",
    "BrowserPolicy",
    "Credential",
    "Credentials",
    "CredentialsError",
    "Deadlines",
    "Pages",
    "Server",
    "SqsError",
    "UnsafeAddress",
    "asgi_app",
    "load_credentials",
    "make_server",
]
