#!/bin/sh
# Install the SQS clients that tests/serve/test_clients.py points at `vsqs serve` (make
# test runs this before pytest), each where it cannot change .venv:
# - node and npm from Debian's packages when there is no node (as root, with apt-get), then
#   the JavaScript SDK v3 pinned by tests/serve/js/package-lock.json into
#   tests/serve/js/node_modules (npm ci);
# - the aws cli (awscli from the package index, tests/serve/requirements-awscli.txt) into
#   .venv-awscli: it pins its own botocore;
# - boto3 1.28.0 with botocore 1.31.0, which speak SQS's query protocol
#   (tests/serve/requirements-query.txt), into .venv-query.
# Idempotent and quiet: each part is skipped while its stamp says it is installed from the
# same pinned file. Where a part cannot be installed it prints one line; the tests of that
# client then fail with one line saying how to get it (tests/serve/clients.py).
set -eu

cd "$(dirname "$0")/.."
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

# A venv made from one requirements file, remade when that file changes.
venv_from() {
    where=$1 requirements=$2
    stamp="$where/.installed"
    if [ -f "$stamp" ] && cmp -s "$requirements" "$stamp"; then
        return 0
    fi
    rm -rf "$where"
    if quietly "$python" -m venv "$where" \
        && quietly "$where/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"; then
        cp "$requirements" "$stamp"
    else
        echo "setup-sqs-clients: could not install $requirements into $where" >&2
    fi
}

venv_from .venv-awscli tests/serve/requirements-awscli.txt
venv_from .venv-query tests/serve/requirements-query.txt

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ]; then
        echo "setup-sqs-clients: no node/npm and not root; the JavaScript SDK tests need them: apt-get install nodejs npm" >&2
        exit 0
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "setup-sqs-clients: no node/npm and no apt-get; the JavaScript SDK tests need node 20+ and npm" >&2
        exit 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    if ! quietly sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends nodejs npm'; then
        echo "setup-sqs-clients: could not install nodejs and npm; the JavaScript SDK tests need them" >&2
        exit 0
    fi
fi

js=tests/serve/js
stamp="$js/node_modules/.installed"
if [ -f "$stamp" ] && cmp -s "$js/package-lock.json" "$stamp"; then
    exit 0
fi
if quietly npm ci --prefix "$js" --no-audit --no-fund --loglevel=error; then
    cp "$js/package-lock.json" "$stamp"
else
    echo "setup-sqs-clients: could not install the JavaScript SDK into $js/node_modules" >&2
fi
