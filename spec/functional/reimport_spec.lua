-- The re-import setting and its rules over a real store (SQLite, or PostgreSQL with
-- MCPCLIENT_TEST_PG) and a scripted server: which notices make a catalogue stale and a re-import
-- due, one process per burst (a compare-and-set two store handles race for), a notice heard by
-- the import itself, the run's gate before a re-import, and the operator's setting in add, edit,
-- the readout and the CLI.
local backends = require "support.backends"
local catalogue = require "mcpclient.agent.catalogue"
local cli = require "support.cli"
local core = require "mcpclient.core"
local operator = require "mcpclient.agent.operator"
local run = require "mcpclient.agent.run"
local store_module = require "mcpclient.agent.store"
local Fake = require "support.fake_server"
local servers = require "support.servers"

local json = core.json

local ADMIN = { name = "ops", uid = 7, admin = true }
local LOCAL = { identifier = "cfg-local", provider = "p-local" }
local PROVIDERS = { ["p-local"] = { zone = "local" } }

local function opening(fake)
  return (fake or Fake.new()):will_return({ protocolVersion = "2025-11-25", capabilities = { tools = {} },
    serverInfo = { name = "Docs", version = "1" } })
end

local function notice(method, params)
  return string.format("event: message\ndata: %s\n\n", json.encode { jsonrpc = "2.0", method = method,
    params = params })
end

local function tool(name)
  return { name = name, description = name, inputSchema = { type = "object" } }
end

describe("re-importing a changed catalogue", function()
  local store
  before_each(function() store = servers.open_store() end)
  after_each(function() store:close() end)

  it("a tools, resources or prompts list_changed marks it stale and due; a resource's own update does not", function()
    local uid = servers.add(store, { identifier = "docs", reimport = "auto" })
    local fake = opening()
    fake:will_stream { notice("notifications/resources/updated", { uri = "file:///a" }),
      Fake.sse_result { content = { { type = "text", text = "one" } } } }
    fake:will_stream { notice("notifications/prompts/list_changed"),
      Fake.sse_result { content = { { type = "text", text = "two" } } } }
    local conn = assert(catalogue.connect(assert(store:server(uid)), { store = store, transport = fake,
      clock = fake.clock }))
    assert(conn:call_tool("t"))
    assert.is_false(store:server(uid).catalogue_stale)
    assert.equal(0, store:server(uid).reimport_pending)
    assert(conn:call_tool("t"))
    conn:close()
    assert.is_true(store:server(uid).catalogue_stale)
    assert.equal(1, store:server(uid).reimport_pending)
    local due = assert(store:reimports_due())
    assert.equal(1, #due)
    assert.equal(uid, due[1].uid)
  end)

  it("is taken by one of two store handles sharing the database; a later notice keeps it stale", function()
    local path = os.tmpname()
    local location = backends.fresh(path)
    local one <close> = assert(store_module.open(location))
    local two <close> = assert(store_module.open(location))
    local uid = servers.add(one, { identifier = "docs", reimport = "auto" })
    assert(one:set_catalogue_stale(uid, true))
    assert.equal(1, #assert(two:reimports_due()))
    assert.equal(1, two:begin_import(uid, true))
    assert.equal(0, one:begin_import(uid, true))
    assert.same({}, assert(one:reimports_due()))
    -- a notice while the import runs: the import's end leaves the catalogue stale, and due again
    assert(one:set_catalogue_stale(uid, true))
    assert(two:settle_catalogue(uid))
    assert.is_true(one:server(uid).catalogue_stale)
    assert.equal(1, #assert(one:reimports_due()))
    assert.equal(1, one:begin_import(uid, true))
    assert(one:settle_catalogue(uid))
    assert.is_false(two:server(uid).catalogue_stale)
    -- a manual or a disabled server is never due
    local manual = servers.add(one, { identifier = "man" })
    local off = servers.add(one, { identifier = "off", reimport = "auto", enabled = false })
    assert(one:set_catalogue_stale(manual, true))
    assert(one:set_catalogue_stale(off, true))
    assert.same({}, assert(two:reimports_due()))
    for _, suffix in ipairs { "", "-wal", "-shm" } do os.remove(path .. suffix) end
  end)

  it("a notice heard by the import itself leaves the catalogue stale, and nothing due", function()
    local uid = servers.add(store, { identifier = "docs", reimport = "auto" })
    local fake = opening()
    fake:will_stream { notice("notifications/tools/list_changed"),
      Fake.sse_result { tools = json.array { tool("a") } } }
    local report = catalogue.import(store, assert(store:server(uid)), { transport = fake, clock = fake.clock,
      log = function() end })
    assert.is_false(report.refused)
    assert.equal(1, report.imported)
    local row = assert(store:server(uid))
    assert.is_true(row.catalogue_stale)
    assert.equal(2, row.reimport_pending)
    assert.same({}, assert(store:reimports_due()))
    -- a notice from elsewhere makes it due again; a clean import clears it
    assert(store:set_catalogue_stale(uid, true))
    assert.equal(1, assert(store:server(uid)).reimport_pending)
    local again = opening():will_return { tools = json.array { tool("a") } }
    assert.is_false(catalogue.import(store, assert(store:server(uid)), { transport = again, clock = again.clock,
      log = function() end }).refused)
    assert.is_false(assert(store:server(uid)).catalogue_stale)
  end)

  it("a run re-imports only where its gate lets it reach the server; a refusal leaves it due", function()
    local uid = servers.add(store, { identifier = "docs", reimport = "auto", requires_approval = "0" })
    assert.is_false(catalogue.import(store, assert(store:server(uid)), { log = function() end,
      transport = opening():will_return { tools = json.array { tool("a") } } }).refused)
    assert(store:set_catalogue_stale(uid, true))
    local fake = opening():will_return { tools = json.array { tool("a"), tool("b") } }
    local function start(user)
      return assert(run.start(store, { user = user, configuration = LOCAL, providers = PROVIDERS,
        log = function() end,
        connect = function(row) return catalogue.connect(row, { transport = fake, clock = fake.clock }) end }))
    end
    -- remote servers are for administrators only: this run does not touch it
    local plain = start { name = "user", uid = 8, admin = false }
    plain:tools()
    assert.equal(0, #fake.requests)
    assert.equal(1, assert(store:server(uid)).reimport_pending)
    local refused = {}
    for _, row in ipairs(assert(store:governance_events())) do
      if row.tool_name == "mcp_docs:catalogue" then refused[#refused + 1] = row end
    end
    assert.equal(1, #refused)
    plain:finish()
    -- an administrator's run does, once
    local admin = start(ADMIN)
    admin:tools()
    admin:tools()
    local listed = 0
    for _, m in ipairs(fake:methods()) do if m == "tools/list" then listed = listed + 1 end end
    assert.equal(1, listed)
    assert.is_false(assert(store:server(uid)).catalogue_stale)
    assert.equal(2, assert(store:server(uid)).tool_count)
    local events = {}
    for _, e in ipairs(assert(admin:events())) do
      if e.kind == "reimport" then events[#events + 1] = e.data end
    end
    assert.equal(1, #events)
    assert.equal(2, events[1].imported)
    admin:finish()
  end)

  it("is the operator's setting: add, edit, the readout, the CLI and --json", function()
    local as_admin = { actor = ADMIN }
    local _, _, bad = operator.add(store, { identifier = "x", name = "X", url = "https://x.example/mcp",
      reimport = "sometimes" }, as_admin)
    assert.equal("invalid", bad.kind)
    assert.equal("reimport", bad.field)
    local uid = assert(operator.add(store, { identifier = "docs", name = "Docs", url = "https://docs.example/mcp" },
      as_admin))
    assert.equal("manual", assert(operator.readout(store))[1].reimport)
    assert(operator.edit(store, uid, { reimport = "auto" }, as_admin))
    assert.equal("auto", assert(store:server(uid)).reimport)
    local function main(argv) return cli.main(argv, { store = store }) end
    local code, out = main { "--json", "servers" }
    assert.equal(0, code)
    assert.equal("auto", json.decode(out)[1].reimport)
    code = main { "edit", "docs", "--reimport", "manual" }
    assert.equal(0, code)
    assert.equal("manual", assert(store:server(uid)).reimport)
    local _, text = main { "servers" }
    assert.truthy(text:find("Re%-import:%s+manual"))
    local err
    code, _, err = main { "edit", "docs", "--reimport", "often" }
    assert.equal(2, code)
    assert.truthy(err:find('"auto" or "manual"', 1, true))
    code = main { "add", "--identifier", "auto2", "--name", "A", "--url", "https://a.example/mcp", "--reimport",
      "auto" }
    assert.equal(0, code)
    for _, row in ipairs(assert(store:servers())) do
      if row.identifier == "auto2" then assert.equal("auto", row.reimport) end
    end
  end)
end)
