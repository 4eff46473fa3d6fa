#!/usr/bin/env bash
# Install what Axon needs on a fresh Debian/Ubuntu machine, into a virtual environment at .venv
# in this clone (Debian's own python3 refuses pip installs outside one: PEP 668). Idempotent: a
# second run only checks.
#   scripts/setup.sh          the package and the native server's speedups (enough for the demo)
#   scripts/setup.sh --all    also what the tests and benchmarks start: nginx, wrk, the peers,
#                             the readers tests/fsspec drives (fsspec, aiohttp, pandas, pyarrow, webdataset)
#                             and the engines tests/engines drives (the test-engines extra: torch, ray, ...)
# Then run .venv/bin/axon, or put .venv/bin first on PATH (scripts/demo.sh and scripts/test.sh do).
# The venv is made by the python3 found on PATH (Debian's, pyenv's, ...). Three variables change
# that (scripts/test.sh passes them on; .ci/run uses them for each Python it tests):
#   AXON_PYTHON=/path/to/python3.12   the interpreter that makes the venv
#   AXON_VENV=DIR                     the venv's directory (relative to the clone), instead of .venv
#   AXON_ENGINES=0                    --all without the test-engines extra (torch's CPU build lies
#                                     on this machine's disk for Python 3.11 only)
# A venv already there, made by another Python than the one asked for, is an error: remove it or
# name another AXON_VENV.
set -euo pipefail
cd "$(dirname "$0")/.."

want_all=0
[ "${1:-}" = "--all" ] && want_all=1

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
VENV=${AXON_VENV:-.venv}
PYTHON=${AXON_PYTHON:-python3}

apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "scripts/setup.sh: please install: $*" >&2
    exit 1
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "scripts/setup.sh: Axon needs Python 3.10 or newer; $PYTHON is $("$PYTHON" --version 2>&1)" >&2
  exit 1
fi
version=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')

# A venv left broken (its interpreter removed, an interrupted first run) is made again; anything
# else at that path is left alone.
if [ -e "$VENV" ] && [ ! -e "$VENV/pyvenv.cfg" ]; then
  echo "scripts/setup.sh: $VENV is not a virtual environment (no pyvenv.cfg): remove it, or set AXON_VENV to another directory" >&2
  exit 1
fi
if [ -e "$VENV" ] && ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
  rm -rf "$VENV"
fi
# One made by another interpreter is not taken for this one's (a test run would not test it).
which_python='import platform, sys; print(sys.base_prefix, platform.python_version())'
if [ -e "$VENV" ]; then
  made_by=$("$VENV/bin/python" -c "$which_python")
  asked=$("$PYTHON" -c "$which_python")
  if [ "$made_by" != "$asked" ]; then
    echo "scripts/setup.sh: $VENV was made by the Python in ${made_by% *} (${made_by##* })," \
         "not by $PYTHON (${asked##* }): remove it, or set AXON_VENV to another directory" >&2
    exit 1
  fi
fi
if [ ! -e "$VENV" ]; then
  if ! "$PYTHON" -m venv "$VENV" >/dev/null 2>&1; then
    # Debian and Ubuntu ship venv's ensurepip apart from Python itself.
    rm -rf "$VENV"
    apt_install "python${version}-venv"
    "$PYTHON" -m venv "$VENV"
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
  [ "${AXON_ENGINES:-1}" = 0 ] || extras="$extras,test-engines"
else
  extras="server"
fi

# What was installed, and from which pyproject.toml: the same again (or any extras after a
# whole --all) skips pip, which takes seconds even when there is nothing to do.
stamp="$VENV/.axon-setup"
# The compiled reader is built into src/ by the install: a change to its source installs again.
want="$(cat pyproject.toml src/axon/server/_simplehead.c | sha256sum | cut -d' ' -f1) $extras"
have=$(cat "$stamp" 2>/dev/null || true)
# With --all the compiler is here, so axon serve's compiled reader of simple heads must be built
# (an install made before gcc was is made again).
built=1
[ "$want_all" = 0 ] || "$python" -c "import axon.server._simplehead" 2>/dev/null || built=0
if [ "$have" != "$want" ] && [ "$have" != "${want%% *} server,tools,test,s3,fsspec,test-engines" ] \
   || [ "$built" = 0 ] || ! "$python" -c "import axon" 2>/dev/null; then
  rm -f "$stamp"
  # A pip configured with local indexes warns for each package they lack: noise, not a failure
  # (pipefail keeps pip's own status). uWSGI's build (the test extra) compiles in parallel and on
  # two cores now and then links before core/dot_h.o is written (unbit/uwsgi#1318, #2447: a CI
  # run failed so): CPUCOUNT=1 builds it one file at a time.
  CPUCOUNT=1 "$python" -m pip install --disable-pip-version-check -q --use-pep517 -e ".[${extras}]" 2>&1 \
    | { grep -v "^WARNING: Location" || true; }
  "$python" -c "import axon" # fail loudly if the install did not work
  echo "$want" >"$stamp"
fi
