"""Fixtures of the multi-host suite: the loopback sshd and the sshfs views of one
directory; a JuiceFS volume (Redis metadata, a local object store) mounted three times.

Each rig (sshd, keys, mounts; Redis, volume, mounts) is made once per session and torn
down at its end, also when a test fails; where it cannot run (not root, no FUSE, tools
missing) every test on it skips with one line naming what is missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from . import _juicefs
from ._juicefs import JuiceRig, juice_rig
from ._rig import OPTION_SETS, Rig, rig, why_not


@pytest.fixture(scope="session")
def sshfs_rig() -> Iterator[Rig]:
    """A loopback sshd exporting a fresh directory (``rig.owner``); see :mod:`._rig`."""
    reason = why_not()
    if reason is not None:
        pytest.skip(f"cannot test across hosts: {reason}")
    with rig() as made:
        yield made


@pytest.fixture(scope="session")
def views(sshfs_rig: Rig) -> Iterator[dict[str, tuple[Path, Path]]]:
    """For each recommended option set, two sshfs mounts of ``rig.owner``: hosts B and C."""
    made = {
        name: (sshfs_rig.mount(f"{name}-b", options), sshfs_rig.mount(f"{name}-c", options))
        for name, options in OPTION_SETS.items()
    }
    yield made
    for pair in made.values():
        for where in pair:
            sshfs_rig.unmount(where)


_counter = iter(range(1_000_000))


@pytest.fixture
def hosts(
    sshfs_rig: Rig, views: dict[str, tuple[Path, Path]], request: pytest.FixtureRequest
) -> tuple[Path, Path, Path]:
    """One fresh queue seen from three hosts: the owner's path and two mounted paths.

    Parametrize indirectly with an option set name (``"cache-no"`` or ``"fine"``);
    ``"cache-no"`` by default.
    """
    option_set = getattr(request, "param", "cache-no")
    name = f"q{next(_counter)}"
    b, c = views[option_set]
    return sshfs_rig.owner / name, b / name, c / name


@pytest.fixture(scope="session")
def juicefs_rig() -> Iterator[JuiceRig]:
    """Redis on a free loopback port and a JuiceFS volume formatted on it; see :mod:`._juicefs`."""
    reason = _juicefs.why_not()
    if reason is not None:
        pytest.skip(f"cannot test on JuiceFS: {reason}")
    with juice_rig() as made:
        yield made


@pytest.fixture(scope="session")
def juicefs_mounts(juicefs_rig: JuiceRig) -> tuple[Path, Path, Path]:
    """Three mounts of the volume, each its own client: hosts A, B and C."""
    return (juicefs_rig.mount("a"), juicefs_rig.mount("b"), juicefs_rig.mount("c"))


@pytest.fixture
def juicefs_hosts(juicefs_mounts: tuple[Path, Path, Path]) -> tuple[Path, Path, Path]:
    """One fresh queue path seen from the three JuiceFS hosts."""
    name = f"q{next(_counter)}"
    a, b, c = juicefs_mounts
    return a / name, b / name, c / name
