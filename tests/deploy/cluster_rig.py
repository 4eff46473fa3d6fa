"""Several Axon nodes behind nginx, each node in a network namespace of its own.

A :class:`Cluster` makes a bridge in the root namespace (10.77.X.1/24, X drawn per run so that
parallel runs never share names or addresses), one namespace per node joined to it by a veth
pair (the node at 10.77.X.11, .12, ...), runs ``axon serve`` inside each (``ip netns exec``,
which also bind-mounts ``/etc/netns/NS/machine-id`` over ``/etc/machine-id``: each node has a
machine-id of its own, as separate hosts do), and nginx in the root namespace with the site
rendered from ``deploy/templates/nginx-cluster.conf.in``. :meth:`Cluster.close` removes every
process, namespace, link and file it made, whatever state the test left them in.

A test process killed outright (SIGKILL, a CI timeout) cannot close its cluster: its nodes run in
sessions of their own and outlive it. So each cluster keeps a record under :data:`OWNERS` (its
owner's pid, the process groups it started), and every new cluster first sweeps away what the
records of dead owners name (:func:`sweep_stale`).

Namespaces need root (CAP_SYS_ADMIN and CAP_NET_ADMIN); :func:`namespaces_refused` says why not
where the kernel or the container refuses them, for the tests to skip with that reason.
"""

from __future__ import annotations

import http.client
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import psutil
from deploy_rig import REPO, nginx_binary

PORT = 8000
#: One file per live cluster, named by its tag: "owner PID STARTED", then "group PGID STARTED" per
#: process group it started. STARTED is the process's start time (psutil), checked before a sweep
#: believes a pid is still that process, or kills it: pids are reused.
OWNERS = Path("/run/axon-test-clusters")
RENDER = REPO / "deploy" / "render.sh"
TEMPLATES = REPO / "deploy" / "templates"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=10)


def namespaces_refused() -> str | None:
    """Why this machine cannot run the cluster (None: it can), probed by making a namespace."""
    if os.geteuid() != 0:
        return "network namespaces need root (run the deploy suite as root, e.g. in CI's container with --privileged)"
    if nginx_binary() is None:
        return "nginx is not installed (apt-get install nginx)"
    name = f"axon-probe-{os.getpid()}"
    try:
        made = _ip("netns", "add", name, check=False)
    except FileNotFoundError:
        return "the ip command is missing (apt-get install iproute2)"
    if made.returncode != 0:
        return f"the kernel refuses network namespaces here: {made.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


def render(template: str, **values: str) -> str:
    args = [f"{k}={v}" for k, v in values.items()]
    return subprocess.run(["sh", str(RENDER), str(TEMPLATES / template), *args], capture_output=True, text=True,
                          check=True).stdout  # fmt: skip


def upstream_servers(addresses: list[str], max_fails: int = 1, fail_timeout: str = "5s") -> str:
    """The @SERVERS@ of nginx-cluster.conf.in: one directive per node, on one line."""
    return " ".join(f"server {a} max_fails={max_fails} fail_timeout={fail_timeout};" for a in addresses)


@dataclass
class Node:
    index: int
    netns: str
    address: str
    root: Path | str  # a directory, or an object store's URL (s3://bucket/prefix)
    log: Path
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.address}:{PORT}"


@dataclass
class Cluster:
    """``Cluster(work, roots, env)``: len(roots) nodes, node i serving roots[i]; then :meth:`start`
    (or :meth:`network`, then :meth:`start_all`, to set up what the nodes need in between)."""

    work: Path
    roots: list[Path | str]
    env: dict[str, str]
    serve_args: list[str] = field(default_factory=list)
    content: str = "local"  # what the nodes serve: "local" directories, or "s3" (one bucket)
    tag: str = field(default_factory=lambda: f"{os.getpid() % 4096:03x}{random.randrange(16 ** 3):03x}")
    nodes: list[Node] = field(default_factory=list)
    nginx: subprocess.Popen | None = None
    listen: int = 0
    _links: list[str] = field(default_factory=list)
    _netns: list[str] = field(default_factory=list)
    _helpers: list[subprocess.Popen] = field(default_factory=list)

    def __post_init__(self) -> None:
        # 10.77.X.0/24 with X free in the root namespace's routes: parallel runs stay apart.
        taken = _ip("-4", "route").stdout
        free = [x for x in range(1, 255) if f"10.77.{x}." not in taken]
        self.subnet = f"10.77.{random.choice(free)}"
        self.bridge = f"axb{self.tag}"  # interface names: at most 15 characters

    # -- the network ----------------------------------------------------------------------

    def start(self) -> Cluster:
        self.network()
        return self.start_all()

    def network(self) -> None:
        """The bridge, the namespaces and their links: what :meth:`start_all` starts nodes in."""
        sweep_stale()
        OWNERS.mkdir(parents=True, exist_ok=True)
        # Whole at once (written aside, then renamed): a sweep never reads a record without its owner.
        aside = OWNERS / f".{self.tag}"
        aside.write_text(f"owner {_identity(os.getpid())}\n")
        aside.rename(OWNERS / self.tag)
        _ip("link", "add", self.bridge, "type", "bridge")
        self._links.append(self.bridge)
        _ip("addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, root in enumerate(self.roots, 1):
            netns, host_end, node_end = f"axon-{self.tag}-{i}", f"axh{self.tag}{i}", f"axn{self.tag}{i}"
            _ip("netns", "add", netns)
            self._netns.append(netns)
            # A machine-id of the node's own: ip netns exec mounts /etc/netns/NS/* over /etc/*.
            etc = Path("/etc/netns") / netns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "machine-id").write_text(f"{random.getrandbits(128):032x}\n")
            _ip("link", "add", host_end, "type", "veth", "peer", "name", node_end)
            self._links.append(host_end)
            _ip("link", "set", node_end, "netns", netns)
            _ip("link", "set", host_end, "master", self.bridge)
            _ip("link", "set", host_end, "up")
            address = f"{self.subnet}.{10 + i}"
            _ip("-n", netns, "addr", "add", f"{address}/24", "dev", node_end)
            _ip("-n", netns, "link", "set", node_end, "up")
            _ip("-n", netns, "link", "set", "lo", "up")
            self.nodes.append(Node(i, netns, address, root, self.work / f"node{i}.log"))

    def start_all(self) -> Cluster:
        for node in self.nodes:
            self.start_node(node, wait=False)
        for node in self.nodes:
            self.wait_node(node)
        self._start_nginx()
        return self

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge: where the nodes reach this host."""
        return f"{self.subnet}.1"

    def relay(self, port: int) -> int:
        """Make ``127.0.0.1:port`` (a service on this host's loopback) reachable from the nodes
        at ``gateway:<the port returned>``, through a relay process stopped by :meth:`close`."""
        from deploy_rig import free_port

        listen = free_port()
        proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("tcp_relay.py")), self.gateway,
                                 str(listen), "127.0.0.1", str(port)], stdout=subprocess.PIPE,
                                start_new_session=True)  # fmt: skip
        self._helpers.append(proc)
        self._started(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready", "the relay did not start"
        return listen

    # -- the nodes ------------------------------------------------------------------------

    def start_node(self, node: Node, wait: bool = True) -> None:
        argv = ["ip", "netns", "exec", node.netns, sys.executable, "-m", "axon.cli", "serve", str(node.root),
                "--host", node.address, "--port", str(PORT), *self.serve_args]  # fmt: skip
        with open(node.log, "ab") as out:
            node.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env={**os.environ, **self.env}, start_new_session=True)  # fmt: skip
        self._started(node.proc)
        if wait:
            self.wait_node(node)

    def wait_node(self, node: Node, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not _answers(node.url + "/api/health"):
            if node.proc is None or node.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"node {node.index} did not start:\n{node.log.read_text(errors='replace')}")
            time.sleep(0.05)

    def kill_node(self, node: Node) -> None:
        """SIGKILL to the node's whole process group: its supervisor and workers at once, as a
        crash or the OOM killer would leave it (no graceful stop, nothing flushed)."""
        if node.proc is not None:
            _killpg(node.proc.pid, signal.SIGKILL)
            node.proc.wait(10)

    # -- nginx ----------------------------------------------------------------------------

    def _start_nginx(self) -> None:
        prefix = self.work / "nginx"
        for d in ("etc/nginx/sites-enabled", "run", "var/log/nginx", "var/lib/nginx"):
            (prefix / d).mkdir(parents=True, exist_ok=True)
        os.chmod(prefix / "var/lib/nginx", 0o1777)
        (prefix / "etc/nginx/axon-proxy.conf").write_text(render("nginx-proxy.conf.in"))
        from deploy_rig import free_port

        self.listen = free_port()
        (prefix / "etc/nginx/sites-enabled/axon-cluster").write_text(render(
            "nginx-cluster.conf.in",
            SERVERS=upstream_servers([f"{n.address}:{PORT}" for n in self.nodes]),
            LISTEN=f"127.0.0.1:{self.listen}", SERVER_NAME="_",
            ACCESS_LOG=str(prefix / "var/log/nginx/axon.log"), PROXY_CONF=str(prefix / "etc/nginx/axon-proxy.conf"),
        ))  # fmt: skip
        user = "user root;" if os.geteuid() == 0 else "# (no user directive)"
        conf = prefix / "etc/nginx/nginx.conf"
        conf.write_text(render("nginx-prefix.conf.in", PREFIX=str(prefix), USER_LINE=user))
        nginx = nginx_binary()
        subprocess.run([nginx, "-t", "-q", "-c", str(conf)], check=True, capture_output=True)
        with open(self.work / "nginx.log", "ab") as out:
            self.nginx = subprocess.Popen([nginx, "-c", str(conf), "-g", "daemon off;"], stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        self._started(self.nginx)
        deadline = time.monotonic() + 10
        while not _answers(f"{self.url}/api/health"):
            assert self.nginx.poll() is None and time.monotonic() < deadline, (self.work / "nginx.log").read_text()
            time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listen}"

    @property
    def access_log(self) -> Path:
        return self.work / "nginx/var/log/nginx/axon.log"

    # -- cleaning up ----------------------------------------------------------------------

    def _started(self, proc: subprocess.Popen) -> None:
        """Note a process group this cluster started, for a sweep after this process is killed."""
        try:  # never made anew (no O_CREAT): a record removed has been closed or swept
            fd = os.open(OWNERS / self.tag, os.O_WRONLY | os.O_APPEND)
        except FileNotFoundError:
            return
        with os.fdopen(fd, "w") as record:
            record.write(f"group {_identity(proc.pid)}\n")

    def close(self) -> None:
        """Everything made, removed: safe to call after any failure, and more than once."""
        procs = [n.proc for n in self.nodes if n.proc is not None] + ([self.nginx] if self.nginx else [])
        procs += self._helpers
        for proc in procs:
            _killpg(proc.pid, signal.SIGKILL)
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for netns in self._netns:
            _ip("netns", "del", netns, check=False)  # takes its end of the veth pair with it
            etc = Path("/etc/netns") / netns
            (etc / "machine-id").unlink(missing_ok=True)
            try:
                etc.rmdir()
            except OSError:
                pass
        for link in reversed(self._links):
            _ip("link", "del", link, check=False)
        (OWNERS / self.tag).unlink(missing_ok=True)
        self._netns.clear()
        self._links.clear()
        self._helpers.clear()


def sweep_stale() -> list[str]:
    """Remove what clusters of test processes that died without closing left behind: their
    process groups (if still the processes recorded), the processes in their namespaces, the
    namespaces, links and /etc/netns files. The tags swept."""
    swept = []
    for record in sorted(OWNERS.glob("[!.]*")) if OWNERS.is_dir() else []:
        try:
            lines = record.read_text().splitlines()
        except FileNotFoundError:
            continue  # closed or swept meanwhile
        owner = lines[0].split()[1:] if lines and lines[0].startswith("owner ") else None
        if owner is None or _is(*owner):
            continue  # alive (a record without its owner line is never one: they are written whole)
        tag = record.name
        for line in lines[1:]:
            _, pgid, started = line.split()
            if _is(pgid, started):
                _killpg(int(pgid), signal.SIGKILL)
        for netns in _ip("netns", "list").stdout.split():
            if netns.startswith(f"axon-{tag}-"):
                for pid in _ip("netns", "pids", netns, check=False).stdout.split():
                    _kill(int(pid))
                _ip("netns", "del", netns, check=False)
                etc = Path("/etc/netns") / netns
                (etc / "machine-id").unlink(missing_ok=True)
                if etc.is_dir():
                    etc.rmdir()
        for link in _ip("-o", "link", "show").stdout.splitlines():
            name = link.split(":")[1].strip().split("@")[0]
            if name in (f"axb{tag}",) or (name.startswith(f"axh{tag}") and name[len(f"axh{tag}"):].isdigit()):
                _ip("link", "del", name, check=False)
        record.unlink(missing_ok=True)
        swept.append(tag)
    return swept


def _identity(pid: int) -> str:
    """``PID STARTED``: the pid and the start time that tell this process from a later one with
    its pid."""
    return f"{pid} {psutil.Process(pid).create_time()!r}"


def _is(pid: str, started: str) -> bool:
    """Whether the process recorded as ``pid`` started at ``started`` is still running."""
    try:
        return repr(psutil.Process(int(pid)).create_time()) == started
    except psutil.NoSuchProcess:
        return False


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _answers(url: str) -> bool:
    """Whether ``url`` answers 200, asked directly (http.client: no proxy from the environment)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=1)
    try:
        conn.request("GET", parts.path)
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()
