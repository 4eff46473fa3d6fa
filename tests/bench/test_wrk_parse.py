"""Reading wrk's results: recorded outputs of real runs (samples/), the paced histogram, the scripts.

The samples were recorded from ``axon bench`` runs on this project's machine kind: nginx serving
T1, nginx answering 404s, the original at a constant rate, and a server that resets connections
(socket errors).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from axon.bench import lua, wrk
from axon.bench.scenarios import HttpRequest

SAMPLES = Path(__file__).parent / "samples"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def text_figures(output: str) -> dict[str, float]:
    """What wrk prints as text, to check the JSON against it (rounded as wrk rounds)."""
    out = {"requests": float(re.search(r"^\s+(\d+) requests in", output, re.MULTILINE).group(1)),
           "rps": float(re.search(r"^Requests/sec:\s+([\d.]+)", output, re.MULTILINE).group(1))}
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    for key, got in zip(("connect", "read", "write", "timeout"), errors.groups() if errors else (0, 0, 0, 0)):
        out[key] = float(got)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    out["status"] = float(non2xx.group(1)) if non2xx else 0.0
    return out


@pytest.mark.parametrize("name", ["wrk_nginx_T1_burst.txt", "wrk_nginx_error_burst.txt", "wrk_reset_errors.txt"])
def test_json_agrees_with_wrks_text(name):
    output = sample(name)
    result = wrk.parse(output)
    text = text_figures(output)
    assert result.requests == text["requests"]
    assert result.rps == pytest.approx(text["rps"], rel=0.01)
    for key in ("connect", "read", "write", "timeout", "status"):
        assert result.errors[key] == text[key], key
    assert result.raw == output


def test_peak_sample_figures():
    r = wrk.parse(sample("wrk_nginx_T1_burst.txt"))
    assert r.paced_rate is None
    assert r.duration == pytest.approx(2.0, abs=0.2)
    assert r.bytes > r.requests * 8192  # every response carried the 8 KB file
    assert r.socket_errors == 0 and r.errors["status"] == 0
    lat = r.latency
    assert 0 < lat.percentiles["50"] <= lat.percentiles["75"] <= lat.percentiles["90"] <= lat.percentiles["99"] <= lat.max
    assert set(lat.percentiles) == {"50", "75", "90", "99", "99.9"}
    assert lat.within_stdev is not None and 0 < lat.within_stdev <= 100  # from the "+/- Stdev" column
    assert r.thread_rps.mean > 0 and r.thread_rps.within_stdev is not None


def test_error_and_socket_error_samples():
    r = wrk.parse(sample("wrk_nginx_error_burst.txt"))
    assert r.errors["status"] == r.requests > 0  # every answer was the expected 404
    r = wrk.parse(sample("wrk_reset_errors.txt"))
    assert r.errors["read"] > 0 and r.socket_errors == r.errors["read"]


def test_paced_sample_reports_latency_from_the_intended_send_time():
    output = sample("wrk_original_T2_rate.txt")
    r = wrk.parse(output)
    assert r.paced_rate == 500
    assert r.rps == pytest.approx(500, rel=0.1)
    lat = r.latency
    assert lat.within_stdev is None  # no such column for our own histogram
    ps = [lat.percentiles[k] for k in ("50", "75", "90", "99", "99.9")]
    assert ps == sorted(ps) and 0 < ps[0] and ps[-1] <= lat.max
    # wrk's own figures (from the actual send) are in the text; ours differ, and are the ones kept.
    assert "Latency Distribution" in output


def test_histogram_percentile():
    step = 1.01
    buckets = {1: 1, 100: 98, 500: 1}  # 100 samples
    assert wrk.histogram_percentile(buckets, step, 1) == pytest.approx(step)
    assert wrk.histogram_percentile(buckets, step, 50) == pytest.approx(step**100)
    assert wrk.histogram_percentile(buckets, step, 99) == pytest.approx(step**100)
    assert wrk.histogram_percentile(buckets, step, 99.9) == pytest.approx(step**500)
    assert wrk.histogram_percentile({}, step, 50) == 0.0


def test_paced_latency_stats():
    step = 1.01
    values = [1000.0] * 90 + [20000.0] * 10  # microseconds
    buckets: dict[str, int] = {}
    for v in values:
        b = str(math.floor(math.log(v) / math.log(step)) + 1)  # as the paced script buckets
        buckets[b] = buckets.get(b, 0) + 1
    paced = {"rate": 100, "connections": 10, "step": step, "count": len(values), "sum_us": sum(values),
             "sumsq_us": sum(v * v for v in values), "max_us": 20000.0, "buckets": buckets}
    stats = wrk.paced_latency(paced)
    assert stats.mean == pytest.approx(2.9)  # ms
    assert stats.percentiles["50"] == pytest.approx(1.0, rel=0.011)
    assert stats.percentiles["99"] == pytest.approx(20.0, rel=0.011)
    assert stats.percentiles["99.9"] <= stats.max == 20.0


def test_no_json_line_is_an_error():
    with pytest.raises(ValueError, match="JSON"):
        wrk.parse("Running 1s test @ http://x\n  0 requests in 1.00s, 0.00B read\n")


def test_lua_quote_escapes_everything_not_plain_ascii():
    assert lua.quote('a"b\\c') == '"a\\"b\\\\c"'
    assert lua.quote(b"\r\n\x00\xff") == '"\\013\\010\\000\\255"'
    assert lua.quote("é") == '"\\195\\169"'


def test_scripts_carry_the_request():
    request = HttpRequest("POST", "/api/echo", b'{"id": 1}', (("Content-Type", "application/json"),))
    peak = lua.peak_script(request)
    assert 'wrk.method = "POST"' in peak and 'wrk.path = "/api/echo"' in peak
    assert 'wrk.body = "{\\"id\\": 1}"' in peak
    assert 'wrk.headers["Content-Type"] = "application/json"' in peak
    assert "function done(" in peak and "function delay(" not in peak  # as fast as it answers
    paced = lua.paced_script(request, 250, 10)
    assert "function delay(" in paced and "AXON_RATE = 250.0" in paced and "AXON_CONNECTIONS = 10" in paced
    assert "AXON_THREADS = 1" in paced and "AXON_PER_THREAD = 10" in paced
    assert "AXON_PER_THREAD = 5" in lua.paced_script(request, 250, 10, 2)
    with pytest.raises(ValueError):
        lua.paced_script(request, 0, 10)
    with pytest.raises(ValueError):
        lua.paced_script(request, 250, 10, 3)  # wrk would drop the remainder


def test_command_and_load():
    script = Path("/tmp/x.lua")
    argv = wrk.command("http://127.0.0.1:1", wrk.Load(5, 50, 2), script)
    assert argv[:7] == ["wrk", "-t", "2", "-c", "50", "-d", "5s"] and "--latency" in argv
    paced = wrk.command("http://127.0.0.1:1", wrk.Load(5, 16, 2, rate=100), script)
    assert paced[1:5] == ["-t", "2", "-c", "16"]  # paced: each thread paces its own share of connections
    with pytest.raises(ValueError):
        wrk.Load(5, 50, 3)  # wrk would silently drop the remainder
    with pytest.raises(ValueError):
        wrk.Load(0, 50, 2)
