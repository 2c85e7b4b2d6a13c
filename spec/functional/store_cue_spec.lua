-- The gate, the fence, the audit and the governance log over a store that
-- fails on cue: every read and write they make is refused once it is cued
-- (by its SQL, at the adapter, so the store, the gate and the run above it
-- run for real), on SQLite and, with MCPCLIENT_TEST_PG, on PostgreSQL. For
-- each: nothing is sent when the failure comes before the call, the failure
-- is the store's own value (kind "store") or the run's fail-closed kind
-- carrying it, and the run stops closed wherever something could go
-- unrecorded. A group switched off stays off while its switch cannot be read.
local backends = require "support.backends"
local catalogue = require "mcpclient.agent.catalogue"
local core = require "mcpclient.core"
local drivers = require "mcpclient.db"
local fence = require "support.fence"
local operator = require "mcpclient.agent.operator"
local run = require "mcpclient.agent.run"
local store_module = require "mcpclient.agent.store"
local Fake = require "support.fake_server"
local servers = require "support.servers"

local json = core.json

local ADMIN = { name = "ops", uid = 7, admin = true }
local CONFIG = { identifier = "cfg-local", provider = "p-local", model = "m-1" }
local PROVIDERS = { ["p-local"] = { zone = "local" } }
local TOOL, GROUP = "mcp_audit_write_page", "mcp_audit"

--[[
An adapter over a real one that refuses, on cue, every statement whose SQL
(and parameters) a cue matches: nil, "injected failure (XX_CUE)", "XX_CUE",
as a database that refused it would answer. `cues` is a list of
function(sql, params) -> true to refuse; `refused` counts what was refused.
]]
local function cued(real)
  local wrapper = { dialect = real.dialect, cues = {}, refused = 0 }
  local function struck(sql, params)
    for _, cue in ipairs(wrapper.cues) do
      if cue(sql, params or {}) then
        wrapper.refused = wrapper.refused + 1
        return true
      end
    end
    return false
  end
  function wrapper.exec(_, sql, params)
    if struck(sql, params) then return nil, "injected failure (XX_CUE)", "XX_CUE" end
    return real:exec(sql, params)
  end
  function wrapper.rows(_, sql, params)
    if struck(sql, params) then return nil, "injected failure (XX_CUE)", "XX_CUE" end
    return real:rows(sql, params)
  end
  function wrapper.insert(_, sql, params)
    if struck(sql, params) then return nil, "injected failure (XX_CUE)", "XX_CUE" end
    return real:insert(sql, params)
  end
  function wrapper.changes() return real:changes() end
  function wrapper.close() real:close() end
  if real.with_busy_timeout then
    function wrapper.with_busy_timeout(_, ms, fn) return real:with_busy_timeout(ms, fn) end
  end
  return wrapper
end

-- Cues by what the statement does.
local function reads(tbl)
  return function(sql) return sql:find("^SELECT enabled FROM " .. tbl .. " ") ~= nil end
end
local function inserts(tbl)
  return function(sql) return sql:find("^INSERT INTO " .. tbl .. " ") ~= nil end
end
-- A guarded write of the run's row that sets the fence (a fence naming a call) or clears it.
local function fence_write(clearing)
  return function(sql, params)
    if not sql:find("^UPDATE agent_run SET .*fence = %?") then return false end
    for _, p in ipairs(params) do
      if type(p) == "string" and (clearing and p == "" or not clearing and p:find('"tool":', 1, true)) then
        return true
      end
    end
    return false
  end
end
-- The run's final status write.
local function status_write(status)
  return function(sql, params)
    if not sql:find("^UPDATE agent_run SET .*status = %?") then return false end
    for _, p in ipairs(params) do if p == status then return true end end
    return false
  end
end

-- A fresh location on this run's backend that two connections share (a file for SQLite).
local made = {}
local function fresh_location()
  if backends.postgres then return (backends.new_schema()) end
  local path = os.tmpname()
  made[#made + 1] = path
  return path
end

local function remove_made()
  for _, path in ipairs(made) do
    for _, suffix in ipairs { "", "-wal", "-shm", "-journal" } do os.remove(path .. suffix) end
  end
  made = {}
end

local function count(list, value)
  local n = 0
  for _, v in ipairs(list) do if v == value then n = n + 1 end end
  return n
end

-- A fresh store on this run's backend holding the server "audit" and its
-- write_page tool, switched on; returns the real store, the cued one over
-- the same database, and the wrapper.
local function rig()
  local location = fresh_location()
  local real = assert(store_module.open(location))
  local uid = servers.add(real, { identifier = "audit", name = "Audit", requires_approval = "0" })
  local fake = Fake.new():will_handshake():will_return { tools = json.array {
    { name = "write_page", description = "Writes.", inputSchema = { type = "object" } } } }
  assert.is_false(catalogue.import(real, assert(real:server(uid)), { transport = fake, clock = fake.clock,
    log = function() end }).refused)
  assert(real:set_tool_enabled(TOOL, true))
  -- a second connection to the same database, behind the cue
  local adapter
  if backends.postgres then
    adapter = assert(require("mcpclient.agent.store.postgres").open(location))
  else
    adapter = assert(require("mcpclient.agent.store.sqlite").open(location))
  end
  local wrapper = cued(adapter)
  local s = assert(store_module.open_adapter(wrapper, { migrate = false }))
  return real, s, wrapper, location
end

local function text_answer(text)
  return { content = { { type = "text", text = text } } }
end

-- A run on the cued store whose remote tool reaches `fake`.
local function start(s, fake, logged, extra)
  local options = {
    user = ADMIN, configuration = CONFIG, providers = PROVIDERS,
    provider = catalogue.provider(s, { transport = fake, clock = fake.clock, log = function() end }),
    log = function(level, text) if logged then logged[#logged + 1] = { level, text } end end,
  }
  for k, v in pairs(extra or {}) do options[k] = v end
  return assert(run.start(s, options))
end

local function tool_steps(store, run_uid)
  local out = {}
  for _, e in ipairs(assert(store:events(run_uid))) do
    if e.kind == "tool" then out[#out + 1] = json.decode(e.payload) end
  end
  return out
end

describe("the gate over a store that fails on cue (" .. backends.name .. ")", function()
  local real, s, wrapper

  before_each(function() real, s, wrapper = rig() end)
  after_each(function()
    s:close()
    real:close()
    remove_made()
  end)

  it("a tool switch that cannot be read: nothing sent, kind store carried up, the model told 'unavailable'", function()
    local fake = Fake.new()
    local r = start(s, fake)
    wrapper.cues = { reads("tool_state") }
    local result = r:invoke(TOOL, { title = "x" })
    assert.equal(0, #fake.requests) -- not even a handshake
    assert.is_true(result.is_error)
    assert.equal("store", result.err.kind)
    assert.equal("XX_CUE", result.err.sql_code)
    assert.equal("read a tool's switch", result.err.operation)
    assert.truthy(result.text:find("unavailable for now", 1, true), result.text)
    assert.is_nil(result.text:find("not permitted", 1, true))
    -- the refusal is recorded, so the run goes on
    assert.equal("running", r.status)
    local rows = assert(real:governance_events())
    assert.equal(1, #rows)
    assert.equal("storeUnavailable", rows[1].reason)
    assert.equal(TOOL, rows[1].tool_name)
    assert.equal(1, #tool_steps(real, r.uid))
    -- the store back: the same call goes through
    wrapper.cues = {}
    fake:will_handshake():will_return(text_answer("written"))
    assert.equal("written", r:invoke(TOOL, { title = "x" }).text)
    assert.equal("completed", r:finish())
  end)

  it("a group switched off stays off while its switch cannot be read, its tool's own switch on", function()
    assert(real:set_group_enabled(GROUP, false))
    local fake = Fake.new()
    local r = start(s, fake)
    wrapper.cues = { reads("tool_group_state") }
    local result = r:invoke(TOOL, {})
    assert.equal(0, #fake.requests)
    assert.equal("store", result.err.kind)
    assert.equal("read a tool group's switch", result.err.operation)
    -- and it is not offered either: the gate decides it and records why
    local specs = r:tools()
    assert.same({}, specs)
    assert.equal("running", r.status)
    local reasons = {}
    for _, row in ipairs(assert(real:governance_events())) do reasons[#reasons + 1] = row.reason end
    assert.same({ "storeUnavailable", "storeUnavailable" }, reasons)
  end)

  it("the operator's tool list fails with the store's failure rather than show a group off as on", function()
    assert(real:set_group_enabled(GROUP, false))
    wrapper.cues = { reads("tool_group_state") }
    local tools, message, err = operator.tools(s)
    assert.is_nil(tools)
    assert.equal("store", err.kind)
    assert.truthy(message:find("injected failure", 1, true), message)
    wrapper.cues = {}
    assert.is_false(assert(operator.tools(s))[1].enabled)
  end)

  it("a refusal whose governance event cannot be written stops the run closed", function()
    assert(real:set_tool_enabled(TOOL, false))
    local fake = Fake.new()
    local logged = {}
    local r = start(s, fake, logged)
    wrapper.cues = { inserts("governance_event") }
    local results = r:turn { { name = TOOL, arguments = {} }, { name = TOOL, arguments = {} } }
    assert.equal(0, #fake.requests)
    assert.equal("failed", r.status)
    assert.equal("audit_persistence_failed", r.error.kind)
    assert.equal("store", r.error.store_error.kind)
    assert.equal("XX_CUE", r.error.store_error.sql_code)
    assert.truthy(r.error.message:find("could not be recorded as a governance event", 1, true), r.error.message)
    for _, result in ipairs(results) do
      assert.is_true(result.stopped)
      assert.equal(r.error, result.err)
    end
    -- every later call is refused without reaching anything, and the run does not end "completed"
    assert.is_true(r:invoke(TOOL, {}).stopped)
    assert.equal("failed", r:finish())
    assert.equal("failed", assert(real:run(r.uid)).status)
    assert.equal(0, #assert(real:governance_events()))
  end)

  it("a refusal nobody can record while offering tools stops the run, and nothing is offered", function()
    assert(real:set_group_enabled(GROUP, false))
    local r = start(s, Fake.new())
    wrapper.cues = { reads("tool_group_state"), inserts("governance_event") }
    local specs, why = r:tools()
    assert.same({}, specs)
    assert.equal("failed", r.status)
    assert.equal(r.error.message, why)
    assert.equal("audit_persistence_failed", r.error.kind)
  end)
end)

describe("the fence and the audit over a store that fails on cue (" .. backends.name .. ")", function()
  local real, s, wrapper

  before_each(function() real, s, wrapper = rig() end)
  after_each(function()
    s:close()
    real:close()
    remove_made()
  end)

  it("a fence that cannot be set: nothing sent, the run fails with the store's own failure", function()
    local fake = Fake.new():will_handshake()
    local r = start(s, fake)
    wrapper.cues = { fence_write(false) }
    local result = r:invoke(TOOL, { title = "x" })
    assert.equal(0, count(fake:methods(), "tools/call"))
    assert.is_true(result.stopped)
    assert.equal("failed", r.status)
    assert.equal("store", r.error.kind) -- not run_lease_lost: nobody else holds the lease
    assert.equal("XX_CUE", r.error.sql_code)
    assert.equal(r.error, result.err)
    assert.truthy(result.text:find('"' .. TOOL .. '" was not called', 1, true), result.text)
    assert.equal(0, #tool_steps(real, r.uid))
  end)

  it("a fence that cannot be cleared: the call ran once and is in the audit; the run fails with kind store",
    function()
      local fake = Fake.new():will_handshake():will_return(text_answer("written"))
      local r = start(s, fake)
      wrapper.cues = { fence_write(true) }
      local result = r:invoke(TOOL, { title = "x" })
      assert.equal(1, count(fake:methods(), "tools/call"))
      assert.equal("written", result.text)
      assert.is_true(result.stopped)
      assert.equal("store", r.error.kind)
      local steps = tool_steps(real, r.uid)
      assert.equal(1, #steps)
      -- the fence still names the call, and the audit holds it
      local row = assert(real:run(r.uid))
      assert.same({ fence.entry(TOOL, { title = "x" }, 1) }, fence.entries(row.fence))
      local views = assert(operator.runs(real, { open = true, now = row.lease_expires + 1 }))
      assert.equal(1, #views)
      assert.is_true(views[1].fence[1].recorded)
    end)

  it("an audit step that cannot be written: the call ran once, the run fails closed, the fence names it", function()
    local fake = Fake.new():will_handshake():will_return(text_answer("one")):will_return(text_answer("two"))
    local r = start(s, fake)
    assert.equal("one", r:invoke(TOOL, { n = 1 }).text)
    wrapper.cues = { inserts("agent_run_event") }
    local result = r:invoke(TOOL, { n = 2 })
    assert.equal(2, count(fake:methods(), "tools/call"))
    assert.is_true(result.stopped)
    assert.equal("audit_persistence_failed", r.error.kind)
    assert.equal("store", r.error.store_error.kind)
    local row = assert(real:run(r.uid))
    assert.equal("failed", row.status)
    assert.same({ fence.entry(TOOL, { n = 2 }, 2) }, fence.entries(row.fence))
    -- server-side: two executions; the audit: one step, and the fence names the other
    assert.equal(1, #tool_steps(real, r.uid))
    local views = assert(operator.runs(real, { open = true }))
    assert.equal(r.uid, views[1].uid)
    assert.is_false(views[1].fence[1].recorded)
    assert.truthy(views[1].next:find("may have run without its audit step", 1, true), views[1].next)
  end)

  it("a final status that cannot be written: finish says failed, with the store's failure", function()
    local fake = Fake.new():will_handshake():will_return(text_answer("written"))
    local r = start(s, fake)
    assert.equal("written", r:invoke(TOOL, {}).text)
    wrapper.cues = { status_write("completed") }
    assert.equal("failed", r:finish())
    assert.equal("store", r.error.kind)
    assert.equal("running", assert(real:run(r.uid)).status) -- the row could not be told
  end)

  it("a run started while its row cannot be inserted holds no lease, and sends no write", function()
    wrapper.cues = { inserts("agent_run") }
    local fake = Fake.new():will_handshake()
    local r = start(s, fake)
    assert.is_false(r.persisted)
    local result = r:invoke(TOOL, {})
    assert.equal(0, count(fake:methods(), "tools/call"))
    assert.equal("write_without_durable_execution", r.error.kind)
    assert.is_true(result.stopped)
  end)
end)

describe("a run left behind (" .. backends.name .. ")", function()
  local real

  before_each(function() real = backends.open_store() end)
  after_each(function() real:close() end)

  local FENCED = json.encode(json.array { json.set_key_order({ tool = TOOL, arguments_sha256 = fence.digest {},
    sequence = 1 }, { "tool", "arguments_sha256", "sequence" }) })

  it("is marked failed by the next process that opens the store, with a recovered event", function()
    local location = fresh_location()
    local first = assert(store_module.open(location))
    local uid = assert(first:insert_run { uuid = "left", status = "running", claimed_by = "worker:gone:1",
      lease_expires = os.time() - 5, fence = FENCED })
    local live = assert(first:insert_run { uuid = "live", status = "running", claimed_by = "worker:here:2",
      lease_expires = os.time() + 600, fence = FENCED })
    local idle = assert(first:insert_run { uuid = "idle", status = "running", claimed_by = "worker:gone:3",
      lease_expires = os.time() - 5 })
    first:close()
    local second <close> = assert(store_module.open(location))
    finally(remove_made)
    local row = assert(second:run(uid))
    assert.equal("failed", row.status)
    assert.equal(FENCED, row.fence) -- kept: it names the call that may have run
    assert.equal("worker:gone:1", row.claimed_by)
    local events = assert(second:events(uid))
    assert.equal(1, #events)
    assert.equal("recovered", events[1].kind)
    local payload = json.decode(events[1].payload)
    assert.equal("worker:gone:1", payload.owner)
    assert.equal(FENCED, payload.fence)
    -- a live lease, and a run whose worker stopped between calls, are left alone
    assert.equal("running", assert(second:run(live)).status)
    assert.equal("running", assert(second:run(idle)).status)
    -- and a second recovery marks nothing twice
    assert.same({}, assert(second:recover_runs()))
  end)

  it("is not taken over by a claim: the claim marks it failed instead", function()
    local uid = assert(real:insert_run { uuid = "left", status = "running", claimed_by = "worker:gone:1",
      lease_expires = 1000, fence = FENCED })
    assert.equal(0, real:claim_run(uid, "worker:new:2", 5000, 2000))
    local row = assert(real:run(uid))
    assert.equal("failed", row.status)
    assert.equal("worker:gone:1", row.claimed_by)
    assert.equal("recovered", assert(real:events(uid))[1].kind)
    -- a run whose fence is clear is claimed as before
    local other = assert(real:insert_run { uuid = "idle", status = "running", claimed_by = "worker:gone:1",
      lease_expires = 1000 })
    assert.equal(1, real:claim_run(other, "worker:new:2", 5000, 2000))
  end)

  it("is listed by mcpclient runs --open with its fence, as text and as JSON", function()
    local cli = require "mcpclient.agent.cli"
    local uid = assert(real:insert_run { uuid = "left-run", status = "running", claimed_by = "worker:gone:1",
      lease_expires = 1000, fence = FENCED })
    assert(real:insert_run { uuid = "done-run", status = "completed", claimed_by = "worker:gone:1",
      lease_expires = 1000 })
    local function run_cli(argv)
      local out, err = {}, {}
      local code = cli.main(argv, { store = real,
        stdout = { write = function(_, ...) for _, t in ipairs { ... } do out[#out + 1] = t end end },
        stderr = { write = function(_, ...) for _, t in ipairs { ... } do err[#err + 1] = t end end } })
      return code, table.concat(out), table.concat(err)
    end
    local code, text = run_cli { "runs", "--open" }
    assert.equal(0, code)
    assert.truthy(text:find("run " .. uid .. "  left-run  [failed]", 1, true), text)
    -- the lease's time as every text time is written (JSON keeps ISO 8601)
    assert.truthy(text:find("\n  Lease:    %d%d%d%d%-%d%d%-%d%d %d%d:%d%d:%d%d UTC %(expired%)\n"), text)
    assert.truthy(text:find(TOOL .. ", arguments sha256 " .. fence.digest {} .. ", audit sequence 1: NOT in the "
      .. "audit", 1, true), text)
    assert.is_nil(text:find("done-run", 1, true))
    local json_text
    code, json_text = run_cli { "--json", "runs", "--open" }
    assert.equal(0, code)
    local listed = json.decode(json_text)
    assert.equal(1, #listed)
    assert.equal(uid, listed[1].id)
    assert.equal("failed", listed[1].status)
    assert.equal("worker:gone:1", listed[1].owner)
    assert.is_true(listed[1].lease_expired)
    assert.same({ tool = TOOL, arguments_sha256 = fence.digest {}, sequence = 1, recorded = false },
      listed[1].fence[1])
    code, text = run_cli { "runs" }
    assert.equal(0, code)
    assert.truthy(text:find("done-run", 1, true), text)
  end)
end)

describe("a table the run's database user cannot read (" .. backends.name .. ")", function()
  it("keeps a group that is switched off, off", function()
    local location = fresh_location()
    local real = assert(store_module.open(location))
    local uid = servers.add(real, { identifier = "audit", name = "Audit", requires_approval = "0" })
    local fake = Fake.new():will_handshake():will_return { tools = json.array {
      { name = "write_page", description = "Writes.", inputSchema = { type = "object" } } } }
    assert.is_false(catalogue.import(real, assert(real:server(uid)), { transport = fake, clock = fake.clock,
      log = function() end }).refused)
    assert(real:set_tool_enabled(TOOL, true))
    assert(real:set_group_enabled(GROUP, false))
    local s
    if backends.postgres then
      -- a role that may use every table of the store but the group switches, and the run's session as that role
      local role = "mcpt_noread_" .. math.random(1, 999999)
      local schema = location:match("search_path=([%w_]+)")
      local admin = assert(drivers.pg_connect(backends.conninfo()))
      assert(admin:exec(string.format("CREATE ROLE %s NOLOGIN; GRANT USAGE ON SCHEMA %s TO %s; "
        .. "GRANT ALL ON ALL TABLES IN SCHEMA %s TO %s; GRANT ALL ON ALL SEQUENCES IN SCHEMA %s TO %s; "
        .. "REVOKE ALL ON %s.tool_group_state FROM %s", role, schema, role, schema, role, schema, role, schema,
        role)))
      admin:close()
      s = assert(store_module.open(location))
      assert(s.adapter:exec("SET ROLE " .. role))
    else
      -- the table gone from under the run's connection (its name taken away)
      s = assert(store_module.open(location))
      assert(real.adapter:exec("ALTER TABLE tool_group_state RENAME TO tool_group_state_hidden"))
    end
    local r = start(s, fake)
    local result = r:invoke(TOOL, {})
    assert.equal(0, count(fake:methods(), "tools/call"))
    assert.equal("store", result.err.kind)
    assert.truthy(result.text:find("unavailable for now", 1, true), result.text)
    assert.same({}, (r:tools()))
    s:close()
    real:close()
    remove_made()
  end)
end)
