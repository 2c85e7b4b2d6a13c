--- The soak client: many warm calls on one connection, watching memory and descriptors.
--
--   SOAK_URL=http://127.0.0.1:P/mcp lua5.4 scripts/soak_client.lua      (scripts/soak starts a server)
--
-- Run from the repository root (it finds ./lua and ./build by itself). Settings, from the environment:
--   SOAK_URL       the MCP server (required)
--   SOAK_CALLS     warm tools/call "echo" on one connection, warm-up included (default 100000)
--   SOAK_WARMUP    calls before the baseline is taken (default 2000)
--   SOAK_EVERY     calls between samples (default 1000)
--   SOAK_CHURN     afterwards, this many connections opened, called once and closed (default 2000;
--                  0 skips), sampled every SOAK_EVERY / 10 connections after a tenth of them
--   SOAK_ROUNDS    afterwards, this many rounds of SOAK_WIDTH calls at once on one connection
--                  (mcp.gather; default 10000; 0 skips); every 10th round adds a cancelled slow
--                  call and a task that raises while its transfer is in flight (aborted)
--   SOAK_WIDTH     calls per round (default 4); the open descriptors of this phase may move by
--                  at most SOAK_WIDTH + 2 (the connections one round can hold), never grow past it
--   SOAK_MAX_GROWTH_KIB  the allowed growth of peak RSS (VmHWM) after warm-up (default 1024)
--   SOAK_QUIET     1: no per-sample lines
-- A sample is VmRSS and VmHWM (/proc/self/status), the open descriptors other than pipes
-- (/proc/<pid>/fd, listed by ls through a pipe: that pipe shows once or twice, depending on
-- whether ls looks before popen has closed our copy of its write end; the client itself opens
-- files and sockets, never pipes) and the Lua heap (collectgarbage "count"); nothing is
-- collected by force.
--
-- Prints the samples, then a summary: the growth after warm-up of RSS, peak RSS and the Lua heap,
-- and the descriptor range. Exits 1 when a call failed, peak RSS grew by SOAK_MAX_GROWTH_KIB or
-- more, or the descriptors were not flat; 2 on bad settings.
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.cpath = "./build/?.so;" .. package.cpath

local mcp = require "mcpclient"
local core = require "mcpclient.core"

local function setting(name, default)
  local text = os.getenv(name)
  if text == nil or text == "" then return default end
  local n = math.tointeger(tonumber(text))
  if not n or n < 0 then
    io.stderr:write(string.format("soak_client: %s must be a non-negative integer, not %q\n", name, text))
    os.exit(2)
  end
  return n
end

local URL = os.getenv("SOAK_URL")
if not URL or URL == "" then
  io.stderr:write("soak_client: SOAK_URL is required (scripts/soak starts a server and sets it)\n")
  os.exit(2)
end
local CALLS = setting("SOAK_CALLS", 100000)
local WARMUP = setting("SOAK_WARMUP", 2000)
local EVERY = math.max(1, setting("SOAK_EVERY", 1000))
local CHURN = setting("SOAK_CHURN", 2000)
local ROUNDS = setting("SOAK_ROUNDS", 10000)
local WIDTH = math.max(1, setting("SOAK_WIDTH", 4))
local MAX_GROWTH_KIB = setting("SOAK_MAX_GROWTH_KIB", 1024)
local QUIET = os.getenv("SOAK_QUIET") == "1"
if WARMUP >= CALLS then
  io.stderr:write("soak_client: SOAK_WARMUP must be below SOAK_CALLS\n")
  os.exit(2)
end

local PID = assert(io.open("/proc/self/stat")):read("l"):match("^(%d+)")

local function status_kib(text, field)
  return tonumber(text:match(field .. ":%s*(%d+)")) or 0
end

local function sample(label)
  local f = assert(io.open("/proc/self/status"))
  local status = f:read("a")
  f:close()
  local pipe = assert(io.popen("ls -l /proc/" .. PID .. "/fd"))
  local fds = 0
  for line in pipe:lines() do
    local target = line:match(" %-> (.+)$")
    if target and not target:find("^pipe:") then fds = fds + 1 end
  end
  pipe:close()
  local s = { label = label, rss = status_kib(status, "VmRSS"), hwm = status_kib(status, "VmHWM"), fds = fds,
    heap = collectgarbage("count") }
  if not QUIET then
    io.write(string.format("%-14s rss %7d KiB  peak %7d KiB  fds %3d  lua heap %8.1f KiB\n", label, s.rss, s.hwm,
      s.fds, s.heap))
    io.flush()
  end
  return s
end

local failures, first_failure = 0, nil
local function failed(message)
  failures = failures + 1
  first_failure = first_failure or message
end

local function echo(conn, i)
  local text = "soak " .. i
  local outcome, message = conn:call_tool("echo", { message = text })
  if not outcome then
    failed(message)
  elseif outcome.is_error or outcome.text ~= text then
    failed("unexpected answer: " .. tostring(outcome.text))
  end
end

local function connect()
  return mcp.connect { url = URL, identifier = "soak", health = mcp.health.discard }
end

-- Growth after the baseline, over the samples taken after it.
local function summarise(name, samples, count, unit)
  local base = samples[1]
  local max_rss, min_fds, max_fds = base.rss, base.fds, base.fds
  for _, s in ipairs(samples) do
    max_rss = math.max(max_rss, s.rss)
    min_fds, max_fds = math.min(min_fds, s.fds), math.max(max_fds, s.fds)
  end
  local last = samples[#samples]
  local result = {
    name = name,
    rss_growth = last.rss - base.rss, rss_max_growth = max_rss - base.rss,
    hwm_growth = last.hwm - base.hwm, heap_growth = last.heap - base.heap,
    fds_min = min_fds, fds_max = max_fds,
  }
  io.write(string.format("%s: %d %s after the baseline; samples %d\n", name, count, unit, #samples))
  io.write(string.format("  RSS        %d KiB -> %d KiB (growth %+d KiB, largest %+d KiB)\n", base.rss, last.rss,
    result.rss_growth, result.rss_max_growth))
  io.write(string.format("  peak RSS   %d KiB -> %d KiB (growth %+d KiB)\n", base.hwm, last.hwm, result.hwm_growth))
  io.write(string.format("  Lua heap   %.1f KiB -> %.1f KiB (growth %+.1f KiB)\n", base.heap, last.heap,
    result.heap_growth))
  io.write(string.format("  open fds   %d .. %d\n", min_fds, max_fds))
  return result
end

local t0 = core.now()
local results = {}

-- Phase 1: warm calls on one connection.
do
  local conn <close> = connect()
  local samples = {}
  for i = 1, CALLS do
    echo(conn, i)
    if i == WARMUP then
      samples[1] = sample("baseline@" .. i)
    elseif i > WARMUP and (i - WARMUP) % EVERY == 0 then
      samples[#samples + 1] = sample("calls@" .. i)
    end
  end
  if #samples == 1 or samples[#samples].label ~= "calls@" .. CALLS then samples[#samples + 1] = sample("end") end
  results[#results + 1] = summarise("warm calls", samples, CALLS - WARMUP, "calls")
end

-- Phase 2: connection churn (connect, handshake, one call, DELETE, close).
if CHURN > 0 then
  local warm = math.max(1, CHURN // 10)
  local every = math.max(1, EVERY // 10)
  local samples = {}
  for i = 1, CHURN do
    local conn <close> = connect()
    echo(conn, i)
    conn:close()
    if i == warm then
      samples[1] = sample("baseline@" .. i)
    elseif i > warm and (i - warm) % every == 0 then
      samples[#samples + 1] = sample("conns@" .. i)
    end
  end
  if #samples == 1 then samples[2] = sample("end") end
  results[#results + 1] = summarise("connection churn", samples, CHURN - warm, "connections")
end

-- A slow call stopped in flight: by its cancel hook (cancelled) or by a hook
-- that raises (the task dies with its transfer in the engine: aborted).
local function stopped_call(conn, how)
  local polls = 0
  local outcome, _, err = conn:call_tool("slow", { ms = 200 }, { cancel = function()
    polls = polls + 1
    if polls < 3 then return false end
    if how == "abort" then error("aborted by the soak", 0) end
    return true
  end })
  if outcome or err.kind ~= "cancelled" then failed("a cancelled call was not cancelled") end
end

-- Phase 3: rounds of calls at once on one connection, with cancelled and aborted transfers.
if ROUNDS > 0 then
  local conn <close> = connect()
  local warm = math.max(1, ROUNDS // 10)
  local samples = {}
  for r = 1, ROUNDS do
    local tasks = {}
    for w = 1, WIDTH do tasks[w] = function() echo(conn, r * WIDTH + w) end end
    if r % 10 == 0 then
      tasks[#tasks + 1] = function() stopped_call(conn, "cancel") end
      tasks[#tasks + 1] = function() stopped_call(conn, "abort") end
    end
    local outcomes = mcp.gather(tasks)
    if r % 10 == 0 and outcomes[#outcomes].error ~= "aborted by the soak" then
      failed("the aborted task did not raise")
    end
    if r == warm then
      samples[1] = sample("baseline@" .. r)
    elseif r > warm and r % 10 == 5 and (r - warm) % math.max(10, EVERY // WIDTH) < 10 then
      samples[#samples + 1] = sample("rounds@" .. r)
    end
  end
  if #samples == 1 then samples[2] = sample("end") end
  results[#results + 1] = summarise("concurrent rounds", samples, ROUNDS - warm, "rounds")
  -- How many kept-alive connections a round leaves depends on how its calls
  -- overlapped; a leak would grow past what one round can hold.
  results[#results].fd_slack = WIDTH + 2
  if core.engine_step(0) ~= 0 then failed("transfers were left in the engine") end
end

local elapsed = core.now() - t0
io.write(string.format("elapsed %.1f s; %d calls failed%s\n", elapsed, failures,
  first_failure and (" (first: " .. first_failure .. ")") or ""))

local ok = failures == 0
for _, r in ipairs(results) do
  if r.hwm_growth >= MAX_GROWTH_KIB then
    io.write(string.format("FAIL %s: peak RSS grew by %d KiB (limit %d KiB)\n", r.name, r.hwm_growth,
      MAX_GROWTH_KIB))
    ok = false
  end
  if r.fds_max - r.fds_min > (r.fd_slack or 0) then
    io.write(string.format("FAIL %s: open descriptors moved between %d and %d\n", r.name, r.fds_min, r.fds_max))
    ok = false
  end
end
if failures > 0 then io.write("FAIL: calls failed\n") end
io.write(ok and "soak: OK\n" or "soak: FAILED\n")
io.flush()
-- close the state: every connection and userdata is released before exit (valgrind looks)
os.exit(ok and 0 or 1, true)
