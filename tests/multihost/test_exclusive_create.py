"""Names raced for across hosts on sshfs: the loser hears "exists", nothing else.

Two processes, each on its own mount of one directory, create the same names at once
with ``O_EXCL``, or move their own files onto the same names without replacing (sshfs
has no atomic no-replace rename: vsqs links, then unlinks). The kernel asks sshfs to
look a name up first; when the other host makes it between that lookup and the SFTP
server's exclusive open or link, the server answers a bare failure, which sshfs
reports as ``EPERM``. vsqs must read that as the name being taken (a publisher then
draws another id), not fail: the three-hosts run met it once in about five runs, as a
failed publish.
"""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_core import CHILD_TIMEOUT

NAMES = 600


def _contend(directory: str, mode: str, start: Any, out: Any) -> None:
    import os

    from vsqs import _fs

    won, taken, other = [], 0, []
    mine = f"{directory}/src-{os.getpid()}"
    if mode == "move":  # one source per name, moved (no-replace) onto the shared name
        for index in range(NAMES):
            _fs.close(_fs.create_exclusive(f"{mine}-{index}"))
    start.wait(CHILD_TIMEOUT)
    for index in range(NAMES):
        try:
            if mode == "create":
                _fs.close(_fs.create_exclusive(f"{directory}/{index}.new"))
            else:
                _fs.rename_noreplace(f"{mine}-{index}", f"{directory}/{index}")
        except FileExistsError:
            taken += 1
        except OSError as exc:
            other.append(repr(exc))
        else:
            won.append(index)
    out.put((won, taken, other))


@pytest.mark.parametrize("mode", ["create", "move"])
@pytest.mark.parametrize("hosts", ["cache-no", "fine"], indirect=True)
def test_a_name_lost_to_another_host_is_file_exists(
    hosts: tuple[Path, Path, Path], mode: str
) -> None:
    """``create``: exclusive creates of one name; ``move``: no-replace renames onto one
    name (sshfs has no atomic one: vsqs links then unlinks, and the link races)."""
    owner, b, c = hosts
    owner.mkdir()
    race_for_names(b, c, mode)


def race_for_names(first: Path, second: Path, mode: str) -> None:
    """Two processes, one through each path of one directory, race for the same
    :data:`NAMES` names (*mode* as :func:`_contend`): each name is made once, by one of
    them, and the other is told ``FileExistsError``, nothing else."""
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_contend, args=(str(p), mode, start, out)) for p in (first, second)]
    for proc in procs:
        proc.start()
    start.set()
    results = [out.get(timeout=CHILD_TIMEOUT) for _ in procs]
    for proc in procs:
        proc.join(CHILD_TIMEOUT)
    assert [other for _, _, other in results] == [[], []]
    winners = sorted(index for won, _, _ in results for index in won)
    assert winners == list(range(NAMES))  # each name created once, by one host
    assert sum(taken for _, taken, _ in results) == NAMES
