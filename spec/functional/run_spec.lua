-- Runs over a real SQLite store and a scripted MCP server behind the fake leg:
-- the audit trail of executed, failed and refused calls, the remote-call
-- budget, approval, the lease and the write fence, the fail-closed audit,
-- denial-only governance rows, result bounding, cancellation, and the failure
-- value a result and run.error carry.
local catalogue = require "mcpclient.agent.catalogue"
local core = require "mcpclient.core"
local run = require "mcpclient.agent.run"
local Fake = require "support.fake_server"

local json = core.json

local ADMIN = { name = "ops", uid = 7, admin = true }
local CONFIG = { identifier = "cfg-local", provider = "p-local", model = "m-1" }
local PROVIDERS = { ["p-local"] = { zone = "local" }, ["p-global"] = { zone = "externalGlobal" } }
local NOW = 1700000000

local fence = require "support.fence"
local servers = require "support.servers"
local open_store = servers.open_store

-- A server with these remote tools imported (over a fake of its own) and enabled.
local function server(store, fields, remote_names)
  local row = { identifier = "audit", name = "Audit", requires_approval = "0" }
  for k, v in pairs(fields or {}) do row[k] = v end
  local uid = servers.add(store, row)
  local entries = {}
  for i, name in ipairs(remote_names or { "read_page" }) do
    entries[i] = { name = name, description = "Reads.",
      inputSchema = { type = "object", properties = { uid = { type = "integer" } } } }
  end
  local fake = Fake.new():will_handshake():will_return { tools = json.array(entries) }
  local report = catalogue.import(store, assert(store:server(uid)), { transport = fake, clock = fake.clock, now = 1 })
  assert.is_false(report.refused)
  for _, name in ipairs(remote_names or { "read_page" }) do
    assert(store:set_tool_enabled("mcp_" .. row.identifier .. "_" .. name, true))
  end
  return uid
end

-- A run whose remote tools reach `fake`; `extra` overrides the options.
local function start(store, fake, extra)
  local options = {
    user = ADMIN, configuration = CONFIG, providers = PROVIDERS, now = function() return NOW end,
    provider = catalogue.provider(store, { transport = fake, clock = fake.clock }),
    log = function() end,
  }
  for k, v in pairs(extra or {}) do options[k] = v end
  if options.user == false then options.user = nil end -- nobody
  return assert(run.start(store, options))
end

local function text_answer(text)
  return { content = { { type = "text", text = text } } }
end

-- The leg's response to a tools/call a scripted step (Fake:will) answers itself.
local function json_answer(id, text, duration_ms)
  return { status = 200, headers = { ["content-type"] = "application/json" }, duration_ms = duration_ms,
    body = json.encode { jsonrpc = "2.0", id = id, result = text_answer(text) },
    streamed = false, stopped = false, truncated = false }
end

local function count(list, value)
  local n = 0
  for _, v in ipairs(list) do if v == value then n = n + 1 end end
  return n
end

local of_kind = require("support.trail").of_kind
local function tool_events(r) return of_kind(r, "tool") end

-- A builtin tool of the host: read-only unless told, on by default, no admin needed.
local function builtin(name, fields)
  local t = {
    name = name, group = "content", data_class = "publicContent", requires_admin = false,
    enabled_by_default = true, effect = "read_only", calls = 0,
    execute = function(self) self.calls = self.calls + 1; return { text = "builtin " .. name, is_error = false } end,
  }
  for k, v in pairs(fields or {}) do t[k] = v end
  return t
end

describe("a run and its audit trail", function()
  local store
  before_each(function() store = open_store(); server(store) end)
  after_each(function() store:close() end)

  it("records an executed remote call as a TOOL event and completes", function()
    local fake = Fake.new():will_handshake():will_return(text_answer("page 3"))
    local r = start(store, fake)
    assert.is_true(r.persisted)
    local result = r:invoke("mcp_audit_read_page", { uid = 3 })
    assert.same({ text = "page 3", is_error = false }, result)
    assert.same({ "initialize", "notifications/initialized", "tools/call" }, fake:methods())
    assert.equal("tools/call", fake.requests[3].method)
    assert.equal("read_page", fake.requests[3].body.params.name)

    local row = assert(store:run(r.uid))
    assert.equal("running", row.status)
    assert.equal("", row.fence)
    assert.equal(NOW + 900, row.lease_expires)
    assert.equal("completed", r:finish())
    assert.equal("completed", assert(store:run(r.uid)).status)

    local events = tool_events(r)
    assert.equal(1, #events)
    local data = events[1].data
    assert.equal("tool", data.kind)
    assert.equal(1, data.round)
    assert.equal("mcp_audit_read_page", data.toolName)
    assert.same({ uid = 3 }, data.toolArguments)
    assert.equal("page 3", data.toolResult)
    assert.is_false(data.toolIsError)
    assert.equal("number", type(data.durationMs))
    assert.truthy(events[1].payload:find('^{"kind":"tool","round":1,"durationMs":'))
    assert.same({}, store:governance_events())
  end)

  it("refuses a list as a remote tool's arguments: an error step the model reads, nothing sent", function()
    local fake = Fake.new():will_handshake():will_return(text_answer("never"))
    local r = start(store, fake)
    for _, args in ipairs { json.array { 3 }, json.array {}, { 3 }, { "uid", uid = 3 } } do
      local result = r:invoke("mcp_audit_read_page", args)
      assert.is_true(result.is_error)
      assert.truthy(result.text:find("takes named arguments (a JSON object), not a list", 1, true), result.text)
    end
    assert.equal(0, #fake.requests)
    assert.equal("running", r.status)
  end)

  it("refuses a write when the run row cannot be written, and sends nothing at all", function()
    assert(store.adapter:exec("DROP TABLE agent_run"))
    local fake = Fake.new():will_handshake():will_return(text_answer("never"))
    local r = start(store, fake)
    assert.is_false(r.persisted)
    assert.is_nil(r.uid)
    local result = r:invoke("mcp_audit_read_page", { uid = 3 })
    assert.is_true(result.is_error)
    assert.is_true(result.stopped)
    assert.equal('Tool "mcp_audit_read_page" declares a side effect but run (unpersisted) holds no execution '
      .. "lease; the write is refused because it cannot be fenced.", result.text)
    assert.equal("failed", r.status)
    assert.equal("write_without_durable_execution", r.error.kind)
    assert.equal(1786665601, r.error.run_code)
    assert.equal(result.text, r.error.message)
    assert.equal(r.error, result.err) -- the same value, not a copy
    assert.equal(0, #fake.requests) -- not even the handshake
    assert.same({}, fake.resolved)  -- nor a DNS lookup
    assert.equal("failed", r:finish())
    -- the run is over: later calls are not made either, and say why
    local later = r:invoke("mcp_audit_read_page", {})
    assert.is_true(later.stopped)
    assert.equal(r.error, later.err)
    assert.equal(0, #fake.requests)
  end)

  it("records a 503 as an error step of a completed run", function()
    local fake = Fake.new():will_handshake():will_return_raw('{"error":"down"}', 503)
    local r = start(store, fake)
    local result = r:invoke("mcp_audit_read_page", { uid = 3 })
    assert.is_true(result.is_error)
    assert.truthy(result.text:find("HTTP status 503", 1, true))
    assert.equal("http_status", result.err.kind)
    assert.equal(503, result.err.status)
    assert.equal("audit", result.err.server)
    assert.is_nil(result.stopped)
    assert.is_nil(r.error)
    assert.equal("completed", r:finish())
    local events = tool_events(r)
    assert.equal(1, #events)
    assert.is_true(events[1].data.toolIsError)
    assert.equal(result.text, events[1].data.toolResult)
  end)

  it("records an isError answer as an error step of a completed run", function()
    local fake = Fake.new():will_handshake()
      :will_return { isError = true, content = { { type = "text", text = "no such page" } } }
    local r = start(store, fake)
    local result = r:invoke("mcp_audit_read_page", { uid = 404 })
    assert.is_true(result.is_error)
    assert.is_nil(result.err) -- an answer of the server, not a failure
    assert.equal(1, count(fake:methods(), "tools/call"))
    assert.equal("completed", r:finish())
    assert.equal("completed", assert(store:run(r.uid)).status)
    local events = tool_events(r)
    assert.is_true(events[1].data.toolIsError)
    assert.truthy(events[1].data.toolResult:find("no such page", 1, true))
  end)
end)

describe("starting a run", function()
  local store
  before_each(function() store = open_store() end)
  after_each(function() store:close() end)

  it("inserts the row RUNNING, claimed by this process for 900 seconds", function()
    local r = assert(run.start(store, { user = ADMIN, configuration = CONFIG, tools = {},
      now = function() return NOW end }))
    local row = assert(store:run(r.uid))
    assert.equal("running", row.status)
    assert.equal(r.uuid, row.uuid)
    assert.truthy(r.uuid:match("^%x%x%x%x%x%x%x%x%-%x%x%x%x%-4%x%x%x%-[89ab]%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x$"))
    assert.truthy(row.claimed_by:match("^interactive:[^:]+:%d+$"))
    assert.is_true(#row.claimed_by <= 64)
    assert.equal(r.owner, row.claimed_by)
    assert.equal(NOW + 900, row.lease_expires)
    assert.equal("ops", row.user_name)
    assert.equal("cfg-local", row.configuration)
    assert.is_false(row.cancel_requested)
  end)

  it("raises on misuse", function()
    assert.has_error(function() run.start(store, { colour = "red" }) end)
    assert.has_error(function() run.start(store, { remote_budget = 1.5 }) end)
    assert.has_error(function() run.start(store, { registry = {}, tools = {} }) end)
    assert.has_error(function() run.start(nil, {}) end)
  end)

  it("returns the provider's failure when the catalogue cannot be read", function()
    local r, message, err = run.start(store, { provider = { tools = function() return nil, "no catalogue",
      { kind = "store" } end } })
    assert.is_nil(r)
    assert.equal("no catalogue", message)
    assert.equal("store", err.kind)
  end)
end)

describe("the call path", function()
  local store
  before_each(function() store = open_store(); server(store, nil, { "read_page", "write_page" }) end)
  after_each(function() store:close() end)

  it("answers an unknown tool without asking the gate, and records the step", function()
    local fake = Fake.new()
    local r = start(store, fake)
    assert.same({ text = 'Error: unknown tool "nope"', is_error = true }, r:invoke("nope", {}))
    assert.equal(0, #fake.requests)
    assert.same({}, store:governance_events())
    local events = tool_events(r)
    assert.equal("nope", events[1].data.toolName)
    assert.is_true(events[1].data.toolIsError)
    assert.equal("running", r.status)
  end)

  it("refuses a call the gate does not offer and writes one governance row for it", function()
    assert(store:set_tool_enabled("mcp_audit_write_page", false))
    local fake = Fake.new():will_handshake():will_return(text_answer("ok"))
    local r = start(store, fake)
    local result = r:invoke("mcp_audit_write_page", { uid = 1 })
    assert.same({ text = 'Error: tool "mcp_audit_write_page" not permitted', is_error = true }, result)
    assert.equal(0, #fake.requests)
    local rows = store:governance_events()
    assert.equal(1, #rows)
    local g = rows[1]
    assert.equal("tool_denied", g.decision)
    assert.equal("toolDisabled", g.reason)
    assert.equal(r.uuid, g.correlation_id)
    assert.equal(r.uid, g.agentrun_uid)
    assert.equal(7, g.user_uid)
    assert.equal("mcp_audit_write_page", g.tool_name)
    assert.equal("cfg-local", g.configuration_identifier)
    assert.equal("p-local", g.provider)
    assert.equal("m-1", g.model)
    assert.equal("", g.guardrail)
    assert.equal("zone=local;ceiling=secretAdjacent;observedOnly=0", g.detail)

    -- an executed call writes none
    assert.is_false(r:invoke("mcp_audit_read_page", {}).is_error)
    assert.equal(1, #store:governance_events())
    assert.equal(2, #tool_events(r))
  end)

  it("refuses a remote tool above the trust-zone ceiling even in observe mode", function()
    local uid = assert(store:server(1)).uid
    assert(store:update_server(uid, { data_class = "internalConfiguration" }))
    local fake = Fake.new()
    local r = start(store, fake, { configuration = { identifier = "cfg-g", provider = "p-global" },
      mode = " OBSERVE " })
    assert.equal('Error: tool "mcp_audit_read_page" not permitted', r:invoke("mcp_audit_read_page", {}).text)
    local g = store:governance_events()[1]
    assert.equal("trustZone", g.reason)
    assert.equal("zone=externalGlobal;ceiling=editorContent;observedOnly=0", g.detail)
    assert.equal(0, #fake.requests)
  end)

  it("offers the model what the gate allows, as tool specs", function()
    assert(store:set_tool_enabled("mcp_audit_write_page", false))
    local r = start(store, Fake.new(), { builtins = { builtin("lookup") } })
    local names = {}
    for _, spec in ipairs(r:tools()) do names[#names + 1] = spec.name end
    table.sort(names)
    assert.same({ "lookup", "mcp_audit_read_page" }, names)
    assert.same({}, store:governance_events()) -- a switched-off tool is not a candidate
    local nobody = start(store, Fake.new(), { user = false })
    local specs, why = nobody:tools()
    assert.same({}, specs)
    assert.equal("requiresAdmin", store:governance_events()[1].reason)
    -- the run says why it offers no remote tool
    assert.equal("No remote MCP tool is offered: remote tools are available to administrators only, and this "
      .. "run's user is not one.", why)
    local _, admin_why = r:tools()
    assert.is_nil(admin_why)
    -- nothing offered at all, for an administrator: the run still says why
    assert(store:set_tool_enabled("mcp_audit_read_page", false))
    local none, none_why = start(store, Fake.new()):tools()
    assert.same({}, none)
    assert.truthy(none_why:find("No tool is offered", 1, true))
  end)

  it("bounds a long answer at 50 000 bytes with the note first, in the result and the trail", function()
    local long = string.rep("x", 78000)
    local fake = Fake.new():will_handshake():will_return { content = {
      { type = "text", text = long }, { type = "image", data = "AAAA", mimeType = "image/png" } } }
    local r = start(store, fake)
    local result = r:invoke("mcp_audit_read_page", {})
    local note = "[mcpclient reads text only and dropped 1 non-text content block (image).]"
    assert.is_true(#result.text <= 50000)
    assert.equal(note, result.text:sub(1, #note))
    assert.truthy(result.text:find("truncated at 50000 bytes", 1, true))
    local stored = tool_events(r)[1].data.toolResult
    assert.equal(result.text, stored)
    assert.is_true(#stored <= 50000)
  end)

  it("turns a tool that raises into an error result", function()
    local boom = builtin("boom", { execute = function() error("kaput") end })
    local r = start(store, Fake.new(), { builtins = { boom } })
    assert.same({ text = 'Error: tool "boom" failed.', is_error = true }, r:invoke("boom", {}))
    assert.equal("running", r.status)
  end)
end)

describe("the remote-call budget", function()
  local store
  before_each(function() store = open_store(); server(store) end)
  after_each(function() store:close() end)

  it("refuses the 21st remote call of a segment, and records it", function()
    local fake = Fake.new():will_handshake()
    for i = 1, 21 do fake:will_return(text_answer("page " .. i)) end
    local r = start(store, fake)
    for i = 1, 20 do
      assert.same({ text = "page " .. i, is_error = false }, r:invoke("mcp_audit_read_page", { uid = i }))
    end
    local refused = r:invoke("mcp_audit_read_page", { uid = 21 })
    assert.same({ is_error = true, text = 'Error: this run has used its budget of 20 calls to external tools; '
      .. '"mcp_audit_read_page" was not called.' }, refused)
    assert.equal(20, count(fake:methods(), "tools/call"))
    local events = tool_events(r)
    assert.equal(21, #events)
    assert.equal(refused.text, events[21].data.toolResult)
    assert.is_true(events[21].data.toolIsError)
    assert.equal(21, events[21].data.round)
    assert.equal("running", r.status)
  end)

  it("does not count builtins", function()
    local lookup = builtin("lookup")
    local fake = Fake.new():will_handshake():will_return(text_answer("a")):will_return(text_answer("b"))
    local r = start(store, fake, { remote_budget = 1, builtins = { lookup } })
    assert.is_false(r:invoke("lookup", {}).is_error)
    assert.is_false(r:invoke("mcp_audit_read_page", {}).is_error)
    assert.is_false(r:invoke("lookup", {}).is_error)
    assert.truthy(r:invoke("mcp_audit_read_page", {}).text:find("budget of 1 calls", 1, true))
    assert.equal(2, lookup.calls)
    assert.equal(1, count(fake:methods(), "tools/call"))
  end)
end)

describe("approval", function()
  local store
  before_each(function()
    store = open_store()
    server(store)                                                 -- approval flag "0"
    server(store, { identifier = "gate", requires_approval = "1" }) -- approval-bound
  end)
  after_each(function() store:close() end)

  it("runs a turn in the model's order up to the first call that needs a person, and resumes in a fresh segment",
    function()
    -- one fake behind both servers: the "gate" connection shakes hands on its first call
    local fake = Fake.new():will_handshake():will_return(text_answer("answer 1")):will_return(text_answer("answer 2"))
      :will_handshake():will_return(text_answer("answer 3")):will_return(text_answer("answer 4"))
      :will_return(text_answer("answer 5"))
    local r = start(store, fake, { remote_budget = 3 })
    assert.is_false(r:invoke("mcp_audit_read_page", {}).is_error) -- segment 1: one of three spent
    local results = r:turn {
      { name = "mcp_audit_read_page", arguments = { uid = 1 } },
      { name = "mcp_gate_read_page", arguments = { uid = 2 } },
      { name = "nope" },
    }
    -- the call before the one that needs a person ran; it and the call after it wait
    assert.same({ text = "answer 2", is_error = false }, results[1])
    assert.is_true(results[2].suspended)
    assert.is_true(results[3].suspended)
    assert.equal(2, count(fake:methods(), "tools/call"))
    assert.equal("waiting_approval", r.status)
    assert.equal("waiting_approval", assert(store:run(r.uid)).status)
    assert.same({ { id = "call-2-2", kind = "call", tool = "mcp_gate_read_page", server = "gate",
      name = "mcp_gate_read_page", arguments = { uid = 2 }, needs_approval = true, reason = "approval" },
      { id = "call-2-3", kind = "call", tool = "nope", name = "nope", needs_approval = false,
        reason = "behind:call-2-2" } }, r:pending())
    assert.has_error(function() r:invoke("mcp_audit_read_page", {}) end)
    assert.has_error(function() r:resume() end) -- approve or deny first

    assert.is_true(r:approve())
    results = r:resume()
    assert.same({ text = "answer 2", is_error = false }, results[1])
    assert.same({ text = "answer 3", is_error = false }, results[2])
    assert.equal('Error: unknown tool "nope"', results[3].text)
    assert.equal("running", assert(store:run(r.uid)).status)
    assert.equal(3, count(fake:methods(), "tools/call")) -- nothing sent twice
    -- the resumed segment has a budget of 3 of its own: the turn spent one of it
    assert.equal("answer 4", r:invoke("mcp_audit_read_page", {}).text)
    assert.equal("answer 5", r:invoke("mcp_audit_read_page", {}).text)
    assert.truthy(r:invoke("mcp_audit_read_page", {}).text:find("budget of 3 calls", 1, true))

    local kinds = {}
    for _, e in ipairs(r:events()) do kinds[#kinds + 1] = e.kind end
    assert.same({ "tool", "tool", "approval_required", "approval", "tool", "tool", "tool", "tool", "tool" }, kinds)
    assert.same({}, store:governance_events())
    assert.equal("completed", r:finish())
  end)

  it("decides call by call: the host's tool-call ids, a denial of one that denies no other", function()
    local fake = Fake.new():will_handshake():will_return(text_answer("summed"))
    local r = start(store, fake)
    local results = r:turn {
      { id = "toolu_1", name = "mcp_gate_read_page", arguments = { uid = 1 } },
      { id = "toolu_2", name = "mcp_audit_read_page", arguments = { uid = 2 } },
    }
    assert.is_true(results[1].suspended and results[2].suspended)
    local pending = r:pending()
    assert.same({ "toolu_1", true, "approval" }, { pending[1].id, pending[1].needs_approval, pending[1].reason })
    assert.same({ "toolu_2", false, "behind:toolu_1" }, { pending[2].id, pending[2].needs_approval,
      pending[2].reason })
    assert.has_error(function() r:approve("toolu_9") end, nil) -- an unknown id is the host's misuse
    assert.has_error(function() r:deny("toolu_9", "why") end)
    assert.is_true(r:deny("toolu_1", "not today"))
    local again, message = r:deny("toolu_1")
    assert.is_nil(again)
    assert.truthy(message:find("denied already", 1, true))
    results = r:resume()
    assert.same({ text = 'Error: the call to "mcp_gate_read_page" was not approved: not today.', is_error = true },
      results[1])
    assert.same({ text = "summed", is_error = false }, results[2])
    assert.equal(1, count(fake:methods(), "tools/call"))
    local governance = store:governance_events()
    assert.equal(1, #governance)
    assert.equal("mcp_gate_read_page", governance[1].tool_name)
    assert.equal("approvalDenied", governance[1].reason)
    local decisions = {}
    for _, e in ipairs(r:events()) do
      if e.kind == "approval" then decisions[#decisions + 1] = { e.data.id, e.data.approved, e.data.reason } end
    end
    assert.same({ { "toolu_1", false, "not today" } }, decisions)
  end)

  it("approves one call, runs up to the next that needs a person, and waits again", function()
    local fake = Fake.new():will_handshake():will_return(text_answer("first")):will_handshake()
      :will_return(text_answer("third"))
    local r = start(store, fake)
    r:turn {
      { id = "a", name = "mcp_gate_read_page", arguments = { uid = 1 } },
      { id = "b", name = "mcp_gate_read_page", arguments = { uid = 2 } },
      { id = "c", name = "mcp_audit_read_page", arguments = { uid = 3 } },
    }
    local reasons = {}
    for _, p in ipairs(r:pending()) do reasons[#reasons + 1] = p.id .. "=" .. p.reason end
    assert.same({ "a=approval", "b=approval", "c=behind:a" }, reasons)
    assert.has_error(function() r:resume() end) -- "a" stopped the turn: it must be decided
    assert.is_true(r:approve("a"))
    local results = r:resume()
    assert.same({ text = "first", is_error = false }, results[1])
    assert.is_true(results[2].suspended and results[3].suspended)
    assert.equal("waiting_approval", r.status)
    reasons = {}
    for _, p in ipairs(r:pending()) do reasons[#reasons + 1] = p.id .. "=" .. p.reason end
    assert.same({ "b=approval", "c=behind:b" }, reasons)
    assert.is_true(r:deny("b"))
    results = r:resume()
    assert.same({ "first", 'Error: the call to "mcp_gate_read_page" was not approved.', "third" },
      { results[1].text, results[2].text, results[3].text })
    assert.equal(2, count(fake:methods(), "tools/call")) -- each approved call sent once, the denied one never
    assert.equal(3, #tool_events(r))
  end)

  it("takes a decision on one call from another process (run.decide with an id)", function()
    local fake = Fake.new():will_handshake():will_return(text_answer("one"))
    local r = start(store, fake)
    r:turn { { id = "x", name = "mcp_gate_read_page", arguments = {} },
      { id = "y", name = "mcp_gate_read_page", arguments = {} } }
    local ok, message = run.decide(store, r.uid, true, { id = "zz", by = "ops" })
    assert.is_nil(ok)
    assert.truthy(message:find('no step with the id "zz"', 1, true))
    assert.equal("", assert(store:run(r.uid)).approval) -- nothing changed
    assert.is_true(run.decide(store, r.uid, true, { id = "x", by = "ops" }))
    assert.is_true(run.decide(store, r.uid, false, { id = "y", by = "ops", reason = "twice is once too many" }))
    local view = run.waiting(assert(store:run(r.uid)))
    assert.same({ "approved", "denied" }, { view.steps[1].decision, view.steps[2].decision })
    assert.equal("twice is once too many", view.steps[2].denial_reason)
    local results = r:resume()
    assert.equal("one", results[1].text)
    assert.equal('Error: the call to "mcp_gate_read_page" was not approved: twice is once too many.', results[2].text)
    assert.equal(1, count(fake:methods(), "tools/call"))
    assert.equal(1, #store:governance_events())
  end)

  it("answers denied calls with an error and sends nothing", function()
    local fake = Fake.new():will_handshake():will_return(text_answer("never"))
    local r = start(store, fake)
    assert.is_true(r:invoke("mcp_gate_read_page", { uid = 1 }).suspended)
    r:deny()
    local results = r:resume()
    assert.same({ text = 'Error: the call to "mcp_gate_read_page" was not approved.', is_error = true }, results[1])
    assert.equal(0, #fake.requests)
    assert.equal("running", r.status)
    local events = tool_events(r)
    assert.equal(1, #events)
    assert.equal(results[1].text, events[1].data.toolResult)
  end)
end)

describe("a server's row as it is now", function()
  it("holds at each step: a stricter class, a new approval requirement, no class, switched off", function()
    local store = open_store()
    local uid = server(store)
    local fake = Fake.new():will_handshake():will_return(text_answer("before"))
    local r = start(store, fake, { configuration = { identifier = "cfg-global", provider = "p-global" } })
    assert.equal("before", r:invoke("mcp_audit_read_page", {}).text)

    -- reclassified mid-run beyond the zone's ceiling: the next call is refused, recorded, not sent
    assert(store:update_server(uid, { data_class = "secretAdjacent" }))
    local refused = r:invoke("mcp_audit_read_page", {})
    assert.equal('Error: tool "mcp_audit_read_page" not permitted', refused.text)
    local rows = store:governance_events()
    assert.same({ "trustZone", "zone=externalGlobal;ceiling=editorContent;observedOnly=0" },
      { rows[1].reason, rows[1].detail })

    -- back within the ceiling, and now every call needs a person
    assert(store:update_server(uid, { data_class = "publicContent", requires_approval = "1" }))
    assert.is_true(r:invoke("mcp_audit_read_page", {}).suspended)
    assert.is_true(r:pending()[1].needs_approval)
    assert(r:deny())
    r:resume()

    -- no data class: not usable, refused as its tools are never offered
    assert(store:update_server(uid, { data_class = "", requires_approval = "0" }))
    assert.is_true(r:invoke("mcp_audit_read_page", {}).is_error)
    assert(store:update_server(uid, { data_class = "publicContent", enabled = false }))
    assert.is_true(r:invoke("mcp_audit_read_page", {}).is_error)
    local reasons = {}
    for _, row in ipairs(store:governance_events()) do reasons[#reasons + 1] = row.reason end
    assert.same({ "trustZone", "approvalDenied", "unclassified", "toolDisabled" }, reasons)
    assert.equal(1, count(fake:methods(), "tools/call"))

    -- what the next turn is offered follows the row too, each withheld tool a governance row
    local function offered()
      local names = {}
      for _, spec in ipairs(r:tools()) do names[#names + 1] = spec.name end
      return names
    end
    assert(store:update_server(uid, { enabled = true }))
    assert.same({ "mcp_audit_read_page" }, offered())
    assert(store:update_server(uid, { data_class = "secretAdjacent" }))
    assert.same({}, offered())
    assert(store:update_server(uid, { data_class = "" }))
    assert.same({}, offered())
    assert(store:update_server(uid, { data_class = "publicContent", enabled = false }))
    assert.same({}, offered())
    reasons = {}
    for _, row in ipairs(store:governance_events()) do reasons[#reasons + 1] = row.reason end
    assert.same({ "trustZone", "approvalDenied", "unclassified", "toolDisabled", "trustZone", "unclassified",
      "toolDisabled" }, reasons)
    r:finish()
    store:close()
  end)
end)

describe("a resource_link a tool returned", function()
  it("is read from the server that returned it; another server only when the host names it", function()
    local store = open_store()
    server(store)
    server(store, { identifier = "other" })
    local fake = Fake.new():will_handshake():will_return { content = { { type = "text", text = "see the doc" },
      { type = "resource_link", uri = "file:///doc", name = "doc" } } }
    local asked = {}
    local function reads_of(text)
      return Fake.new():will_return({ protocolVersion = "2025-11-25", capabilities = { resources = {} },
        serverInfo = { name = "Reads", version = "1" } }):will_return { contents = json.array {
        { uri = "file:///doc", text = text } } }
    end
    local r = start(store, fake, { connect = function(row)
      asked[#asked + 1] = row.identifier
      local docs = reads_of("from " .. row.identifier)
      return catalogue.connect(row, { transport = docs, clock = docs.clock })
    end })
    assert.truthy(r:invoke("mcp_audit_read_page", {}).text:find("file:///doc", 1, true))
    assert.equal("from audit", r:read_resource(nil, "file:///doc").text)
    local unknown = r:read_resource(nil, "file:///elsewhere")
    assert.is_true(unknown.is_error)
    assert.truthy(unknown.text:find("no tool of this run returned a link", 1, true))
    -- refused as a read of an unknown server is: a governance row, an event
    assert.same({ "notRegistered", "mcp_?:resource" }, { store:governance_events()[1].reason,
      store:governance_events()[1].tool_name })
    local resources = {}
    for _, e in ipairs(r:events()) do
      if e.kind == "resource" then resources[#resources + 1] = e.data.target .. " " .. tostring(e.data.isError) end
    end
    assert.same({ "file:///doc false", "file:///elsewhere true" }, resources)
    assert.equal("from other", r:read_resource("other", "file:///doc").text) -- the host's explicit choice
    assert.same({ "audit", "other" }, asked)
    assert.has_error(function() r:read_resource(false, "file:///doc") end)
    r:finish()
    store:close()
  end)
end)

describe("run.take_over names the run", function()
  it("by its uid as `mcpclient runs` prints it (an integer, or the same as text) and by its UUID", function()
    local store = open_store()
    server(store, { identifier = "gate", requires_approval = "1" })
    local fake = Fake.new():will_handshake():will_return(text_answer("done"))
    local r = start(store, Fake.new())
    assert.is_true(r:turn { { id = "k", name = "mcp_gate_read_page", arguments = {} } }[1].suspended)
    assert.is_true(r:release())
    local function taker(owner)
      return { user = ADMIN, configuration = CONFIG, providers = PROVIDERS, now = function() return NOW end,
        provider = catalogue.provider(store, { transport = fake, clock = fake.clock }), log = function() end,
        owner = owner, tasks = false }
    end
    local by_text = assert(run.take_over(store, tostring(r.uid), taker("a")))
    assert.equal(r.uid, by_text.uid)
    assert.equal("k", by_text:pending()[1].id)
    assert.is_true(by_text:release())
    local by_uuid = assert(run.take_over(store, r.uuid, taker("b")))
    assert.equal(r.uid, by_uuid.uid)
    assert.is_true(by_uuid:approve("k"))
    assert.equal("done", by_uuid:resume()[1].text)
    local none, message = run.take_over(store, "00000000-0000-4000-8000-000000000000", taker("c"))
    assert.is_nil(none)
    assert.truthy(message:find("no run has that UUID", 1, true))
    assert.has_error(function() run.take_over(store, {}, taker("d")) end)
    assert.has_error(function() run.take_over(store, "", taker("d")) end)
    assert.has_error(function() run.take_over(store, 0, taker("d")) end)
    store:close()
  end)
end)

describe("the operator's commands on a waiting run", function()
  local cli = require "support.cli"

  it("list what waits (`runs --waiting`) and decide one step or the batch; an unknown run or id changes nothing",
    function()
    local store = open_store()
    server(store)
    server(store, { identifier = "ev", requires_approval = "1" }, { "get-sum" })
    local fake = Fake.new():will_handshake():will_return(text_answer("graph")):will_handshake()
      :will_return(text_answer("42"))
    local r = start(store, fake)
    r:turn { { id = "t1", name = "mcp_ev_get-sum", arguments = { a = 1 } },
      { id = "t2", name = "mcp_audit_read_page", arguments = { uid = 1 } } }
    local function main(argv) return cli.main(argv, { store = store }) end

    local code, out = main { "runs", "--waiting" }
    assert.equal(0, code)
    assert.truthy(out:find("t1 (needs approval) call mcp_ev_get-sum", 1, true), out)
    assert.truthy(out:find("\n            t2 (behind t1) call mcp_audit_read_page", 1, true), out)
    code, out = main { "--json", "runs", "--waiting" }
    assert.equal(0, code)
    local listed = json.decode(out)
    assert.equal(1, #listed)
    assert.same({ "t1", true, "approval" }, { listed[1].waiting.steps[1].id, listed[1].waiting.steps[1].needs_approval,
      listed[1].waiting.steps[1].reason })
    assert.same({ "t2", false, "behind:t1" }, { listed[1].waiting.steps[2].id,
      listed[1].waiting.steps[2].needs_approval, listed[1].waiting.steps[2].reason })
    local row_before = assert(store:run(r.uid))
    local events_before = #assert(store:events(r.uid))

    -- refused, nothing changed: an unknown step id, an unknown run, a reason on approve
    code = main { "approve", tostring(r.uid), "t9" }
    assert.equal(1, code)
    code = main { "deny", "99999", "t1", "--reason", "no" }
    assert.equal(1, code)
    assert.not_equal(0, main { "approve", tostring(r.uid), "t1", "--reason", "x" })
    local row_after = assert(store:run(r.uid))
    assert.same({ row_before.approval, row_before.pending_steps }, { row_after.approval, row_after.pending_steps })
    assert.equal(events_before, #assert(store:events(r.uid)))

    code, out = main { "runs", "deny", tostring(r.uid), "t1", "--reason", "the sum is wrong" }
    assert.equal(0, code, out)
    assert.truthy(out:find("step t1 is denied", 1, true), out)
    code, out = main { "runs", "--waiting" }
    assert.equal(0, code)
    assert.truthy(out:find("t1 (needs approval, denied: the sum is wrong)", 1, true), out)
    assert.equal(1, main { "deny", tostring(r.uid), "t1" }) -- the first decision on a step holds

    local results = r:resume()
    assert.equal('Error: the call to "mcp_ev_get-sum" was not approved: the sum is wrong.', results[1].text)
    assert.equal("graph", results[2].text)
    code, out = main { "runs", "--waiting" }
    assert.equal(0, code)
    assert.equal("No run waits for a person.\n", out)
    local kinds = {}
    for _, e in ipairs(r:events()) do
      if e.kind == "approval" then kinds[#kinds + 1] = e.data.id .. ":" .. tostring(e.data.approved) end
    end
    assert.same({ "t1:false" }, kinds)
    assert.equal("approvalDenied", store:governance_events()[1].reason)
    store:close()
  end)
end)

describe("a turn's state", function()
  it("lives in the run, not in the result tables the caller was handed", function()
    local store = open_store()
    server(store, { identifier = "gate", requires_approval = "1" })
    local fake = Fake.new():will_handshake():will_return(text_answer("approved and done"))
    local r = start(store, fake)
    local results = r:turn { { name = "mcp_gate_read_page", arguments = { uid = 1 } }, { name = "nope" } }
    assert.is_true(results[1].suspended)
    -- a host that scribbles on what it was given steers nothing
    results[1].suspended, results[1].stopped, results[2].recorded = nil, true, true
    assert.same({ "mcp_gate_read_page", "nope" }, { r:pending()[1].name, r:pending()[2].name })
    r:approve()
    local resumed = r:resume()
    assert.same({ text = "approved and done", is_error = false }, resumed[1])
    assert.equal('Error: unknown tool "nope"', resumed[2].text)
    assert.is_nil(resumed[2].recorded)
    assert.equal(2, #tool_events(r)) -- the refusal once, the executed call once
    store:close()
  end)
end)

describe("a run left waiting for approval", function()
  it("completes without its pending calls", function()
    local store = open_store()
    server(store, { identifier = "gate", requires_approval = "1" })
    local fake = Fake.new()
    local r = start(store, fake)
    assert.is_true(r:invoke("mcp_gate_read_page", {}).suspended)
    assert.equal("completed", r:finish())
    assert.equal("completed", assert(store:run(r.uid)).status)
    assert.same({}, r:pending())
    assert.has_error(function() r:approve() end)
    assert.equal(0, #fake.requests)
    store:close()
  end)
end)

describe("the lease and the fence", function()
  local store
  before_each(function() store = open_store(); server(store) end)
  after_each(function() store:close() end)

  -- A scripted tools/call answer that looks at the run row while the call is on the wire.
  local function answer_observing(seen, r)
    return function(_, record)
      seen[#seen + 1] = assert(store:run(r().uid))
      return json_answer(record.id, "seen", 1)
    end
  end

  it("after a resource read, the fence names the sequence the next call's step takes", function()
    local seen, current = {}, nil
    local fake = Fake.new():will_handshake():will(answer_observing(seen, function() return current end))
    local docs = Fake.new():will_return({ protocolVersion = "2025-11-25", capabilities = { tools = {}, resources = {} },
      serverInfo = { name = "Audit", version = "1" } })
    docs:will_return { contents = json.array { { uri = "a:1", text = "a" } } }
    current = start(store, fake, { connect = function(row)
      return catalogue.connect(row, { transport = docs, clock = docs.clock })
    end })
    assert.is_false(current:read_resource("audit", "a:1").is_error)
    assert.equal("seen", current:invoke("mcp_audit_read_page", {}).text)
    assert.same({ fence.entry("mcp_audit_read_page", {}, 2) }, fence.entries(seen[1].fence))
    local events = assert(current:events())
    assert.same({ "resource", "tool" }, { events[1].kind, events[2].kind })
    assert.same({ 1, 2 }, { events[1].sequence, events[2].sequence })
    current:finish()
  end)

  it("stamps the pending effect before the call is sent and clears it afterwards", function()
    local seen, current = {}, nil
    local fake = Fake.new():will_handshake():will(answer_observing(seen, function() return current end))
    local clock = NOW
    current = start(store, fake, { now = function() return clock end })
    clock = NOW + 60
    assert.equal("seen", current:invoke("mcp_audit_read_page", {}).text)
    -- the fence names the call: its tool, its arguments' digest and the audit sequence its step takes
    assert.same({ fence.entry("mcp_audit_read_page", {}, 1) }, fence.entries(seen[1].fence))
    assert.equal(NOW + 60 + 900, seen[1].lease_expires)
    local row = assert(store:run(current.uid))
    assert.equal("", row.fence)
    assert.equal("running", row.status)
  end)

  it("keeps its lease while a call waits longer than the lease, so nobody takes over a live run", function()
    local wall, mono = NOW, 0
    local r
    local observed = {}
    local slow = builtin("slow_wait", { execute = function(_, _, context)
      -- twenty 100 s waits (2 000 s, over two leases of 900 s), the cancel flag read at each
      for _ = 1, 20 do
        wall, mono = wall + 100, mono + 1
        assert.is_false(context.cancel())
        local row = assert(store:run(r.uid))
        observed[#observed + 1] = { now = wall, lease_expires = row.lease_expires }
        assert.equal(0, store:claim_run(r.uid, "worker:elsewhere:1", wall + 900, wall))
      end
      return { text = "waited", is_error = false }
    end })
    r = start(store, Fake.new(), { builtins = { slow }, now = function() return wall end,
      clock = function() return mono end })
    assert.equal("waited", r:invoke("slow_wait", {}).text)
    for _, seen in ipairs(observed) do
      assert.is_true(seen.lease_expires - seen.now >= 450, "the lease ran low at " .. seen.now)
    end
    assert.equal(NOW + 500 + 900, observed[5].lease_expires) -- renewed once half of it had passed
    local row = assert(store:run(r.uid))
    assert.equal(r.owner, row.claimed_by)
    assert.equal(wall + 900, row.lease_expires)
  end)

  it("stops the next write when another owner has taken the row, before anything is sent", function()
    local fake = Fake.new():will_handshake():will_return(text_answer("one")):will_return(text_answer("two"))
    local r = start(store, fake)
    assert.equal("one", r:invoke("mcp_audit_read_page", {}).text)
    assert(store:update_run(r.uid, { claimed_by = "worker:elsewhere:1" }))
    local result = r:invoke("mcp_audit_read_page", {})
    assert.is_true(result.is_error)
    assert.is_true(result.stopped)
    assert.equal(1, count(fake:methods(), "tools/call"))
    assert.equal("failed", r.status)
    assert.equal("run_lease_lost", r.error.kind)
    assert.equal(0, r.error.run_code)
    assert.equal(r.error, result.err)
    assert.truthy(result.err.message:find('lost its execution lease; "mcp_audit_read_page" was not called', 1, true),
      result.err.message)
    local row = assert(store:run(r.uid))
    assert.equal("running", row.status) -- the row is the new owner's: left alone
    assert.equal("worker:elsewhere:1", row.claimed_by)
    assert.equal("", row.fence)
    assert.equal(1, #tool_events(r))
  end)

  it("lets a read-only builtin run in an unpersisted run, and keeps its trail in memory", function()
    assert(store.adapter:exec("DROP TABLE agent_run"))
    local r = start(store, Fake.new(), { builtins = { builtin("lookup") } })
    assert.same({ text = "builtin lookup", is_error = false }, r:invoke("lookup", { q = "x" }))
    assert.equal("running", r.status)
    local events = assert(r:events())
    assert.equal(1, #events)
    assert.equal("lookup", events[1].data.toolName)
    assert.equal("completed", r:finish())
  end)
end)

describe("the fail-closed audit", function()
  local store
  before_each(function() store = open_store(); server(store) end)
  after_each(function() store:close() end)

  it("fails the run when the step of an executed write cannot be stored", function()
    local fake = Fake.new():will_handshake():will_return(text_answer("written"))
    local r = start(store, fake)
    assert(store.adapter:exec("DROP TABLE agent_run_event"))
    local result = r:invoke("mcp_audit_read_page", {})
    assert.equal(1, count(fake:methods(), "tools/call"))
    assert.is_true(result.is_error)
    assert.is_true(result.stopped)
    assert.equal("failed", r.status)
    assert.equal("audit_persistence_failed", r.error.kind)
    assert.equal(1785000001, r.error.run_code)
    assert.equal(r.error, result.err)
    assert.equal("store", r.error.store_error.kind) -- what the store said, kept as it was
    local row = assert(store:run(r.uid))
    assert.equal("failed", row.status)
    -- the effect happened, its record is missing: the fence names it
    assert.same({ fence.entry("mcp_audit_read_page", {}, 1) }, fence.entries(row.fence))
    assert.equal("failed", r:finish())
  end)

  it("lets a read-only step whose record fails pass", function()
    local r = start(store, Fake.new(), { builtins = { builtin("lookup") } })
    assert(store.adapter:exec("DROP TABLE agent_run_event"))
    assert.same({ text = "builtin lookup", is_error = false }, r:invoke("lookup", {}))
    assert.equal("running", r.status)
    assert.equal("running", assert(store:run(r.uid)).status)
  end)
end)

describe("cancellation", function()
  local store
  before_each(function() store = open_store(); server(store) end)
  after_each(function() store:close() end)

  -- A tools/call that stays on the wire until the cancel hook fires: `flip` is
  -- called once the call is out; the time from then to the hook firing is kept.
  local function hanging(flip, timing)
    return function(req)
      flip()
      local t0 = core.now()
      while core.now() - t0 < 2 do
        if req.cancel() then
          timing.latency = core.now() - t0
          return nil, "cancelled", "the call was cancelled"
        end
        core.sleep(0.001)
      end
      return nil, "timeout", "never cancelled"
    end
  end

  it("aborts an in-flight call within 50 ms of the persisted flag, tells the server, records it", function()
    local timing, r = {}, nil
    local fake = Fake.new():will_handshake():will(hanging(function() assert(run.cancel(store, r.uid)) end, timing))
    r = start(store, fake)
    local result = r:invoke("mcp_audit_read_page", { uid = 3 })
    assert.is_true(timing.latency < 0.05, "noticed after " .. tostring(timing.latency))
    assert.is_true(result.is_error)
    assert.is_true(result.stopped)
    assert.truthy(result.text:find("cancelled in flight", 1, true))
    assert.truthy(result.text:find("may already have acted", 1, true))
    assert.equal("cancelled", result.err.kind) -- the leg's value, read directly: no flag to rediscover it
    assert.is_true(result.err.in_flight)
    assert.equal("audit", result.err.server)
    assert.equal(result.err.message, result.text)
    assert.is_nil(r.error) -- a cancelled run has not failed
    assert.same({ "initialize", "notifications/initialized", "tools/call", "notifications/cancelled" },
      fake:methods())
    assert.equal(fake.requests[3].id, fake.requests[4].body.params.requestId)
    assert.equal("cancelled", r.status)
    local row = assert(store:run(r.uid))
    assert.equal("cancelled", row.status)
    assert.equal("", row.fence)
    local events = tool_events(r)
    assert.equal(1, #events)
    assert.is_true(events[1].data.toolIsError)
    assert.equal(result.text, events[1].data.toolResult)
    -- never retried, and the run makes no further calls
    assert.is_true(r:invoke("mcp_audit_read_page", {}).stopped)
    assert.equal(1, count(fake:methods(), "tools/call"))
    assert.equal("cancelled", r:finish())
  end)

  it("reads the persisted flag at most once per 10 ms while polling", function()
    local real = store
    local reads = 0
    local counting = setmetatable({ run = function(_, uid) reads = reads + 1; return real:run(uid) end },
      { __index = real })
    local fake = Fake.new():will_handshake():will(function(req, record)
      local t0 = core.now()
      while core.now() - t0 < 0.2 do
        assert.is_false(req.cancel())
        core.sleep(0.001)
      end
      return json_answer(record.id, "done", 200)
    end)
    local r = start(counting, fake, { provider = catalogue.provider(real, { transport = fake, clock = fake.clock }) })
    assert.equal("done", r:invoke("mcp_audit_read_page", {}).text)
    assert.is_true(reads <= 0.2 / run.CANCEL_POLL_SECONDS + 3, reads .. " reads")
    assert.is_true(reads >= 10, reads .. " reads")
  end)

  it("does not send a call whose run was cancelled before it", function()
    local fake = Fake.new():will_handshake():will_return(text_answer("never"))
    local r = start(store, fake)
    assert(run.cancel(store, r.uid))
    local result = r:invoke("mcp_audit_read_page", {})
    assert.is_true(result.stopped)
    assert.equal(0, #fake.requests)
    assert.equal("cancelled", r.status)
    assert.equal("cancelled", assert(store:run(r.uid)).status)
    assert.equal(0, #tool_events(r))
  end)
end)

describe("input a server asks for during a run", function()
  local store
  before_each(function() store = open_store(); server(store) end)
  after_each(function() store:close() end)

  it("records each answered round as an input event, naming how it was answered, never what", function()
    local discovered = { supportedVersions = json.array { "2026-07-28" }, capabilities = { tools = {} },
      resultType = "complete" }
    local fake = Fake.new { modern = true }:will_return(discovered):will_return {
      resultType = "input_required", requestState = "s1",
      inputRequests = { pin = { method = "elicitation/create", params = { message = "PIN?", requestedSchema = {
        type = "object", properties = { pin = { type = "string" } } } } } },
    }:will_return { content = { { type = "text", text = "page 3" } }, resultType = "complete" }
    local r = start(store, fake, { provider = catalogue.provider(store, { transport = fake, clock = fake.clock,
      on_elicitation = function() return { action = "accept", content = { pin = "SECRET-PIN-4711" } } end }) })
    assert.same({ text = "page 3", is_error = false }, r:invoke("mcp_audit_read_page", { uid = 3 }))
    local input
    for _, e in ipairs(assert(r:events())) do
      if e.kind == "input" then input = e end
      assert.is_nil(e.payload:find("SECRET-PIN-4711", 1, true), e.payload)
    end
    assert.equal("mcp_audit_read_page", input.data.toolName)
    assert.equal(1, input.data.inputRound)
    assert.same({ pin = "accept" }, input.data.answers)
    assert.equal(1, #tool_events(r))
    assert.same({ "server/discover", "tools/call", "tools/call" }, fake:methods())
  end)
end)
