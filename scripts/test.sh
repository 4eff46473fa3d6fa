#!/usr/bin/env bash
# Install everything the tests start (nginx, wrk, gunicorn, uWSGI, waitress, uvicorn, hypercorn,
# granian) and run the whole suite against real servers over real sockets.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --all
exec python3 -m pytest "$@"
