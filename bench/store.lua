--- The store benchmark: what the store costs an audited call, on SQLite and
--- on PostgreSQL, and how many audited calls/s worker processes sharing one
--- PostgreSQL store reach together. `make bench-store` runs it inside a
--- throwaway cluster (pg_virtualenv); by hand, with the PG* environment set:
---
---   MCPCLIENT_TEST_PG=1 lua5.4 bench/store.lua
---
--- An audited call here is a real run (mcpclient.agent.run) calling a write
--- tool through a scripted server in the same process (spec/support/fake_server):
--- the lease-fenced pending effect, the call, the audit event, the fence
--- cleared and the lease renewed, plus the reads of the gate. The scripted
--- server costs the same on both backends, so the difference per call is the
--- store's. Not a test: nothing fails on a slow machine.
---
--- Environment: BENCH_STORE_CALLS=2000 calls per measure; BENCH_STORE_WORKERS=1,4,8;
--- BENCH_STORE_RUNS=3 (medians over the runs).
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path
package.cpath = "./build/?.so;" .. package.cpath

local core = require "mcpclient.core"
local drivers = require "mcpclient.db"

local CALLS = math.tointeger(tonumber(os.getenv("BENCH_STORE_CALLS") or "2000"))
local RUNS = math.tointeger(tonumber(os.getenv("BENCH_STORE_RUNS") or "3"))

local function text_answer(text)
  return { content = { { type = "text", text = text } } }
end

-- A server with one write tool, imported and switched on.
local function prepare(s)
  local Fake = require "support.fake_server"
  local catalogue = require "mcpclient.agent.catalogue"
  local uid = assert(s:add_server { identifier = "bench", name = "Bench", url = "https://mcp.example.com/rpc",
    data_class = "publicContent", enabled = true, requires_approval = "0" })
  local fake = Fake.new():will_handshake():will_return { tools = core.json.array {
    { name = "write_page", description = "Writes.", inputSchema = { type = "object" } } } }
  assert(not catalogue.import(s, assert(s:server(uid)), { transport = fake, clock = fake.clock,
    log = function() end }).refused)
  assert(s:set_tool_enabled("mcp_bench_write_page", true))
end

-- Make n audited calls in one run; returns seconds (wall) and the CPU seconds of this process.
local function audited_calls(s, n)
  local Fake = require "support.fake_server"
  local catalogue = require "mcpclient.agent.catalogue"
  local run = require "mcpclient.agent.run"
  local fake = Fake.new():will_handshake()
  for i = 1, n do fake:will_return(text_answer("ok " .. i)) end
  local r = assert(run.start(s, {
    user = { name = "bench", uid = 1, admin = true },
    configuration = { identifier = "cfg", provider = "p" }, providers = { p = { zone = "local" } },
    provider = catalogue.provider(s, { transport = fake, clock = fake.clock }), log = function() end,
    remote_budget = n + 1,
  }))
  r:invoke("mcp_bench_write_page", { i = 0 }) -- the handshake, outside the timing
  local t0, c0 = core.now(), os.clock()
  for i = 1, n - 1 do
    local result = r:invoke("mcp_bench_write_page", { i = i })
    if result.is_error then
      local why = r.error and (r.error.kind .. ": " .. r.error.message
        .. (r.error.store_error and (" / " .. r.error.store_error.message) or "")) or result.text
      error("call " .. i .. ": " .. why)
    end
  end
  local wall, cpu = core.now() - t0, os.clock() - c0
  assert(r:finish() == "completed")
  return wall / (n - 1), cpu / (n - 1)
end

-- One shell word.
local function quote(text)
  return "'" .. text:gsub("'", "'\\''") .. "'"
end

local function median(list)
  table.sort(list)
  return list[(#list + 1) // 2]
end

-- A fresh PostgreSQL schema; returns its connection string.
local function pg_schema(tag)
  local base = os.getenv("MCPCLIENT_TEST_PG")
  base = (base == nil or base == "1") and "" or base
  local admin = assert(drivers.pg_connect(base))
  local schema = string.format("bench_%s_%d_%d", tag, os.time(), math.random(0, 999999))
  assert(admin:exec("CREATE SCHEMA " .. schema))
  admin:close()
  return (base ~= "" and base .. " " or "") .. "options='-c search_path=" .. schema .. "'"
end

-- Count the statements the store sends while fn runs (wrapping the adapter's methods).
local function count_statements(s, fn)
  local adapter, count = s.adapter, 0
  local saved = {}
  for _, method in ipairs { "exec", "rows", "insert" } do
    saved[method] = adapter[method]
    adapter[method] = function(...)
      count = count + 1
      return saved[method](...)
    end
  end
  fn()
  for method, f in pairs(saved) do adapter[method] = f end
  return count
end

-- Per-call time on each backend: { name, wall µs, cpu µs, statements per call }.
local function per_call()
  local store = require "mcpclient.agent.store"
  local rows = {}
  local function measure(name, open)
    local walls, cpus, statements = {}, {}, 0
    for i = 1, RUNS do
      local s = open()
      prepare(s)
      walls[i], cpus[i] = audited_calls(s, CALLS)
      statements = count_statements(s, function() audited_calls(s, 11) end) / 10
      s:close()
    end
    rows[#rows + 1] = { name, median(walls) * 1e6, median(cpus) * 1e6, statements }
  end
  measure("SQLite :memory:", function() return assert(store.open(":memory:")) end)
  local file = os.tmpname()
  measure("SQLite file (WAL)", function()
    for _, suffix in ipairs { "", "-wal", "-shm" } do os.remove(file .. suffix) end
    return assert(store.open(file))
  end)
  for _, suffix in ipairs { "", "-wal", "-shm" } do os.remove(file .. suffix) end
  measure("PostgreSQL (loopback)", function() return assert(store.open(pg_schema("one"))) end)
  return rows
end

-- Calls/s of `workers` processes on one PostgreSQL store, each making CALLS calls in its own run.
local function throughput(workers)
  local store = require "mcpclient.agent.store"
  local conninfo = pg_schema("many")
  local s = assert(store.open(conninfo))
  prepare(s)
  s:close()
  local start_at = core.now() + 0.5
  local pipes = {}
  for i = 1, workers do
    pipes[i] = assert(io.popen(string.format("lua5.4 bench/store.lua worker %s %.3f %d",
      quote(conninfo), start_at, CALLS)))
  end
  local finished = 0
  for _, pipe in ipairs(pipes) do
    local line = pipe:read("l")
    pipe:close()
    finished = math.max(finished, (assert(tonumber(line), "a worker failed")))
  end
  return workers * (CALLS - 1) / (finished - start_at)
end

-- A worker process: wait for the common start, make the calls, print when it finished.
local function worker(conninfo, start_at, calls)
  local store = require "mcpclient.agent.store"
  local s = assert(store.open(conninfo))
  while core.now() < start_at do core.sleep(0.002) end
  audited_calls(s, calls)
  s:close()
  print(string.format("%.6f", core.now()))
end

if arg[1] == "worker" then
  worker(arg[2], tonumber(arg[3]), math.tointeger(tonumber(arg[4])))
  os.exit(0)
end

print(string.format("# store cost of an audited call (%d calls, median of %d runs)", CALLS, RUNS))
print("| store | wall µs per call | CPU µs per call (this process) | statements per call |")
print("| --- | ---: | ---: | ---: |")
for _, row in ipairs(per_call()) do
  print(string.format("| %s | %.0f | %.0f | %.1f |", row[1], row[2], row[3], row[4]))
end
print()
print(string.format("# audited calls/s, worker processes on one PostgreSQL store (%d calls each)", CALLS))
print("| workers | calls/s (all together) |")
print("| ---: | ---: |")
for w in (os.getenv("BENCH_STORE_WORKERS") or "1,4,8"):gmatch("%d+") do
  local rates = {}
  for i = 1, RUNS do rates[i] = throughput(math.tointeger(tonumber(w))) end
  print(string.format("| %s | %.0f |", w, median(rates)))
end
