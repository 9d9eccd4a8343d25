#!/bin/sh
# Install the Debian tools the multi-host suite needs (make test runs this before pytest):
# sshfs and fuse3 to mount the queue's parent twice, openssh-server for the loopback sshd
# that exports it, and faketime to run one "host" with a skewed clock. Idempotent and
# quiet: nothing happens when the tools are present, nor when not root (the multi-host
# tests then say in their skip line what is missing).
set -eu

missing=""
command -v sshfs >/dev/null 2>&1 || missing="$missing sshfs"
command -v fusermount3 >/dev/null 2>&1 || command -v fusermount >/dev/null 2>&1 || missing="$missing fuse3"
[ -x /usr/sbin/sshd ] || missing="$missing openssh-server"
command -v ssh-keygen >/dev/null 2>&1 || missing="$missing openssh-client"
command -v faketime >/dev/null 2>&1 || missing="$missing faketime"

[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "setup-sshfs: not root; cannot install:$missing (the multi-host tests will say so)" >&2
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup-sshfs: no apt-get; install$missing by hand to run the multi-host tests" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
# Quiet unless it fails: then the whole apt output explains why. policy-rc.d keeps the
# package's own sshd from starting on port 22: the tests start theirs on a free port.
policy=/usr/sbin/policy-rc.d
made_policy=""
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made_policy=1
fi
# shellcheck disable=SC2086  # word splitting of the package list is intended
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup-sshfs: could not install$missing; the multi-host tests will say why" >&2
fi
[ -n "$made_policy" ] && rm -f "$policy"
rm -f "$log"
