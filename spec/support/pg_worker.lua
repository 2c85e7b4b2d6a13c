--- A worker process of spec/functional/store_pg_spec.lua: one more host on
--- the shared PostgreSQL store.
--
--   lua5.4 spec/support/pg_worker.lua <conninfo> <start_at> calls <n> <shared run uid>
--   lua5.4 spec/support/pg_worker.lua <conninfo> <start_at> import <server uid> <tool count>
--   lua5.4 spec/support/pg_worker.lua <conninfo> <start_at> open
--
-- (LUA_PATH / LUA_CPATH must reach lua/, spec/ and build/.) Every worker
-- waits until core.now() (the machine's monotonic clock, shared by every
-- process) reaches start_at, so the workers really run at once. Prints one
-- line: "ok <detail>" or "failed <message>".
--   calls   starts a run and makes n audited calls of mcp_audit_read_page (a
--           write: fenced and audited) through a scripted server, then appends
--           n events to the shared run; prints "ok <run uid>"
--   import  imports <tool count> tools for the server (a scripted server)
--   open    opens (and so migrates) the store
local core = require "mcpclient.core"
local store_module = require "mcpclient.agent.store"

local conninfo, start_at, mode = arg[1], tonumber(arg[2]), arg[3]

local function say(...)
  io.stdout:write(table.concat({ ... }, " "), "\n")
  io.stdout:flush()
end

local function wait_for_start()
  while core.now() < start_at do core.sleep(0.005) end
end

local function text_answer(text)
  return { content = { { type = "text", text = text } } }
end

local modes = {}

function modes.open()
  local s = store_module.open(conninfo)
  if not s then return false, "open" end
  local version = s:schema_version()
  s:close()
  return true, tostring(version)
end

function modes.calls(n, shared)
  local Fake = require "support.fake_server"
  local catalogue = require "mcpclient.agent.catalogue"
  local run = require "mcpclient.agent.run"
  local s = assert(store_module.open(conninfo))
  local fake = Fake.new():will_handshake()
  for i = 1, n do fake:will_return(text_answer("page " .. i)) end
  local r = assert(run.start(s, {
    user = { name = "ops", uid = 7, admin = true },
    configuration = { identifier = "cfg-local", provider = "p-local" },
    providers = { ["p-local"] = { zone = "local" } },
    provider = catalogue.provider(s, { transport = fake, clock = fake.clock }),
    log = function() end,
  }))
  for i = 1, n do
    local result = r:invoke("mcp_audit_read_page", { uid = i })
    if result.is_error then return false, "call " .. i .. ": " .. tostring(result.text) end
  end
  if r:finish() ~= "completed" then return false, "finish" end
  for i = 1, n do
    local ok, message = s:append_event(shared, { kind = "note", payload = string.format('{"i":%d}', i) })
    if not ok then return false, message end
  end
  s:close()
  return true, tostring(r.uid)
end

function modes.import(server_uid, count)
  local Fake = require "support.fake_server"
  local catalogue = require "mcpclient.agent.catalogue"
  local json = core.json
  local s = assert(store_module.open(conninfo))
  local entries = {}
  for i = 1, count do
    entries[i] = { name = string.format("t%03d", i), description = "Tool " .. i,
      inputSchema = { type = "object" } }
  end
  local fake = Fake.new():will_handshake():will_return { tools = json.array(entries) }
  local report = catalogue.import(s, assert(s:server(server_uid)), { transport = fake, clock = fake.clock,
    log = function() end })
  s:close()
  if report.refused then return false, table.concat(report.skip_reasons or {}, "; ") end
  return true, tostring(report.imported or count)
end

wait_for_start()
local ran, ok, detail = pcall(modes[mode], tonumber(arg[4]), tonumber(arg[5]))
if not ran then say("failed", (tostring(ok):gsub("\n", " "))) os.exit(1) end
say(ok and "ok" or "failed", (tostring(detail):gsub("\n", " ")))
os.exit(ok and 0 or 1)
