--- The 2026-07-28 era row of the benchmarks: `lua5.4 bench/modern.lua` from the repository root.
--- Not a test: nothing fails on a slow machine; the goal is reported as met or missed.
--
-- Starts the official SDK v2 server (spec/peers/sdk2-server.mjs --mode default, 127.0.0.1, no
-- log) and runs, interleaved (A B A B …), mcpclient (bench/mcpclient_client.lua --mode warm; its
-- default protocol "auto" finds the modern era) and the SDK v2 client (bench/sdk2_client.mjs,
-- versionNegotiation { mode: 'auto' }) against that same server. Each client reports its own CPU
-- per warm call (getrusage of its own process, timed part only) and peak RSS; this script takes
-- medians with min–max, prints the table, and writes it into bench/RESULTS.md between the
-- markers "<!-- modern-era:begin -->" and "<!-- modern-era:end -->" (appended when absent).
-- The server is stopped by its PID.
--
-- Environment (all optional): BENCH_RUNS=5, BENCH_CALLS=1000, BENCH_WARMUP=100,
-- BENCH_OUT=bench/RESULTS.md.
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path
package.cpath = "./build/?.so;" .. package.cpath

local json = require "mcpclient.json"
local peers = require "support.peers"

local function env_int(name, default)
  local n = math.tointeger(tonumber(os.getenv(name) or ""))
  return n and n > 0 and n or default
end

local runs, calls, warmup = env_int("BENCH_RUNS", 5), env_int("BENCH_CALLS", 1000), env_int("BENCH_WARMUP", 100)
local out_path = os.getenv("BENCH_OUT") or "bench/RESULTS.md"

-- One client run: its JSON line, decoded.
local function run_client(command)
  local pipe = assert(io.popen(command .. " 2>/dev/null"))
  local line = pipe:read("l")
  pipe:close()
  local figures = line and json.decode(line)
  if type(figures) ~= "table" then error("the client printed no figures: " .. command) end
  if figures.errors ~= 0 then error("the client reported errors: " .. command) end
  return figures
end

local function median(list)
  local sorted = {}
  for i, v in ipairs(list) do sorted[i] = v end
  table.sort(sorted)
  local n = #sorted
  return n % 2 == 1 and sorted[(n + 1) // 2] or (sorted[n // 2] + sorted[n // 2 + 1]) / 2, sorted[1], sorted[n]
end

-- Run both clients `runs` times, interleaved; returns figures per client name.
local function measure(url)
  local commands = {
    mcpclient = string.format("lua5.4 bench/mcpclient_client.lua --url %s --mode warm --calls %d --warmup %d",
      url, calls, warmup),
    sdk2 = string.format("node bench/sdk2_client.mjs --url %s --calls %d --warmup %d", url, calls, warmup),
  }
  local got = { mcpclient = { cpu = {}, rss = {}, ops = {} }, sdk2 = { cpu = {}, rss = {}, ops = {} } }
  for r = 1, runs do
    for _, name in ipairs { "mcpclient", "sdk2" } do
      local f = run_client(commands[name])
      local g = got[name]
      g.cpu[r], g.rss[r], g.ops[r] = f.cpu_per_op_us, f.peak_rss_kb, f.ops_per_s
      if name == "sdk2" and f.era ~= "modern" then error("the SDK v2 client negotiated " .. tostring(f.era)) end
    end
  end
  return got
end

local function row(name, g)
  local cpu, cpu_lo, cpu_hi = median(g.cpu)
  local rss, rss_lo, rss_hi = median(g.rss)
  local ops = median(g.ops)
  return string.format("| %s | %.0f (%.0f–%.0f) | %.1f (%.1f–%.1f) | %.0f |", name, cpu, cpu_lo, cpu_hi,
    rss / 1024, rss_lo / 1024, rss_hi / 1024, ops), cpu, rss
end

local function report(got)
  local a, cpu_a, rss_a = row("mcpclient (protocol auto → 2026-07-28)", got.mcpclient)
  local b, cpu_b, rss_b = row("SDK v2 client 2.4.0 (versionNegotiation auto)", got.sdk2)
  local cpu_ratio, rss_ratio = cpu_a / cpu_b, rss_a / rss_b
  return table.concat({
    "<!-- modern-era:begin -->",
    "## Warm tools/call in the 2026-07-28 era (against the SDK v2 server)",
    "",
    string.format("`lua5.4 bench/modern.lua`: %d runs of %d timed warm calls (after %d untimed), both clients "
      .. "interleaved against one `@modelcontextprotocol/server` 2.4.0 `createMcpHandler` server on 127.0.0.1. "
      .. "Median (min–max) of the runs; CPU is each client process's own user + system time.", runs, calls, warmup),
    "",
    "| client | CPU per warm call, µs | peak RSS, MiB | calls/s |",
    "|---|---|---|---|",
    a, b,
    "",
    string.format("Goal ≤ 1/10 of the SDK v2 client's CPU and peak RSS: CPU %.3f× (%s), RSS %.3f× (%s).",
      cpu_ratio, cpu_ratio <= 0.1 and "met" or "missed", rss_ratio, rss_ratio <= 0.1 and "met" or "missed"),
    "<!-- modern-era:end -->",
  }, "\n")
end

-- Put the section into the results page, replacing an earlier one.
local function write(section)
  local f = io.open(out_path, "r")
  local text = f and f:read("a") or ""
  if f then f:close() end
  local s, e = text:find("<!%-%- modern%-era:begin %-%->.-<!%-%- modern%-era:end %-%->")
  if s then
    text = text:sub(1, s - 1) .. section .. text:sub(e + 1)
  else
    text = text .. (text:sub(-1) == "\n" and "\n" or "\n\n") .. section .. "\n"
  end
  f = assert(io.open(out_path, "w"))
  f:write(text)
  f:close()
end

local peer = peers.start("sdk2-default")
local ok, got = pcall(measure, peer.url)
peer.stop()
if not ok then error(got, 0) end
local section = report(got)
print(section)
write(section)
