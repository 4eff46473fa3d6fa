"""The Lua scripts handed to wrk: the request to send, and a ``done()`` that prints JSON.

wrk's text output rounds (``1.23ms``, ``5.69GB``); its Lua ``done(summary, latency, requests)``
hook sees the exact counters, so we print those as one JSON line after a marker and parse that.

Constant-rate mode (``paced_script``) is wrk with a pacing script, built so that it has no
coordinated omission. wrk itself sends the next request on a connection as soon as the last
response arrives, so a server that stalls is simply asked less often and its stall shows up as
one slow sample instead of many (coordinated omission). The script gives every wrk thread its own
schedule -- one send every ``threads / rate`` seconds, threads staggered so the sends spread
evenly -- and measures each response from the time its request was *meant* to go out. Whichever
of the thread's connections is free takes the next send; when none is free the send waits, and
that lateness is counted in its sample, as wrk2 and HdrHistogram's "corrected" recording do.

wrk's Lua hooks do not say which connection a response belongs to, so a thread pairs its
responses with its sends first in, first out. Each connection has one request in flight, so a
response is paired with the oldest send of the thread still unanswered: exact while the thread's
connections answer in the order they were asked, and off by no more than the spread of those
answers when they do not (a stall answers them together). A request lost with its connection
(a socket error) would shift the pairing, so the queue never holds more sends than the thread
has connections. The clock is CLOCK_MONOTONIC through LuaJIT's FFI (Debian's wrk is built on
LuaJIT). wrk's timers tick in milliseconds, so a send that is on schedule goes out within a
tick before it was due and is measured from when it went out: the generator's own granularity
is not charged to the server. A send that is behind schedule is measured from when it was due.
How late a send on schedule went out past its slot is the generator's own lag (its thread woke
late), counted in a histogram of its own (``WrkResult.send_lag``) and charged to no latency.

One connection per thread would need no pairing, but then a core runs one thread per connection
and spends itself switching between them: on one core such a generator sent well under the
rates asked of it (BENCHMARKS.md, "Tails at a constant rate").

Requests that change (``HttpRequest.dynamic``) are built in Lua's ``request()``, which wrk calls
for every request: files drawn with ``math.random`` from the pool (each wrk thread has its own
Lua state, seeded apart), or the same request with a header whose value is the thread's number
and a counter. A request that never changes defines no ``request()`` when run as fast as the
server answers, so wrk sends its prepared bytes and the generator costs what it did.
"""

from __future__ import annotations

import random

from .scenarios import POOL_FORMAT, POOL_PER_DIR, HttpRequest

MARKER = "AXON-BENCH-JSON "
PERCENTILES = (50, 75, 90, 99, 99.9)
# Paced runs keep a log-bucketed histogram: bucket b holds latencies in [STEP^(b-1), STEP^b) us,
# so a reported percentile is within 1% of the true one (HdrHistogram keeps ~0.1%; 1% is finer
# than run-to-run noise and keeps the table the threads hand back small).
HISTOGRAM_STEP = 1.01


def quote(value: str | bytes) -> str:
    """A Lua string literal for any bytes (decimal escapes for everything not plain ASCII)."""
    data = value.encode("utf-8") if isinstance(value, str) else value
    out = []
    for byte in data:
        char = chr(byte)
        if char in '"\\':
            out.append("\\" + char)
        elif 32 <= byte < 127:
            out.append(char)
        else:
            out.append(f"\\{byte:03d}")
    return '"' + "".join(out) + '"'


def _request_setup(request: HttpRequest) -> str:
    lines = [f"wrk.method = {quote(request.method)}", f"wrk.path = {quote(request.target)}"]
    if request.body:
        lines.append(f"wrk.body = {quote(request.body)}")
    for name, value in request.headers:
        lines.append(f"wrk.headers[{quote(name)}] = {quote(value)}")
    return "\n".join(lines) + "\n"


_JSON_HELPERS = r"""
local function num(x)
  if x ~= x or x == math.huge or x == -math.huge then return "null" end
  return string.format("%.17g", x)
end

local function stats_json(s, percentiles)
  local out = {'"min":' .. num(s.min), '"max":' .. num(s.max),
               '"mean":' .. num(s.mean), '"stdev":' .. num(s.stdev)}
  if percentiles then
    local ps = {}
    for _, p in ipairs(percentiles) do
      ps[#ps + 1] = string.format('"%s":%s', tostring(p), num(s:percentile(p)))
    end
    out[#out + 1] = '"percentiles":{' .. table.concat(ps, ",") .. "}"
  end
  return "{" .. table.concat(out, ",") .. "}"
end
"""

_DONE = r"""
function done(summary, latency, requests)
  local e = summary.errors
  local parts = {
    '"duration_us":' .. num(summary.duration),
    '"requests":' .. num(summary.requests),
    '"bytes":' .. num(summary.bytes),
    string.format('"errors":{"connect":%s,"read":%s,"write":%s,"status":%s,"timeout":%s}',
                  num(e.connect), num(e.read), num(e.write), num(e.status), num(e.timeout)),
    '"latency_us":' .. stats_json(latency, AXON_PERCENTILES),
    '"thread_rps":' .. stats_json(requests, nil),
  }
  if axon_paced_json then parts[#parts + 1] = '"paced":' .. axon_paced_json() end
  io.write(AXON_MARKER .. "{" .. table.concat(parts, ",") .. "}\n")
end
"""

_PACED = r"""
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } axon_timespec;
int clock_gettime(int clk_id, axon_timespec *tp);
]]
local CLOCK_MONOTONIC = 1
local ts = ffi.new("axon_timespec")
local function now_us()
  ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
  return tonumber(ts.tv_sec) * 1e6 + tonumber(ts.tv_nsec) / 1e3
end

-- In each thread's Lua state: the thread's schedule, and its sends waiting for their answers.
local LOG_STEP = math.log(AXON_STEP)
local interval_us, next_at
-- Due times handed out by delay(), in order (negated for a send on schedule); then the times
-- each sent request is measured from, in the order sent. Each a queue: items, first, last.
local due, due_first, due_last = {}, 1, 0
local sent, sent_first, sent_last = {}, 1, 0
axon_hist, axon_count, axon_sum, axon_sumsq, axon_max, axon_sent = {}, 0, 0, 0, 0, 0
-- How late the generator itself sent what it could send on time: its own lag, by bucket.
axon_late, axon_late_max = {}, 0

local function bucket(v)
  if v < 1 then v = 1 end
  return math.floor(math.log(v) / LOG_STEP) + 1
end

function init(args)
  axon_prepare()
  interval_us = 1e6 * AXON_THREADS / AXON_RATE
end

function delay()
  local now = now_us()
  if next_at == nil then next_at = now + axon_index * 1e6 / AXON_RATE end
  local wait, ms = next_at - now, 0
  due_last = due_last + 1
  if wait > 0 then
    -- Whole ticks only: the send goes out up to a tick before it is due rather than after, so a
    -- thread whose next sends are close together sends them without a timer (a wake-up each).
    ms = math.floor(wait / 1000)
    due[due_last] = -next_at        -- on schedule: measured from the send, see request()
  else
    due[due_last] = next_at         -- behind schedule: the wait so far counts
  end
  next_at = next_at + interval_us
  return ms
end

function request()
  -- On schedule, the send goes out on a 1 ms timer tick, a little before it was due: the
  -- generator's granularity, not the server's doing, so it is not charged.
  local now, from = now_us(), nil
  if due_first <= due_last then
    from = due[due_first]
    due[due_first] = nil
    due_first = due_first + 1
  end
  if from and from < 0 then
    -- A connection was free in time: any lateness past the slot is the generator's own (its
    -- thread woke late), counted apart and not charged to the server.
    local late = now + from
    local b = bucket(late)
    axon_late[b] = (axon_late[b] or 0) + 1
    if late > axon_late_max then axon_late_max = late end
    from = nil
  end
  sent_last = sent_last + 1
  sent[sent_last] = from or now
  axon_sent = axon_sent + 1
  -- One request in flight a connection: more unanswered sends than connections are lost ones.
  while sent_last - sent_first + 1 > AXON_PER_THREAD do
    sent[sent_first] = nil
    sent_first = sent_first + 1
  end
  return axon_next()
end

function response(status, headers, body)
  if sent_first > sent_last then return end
  local v = now_us() - sent[sent_first]
  sent[sent_first] = nil
  sent_first = sent_first + 1
  if v < 1 then v = 1 end
  local b = bucket(v)
  axon_hist[b] = (axon_hist[b] or 0) + 1
  axon_count = axon_count + 1
  axon_sum = axon_sum + v
  axon_sumsq = axon_sumsq + v * v
  if v > axon_max then axon_max = v end
end

function axon_paced_json()
  local buckets, count, sum, sumsq, max, sent, late, late_max = {}, 0, 0, 0, 0, 0, {}, 0
  for _, t in ipairs(threads) do
    for b, c in pairs(t:get("axon_hist")) do buckets[b] = (buckets[b] or 0) + c end
    for b, c in pairs(t:get("axon_late")) do late[b] = (late[b] or 0) + c end
    local lm = t:get("axon_late_max")
    if lm > late_max then late_max = lm end
    count = count + t:get("axon_count")
    sent = sent + t:get("axon_sent")
    sum = sum + t:get("axon_sum")
    sumsq = sumsq + t:get("axon_sumsq")
    local m = t:get("axon_max")
    if m > max then max = m end
  end
  local parts, late_parts = {}, {}
  for b, c in pairs(buckets) do parts[#parts + 1] = string.format('"%d":%d', b, c) end
  for b, c in pairs(late) do late_parts[#late_parts + 1] = string.format('"%d":%d', b, c) end
  return string.format('{"rate":%s,"connections":%d,"step":%s,"count":%d,"sent":%d,"sum_us":%s,"sumsq_us":%s,"max_us":%s,"buckets":{%s},"late_max_us":%s,"late_buckets":{%s}}',
                       num(AXON_RATE), AXON_CONNECTIONS, num(AXON_STEP), count, sent, num(sum), num(sumsq), num(max),
                       table.concat(parts, ","), num(late_max), table.concat(late_parts, ","))
end
"""


_THREADS = r"""
-- In the main Lua state: number the threads (seeds, request ids, pacing), and keep them to
-- collect their histograms in done().
local threads, started = {}, 0
function setup(thread)
  thread:set("axon_index", started)
  started = started + 1
  threads[#threads + 1] = thread
end
"""

_NEXT = r"""
-- In each thread's Lua state: axon_prepare() once in init(), then axon_next() for each request.
local axon_static, axon_head, axon_tail, axon_counter = nil, nil, nil, 0

local function axon_pool_name(i)
  return string.format(AXON_POOL_FORMAT, math.floor(i / AXON_POOL_PER_DIR), i)
end

-- AXON_DRAW distinct files of the pool, at random, uniformly (without repeats in one request).
local function axon_target()
  if not AXON_DRAW_BATCH then return "/files/" .. axon_pool_name(math.random(AXON_POOL) - 1) end
  local picked, parts = {}, {}
  while #parts < AXON_DRAW do
    local i = math.random(AXON_POOL) - 1
    if not picked[i] then
      picked[i] = true
      parts[#parts + 1] = "file" .. (#parts + 1) .. "=" .. axon_pool_name(i)
    end
  end
  return "/api/stream-files?" .. table.concat(parts, "&")
end

function axon_prepare()
  math.randomseed(AXON_SEED + 7919 * axon_index)
  axon_static = wrk.format()
  if AXON_DISTINCT_HEADER ~= "" then
    -- The prepared request cut where the header goes: each request is head .. counter .. tail.
    local cut = axon_static:find("\r\n\r\n", 1, true)
    axon_head = axon_static:sub(1, cut - 1) .. "\r\n" .. AXON_DISTINCT_HEADER .. ": " .. axon_index .. "-"
    axon_tail = axon_static:sub(cut)
  end
end

function axon_next()
  if AXON_DRAW > 0 then return wrk.format(nil, axon_target()) end
  if axon_head then
    axon_counter = axon_counter + 1
    return axon_head .. axon_counter .. axon_tail
  end
  return axon_static
end
"""

_DYNAMIC_HOOKS = r"""
function init(args) axon_prepare() end
function request() return axon_next() end
"""


def _next_constants(request: HttpRequest, seed: int | None) -> str:
    draw = request.draw
    return _constants(
        AXON_DRAW=draw.count if draw else 0, AXON_DRAW_BATCH=bool(draw and draw.batch),
        AXON_POOL=draw.pool if draw else 0, AXON_POOL_FORMAT=POOL_FORMAT, AXON_POOL_PER_DIR=POOL_PER_DIR,
        AXON_DISTINCT_HEADER=request.distinct_header,
        # A new seed per run: two runs draw different files; the threads' seeds differ by index.
        AXON_SEED=random.randrange(2**31) if seed is None else seed,
    )


def _constants(**values: object) -> str:
    lines = []
    for name, value in values.items():
        if isinstance(value, bool):
            lines.append(f"{name} = {'true' if value else 'false'}")
        elif isinstance(value, str):
            lines.append(f"{name} = {quote(value)}")
        elif isinstance(value, tuple):
            lines.append(f"{name} = {{{', '.join(repr(v) for v in value)}}}")
        else:
            lines.append(f"{name} = {value!r}")
    return "\n".join(lines) + "\n"


def peak_script(request: HttpRequest, seed: int | None = None) -> str:
    """As fast as the server answers: wrk's static request (or one built for each request, when
    ``request.dynamic``), and JSON at the end."""
    dynamic = ""
    if request.dynamic:
        dynamic = _next_constants(request, seed) + _THREADS + _NEXT + _DYNAMIC_HOOKS
    return (
        "-- generated by axon bench\n"
        + _constants(AXON_MARKER=MARKER, AXON_PERCENTILES=PERCENTILES)
        + _request_setup(request)
        + _JSON_HELPERS
        + dynamic
        + _DONE
    )


def paced_script(request: HttpRequest, rate: float, connections: int, threads: int = 1,
                 seed: int | None = None) -> str:
    """``rate`` requests/s in total over ``connections`` connections, shared by ``threads`` wrk
    threads (each keeps its own schedule and its own connections: wrk gives every thread
    ``connections // threads``)."""
    if rate <= 0:
        raise ValueError("the rate must be positive")
    if threads <= 0 or connections % threads:
        raise ValueError(f"{connections} connections do not divide among {threads} threads")
    return (
        "-- generated by axon bench (constant rate)\n"
        + _constants(AXON_MARKER=MARKER, AXON_PERCENTILES=PERCENTILES, AXON_RATE=float(rate),
                     AXON_CONNECTIONS=int(connections), AXON_THREADS=int(threads),
                     AXON_PER_THREAD=int(connections) // int(threads), AXON_STEP=HISTOGRAM_STEP)
        + _next_constants(request, seed)
        + _request_setup(request)
        + _JSON_HELPERS
        + _THREADS
        + _NEXT
        + _PACED
        + _DONE
    )
