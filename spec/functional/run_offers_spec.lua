-- A run reads a resource or gets a prompt only through the gate: the server's operator-set data
-- class against the configuration's zone, administrators only, approval where the operator
-- asked for it; each read an event of the run with its latency, each refusal a governance row,
-- the text bounded as a tool result. Over a real store and a scripted server.
local catalogue = require "mcpclient.agent.catalogue"
local core = require "mcpclient.core"
local run = require "mcpclient.agent.run"
local Fake = require "support.fake_server"
local servers = require "support.servers"

local json = core.json

local ADMIN = { name = "ops", uid = 7, admin = true }
local LOCAL = { identifier = "cfg-local", provider = "p-local", model = "m-1" }
local GLOBAL = { identifier = "cfg-global", provider = "p-global", model = "m-2" }
local PROVIDERS = { ["p-local"] = { zone = "local" }, ["p-global"] = { zone = "externalGlobal" } }

local CAPS = { tools = {}, resources = {}, prompts = {} }

-- The server's opening with resources and prompts advertised.
local function fake_server()
  return Fake.new():will_return({ protocolVersion = "2025-11-25", capabilities = CAPS,
    serverInfo = { name = "Docs", version = "1" } })
end

local function start(store, fake, extra)
  local options = {
    user = ADMIN, configuration = LOCAL, providers = PROVIDERS, tools = {}, log = function() end,
    connect = function(row) return catalogue.connect(row, { transport = fake, clock = fake.clock }) end,
  }
  for k, v in pairs(extra or {}) do options[k] = v end
  if options.user == false then options.user = nil end
  return assert(run.start(store, options))
end

local function events_of(r, kind)
  local out = {}
  for _, e in ipairs(assert(r:events())) do
    if e.kind == kind then out[#out + 1] = e end
  end
  return out
end

describe("a run's resource reads and prompt gets", function()
  local store
  before_each(function() store = servers.open_store() end)
  after_each(function() store:close() end)

  it("reads a resource through the gate, bounded, recorded with its latency", function()
    servers.add(store, { identifier = "docs", data_class = "sourceCode", requires_approval = "0" })
    local big = string.rep("y", 70000)
    local fake = fake_server():will_return { contents = json.array { { uri = "file:///a", text = big } } }
    fake:take(0, 0, 0.125)
    local r = start(store, fake)
    local result = r:read_resource("docs", "file:///a")
    assert.is_false(result.is_error)
    assert.is_true(#result.text <= 50000)
    local events = events_of(r, "resource")
    assert.equal(1, #events)
    assert.equal("docs", events[1].data.server)
    assert.equal("file:///a", events[1].data.target)
    assert.is_false(events[1].data.isError)
    assert.same({}, store:governance_events())
    r:finish()
  end)

  it("refuses a read the trust zone does not permit: nothing sent, a governance row, an event", function()
    servers.add(store, { identifier = "docs", data_class = "sourceCode", requires_approval = "0" })
    local fake = fake_server()
    local r = start(store, fake, { configuration = GLOBAL })
    local result = r:read_resource("docs", "file:///secret")
    assert.is_true(result.is_error)
    assert.truthy(result.text:find("not permitted", 1, true))
    assert.equal(0, #fake.requests)
    local rows = store:governance_events()
    assert.equal(1, #rows)
    assert.equal("trustZone", rows[1].reason)
    assert.equal("mcp_docs:resource", rows[1].tool_name)
    assert.equal(1, #events_of(r, "resource"))
    r:finish()
  end)

  it("stops the run closed when a refusal cannot be recorded", function()
    servers.add(store, { identifier = "docs", data_class = "sourceCode", requires_approval = "0" })
    local fake = fake_server()
    local r = start(store, fake, { configuration = GLOBAL })
    store.insert_governance_event = function() return nil, "the disk is full" end
    local result = r:read_resource("docs", "file:///secret")
    assert.is_true(result.is_error)
    assert.equal("audit_persistence_failed", result.err.kind)
    assert.equal("failed", r.status)
    assert.equal(0, #fake.requests)
    store.insert_governance_event = nil
  end)

  it("refuses a user who is not an administrator, as for remote tools", function()
    servers.add(store, { identifier = "docs", data_class = "publicContent", requires_approval = "0" })
    local fake = fake_server()
    local r = start(store, fake, { user = false })
    local result = r:get_prompt("docs", "greet", { who = "Ada" })
    assert.is_true(result.is_error)
    assert.equal(0, #fake.requests)
    assert.equal("requiresAdmin", store:governance_events()[1].reason)
    r:finish()
  end)

  it("does not read from a server whose operator asked for approval", function()
    servers.add(store, { identifier = "docs", data_class = "publicContent", requires_approval = "1" })
    local fake = fake_server()
    local r = start(store, fake)
    local result = r:read_resource("docs", "file:///a")
    assert.is_true(result.is_error)
    assert.truthy(result.text:find("approval", 1, true))
    assert.equal(0, #fake.requests)
    r:finish()
  end)

  it("gets a prompt as the model reads it, and names an unknown server", function()
    servers.add(store, { identifier = "docs", data_class = "publicContent", requires_approval = "0" })
    local fake = fake_server():will_return { messages = json.array {
      { role = "user", content = { type = "text", text = "Hello\27[2J Ada" } } } }
    local r = start(store, fake)
    local result = r:get_prompt("docs", "greet", { who = "Ada" })
    assert.is_false(result.is_error)
    assert.equal("user: Hello\27[2J Ada", result.text)
    assert.equal("prompts/get", fake.requests[#fake.requests].method)
    local events = events_of(r, "prompt")
    assert.equal("greet", events[1].data.target)
    local unknown = r:read_resource("nope", "file:///a")
    assert.is_true(unknown.is_error)
    assert.truthy(unknown.text:find('"nope"', 1, true))
    r:finish()
  end)

  it("passes the server's failure value on, sent once", function()
    servers.add(store, { identifier = "docs", data_class = "publicContent", requires_approval = "0" })
    local fake = fake_server():will_return_rpc_error(-32002, "Resource not found")
    local r = start(store, fake)
    local result = r:read_resource("docs", "file:///gone")
    assert.is_true(result.is_error)
    assert.equal(-32002, result.err.rpc_code)
    r:finish()
    assert.has_error(function() r:read_resource("docs", 1) end)
  end)
end)
