-- A server's sampling request during an agent run: a model call on the server's behalf. Over a
-- real stdio child (spec/support/stdio_server.lua, whose tool `ask` sends the server request and
-- answers with the client's reply): declared only when run.start has on_sampling; judged by the
-- gate as an offer "mcp_<server>:sampling" (the run's provider zone against the server's data
-- class), refused when the server needs approval (a governance row "approvalUnavailable") or the
-- run's remote budget is spent; every request an event of kind "sampling" carrying the model and
-- the tokens, never the text; a refusal answers the server with error -1.
local catalogue = require "mcpclient.agent.catalogue"
local json = require("mcpclient").json
local run = require "mcpclient.agent.run"
local sampling = require "mcpclient.agent.run.sampling"
local servers = require "support.servers"
local stdio = require "support.stdio"
local trail = require "support.trail"

local ADMIN = { name = "ops", uid = 7, admin = true }
local PROVIDERS = { ["p-local"] = { zone = "local" }, ["p-global"] = { zone = "externalGlobal" } }
local LOCAL = { identifier = "cfg", provider = "p-local", model = "m" }

local PROMPT = "SECRET-PROMPT-TEXT"
local ANSWER = "SECRET-ANSWER-TEXT"
local REQUEST = { method = "sampling/createMessage", params = { maxTokens = 40, systemPrompt = "Be brief.",
  messages = { { role = "user", content = { type = "text", text = PROMPT } } } } }

local function add_stdio(store, fields)
  local row = { identifier = "local", name = "Local", url = "", command = stdio.command("legacy"), env = stdio.env(),
    data_class = "publicContent", requires_approval = "0", enabled = true }
  for k, v in pairs(fields or {}) do row[k] = v end
  local uid = servers.add(store, row)
  local report = catalogue.import(store, assert(store:server(uid)), { now = 1, log = function() end })
  assert.is_false(report.refused, report.skip_reasons[1])
  for _, name in ipairs { "ask", "opening" } do assert(store:set_tool_enabled("mcp_local_" .. name, true)) end
  return uid
end

local function start(store, extra)
  local options = { user = ADMIN, providers = PROVIDERS, log = function() end, configuration = LOCAL }
  for k, v in pairs(extra or {}) do options[k] = v end
  return assert(run.start(store, options))
end

-- The model call a host makes: records what it was asked, answers with usage.
local function model(seen)
  return function(request)
    seen[#seen + 1] = request
    return { role = "assistant", model = "host-model-1", content = { type = "text", text = ANSWER },
      stopReason = "endTurn", usage = { input_tokens = 12, output_tokens = 5 } }
  end
end

-- The client's answer the server got, decoded from the `ask` tool's text.
local function answered(result)
  return json.decode((assert(result.text:match("^answered (.*)$"), result.text)))
end

describe("sampling in a run", function()
  local store, r
  before_each(function() store = servers.open_store() end)
  after_each(function()
    if r then r:close() end
    r = nil
    store:close()
    collectgarbage()
    collectgarbage()
    assert.same({ zombies = 0, alive = 0 }, stdio.children())
  end)

  it("is declared only when the run has on_sampling", function()
    add_stdio(store)
    r = start(store)
    assert.equal("{}", r:invoke("mcp_local_opening", {}).text)
    r:close()
    r = start(store, { on_sampling = model {} })
    assert.same({ sampling = {} }, json.decode(r:invoke("mcp_local_opening", {}).text))
  end)

  it("goes through the gate to the host's model call; audited with model and tokens, never the text", function()
    add_stdio(store)
    local seen = {}
    r = start(store, { on_sampling = model(seen) })
    local reply = answered(r:invoke("mcp_local_ask", REQUEST))
    assert.same({ role = "assistant", model = "host-model-1", content = { type = "text", text = ANSWER },
      stopReason = "endTurn" }, reply.result)
    assert.equal(1, #seen)
    assert.equal(PROMPT, seen[1].messages[1].content.text)
    assert.equal("local", seen[1].server)
    local events = trail.of_kind(r, "sampling")
    assert.equal(1, #events)
    local data = events[1].data
    assert.same({ "local", "host-model-1", 40, 12, 5, true },
      { data.server, data.model, data.maxTokens, data.tokensIn, data.tokensOut, data.allowed })
    for _, e in ipairs(assert(r:events())) do
      if e.kind == "sampling" then
        assert.is_nil(e.payload:find(PROMPT, 1, true))
        assert.is_nil(e.payload:find(ANSWER, 1, true))
      end
    end
    assert.equal(0, #store:governance_events())
  end)

  it("is refused when the server needs approval: a governance row, an event, error -1 to the server", function()
    add_stdio(store, { requires_approval = "1" })
    local seen = {}
    r = start(store, { on_sampling = model(seen) })
    local results = r:turn { { name = "mcp_local_ask", arguments = REQUEST } }
    assert.is_true(results[1].suspended)
    assert.is_true(r:approve())
    local reply = answered(r:resume()[1])
    assert.equal(-1, reply.error.code)
    assert.equal("the client refused the sampling request: the server's requests need a person's approval, which "
      .. "this request cannot wait for", reply.error.message)
    assert.equal(0, #seen)
    local rows = store:governance_events()
    assert.equal(1, #rows)
    assert.same({ "approvalUnavailable", "mcp_local:sampling" }, { rows[1].reason, rows[1].tool_name })
    local data = trail.of_kind(r, "sampling")[1].data
    assert.same({ false, "approval" }, { data.allowed, data.refused })
  end)

  it("spends the run's remote budget, and is refused once it is spent", function()
    add_stdio(store)
    local seen = {}
    r = start(store, { on_sampling = model(seen), remote_budget = 1 })
    local reply = answered(r:invoke("mcp_local_ask", REQUEST))    -- the call spent the one remote call
    assert.equal("the client refused the sampling request: the run has used its budget of remote calls",
      reply.error.message)
    assert.equal(0, #seen)
    assert.equal("budget", trail.of_kind(r, "sampling")[1].data.refused)
  end)

  it("is judged by the gate: the run's provider zone against the server's data class, refused and recorded",
    function()
      local uid = add_stdio(store, { data_class = "internalConfiguration" })
      local seen = {}
      r = start(store, { on_sampling = model(seen),
        configuration = { identifier = "cfg-g", provider = "p-global", model = "m" } })
      local answer, reason = sampling.judge(r, assert(store:server(uid)), REQUEST.params)
      assert.is_nil(answer)
      assert.equal("the host's policy does not permit it", reason)
      assert.equal(0, #seen)
      local rows = store:governance_events()
      assert.same({ "trustZone", "mcp_local:sampling", "cfg-g" },
        { rows[1].reason, rows[1].tool_name, rows[1].configuration_identifier })
      assert.equal("gate", trail.of_kind(r, "sampling")[1].data.refused)
    end)

  it("a host model call that raises is audited and answered -32603 without its words", function()
    add_stdio(store)
    local logged = {}
    r = start(store, { on_sampling = function() error("provider key sk-live-123 rejected") end,
      log = function(_, message) logged[#logged + 1] = message end })
    local reply = answered(r:invoke("mcp_local_ask", REQUEST))
    assert.same({ code = -32603, message = "the client's sampling handler failed" }, reply.error)
    -- the host learns why from its own log hook (the run's, which its connections share); the server never
    assert.truthy(table.concat(logged, "\n"):find("sk-live-123 rejected", 1, true), table.concat(logged, "\n"))
    assert.equal("failed", trail.of_kind(r, "sampling")[1].data.refused)
  end)
end)
