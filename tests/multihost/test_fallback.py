"""The link-then-unlink move of a filesystem without atomic no-replace rename (sshfs).

Each race is forced, not hoped for: ``os.link`` is wrapped so that a peer on another
"host" (the owner's directory, or the other mount) acts at the exact moment between our
two calls, and, where sshfs itself would, the wrapper reports ``ENOENT`` for a link the
server made (sshfs looks the new name up after linking; a peer that took the name
first makes that lookup fail). Everything else is the real mount.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

import vsqs
from vsqs import _fs, _inotify

_real_link = os.link


@pytest.fixture
def after_link(monkeypatch: pytest.MonkeyPatch) -> list[Callable[[str, str], None]]:
    """Functions run once, in order, right after the next links made by vsqs to a
    message's names (not those of an announcement, which moves no message)."""
    actions: list[Callable[[str, str], None]] = []

    def link(src: str, dst: str, **kwargs: object) -> None:
        _real_link(src, dst, **kwargs)  # type: ignore[arg-type]
        if actions and not Path(dst).name.startswith(_inotify.WAKE):
            actions.pop(0)(src, dst)

    monkeypatch.setattr(os, "link", link)
    return actions


def test_publish_whose_message_was_claimed_before_the_lookup_returns_its_id(
    hosts: tuple[Path, Path, Path], after_link: list[Callable[[str, str], None]]
) -> None:
    """*commit* arrow over sshfs: the link is made, a peer claims the name, ENOENT comes
    back; the publish still returns the id, and the message exists once, claimed."""
    owner, b, _ = hosts
    peer = vsqs.Queue(owner)
    claimed: list[vsqs.Message] = []

    def peer_claims_then_lookup_fails(src: str, dst: str) -> None:
        message = peer.receive(timeout=0)
        assert message is not None
        claimed.append(message)
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", dst)

    after_link.append(peer_claims_then_lookup_fails)
    message_id = vsqs.Queue(b, durable=False).publish(b"once")
    assert [m.id for m in claimed] == [message_id]
    assert claimed[0].body == b"once"
    assert [p.name for p in owner.iterdir() if p.name != ".vsqs"] == [claimed[0].receipt]


def test_link_to_a_missing_source_raises_and_makes_nothing(hosts: tuple[Path, Path, Path]) -> None:
    """A genuine ENOENT (no source): FileNotFoundError, and no name is created."""
    owner, b, _ = hosts
    vsqs.Queue(owner)
    with pytest.raises(FileNotFoundError):
        _fs.rename_noreplace(str(b / "1.new"), str(b / "1"))
    assert [p.name for p in owner.iterdir() if p.name != ".vsqs"] == []


def test_two_claimers_on_two_hosts_one_wins(
    hosts: tuple[Path, Path, Path], after_link: list[Callable[[str, str], None]]
) -> None:
    """*claim* arrow: both link the ready name to their own lease; the peer unlinks the
    source first, so our claim withdraws its lease and moves on. One lease, one holder."""
    owner, b, c = hosts
    vsqs.Queue(owner).publish(b"contested")
    ours = vsqs.Queue(b, durable=False)
    theirs: list[str] = []

    def peer_claims_first(src: str, dst: str) -> None:
        name = Path(src).name
        _real_link(c / name, c / f"{name}.9999999999999999")
        os.unlink(c / name)
        theirs.append(f"{name}.9999999999999999")

    after_link.append(peer_claims_first)
    assert ours.receive(timeout=0) is None  # lost the race: nothing claimed, nothing left
    assert [p.name for p in owner.iterdir() if p.name != ".vsqs"] == theirs


def test_release_whose_ready_name_was_claimed_before_the_lookup(
    hosts: tuple[Path, Path, Path], after_link: list[Callable[[str, str], None]]
) -> None:
    """*extend* then *ready* arrows (a release: change_visibility to 0) over sshfs: the
    ready name is claimed by a peer before the lookup; the release still succeeds and the
    peer holds it once."""
    owner, b, _ = hosts
    vsqs.Queue(owner).publish(b"released")
    ours = vsqs.Queue(b, durable=False)
    message = ours.receive(timeout=0)
    assert message is not None
    peer = vsqs.Queue(owner)
    claimed: list[vsqs.Message] = []

    def peer_claims_then_lookup_fails(src: str, dst: str) -> None:
        assert "." not in Path(dst).name  # the move to the ready name
        got = peer.receive(timeout=0)
        assert got is not None
        claimed.append(got)
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", dst)

    # A release first renames the lease to a hold of its own, then the hold to ready.
    after_link.extend([lambda src, dst: None, peer_claims_then_lookup_fails])
    ours.change_visibility(message, 0)
    assert [m.body for m in claimed] == [b"released"]
    assert [p.name for p in owner.iterdir() if p.name != ".vsqs"] == [claimed[0].receipt]
