"""The public surface: one complete, sorted ``__all__``, and a light ``import vsqs``."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import types

import pytest

import vsqs

OPTIONAL = ("click", "rich", "pyspark", "pyarrow")


def _public_names(module: types.ModuleType) -> set[str]:
    """Names a user could reach as ``vsqs.X``: not private, not a submodule, not a
    ``__future__`` feature."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and type(value).__name__ != "_Feature"
    }


def test_all_is_complete() -> None:
    assert _public_names(vsqs) <= set(vsqs.__all__)
    assert "__version__" in vsqs.__all__


def test_all_is_sorted_and_unique() -> None:
    assert vsqs.__all__ == sorted(vsqs.__all__)
    assert len(set(vsqs.__all__)) == len(vsqs.__all__)


def test_everything_in_all_exists() -> None:
    missing = [name for name in vsqs.__all__ if not hasattr(vsqs, name)]
    assert not missing


def test_public_objects_say_they_belong_to_vsqs() -> None:
    """Classes and functions are importable from the package (their home is private)."""
    for name in vsqs.__all__:
        value = getattr(vsqs, name)
        if isinstance(value, (type, types.FunctionType)):
            assert value.__module__.startswith("vsqs"), name


def test_import_vsqs_does_not_import_the_optional_extras() -> None:
    """The CLI and Spark extras are imported lazily: a core user need not install them."""
    code = (
        "import json, sys, vsqs, vsqs.testing\n"
        "q = vsqs.Queue(__import__('tempfile').mkdtemp())\n"
        f"print(json.dumps(sorted(m for m in {OPTIONAL!r} if m in sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(result.stdout) == []


def test_the_testing_module_has_its_own_sorted_all() -> None:
    import vsqs.testing

    assert vsqs.testing.__all__ == sorted(vsqs.testing.__all__)
    assert all(hasattr(vsqs.testing, name) for name in vsqs.testing.__all__)


def test_queue_like_classes_offer_their_protocols() -> None:
    """mypy checks these assignments: a signature that drifts from the protocol fails it.

    At run time, every protocol member exists on every class that offers the protocol.
    """
    import tempfile

    queue = vsqs.Queue(tempfile.mkdtemp())
    full: list[vsqs.QueueLike] = [queue, vsqs.NullQueue()]
    receivers: list[vsqs.Receiver] = [*full, vsqs.QueueSet(queue)]
    for protocol, objects in ((vsqs.QueueLike, full), (vsqs.Receiver, receivers)):
        members = {
            name
            for klass in protocol.__mro__
            if klass.__module__ == "vsqs._protocol"
            for name in vars(klass)
            if not name.startswith("_") or name == "__len__"
        }
        for obj in objects:
            assert members <= set(dir(obj)), (type(obj).__name__, members - set(dir(obj)))


def test_the_receive_paths_constructor_makes_the_same_message() -> None:
    """``_message.received`` sets the slots itself (a cheaper constructor for the receive
    path): every field of :class:`vsqs.Message` must come out as the class's own
    constructor makes it, so a field added to the class cannot be left unset there."""
    import dataclasses

    from vsqs._message import received

    values = ("1", b"body", "1.2", 2.5, 3, {"k": "v"}, 1.5, "/q", "group-7")
    fields = [field.name for field in dataclasses.fields(vsqs.Message)]
    assert len(fields) == len(values)
    made, fast = vsqs.Message(*values), received(*values)
    assert [getattr(fast, name) for name in fields] == [getattr(made, name) for name in fields]
    assert fast == made and hash(fast) == hash(made) and repr(fast) == repr(made)
    # Made as an unfrozen twin and then given the class: a Message in every respect.
    assert type(fast) is vsqs.Message and isinstance(fast, vsqs.Message)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.id = "2"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(fast)) == made  # noqa: S301 - our own bytes


@pytest.mark.parametrize(
    ("part", "blocked", "extra"),
    [
        ("vsqs.kombu", "kombu", "celery"),
        ("vsqs.spark", "pyspark", "spark"),
        ("vsqs.spark", "pyarrow", "spark"),
        ("vsqs.metrics", "prometheus_client", "metrics"),
    ],
)
def test_an_optional_part_without_its_extra_says_which_extra_to_install(
    part: str, blocked: str, extra: str
) -> None:
    """As the ``vsqs`` command does for the ``cli`` extra: not a bare ``No module named``."""
    code = (
        f"import json, sys\nsys.modules[{blocked!r}] = None  # as if not installed\n"
        f"try:\n    import {part}\n"
        "except ModuleNotFoundError as error:\n    print(json.dumps([str(error), error.name]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    text, name = json.loads(result.stdout)
    assert name.partition(".")[0] == blocked
    assert f"{part} needs the {extra!r} extra" in text
    assert f"pip install '.[{extra}]'" in text
