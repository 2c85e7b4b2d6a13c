-- A task the server created and the client then refuses to follow (a negative poll interval, an
-- unknown status, an answer about another task, in either era): the failure names the task
-- (err.task_id and the id in the message), and the client asks the server to cancel it once, best
-- effort and within the budget, so the server does not run on with a call nobody can name or stop.
local mcp = require "mcpclient"
local Fake = require "support.fake_server"

local array = mcp.json.array

local function stamp() return os.date("!%Y-%m-%dT%H:%M:%SZ") end

local function legacy_task(status, extra)
  local t = { taskId = "t-1", status = status, createdAt = stamp(), lastUpdatedAt = stamp(), ttl = 600000,
    pollInterval = 0 }
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end

local function modern_task(status, extra)
  local t = { resultType = "task", taskId = "m-1", status = status, createdAt = stamp(), lastUpdatedAt = stamp(),
    ttlMs = 60000, pollIntervalMs = 0 }
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end


-- A 2025 server offering tasks for tools/call, with a tool that runs only as one.
local function legacy_server()
  local fake = Fake.new()
  fake:will_return({ protocolVersion = "2025-11-25", serverInfo = { name = "tasks", version = "1" },
    capabilities = { tools = {}, tasks = { requests = { tools = { call = {} } } } } }, "sess-1")
  fake:will_return { tools = array {
    { name = "long", inputSchema = { type = "object" }, execution = { taskSupport = "required" } } } }
  return fake
end

local function modern_server()
  local fake = Fake.new { modern = true }
  fake:will_return { supportedVersions = array { "2026-07-28" }, resultType = "complete",
    capabilities = { tools = {}, extensions = { ["io.modelcontextprotocol/tasks"] = {} } } }
  return fake
end

local function connect(fake, extra)
  local options = { url = "https://mcp.example.com/rpc", identifier = "tasks", health = mcp.health.discard,
    transport = fake, clock = fake.clock }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options)
end

local function requests(fake, method)
  local found = {}
  for _, r in ipairs(fake.requests) do
    if r.method == method then found[#found + 1] = r end
  end
  return found
end

-- The failure names the task, and exactly one tasks/cancel for it went out.
local function refused_and_cancelled(fake, id, message, err, detail)
  assert.equal("malformed", err.kind, message)
  assert.equal(id, err.task_id)
  assert.equal(message, err.message)
  assert.truthy(message:find(id, 1, true), message)
  assert.truthy(message:find(detail, 1, true), message)
  local cancels = requests(fake, "tasks/cancel")
  assert.equal(1, #cancels)
  assert.equal(id, cancels[1].body.params.taskId)
  return cancels[1]
end

describe("a task the client refuses to follow (2025-11-25)", function()
  local function legacy_call(answers)
    local fake = legacy_server()
    for _, a in ipairs(answers) do fake:will_return(a) end
    local conn <close> = connect(fake, { tasks = true })
    assert(conn:list_tools())
    local outcome, message, err = conn:call_tool("long", {})
    assert.is_nil(outcome)
    return fake, message, err
  end

  it("a negative poll interval at its creation: named, and cancelled under the task's session", function()
    local fake, message, err = legacy_call { { task = legacy_task("working", { pollInterval = -5 }) },
      legacy_task("cancelled") }
    local cancel = refused_and_cancelled(fake, "t-1", message, err, "poll interval")
    assert.equal("sess-1", cancel.session)
    assert.is_nil(requests(fake, "tasks/get")[1])
  end)

  it("an unknown status at its creation: named and cancelled", function()
    local fake, message, err = legacy_call { { task = legacy_task("sleeping") }, legacy_task("cancelled") }
    refused_and_cancelled(fake, "t-1", message, err, '"sleeping"')
  end)

  it("a poll answered about another task: named and cancelled by the id the client follows", function()
    local fake, message, err = legacy_call { { task = legacy_task("working") },
      legacy_task("working", { taskId = "t-2" }), legacy_task("cancelled") }
    refused_and_cancelled(fake, "t-1", message, err, "another task")
  end)

  it("a negative interval on a later poll, and an unknown status there: named and cancelled", function()
    local fake, message, err = legacy_call { { task = legacy_task("working") },
      legacy_task("working", { pollInterval = -1 }), legacy_task("cancelled") }
    refused_and_cancelled(fake, "t-1", message, err, "poll interval")
    local fake2, message2, err2 = legacy_call { { task = legacy_task("working") }, legacy_task("paused"),
      legacy_task("cancelled") }
    refused_and_cancelled(fake2, "t-1", message2, err2, '"paused"')
  end)

  it("a refused or failing cancel changes nothing: the same failure, nothing raised, nothing sent twice",
    function()
      local fake = legacy_server()
      fake:will_return { task = legacy_task("sleeping") }
      fake:will_return_rpc_error(-32603, "cannot cancel")
      local conn <close> = connect(fake, { tasks = true })
      assert(conn:list_tools())
      local _, message, err = conn:call_tool("long", {})
      refused_and_cancelled(fake, "t-1", message, err, '"sleeping"')
      -- a cancel answered with nothing usable (the queue empty) is no different
      local fake2 = legacy_server()
      fake2:will_return { task = legacy_task("working", { pollInterval = -1 }) }
      local conn2 <close> = connect(fake2, { tasks = true })
      assert(conn2:list_tools())
      local _, message2, err2 = conn2:call_tool("long", {})
      refused_and_cancelled(fake2, "t-1", message2, err2, "poll interval")
    end)

  it("no cancel once the budget is spent: the failure is not delayed past it", function()
    local fake = legacy_server()
    fake:will_return { task = legacy_task("working") }
    fake:will_return(legacy_task("working", { taskId = "t-2" }))
    fake:will_return(legacy_task("cancelled"))
    local conn <close> = connect(fake, { tasks = true })
    assert(conn:list_tools())
    -- the poll's answer arrives as the budget ends (the fake clock moves 1 s per leg from here)
    fake:take(0, 1.5)
    local _, message, err = conn:call_tool("long", {}, { budget = 1.5 })
    assert.equal("malformed", err.kind, message)
    assert.equal("t-1", err.task_id, message)
    assert.equal(0, #requests(fake, "tasks/cancel"))
  end)

  it("a task known to have ended is named, not cancelled", function()
    local fake, message, err = legacy_call { { task = legacy_task("completed") }, { content = "not a list" } }
    assert.equal("malformed", err.kind)
    assert.equal("t-1", err.task_id)
    assert.truthy(message:find("t-1", 1, true))
    assert.equal(0, #requests(fake, "tasks/cancel"))
  end)

  it("a handle followed with result() is cancelled the same way when its answers cannot be followed", function()
    local fake = Fake.new()
    fake:will_return(legacy_task("working", { taskId = "t-9" }))
    fake:will_return(legacy_task("cancelled"))
    local conn <close> = connect(fake)
    local _, message, err = conn:task({ id = "t-1", session = "sess-1", version = "2025-11-25", era = "legacy" })
      :result()
    refused_and_cancelled(fake, "t-1", message, err, "another task")
  end)

  it("every failure once the task exists names it, a transport one too", function()
    local fake = legacy_server()
    fake:will_return { task = legacy_task("working") }
    fake:will_return_raw("not json at all", 200, "application/json")
    local conn <close> = connect(fake, { tasks = true })
    assert(conn:list_tools())
    local _, message, err = conn:call_tool("long", {})
    assert.equal("t-1", err.task_id, message)
    assert.truthy(message:find("t-1", 1, true), message)
  end)

  it("a task id is shown through the text rule", function()
    local fake, message, err = legacy_call { { task = legacy_task("sleeping", { taskId = "t\27[31m-red" }) },
      legacy_task("cancelled", { taskId = "t\27[31m-red" }) }
    assert.equal("t\27[31m-red", err.task_id)
    assert.is_nil(message:find("\27", 1, true))
    assert.truthy(message:find(mcp.clip("t\27[31m-red"), 1, true), message)
    assert.equal("t\27[31m-red", requests(fake, "tasks/cancel")[1].body.params.taskId)
  end)
end)

describe("a task the client refuses to follow (2026-07-28)", function()
  local function modern_call(answers)
    local fake = modern_server()
    for _, a in ipairs(answers) do fake:will_return(a) end
    local conn <close> = connect(fake, { protocol = "2026-07-28" })
    local outcome, message, err = conn:call_tool("slow", {}, { task = true })
    assert.is_nil(outcome)
    return fake, message, err
  end

  it("a negative poll interval at its creation: named and cancelled, the extension declared", function()
    local fake, message, err = modern_call { modern_task("working", { pollIntervalMs = -100 }),
      { resultType = "complete" } }
    local cancel = refused_and_cancelled(fake, "m-1", message, err, "poll interval")
    local declared = cancel.body.params._meta["io.modelcontextprotocol/clientCapabilities"].extensions
    assert.same({}, declared["io.modelcontextprotocol/tasks"])
  end)

  it("an unknown status at its creation: named and cancelled", function()
    local fake, message, err = modern_call { modern_task("on_hold"), { resultType = "complete" } }
    refused_and_cancelled(fake, "m-1", message, err, '"on_hold"')
  end)

  it("a tasks/get answer about another task: named and cancelled", function()
    local fake, message, err = modern_call { modern_task("working"),
      modern_task("working", { resultType = "complete", taskId = "m-2" }), { resultType = "complete" } }
    refused_and_cancelled(fake, "m-1", message, err, "another task")
  end)

  it("a task waiting for input it does not name: named and cancelled", function()
    local fake, message, err = modern_call { modern_task("working"),
      modern_task("input_required", { resultType = "complete" }), { resultType = "complete" } }
    refused_and_cancelled(fake, "m-1", message, err, "names none")
  end)
end)
