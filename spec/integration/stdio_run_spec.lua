-- A stdio server in an agent run: the same integration as an HTTP server. Its row (command, env,
-- data class, approval) is the operator's; its tools are imported from the running child; a call
-- goes through the policy gate, the write fence and approval, is audited as a TOOL event, and
-- stamps the server's liveness; a call the gate refuses starts no process at all.
local catalogue = require "mcpclient.agent.catalogue"
local run = require "mcpclient.agent.run"
local servers = require "support.servers"
local stdio = require "support.stdio"

local ADMIN = { name = "ops", uid = 7, admin = true }
local PROVIDERS = { ["p-local"] = { zone = "local" }, ["p-global"] = { zone = "externalGlobal" } }

local function add_stdio(store, fields)
  local row = { identifier = "local", name = "Local", url = "", command = stdio.command("legacy"), env = stdio.env(),
    data_class = "publicContent", requires_approval = "0", enabled = true }
  for k, v in pairs(fields or {}) do row[k] = v end
  local uid = servers.add(store, row)
  local report = catalogue.import(store, assert(store:server(uid)), { now = 1, log = function() end })
  assert.is_false(report.refused, report.skip_reasons[1])
  assert(store:set_tool_enabled("mcp_" .. row.identifier .. "_echo", true))
  return uid
end

local function start(store, provider, configuration)
  return assert(run.start(store, { user = ADMIN, providers = PROVIDERS, provider = provider, log = function() end,
    configuration = configuration or { identifier = "cfg", provider = "p-local", model = "m" } }))
end

describe("a stdio server in a run", function()
  local store, provider
  before_each(function() store = servers.open_store() end)
  after_each(function()
    if provider then provider.close() end
    store:close()
    collectgarbage()
    collectgarbage()
    assert.same({ zombies = 0, alive = 0 }, stdio.children())
  end)

  it("is imported from its child, called through the gate, audited, and observed", function()
    local uid = add_stdio(store)
    assert.equal(13, store:server(uid).tool_count)
    provider = catalogue.provider(store, { log = function() end })
    local r = start(store, provider)
    local result = r:invoke("mcp_local_echo", { message = "through the gate" })
    assert.same({ text = "Echo: through the gate", is_error = false }, result)
    assert.equal("completed", r:finish())
    local events = require("support.trail").of_kind(r, "tool")
    assert.equal(1, #events)
    assert.equal("mcp_local_echo", events[1].data.toolName)
    assert.equal("Echo: through the gate", events[1].data.toolResult)
    assert.is_true(store:server(uid).last_contact > 0)
  end)

  it("is refused above the trust zone's ceiling, and no process starts", function()
    add_stdio(store, { data_class = "internalConfiguration" })
    provider = catalogue.provider(store, { log = function() end })
    local r = start(store, provider, { identifier = "cfg-g", provider = "p-global", model = "m" })
    assert.equal('Error: tool "mcp_local_echo" not permitted', r:invoke("mcp_local_echo", {}).text)
    assert.equal("trustZone", store:governance_events()[1].reason)
    assert.equal(0, stdio.children().alive)
  end)

  it("waits for approval before anything reaches the child when the operator asked for it", function()
    add_stdio(store, { requires_approval = "1" })
    provider = catalogue.provider(store, { log = function() end })
    local r = start(store, provider)
    local results = r:turn { { name = "mcp_local_echo", arguments = { message = "later" } } }
    assert.is_true(results[1].suspended)
    assert.equal("waiting_approval", r.status)
    assert.equal(0, stdio.children().alive)
    assert.is_true(r:approve())
    results = r:resume()
    assert.same({ text = "Echo: later", is_error = false }, results[1])
  end)
end)
