#!/usr/bin/env bash
# Install Axon behind nginx on a fresh Debian or Ubuntu host, as a systemd service:
#
#     sudo deploy/install.sh --root /srv/axon [--server-name files.example.org]
#                            [--cert /etc/ssl/x.pem --key /etc/ssl/x.key]
#
# What it does, each step only when needed, so that a second run changes nothing:
#   - installs nginx and python3-venv from the distribution (if missing);
#   - creates the system user "axon" (no shell, no home);
#   - creates a virtual environment in /opt/axon/venv and installs Axon into it, from the checkout
#     this script sits in or another (--source PATH): axon-stream is not published on PyPI;
#   - writes /etc/systemd/system/axon.service (axon serve on 127.0.0.1, one worker per core,
#     restart on failure, hardened) and /etc/axon/axon.env (your settings; written once);
#   - writes the nginx site /etc/nginx/sites-{available,enabled}/axon and its snippet
#     /etc/nginx/snippets/axon-proxy.conf, tuned for long streams, with HTTPS if given a certificate;
#   - reloads what changed, and checks /api/health directly and through nginx.
#
# --prefix DIR writes all of it under DIR instead (a venv in DIR/opt/axon/venv, the unit, the
# site, plus DIR/etc/nginx/nginx.conf to run the site with), creates no user and calls neither
# apt-get nor systemctl: it prints what it would have run. For trying it out, and for the tests.
#
# Generated files come from deploy/templates/ through deploy/render.sh. Run with --help for all
# the options.
set -euo pipefail
umask 022  # the venv and the generated files must be readable by the service's user

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
templates=$here/templates
render=$here/render.sh

usage() {
    cat <<'USAGE'
Usage: deploy/install.sh [options]

  --root DIR            the files to serve (default /srv/axon, or PREFIX/srv/axon with --prefix);
                        created with an example file if it does not exist
  --port N              the port axon serve listens on, on 127.0.0.1 (default 8000)
  --workers N           axon serve's worker processes (default: the number of cores)
  --listen ADDR         nginx's HTTP listen address: a port, or address:port (default 80)
  --https-listen ADDR   nginx's HTTPS listen address, with --cert/--key (default 443)
  --server-name NAME    nginx server_name (default _ : any name; disables the default site)
  --cert FILE --key FILE  serve HTTPS with this certificate chain and key (PEM); HTTP redirects
  --source PATH         the checkout to install from (default: the one this script is in)
  --python PATH         the interpreter to make the venv with (default python3; needs >= 3.10)
  --graceful-timeout S  seconds axon serve drains connections on stop (default 30)
  --user NAME           the system user to run as (default axon)
  --prefix DIR          write everything under DIR; no user, no apt-get, no systemctl
  --no-venv             (with --prefix) write the configuration only, install nothing
  -h, --help            this text
USAGE
}

die() { echo "install.sh: $*" >&2; exit 1; }
say() { echo "install.sh: $*"; }

# -- options -------------------------------------------------------------------------------------

root="" port=8000 workers="" listen=80 https_listen=443 server_name=_ cert="" key=""
source_arg=$(cd "$here/.." && pwd) python=python3 graceful=30 user=axon prefix="" no_venv=0
while [ $# -gt 0 ]; do
    case $1 in
        --root) root=$2; shift 2 ;;
        --port) port=$2; shift 2 ;;
        --workers) workers=$2; shift 2 ;;
        --listen) listen=$2; shift 2 ;;
        --https-listen) https_listen=$2; shift 2 ;;
        --server-name) server_name=$2; shift 2 ;;
        --cert) cert=$2; shift 2 ;;
        --key) key=$2; shift 2 ;;
        --source) source_arg=$2; shift 2 ;;
        --python) python=$2; shift 2 ;;
        --graceful-timeout) graceful=$2; shift 2 ;;
        --user) user=$2; shift 2 ;;
        --prefix) prefix=$2; shift 2 ;;
        --no-venv) no_venv=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown option: $1" ;;
    esac
done
[ "$source_arg" != pypi ] \
    || die "--source pypi: axon-stream is not published on PyPI; install from a checkout (--source PATH, by default the one this script is in)"

if [ -n "$prefix" ]; then
    mkdir -p "$prefix"
    prefix=$(cd "$prefix" && pwd)
else
    [ "$no_venv" = 0 ] || die "--no-venv goes with --prefix"
    [ "$(id -u)" = 0 ] || die "run as root (sudo), or try it out with --prefix DIR"
fi
[ -n "$root" ] || root=$prefix/srv/axon
[ -n "$workers" ] || workers=$(nproc)

is_port() { [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le 65535 ]; }
is_port "$port" || die "--port: not a port: $port"
[[ $workers =~ ^[1-9][0-9]*$ ]] || die "--workers: not a positive number: $workers"
[[ $graceful =~ ^[0-9]+$ ]] || die "--graceful-timeout: not a number of seconds: $graceful"
[[ $user =~ ^[a-z_][a-z0-9_-]*$ ]] || die "--user: not a user name: $user"
[[ $server_name =~ ^[A-Za-z0-9._*~^\ -]+$ ]] || die "--server-name: unexpected characters: $server_name"
case $root in /*) ;; *) die "--root must be an absolute path: $root" ;; esac
[[ $root =~ ^[A-Za-z0-9._/@+-]+$ ]] || die "--root: use a path without spaces or quotes: $root"
if [ -z "$prefix" ]; then
    case $root in
        /tmp|/tmp/*|/var/tmp|/var/tmp/*) die "--root: the service has a private /tmp (PrivateTmp=yes) and would not see $root" ;;
    esac
fi
if [ -n "$cert$key" ]; then
    { [ -n "$cert" ] && [ -n "$key" ]; } || die "--cert and --key go together"
    [ -r "$cert" ] || die "--cert: cannot read $cert"
    [ -r "$key" ] || die "--key: cannot read $key"
fi

# nginx's listen "80" or "127.0.0.1:8081"; a bare port also gets an IPv6 twin where there is IPv6.
listen_v6() {
    if is_port "$1" && [ -e /proc/net/if_inet6 ]; then
        echo "listen [::]:$1;"
    else
        echo "# (no IPv6 listen line: an address was given, or this host has no IPv6)"
    fi
}
[[ $listen =~ ^([0-9.]+:|\[[0-9a-fA-F:]+\]:)?[0-9]+$ ]] || die "--listen: a port or address:port: $listen"
[[ $https_listen =~ ^([0-9.]+:|\[[0-9a-fA-F:]+\]:)?[0-9]+$ ]] || die "--https-listen: a port or address:port: $https_listen"

# -- where things go -----------------------------------------------------------------------------

venv=$prefix/opt/axon/venv
env_file=$prefix/etc/axon/axon.env
unit=$prefix/etc/systemd/system/axon.service
snippet=$prefix/etc/nginx/snippets/axon-proxy.conf
site=$prefix/etc/nginx/sites-available/axon
site_link=$prefix/etc/nginx/sites-enabled/axon
access_log=$prefix/var/log/nginx/axon.access.log
have_systemd=0
[ -z "$prefix" ] && [ -d /run/systemd/system ] && have_systemd=1

# A system action: run it, or with --prefix say what would have run.
run() {
    if [ -n "$prefix" ]; then
        say "would run: $*"
    else
        "$@"
    fi
}

# Install the rendered $2 as $1 (mode $3) only if its content differs: an unchanged file keeps
# its mtime. Sets changed=1 when it wrote.
changed=0
put() {
    local dest=$1 new=$2 mode=$3
    if [ -f "$dest" ] && cmp -s "$new" "$dest"; then
        rm -f "$new"
        return 0
    fi
    mkdir -p "$(dirname "$dest")"
    chmod "$mode" "$new"
    mv -f "$new" "$dest"
    say "wrote $dest"
    changed=1
}

# rendered TEMPLATE NAME=VALUE... : the path of a temporary file holding the rendered template.
rendered() {
    local out
    out=$(mktemp)
    sh "$render" "$templates/$1" "${@:2}" >"$out" || { rm -f "$out"; die "cannot render $1"; }
    echo "$out"
}

# -- packages, user, served root -----------------------------------------------------------------

if [ -z "$prefix" ]; then
    missing=""
    command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="$missing nginx"
    if [ "$no_venv" = 0 ] && ! "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
        missing="$missing python3-venv"
    fi
    if [ -n "$missing" ]; then
        say "installing$missing"
        apt-get update -qq
        # shellcheck disable=SC2086 # a list of package names
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
    fi
fi
if [ "$no_venv" = 0 ]; then
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null \
        || die "Axon needs Python >= 3.10; $python is $("$python" -V 2>&1 || echo missing). Use --python."
    if [ -z "$prefix" ]; then
        # The venv links to its base interpreter, which the service (ProtectHome) must reach.
        case $("$python" -c 'import sys; print(sys.base_prefix)') in
            /root|/root/*|/home|/home/*) die "$python lives under /root or /home, which the service cannot see; use --python /usr/bin/python3" ;;
        esac
    fi
fi

if [ -n "$prefix" ]; then
    say "would run: id -u $user || useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin $user"
elif ! id -u "$user" >/dev/null 2>&1; then
    useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$user"
    say "created system user $user"
fi

if [ ! -e "$root" ]; then
    # A fresh root gets one example file, so that the demo in the summary works at once.
    install -d -m 0755 "$root" "$root/examples"
    printf 'Hello from Axon.\n' >"$root/examples/hello.txt"
    chmod 0644 "$root/examples/hello.txt"
    say "created $root with examples/hello.txt"
elif [ ! -d "$root" ]; then
    die "--root: not a directory: $root"
fi

# -- the virtual environment ---------------------------------------------------------------------

service_changed=0
if [ "$no_venv" = 0 ]; then
    if [ ! -x "$venv/bin/python" ]; then
        mkdir -p "$(dirname "$venv")"
        "$python" -m venv "$venv"
        say "created venv $venv"
    fi
    src=$(cd "$source_arg" && pwd) || die "--source: no such directory: $source_arg"
    { [ -f "$src/pyproject.toml" ] && [ -d "$src/src/axon" ]; } || die "--source: not an Axon checkout: $src"
    # The stamp is a hash of the files that make the package: a rerun on the same checkout
    # installs nothing, an edited checkout is installed again.
    stamp="path $src $(cd "$src" && find pyproject.toml README.md src -type f ! -name '*.pyc' \
        ! -path '*/__pycache__/*' ! -path '*.egg-info/*' -print0 | LC_ALL=C sort -z \
        | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)"
    stamp_file=$venv/axon-install.stamp
    if [ ! -f "$stamp_file" ] || [ "$(cat "$stamp_file")" != "$stamp" ]; then
        # Build from a copy: pip builds in the tree it is given, and the checkout stays clean.
        build=$(mktemp -d)
        trap 'rm -rf "$build"' EXIT
        cp -R "$src/pyproject.toml" "$src/README.md" "$src/src" "$build/"
        find "$build/src" \( -name __pycache__ -o -name '*.egg-info' \) -prune -exec rm -rf {} +
        "$venv/bin/python" -m pip install --disable-pip-version-check --quiet "${build}[server]"
        echo "$stamp" >"$stamp_file"
        say "installed Axon into $venv ($("$venv/bin/python" -c 'import axon; print(axon.__version__)'))"
        service_changed=1
    fi
fi

# -- the service ---------------------------------------------------------------------------------

case $root in
    /home|/home/*|/root|/root/*|/run/user/*) protect_home=read-only ;;  # the root is in there
    *) protect_home=yes ;;
esac

if [ ! -f "$env_file" ]; then
    mkdir -p "$(dirname "$env_file")"
    new=$(rendered axon.env.in)
    put "$env_file" "$new" 0640
fi

changed=0
new=$(rendered axon.service.in \
    USER="$user" ENV_FILE="$env_file" VENV="$venv" ROOT="$root" PORT="$port" WORKERS="$workers" \
    GRACEFUL="$graceful" STOP_TIMEOUT=$((graceful + 5)) PROTECT_HOME="$protect_home")
put "$unit" "$new" 0644
unit_changed=$changed
[ "$unit_changed" = 0 ] || service_changed=1

if [ -n "$prefix" ] || [ "$have_systemd" = 1 ]; then
    [ "$unit_changed" = 0 ] || run systemctl daemon-reload
    if [ -n "$prefix" ] || ! systemctl is-enabled --quiet axon.service; then
        run systemctl enable axon.service
    fi
    if [ "$service_changed" = 1 ]; then
        run systemctl restart axon.service
    elif [ -z "$prefix" ] && ! systemctl is-active --quiet axon.service; then
        systemctl start axon.service
    fi
else
    say "systemd is not running here: start Axon yourself with"
    say "  runuser -u $user -- $venv/bin/axon serve $root --host 127.0.0.1 --port $port --workers $workers"
fi

# -- nginx ---------------------------------------------------------------------------------------

nginx_version=$( (nginx -v 2>&1 || /usr/sbin/nginx -v 2>&1 || true) | sed -n 's|.*nginx/\([0-9.]*\).*|\1|p')
# "http2 on;" from nginx 1.25.1; before it (Debian 12: 1.22, Ubuntu 24.04: 1.24), "listen ... http2".
if [ -n "$nginx_version" ] && [ "$(printf '%s\n1.25.1\n' "$nginx_version" | sort -V | head -n1)" = 1.25.1 ]; then
    listen_http2="" http2="http2 on;"
else
    listen_http2=" http2" http2="# (http2 is on the listen line: nginx ${nginx_version:-version unknown} < 1.25.1)"
fi

changed=0
new=$(rendered nginx-proxy.conf.in)
put "$snippet" "$new" 0644
if [ -n "$cert" ]; then
    https_port=${https_listen##*:}
    suffix=""
    [ "$https_port" = 443 ] || suffix=":$https_port"
    https_v6=$(listen_v6 "$https_listen")
    [[ $https_v6 != listen* ]] || https_v6="${https_v6%;} ssl${listen_http2};"
    new=$(rendered nginx-site-tls.conf.in \
        UPSTREAM="127.0.0.1:$port" LISTEN="$listen" LISTEN_V6="$(listen_v6 "$listen")" \
        SERVER_NAME="$server_name" PROXY_CONF="$snippet" HTTPS_LISTEN="$https_listen" \
        HTTPS_LISTEN_V6="$https_v6" LISTEN_HTTP2="$listen_http2" HTTP2="$http2" \
        HTTPS_PORT_SUFFIX="$suffix" CERT="$(realpath "$cert")" KEY="$(realpath "$key")" ACCESS_LOG="$access_log")
else
    new=$(rendered nginx-site.conf.in \
        UPSTREAM="127.0.0.1:$port" LISTEN="$listen" LISTEN_V6="$(listen_v6 "$listen")" \
        SERVER_NAME="$server_name" PROXY_CONF="$snippet" ACCESS_LOG="$access_log")
fi
put "$site" "$new" 0644
if [ "$(readlink "$site_link" 2>/dev/null)" != "$site" ]; then
    mkdir -p "$(dirname "$site_link")"
    ln -sfn "$site" "$site_link"
    say "enabled $site_link"
    changed=1
fi
if [ "$server_name" = _ ] && [ -e "$prefix/etc/nginx/sites-enabled/default" ]; then
    # Debian's default site is the default_server for port 80 and would answer every request
    # that names no other server: it steps aside for a catch-all Axon site.
    rm -f "$prefix/etc/nginx/sites-enabled/default"
    say "disabled nginx's default site (sites-available/default is still there)"
    changed=1
fi

if [ -n "$prefix" ]; then
    # A whole nginx.conf around the site, to check it (nginx -t) and run it without the system's.
    install -d "$prefix/run" "$prefix/var/log/nginx"
    install -d -m 1777 "$prefix/var/lib/nginx"
    user_line="# (no user directive: nginx runs as whoever starts it)"
    [ "$(id -u)" != 0 ] || user_line="user root;  # workers as root: this tree is a test rig"
    new=$(rendered nginx-prefix.conf.in PREFIX="$prefix" USER_LINE="$user_line")
    put "$prefix/etc/nginx/nginx.conf" "$new" 0644
    if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
        PATH=$PATH:/usr/sbin nginx -t -q -c "$prefix/etc/nginx/nginx.conf" || die "nginx -t failed on the generated site"
    fi
    [ "$changed" = 0 ] || run systemctl reload nginx.service
else
    nginx -t -q || die "nginx -t failed: the files above are left in place for you to look at"
    if [ "$have_systemd" = 1 ]; then
        systemctl is-enabled --quiet nginx.service || systemctl enable nginx.service
        if ! systemctl is-active --quiet nginx.service; then
            systemctl start nginx.service
        elif [ "$changed" = 1 ]; then
            systemctl reload nginx.service
        fi
    elif [ "$changed" = 1 ]; then
        nginx -s reload 2>/dev/null || say "nginx is not running: start it with: nginx"
    fi
fi

# -- check and summary ---------------------------------------------------------------------------

scheme=http
host_port=${listen##*:}
[ "$host_port" = 80 ] && host_port="" || host_port=":$host_port"
if [ -n "$cert" ]; then
    scheme=https
    host_port=${https_listen##*:}
    [ "$host_port" = 443 ] && host_port="" || host_port=":$host_port"
fi
# How to reach the site from this host, before any DNS names it: nginx's address here, and the
# site's name, which nginx picks the site by (the Host header; for HTTPS, the name resolved to
# that address, so that the certificate's name is the one asked for). Without the name, Debian's
# default site would answer a named site's requests.
listen_addr=$listen
[ -z "$cert" ] || listen_addr=$https_listen
addr=127.0.0.1
case $listen_addr in *:*) addr=${listen_addr%:*} ;; esac
case $addr in 0.0.0.0 | "[::]" | "*") addr=127.0.0.1 ;; esac
url=$scheme://$addr$host_port reach="" host_header=""
if [ "$server_name" != _ ] && [ -n "$cert" ]; then
    url=https://$server_name$host_port
    reach="--resolve $server_name:${listen_addr##*:}:${addr#[}"
    reach="${reach%]} "
elif [ "$server_name" != _ ]; then
    host_header=$server_name
    reach="-H 'Host: $server_name' "
elif [ -n "$cert" ]; then
    reach="-k "  # the certificate names a host, not this address
fi

if [ -z "$prefix" ] && [ "$have_systemd" = 1 ] && [ "$no_venv" = 0 ]; then
    health() {  # URL [the Host header]
        "$venv/bin/python" - "$@" <<'PY'
import ssl, sys, time, urllib.request
context = ssl._create_unverified_context()  # the certificate may be for another name than localhost
request = urllib.request.Request(sys.argv[1], headers={"Host": sys.argv[2]} if len(sys.argv) > 2 else {})
for _ in range(30):
    try:
        urllib.request.urlopen(request, timeout=2, context=context).read()
        sys.exit(0)
    except Exception as exc:  # noqa: BLE001
        error = exc
        time.sleep(0.5)
sys.exit(f"{sys.argv[1]}: {error}")
PY
    }
    health "http://127.0.0.1:$port/api/health" || die "Axon does not answer; see: journalctl -u axon"
    health "$scheme://$addr$host_port/api/health" ${host_header:+"$host_header"} \
        || die "nginx does not pass requests to Axon; see: journalctl -u nginx"
    say "Axon answers, directly and through nginx."
fi

cat <<SUMMARY

Axon is installed${prefix:+ under $prefix}.
  served root   $root
  service       $unit  (axon serve on 127.0.0.1:$port, $workers workers)
  settings      $env_file
  nginx site    $site
Try it from this host:
  curl $reach$url/api/health
  curl -i $reach"$url/api/stream-files?file1=examples/hello.txt&file2=examples/hello.txt"
SUMMARY
if [ -n "$prefix" ]; then
    cat <<SUMMARY
Run it here, without systemd (two terminals):
  $venv/bin/axon serve $root --host 127.0.0.1 --port $port --workers $workers
  nginx -c $prefix/etc/nginx/nginx.conf -g 'daemon off;'
SUMMARY
fi
