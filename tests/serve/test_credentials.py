"""The credentials file of ``vsqs serve --credentials``."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from vsqs.serve import Credential, CredentialsError, load_credentials


def _write(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "credentials.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_a_file_is_loaded_and_patterns_match_queue_names(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        {
            "keys": [
                {"access_key": "AKIA1", "secret_key": "s1", "queues": ["orders-*"]},
                {"access_key": "AKIA2", "secret_key": "s2", "admin": True},
            ]
        },
    )
    keys = load_credentials(path)
    one, two = keys.lookup("AKIA1"), keys.lookup("AKIA2")
    assert one == Credential("AKIA1", "s1", ("orders-*",), False)
    assert two == Credential("AKIA2", "s2", ("*",), True)
    assert keys.lookup("AKIA3") is None
    assert one.allows("orders-eu") and not one.allows("billing")
    assert not one.allows("Orders-eu")  # queue names are case-sensitive
    assert two.allows("anything.fifo")
    assert "s1" not in repr(one) and "s1" not in repr(keys)
    assert len(keys) == 2 and {k.access_key for k in keys} == {"AKIA1", "AKIA2"}


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ([], "expected an object"),
        ({"keys": []}, "has no keys"),
        ({"keys": ["AKIA"]}, "keys[0] is not an object"),
        ({"keys": [{"access_key": "A"}]}, "keys[0].secret_key"),
        ({"keys": [{"secret_key": "s"}]}, "keys[0].access_key"),
        ({"keys": [{"access_key": "A/B", "secret_key": "s"}]}, "keys[0].access_key contains"),
        ({"keys": [{"access_key": "A", "secret_key": "s", "queues": "*"}]}, "keys[0].queues"),
        ({"keys": [{"access_key": "A", "secret_key": "s", "queues": []}]}, "keys[0].queues"),
        ({"keys": [{"access_key": "A", "secret_key": "s", "admin": "yes"}]}, "keys[0].admin"),
        ({"keys": [{"access_key": "A", "secret_key": "s", "secret": 1}]}, "unknown field"),
        (
            {
                "keys": [
                    {"access_key": "A", "secret_key": "s"},
                    {"access_key": "A", "secret_key": "t"},
                ]
            },
            "given twice",
        ),
    ],
)
def test_a_bad_file_is_refused_naming_the_problem(
    tmp_path: Path, document: object, problem: str
) -> None:
    path = _write(tmp_path, document)
    with pytest.raises(CredentialsError) as caught:
        load_credentials(path)
    assert problem in str(caught.value)
    assert str(path) in str(caught.value)
    assert isinstance(caught.value, ValueError)
    again = pickle.loads(pickle.dumps(caught.value))  # noqa: S301 - our own bytes
    assert (again.path, again.problem, str(again)) == (
        str(path),
        caught.value.problem,
        str(caught.value),
    )


def test_a_file_that_is_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text("{keys:", encoding="utf-8")
    with pytest.raises(CredentialsError, match="not valid JSON"):
        load_credentials(path)


def test_a_missing_file_raises_the_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_credentials(tmp_path / "nope.json")


def test_the_server_errors_pickle() -> None:
    from vsqs.serve import SqsError, UnsafeAddress

    error = SqsError("MalformedRequest", "bad line", status=414, sender=True)
    again = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes
    assert (again.code, again.text, again.status, again.sender, again.query_code) == (
        "MalformedRequest", "bad line", 414, True, "MalformedRequest",
    )  # fmt: skip
    assert isinstance(again, ValueError)
    gone = pickle.loads(pickle.dumps(SqsError("QueueDoesNotExist", "no")))  # noqa: S301
    assert (gone.status, gone.query_code) == (400, "AWS.SimpleQueueService.NonExistentQueue")
    unsafe = pickle.loads(pickle.dumps(UnsafeAddress("0.0.0.0")))  # noqa: S301, S104
    assert unsafe.host == "0.0.0.0" and isinstance(unsafe, PermissionError)  # noqa: S104
