#!/bin/sh
# Install the Debian tools the reliability suite mounts filesystems with, fuse3 for
# the power-loss filesystem of tests/powerloss, and strace, which counts the flush system
# calls of tests/reliability/test_memory_flushes.py (make test runs
# this before pytest). Idempotent and quiet: it does nothing when the tools are present,
# and nothing when not root (the filesystem tests then report why they cannot mount).
set -eu

missing=""
command -v mkfs.xfs >/dev/null 2>&1 || missing="$missing xfsprogs"
command -v mkfs.btrfs >/dev/null 2>&1 || missing="$missing btrfs-progs"
command -v mkfs.ext4 >/dev/null 2>&1 || missing="$missing e2fsprogs"
command -v losetup >/dev/null 2>&1 || missing="$missing mount"
# The power-loss filesystem of tests/powerloss (FUSE, through mfusepy) needs libfuse3.
command -v fusermount3 >/dev/null 2>&1 || missing="$missing fuse3"
command -v strace >/dev/null 2>&1 || missing="$missing strace"

[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "setup-filesystems: not root; cannot install:$missing (those filesystem tests will say so)" >&2
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup-filesystems: no apt-get; install$missing by hand to test those filesystems" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
# Quiet unless it fails: then the whole apt output explains why.
# shellcheck disable=SC2086  # word splitting of the package list is intended
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing; } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "setup-filesystems: could not install$missing; those filesystem tests will say why" >&2
    exit 0
fi
rm -f "$log"
