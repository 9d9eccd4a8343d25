"""Access keys for ``vsqs serve --credentials FILE``: which key may use which queues.

The file is JSON::

    {"keys": [
        {"access_key": "AKIAEXAMPLE", "secret_key": "...", "queues": ["orders-*"]},
        {"access_key": "AKIAADMIN", "secret_key": "...", "queues": ["*"], "admin": true}
    ]}

``queues`` holds :func:`fnmatch.fnmatchcase` patterns over queue *names* (default
``["*"]``); ``admin`` (default false) is only read by the dashboard. The file is read
once, at start-up; nothing here does I/O after :func:`load_credentials` returns.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Final

from .. import VsqsError, _userfiles

__all__ = ["Credential", "Credentials", "CredentialsError", "load_credentials"]

_KEY_FIELDS: Final = frozenset({"access_key", "secret_key", "queues", "admin"})


class CredentialsError(VsqsError, ValueError):
    """A credentials file that cannot be used; the message names the problem."""

    def __init__(self, path: str, problem: str, message: str | None = None) -> None:
        self.path = path
        self.problem = problem
        super().__init__(message or f"credentials file {path!r}: {problem}")

    def _pickle_args(self) -> dict[str, Any]:
        return {"path": self.path, "problem": self.problem, "message": str(self)}


@dataclass(frozen=True)
class Credential:
    """One access key: its secret, the queue-name patterns it may use, whether it is
    an administrator (for the dashboard)."""

    access_key: str
    secret_key: str
    queues: tuple[str, ...] = ("*",)
    admin: bool = False

    def allows(self, queue_name: str) -> bool:
        """Whether this key may use the queue named *queue_name* (any pattern matches,
        case-sensitively, as queue names are)."""
        return any(fnmatchcase(queue_name, pattern) for pattern in self.queues)

    def __repr__(self) -> str:
        # Never print a secret into a log or a traceback.
        return (
            f"Credential(access_key={self.access_key!r}, secret_key='***', "
            f"queues={self.queues!r}, admin={self.admin!r})"
        )


class Credentials:
    """The keys of one credentials file, looked up by access key."""

    def __init__(self, keys: Iterable[Credential]) -> None:
        self._keys: dict[str, Credential] = {}
        for key in keys:
            if key.access_key in self._keys:
                raise ValueError(f"access key {key.access_key!r} is given twice")
            self._keys[key.access_key] = key

    def lookup(self, access_key: str) -> Credential | None:
        """The key whose access key is *access_key*, or None."""
        return self._keys.get(access_key)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[Credential]:
        return iter(self._keys.values())

    def __repr__(self) -> str:
        return f"Credentials({sorted(self._keys)!r})"


def _credential(path: str, index: int, entry: object) -> Credential:
    where = f"keys[{index}]"
    if not isinstance(entry, Mapping):
        raise CredentialsError(path, f"{where} is not an object")
    unknown = set(entry) - _KEY_FIELDS
    if unknown:
        raise CredentialsError(path, f"{where} has unknown field(s) {sorted(unknown)}")
    fields: dict[str, str] = {}
    for field in ("access_key", "secret_key"):
        value = entry.get(field)
        if not isinstance(value, str) or not value:
            raise CredentialsError(path, f"{where}.{field} must be a non-empty string")
        if any(c.isspace() or c in "/,=" for c in value) and field == "access_key":
            raise CredentialsError(path, f"{where}.access_key contains '/', ',', '=' or a space")
        fields[field] = value
    queues = entry.get("queues", ["*"])
    if (
        not isinstance(queues, list)
        or not queues
        or not all(isinstance(q, str) and q for q in queues)
    ):
        raise CredentialsError(path, f"{where}.queues must be a non-empty list of patterns")
    admin = entry.get("admin", False)
    if not isinstance(admin, bool):
        raise CredentialsError(path, f"{where}.admin must be true or false")
    return Credential(fields["access_key"], fields["secret_key"], tuple(queues), admin)


def load_credentials(path: str | os.PathLike[str]) -> Credentials:
    """Read and check a credentials file.

    :param path: the JSON file (see the module's docstring for its shape).
    :raises CredentialsError: the file is not JSON, or a key is malformed or repeated;
        the message names the key and the field.
    :raises OSError: the file cannot be read (unchanged, with its ``errno``).

    >>> import json, pathlib, tempfile
    >>> from vsqs.serve import load_credentials
    >>> path = pathlib.Path(tempfile.mkdtemp(), "keys.json")
    >>> keys = [{"access_key": "AK", "secret_key": "s", "queues": ["a-*"]}]
    >>> _ = path.write_text(json.dumps({"keys": keys}))
    >>> load_credentials(path).lookup("AK").allows("a-1")
    True
    """
    name = os.fspath(path)
    text = _userfiles.read_text(name)
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise CredentialsError(name, f"not valid JSON ({exc})") from None
    if not isinstance(document, Mapping) or not isinstance(document.get("keys"), list):
        raise CredentialsError(name, 'expected an object {"keys": [...]}')
    if not document["keys"]:
        raise CredentialsError(name, "has no keys")
    keys = [_credential(name, i, entry) for i, entry in enumerate(document["keys"])]
    seen: set[str] = set()
    for key in keys:
        if key.access_key in seen:
            raise CredentialsError(name, f"access key {key.access_key!r} is given twice")
        seen.add(key.access_key)
    return Credentials(keys)
