#!/usr/bin/env bash
# Install what Axon needs on a fresh Debian/Ubuntu machine, into a virtual environment at .venv
# in this clone (Debian's own python3 refuses pip installs outside one: PEP 668). Idempotent: a
# second run only checks.
#   scripts/setup.sh          the package and the native server's speedups (enough for the demo)
#   scripts/setup.sh --all    also what the tests and benchmarks start: nginx, wrk, the peers,
#                             and the readers tests/fsspec drives (fsspec, aiohttp, pandas, pyarrow, webdataset)
# Then run .venv/bin/axon, or put .venv/bin first on PATH (scripts/demo.sh and scripts/test.sh do).
# The venv is made by the python3 found on PATH (Debian's, pyenv's, ...).
set -euo pipefail
cd "$(dirname "$0")/.."

want_all=0
[ "${1:-}" = "--all" ] && want_all=1

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
VENV=.venv

apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "scripts/setup.sh: please install: $*" >&2
    exit 1
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "scripts/setup.sh: Axon needs Python 3.10 or newer; python3 on PATH is $(python3 --version 2>&1)" >&2
  exit 1
fi
version=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')

# A venv left broken (its interpreter removed, an interrupted first run) is made again.
if [ -e "$VENV" ] && ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
  rm -rf "$VENV"
fi
if [ ! -e "$VENV" ]; then
  if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
    # Debian and Ubuntu ship venv's ensurepip apart from Python itself.
    rm -rf "$VENV"
    apt_install "python${version}-venv"
    python3 -m venv "$VENV"
  fi
fi
python="$VENV/bin/python"

if [ "$want_all" = 1 ]; then
  # Debian's packages: nginx is the yardstick and a front end in the tests; wrk the load tool;
  # the shellcheck linter checks deploy/install.sh; docker-compose validates compose.yaml (no engine needed);
  # chromium and its driver open the listing page as a person would (tests/server/test_server_browser.py);
  # unzip, bsdtar (libarchive-tools) and GNU tar read back the zip and tar batches; webdataset
  # fetches http:// shards with curl (tests/fsspec); ip (iproute2) puts the nodes of
  # tests/deploy/test_cluster.py in network namespaces of their own; gcc and Python's headers
  # build uWSGI, which PyPI has only as source, and axon serve's compiled reader of simple heads.
  missing=""
  for cmd in nginx:nginx wrk:wrk shellcheck:shellcheck docker-compose:docker-compose chromium:chromium \
             chromedriver:chromium-driver unzip:unzip bsdtar:libarchive-tools tar:tar curl:curl ip:iproute2 \
             gcc:gcc; do
    command -v "${cmd%%:*}" >/dev/null 2>&1 || [ -x "/usr/sbin/${cmd%%:*}" ] || missing="$missing ${cmd##*:}"
  done
  "$python" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))' \
    || missing="$missing python${version}-dev"
  # shellcheck disable=SC2086 # one word per package
  [ -z "$missing" ] || apt_install $missing
  extras="server,tools,test,s3,fsspec"
else
  extras="server"
fi

# What was installed, and from which pyproject.toml: the same again (or a subset of the extras
# after --all) skips pip, which takes seconds even when there is nothing to do.
stamp="$VENV/.axon-setup"
# The compiled reader is built into src/ by the install: a change to its source installs again.
want="$(cat pyproject.toml src/axon/server/_simplehead.c | sha256sum | cut -d' ' -f1) $extras"
have=$(cat "$stamp" 2>/dev/null || true)
# With --all the compiler is here, so axon serve's compiled reader of simple heads must be built
# (an install made before gcc was is made again).
built=1
[ "$want_all" = 0 ] || "$python" -c "import axon.server._simplehead" 2>/dev/null || built=0
if [ "$have" != "$want" ] && [ "$have" != "${want%% *} server,tools,test,s3,fsspec" ] \
   || [ "$built" = 0 ] || ! "$python" -c "import axon" 2>/dev/null; then
  rm -f "$stamp"
  # A pip configured with local indexes warns for each package they lack: noise, not a failure
  # (pipefail keeps pip's own status).
  "$python" -m pip install --disable-pip-version-check -q --use-pep517 -e ".[${extras}]" 2>&1 \
    | { grep -v "^WARNING: Location" || true; }
  "$python" -c "import axon" # fail loudly if the install did not work
  echo "$want" >"$stamp"
fi
