"""What a result was measured on: the machine and the versions of the tools, for the report."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from importlib import metadata

PEERS = ("gunicorn", "uWSGI", "uvicorn", "granian", "httptools", "uvloop")


def _first_line(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "not found"
    text = (done.stdout or done.stderr).strip().splitlines()
    return text[0] if text else "unknown"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            found = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.MULTILINE)
        return found.group(1).strip() if found else platform.processor() or "unknown CPU"
    except OSError:
        return platform.processor() or "unknown CPU"


def memory_gib() -> float | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return None


def describe() -> str:
    mem = memory_gib()
    parts = [
        f"{os.cpu_count()} x {cpu_model()}",
        f"{mem:.0f} GiB RAM" if mem else "",
        platform.platform(),
        f"Python {platform.python_version()} ({sys.implementation.name})",
    ]
    return ", ".join(p for p in parts if p)


def versions() -> dict[str, str]:
    out = {
        "wrk": re.sub(r"^wrk\s+|\s*Copyright.*", "", _first_line(["wrk", "-v"])),
        "nginx": _first_line(["nginx", "-v"]).replace("nginx version: ", ""),
    }
    for name in PEERS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out
