"""Names raced for across hosts on sshfs: the loser hears "exists", nothing else.

Two processes, each on its own mount of one directory, create the same names at once
with ``O_EXCL``, or move their own files onto the same names without replacing (sshfs
has no atomic no-replace rename: vsqs links, then unlinks). The kernel asks sshfs to
look a name up first; when the other host makes it between that lookup and the SFTP
server's exclusive open or link, the server answers a bare failure, which sshfs
reports as ``EPERM``. vsqs must read that as the name being taken (a publisher then
draws another id), not fail: the three-hosts run met it once in about five runs, as a
failed publish.

The other host's file may also be gone again when the loser looks (a same-id publish
committed, a message claimed): the tests below stage that moment on a real mount, in
its SFTP session (:mod:`._sftp_race`), and a real ``EPERM`` that never goes away.
"""

from __future__ import annotations

import errno
import itertools
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

import vsqs
from tests.fixtures_core import CHILD_TIMEOUT
from vsqs import _fs
from vsqs.testing import assert_consistent, drain

from ._rig import CACHE_NO, Rig

NAMES = 600
PROXY: Final = Path(__file__).with_name("_sftp_race.py")
SSH_FX_FAILURE: Final = 4  # SFTP's bare failure: what the server answers for EEXIST
_mounts = itertools.count()


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


@pytest.fixture
def raced(sshfs_rig: Rig, tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    """A fresh directory as the owner sees it and through an sshfs mount (``cache=no``)
    whose SFTP session passes through :mod:`._sftp_race`; and that module's control
    directory (write ``create`` or ``link`` to ``<control>/arm`` to stage one race)."""
    control = tmp_path / "control"
    control.mkdir()
    name = f"raced-{next(_mounts)}"
    view = sshfs_rig.mount(name, (*CACHE_NO, f"ssh_command={sys.executable} {PROXY} {control}"))
    try:
        (sshfs_rig.owner / name).mkdir()
        yield sshfs_rig.owner / name, view / name, control
    finally:
        sshfs_rig.unmount(view)


def _log(control: Path, op: str) -> list[dict[str, Any]]:
    lines = (control / "log").read_text(encoding="utf-8").splitlines()
    return [record for record in map(json.loads, lines) if record["op"] == op]


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


def test_a_create_lost_to_a_file_renamed_away_meanwhile_is_made_again(
    raced: tuple[Path, Path, Path],
) -> None:
    """Another host creates ``7.new`` between our client's lookup and the server's
    exclusive open (which fails: sshfs says EPERM) and renames it to ``7`` before we
    look: the name is free, so the create is made again, and the file it makes is ours;
    the other host's is untouched (``7`` says ``theirs``)."""
    owner, view, control = raced
    (control / "arm").write_text("create")
    os.close(_fs.create_exclusive(str(view / "7.new")))
    assert [r["status"] for r in _log(control, "raced")] == [SSH_FX_FAILURE]
    assert [r["path"] for r in _log(control, "open-excl")] == [str(owner / "7.new")] * 2
    assert _files(owner) == {"7": b"theirs", "7.new": b""}


def test_a_publish_whose_id_another_host_published_meanwhile_goes_on(
    raced: tuple[Path, Path, Path],
) -> None:
    """The flake of the three-hosts run, staged: a publish through sshfs draws the id
    another host publishes at that moment (its ``<id>.new`` made, failing our exclusive
    create, and committed before we look). The publish succeeds, under another id;
    both messages are received, once each, nothing overwritten."""
    owner, view, control = raced
    vsqs.Queue(owner)
    queue = vsqs.Queue(view, durable=False)
    (control / "arm").write_text("create")
    ours = queue.publish(b"ours")
    (race,) = _log(control, "raced")
    assert race["status"] == SSH_FX_FAILURE
    theirs = Path(race["now"]).name
    assert ours != theirs
    owned = vsqs.Queue(owner)
    assert {m.id: m.body for m in drain(owned)} == {theirs: b"theirs", ours: b"ours"}
    assert_consistent(owned)


def test_a_link_lost_to_a_name_claimed_away_meanwhile_is_made_again(
    raced: tuple[Path, Path, Path],
) -> None:
    """sshfs has no atomic no-replace rename: vsqs links then unlinks. Another host
    makes ``dst`` between our lookup and the server's link (which fails: EPERM), and a
    consumer renames it away before we look: the link is made again, and the move
    completes; the other host's file is untouched."""
    owner, view, control = raced
    (owner / "src").write_bytes(b"ours")
    (control / "arm").write_text("link")
    _fs.rename_noreplace(str(view / "src"), str(view / "dst"))
    assert [r["status"] for r in _log(control, "raced")] == [SSH_FX_FAILURE]
    assert len(_log(control, "link")) == 2
    assert _files(owner) == {"dst": b"ours", "dst.claimed": b"theirs"}


def test_an_eperm_that_stays_is_raised_after_three_tries(
    raced: tuple[Path, Path, Path],
) -> None:
    """A real failure that sshfs also says as EPERM (a read-only filesystem on the
    server: EROFS, like EEXIST, is a bare SFTP failure) is no race: a create or a link
    is tried three times in all, then raised, never looped on; nothing is made."""
    owner, view, control = raced
    (owner / "ro").mkdir()
    command = ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(owner / "ro")]
    mounted = subprocess.run(command, capture_output=True, timeout=60, check=False)
    if mounted.returncode:
        pytest.skip(f"cannot mount a read-only tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        with pytest.raises(PermissionError) as refused:
            _fs.create_exclusive(str(view / "ro" / "7.new"))
        assert refused.value.errno == errno.EPERM
        assert len(_log(control, "open-excl")) == 3
        (owner / "src").write_bytes(b"ours")
        with pytest.raises(PermissionError) as refused:  # the server's EXDEV, or EROFS
            _fs.link_noreplace(str(view / "src"), str(view / "ro" / "7"))
        assert refused.value.errno == errno.EPERM
        assert len(_log(control, "link")) == 3
    finally:
        subprocess.run(["umount", str(owner / "ro")], check=False, capture_output=True, timeout=60)
    assert os.listdir(owner / "ro") == []


def test_a_permission_denied_through_sshfs_is_raised_at_once(
    raced: tuple[Path, Path, Path],
) -> None:
    """A real denial on the server (an immutable directory: EPERM there) reaches the
    client as EACCES (SFTP's "permission denied"), never as EPERM: it is raised at once,
    never tried again nor read as "taken"."""
    owner, view, control = raced
    if shutil.which("chattr") is None:
        pytest.skip("chattr (e2fsprogs) not installed")
    (owner / "sealed").mkdir()
    if subprocess.run(["chattr", "+i", str(owner / "sealed")], capture_output=True,
                      check=False, timeout=60).returncode:  # fmt: skip
        pytest.skip(f"{owner} is on a filesystem without the immutable attribute")
    try:
        with pytest.raises(PermissionError) as refused:
            _fs.create_exclusive(str(view / "sealed" / "7.new"))
    finally:
        subprocess.run(["chattr", "-i", str(owner / "sealed")], check=True, timeout=60)
    assert refused.value.errno == errno.EACCES
    assert len(_log(control, "open-excl")) == 1
    assert os.listdir(owner / "sealed") == []
