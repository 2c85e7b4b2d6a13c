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

local events_of = require("support.trail").of_kind

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

  -- the kinds of the run's events, in sequence order, and whether the sequence is dense
  local function kinds_in_order(r)
    local kinds, dense = {}, true
    for i, e in ipairs(assert(r:events())) do
      kinds[i] = e.kind
      if e.sequence ~= i then dense = false end
    end
    return kinds, dense
  end

  local function count(list, value)
    local n = 0
    for _, v in ipairs(list) do
      if v == value then n = n + 1 end
    end
    return n
  end

  it("suspends a read the operator asked approval for; approved, it is sent once and answers through resume", function()
    servers.add(store, { identifier = "docs", data_class = "publicContent", requires_approval = "1" })
    local fake = fake_server():will_return { contents = json.array { { uri = "file:///a", text = "alpha" } } }
    local r = start(store, fake)
    local result = r:read_resource("docs", "file:///a")
    assert.is_true(result.suspended)
    assert.is_false(result.is_error)
    assert.truthy(result.text:find("waiting for approval", 1, true))
    assert.equal(0, #fake.requests) -- not even the connection
    assert.equal("waiting_approval", r.status)
    assert.equal("waiting_approval", assert(store:run(r.uid)).status)
    assert.same({ { id = "read-0-1", kind = "read", tool = "mcp_docs:resource", server = "docs", uri = "file:///a",
      needs_approval = true, reason = "approval" } }, r:pending())
    assert.has_error(function() r:read_resource("docs", "file:///b") end) -- approve or deny first
    assert.has_error(function() r:invoke("anything", {}) end)
    assert.has_error(function() r:resume() end)
    r:approve()
    local results = r:resume()
    assert.equal(1, #results)
    assert.is_false(results[1].is_error)
    assert.equal("alpha", results[1].text)
    assert.equal("running", r.status)
    assert.same({}, r:pending())
    assert.equal(1, count(fake:methods(), "resources/read"))
    local kinds, dense = kinds_in_order(r)
    assert.same({ "approval_required", "approval", "resource" }, kinds)
    assert.is_true(dense)
    local events = assert(r:events())
    assert.same({ { offerKind = "resource", server = "docs", target = "file:///a", id = "read-0-1",
      needsApproval = true, reason = "approval" } }, events[1].data.calls)
    assert.is_true(events[2].data.approved)
    assert.equal("file:///a", events[3].data.target)
    assert.is_false(events[3].data.isError)
    assert.same({}, store:governance_events())
    -- the run goes on: a second read waits again, and is read once more only when approved again
    assert.is_true(r:read_resource("docs", "file:///a").suspended)
    r:deny()
    assert.is_true(r:resume()[1].is_error)
    assert.equal(1, count(fake:methods(), "resources/read"))
    assert.equal("completed", r:finish())
  end)

  it("denied, a read sends nothing and reaches the governance log", function()
    servers.add(store, { identifier = "docs", data_class = "publicContent" }) -- the default asks for approval
    local fake = fake_server():will_return { contents = json.array { { uri = "file:///a", text = "alpha" } } }
    local r = start(store, fake)
    assert.is_true(r:read_resource("docs", "file:///a").suspended)
    r:deny()
    local result = r:resume()[1]
    assert.is_true(result.is_error)
    assert.truthy(result.text:find("not approved", 1, true))
    assert.equal(0, #fake.requests)
    local rows = store:governance_events()
    assert.equal(1, #rows)
    assert.equal("approvalDenied", rows[1].reason)
    assert.equal("mcp_docs:resource", rows[1].tool_name)
    assert.equal(r.uid, rows[1].agentrun_uid)
    local kinds, dense = kinds_in_order(r)
    assert.same({ "approval_required", "approval", "resource" }, kinds)
    assert.is_true(dense)
    local events = assert(r:events())
    assert.is_false(events[2].data.approved)
    assert.is_true(events[3].data.isError)
    assert.equal("running", r.status)
    r:finish()
  end)

  it("suspends a prompt get the same way: approved it is sent once, denied nothing is sent", function()
    servers.add(store, { identifier = "docs", data_class = "publicContent", requires_approval = "1" })
    local fake = fake_server():will_return { messages = json.array {
      { role = "user", content = { type = "text", text = "Hello Ada" } } } }
    local r = start(store, fake)
    assert.is_true(r:get_prompt("docs", "greet", { who = "Ada" }).suspended)
    assert.same({ { id = "read-0-1", kind = "prompt", tool = "mcp_docs:prompt", server = "docs", name = "greet",
      arguments = { who = "Ada" }, needs_approval = true, reason = "approval" } }, r:pending())
    r:approve()
    local result = r:resume()[1]
    assert.is_false(result.is_error)
    assert.equal("user: Hello Ada", result.text)
    assert.equal(1, count(fake:methods(), "prompts/get"))
    local sent = fake.requests[#fake.requests]
    assert.equal("greet", sent.body.params.name)
    assert.same({ who = "Ada" }, sent.body.params.arguments)
    local kinds = kinds_in_order(r)
    assert.same({ "approval_required", "approval", "prompt" }, kinds)

    assert.is_true(r:get_prompt("docs", "greet", { who = "Bob" }).suspended)
    r:deny()
    local denied = r:resume()[1]
    assert.is_true(denied.is_error)
    assert.equal(1, count(fake:methods(), "prompts/get"))
    assert.equal("approvalDenied", store:governance_events()[1].reason)
    assert.equal("mcp_docs:prompt", store:governance_events()[1].tool_name)
    kinds = kinds_in_order(r)
    assert.same({ "approval_required", "approval", "prompt", "approval_required", "approval", "prompt" }, kinds)
    r:finish()
  end)

  it("shows a pending uri under the text rule, and the gate decides again on resume", function()
    servers.add(store, { identifier = "docs", data_class = "publicContent", requires_approval = "1" })
    local fake = fake_server()
    local r = start(store, fake)
    local uri = "file:///a\27[2J\u{202E}b" .. string.rep("c", 5000)
    local waiting = r:read_resource("docs", uri)
    assert.is_true(waiting.suspended)
    assert.is_nil(waiting.text:find("\27", 1, true))
    local shown = r:pending()[1].uri
    assert.is_nil(shown:find("\27", 1, true))
    assert.is_nil(shown:find("\u{202E}", 1, true))
    assert.is_true(#shown < #uri)
    -- meanwhile the operator switched the server off: approved, the read is still not made
    assert(store.adapter:exec("UPDATE mcp_server SET enabled = 0", {}))
    r:approve()
    local result = r:resume()[1]
    assert.is_true(result.is_error)
    assert.truthy(result.text:find("no enabled MCP server", 1, true))
    assert.equal(0, #fake.requests)
    r:finish()
  end)

  it("a run waiting on a read: no take-over under a live lease; released, another holder resumes it once", function()
    servers.add(store, { identifier = "docs", data_class = "publicContent", requires_approval = "1" })
    local fake = fake_server():will_return { contents = json.array { { uri = "file:///a", text = "alpha" } } }
    local r = start(store, fake)
    assert.is_true(r:read_resource("docs", "file:///a").suspended)
    local taker = { user = ADMIN, configuration = LOCAL, providers = PROVIDERS, tools = {}, log = function() end,
      owner = "another-worker",
      connect = function(row) return catalogue.connect(row, { transport = fake, clock = fake.clock }) end }
    -- its holder's lease is live: nobody else takes it
    local other, _, err = run.take_over(store, r.uid, taker)
    assert.is_nil(other)
    assert.equal("run_lease_lost", err.kind)
    assert.equal("waiting_approval", assert(store:run(r.uid)).status)
    -- a holder that means to keep waiting renews its lease (here from an expired one)
    assert(store:update_run(r.uid, { lease_expires = os.time() - 5 }))
    assert.is_true(r:renew())
    assert.is_true(assert(store:run(r.uid)).lease_expires > os.time())
    assert.is_nil(run.take_over(store, r.uid, taker))
    -- released, it is taken over at once, waiting on the same read
    assert.is_true(r:release())
    assert.equal(run.RELEASED, r.status)
    assert.same({}, r:pending())
    other = assert(run.take_over(store, r.uid, taker))
    assert.equal(run.WAITING, other.status)
    assert.equal("another-worker", assert(store:run(r.uid)).claimed_by)
    assert.same({ { id = "read-0-1", kind = "read", tool = "mcp_docs:resource", server = "docs", uri = "file:///a",
      needs_approval = true, reason = "approval" } }, other:pending())
    -- a person decides from elsewhere; the new holder resumes with that decision, and the read is sent once
    assert.is_true(run.decide(store, r.uid, true, { by = "alice" }))
    local again, _, twice = run.decide(store, r.uid, false)
    assert.is_nil(again)
    assert.equal("invalid", twice.kind)
    assert.equal("alpha", other:resume()[1].text)
    assert.equal(1, count(fake:methods(), "resources/read"))
    -- the released holder sends nothing
    local late = r:read_resource("docs", "file:///a")
    assert.is_true(late.is_error)
    assert.equal(1, count(fake:methods(), "resources/read"))
    local approvals = events_of(other, "approval")
    assert.equal(1, #approvals)
    assert.equal("alice", approvals[1].data.by)
    assert.is_true(approvals[1].data.approved)
    local events = assert(other:events())
    for i, e in ipairs(events) do assert.equal(i, e.sequence) end
    assert.equal("completed", other:finish())
  end)

  it("a holder past its lease, once another took the run over, can neither renew, decide nor resume", function()
    servers.add(store, { identifier = "docs", data_class = "publicContent", requires_approval = "1" })
    local fake = fake_server():will_return { contents = json.array { { uri = "file:///a", text = "alpha" } } }
    local r = start(store, fake)
    assert.is_true(r:read_resource("docs", "file:///a").suspended)
    assert(store:update_run(r.uid, { lease_expires = os.time() - 5 }))
    local other = assert(run.take_over(store, r.uid, { user = ADMIN, configuration = LOCAL, providers = PROVIDERS,
      tools = {}, log = function() end, owner = "new-holder",
      connect = function(row) return catalogue.connect(row, { transport = fake, clock = fake.clock }) end }))
    local renewed, _, err = r:renew()
    assert.is_nil(renewed)
    assert.equal("run_lease_lost", err.kind)
    assert.equal(run.FAILED, r.status)
    assert.has_error(function() r:approve() end)
    assert.equal("new-holder", assert(store:run(r.uid)).claimed_by)
    assert.equal(0, #fake.requests)
    assert.is_true(other:approve())
    assert.equal("alpha", other:resume()[1].text)
    assert.equal(1, count(fake:methods(), "resources/read"))
    other:finish()
  end)

  it("a decision from the operator's command reaches the holder's resume; bad ids are refused", function()
    servers.add(store, { identifier = "docs", data_class = "publicContent", requires_approval = "1" })
    local fake = fake_server():will_return { messages = json.array {
      { role = "user", content = { type = "text", text = "Hi Ada" } } } }
    local r = start(store, fake)
    assert.is_true(r:get_prompt("docs", "greet", { who = "Ada\27[2J" }).suspended)
    local function main(argv) return require("support.cli").main(argv, { store = store }) end
    local code, out = main { "runs", "--open" }
    assert.equal(0, code)
    assert.truthy(out:find("Waiting:%s+read%-0%-1 %(needs approval%) prompt greet from docs"), out)
    assert.truthy(out:find("Decision:%s+none yet"))
    assert.is_nil(out:gsub("\n", ""):find("%c"))
    assert.equal(2, (main { "runs", "approve" }))
    assert.equal(2, (main { "runs", "approve", "x" }))
    local missing, _, said = main { "runs", "deny", "999" }
    assert.equal(1, missing)
    assert.truthy(said:find("No run has the id 999", 1, true))
    code, out = main { "runs", "approve", tostring(r.uid) }
    assert.equal(0, code)
    assert.truthy(out:find("is approved", 1, true))
    -- the holder did not decide itself: resume() applies the operator's decision, and the get is sent once
    local result = r:resume()[1]
    assert.equal("user: Hi Ada", result.text)
    assert.equal(1, count(fake:methods(), "prompts/get"))
    assert.same({ who = "Ada\27[2J" }, fake.requests[#fake.requests].body.params.arguments)
    local after
    code, after = main { "--json", "runs" }
    assert.equal(0, code)
    assert.equal(json.null, json.decode(after)[1].waiting)
    r:finish()
  end)

  it("a prompt get taken over keeps its arguments; a denied one sends nothing and is a governance row", function()
    servers.add(store, { identifier = "docs", data_class = "publicContent", requires_approval = "1" })
    local fake = fake_server():will_return { messages = json.array {
      { role = "user", content = { type = "text", text = "Hi Ada" } } } }
    local taker = { user = ADMIN, configuration = LOCAL, providers = PROVIDERS, tools = {}, log = function() end,
      owner = "taker",
      connect = function(row) return catalogue.connect(row, { transport = fake, clock = fake.clock }) end }
    local r = start(store, fake)
    assert.is_true(r:get_prompt("docs", "greet", { who = "Ada", n = "2" }).suspended)
    assert.is_true(r:release())
    local other = assert(run.take_over(store, r.uid, taker))
    assert.same({ { id = "read-0-1", kind = "prompt", tool = "mcp_docs:prompt", server = "docs", name = "greet",
      arguments = { who = "Ada", n = "2" }, needs_approval = true, reason = "approval" } },
      other:pending())
    assert.is_true(other:approve())
    assert.equal("user: Hi Ada", other:resume()[1].text)
    assert.same({ who = "Ada", n = "2" }, fake.requests[#fake.requests].body.params.arguments)
    -- suspended again, released, taken over again, denied: nothing sent, the denial in the governance log
    assert.is_true(other:get_prompt("docs", "greet", { who = "Bob" }).suspended)
    assert.is_true(other:release())
    local third = assert(run.take_over(store, r.uid, taker))
    assert.is_true(third:deny())
    local denied = third:resume()[1]
    assert.is_true(denied.is_error)
    assert.truthy(denied.text:find("not approved", 1, true))
    assert.equal(1, count(fake:methods(), "prompts/get"))
    local rows = store:governance_events()
    assert.equal("approvalDenied", rows[#rows].reason)
    assert.equal("completed", third:finish())
  end)

  it("gets a prompt as the model reads it, and names an unknown server", function()
    servers.add(store, { identifier = "docs", data_class = "publicContent", requires_approval = "0" })
    local fake = fake_server():will_return { messages = json.array {
      { role = "user", content = { type = "text", text = "Hello\27[2J Ada" } } } }
    local r = start(store, fake)
    local result = r:get_prompt("docs", "greet", { who = "Ada" })
    assert.is_false(result.is_error)
    assert.equal("user: Hello Ada", result.text) -- the escape sequence goes whole
    assert.same({ { role = "user", text = "Hello Ada" } }, result.turns)
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

  it("refuses a read of a server with no data class, as its tools are never offered: a governance row",
    function()
    servers.add(store, { identifier = "raw", data_class = "", requires_approval = "0" })
    local fake = fake_server()
    local r = start(store, fake) -- an administrator, in the local zone
    local read = r:read_resource("raw", "file:///a")
    assert.is_true(read.is_error)
    assert.truthy(read.text:find("no declared data class", 1, true), read.text)
    local prompt = r:get_prompt("raw", "greet")
    assert.is_true(prompt.is_error)
    assert.equal(0, #fake.requests)
    local rows = store:governance_events()
    assert.equal(2, #rows)
    assert.same({ "unclassified", "mcp_raw:resource" }, { rows[1].reason, rows[1].tool_name })
    assert.same({ "unclassified", "mcp_raw:prompt" }, { rows[2].reason, rows[2].tool_name })
    assert.equal(1, #events_of(r, "resource"))
    r:finish()
  end)

  it("counts reads against the remote-call budget", function()
    servers.add(store, { identifier = "docs", data_class = "publicContent", requires_approval = "0" })
    local fake = fake_server():will_return { contents = json.array { { uri = "file:///a", text = "one" } } }
    local r = start(store, fake, { remote_budget = 1 })
    assert.equal("one", r:read_resource("docs", "file:///a").text)
    local refused = r:read_resource("docs", "file:///b")
    assert.is_true(refused.is_error)
    assert.truthy(refused.text:find("budget of 1 calls", 1, true), refused.text)
    assert.equal(1, count(fake:methods(), "resources/read"))
    local none = start(store, fake_server(), { remote_budget = 0 })
    assert.truthy(none:get_prompt("docs", "greet").text:find("budget of 0 calls", 1, true))
    r:finish()
    none:finish()
  end)

  it("records a refused read of an unknown or switched-off server as a refused call: an event, a governance row",
    function()
    local off = servers.add(store, { identifier = "off", data_class = "publicContent", requires_approval = "0" })
    assert(store:update_server(off, { enabled = false }))
    local fake = fake_server()
    local r = start(store, fake)
    assert.is_true(r:read_resource("nope", "file:///a").is_error)
    assert.is_true(r:get_prompt("off", "greet").is_error)
    local rows = store:governance_events()
    assert.same({ "notRegistered", "mcp_nope:resource" }, { rows[1].reason, rows[1].tool_name })
    assert.same({ "toolDisabled", "mcp_off:prompt" }, { rows[2].reason, rows[2].tool_name })
    assert.equal("nope", events_of(r, "resource")[1].data.server)
    assert.equal("off", events_of(r, "prompt")[1].data.server)
    assert.equal(0, #fake.requests)
    r:finish()
  end)

  it("records an approved read whose server was switched off before resume as a refusal", function()
    local uid = servers.add(store, { identifier = "docs", data_class = "publicContent", requires_approval = "1" })
    local fake = fake_server()
    local r = start(store, fake)
    assert.is_true(r:read_resource("docs", "file:///a").suspended)
    assert(store:update_server(uid, { enabled = false }))
    r:approve()
    assert.is_true(r:resume()[1].is_error)
    local rows = store:governance_events()
    assert.equal(1, #rows)
    assert.same({ "toolDisabled", "mcp_docs:resource" }, { rows[1].reason, rows[1].tool_name })
    assert.equal(0, #fake.requests)
    r:finish()
  end)
end)
