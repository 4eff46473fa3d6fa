#!/usr/bin/env bash
# Install Axon (into .venv) and serve the article's sample files on http://127.0.0.1:8000
# (Ctrl-C stops it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec "${AXON_VENV:-.venv}/bin/axon" demo "$@"  # the venv scripts/setup.sh made
