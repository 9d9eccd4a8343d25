#!/bin/sh
# Lay out moto's own SQS test suite to run against `vsqs serve` (make test runs this
# before pytest; tests/outside/test_moto.py runs the suite):
# - .venv-moto: moto and pytest from tests/outside/requirements-moto.txt (moto's test
#   helpers need moto installed; kept out of .venv, where moto would patch nothing but
#   pin its own botocore range);
# - .venv-moto/suite/tests: tests/__init__.py, conftest.py, markers.py and test_sqs/ from
#   moto's source distribution on the package index (the version pinned in the
#   requirements file), and two small files of ours beside them (below). Nothing of moto
#   is committed to this repository.
# Idempotent and quiet: skipped while the stamp says it was laid out from the same
# requirements file. Where it cannot be installed it prints one line, and the test says
# how to get it.
set -eu

cd "$(dirname "$0")/../.."
python=${PYTHON:-python3}
where=.venv-moto
requirements=tests/outside/requirements-moto.txt
stamp="$where/.installed"

if [ -f "$stamp" ] && cmp -s "$requirements" "$stamp"; then
    exit 0
fi
# moto's conftest asks STS for the account (the account_id fixture); a conftest beside the
# tests, ours, answers the endpoint's instead (see tests/outside/moto_rules.py). The ini
# file keeps pytest from reading this repository's configuration.
conftest='from moto_rules import account_id  # noqa: F401 - the endpoint'"'"'s account'
ini='[pytest]
markers =
    aws_verified: verified against AWS by moto'"'"'s authors
    requires_docker: needs docker'
version=$(sed -n 's/^moto==\([0-9.]*\).*/\1/p' "$requirements")
log=$(mktemp)
rm -rf "$where"
if {
    "$python" -m venv "$where" \
    && "$where/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" \
    && mkdir -p "$where/sdist" "$where/suite" \
    && "$where/bin/python" -m pip download --quiet --disable-pip-version-check \
        --no-binary :all: --no-deps "moto==$version" -d "$where/sdist" \
    && tar -xzf "$where/sdist/moto-$version.tar.gz" -C "$where/suite" --strip-components=1 \
        "moto-$version/tests/__init__.py" "moto-$version/tests/conftest.py" \
        "moto-$version/tests/markers.py" "moto-$version/tests/test_sqs" \
    && printf '%s\n' "$conftest" >"$where/suite/tests/test_sqs/conftest.py" \
    && printf '%s\n' "$ini" >"$where/suite/pytest.ini"
} >"$log" 2>&1; then
    cp "$requirements" "$stamp"
    rm -f "$log"
else
    cat "$log" >&2
    rm -f "$log"
    echo "setup-moto: could not lay out moto $version's SQS tests into $where" >&2
fi
