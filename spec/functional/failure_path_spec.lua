-- One failure value, top to bottom: a failure made at the HTTP leg (a 502, a
-- JSON-RPC error, a cancellation) travels connection → tool → run as the very
-- same table. Each case runs one call through a run over a real (in-memory)
-- store, with spies at the connection and the tool, and asserts that what
-- conn:call_tool returned is, by identity, what Tool:execute's result and
-- run:invoke's result carry — kind, fields and message unchanged — and that
-- the model and the trail read that message.
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local policy = require "mcpclient.agent.policy"
local run = require "mcpclient.agent.run"
local tool = require "mcpclient.agent.tool"
local Fake = require "support.fake_server"
local servers = require "support.servers"

local SERVER = { identifier = "docs", name = "Docs", data_class = "publicContent", requires_approval = "0" }
local ADMIN = { name = "ops", uid = 7, admin = true }

-- A run with one remote tool over `fake`; every layer's answer is kept in `seen`.
local function rig(store, fake)
  local seen = { connection = {}, tool = {} }
  local conn = mcp.connect { url = "https://mcp.example.com/rpc", identifier = SERVER.identifier,
    transport = fake, clock = fake.clock, health = mcp.health.discard }
  local spy = setmetatable({ call_tool = function(_, ...)
    local outcome, message, err = conn:call_tool(...)
    seen.connection[#seen.connection + 1] = { outcome = outcome, message = message, err = err }
    return outcome, message, err
  end }, { __index = conn })
  local t = tool.new { server = SERVER, local_name = "mcp_docs_read_page", remote_name = "read_page",
    parameters = core.normalise_schema { type = "object", properties = {} }, connection = function() return spy end }
  local execute = t.execute
  t.execute = function(self, arguments, context)
    local result = execute(self, arguments, context)
    seen.tool[#seen.tool + 1] = result
    return result
  end
  local registry = { get = function(name) return name == t.name and t or nil end,
    names = function() return { t.name } end }
  local gate = policy.new { registry = registry, state = { tool_enabled = function() return true end } }
  local r = assert(run.start(store, { user = ADMIN, registry = registry, gate = gate, log = function() end }))
  return r, seen
end

-- The same err at every layer, and the message everywhere the failure is read.
local function assert_one_value(r, seen, result)
  assert.equal(1, #seen.connection)
  local at_connection = seen.connection[1]
  local err = at_connection.err
  assert.is_nil(at_connection.outcome)
  assert.equal(err.message, at_connection.message)
  assert.equal(err, seen.tool[1].err)           -- Tool:execute passed it on, not a copy
  assert.equal(err.message, seen.tool[1].text)
  assert.equal(err, result.err)                 -- and so did the run
  assert.equal(err.message, result.text)
  assert.is_true(result.is_error)
  local steps = assert(r:events())
  assert.equal(err.message, steps[#steps].data.toolResult)
  return err
end

describe("one failure value from the leg to the run", function()
  local store
  before_each(function() store = servers.open_store() end)
  after_each(function() store:close() end)

  it("carries an HTTP 502 unchanged", function()
    local fake = Fake.new():will_handshake():will_return_raw('{"error":"bad gateway"}', 502, "application/json")
    local r, seen = rig(store, fake)
    local err = assert_one_value(r, seen, r:invoke("mcp_docs_read_page", {}))
    assert.equal("http_status", err.kind)
    assert.equal(502, err.status)
    assert.equal("docs", err.server)
    assert.equal('MCP server "docs" answered with HTTP status 502.', err.message)
    assert.equal("running", r.status) -- a server that failed is not a failed run
    assert.is_nil(r.error)
  end)

  it("carries a JSON-RPC error unchanged", function()
    local fake = Fake.new():will_handshake():will_return_rpc_error(-32001, "the index is\27[31m rebuilding")
    local r, seen = rig(store, fake)
    local err = assert_one_value(r, seen, r:invoke("mcp_docs_read_page", {}))
    assert.equal("rpc_error", err.kind)
    assert.equal(-32001, err.rpc_code)
    assert.equal("docs", err.server)
    assert.is_nil(err.message:find("\27", 1, true)) -- the server's words, control-stripped once, at the source
    assert.truthy(err.message:find("rebuilding", 1, true), err.message)
  end)

  it("carries a cancellation in flight unchanged, and the run ends cancelled", function()
    local r
    local fake = Fake.new():will_handshake():will(function(req)
      assert(run.cancel(store, r.uid))
      local t0 = core.now()
      while not req.cancel() do
        assert(core.now() - t0 < 2, "the run's cancel hook never fired")
        core.sleep(0.001)
      end
      return nil, "cancelled", "the call was cancelled"
    end)
    local seen
    r, seen = rig(store, fake)
    local result = r:invoke("mcp_docs_read_page", {})
    local err = assert_one_value(r, seen, result)
    assert.equal("cancelled", err.kind)
    assert.is_true(err.in_flight)
    assert.equal("docs", err.server)
    assert.is_true(result.stopped)
    assert.equal("cancelled", r.status)
    assert.is_nil(r.error) -- cancelled, not failed
    assert.equal("notifications/cancelled", fake:methods()[#fake:methods()])
  end)
end)
