#!/usr/bin/env bash
# Install everything the tests start (nginx, wrk, gunicorn, uWSGI, waitress, uvicorn, hypercorn,
# granian) and run the whole suite against real servers over real sockets.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --all
# The suite starts its peers as sys.executable -m ..., and finds the rest (uwsgi, lint-imports,
# weed, hadolint) on PATH: both must be the venv's.
export VIRTUAL_ENV="$PWD/.venv"
export PATH="$VIRTUAL_ENV/bin:$PATH"
exec "$VIRTUAL_ENV/bin/python" -m pytest "$@"
