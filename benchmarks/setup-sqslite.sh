#!/bin/sh
# What benchmarks/bench_serve.py needs beside the `bench` extra (make bench runs this):
# - node, npm and .venv-query (boto3 1.28: the query protocol, the only one sqslite
#   speaks; the benchmark's clients run there), from tests/setup-sqs-clients.sh;
# - sqslite (an in-memory SQS server, from the npm registry), pinned by
#   benchmarks/sqslite/package-lock.json, into benchmarks/sqslite/node_modules (npm ci).
# Idempotent: skipped while its stamp says it is installed from the same lock file.
set -eu

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3} sh tests/setup-sqs-clients.sh

dir=benchmarks/sqslite
stamp="$dir/node_modules/.installed"
if [ -f "$stamp" ] && cmp -s "$dir/package-lock.json" "$stamp"; then
    exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
    echo "setup-sqslite: no npm; bench_serve runs without sqslite (--servers moto,...)" >&2
    exit 0
fi
if npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error >/dev/null; then
    cp "$dir/package-lock.json" "$stamp"
else
    echo "setup-sqslite: could not install sqslite into $dir/node_modules" >&2
fi
