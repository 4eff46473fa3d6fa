#!/usr/bin/env bash
# Install everything the tests start (nginx, wrk, gunicorn, uWSGI, waitress, uvicorn, hypercorn,
# granian) and run the whole suite against real servers over real sockets.
set -euo pipefail
cd "$(dirname "$0")/.."
# AXON_PYTHON, AXON_VENV and AXON_ENGINES pick the interpreter, the venv and the extras
# (scripts/setup.sh says how).
scripts/setup.sh --all
# The suite starts its peers as sys.executable -m ..., and finds the rest (uwsgi, lint-imports,
# weed, hadolint) on PATH: both must be the venv's.
VENV=${AXON_VENV:-.venv}
case "$VENV" in /*) ;; *) VENV="$PWD/$VENV" ;; esac
export VIRTUAL_ENV="$VENV"
export PATH="$VIRTUAL_ENV/bin:$PATH"
exec "$VIRTUAL_ENV/bin/python" -m pytest "$@"
