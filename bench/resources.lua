--- The resource-listing benchmark: `lua5.4 bench/resources.lua` from the repository root. Not a
--- test: the goals are reported as met or missed, never asserted.
--
-- It starts bench/resources_server.mjs on 127.0.0.1 (10 000 resources in pages of 250; plain
-- node:http, so the server costs the same for every client) and runs two clients against it,
-- interleaved (A B C D A B C D …): mcpclient (bench/resources_client.lua: every page, the text
-- rule on each resource) and the official TypeScript SDK client v1
-- (bench/sdk_resources_client.mjs: listResources page after page), each in two walks: the
-- listing held whole (conn:list_resources; the SDK's pages kept in one array) and page by page
-- (conn:each_resource_page; the SDK's pages counted and dropped). Each client process reports
-- its CPU over the timed listings and its peak RSS; this script takes medians with min-max over
-- the runs, prints the table and writes bench/RESOURCES.md. The server is stopped by its PID.
--
-- Environment (all optional): BENCH_RUNS=5 runs of each client, BENCH_LISTS=5 timed listings per
-- run, BENCH_WARMUP=3 untimed listings before them (the SDK client's JIT is still settling after
-- one: its timed listings came out ~10 % dearer then), BENCH_RESOURCES=10000, BENCH_PAGE=250,
-- BENCH_OUT=bench/RESOURCES.md.
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path
package.cpath = "./build/?.so;" .. package.cpath

local core = require "mcpclient.core"
local peers = require "support.peers"
local shell = require "support.shell"
local quote, read_all = shell.quote, shell.read_all

local function env_int(name, default)
  local v = os.getenv(name)
  if v == nil or v == "" then return default end
  local n = math.tointeger(tonumber(v))
  if not n or n <= 0 then error(name .. " must be a positive integer, not " .. v) end
  return n
end

local config = { runs = env_int("BENCH_RUNS", 5), lists = env_int("BENCH_LISTS", 5),
  warmup = env_int("BENCH_WARMUP", 3),
  count = env_int("BENCH_RESOURCES", 10000), page = env_int("BENCH_PAGE", 250),
  out = os.getenv("BENCH_OUT") or "bench/RESOURCES.md" }

-- Start the server; → { pid, url, stop }.
local function start_server()
  local stdout, stderr = os.tmpname(), os.tmpname()
  local pipe = assert(io.popen("echo $$; exec node bench/resources_server.mjs --port 0 --count " .. config.count
    .. " --page " .. config.page .. " >" .. quote(stdout) .. " 2>" .. quote(stderr) .. " </dev/null"))
  local pid = assert(math.tointeger(tonumber(pipe:read("l") or "")), "no PID for the server")
  local server = { pid = pid }
  function server.stop()
    os.execute("kill -TERM " .. pid .. " 2>/dev/null")
    pipe:close()
    os.remove(stdout)
    os.remove(stderr)
  end
  for _ = 1, 200 do
    local port = read_all(stdout):match("^listening (%d+)\n")
    if port then
      server.url = "http://127.0.0.1:" .. port .. "/mcp"
      return server
    end
    if not peers.alive(pid) then break end
    core.sleep(0.05)
  end
  local why = read_all(stderr)
  server.stop()
  error("the benchmark server did not start: " .. why)
end

local CLIENTS = {
  { name = "mcpclient", walk = "whole", cmd = "lua5.4 bench/resources_client.lua" },
  { name = "sdk", walk = "whole", cmd = "node bench/sdk_resources_client.mjs" },
  { name = "mcpclient", walk = "pages", cmd = "lua5.4 bench/resources_client.lua" },
  { name = "sdk", walk = "pages", cmd = "node bench/sdk_resources_client.mjs" },
}

-- One client process; → its JSON figures.
local function run_client(client, url)
  local errfile = os.tmpname()
  local pipe = assert(io.popen(client.cmd .. " --url " .. quote(url) .. " --lists " .. config.lists
    .. " --warmup " .. config.warmup .. " --walk " .. client.walk .. " 2>" .. quote(errfile)))
  local out = pipe:read("a")
  local ok = pipe:close()
  local err = read_all(errfile)
  os.remove(errfile)
  if not ok then error(client.name .. " failed: " .. err) end
  local figures = core.json.decode(out)
  if figures.resources ~= config.count then
    error(string.format("%s listed %s resources, not %d", client.name, tostring(figures.resources), config.count))
  end
  return figures
end

local function median(list)
  local sorted = table.move(list, 1, #list, 1, {})
  table.sort(sorted)
  local n = #sorted
  if n % 2 == 1 then return sorted[(n + 1) // 2] end
  return (sorted[n // 2] + sorted[n // 2 + 1]) / 2
end

local function spread(list)
  return math.min(table.unpack(list)), math.max(table.unpack(list))
end

-- The 1-minute load average (/proc/loadavg), "?" where there is none: a busy machine moves CPU times.
local function load_now()
  local text = read_all("/proc/loadavg")
  return text and text:match("^(%S+)") or "?"
end

local load_start = load_now()
local server = start_server()
local figures = {}
local ok, why = pcall(function()
  for run = 1, config.runs do
    for _, client in ipairs(CLIENTS) do
      local key = client.name .. " " .. client.walk
      figures[key] = figures[key] or { cpu = {}, rss = {} }
      local f = run_client(client, server.url)
      table.insert(figures[key].cpu, f.cpu_per_list_ms)
      table.insert(figures[key].rss, f.peak_rss_kb / 1024)
      io.stderr:write(string.format("run %d %s: %.1f ms CPU per listing, peak RSS %.1f MiB\n", run, key,
        f.cpu_per_list_ms, f.peak_rss_kb / 1024))
    end
  end
end)
server.stop()
if not ok then error(why, 0) end
local load_average = load_start .. " at the start, " .. load_now() .. " at the end"

local lines = {
  "# Listing 10 000 resources: mcpclient and the SDK client",
  "",
  string.format("`lua5.4 bench/resources.lua` (BENCH_RUNS=%d, BENCH_LISTS=%d, BENCH_WARMUP=%d, %d resources in "
    .. "pages of %d; generated %s, load average %s). Client CPU per whole listing (user + system of every "
    .. "thread over the timed listings, after the untimed ones) and peak RSS of the client process; medians "
    .. "over the runs, min-max in brackets. The server is plain node:http (bench/resources_server.mjs), the "
    .. "same for both, and the clients take turns against it.", config.runs, config.lists, config.warmup,
    config.count, config.page, os.date("!%Y-%m-%d %H:%M UTC"), load_average),
  "",
  "| client | walk | CPU per listing (ms) | peak RSS (MiB) |",
  "|---|---|---|---|",
}
for _, client in ipairs(CLIENTS) do
  local f = figures[client.name .. " " .. client.walk]
  local cmin, cmax = spread(f.cpu)
  local rmin, rmax = spread(f.rss)
  lines[#lines + 1] = string.format("| %s | %s | %.1f [%.1f-%.1f] | %.1f [%.1f-%.1f] |", client.name,
    client.walk == "whole" and "held whole" or "page by page", median(f.cpu), cmin, cmax, median(f.rss), rmin, rmax)
end
lines[#lines + 1] = ""
for _, walk in ipairs { "whole", "pages" } do
  local ours, theirs = figures["mcpclient " .. walk], figures["sdk " .. walk]
  local cpu_ratio = median(theirs.cpu) / median(ours.cpu)
  local rss_ratio = median(ours.rss) / median(theirs.rss)
  lines[#lines + 1] = string.format("%s: the SDK client spends %.1fx mcpclient's CPU (goal: at least 5x) — %s; "
    .. "mcpclient peaks at %.3f of its RSS (goal: at most 1/10 = 0.100) — %s.",
    walk == "whole" and "Held whole" or "Page by page", cpu_ratio, cpu_ratio >= 5 and "met" or "missed", rss_ratio,
    rss_ratio <= 0.1 and "met" or "missed")
  lines[#lines + 1] = ""
end
local text = table.concat(lines, "\n") .. "\n"
io.write(text)
local file = assert(io.open(config.out, "w"))
file:write(text)
file:close()
