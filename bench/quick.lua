--- The quick benchmark: `make bench-quick`, about two minutes. Every warm-path target as a ratio
--- to its floor (and to the official TypeScript SDK client v1), printed with its verdict, so a
--- change that loses 20 % shows before it lands. A benchmark, not a test: nothing here fails on a
--- slow machine, and `make test` never runs it.
--
-- In one run, clients taking turns (A B C A B C …) against the same servers:
--   HTTP   warm tools/call on the C echo server (JSON answers; session + event-stream answers):
--          mcpclient, mcpclient's leg alone, the floor (bench/floor: a bare libcurl keep-alive
--          loop posting the same bodies), the SDK v1 client (JSON answers only); once with the
--          servers on CPU 0 and the clients on CPU 1, once unpinned.
--   stdio  warm tools/call on bench/stdio_echo (a C server): mcpclient, the floor (bench/stdio_floor:
--          a C client that writes, sleeps in poll, reads), the SDK v1 stdio client; and the
--          system calls mcpclient makes per warm call (strace -c, the difference of two runs).
--   list   plain `conn:list_tools()` of the 4 900-tool catalogue against the SDK v1 client's.
--   proxy  warm tools/call on the JSON echo server direct, through a local tinyproxy (an http
--          target is forwarded: a new proxy connection per call) and through a local danted
--          (socks5h: a tunnel kept alive), when both are installed: what a proxy costs the client.
--
-- Environment: QUICK_ROUNDS (3), QUICK_CALLS (2000), QUICK_OUT (build/bench/QUICK.md).
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;./bench/?.lua;" .. package.path
package.cpath = "./build/?.so;" .. package.cpath

local core = require "mcpclient.core"
local echo = require "echo"
local peers = require "support.peers"
local shell = require "support.shell"

local quote, read_all = shell.quote, shell.read_all
local json = core.json

local ROUNDS = math.tointeger(tonumber(os.getenv("QUICK_ROUNDS") or "")) or 3
local CALLS = math.tointeger(tonumber(os.getenv("QUICK_CALLS") or "")) or 2000
local OUT = os.getenv("QUICK_OUT") or "build/bench/QUICK.md"

local function say(...)
  io.stderr:write(string.format(...), "\n")
end

if not os.execute("make --no-print-directory -C bench >&2") then error("make -C bench failed") end
peers.require_available()
local pin_ok = io.popen("command -v taskset"):read("a") ~= ""

-- One client process; its one JSON line, decoded. Any failure stops the run: a ratio computed
-- from a client that did not finish would mislead.
local function run(cmd)
  local errfile = os.tmpname()
  local pipe = assert(io.popen(cmd .. " 2>" .. quote(errfile)))
  local out = pipe:read("a") or ""
  local ok = pipe:close()
  local err = read_all(errfile)
  os.remove(errfile)
  local line = out:match("(%b{})%s*$")
  local report = line and json.decode(line)
  if not ok or type(report) ~= "table" or (report.errors or 0) ~= 0 then
    error("bench-quick: " .. cmd .. " failed: " .. (err:match("[^\n]+") or out:sub(1, 200)))
  end
  return report
end

local samples = {}  -- key -> { cpu_per_op_us, ... }
local function sample(key, report, field)
  samples[key] = samples[key] or {}
  table.insert(samples[key], report[field or "cpu_per_op_us"])
end

local function median(key)
  local v = samples[key]
  if not v or #v == 0 then return nil end
  table.sort(v)
  local m = #v // 2
  return #v % 2 == 1 and v[m + 1] or (v[m] + v[m + 1]) / 2
end

---------------------------------------------------------------------------
-- HTTP: warm calls
---------------------------------------------------------------------------

local started = os.time()
local fast_json = echo.start("--tools 4900 --page-size 100", pin_ok and 0 or nil)
local fast_sse = echo.start("--session --sse", pin_ok and 0 or nil)

-- The local proxies of the proxy part (spec/support/proxies.lua), when installed.
local proxies = require "support.proxies"
local proxy_dir, tiny, dante
if shell.run("{ command -v tinyproxy && command -v danted; }") then
  proxy_dir = shell.tmpdir()
  tiny, dante = proxies.tinyproxy(proxy_dir), proxies.dante(proxy_dir)
end

local HTTP_CLIENTS = {
  mcpclient = "lua5.4 bench/mcpclient_client.lua --mode warm",
  leg = "lua5.4 bench/mcpclient_client.lua --mode leg",
  floor = "bench/floor --mode warm",
  sdk = "node bench/sdk_client.mjs --mode warm",
}
local ORDER = { "mcpclient", "leg", "floor", "sdk" }
local placements = pin_ok and { "pinned", "unpinned" } or { "unpinned" }

local ok, why = pcall(function()
  for round = 1, ROUNDS do
    say("round %d of %d: HTTP", round, ROUNDS)
    for _, placement in ipairs(placements) do
      local prefix = placement == "pinned" and "taskset -c 1 " or ""
      for _, server in ipairs { { "json", fast_json }, { "sse", fast_sse } } do
        for _, client in ipairs(ORDER) do
          if client ~= "sdk" or server[1] == "json" then
            local cmd = string.format("%s%s --url %s --calls %d --warmup 100", prefix, HTTP_CLIENTS[client],
              quote(server[2].url), CALLS)
            sample(table.concat({ "http", server[1], placement, client }, "/"), run(cmd))
          end
        end
      end
    end
  end
  say("list")
  for _ = 1, math.max(2, ROUNDS - 1) do
    sample("list/mcpclient", run("lua5.4 bench/mcpclient_client.lua --url " .. quote(fast_json.url)
      .. " --mode list --calls 3 --warmup 1 --walk whole --schemas plain"))
    sample("list/sdk", run("node bench/sdk_client.mjs --url " .. quote(fast_json.url)
      .. " --mode list --calls 3 --warmup 1"))
  end
  if tiny then
    say("proxy")
    local calls = math.max(100, CALLS // 4)
    for _ = 1, ROUNDS do
      for _, via in ipairs { { "direct", nil }, { "tinyproxy", tiny.url }, { "dante", dante.url } } do
        local report = run(string.format("%s --url %s --calls %d --warmup 20%s", HTTP_CLIENTS.mcpclient,
          quote(fast_json.url), calls, via[2] and (" --proxy " .. quote(via[2])) or ""))
        sample("proxy/cpu/" .. via[1], report)
        report.wall_per_op_us = report.wall_s / report.n * 1e6
        sample("proxy/wall/" .. via[1], report, "wall_per_op_us")
      end
    end
  end
end)
fast_json.stop()
fast_sse.stop()
proxies.stop(tiny)
proxies.stop(dante)
if proxy_dir then os.execute("rm -rf " .. quote(proxy_dir)) end
if not ok then error(why, 0) end

---------------------------------------------------------------------------
-- stdio: warm calls and system calls
---------------------------------------------------------------------------

local SERVER = "bench/stdio_echo"
for round = 1, ROUNDS do
  say("round %d of %d: stdio", round, ROUNDS)
  sample("stdio/mcpclient", run(string.format("lua5.4 bench/stdio_client.lua --calls %d -- %s", CALLS, SERVER)))
  sample("stdio/floor", run(string.format("bench/stdio_floor %d -- %s", CALLS, SERVER)))
  sample("stdio/sdk", run(string.format("node bench/sdk_stdio_client.mjs --sdk 1 --calls %d -- %s", CALLS, SERVER)))
end

-- System calls of the client process alone (strace without -f) for two call counts: their
-- difference over the difference in calls is what one warm call makes, start-up excluded.
local function syscalls(calls)
  local file = os.tmpname()
  run(string.format("strace -c -o %s lua5.4 bench/stdio_client.lua --calls %d --warmup 0 -- %s",
    quote(file), calls, SERVER))
  local text = read_all(file)
  os.remove(file)
  local counts = {}
  for n, name in text:gmatch("\n%s*[%d.]+%s+[%d.]+%s+%d+%s+(%d+)%s+%d*%s*([%w_]+)") do
    if name ~= "total" then counts[name] = tonumber(n) end
  end
  local total = tonumber(text:match("\n%s*[%d.]+%s+[%d.]+%s+%d+%s+(%d+)%s+%d*%s*total")) or 0
  return total, counts
end
local have_strace = io.popen("command -v strace"):read("a") ~= ""
local per_call, per_name
if have_strace then
  local small, few = syscalls(200)
  local large, many = syscalls(200 + CALLS)
  per_call = (large - small) / CALLS
  per_name = {}
  for name, n in pairs(many) do
    local d = (n - (few[name] or 0)) / CALLS
    if d >= 0.05 then per_name[#per_name + 1] = string.format("%s %.2f", name, d) end
  end
  table.sort(per_name)
end

---------------------------------------------------------------------------
-- The report
---------------------------------------------------------------------------

local rows = {}
local function row(target, measured, met)
  local verdict = met == nil and "–" or (met and "met" or "**missed**")
  rows[#rows + 1] = string.format("| %s | %s | %s |", target, measured, verdict)
end
local function us(v) return v and string.format("%.1f µs", v) or "?" end

for _, server in ipairs { "json", "sse" } do
  for _, placement in ipairs(placements) do
    local key = "http/" .. server .. "/" .. placement .. "/"
    local ours, leg, floor = median(key .. "mcpclient"), median(key .. "leg"), median(key .. "floor")
    if ours and floor then
      row(string.format("warm HTTP call, %s answers, %s: client CPU ≤ 1.2× the libcurl floor's",
        server == "json" and "JSON" or "event-stream", placement),
        string.format("%s vs %s = %.2f× (the leg alone %.2f×)", us(ours), us(floor), ours / floor, leg / floor),
        ours / floor <= 1.2)
    end
    local sdk = median(key .. "sdk")
    if ours and sdk then
      row(string.format("… the same, ≤ 1/10 of the SDK v1 client's (%s)", placement),
        string.format("%s vs %s = 1/%.1f", us(ours), us(sdk), sdk / ours), sdk / ours >= 10)
    end
  end
end
local s_ours, s_floor, s_sdk = median("stdio/mcpclient"), median("stdio/floor"), median("stdio/sdk")
row("warm stdio call (C server): client CPU ≤ 3× the pipe floor's",
  string.format("%s vs %s = %.2f×", us(s_ours), us(s_floor), s_ours / s_floor), s_ours / s_floor <= 3)
row("… ≤ 1/10 of the SDK v1 stdio client's", string.format("%s vs %s = 1/%.1f", us(s_ours), us(s_sdk), s_sdk / s_ours),
  s_sdk / s_ours >= 10)
if per_call then
  row("system calls per warm stdio call ≤ 3", string.format("%.2f (%s)", per_call, table.concat(per_name, ", ")),
    per_call <= 3.05)
else
  row("system calls per warm stdio call ≤ 3", "not measured: strace is not installed", nil)
end
local l_ours, l_sdk = median("list/mcpclient"), median("list/sdk")
if l_ours and l_sdk then
  row("plain `list_tools()` of 4 900 tools: ≥ 5× less client CPU than the SDK v1 client's",
    string.format("%.1f ms vs %.1f ms = %.2f×", l_ours / 1000, l_sdk / 1000, l_sdk / l_ours), l_sdk / l_ours >= 5)
end

local direct_cpu, direct_wall = median("proxy/cpu/direct"), median("proxy/wall/direct")
for _, via in ipairs { { "tinyproxy", "a local tinyproxy (http target forwarded, a new proxy connection per call)" },
  { "dante", "a local danted (socks5h, the tunnel kept alive)" } } do
  local cpu, wall = median("proxy/cpu/" .. via[1]), median("proxy/wall/" .. via[1])
  if cpu and direct_cpu then
    row("warm HTTP call through " .. via[2] .. ", beside the direct call",
      string.format("client CPU %s vs %s = %.2f×; wall %s vs %s per call", us(cpu), us(direct_cpu), cpu / direct_cpu,
        us(wall), us(direct_wall)), nil)
  end
end

local load = read_all("/proc/loadavg"):match("^(%S+ %S+ %S+)") or "?"
local text = table.concat({
  "# Quick benchmark",
  "",
  string.format("`make bench-quick`, %s, %d s; %d rounds of %d warm calls, medians of the client process's CPU "
    .. "per call (user + system); load average at the end %s.", os.date("!%Y-%m-%d %H:%M UTC"),
    os.time() - started, ROUNDS, CALLS, load),
  "",
  "| target | measured | verdict |",
  "| --- | --- | --- |",
  table.concat(rows, "\n"),
  "",
}, "\n")
io.write(text)
os.execute("mkdir -p " .. quote(OUT:match("^(.*)/[^/]*$") or "."))
local f = assert(io.open(OUT, "w"))
f:write(text)
f:close()
say("written to %s", OUT)
