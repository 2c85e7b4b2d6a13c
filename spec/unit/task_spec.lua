-- Tasks in the 2025-11-25 era over the scripted server: what the client sends (params.task only
-- when the host asked, the tool allows and the server offers it), how it follows a task
-- (tasks/get at the server's interval, tasks/result at the end), and every bad answer refused.
local mcp = require "mcpclient"
local Fake = require "support.fake_server"

local array = mcp.json.array

local function task(status, extra)
  local t = { taskId = "t-1", status = status, createdAt = os.date("!%Y-%m-%dT%H:%M:%SZ"),
    lastUpdatedAt = os.date("!%Y-%m-%dT%H:%M:%SZ"), ttl = 600000, pollInterval = 0 }
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end

local function text(t) return { content = array { { type = "text", text = t } } } end

-- A 2025 server that offers tasks for tools/call, with one required and one forbidden tool listed.
local function server(tasks_capability)
  local fake = Fake.new()
  fake:will_return({ protocolVersion = "2025-11-25", serverInfo = { name = "tasks", version = "1" },
    capabilities = { tools = {}, tasks = tasks_capability == nil and { requests = { tools = { call = {} } } }
      or tasks_capability } }, "sess-1")
  fake:will_return { tools = array {
    { name = "long", inputSchema = { type = "object" }, execution = { taskSupport = "required" } },
    { name = "quick", inputSchema = { type = "object" }, execution = { taskSupport = "forbidden" } },
    { name = "either", inputSchema = { type = "object" }, execution = { taskSupport = "optional" } },
  } }
  return fake
end

local function connect(fake, extra)
  local options = { url = "https://mcp.example.com/rpc", identifier = "tasks", health = mcp.health.discard,
    transport = fake, clock = fake.clock }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options)
end

local function request(fake, method, nth)
  local seen = 0
  for _, r in ipairs(fake.requests) do
    if r.method == method then
      seen = seen + 1
      if seen == (nth or 1) then return r end
    end
  end
end

describe("tasks (2025-11-25)", function()
  it("a required tool goes as a task, polled with tasks/get, its outcome read with tasks/result", function()
    local fake = server()
    fake:will_return { task = task("working") }
    fake:will_return(task("working"))
    fake:will_return(task("completed"))
    fake:will_return(text("done"))
    local conn <close> = connect(fake, { tasks = true })
    assert(conn:list_tools())
    local seen = {}
    local outcome = assert(conn:call_tool("long", {}, { on_task = function(h) seen[#seen + 1] = h.status end }))
    assert.equal("done", outcome.text)
    assert.same({ "initialize", "notifications/initialized", "tools/list", "tools/call", "tasks/get", "tasks/get",
      "tasks/result" }, fake:methods())
    assert.same({}, request(fake, "tools/call").body.params.task)
    assert.equal("t-1", request(fake, "tasks/get").body.params.taskId)
    assert.equal("sess-1", request(fake, "tasks/result").session)
    assert.same({ "working", "completed" }, seen)
  end)

  it("nothing is augmented unless the host asked, the tool allows it, and the server offers it", function()
    local fake = server()
    fake:will_return(text("plain"))
    fake:will_return(text("forbidden"))
    fake:will_return(text("optional, not asked"))
    local conn <close> = connect(fake)
    assert(conn:list_tools())
    assert(conn:call_tool("long", {}))                 -- not asked: the server's answer stands
    assert(conn:call_tool("quick", {}, { task = true })) -- forbidden by the tool
    assert.is_nil(request(fake, "tools/call", 1).body.params.task)
    assert.is_nil(request(fake, "tools/call", 2).body.params.task)
    local none = server(false)
    none:will_return(text("no tasks here"))
    local c <close> = connect(none, { tasks = true })
    assert(c:list_tools())
    assert.equal("no tasks here", assert(c:call_tool("long", {})).text)
    assert.is_nil(request(none, "tools/call").body.params.task)
  end)

  it("a task-required tool called without task = true: the server's refusal points to the option", function()
    local fake = server()
    fake:will_return_rpc_error(-32601, "Tool long requires task augmentation (taskSupport: 'required')")
    local conn <close> = connect(fake)
    assert(conn:list_tools())
    local outcome, message, err = conn:call_tool("long", {})
    assert.is_nil(outcome)
    assert.equal("rpc_error", err.kind)
    assert.equal(-32601, err.rpc_code)
    assert.truthy(message:find("call it with task = true (or tasks = true on connect)", 1, true), message)
    assert.truthy(message:find("requires task augmentation", 1, true), message)
  end)

  it("an optional tool goes as a task only when the call asks; detach returns the handle", function()
    local fake = server()
    fake:will_return(text("at once"))
    fake:will_return { task = task("working", { pollInterval = 2500 }) }
    local conn <close> = connect(fake, { tasks = true })
    assert(conn:list_tools())
    assert.equal("at once", assert(conn:call_tool("either", {})).text)
    assert.is_nil(request(fake, "tools/call", 1).body.params.task)
    local before_call = os.time()
    local handle = assert(conn:call_tool("either", {}, { task = true, detach = true }))
    assert.same({}, request(fake, "tools/call", 2).body.params.task)
    assert.equal("t-1", handle.id)
    assert.equal("working", handle.status)
    assert.equal(2500, handle.poll_ms)
    assert.equal("sess-1", handle.session)
    assert.equal("legacy", handle.era)
    -- counted from the creation on this machine's clock, plus the ttl of 600 s
    assert.is_true(handle.expires_at >= before_call + 600 and handle.expires_at <= os.time() + 600)
  end)

  it("status notifications reach on_task; only the polls move the handle", function()
    local fake = server()
    fake:will_return { task = task("working") }
    fake:will_stream { 'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/tasks/status","params":'
      .. mcp.json.encode(task("completed")) .. '}\n\n',
      Fake.sse_result(task("completed")) }
    fake:will_return(text("notified"))
    local conn <close> = connect(fake, { tasks = true })
    assert(conn:list_tools())
    local seen = {}
    assert.equal("notified", assert(conn:call_tool("long", {}, { on_task = function(h)
      seen[#seen + 1] = h.status
    end })).text)
    assert.same({ "working", "completed" }, seen)
  end)

  it("refuses a status going back, an answer about another task, and a result of the wrong shape", function()
    local fake = Fake.new()
    fake:will_return(task("completed"))
    fake:will_return(task("working"))
    fake:will_return(task("working", { taskId = "t-2" }))
    local conn <close> = connect(fake)
    local t = conn:task { id = "t-1", session = "sess-1", version = "2025-11-25", era = "legacy" }
    assert.equal("completed", assert(t:status()).status)
    local _, message, err = t:status()
    assert.equal("malformed", err.kind)
    assert.truthy(message:find("went back from completed to working", 1, true))
    local other = conn:task { id = "t-1", session = "sess-1", version = "2025-11-25", era = "legacy" }
    local _, about = other:status()
    assert.truthy(about:find("another task", 1, true))

    local shapes = server()
    shapes:will_return { task = task("working") }
    shapes:will_return(task("completed"))
    shapes:will_return { content = "not a list" }
    local c <close> = connect(shapes, { tasks = true })
    assert(c:list_tools())
    local _, shape_message, shape_err = c:call_tool("long", {})
    assert.equal("malformed", shape_err.kind)
    assert.truthy(shape_message:find("content is not an array", 1, true))
  end)

  it("refuses a task answer of the wrong shape, and an unknown status", function()
    local fake = server()
    fake:will_return { task = { taskId = "t-1", status = "sleeping" } }
    fake:will_return(task("cancelled"))  -- the task it named and the client refused is asked to be cancelled
    fake:will_return { task = { status = "working" } }
    local conn <close> = connect(fake, { tasks = true })
    assert(conn:list_tools())
    local _, message, err = conn:call_tool("long", {})
    assert.equal("malformed", err.kind)
    assert.truthy(message:find('"sleeping"', 1, true))
    local _, no_id = conn:call_tool("long", {})
    assert.truthy(no_id:find("no usable taskId", 1, true))
  end)

  it("a failed task whose result is a JSON-RPC error is kind task; cancelled is kind task too", function()
    local fake = server()
    fake:will_return { task = task("failed") }
    fake:will_return_rpc_error(-32000, "the job broke")
    fake:will_return { task = task("cancelled") }
    local conn <close> = connect(fake, { tasks = true })
    assert(conn:list_tools())
    local _, message, err = conn:call_tool("long", {})
    assert.equal("task", err.kind)
    assert.equal("failed", err.reason)
    assert.equal(-32000, err.rpc_code)
    assert.truthy(message:find("the job broke", 1, true))
    local _, _, cancelled = conn:call_tool("long", {})
    assert.equal("cancelled", cancelled.reason)
  end)

  it("a wake-up past the budget (a loaded machine) still ends the follow as a timeout, not a refusal to ask",
    function()
      local fake = server()
      fake:will_return { task = task("working") }
      for _ = 1, 50 do fake:will_return(task("working")) end
      -- a clock four times as fast as the sleeps: each 0.05 s wait between polls costs 0.2 s of
      -- the budget, so the poll that found 0.1 s left wakes with none
      local real = mcp.now
      local c <close> = connect(fake, { tasks = true, clock = function() return real() * 4 end })
      assert(c:list_tools())
      local _, message, err = c:call_tool("long", {}, { budget = 0.3 })
      assert.equal("timeout", err.kind, message)
      assert.equal("t-1", err.task_id)
    end)

  it("the budget ends a task that stays working: a timeout naming the task, polled at the floor at most",
    function()
      local fake = server()
      fake:will_return { task = task("working") }
      for _ = 1, 50 do fake:will_return(task("working")) end
      -- the fake clock stands still: the budget is spent by the real sleeps between polls
      local real = mcp.now
      local c <close> = connect(fake, { tasks = true, clock = real })
      assert(c:list_tools())
      local started = real()
      local _, message, err = c:call_tool("long", {}, { budget = 0.3 })
      assert.equal("timeout", err.kind)
      assert.equal("t-1", err.task_id)
      assert.truthy(message:find("handle stays valid", 1, true))
      local gets = 0
      for _, r in ipairs(fake.requests) do if r.method == "tasks/get" then gets = gets + 1 end end
      -- a zero interval is floored to 0.05 s: no more than 0.3 / 0.05 polls
      assert.is_true(gets <= 6, gets .. " polls")
      assert.is_true(real() - started >= 0.29)
    end)

  it("an unknown id is kind task, and an expired handle is not asked at all", function()
    local fake = Fake.new()
    fake:will_return_rpc_error(-32602, "Task not found")
    local conn <close> = connect(fake)
    local _, message, err = conn:task { id = "gone", session = "sess-1", version = "2025-11-25" }:status()
    assert.equal("task", err.kind)
    assert.equal("unknown", err.reason)
    assert.truthy(message:find("gone", 1, true))
    local before = #fake.requests
    local _, _, expired = conn:task { id = "old", session = "sess-1", expires_at = os.time() - 1 }:result()
    assert.equal("expired", expired.reason)
    assert.equal(before, #fake.requests)
  end)

  describe("over a channel that is not HTTP (one message per line, as stdio)", function()
    local FakeChannel = require "support.fake_channel"

    it("follows a 2025 task the same way", function()
      local fake = server()
      fake:will_return { task = task("working") }
      fake:will_return(task("completed"))
      fake:will_return(text("over lines"))
      local conn <close> = mcp.connect { url = "https://mcp.example.com/rpc", identifier = "lines",
        health = mcp.health.discard, channel = FakeChannel.new(fake), clock = fake.clock, tasks = true }
      assert(conn:list_tools())
      assert.equal("over lines", assert(conn:call_tool("long", {})).text)
      assert.same({ "initialize", "notifications/initialized", "tools/list", "tools/call", "tasks/get",
        "tasks/result" }, fake:methods())
    end)

    it("follows a 2026-07-28 task the same way, the extension declared in the envelope", function()
      local fake = Fake.new { modern = true }
      fake:will_return { supportedVersions = array { "2026-07-28" }, resultType = "complete",
        capabilities = { tools = {}, extensions = { ["io.modelcontextprotocol/tasks"] = {} } } }
      fake:will_return { resultType = "task", taskId = "m-1", status = "working", ttlMs = 60000, pollIntervalMs = 0,
        createdAt = os.date("!%Y-%m-%dT%H:%M:%SZ"), lastUpdatedAt = os.date("!%Y-%m-%dT%H:%M:%SZ") }
      fake:will_return { resultType = "complete", taskId = "m-1", status = "completed", ttlMs = 60000,
        result = text("modern over lines") }
      local conn <close> = mcp.connect { url = "https://mcp.example.com/rpc", identifier = "lines",
        health = mcp.health.discard, channel = FakeChannel.new(fake), clock = fake.clock, protocol = "2026-07-28" }
      assert.equal("modern over lines", assert(conn:call_tool("slow", {}, { task = true })).text)
      local call = request(fake, "tools/call").body.params
      local declared = call._meta["io.modelcontextprotocol/clientCapabilities"].extensions
      assert.same({}, declared["io.modelcontextprotocol/tasks"])
      local get = request(fake, "tasks/get").body.params
      assert.equal("m-1", get.taskId)
      assert.is_table(get._meta["io.modelcontextprotocol/clientCapabilities"].extensions)
    end)
  end)
end)
