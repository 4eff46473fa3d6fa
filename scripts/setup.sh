#!/usr/bin/env bash
# Install what Axon needs on a fresh Debian/Ubuntu machine. Idempotent: a second run only checks.
#   scripts/setup.sh          the package and the native server's speedups (enough for the demo)
#   scripts/setup.sh --all    also what the tests and benchmarks start: nginx, wrk, the peers,
#                             and the readers tests/fsspec drives (fsspec, aiohttp, pandas, pyarrow, webdataset)
set -euo pipefail
cd "$(dirname "$0")/.."

want_all=0
[ "${1:-}" = "--all" ] && want_all=1

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

if [ "$want_all" = 1 ]; then
  # Debian's packages: nginx is the yardstick and a front end in the tests; wrk the load tool;
  # shellcheck checks deploy/install.sh; docker-compose validates compose.yaml (no engine needed);
  # chromium and its driver open the listing page as a person would (tests/server/test_server_browser.py);
  # unzip, bsdtar (libarchive-tools) and GNU tar read back the zip and tar batches; webdataset
  # fetches http:// shards with curl (tests/fsspec); ip (iproute2) puts the nodes of
  # tests/deploy/test_cluster.py in network namespaces of their own.
  missing=""
  for cmd in nginx:nginx wrk:wrk shellcheck:shellcheck docker-compose:docker-compose chromium:chromium \
             chromedriver:chromium-driver unzip:unzip bsdtar:libarchive-tools tar:tar curl:curl ip:iproute2; do
    command -v "${cmd%%:*}" >/dev/null 2>&1 || [ -x "/usr/sbin/${cmd%%:*}" ] || missing="$missing ${cmd##*:}"
  done
  if [ -n "$missing" ]; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
  fi
  extras="server,tools,test,s3,fsspec"
else
  extras="server"
fi

python3 -m pip install --disable-pip-version-check -q -e ".[${extras}]" 2>&1 | grep -v "^WARNING: Location" || true
python3 -c "import axon" # fail loudly if the install did not work
