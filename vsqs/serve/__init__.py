"""``vsqs serve``: the SQS API over HTTP on a vsqs root (issue 28).

Every SQS client (boto3, the aws cli, the Java/JS/Go SDKs) can use the queues of a
:class:`~vsqs.QueueRoot` through this server. The server keeps no state of its own
beyond short caches, so any number of servers may serve one root.
"""

from __future__ import annotations

from ._credentials import Credential, Credentials, CredentialsError, load_credentials

__all__ = ["Credential", "Credentials", "CredentialsError", "load_credentials"]
