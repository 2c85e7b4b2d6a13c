--- The benchmark run: `make bench` from the repository root,
--- which runs `lua5.4 bench/run.lua`. Not a test: nothing here fails on a slow machine; the
--- targets are reported as met or missed, never asserted.
--
-- It builds bench/ (the fast C echo server and the libcurl floor), starts four servers on
-- 127.0.0.1 — the fast echo server with JSON answers (and a 4 900-tool catalogue in pages),
-- the same with a session and event-stream answers, and the official SDK's reference server in
-- stateless-JSON and session-SSE modes — and runs four clients against them, interleaved
-- (A B C D A B C D …): mcpclient (bench/mcpclient_client.lua; for warm calls also its
-- `--mode leg`, the floor's loop through mcpclient's own leg; for listings also `--walk whole`),
-- the floor (bench/floor) and the
-- official TypeScript SDK clients v1 (bench/sdk_client.mjs, @modelcontextprotocol/sdk) and v2
-- (bench/sdk2_client.mjs, @modelcontextprotocol/client). Each client process reports its own
-- figures as one JSON line; this script takes medians with min–max over the runs, prints the
-- tables and writes bench/RESULTS.md (keeping the section bench/modern.lua wrote there between
-- its markers). Every server it starts is stopped by its PID.
--
-- Environment (all optional):
--   BENCH_RUNS=5        runs of every (scenario, server, client)
--   BENCH_CALLS=2000    timed warm calls per run          BENCH_WARMUP=100 untimed warm calls first
--   BENCH_COLD=100      cold calls per run (new connection, handshake, call, close)
--   BENCH_LISTS=3       timed catalogue listings per run (after one untimed)
--   BENCH_CANCELS=50    cancelled calls per run           BENCH_TOOLS=4900 BENCH_PAGE=100
--   BENCH_ONLY=warm,cold,list,cancel,startup,roundtrips   a subset of the scenarios
--   BENCH_ONLY=listing  the listing comparison alone, in a few minutes: only the catalogue
--                       server is started, the list scenario runs with every listing client (the
--                       mcpclient forms and both SDK clients, interleaved), and the report, with
--                       the listing targets alone, goes to bench/LISTING.md (not RESULTS.md)
--   BENCH_SDK_SERVERS=0 skip the SDK reference servers (fast servers only)
--   BENCH_CLIENTS=mcpclient_plain,mcpclient_plain_incremental,mcpclient_default,mcpclient_default_pages,
--                 mcpclient_default_read,mcpclient,lua_objects,lua_objects_incremental,mcpclient_whole,
--                 mcpclient_leg,floor,sdk,sdk_whole,sdk2
--                       a subset of the clients
--                       (sdk: v1, sdk2: v2; list scenario only: mcpclient_plain `list_tools()` with
--                       no option and no schema read or normalised, mcpclient_plain_incremental the
--                       same with the collector a host's own Lua state runs, mcpclient_default the
--                       plain one with each schema normalised, mcpclient_default_pages `each_tool_page(fn)` with none,
--                       mcpclient_default_read the former with every schema read, mcpclient_whole
--                       the kept listing held whole, sdk_whole v1 holding every page's tools,
--                       lua_objects(_incremental) the objects of plain list_tools() made and held by
--                       Lua alone, no transport and no JSON: the collector's floor in each mode;
--                       mcpclient_leg: the floor's loop through mcpclient's leg, warm only)
--   BENCH_OUT=bench/RESULTS.md
--   BENCH_PIN=split     split: servers on CPU 0, clients on CPU 1 (the default with 2+ CPUs and
--                       taskset); same: everything on CPU 0; none: let the scheduler place them.
--                       On a small VM, where a client runs relative to the server moves every figure
--                       by 2-4x (a wake-up across CPUs is expensive), so unpinned runs are bimodal.
--                       With pinning on, warm calls on fast-json are also run with the clients on the
--                       server's CPU ("warm-same") to show both placements.
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;./bench/?.lua;" .. package.path
package.cpath = "./build/?.so;" .. package.cpath

local function env_int(name, default)
  local v = os.getenv(name)
  if v == nil or v == "" then return default end
  local n = math.tointeger(tonumber(v))
  if not n or n < 0 then error(name .. " must be a non-negative integer, not " .. v) end
  return n
end

local config = {
  runs = env_int("BENCH_RUNS", 5),
  calls = env_int("BENCH_CALLS", 2000),
  warmup = env_int("BENCH_WARMUP", 100),
  cold = env_int("BENCH_COLD", 100),
  lists = env_int("BENCH_LISTS", 3),
  cancels = env_int("BENCH_CANCELS", 50),
  tools = env_int("BENCH_TOOLS", 4900),
  page = env_int("BENCH_PAGE", 100),
  sdk_servers = env_int("BENCH_SDK_SERVERS", 1) ~= 0,
  listing_only = os.getenv("BENCH_ONLY") == "listing",
  pin = os.getenv("BENCH_PIN"),
}
config.out = os.getenv("BENCH_OUT") or (config.listing_only and "bench/LISTING.md" or "bench/RESULTS.md")
-- the listing comparison alone needs neither the SDK's servers nor the event-stream server
if config.listing_only then config.sdk_servers = false end
local only = {}
for name in (config.listing_only and "list" or os.getenv("BENCH_ONLY") or "warm,cold,list,cancel,startup,roundtrips")
    :gmatch("[%w_]+") do
  only[name] = true
end
local wanted = {}
local ALL_CLIENTS = "mcpclient_plain,mcpclient_plain_incremental,mcpclient_default,mcpclient_default_pages,"
  .. "mcpclient_default_read,mcpclient,lua_objects,lua_objects_incremental,"
  .. "mcpclient_whole,mcpclient_leg,floor,sdk,sdk_whole,sdk2"
for name in (os.getenv("BENCH_CLIENTS") or ALL_CLIENTS):gmatch("[%w_]+") do
  wanted[name] = true
end

local shell_helpers = require "support.shell"
local quote, read_all = shell_helpers.quote, shell_helpers.read_all

local function shell(cmd)
  local pipe = assert(io.popen(cmd .. " 2>/dev/null"))
  local out = pipe:read("a") or ""
  pipe:close()
  return (out:gsub("%s+$", ""))
end

local function say(...)
  io.stderr:write(string.format(...), "\n")
  io.stderr:flush()
end

---------------------------------------------------------------------------
-- Build
---------------------------------------------------------------------------

if not os.execute("make --no-print-directory -C bench >&2") then error("make -C bench failed") end
local core_ok, core = pcall(require, "mcpclient.core")
if not core_ok then error("build/mcpclient/core.so is not built (run `make all`): " .. tostring(core)) end
local peers = require "support.peers"
local echo = require "echo"

-- CPU placement (see BENCH_PIN above).
do
  local cpus = tonumber(shell("nproc")) or 1
  local has_taskset = shell("command -v taskset") ~= ""
  if config.pin == nil or config.pin == "" then
    config.pin = (cpus >= 2 and has_taskset) and "split" or "none"
  end
  if config.pin ~= "split" and config.pin ~= "same" and config.pin ~= "none" then
    error("BENCH_PIN must be split, same or none")
  end
  if config.pin ~= "none" and not has_taskset then error("BENCH_PIN=" .. config.pin .. " needs taskset") end
  if config.pin == "split" and cpus < 2 then error("BENCH_PIN=split needs two CPUs") end
  config.server_cpu = config.pin ~= "none" and 0 or nil
  config.client_cpu = config.pin == "split" and 1 or config.server_cpu
end

local function pinned(cpu)
  if cpu == nil then return "" end
  return "taskset -c " .. cpu .. " "
end

---------------------------------------------------------------------------
-- Servers
---------------------------------------------------------------------------

local servers = {}   -- name -> { name, label, url, pid, stop }
local started = {}   -- in start order, for stop_all

-- The fast echo server (bench/echo.lua), pinned to the servers' CPU.
local function start_echo(name, label, args)
  local server = echo.start(args, config.server_cpu)
  server.name, server.label = name, label
  started[#started + 1] = server
  servers[name] = server
  return server
end

local function start_sdk(name, label, kind)
  local p = peers.start(kind)
  -- Every thread of the Node server (-a), not just its main one.
  if config.server_cpu then os.execute("taskset -a -p -c " .. config.server_cpu .. " " .. p.pid .. " >/dev/null") end
  local server = { name = name, label = label, pid = p.pid, url = p.url, stop = function() p:stop() end }
  started[#started + 1] = server
  servers[name] = server
  return server
end

local function stop_all()
  for i = #started, 1, -1 do pcall(started[i].stop) end
end

---------------------------------------------------------------------------
-- Clients
---------------------------------------------------------------------------

local CLIENTS = {
  mcpclient = { label = "mcpclient", program = "lua5.4 bench/mcpclient_client.lua" },
  -- the listing with the catalogue held whole (list_tools) instead of page by page
  mcpclient_whole = { label = "mcpclient, whole catalogue held",
    program = "lua5.4 bench/mcpclient_client.lua --walk whole" },
  -- what a user writes first: no option at all, nothing read (each schema would be built on its first read)
  mcpclient_plain = { label = "mcpclient, plain `list_tools()`, nothing read",
    program = "lua5.4 bench/mcpclient_client.lua --walk whole --schemas plain" },
  -- the same in a Lua state a host program made: its collector runs incremental (the lua5.4
  -- interpreter switches its own to generational, which does full collections over the held catalogue)
  mcpclient_plain_incremental = { label = "mcpclient, plain `list_tools()`, nothing read, a host's Lua state "
    .. "(incremental collector)",
    program = "lua5.4 bench/mcpclient_client.lua --walk whole --schemas plain --gc incremental" },
  -- the same, each schema normalised (judged from its text, so still not built)
  mcpclient_default = { label = "mcpclient, default `list_tools()`",
    program = "lua5.4 bench/mcpclient_client.lua --walk whole --schemas default" },
  mcpclient_default_pages = { label = "mcpclient, default `each_tool_page(fn)`",
    program = "lua5.4 bench/mcpclient_client.lua --walk pages --schemas default" },
  mcpclient_default_read = { label = "mcpclient, default `list_tools()`, every schema read",
    program = "lua5.4 bench/mcpclient_client.lua --walk whole --schemas default-read" },
  -- the floor's loop through mcpclient's leg (warm only): what the leg costs over the floor
  mcpclient_leg = { label = "mcpclient's leg alone (the floor's loop)", program = "lua5.4 bench/mcpclient_client.lua",
    modes = { warm = "leg" } },
  -- what holding a listing costs Lua itself: the objects plain list_tools() hands over, made and
  -- held by Lua alone from bytes in memory (no transport, no JSON), in each collector mode (list only)
  lua_objects = { label = "Lua alone: the objects of plain `list_tools()` made and held, no transport, no JSON",
    program = "lua5.4 bench/mcpclient_client.lua", modes = { list = "objects" } },
  lua_objects_incremental = { label = "Lua alone, the same, a host's Lua state (incremental collector)",
    program = "lua5.4 bench/mcpclient_client.lua --gc incremental", modes = { list = "objects" } },
  floor = { label = "floor (libcurl loop)", program = "bench/floor" },
  sdk = { label = "TypeScript SDK client v1", program = "node bench/sdk_client.mjs" },
  -- v1 holding every page's tools until the listing ends, as list_tools does (list scenario only)
  sdk_whole = { label = "TypeScript SDK client v1, whole catalogue held",
    program = "node bench/sdk_client.mjs --walk whole" },
  -- Version negotiation as mcpclient's default: the modern era where the server offers it.
  sdk2 = { label = "TypeScript SDK client v2", program = "node bench/sdk2_client.mjs --negotiation auto" },
}
for name in pairs(wanted) do
  if not CLIENTS[name] then error("BENCH_CLIENTS: no client " .. name) end
end
-- The official SDK clients, and the package each comes from.
local SDKS = { "sdk", "sdk2" }
local SDK_PACKAGES = { sdk = "@modelcontextprotocol/sdk", sdk2 = "@modelcontextprotocol/client" }

-- A client's one-line JSON report (flat: numbers and strings) as a table.
local function parse_report(line)
  local t = {}
  for key, value in line:gmatch('"([%w_]+)":("?[^,"}]*"?)') do
    if value:sub(1, 1) == '"' then t[key] = value:sub(2, -2) else t[key] = tonumber(value) end
  end
  return t
end

local failures = {}

-- Run one client process; returns its report (plus wall_total_s, the process's whole life) or nil.
local function run_client(client, mode, server, args, cpu)
  if cpu == nil then cpu = config.client_cpu end
  local modes = CLIENTS[client].modes
  local cmd = pinned(cpu) .. CLIENTS[client].program .. " --url " .. quote(server.url) .. " --mode "
    .. (modes and modes[mode] or mode) .. " " .. args
  local errfile = os.tmpname()
  local t0 = core.now()
  local pipe = assert(io.popen(cmd .. " 2>" .. quote(errfile)))
  local out = pipe:read("a") or ""
  local ok = pipe:close()
  local total = core.now() - t0
  local err = read_all(errfile)
  os.remove(errfile)
  local line = out:match("(%b{})")
  local report = line and parse_report(line)
  if not ok or not report then
    local why = (err:match("[^\n]+") or "no output"):sub(1, 200)
    failures[#failures + 1] = string.format("%s %s on %s: %s", client, mode, server.name, why)
    say("  FAILED %s %s on %s: %s", client, mode, server.name, why)
    return nil
  end
  report.wall_total_s = total
  -- What a listing took over what the process held before it (list mode reports both).
  if report.rss_before_kb and report.peak_rss_kb then
    report.rss_growth_kb = report.peak_rss_kb - report.rss_before_kb
  end
  return report
end

-- GET /stats of an echo server, decoded.
local function stats(server)
  local text = shell("bench/floor --get " .. quote(server.stats_url))
  local decoded = core.json.decode(text)
  if type(decoded) ~= "table" then error("could not read " .. server.stats_url .. ": " .. text) end
  return decoded
end

---------------------------------------------------------------------------
-- Statistics
---------------------------------------------------------------------------

local results = {}  -- results[scenario][server][client] = { report, ... }

local function record(scenario, server, client, report)
  results[scenario] = results[scenario] or {}
  results[scenario][server] = results[scenario][server] or {}
  local list = results[scenario][server][client] or {}
  results[scenario][server][client] = list
  if report then list[#list + 1] = report end
end

-- The reports of one client on one server in one scenario ({} when none).
local function runs_of(scenario, server, client)
  return ((results[scenario] or {})[server] or {})[client] or {}
end

local function values(scenario, server, client, field)
  local list = runs_of(scenario, server, client)
  local v = {}
  for _, r in ipairs(list) do
    if type(r[field]) == "number" then v[#v + 1] = r[field] end
  end
  table.sort(v)
  return v
end

local function median(v)
  local n = #v
  if n == 0 then return nil end
  if n % 2 == 1 then return v[(n + 1) // 2] end
  return (v[n // 2] + v[n // 2 + 1]) / 2
end

-- The distinct values of a string field over every report of a client, ", "-joined ("–" if none).
local function distinct(client, field)
  local seen, list = {}, {}
  for _, by_server in pairs(results) do
    for _, by_client in pairs(by_server) do
      for _, r in ipairs(by_client[client] or {}) do
        local v = r[field]
        if type(v) == "string" and not seen[v] then
          seen[v] = true
          list[#list + 1] = v
        end
      end
    end
  end
  table.sort(list)
  return #list > 0 and table.concat(list, ", ") or "–"
end

local function eras(client) return distinct(client, "era") end

local function stat(scenario, server, client, field)
  local v = values(scenario, server, client, field)
  return median(v), v[1], v[#v], #v
end

-- Every cancel latency of every run, pooled (a run's 50 samples make its p99 its maximum).
local function pooled(scenario, server, client)
  local list = runs_of(scenario, server, client)
  local all = {}
  for _, r in ipairs(list) do
    for v in tostring(r.samples or ""):gmatch("[^;]+") do all[#all + 1] = tonumber(v) end
  end
  table.sort(all)
  local function q(p)
    if #all == 0 then return nil end
    return all[math.max(1, math.min(#all, math.ceil(p * #all)))]
  end
  return { n = #all, p50 = q(0.5), p99 = q(0.99), max = all[#all] }
end

-- Ratios a/b of one field within each run (the clients of a run ran back to back, so a slow
-- spell of the machine hits both): sorted, for a median with min–max.
local function paired(scenario, server, a, b, field)
  local by_run = {}
  for _, r in ipairs(runs_of(scenario, server, b)) do by_run[r.run or 0] = r[field] end
  local v = {}
  for _, r in ipairs(runs_of(scenario, server, a)) do
    local other = by_run[r.run or 0]
    if type(r[field]) == "number" and type(other) == "number" and other ~= 0 then v[#v + 1] = r[field] / other end
  end
  table.sort(v)
  return v
end

local function num(x, digits)
  if x == nil then return "–" end
  if digits then return string.format("%." .. digits .. "f", x) end
  if x >= 1000 then return string.format("%.0f", x) end
  if x >= 100 then return string.format("%.0f", x) end
  if x >= 10 then return string.format("%.1f", x) end
  if x >= 1 then return string.format("%.2f", x) end
  return string.format("%.3f", x)
end

-- "median (min–max)" of one field, scaled.
local function cell(scenario, server, client, field, scale)
  local m, lo, hi, n = stat(scenario, server, client, field)
  if not m then return #runs_of(scenario, server, client) > 0 and "–" or "failed" end
  scale = scale or 1
  if n == 1 then return num(m * scale) end
  return string.format("%s (%s–%s)", num(m * scale), num(lo * scale), num(hi * scale))
end

local function ratio(a, b)
  if not a or not b or b == 0 then return nil end
  return a / b
end

---------------------------------------------------------------------------
-- Scenarios
---------------------------------------------------------------------------

-- The clients of a list that BENCH_CLIENTS asks for, in the list's order.
local function chosen(list)
  local kept = {}
  for _, name in ipairs(list) do
    if wanted[name] then kept[#kept + 1] = name end
  end
  return kept
end

local CLIENT_ORDER = chosen { "mcpclient", "floor", "sdk", "sdk2" }
local WARM_ORDER = chosen { "mcpclient", "mcpclient_leg", "floor", "sdk", "sdk2" }
local LIST_ORDER = chosen { "mcpclient_plain", "mcpclient_plain_incremental", "mcpclient_default",
  "mcpclient_default_pages", "mcpclient_default_read",
  "mcpclient", "mcpclient_whole", "lua_objects", "lua_objects_incremental", "floor", "sdk", "sdk_whole", "sdk2" }

local function warm_args()
  return string.format("--calls %d --warmup %d", config.calls, config.warmup)
end

-- Interleaved: for each run, every client once (A B C A B C …).
local function interleave(scenario, server_names, clients, mode, args_for, cpu)
  for _, sname in ipairs(server_names) do
    local server = servers[sname]
    if server then
      for run = 1, config.runs do
        for _, client in ipairs(clients) do
          local report = run_client(client, mode, server, args_for(client, run), cpu)
          if report then report.run = run end
          record(scenario, sname, client, report)
          if report then
            say("  %-7s %-12s %-9s run %d: %8.1f ops/s  p50 %7.3f ms  p99 %7.3f ms  cpu %9.1f us/op  rss %6.1f MiB%s",
              scenario, sname, client, run, report.ops_per_s, report.p50_ms, report.p99_ms, report.cpu_per_op_us,
              report.peak_rss_kb / 1024, report.rss_before_kb
                and string.format(" (%.1f MiB before)", report.rss_before_kb / 1024) or "")
          end
        end
      end
    end
  end
end

local roundtrips = {}  -- roundtrips[server][client] = { per_call = ..., ... }

local function count_roundtrips(server_names)
  for _, sname in ipairs(server_names) do
    local server = servers[sname]
    roundtrips[sname] = {}
    for _, client in ipairs(CLIENT_ORDER) do
      -- A run of 1 call and a run of 1 + N calls: the difference is N warm calls, the
      -- handshake and the close cancel out.
      local deltas = {}
      for i, calls in ipairs { 1, 1 + config.calls } do
        local before = stats(server)
        local report = run_client(client, "warm", server, string.format("--calls %d --warmup 0", calls))
        local after = stats(server)
        if not report then
          deltas = nil
          break
        end
        local methods_before, methods_after = before.methods or {}, after.methods or {}
        deltas[i] = {
          requests = after.requests - before.requests,
          post = after.http.POST - before.http.POST,
          get = after.http.GET - before.http.GET,
          delete = after.http.DELETE - before.http.DELETE,
          connections = after.connections - before.connections,
          calls = (methods_after["tools/call"] or 0) - (methods_before["tools/call"] or 0),
        }
      end
      if deltas then
        local n = deltas[2].calls - deltas[1].calls
        local d = {}
        for k in pairs(deltas[1]) do d[k] = deltas[2][k] - deltas[1][k] end
        roundtrips[sname][client] = {
          calls = n,
          per_call = n > 0 and d.requests / n or nil,
          post = d.post, get = d.get, delete = d.delete, connections = d.connections,
          handshake = deltas[1].requests - deltas[1].calls,
        }
        say("  roundtrips %-9s %-9s %d warm calls -> %d HTTP requests (%d POST, %d GET, %d DELETE), %d connections",
          sname, client, n, d.requests, d.post, d.get, d.delete, d.connections)
      end
    end
  end
end

local startup = {}  -- startup[client] = sorted wall seconds

local function measure_startup(server)
  for _, client in ipairs(CLIENT_ORDER) do startup[client] = {} end
  for _ = 1, config.runs do
    for _, client in ipairs(CLIENT_ORDER) do
      local report = run_client(client, "cold", server, "--calls 1 --warmup 0")
      if report then
        local list = startup[client]
        list[#list + 1] = report.wall_total_s
        list.cpu = list.cpu or {}
        list.cpu[#list.cpu + 1] = report.startup_cpu_ms
      end
    end
  end
  for _, client in ipairs(CLIENT_ORDER) do table.sort(startup[client]) end
end

---------------------------------------------------------------------------
-- The report
---------------------------------------------------------------------------

-- The version of an installed peer package ("not installed" when it is missing).
local function package_version(name)
  local text = read_all(peers.node_modules .. "/" .. name .. "/package.json")
  return text:match('"version"%s*:%s*"([^"]+)"') or "not installed"
end

local function machine()
  local cpuinfo = read_all("/proc/cpuinfo")
  local meminfo = read_all("/proc/meminfo")
  return {
    nproc = shell("nproc"),
    cpu = cpuinfo:match("model name%s*:%s*([^\n]+)") or "unknown",
    mhz = cpuinfo:match("cpu MHz%s*:%s*([^\n]+)"),
    mem = meminfo:match("MemTotal:%s*(%d+)"),
    kernel = shell("uname -sr"),
    os = (read_all("/etc/os-release"):match('PRETTY_NAME="([^"]+)"')) or "unknown",
    lua = shell("lua5.4 -v"):match("^Lua [%d.]+") or "Lua 5.4",
    node = shell("node --version"),
    curl = shell("curl-config --version"),
    commit = shell("git rev-parse --short HEAD"),
    sdk_version = package_version(SDK_PACKAGES.sdk),
    sdk2_version = package_version(SDK_PACKAGES.sdk2),
    -- Changes outside bench/ only: the library measured is the commit's unless this says otherwise.
    dirty = shell("git status --porcelain --untracked-files=no -- . ':!bench' | wc -l"),
  }
end

local function command_line()
  local parts = {}
  for _, name in ipairs { "BENCH_RUNS", "BENCH_CALLS", "BENCH_WARMUP", "BENCH_COLD", "BENCH_LISTS",
    "BENCH_CANCELS", "BENCH_TOOLS", "BENCH_PAGE", "BENCH_ONLY", "BENCH_CLIENTS", "BENCH_SDK_SERVERS", "BENCH_OUT",
    "BENCH_PIN" } do
    local v = os.getenv(name)
    if v and v ~= "" then parts[#parts + 1] = name .. "=" .. v end
  end
  parts[#parts + 1] = "lua5.4 bench/run.lua"
  return table.concat(parts, " ")
end

local function verdict(value, ok)
  if value == nil then return "not measured" end
  return ok and "**met**" or "**missed**"
end

-- CPU seconds the whole machine spent busy, and what this run (this process and every child it
-- waited for: the clients, the servers) spent: the difference is other jobs sharing the machine.
local TICK = tonumber(shell("getconf CLK_TCK")) or 100

-- The machine's load averages over 1, 5 and 15 minutes, as `uptime` shows them.
local function load_average()
  return ((read_all("/proc/loadavg"):match("^(%S+ %S+ %S+)") or "?"):gsub(" ", ", "))
end

local function machine_busy()
  local f = {}
  for v in read_all("/proc/stat"):match("^cpu%s+([^\n]+)"):gmatch("%d+") do f[#f + 1] = tonumber(v) end
  -- user nice system idle iowait irq softirq steal
  return ((f[1] or 0) + (f[2] or 0) + (f[3] or 0) + (f[6] or 0) + (f[7] or 0) + (f[8] or 0)) / TICK
end

local function own_busy()
  local text = read_all("/proc/self/stat"):match("%) (.*)$") or ""
  local f = {}
  for v in text:gmatch("%S+") do f[#f + 1] = v end
  -- after the command: state(1) ... utime(12) stime(13) cutime(14) cstime(15)
  return ((tonumber(f[12]) or 0) + (tonumber(f[13]) or 0) + (tonumber(f[14]) or 0) + (tonumber(f[15]) or 0)) / TICK
end

---------------------------------------------------------------------------
-- Targets
---------------------------------------------------------------------------

local SHORT = { sdk = "v1", sdk2 = "v2", sdk_whole = "v1 held whole" }

-- The SDK clients' medians of one field, lowest first: the first is the faster (or leaner) one,
-- the one a "faster than the SDK" target must beat.
local function sdk_medians(scenario, server, field, sdks)
  local list = {}
  for _, name in ipairs(sdks or SDKS) do
    local v = median(values(scenario, server, name, field))
    if v then list[#list + 1] = { name = name, v = v } end
  end
  table.sort(list, function(a, b) return a.v < b.v end)
  return list
end

-- "m unit vs s unit (v1; v2: s2 unit)": mcpclient against the first SDK client of the list, the
-- other one's figure in the parentheses.
local function against_first(m, list, scale, unit)
  if not m or #list == 0 then return "–" end
  local parts = { SHORT[list[1].name] }
  for i = 2, #list do
    parts[#parts + 1] = string.format("%s: %s %s", SHORT[list[i].name], num(list[i].v * scale), unit)
  end
  return string.format("%s %s vs %s %s (%s)", num(m * scale), unit, num(list[1].v * scale), unit,
    table.concat(parts, "; "))
end

-- "m unit vs v1 s unit = 1/x, v2 s2 unit = 1/y", and the largest ratio m/s (the one to judge).
local function against_each(m, list, scale, unit)
  if not m or #list == 0 then return "–", nil end
  local parts, worst = {}, 0
  for _, e in ipairs(list) do
    local r = m / e.v
    worst = math.max(worst, r)
    parts[#parts + 1] = string.format("%s %s %s = 1/%.1f", SHORT[e.name], num(e.v * scale), unit, 1 / r)
  end
  return string.format("%s %s vs %s", num(m * scale), unit, table.concat(parts, ", ")), worst
end

-- Client CPU of mcpclient against the leaner SDK client's: met at 1/10 or less.
local function cpu_row(w, label, scenario, field, scale, unit)
  local m = median(values(scenario, "fast-json", "mcpclient", field))
  local list = sdk_medians(scenario, "fast-json", field)
  local r = list[1] and ratio(m, list[1].v)
  if scenario == "warm-same" and not r then return end
  w("| %s | %s%s | %s |", label, against_first(m, list, scale, unit), r and string.format(" = 1/%.1f", 1 / r) or "",
    verdict(r, r and r <= 0.1))
end

-- Peak RSS of one mcpclient client (default: mcpclient) against each SDK client's: met at 1/10
-- of every one. `sdks`: the SDK clients to hold it against (default: v1 and v2).
local function rss_row(w, label, scenario, client, sdks)
  local m = median(values(scenario, "fast-json", client or "mcpclient", "peak_rss_kb"))
  local text, worst = against_each(m, sdk_medians(scenario, "fast-json", "peak_rss_kb", sdks), 1 / 1024, "MiB")
  w("| %s | %s | %s |", label, text, verdict(worst, worst and worst <= 0.1))
end

-- A listing figure (lower is better) of one mcpclient client against the faster SDK client's: met at 5×
-- or more.
local function speed_row(w, label, field, scale, unit, client)
  local m = median(values("list", "fast-json", client or "mcpclient", field))
  local list = sdk_medians("list", "fast-json", field)
  local r = list[1] and ratio(list[1].v, m)
  w("| %s | %s%s | %s |", label, against_first(m, list, scale, unit), r and string.format(" = %.2f×", r) or "",
    verdict(r, r and r >= 5))
end

local function per_run(v)
  if #v == 0 then return "" end
  return string.format("; per run: median %.0f %% (%.0f–%.0f %%)", median(v) * 100, v[1] * 100, v[#v] * 100)
end

-- Warm calls/s of mcpclient against the floor's: met at 90 % or more.
local function floor_row(w, label, scenario)
  local m = median(values(scenario, "fast-json", "mcpclient", "ops_per_s"))
  local f = median(values(scenario, "fast-json", "floor", "ops_per_s"))
  local r = ratio(m, f)
  if scenario == "warm-same" and not r then return end
  local leg = ratio(median(values(scenario, "fast-json", "mcpclient_leg", "ops_per_s")), f)
  w("| %s | %s vs %s calls/s = %s%s%s | %s |", label, num(m), num(f), r and string.format("%.0f %%", r * 100) or "–",
    per_run(paired(scenario, "fast-json", "mcpclient", "floor", "ops_per_s")),
    leg and string.format("; the leg alone: %.0f %%", leg * 100) or "", verdict(r, r and r >= 0.9))
end

local function roundtrip_row(w)
  local rt_j = roundtrips["fast-json"] and roundtrips["fast-json"].mcpclient
  local rt_s = roundtrips["fast-sse"] and roundtrips["fast-sse"].mcpclient
  w("| one HTTP round trip per warm call (counted at the server) | %s (fast-json), %s (fast-sse) | %s |",
    rt_j and rt_j.per_call and string.format("%.3f", rt_j.per_call) or "–",
    rt_s and rt_s.per_call and string.format("%.3f", rt_s.per_call) or "–",
    verdict(rt_j and rt_j.per_call, rt_j and rt_j.per_call and math.abs(rt_j.per_call - 1) < 0.005
      and (not rt_s or math.abs((rt_s.per_call or 0) - 1) < 0.005)))
end

local function cancel_row(w)
  local cancel_j = pooled("cancel", "fast-json", "mcpclient")
  local cancel_s = pooled("cancel", "fast-sse", "mcpclient")
  local worst_cancel = math.max(cancel_j.p99 or 0, cancel_s.p99 or 0)
  w("| cancel p99 ≤ 50 ms (flag → return; all runs pooled) | fast-json: p50 %s, p99 %s, max %s ms (%d cancels);"
    .. " fast-sse: p50 %s, p99 %s, max %s ms (%d) | %s |",
    num(cancel_j.p50), num(cancel_j.p99), num(cancel_j.max), cancel_j.n, num(cancel_s.p50), num(cancel_s.p99),
    num(cancel_s.max), cancel_s.n, verdict(cancel_j.p99, cancel_j.p99 and worst_cancel <= 50))
end

-- The warm-call rows of the targets table.
local function warm_targets(w)
  cpu_row(w, "client CPU per warm call ≤ 1/10 of the leaner SDK client's (fast-json)", "warm", "cpu_per_op_us", 1, "µs")
  cpu_row(w, "… the same, clients on the server's CPU", "warm-same", "cpu_per_op_us", 1, "µs")
  rss_row(w, "peak RSS ≤ 1/10 of each SDK client's (warm, fast-json)", "warm")
  floor_row(w, "warm calls/s ≥ 90 % of the floor's (fast-json)", "warm")
  floor_row(w, "… the same, clients on the server's CPU", "warm-same")
  roundtrip_row(w)
end

-- Not a target: what Lua itself pays to make and hold the objects plain list_tools() hands over,
-- in each collector mode, against the CPU a 5× target leaves (the faster SDK client's / 5).
local function objects_row(w)
  local budget = sdk_medians("list", "fast-json", "cpu_per_op_us")[1]
  local shown = {}
  for _, c in ipairs { { "lua_objects", "interpreter" }, { "lua_objects_incremental", "a host's Lua state" } } do
    local v = median(values("list", "fast-json", c[1], "cpu_per_op_us"))
    if v then
      shown[#shown + 1] = string.format("%s %s ms%s", c[2], num(v / 1000),
        budget and string.format(" (%.0f %% of it)", v / (budget.v / 5) * 100) or "")
    end
  end
  if #shown == 0 then return end
  w("| the floor under those targets (not a target): the same objects made and held by Lua alone, no transport,"
    .. " no JSON, against the CPU a 5× target leaves%s | %s | – |",
    budget and string.format(" (%s ms)", num(budget.v / 5000)) or "", table.concat(shown, "; "))
end

-- The listing rows of the targets table.
local function listing_targets(w)
  speed_row(w, string.format("the default `conn:list_tools()` of %d tools, each schema normalised: ≥ 5× less"
    .. " client CPU than the faster SDK client's listing", config.tools), "cpu_per_op_us", 1 / 1000, "ms",
    "mcpclient_default")
  speed_row(w, "… the same in p50 wall", "p50_ms", 1, "ms", "mcpclient_default")
  rss_row(w, "… its peak RSS ≤ 1/10 of each SDK client's (v1 drops each page, v2 holds the listing)", "list",
    "mcpclient_default")
  rss_row(w, "… its peak RSS ≤ 1/10 of each SDK client's holding the listing whole", "list", "mcpclient_default",
    { "sdk_whole", "sdk2" })
  speed_row(w, "the default `conn:each_tool_page(fn)`, the same: ≥ 5× less client CPU", "cpu_per_op_us", 1 / 1000,
    "ms", "mcpclient_default_pages")
  rss_row(w, "… its peak RSS ≤ 1/10 of each SDK client's", "list", "mcpclient_default_pages")
  speed_row(w, string.format("listing + normalising %d tools, `schemas = \"kept\"` page by page, ≥ 5× faster than"
    .. " the faster SDK client's listing (p50 wall)", config.tools), "p50_ms", 1, "ms")
  speed_row(w, "… the same in client CPU per listing", "cpu_per_op_us", 1 / 1000, "ms")
  speed_row(w, "… the same in client CPU, the catalogue held whole (`list_tools{ schemas = \"kept\" }`)",
    "cpu_per_op_us", 1 / 1000, "ms", "mcpclient_whole")
  rss_row(w, "… its peak RSS while listing (page by page, kept) ≤ 1/10 of each SDK client's", "list")
end

-- The targets table (the listing's rows alone with BENCH_ONLY=listing). Against the SDK clients,
-- speed and CPU are compared with the faster (leaner) of v1 and v2 and memory with each of them,
-- so a target met is met against both.
local function write_targets(w)
  w("## Targets")
  w("")
  w("| target | measured | verdict |")
  w("| --- | --- | --- |")
  if not config.listing_only then warm_targets(w) end
  speed_row(w, string.format("plain `conn:list_tools()` of %d tools (no option, no schema read): ≥ 5× less"
    .. " client CPU than the faster SDK client's listing", config.tools), "cpu_per_op_us", 1 / 1000, "ms",
    "mcpclient_plain")
  rss_row(w, "… its peak RSS ≤ 1/10 of each SDK client's", "list", "mcpclient_plain")
  rss_row(w, "… its peak RSS ≤ 1/10 of each SDK client's holding the listing whole", "list", "mcpclient_plain",
    { "sdk_whole", "sdk2" })
  speed_row(w, "… the same listing in a Lua state a host program made (its collector incremental, not the"
    .. " interpreter's generational): ≥ 5× less client CPU", "cpu_per_op_us", 1 / 1000, "ms",
    "mcpclient_plain_incremental")
  objects_row(w)
  listing_targets(w)
  if not config.listing_only then cancel_row(w) end
  w("")
end

-- The columns of a figure table. A listing shows its CPU in ms and the memory it takes: the RSS
-- right before the first listing, the peak after the last, and the growth between them per run.
local function columns(scenario, op_label)
  local cols = {
    { head = op_label .. "/s", field = "ops_per_s" },
    { head = "p50 ms", field = "p50_ms" },
    { head = "p99 ms", field = "p99_ms" },
  }
  if scenario == "list" then
    cols[#cols + 1] = { head = "CPU ms per " .. op_label, field = "cpu_per_op_us", scale = 1 / 1000 }
    cols[#cols + 1] = { head = "RSS before MiB", field = "rss_before_kb", scale = 1 / 1024 }
    cols[#cols + 1] = { head = "peak RSS MiB", field = "peak_rss_kb", scale = 1 / 1024 }
    cols[#cols + 1] = { head = "growth MiB", field = "rss_growth_kb", scale = 1 / 1024 }
  else
    cols[#cols + 1] = { head = "CPU µs per " .. op_label, field = "cpu_per_op_us" }
    cols[#cols + 1] = { head = "peak RSS MiB", field = "peak_rss_kb", scale = 1 / 1024 }
  end
  return cols
end

-- The ratios under a figure table: mcpclient's CPU and peak RSS against each SDK client's, its
-- rate against the floor's.
local function ratio_bits(scenario, sname, op_label)
  local bits = {}
  local m_cpu = median(values(scenario, sname, "mcpclient", "cpu_per_op_us"))
  local m_rss = median(values(scenario, sname, "mcpclient", "peak_rss_kb"))
  for _, sdk in ipairs(SDKS) do
    local s_cpu = median(values(scenario, sname, sdk, "cpu_per_op_us"))
    if ratio(m_cpu, s_cpu) then
      bits[#bits + 1] = string.format("CPU per %s mcpclient/SDK %s = %.3f (1/%.1f)", op_label, SHORT[sdk],
        m_cpu / s_cpu, s_cpu / m_cpu)
    end
  end
  for _, sdk in ipairs(SDKS) do
    local s_rss = median(values(scenario, sname, sdk, "peak_rss_kb"))
    if ratio(m_rss, s_rss) then
      bits[#bits + 1] = string.format("peak RSS mcpclient/SDK %s = %.3f (1/%.1f)", SHORT[sdk], m_rss / s_rss,
        s_rss / m_rss)
    end
  end
  local m_ops = median(values(scenario, sname, "mcpclient", "ops_per_s"))
  local f_ops = median(values(scenario, sname, "floor", "ops_per_s"))
  if ratio(m_ops, f_ops) then
    bits[#bits + 1] = string.format("%s/s mcpclient/floor = %.0f %%", op_label, m_ops / f_ops * 100)
  end
  local l_ops = median(values(scenario, sname, "mcpclient_leg", "ops_per_s"))
  if ratio(l_ops, f_ops) then
    bits[#bits + 1] = string.format("%s/s leg alone/floor = %.0f %%", op_label, l_ops / f_ops * 100)
  end
  return bits
end

-- What each client does in one listing, and which schema form mcpclient was measured with.
local function list_note()
  return "One op = every page of tools/list on a warm connection, after one untimed listing, every inputSchema"
    .. " passed through the normaliser an import uses (`core.normalise_schema`, or the kept form's own judging),"
    .. " except in **mcpclient, plain `list_tools()`, nothing read**: the call with no option and nothing done"
    .. " with its schemas (each stays the text the decoder wrote), the call the plain target names."
    .. " **mcpclient, default `list_tools()`** is the call a user writes first, with no option: each schema is"
    .. " kept as the JSON text the decoder wrote and built as a table on its first read; the normaliser judges"
    .. " an unread one from its text, so nothing here builds it. **mcpclient, default `each_tool_page(fn)`** is"
    .. " the same page by page. **…, every schema read** reads `tool.inputSchema.properties` of every tool"
    .. " first, so every schema is built: what the default costs a caller who uses every schema."
    .. " **mcpclient** walks the catalogue page by page"
    .. " (`conn:each_tool_page`), judging each page's tools and dropping them, as the SDK client v1's benchmark"
    .. " handles its pages; **mcpclient, whole catalogue held** collects it first (`conn:list_tools`), as the"
    .. " SDK client v2's walk does. Schemas: **" .. distinct("mcpclient", "schemas") .. "** (kept:"
    .. " `schemas = \"kept\"`, what an import asks for: each schema written as JSON text in the pass that reads"
    .. " the page, never built as Lua tables, and judged by the normaliser in that same pass; text: the text"
    .. " first, then `core.normalise_schema_text`; tables: decoded tables through `core.normalise_schema`)."
    .. " The SDK client v1 walks `listTools({ cursor })` page by page and validates each page with its own"
    .. " schemas, dropping each page's tools (**v1, whole catalogue held**: collecting them into one array,"
    .. " held until the listing ends, as `list_tools` holds them). The SDK client v2 (walk: "
    .. distinct("sdk2", "walk") .. ") calls `listTools()` without a"
    .. " cursor, its own walk of every page, which validates each page and keeps the whole listing in its"
    .. " response cache (`cacheMode: 'refresh'`, so every listing goes to the server). The floor only follows"
    .. " `nextCursor` by a byte search. **Lua alone** lists the catalogue once, untimed, and then, for every"
    .. " op, makes again the objects plain `list_tools()` hands over (each tool's table, its strings and small"
    .. " tables, an empty table for each schema and the schema's text beside it) from bytes already in memory,"
    .. " holding them until the next op: no transport and no JSON, only what making and holding a listing"
    .. " costs a Lua state, its collector included (its RSS includes the untimed listing's bytes, kept to"
    .. " make the objects from).\n\n"
    .. "Memory: *RSS before* is each process's resident size right before its first listing, with the library"
    .. " loaded and the connection open (VmRSS; `process.memoryUsage().rss`; the floor does not report it);"
    .. " *peak RSS* is its high-water mark after the last listing (VmHWM; `resourceUsage().maxRSS`); *growth*"
    .. " is peak minus before within each run: what listing the catalogue took beyond what the process already"
    .. " held. The peak-RSS targets compare the peaks; the growth shows how much of a peak the listing itself is."
end

local function build_report(m, started_at, elapsed)
  local out = {}
  local function w(...) out[#out + 1] = string.format(...) end
  local server_labels = {}
  for name, s in pairs(servers) do server_labels[name] = s.label end

  w("# Benchmark results")
  w("")
  w("Written by `bench/run.lua` (`make bench`). Benchmarks, not tests:")
  w("the targets below are reported, never asserted. Figures are medians over the runs, with")
  w("min–max in parentheses; the clients ran interleaved (A B C D A B C D …) against the same server.")
  w("")
  w("- **Date:** %s (took %.0f s)", started_at, elapsed)
  local others = (machine_busy() - config.busy_before) - (own_busy() - config.own_before)
  local share = others / (elapsed * (tonumber(m.nproc) or 1))
  w("- **Other jobs on the machine** used %.0f CPU-seconds during the run (%.0f %% of its CPUs)%s", math.max(0, others),
    math.max(0, share) * 100, share > 0.05 and ": they competed with the benchmark, expect more noise" or "")
  w("- **Load average** (1, 5, 15 min) at the start: %s; at the end: %s", config.load_before, load_average())
  w("- **Command:** `%s` (from the repository root; `make %s` runs the same after `make peers all`)",
    command_line(), config.listing_only and "bench-listing" or "bench")
  w("- **Machine:** %s CPUs, %s%s, %s MiB RAM; %s; %s", m.nproc, m.cpu, m.mhz and (" @ " .. m.mhz .. " MHz") or "",
    m.mem and math.floor(tonumber(m.mem) / 1024) or "?", m.os, m.kernel)
  w("- **Software:** %s; Node %s; %s; %s %s (the SDK client v1); %s %s (the SDK client v2); mcpclient %s at %s%s",
    m.lua, m.node, m.curl, SDK_PACKAGES.sdk, m.sdk_version, SDK_PACKAGES.sdk2, m.sdk2_version, core.version,
    m.commit, m.dirty ~= "0" and " (with uncommitted changes outside bench/)" or "")
  if config.listing_only then
    w("- **Settings:** %d runs; %d listings of a %d-tool catalogue (%d per page) per run after 1 untimed",
      config.runs, config.lists, config.tools, config.page)
  else
    w("- **Settings:** %d runs; %d warm calls per run after %d untimed; %d cold calls per run; %d listings of a"
      .. " %d-tool catalogue (%d per page) per run after 1 untimed; %d cancels per run",
      config.runs, config.calls, config.warmup, config.cold, config.lists, config.tools, config.page, config.cancels)
  end
  w("- **Clients:** mcpclient = `bench/mcpclient_client.lua` (Lua 5.4 + the C core);"
    .. " mcpclient's leg alone = the same script's `--mode leg` (the floor's loop driven from Lua through"
    .. " one `core.http_leg`: the handshake, then one fixed tools/call body; nothing encoded or decoded and"
    .. " none of the library's Lua, so it shows what the leg costs over the floor);"
    .. " floor = `bench/floor` (one libcurl easy handle posting the same tools/call body, nothing parsed);"
    .. " TypeScript SDK client v1 = `bench/sdk_client.mjs` (Client + StreamableHTTPClientTransport);"
    .. " TypeScript SDK client v2 = `bench/sdk2_client.mjs` (the same classes of the v2 packages, with"
    .. " versionNegotiation { mode: 'auto' } as mcpclient's default protocol \"auto\"; era negotiated: %s).",
    eras("sdk2"))
  w("- **Servers:** fast-json = `bench/echo_server --tools %d --page-size %d` (C, epoll, JSON answers,"
    .. " no session); fast-sse = `bench/echo_server --session --sse`; sdk-json / sdk-sse ="
    .. " `spec/peers/sdk-server.mjs --mode stateless-json / session-sse` (the official SDK's server, Node).",
    config.tools, config.page)
  if config.pin == "split" then
    w("- **Placement:** every server pinned to CPU 0, every client to CPU 1 (`taskset`), except the")
    w("  \"warm, same CPU\" table, where the clients share CPU 0 with the server. On this kind of VM a")
    w("  wake-up across CPUs costs tens of µs, so placement moves every figure; unpinned runs are bimodal.")
  elseif config.pin == "same" then
    w("- **Placement:** servers and clients all pinned to CPU 0 (`taskset`).")
  else
    w("- **Placement:** not pinned (BENCH_PIN=none): the scheduler placed servers and clients.")
  end
  w("- CPU is the client process's own (user + system) over the timed part only: getrusage (floor),")
  w("  os.clock() (Lua: the process's CPU clock), process.cpuUsage() (Node, every thread). Peak RSS is")
  w("  the process's high-water mark (ru_maxrss, VmHWM, resourceUsage().maxRSS).")
  w("")

  write_targets(w)
  if #failures > 0 then
    w("**Runs that failed** (left out of the medians):")
    w("")
    for _, f in ipairs(failures) do w("- %s", f) end
    w("")
  end

  local function figure_table(scenario, title, note, op_label, server_order, clients)
    if not results[scenario] then return end
    w("## %s", title)
    w("")
    if note then
      w("%s", note)
      w("")
    end
    for _, sname in ipairs(server_order) do
      if results[scenario][sname] then
        w("**%s** (%s)", sname, server_labels[sname] or "")
        w("")
        local cols = columns(scenario, op_label)
        local heads, rule = {}, {}
        for i, c in ipairs(cols) do heads[i], rule[i] = c.head, "---" end
        w("| client | %s |", table.concat(heads, " | "))
        w("| --- | %s |", table.concat(rule, " | "))
        for _, client in ipairs(clients) do
          if results[scenario][sname][client] then
            local cells = {}
            for i, c in ipairs(cols) do cells[i] = cell(scenario, sname, client, c.field, c.scale) end
            w("| %s | %s |", CLIENTS[client].label, table.concat(cells, " | "))
          end
        end
        local bits = ratio_bits(scenario, sname, op_label)
        if #bits > 0 then
          w("")
          w("Ratios: %s.", table.concat(bits, "; "))
        end
        if scenario == "cancel" then
          w("")
          local parts = {}
          for _, client in ipairs(clients) do
            local p = pooled(scenario, sname, client)
            if p.n > 0 then
              parts[#parts + 1] = string.format("%s p50 %s ms, p99 %s ms, max %s ms", CLIENTS[client].label,
                num(p.p50), num(p.p99), num(p.max))
            end
          end
          w("All %s runs pooled (%d cancels per client): %s.", sname, config.runs * config.cancels,
            table.concat(parts, "; "))
        end
        w("")
      end
    end
  end

  local all_servers = { "fast-json", "fast-sse", "sdk-json", "sdk-sse" }
  figure_table("warm", "Warm tools/call (one connection, sequential)",
    string.format("%d timed `echo` calls per run after %d untimed. Against the SDK's Node server the server is"
      .. " the bottleneck (a bare keep-alive loop outruns it): compare CPU per call and RSS there, not calls/s.",
      config.calls, config.warmup),
    "call", all_servers, WARM_ORDER)
  figure_table("warm-same", "Warm tools/call, clients on the server's CPU",
    "The same as above against fast-json, with each client pinned to the CPU the server runs on: no"
      .. " wake-up crosses CPUs, so this shows the clients' own cost with the least interference from the VM.",
    "call", { "fast-json" }, WARM_ORDER)
  figure_table("cold", "Cold call (new connection, handshake, one call, close — per iteration)",
    string.format("%d per run, inside one process: connect (the clients that probe for the 2026-07-28 era,"
      .. " mcpclient and the SDK client v2, send server/discover first), initialize + initialized, tools/call,"
      .. " then DELETE when the server gave a session. (Node's fetch keeps a process-wide connection pool, so the SDK"
      .. " client's \"new connection\" may reuse a TCP connection; mcpclient and the floor open a new one.)",
      config.cold), "call", all_servers, CLIENT_ORDER)
  figure_table("list", string.format("Listing the %d-tool catalogue (%d pages)", config.tools,
      math.ceil(config.tools / math.max(1, config.page))),
    list_note(), "listing", { "fast-json" }, LIST_ORDER)
  figure_table("cancel", "Cancel latency",
    string.format("%d calls of `slow` (2 s) per run, each cancelled at a random point 10–60 ms after it"
      .. " started. mcpclient: the cancel function turns true once a timer expires; the latency is that"
      .. " expiry to call_tool's return (it includes the poll period and the notifications/cancelled POST)."
      .. " SDK: AbortController.abort() from a timer to the callTool promise settling (the SDK rejects at"
      .. " once and leaves the aborted POST open until the server answers). In the table p50/p99 are per run (under"
      .. " 100 samples, a run's p99 is its maximum); the pooled line below is over every run. The ops/s column"
      .. " is meaningless here.", config.cancels), "cancel", { "fast-json", "fast-sse" },
    chosen { "mcpclient", "sdk" })

  if next(startup) then
    w("## Process start to first answer")
    w("")
    w("A new process that loads the library, connects, calls `echo` once and closes (fast-json), timed"
      .. " from outside (%d runs). Startup CPU is the process's CPU once the library is loaded.", config.runs)
    w("")
    w("| client | wall ms | startup CPU ms |")
    w("| --- | --- | --- |")
    for _, client in ipairs(CLIENT_ORDER) do
      local v = startup[client]
      if v and #v > 0 then
        local cpu = v.cpu or {}
        table.sort(cpu)
        w("| %s | %s (%s–%s) | %s |", CLIENTS[client].label, num(median(v) * 1000), num(v[1] * 1000),
          num(v[#v] * 1000), #cpu > 0 and string.format("%s (%s–%s)", num(median(cpu)), num(cpu[1]), num(cpu[#cpu]))
          or "–")
      end
    end
    w("")
  end

  if next(roundtrips) then
    w("## HTTP round trips per warm call (counted at the server)")
    w("")
    w("The echo server counts every HTTP request and TCP connection; each client ran once with 1 call and once"
      .. " with 1 + %d calls, and the difference is what %d warm calls cost (the handshake and the close"
      .. " cancel out).", config.calls, config.calls)
    w("")
    w("| server | client | requests per call | POST | GET | DELETE | new connections | handshake requests |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for _, sname in ipairs { "fast-json", "fast-sse" } do
      for _, client in ipairs(CLIENT_ORDER) do
        local r = roundtrips[sname] and roundtrips[sname][client]
        if r then
          w("| %s | %s | %s | %d | %d | %d | %d | %d |", sname, CLIENTS[client].label,
            r.per_call and string.format("%.3f", r.per_call) or "–", r.post, r.get, r.delete, r.connections,
            r.handshake)
        end
      end
    end
    w("")
  end
  w("Where a target is missed, bench/PROFILE.md (when present) says where the time goes.")
  w("")
  return table.concat(out, "\n")
end

---------------------------------------------------------------------------
-- Main
---------------------------------------------------------------------------

-- The sections bench/modern.lua and bench/stdio.lua write into the same page, between their
-- markers: carried over as they stand, so rewriting the page keeps figures this script does not
-- measure.
local function kept_section(path)
  local text = read_all(path)
  local kept = {}
  for _, name in ipairs { "modern-era", "stdio" } do
    local s = text:find("<!-- " .. name .. ":begin -->", 1, true)
    local _, e = text:find("<!-- " .. name .. ":end -->", s or 1, true)
    if s and e then kept[#kept + 1] = text:sub(s, e) end
  end
  if #kept == 0 then return nil end
  return table.concat(kept, "\n\n")
end

local function main()
  local started_at = os.date("!%Y-%m-%d %H:%M UTC")
  config.busy_before, config.own_before = machine_busy(), own_busy()
  config.load_before = load_average()
  local t0 = core.now()
  say("bench: %s", command_line())
  start_echo("fast-json", "C echo server, JSON answers, no session",
    string.format("--tools %d --page-size %d", config.tools, config.page))
  if not config.listing_only then
    start_echo("fast-sse", "C echo server, session + event-stream answers", "--session --sse")
  end
  local sdk_servers = {}
  if config.sdk_servers then
    peers.require_available()
    start_sdk("sdk-json", "official SDK server, stateless, JSON answers", "sdk-stateless")
    start_sdk("sdk-sse", "official SDK server, session, event-stream answers", "sdk-session")
    sdk_servers = { "sdk-json", "sdk-sse" }
  end
  for _, s in ipairs(started) do say("bench: %s pid %d at %s", s.name, s.pid, s.url) end

  local fast_and_sdk = { "fast-json", "fast-sse", table.unpack(sdk_servers) }
  if only.warm then
    say("bench: warm calls")
    interleave("warm", fast_and_sdk, WARM_ORDER, "warm", warm_args)
    if config.pin == "split" then
      say("bench: warm calls, clients on the server's CPU")
      interleave("warm-same", { "fast-json" }, WARM_ORDER, "warm", warm_args, config.server_cpu)
    end
  end
  if only.roundtrips then
    say("bench: round trips")
    count_roundtrips { "fast-json", "fast-sse" }
  end
  if only.cold then
    say("bench: cold calls")
    local cold_servers = { "fast-json" }
    if config.sdk_servers then cold_servers[2] = "sdk-sse" end
    interleave("cold", cold_servers, CLIENT_ORDER, "cold", function()
      return string.format("--calls %d --warmup 0", config.cold)
    end)
  end
  if only.list then
    say("bench: listing")
    interleave("list", { "fast-json" }, LIST_ORDER, "list", function()
      return string.format("--calls %d --warmup 1", config.lists)
    end)
  end
  if only.cancel then
    say("bench: cancel latency")
    interleave("cancel", { "fast-json", "fast-sse" }, chosen { "mcpclient", "sdk" }, "cancel", function(_, run)
      return string.format("--calls %d --warmup 5 --slow-ms 2000 --cancel-min-ms 10 --cancel-max-ms 60 --seed %d",
        config.cancels, run)
    end)
  end
  if only.startup then
    say("bench: process start to first answer")
    measure_startup(servers["fast-json"])
  end
  local elapsed = core.now() - t0
  stop_all() -- reaped, so their CPU counts as this run's
  local report = build_report(machine(), started_at, elapsed)
  local kept = kept_section(config.out)
  if kept then report = report .. "\n" .. kept .. "\n" end
  local f = assert(io.open(config.out, "w"))
  f:write(report)
  f:close()
  io.write(report)
  say("bench: wrote %s (%.0f s)", config.out, elapsed)
end

local ok, err = xpcall(main, debug.traceback)
stop_all()
for _, s in ipairs(started) do
  if s.final_stats then say("bench: %s final counts %s", s.name, s.final_stats) end
end
if not ok then
  io.stderr:write("bench: ", tostring(err), "\n")
  os.exit(1)
end
