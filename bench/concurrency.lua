--- Concurrency benchmarks (not a test: nothing here fails on a slow machine):
---
---   lua5.4 bench/concurrency.lua            from the repository root
---
--- 1. A run's turn of N slow calls (N = 1, 5, 20; the slow tool of bench/echo_server waits
---    BENCH_SLOW_MS) against N x the tool's time: the calls of a turn run at once.
--- 2. Concurrent warm calls on one connection: mcpclient (mcp.gather, K tasks) and the official
---    TypeScript SDK client (bench/sdk_concurrent.mjs, K workers under Promise.all), interleaved in
---    the same run against bench/echo_server (session + event streams, so the server is never the
---    bottleneck): calls/s, client CPU per call, peak RSS.
--- Writes bench/CONCURRENCY.md. Every server it starts is stopped by its PID.
---
--- Environment (all optional): BENCH_RUNS=3, BENCH_CALLS=4000, BENCH_CONCURRENCY=8,
--- BENCH_SLOW_MS=500, BENCH_OUT=bench/CONCURRENCY.md.
--- Internally, `lua5.4 bench/concurrency.lua --client URL CALLS K` is the mcpclient client process.
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path
package.cpath = "./build/?.so;" .. package.cpath

local mcp = require "mcpclient"
local core = require "mcpclient.core"
local json = core.json

local function env_int(name, default)
  local n = math.tointeger(tonumber(os.getenv(name) or ""))
  return n or default
end

local function peak_rss_kb()
  local f = assert(io.open("/proc/self/status"))
  local text = f:read("a")
  f:close()
  return tonumber(text:match("VmHWM:%s*(%d+)")) or 0
end

-- The mcpclient client process: CALLS echo calls, K at once, on one connection.
local function client_main(url, calls, k)
  local conn <close> = mcp.connect { url = url, identifier = "bench", health = mcp.health.discard }
  for _ = 1, 100 do assert(conn:call_tool("echo", { message = "hello" })) end
  local issued, errors = 0, 0
  local function worker()
    while issued < calls do
      issued = issued + 1
      local out = conn:call_tool("echo", { message = "hello" })
      if not out or out.is_error then errors = errors + 1 end
    end
  end
  local workers = {}
  for i = 1, k do workers[i] = worker end
  local cpu0, t0 = os.clock(), core.monotonic_ns()
  mcp.gather(workers)
  local wall, cpu = (core.monotonic_ns() - t0) / 1e9, os.clock() - cpu0
  print(json.encode { client = "mcpclient", n = calls, concurrency = k, wall_s = wall, ops_per_s = calls / wall,
    cpu_s = cpu, cpu_per_op_us = cpu * 1e6 / calls, peak_rss_kb = peak_rss_kb(), errors = errors })
end

if arg[1] == "--client" then
  client_main(arg[2], math.tointeger(tonumber(arg[3])), math.tointeger(tonumber(arg[4])))
  os.exit(0, true)
end

local shell = require "support.shell"
local quote = shell.quote

local config = {
  runs = env_int("BENCH_RUNS", 3), calls = env_int("BENCH_CALLS", 4000),
  k = env_int("BENCH_CONCURRENCY", 8), slow_ms = env_int("BENCH_SLOW_MS", 500),
  out = os.getenv("BENCH_OUT") or "bench/CONCURRENCY.md",
}

-- The echo server with these arguments: { url, stop }.
local function start_server(args)
  local pipe = assert(io.popen("echo $$; exec bench/echo_server " .. args .. " --exit-with-parent"))
  local pid = math.tointeger(tonumber(pipe:read("l")))
  local port = assert((pipe:read("l") or ""):match("^listening (%d+)$"), "bench/echo_server did not start")
  return { url = "http://127.0.0.1:" .. port .. "/mcp", stop = function()
    os.execute("kill -TERM " .. pid .. " 2>/dev/null")
    pipe:close()
  end }
end

local function one_line(cmd)
  local pipe = assert(io.popen(cmd))
  local line = pipe:read("l")
  pipe:close()
  return assert(line and json.decode(line), "no result from: " .. cmd)
end

-- 1. Turns of N slow calls through a run (store, catalogue, gate, audit: the whole road).
local function turns(url)
  local catalogue = require "mcpclient.agent.catalogue"
  local run = require "mcpclient.agent.run"
  local store_module = require "mcpclient.agent.store"
  local db = os.tmpname()
  os.remove(db)
  local store = assert(store_module.open(db))
  local uid = assert(store:add_server { identifier = "bench", name = "bench", url = url,
    data_class = "publicContent", requires_approval = "0", enabled = true })
  local report = catalogue.import(store, assert(store:server(uid)), { log = function() end })
  assert(not report.refused, table.concat(report.skip_reasons, "\n"))
  assert(store:set_tool_enabled("mcp_bench_slow", true))
  local rows = {}
  for _, n in ipairs { 1, 5, 20 } do
    local r = assert(run.start(store, { user = { name = "ops", uid = 1, admin = true }, remote_budget = 100,
      configuration = { identifier = "cfg-local", provider = "p-local" },
      providers = { ["p-local"] = { zone = "local" } } }))
    local calls = {}
    for i = 1, n do calls[i] = { name = "mcp_bench_slow", arguments = { ms = config.slow_ms } } end
    local t0 = core.monotonic_ns()
    local results = r:turn(calls)
    local wall = (core.monotonic_ns() - t0) / 1e9
    for _, result in ipairs(results) do assert(not result.is_error, result.text) end
    rows[#rows + 1] = { n = n, wall = wall, serial = n * config.slow_ms / 1000 }
    r:finish()
    r:close()
  end
  store:close()
  for _, suffix in ipairs { "", "-wal", "-shm" } do os.remove(db .. suffix) end
  return rows
end

local function median(list, field)
  local values = {}
  for i, v in ipairs(list) do values[i] = v[field] end
  table.sort(values)
  return values[(#values + 1) // 2], values[1], values[#values]
end

local function main()
  assert(os.execute("make --no-print-directory all >/dev/null"
    .. " && make --no-print-directory -C bench echo_server >/dev/null"))
  local server = start_server("--session --sse --slow-ms " .. config.slow_ms)
  local json_server = start_server("--session")
  local ok, why = pcall(function()
    local turn_rows = turns(server.url)
    local sets = {}
    for _, target in ipairs { { "event-stream answers", server.url }, { "JSON answers", json_server.url } } do
      local ours, sdk = {}, {}
      for _ = 1, config.runs do
        ours[#ours + 1] = one_line(string.format("lua5.4 bench/concurrency.lua --client %s %d %d",
          quote(target[2]), config.calls, config.k))
        sdk[#sdk + 1] = one_line(string.format("node bench/sdk_concurrent.mjs --url %s --calls %d --concurrency %d",
          quote(target[2]), config.calls, config.k))
      end
      sets[#sets + 1] = { "mcpclient (mcp.gather), " .. target[1], ours }
      sets[#sets + 1] = { "TypeScript SDK (Promise.all), " .. target[1], sdk }
    end
    local lines = {
      "# Concurrency benchmarks", "",
      string.format("`lua5.4 bench/concurrency.lua` on %s, %s. Server: bench/echo_server --session [--sse].",
        os.date("!%Y-%m-%d %H:%M UTC"), "this machine (shared, noisy)"), "",
      string.format("## A run's turn of N slow calls (the tool waits %d ms)", config.slow_ms), "",
      "| N | wall (s) | N x tool time (s) |", "|---|---|---|",
    }
    for _, row in ipairs(turn_rows) do
      lines[#lines + 1] = string.format("| %d | %.3f | %.1f |", row.n, row.wall, row.serial)
    end
    lines[#lines + 1] = ""
    lines[#lines + 1] = string.format("## %d warm echo calls, %d at once on one connection (median of %d, min–max)",
      config.calls, config.k, config.runs)
    lines[#lines + 1] = ""
    lines[#lines + 1] = "| client | calls/s | CPU per call (µs) | peak RSS (KiB) | errors |"
    lines[#lines + 1] = "|---|---|---|---|---|"
    for _, set in ipairs(sets) do
      local ops, ops_lo, ops_hi = median(set[2], "ops_per_s")
      local cpu, cpu_lo, cpu_hi = median(set[2], "cpu_per_op_us")
      local rss = median(set[2], "peak_rss_kb")
      local errors = median(set[2], "errors")
      lines[#lines + 1] = string.format("| %s | %.0f (%.0f–%.0f) | %.0f (%.0f–%.0f) | %d | %d |", set[1], ops, ops_lo,
        ops_hi, cpu, cpu_lo, cpu_hi, rss, errors)
    end
    local text = table.concat(lines, "\n") .. "\n"
    io.write(text)
    local f = assert(io.open(config.out, "w"))
    f:write(text)
    f:close()
  end)
  server.stop()
  json_server.stop()
  if not ok then error(why, 0) end
end

main()
